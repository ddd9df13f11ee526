"""``speechpack build lhotse``: manifests prepared with Lhotse's own API (``Recording.from_file``,
``SupervisionSegment``, ``CutSet.to_file``, ``to_shar``) from the real librivox, ALSA and codec2 recordings, packed
into asr and sources packs whose audio is compared with the files; each refused input named by file, line and
key."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner
from lhotse import (AudioSource, CutSet, NumpyFilesWriter, Recording, RecordingSet, SupervisionSegment,
                    SupervisionSet)

from speechpack.cli import main
from factories.lhotse_cuts import stored, transcribed_cut, transcripts
from speechpack.loader import open_pack
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.constants import KIND_ASR, KIND_SOURCES, STREAM_AUDIO, STREAM_SOURCE, STREAM_TEXT


def stereo_file(paths: list[str], out: str) -> np.ndarray:
    """Two real clips as the channels of one PCM_16 WAV (cropped to the shorter): ``[2, T]`` int16 written."""
    first, second = (soundfile.read(p, dtype="int16")[0] for p in paths[:2])
    frames = min(len(first), len(second))
    data = np.stack([first[:frames], second[:frames]])
    soundfile.write(out, data.T, 16000, subtype="PCM_16")
    return data


def index_records(pack_dir) -> list[dict]:
    return json.loads((pack_dir / "shard-000000" / "index.json").read_text())["samples"]


def run(*args: str):
    return CliRunner().invoke(main, ["build", "lhotse", *args, "--no-progress"])


def test_cuts_to_asr_pack_spans_channels_custom_fields(tmp_path, real_audio):
    clips = real_audio("pocketsphinx")
    texts = transcripts(clips)
    stereo = stereo_file(clips, str(tmp_path / "stereo.wav"))
    cuts = [transcribed_cut(clips[0], texts[os.path.basename(clips[0])[:-4]], session="s1"),
            transcribed_cut(str(tmp_path / "stereo.wav"), "two channels", speaker=None),
            # a span of a longer recording, as Lhotse's truncate makes it
            transcribed_cut(clips[1], "the span", language="French").truncate(offset=0.5, duration=1.25)
            .with_id("span")]
    cuts[2].supervisions = [SupervisionSegment(id="span", recording_id=cuts[2].recording_id, start=0.0,
                                                 duration=1.25, text="the span", language="French",
                                                 speaker="narrator", gender="f")]
    with NumpyFilesWriter(str(tmp_path / "arrays")) as writer:  # an array manifest: dropped (a pack stores audio)
        cuts[0].custom = {"origin": "test", "embedding": writer.store_array(cuts[0].id, np.zeros(4, np.float32))}
    manifest = tmp_path / "austen_cuts_train.jsonl.gz"
    CutSet.from_cuts(cuts).to_file(str(manifest))

    result = run("--cuts", str(manifest), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 0, result.output
    pack = open_pack(str(tmp_path / "pack"))
    assert pack.kind == KIND_ASR
    assert pack.keys.tolist() == [cuts[0].id, cuts[1].id, "span"]
    assert pack.speakers.tolist() == ["narrator", "unknown", "narrator"]
    assert pack.attrs["language"].tolist() == ["English", "English", "French"]
    assert pack.attrs["corpus"].tolist() == ["austen"] * 3  # from the recipe's file name
    original = soundfile.read(clips[0], dtype="int16")[0]
    np.testing.assert_array_equal(stored(pack, STREAM_AUDIO, 0)[0], original)
    np.testing.assert_array_equal(stored(pack, STREAM_AUDIO, 1), stereo)  # every channel kept
    span = soundfile.read(clips[1], dtype="int16")[0][8000:8000 + 20000]
    np.testing.assert_array_equal(stored(pack, STREAM_AUDIO, 2)[0], span)
    assert bytes(pack.sample(0).data[STREAM_TEXT]).decode() == texts[os.path.basename(clips[0])[:-4]]
    records = index_records(tmp_path / "pack")
    assert records[0]["provenance"]["extra"] == {"cut": {"origin": "test"},
                                                 "supervision": {"custom": {"session": "s1"}}}
    assert records[2]["provenance"]["lhotse"] == {"cut_id": "span", "recording_id": cuts[2].recording_id,
                                                  "start": 0.5, "duration": 1.25, "channels": 1,
                                                  "sources": [clips[1]]}
    assert records[2]["provenance"]["extra"] == {"supervision": {"gender": "f"}}
    assert validate_pack(str(tmp_path / "pack")).ok


def test_recordings_and_supervisions_give_one_sample_per_supervision(tmp_path, real_audio):
    """Supervisions cut from a long 8 kHz recording (resampled to 16 kHz exactly as ``build asr-jsonl`` does) and
    from a recording whose two channels are two files."""
    long_path = real_audio("codec2")[4]  # morig.wav, 2 s at 8 kHz
    clips = real_audio("pocketsphinx", 2)
    long = Recording.from_file(long_path, recording_id="long")
    channels = [Recording.from_file(p) for p in clips]
    frames = min(r.num_samples for r in channels)
    two_files = Recording(id="two-files", sampling_rate=16000, num_samples=frames, duration=frames / 16000,
                          sources=[AudioSource(type="file", channels=[0], source=clips[0]),
                                   AudioSource(type="file", channels=[1], source=clips[1])])
    RecordingSet.from_recordings([long, two_files]).to_file(str(tmp_path / "recordings.jsonl.gz"))
    supervisions = [SupervisionSegment("a", "long", 0.25, 1.0, text="first", speaker="m", language="en"),
                    SupervisionSegment("b", "long", 1.25, 0.5, text="second", speaker="m", language="en"),
                    SupervisionSegment("c", "two-files", 0.0, 2.0, text="both", speaker="n", language="en")]
    SupervisionSet.from_segments(supervisions).to_file(str(tmp_path / "supervisions.jsonl"))

    result = run("--recordings", str(tmp_path / "recordings.jsonl.gz"), "--supervisions",
                 str(tmp_path / "supervisions.jsonl"), "--corpus", "codec2", "--out", str(tmp_path / "pack"))
    assert result.exit_code == 0, result.output
    pack = open_pack(str(tmp_path / "pack"))
    assert pack.keys.tolist() == ["a", "b", "c"]
    assert pack.num_frames.tolist() == [16000, 8000, 32000]
    assert pack.orig_sample_rate.tolist() == [8000, 8000, 16000]
    both = np.stack([soundfile.read(p, dtype="int16")[0][:32000] for p in clips])
    np.testing.assert_array_equal(stored(pack, STREAM_AUDIO, 2), both)

    # the same spans through build asr-jsonl: the same resampled bytes
    (tmp_path / "spans.jsonl").write_text("".join(json.dumps(
        {"key": k, "audio_filepath": long_path, "text": "x", "language": "en", "corpus": "c", "offset": o,
         "duration": d}) + "\n" for k, o, d in (("a", 0.25, 1.0), ("b", 1.25, 0.5))))
    reference = CliRunner().invoke(main, ["build", "asr-jsonl", "--list", str(tmp_path / "spans.jsonl"), "--out",
                                          str(tmp_path / "ref"), "--no-progress"])
    assert reference.exit_code == 0, reference.output
    ref = open_pack(str(tmp_path / "ref"))
    for i in range(2):
        np.testing.assert_array_equal(stored(pack, STREAM_AUDIO, i), stored(ref, STREAM_AUDIO, i))


def test_shar_directory_in_memory_audio(tmp_path, real_audio):
    clips = real_audio("pocketsphinx", 3)
    texts = transcripts(clips)
    cuts = CutSet.from_cuts(transcribed_cut(p, texts[os.path.basename(p)[:-4]], corpus="librivox") for p in clips)
    (tmp_path / "shar").mkdir()
    cuts.to_shar(str(tmp_path / "shar"), fields={"recording": "flac"}, shard_size=2)

    result = run("--shar", str(tmp_path / "shar"), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 0, result.output
    pack = open_pack(str(tmp_path / "pack"))
    assert pack.keys.tolist() == [c.id for c in cuts]
    assert pack.attrs["corpus"].tolist() == ["librivox"] * 3  # the supervision's custom.corpus
    for i, path in enumerate(clips):
        np.testing.assert_array_equal(stored(pack, STREAM_AUDIO, i)[0], soundfile.read(path, dtype="int16")[0])
    record = index_records(tmp_path / "pack")[0]
    assert record["provenance"]["lhotse"]["sources"] == ["<memory>"]
    assert "extra" not in record["provenance"]  # Lhotse's shard bookkeeping and the corpus are not extras
    assert pack.manifest.provenance["input"]["path"] == str(tmp_path / "shar")


def test_untranscribed_single_speaker_cuts_make_a_sources_pack(tmp_path, real_audio):
    """ALSA's 48 kHz prompts (one voice), resampled to 16 kHz: the input of online mixing."""
    paths = real_audio("alsa", 3)
    cuts = []
    for path in paths:
        cut = Recording.from_file(path).to_cut()
        cut.supervisions = [SupervisionSegment(cut.id, cut.recording_id, 0.0, cut.duration, speaker="alsa-voice")]
        cuts.append(cut)
    padded = cuts[0].pad(duration=2.0).with_id("padded")  # a MixedCut: the recording, then Lhotse's padding
    CutSet.from_cuts([*cuts, padded]).to_file(str(tmp_path / "cuts.jsonl"))
    result = run("--cuts", str(tmp_path / "cuts.jsonl"), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 0, result.output
    pack = open_pack(str(tmp_path / "pack"))
    assert pack.kind == KIND_SOURCES
    assert pack.speakers.tolist() == ["alsa-voice"] * 4
    assert pack.num_frames[3] == 32000
    np.testing.assert_array_equal(stored(pack, STREAM_SOURCE, 3)[0, :pack.num_frames[0] - 16],
                                  stored(pack, STREAM_SOURCE, 0)[0, :pack.num_frames[0] - 16])
    assert not stored(pack, STREAM_SOURCE, 3)[0, pack.num_frames[0] + 16:].any()
    for i, path in enumerate(paths):
        audio, rate = soundfile.read(path, dtype="float32")
        assert rate == 48000 and pack.num_frames[i] == round(len(audio) / 3)
        decoded = pack.sample(i).targets[0]
        assert abs(float(np.sqrt(np.mean(decoded ** 2))) / float(np.sqrt(np.mean(audio ** 2))) - 1) < 0.02
    assert stored(pack, STREAM_SOURCE, 0).shape[0] == 1


def _line(cut) -> str:
    return json.dumps(cut.to_dict())


def test_bad_cuts_are_reported_together_by_file_line_and_key(tmp_path, real_audio):
    clips = real_audio("pocketsphinx", 3)
    good = transcribed_cut(clips[0], "fine")
    url = transcribed_cut(clips[1], "remote").with_id("remote")
    url.recording.sources[0] = AudioSource(type="url", channels=[0], source="https://example.org/a.wav")
    command = transcribed_cut(clips[1], "piped").with_id("piped")
    command.recording.sources[0] = AudioSource(type="command", channels=[0], source="sox a.wav -t wav -")
    missing = transcribed_cut(clips[1], "gone").with_id("gone")
    missing.recording.sources[0] = AudioSource(type="file", channels=[0], source=str(tmp_path / "gone.wav"))
    two = transcribed_cut(clips[2], "two").with_id("two")
    two.supervisions = two.supervisions * 2
    untranscribed = transcribed_cut(clips[2], None).with_id("silent")
    nolang = transcribed_cut(clips[2], "x", language=None).with_id("nolang")
    lines = [_line(good), "{not json", json.dumps({"id": "broken", "type": "MonoCut"}), _line(good),
             _line(url), _line(command), _line(missing), _line(two),
             _line(untranscribed), _line(nolang)]
    manifest = tmp_path / "cuts.jsonl.gz"
    with gzip.open(manifest, "wt", encoding="utf-8") as fp:
        fp.write("\n".join(lines) + "\n")
    result = run("--cuts", str(manifest), "--corpus", "c", "--out", str(tmp_path / "pack"))
    assert result.exit_code == 1
    out = result.output
    assert "line 2: file " in out and "cuts.jsonl.gz: not valid JSON" in out and "key None" not in out
    assert "line 3: key 'broken'" in out and "not a Lhotse cut" in out
    assert "line 4: key" in out and "duplicate id (first on line 1)" in out
    assert "line 5: key 'remote'" in out and "https://example.org/a.wav" in out and "from a URL" in out
    assert "line 6: key 'piped'" in out and "shell command" in out
    assert f"line 7: key 'gone', file {tmp_path / 'gone.wav'}" in out and "file not found" in out
    assert "line 8: key 'two'" in out and "2 supervisions" in out
    assert "line 9: key 'silent'" in out and "supervisions[0].text: missing" in out
    assert "line 10: key 'nolang'" in out and "give --language" in out
    assert f"file {manifest}" in out  # problems of a manifest line name the manifest
    assert not (tmp_path / "pack").exists()


def test_refused_inputs_and_options(tmp_path, real_audio):
    clips = real_audio("pocketsphinx", 2)
    stereo_file(clips, str(tmp_path / "stereo.wav"))
    two_speakers = Recording.from_file(clips[0]).to_cut()
    two_speakers.supervisions = [SupervisionSegment("x1", two_speakers.recording_id, 0, 1, speaker="a"),
                                 SupervisionSegment("x2", two_speakers.recording_id, 1, 1, speaker="b")]
    stereo = Recording.from_file(str(tmp_path / "stereo.wav")).to_cut()
    stereo.supervisions = [SupervisionSegment("s", stereo.recording_id, 0, 1, speaker="a")]
    CutSet.from_cuts([two_speakers, stereo]).to_file(str(tmp_path / "cuts.jsonl"))
    result = run("--cuts", str(tmp_path / "cuts.jsonl"), "--kind", "sources", "--out", str(tmp_path / "p"))
    assert result.exit_code == 1
    assert f"line 1: key '{two_speakers.id}'" in result.output and "name 2 (a, b)" in result.output
    assert f"line 2: key '{stereo.id}'" in result.output and "mono: the cut has 2 channels" in result.output

    # a supervision of a recording the recordings manifest lacks, and one past its recording's end
    RecordingSet.from_recordings([Recording.from_file(clips[0], recording_id="r")]).to_file(
        str(tmp_path / "r.jsonl"))
    SupervisionSet.from_segments([SupervisionSegment("a", "nope", 0, 1, text="x", language="en"),
                                  SupervisionSegment("b", "r", 5, 60, text="x", language="en")]).to_file(
        str(tmp_path / "s.jsonl"))
    result = run("--recordings", str(tmp_path / "r.jsonl"), "--supervisions", str(tmp_path / "s.jsonl"),
                 "--corpus", "c", "--out", str(tmp_path / "p"))
    assert result.exit_code == 1
    assert "line 1: key 'a'" in result.output and "recording_id 'nope' is not in" in result.output
    assert "line 2: key 'b'" in result.output and "outside recording 'r'" in result.output

    assert run("--out", str(tmp_path / "p")).exit_code == 2  # no input
    both = run("--cuts", str(tmp_path / "cuts.jsonl"), "--shar", str(tmp_path), "--out", str(tmp_path / "p"))
    assert both.exit_code == 2 and "exactly one input" in both.output
    alone = run("--recordings", str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "p"))
    assert alone.exit_code == 2 and "--recordings and --supervisions go together" in alone.output
    (tmp_path / "cuts.json").write_text("[]")
    other = run("--cuts", str(tmp_path / "cuts.json"), "--out", str(tmp_path / "p"))
    assert other.exit_code == 1 and "JSON lines" in other.output
    not_shar = run("--shar", str(tmp_path), "--out", str(tmp_path / "p"))
    assert not_shar.exit_code == 1 and "not a Lhotse Shar directory" in not_shar.output


def test_undecodable_audio_is_a_problem_of_its_cut_and_skip_bad_packs_the_rest(tmp_path, real_audio):
    clips = real_audio("pocketsphinx", 2)
    (tmp_path / "garbage.wav").write_bytes(open(clips[1], "rb").read()[:44] + b"\x00" * 10)  # header promises more
    good = transcribed_cut(clips[0], "fine", corpus="c")
    bad = transcribed_cut(clips[1], "broken", corpus="c").with_id("broken")
    bad.recording.sources[0] = AudioSource(type="file", channels=[0], source=str(tmp_path / "garbage.wav"))
    CutSet.from_cuts([good, bad]).to_file(str(tmp_path / "cuts.jsonl.gz"))
    failed = run("--cuts", str(tmp_path / "cuts.jsonl.gz"), "--out", str(tmp_path / "pack"))
    assert failed.exit_code == 1
    assert f"line 2: key 'broken', file {tmp_path / 'garbage.wav'}" in failed.output
    assert "Lhotse could not load cut 'broken'" in failed.output
    assert not (tmp_path / "pack").exists()
    skipped = run("--cuts", str(tmp_path / "cuts.jsonl.gz"), "--skip-bad", "--out", str(tmp_path / "pack"))
    assert skipped.exit_code == 0, skipped.output
    assert open_pack(str(tmp_path / "pack")).keys.tolist() == [good.id]
    record, = json.loads((tmp_path / "pack" / "skipped.json").read_text())["skipped"]
    assert record["key"] == "broken" and record["line"] == 2


def test_shar_without_its_audio_is_refused(tmp_path, real_audio):
    cut = transcribed_cut(real_audio("pocketsphinx", 1)[0], "x", corpus="c")
    (tmp_path / "shar").mkdir()
    with pytest.warns(UserWarning, match="not specified for Shar writing"):  # Lhotse's own warning: no audio kept
        CutSet.from_cuts([cut]).to_shar(str(tmp_path / "shar"), fields={})
    result = run("--shar", str(tmp_path / "shar"), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 1 and "shard 000000 has no recording.000000.tar" in result.output
