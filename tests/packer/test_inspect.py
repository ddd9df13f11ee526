"""``speechpack inspect``: the figures of known packs built from real recordings, as text, JSON and a PNG."""

from __future__ import annotations

import builtins
import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from speechpack.cli import main
from factories import Mix, Source, missing_recording
from speechpack.packer.audio import StoredAudio
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.inspect import LEVEL_RANGE_DBFS, distribution, inspect_pack
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.packer.build.writer import PackWriter
from speechpack.schemas.constants import FACE_SHAPE, KIND_ASD, KIND_ASR

TRANSCRIPTION = "/usr/share/pocketsphinx/test/data/librivox/transcription"


@pytest.fixture
def known_pack(tmp_path, wesep_list, real_audio):
    """Three real 16 kHz mixtures of 1.5, 2.0 and 1.0 s over four LibriVox speakers, in two shards, with an
    enrollment cue (by speaker) for two of the four speakers."""
    a, b, c, d = real_audio("pocketsphinx", 4)
    case = wesep_list([Mix("m1", (a, b), seconds=1.5), Mix("m2", (b, c), seconds=2.0),
                       Mix("m3", (a, d), seconds=1.0)])
    speakers = sorted({s for line in case.lines for s in line.speakers})
    enrollment = tmp_path / "enroll.wav"
    soundfile.write(enrollment, soundfile.read(a, frames=8000)[0], 16000, subtype="PCM_16")
    (tmp_path / "audio.json").write_text(json.dumps({speakers[0]: [{"path": str(enrollment)}],
                                                     speakers[1]: [{"path": str(enrollment)}]}))
    cues = tmp_path / "cues.yaml"
    cues.write_text(f"cues:\n  audio: {{guaranteed: false, policy: {{type: random, key: spk_id, "
                    f"resource: {tmp_path / 'audio.json'}}}}}\n")
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=200_000, progress=False), cues=str(cues))
    return out, case, speakers


def test_figures_of_a_known_pack(known_pack):
    out, case, speakers = known_pack
    figures = inspect_pack(str(out), top=2).figures
    assert figures["pack"]["kind"] == "tse" and figures["pack"]["samples"] == 3
    assert figures["pack"]["hours"] == pytest.approx(4.5 / 3600)
    durations = figures["durations_s"]
    assert (durations["p0"], durations["p50"], durations["p100"]) == pytest.approx((1.0, 1.5, 2.0))
    assert sum(durations["histogram"]["counts"]) == 3

    # Hours per speaker: a mixture's duration counts for each of its speakers.
    expected = {}
    for line in case.lines:
        for speaker in line.speakers:
            expected[speaker] = expected.get(speaker, 0.0) + line.targets.shape[1] / 16000 / 3600
    assert figures["speakers"]["count"] == 4
    top = figures["speakers"]["top"]
    ranked = sorted(expected.items(), key=lambda item: (-item[1], item[0]))[:2]
    assert [(s["speaker"], s["hours"]) for s in top] == [(s, pytest.approx(h)) for s, h in ranked]
    assert figures["speakers"]["share_of_top"] == pytest.approx(sum(h for _, h in ranked) / sum(expected.values()))

    # Levels: the targets are the real crops, stored exactly (PCM_16 at 16 kHz), so their rms is known.
    target_rms = [20 * np.log10(np.std(row)) for line in case.lines for row in line.targets]
    levels = figures["levels"]["target"]["rms_dbfs"]
    assert (levels["p0"], levels["p100"]) == pytest.approx((min(target_rms), max(target_rms)), abs=1e-6)
    assert levels["count"] == 6 and set(figures["levels"]) == {"mix", "target"}

    # Streams and shards: what is on disk.
    manifest = json.loads((out / "dataset.json").read_text())
    on_disk = {d.name: sum(f.stat().st_size for f in d.iterdir()) for d in out.glob("shard-*")}
    assert figures["shards"]["count"] == len(on_disk) >= 2
    assert {s["directory"]: s["bytes"] for s in figures["shards"]["list"]} == on_disk
    assert figures["streams"]["mix"]["bytes"] == sum((d / "mix.npy").stat().st_size for d in out.glob("shard-*"))
    assert figures["streams"]["target"]["stored_samples"] == sum(line.targets.size for line in case.lines)
    assert manifest["totals"]["bytes"] == figures["pack"]["bytes"]

    # Cue coverage: two of the four speakers have an enrollment; slots are (mixture, speaker) pairs.
    cue = figures["cues"]["audio"]
    covered_slots = sum(s in speakers[:2] for line in case.lines for s in line.speakers)
    assert (cue["speakers_covered"], cue["speakers"], cue["slots_covered"], cue["slots"]) == (2, 4, covered_slots, 6)
    assert cue["representation"] == "waveform" and cue["items"] == 1


def test_cue_coverage_by_mixture_and_speaker(tmp_path, wesep_list, real_audio):
    """A ``mix_spk_id`` cue is looked up per (sample, speaker) slot: here two of three real utterances have one."""
    case = wesep_list([Source(f"u{i}", path) for i, path in enumerate(real_audio("pocketsphinx", 3))])
    embedding = tmp_path / "e.npy"
    np.save(embedding, np.arange(8, dtype=np.float32))
    covered = case.lines[:2]
    (tmp_path / "emb.json").write_text(json.dumps({f"{line.key}::{line.speakers[0]}": [{"path": str(embedding)}]
                                                   for line in covered}))
    cues = tmp_path / "cues.yaml"
    cues.write_text(f"cues:\n  audio: {{type: npy, format: spk_embedding, guaranteed: false, policy: {{type: fixed, "
                    f"key: mix_spk_id, resource: {tmp_path / 'emb.json'}}}}}\n")
    out = tmp_path / "sources"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), progress=False), cues=str(cues))
    cue = inspect_pack(str(out)).figures["cues"]["audio"]
    assert cue["policy_key"] == "mix_spk_id" and cue["representation"] == "spk_embedding"
    assert (cue["slots_covered"], cue["slots"], cue["speakers_covered"], cue["speakers"]) == (2, 3, 2, 3)
    assert cue["keys"] == 2 and cue["items"] == 1


def test_cli_text_json_and_plot(known_pack, tmp_path):
    out, _case, _speakers = known_pack
    text = CliRunner().invoke(main, ["inspect", str(out), "--top", "3"])
    assert text.exit_code == 0, text.output
    assert "tse pack, format 1.1, 16000 Hz" in text.output and "3 samples, 0.001 h" in text.output
    assert "top 3 speakers hold" in text.output and "target   rms dBFS" in text.output
    assert "cue audio: waveform by spk_id, 1 items; speakers 2/4, slots" in text.output

    as_json = CliRunner().invoke(main, ["inspect", str(out), "--json"])
    assert as_json.exit_code == 0, as_json.output
    figures = json.loads(as_json.output)
    assert figures["pack"]["samples"] == 3 and len(figures["speakers"]["top"]) == 4

    png = tmp_path / "inspect.png"
    plotted = CliRunner().invoke(main, ["inspect", str(out), "--plot", str(png)])
    assert plotted.exit_code == 0, plotted.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_without_matplotlib_says_what_to_install(known_pack, tmp_path, monkeypatch):
    out, _case, _speakers = known_pack
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    result = CliRunner().invoke(main, ["inspect", str(out), "--plot", str(tmp_path / "x.png")])
    assert result.exit_code == 1 and "pip install 'speechpack[plot]'" in result.output
    assert not (tmp_path / "x.png").exists()


def test_not_a_pack_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert result.exit_code == 1 and f"{tmp_path}: not a pack (no dataset.json" in result.output


def _write_pack(path: Path, kind: str, samples: list[PackedSample], per_shard: int = 2) -> None:
    plans = [SamplePlan(line=s.line, key=s.key, num_frames=s.num_frames, elements=s.elements) for s in samples]
    os.makedirs(path)
    with PackWriter(str(path), kind, 16000, [plans[i:i + per_shard] for i in range(0, len(plans), per_shard)]) as w:
        for sample in samples:
            w.add(sample)
        w.finish({"input": {"path": "test", "sha256": "0" * 64}, "tool": "speechpack", "tool_version": "test",
                  "command": "test", "options": {}}, [])


def _librivox_int16(path: str) -> np.ndarray:
    return soundfile.read(path, dtype="int16")[0][None, :]


def _transcripts() -> dict[str, str]:
    if not os.path.isfile(TRANSCRIPTION):
        missing_recording(TRANSCRIPTION, "pocketsphinx-testdata")  # fails in CI, skips elsewhere
    result = {}
    for line in open(TRANSCRIPTION, encoding="utf-8"):
        text, _, file_id = line.strip().rpartition(" (")
        result[file_id.rstrip(")")] = text.replace("<s>", "").replace("</s>", "").strip()
    return result


def test_asr_pack_shows_hours_per_corpus_and_language_and_transcripts(tmp_path, real_audio):
    transcripts = _transcripts()
    samples = []
    for i, path in enumerate(real_audio("pocketsphinx", 4)):
        file_id = Path(path).stem
        text = transcripts[file_id]
        samples.append(PackedSample(
            key=file_id, speakers=("austen-reader",), line=i + 1, orig_sample_rate=16000,
            num_frames=_librivox_int16(path).shape[1], provenance={"path": path},
            attrs={"corpus": "librivox", "language": "en" if i < 3 else "en-gb"},
            streams={"audio": [StoredAudio(_librivox_int16(path), 1.0)],
                     "text": [StoredArray(np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy())]}))
    _write_pack(tmp_path / "asr", KIND_ASR, samples)
    report = inspect_pack(str(tmp_path / "asr"))
    asr = report.figures["asr"]
    seconds = [s.num_frames / 16000 for s in samples]
    assert asr["hours_by_language"] == {"en": pytest.approx(sum(seconds[:3]) / 3600),
                                        "en-gb": pytest.approx(seconds[3] / 3600)}
    assert asr["hours_by_corpus"]["librivox"]["en"] == pytest.approx(sum(seconds[:3]) / 3600)
    lengths = [len(transcripts[s.key].encode()) for s in samples]
    assert (asr["text_bytes"]["p0"], asr["text_bytes"]["p100"]) == (min(lengths), max(lengths))
    assert asr["characters"]["total"] == sum(len(transcripts[s.key]) for s in samples)
    assert report.figures["streams"]["text"]["rows"] == sum(lengths)
    assert "corpus librivox: en " in report.describe() and "characters:" in report.describe()
    png = tmp_path / "asr.png"
    report.plot(str(png))
    assert png.stat().st_size > 10_000


def test_asd_pack_shows_clips_frame_rates_and_speaking_fraction(tmp_path, real_audio):
    rng = np.random.default_rng(0)
    samples, speaking, frames_total = [], 0, 0
    for i, (path, frames, fps, clip) in enumerate(zip(real_audio("pocketsphinx", 3), (25, 30, 12),
                                                      (25.0, 30.0, 25.0), ("c1", "c1", "c2"))):
        audio = _librivox_int16(path)[:, :round(frames / fps * 16000)]
        labels = (np.arange(frames) % 3 == 0).astype(np.uint8)
        speaking += int(labels.sum())
        frames_total += frames
        samples.append(PackedSample(
            key=f"{clip}:{i}", speakers=(f"{clip}:{i}",), line=i + 1, orig_sample_rate=16000,
            num_frames=audio.shape[1], provenance={"path": path},
            attrs={"source_fps": fps, "start_sec": 0.0, "clip": clip},
            streams={"audio": [StoredAudio(audio, 1.0)],
                     "faces": [StoredArray(rng.integers(0, 256, (frames, *FACE_SHAPE), dtype=np.uint8))],
                     "labels": [StoredArray(labels)]}))
    _write_pack(tmp_path / "asd", KIND_ASD, samples)
    figures = inspect_pack(str(tmp_path / "asd")).figures
    assert figures["asd"]["clips"] == 2 and figures["asd"]["source_fps"] == {"25": 2, "30": 1}
    assert figures["asd"]["speaking_fraction"] == pytest.approx(speaking / frames_total)
    assert figures["streams"]["faces"]["rows"] == frames_total
    assert figures["streams"]["faces"]["row_shape"] == list(FACE_SHAPE)
    assert set(figures["levels"]) == {"audio"}  # data streams have no levels


def test_distribution_counts_out_of_range_values_in_the_end_bins():
    dist = distribution(np.array([-np.inf, -200.0, -20.0, 5.0]), LEVEL_RANGE_DBFS, bins=30)
    assert len(dist["histogram"]["counts"]) == 30 and dist["histogram"]["edges"][1] == -87.0
    counts = dist["histogram"]["counts"]
    assert sum(counts) == 4 and counts[0] == 2 and counts[-1] == 1
    assert distribution(np.array([])) == {"count": 0}


def test_the_codec_of_a_cue_banks_enrollment_audio_is_reported(corpus):
    from factories.cue_corpus import cue

    cues = {"audio": cue(corpus.resources["by_speaker"], "random", "spk_id"),
            "spatial": cue(corpus.resources["track"], fields=["azimuth", "elevation"])}
    pcm16, flac = corpus.build("pcm16", cues), corpus.build("flac", cues, codec="flac")
    as_json = json.loads(CliRunner().invoke(main, ["inspect", flac, "--json"]).output)
    assert as_json["cues"]["audio"]["codec"] == "flac" and "codec" not in as_json["cues"]["spatial"]
    assert json.loads(CliRunner().invoke(main, ["inspect", pcm16, "--json"]).output)["cues"]["audio"]["codec"] == \
        "pcm16"
    text = CliRunner().invoke(main, ["inspect", flac]).output
    assert "cue audio: waveform by spk_id, 8 items, flac; speakers" in text, text
