"""``speechpack build ava|wasd|avcc|msdwild``: each adapter on a real talking-face video, the pack invariants,
missing inputs (listed, or skipped with ``--skip-missing``), tracks too short for a model frame, bad labels.

The corpora are written by ``tests/factories/asd_inputs.py`` from kphotoalbum's movie (faces found by a Haar
cascade, labels measured from the audio); a missing video or cascade fails in CI and skips elsewhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile
import soxr
from click.testing import CliRunner

from factories.asd_inputs import AVA_TRACKS, MSD_TRANSIENT_TRACK, load_movie, write_ava, write_avcc, write_msdwild
from speechpack.cli import main
from factories import pack_files
from speechpack.loader.pack import open_pack
from speechpack.packer.adapters.ava import build_ava
from speechpack.packer.adapters.asd_common import AsdBuildOptions, TrackAudio, parse_labels, track_audio
from speechpack.packer.adapters.avcc import build_avcc
from speechpack.packer.adapters.msdwild import _counted_frames, _window_frames, build_msdwild, windows
from speechpack.packer.audio import quantise
from speechpack.packer.faces import Box, crop_square, read_jpeg_faces, read_npy_faces
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.constants import ASD_SAMPLE_RATE, FACE_SHAPE, KIND_ASD, SKIPPED_NAME
from speechpack.schemas.errors import BuildError

pytestmark = pytest.mark.real_data


def _options(out: Path, **kwargs) -> AsdBuildOptions:
    return AsdBuildOptions(out=str(out), progress=False, **kwargs)


def _expected_samples(frames: int, fps: float) -> int:
    return int(round(frames / fps * ASD_SAMPLE_RATE))


def _reference_audio(wav: Path, samples: int) -> np.ndarray:
    """The WAV as the packer should store it: mono by mean, soxr to 16 kHz, cut or zero-padded, quantised."""
    data, rate = soundfile.read(wav, dtype="float32", always_2d=True)
    mono = data.T.mean(axis=0, keepdims=True)
    resampled = soxr.resample(mono.T, rate, ASD_SAMPLE_RATE).T[:, :samples]
    resampled = np.pad(resampled, ((0, 0), (0, samples - resampled.shape[1])))
    stored, scale = quantise(np.ascontiguousarray(resampled, dtype=np.float32))
    return stored[0].astype(np.float64) / 32768.0 * scale


def _louder_when_speaking(audio: np.ndarray, labels: np.ndarray, fps: float) -> bool:
    edges = np.round(np.arange(len(labels) + 1) / fps * ASD_SAMPLE_RATE).astype(int)
    energy = np.array([np.mean(audio[a:b] ** 2) for a, b in zip(edges[:-1], edges[1:])])
    return energy[labels == 1].mean() > 2 * energy[labels == 0].mean()


def _records(pack: str) -> list[dict]:
    records = []
    for shard in sorted(os.listdir(pack)):
        if shard.startswith("shard-"):
            with open(os.path.join(pack, shard, "index.json"), encoding="utf-8") as fp:
                records += json.load(fp)["samples"]
    return records


# ---------------------------------------------------------------------------------------------------------------
# AVA / WASD
# ---------------------------------------------------------------------------------------------------------------


def test_ava_pack_holds_the_real_faces_labels_and_audio(tmp_path):
    inputs = write_ava(tmp_path / "AVA")
    summary = build_ava(str(inputs.loader_csv), str(inputs.visual_root), str(inputs.audio_root), "train",
                        _options(tmp_path / "pack"))
    assert summary.manifest.kind == KIND_ASD and summary.manifest.sample_rate == ASD_SAMPLE_RATE
    pack = open_pack(str(tmp_path / "pack"))
    assert list(pack.keys) == [key for _clip, key, *_ in AVA_TRACKS]
    for index, (clip, key, first, stop, _channels) in enumerate(AVA_TRACKS):
        expected = inputs.tracks[key]
        sample = pack.sample(index)
        faces, labels = sample.data["faces"], sample.data["labels"]
        assert faces.shape == (stop - first, *FACE_SHAPE) and faces.dtype == np.uint8
        np.testing.assert_array_equal(faces, read_jpeg_faces(str(inputs.visual_root / "train" / clip / key)))
        np.testing.assert_array_equal(labels, expected.labels)
        samples = _expected_samples(stop - first, expected.fps)
        assert sample.targets.shape == (1, samples)  # the invariant: round(F / fps * 16000)
        np.testing.assert_allclose(sample.targets[0], _reference_audio(
            inputs.audio_root / "train" / clip / f"{key}.wav", samples), atol=1.5 / 32768)
        assert _louder_when_speaking(sample.targets[0], labels, expected.fps)
        assert sample.speakers == (key,)
        assert pack.attrs["clip"][index] == clip and pack.attrs["start_sec"][index] == 0.0
        assert pack.attrs["source_fps"][index] == pytest.approx(expected.fps)
    assert validate_pack(str(tmp_path / "pack")).ok


def test_ava_cli_defaults_to_the_dataset_root_and_wasd_reads_the_same_layout(tmp_path):
    inputs = write_ava(tmp_path / "WASD", split="val")
    args = ["--loader", str(inputs.loader_csv), "--visual-root", str(inputs.visual_root), "--audio-root",
            str(inputs.audio_root), "--split", "val", "--no-progress"]
    result = CliRunner().invoke(main, ["build", "wasd", *args])
    assert result.exit_code == 0, result.output
    out = tmp_path / "WASD" / "packed" / "val"
    assert "packed 3 samples" in result.output and str(out) in result.output
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["provenance"]["command"] == "build wasd"
    assert manifest["provenance"]["options"]["split"] == "val"
    again = CliRunner().invoke(main, ["build", "ava", *args, "--out", str(tmp_path / "ava-pack"), "--workers", "2"])
    assert again.exit_code == 0, again.output
    ours, theirs = pack_files(out), pack_files(tmp_path / "ava-pack")
    del ours["dataset.json"], theirs["dataset.json"]  # the command name differs; every array and index is equal
    assert ours == theirs


def test_ava_label_names_count_speaking_not_audible_as_negative():
    labels = parse_labels('["NOT_SPEAKING", "SPEAKING_AUDIBLE", "SPEAKING_NOT_AUDIBLE", 1, 0]',
                          {"NOT_SPEAKING": 0, "SPEAKING_AUDIBLE": 1, "SPEAKING_NOT_AUDIBLE": 0})
    assert labels.tolist() == [0, 1, 0, 1, 0] and labels.dtype == np.uint8
    with pytest.raises(ValueError, match="label 0 is 'SPEAKING_AUDIBLE'"):
        parse_labels('["SPEAKING_AUDIBLE"]')  # names only where the corpus spells them (AVA)


def _rewrite_csv(inputs, change) -> None:
    lines = inputs.loader_csv.read_text().splitlines()
    inputs.loader_csv.write_text("\n".join(change(lines)) + "\n")


def test_missing_inputs_fail_the_build_and_are_all_listed(tmp_path):
    inputs = write_ava(tmp_path / "AVA")
    clip1, key1, *_ = AVA_TRACKS[0]
    clip3, key3, *_ = AVA_TRACKS[2]
    for jpeg in (inputs.visual_root / "train" / clip1 / key1).iterdir():
        jpeg.unlink()
    (inputs.visual_root / "train" / clip1 / key1).rmdir()
    (inputs.audio_root / "train" / clip3 / f"{key3}.wav").unlink()
    out = tmp_path / "AVA" / "packed" / "train"
    result = CliRunner().invoke(main, ["build", "ava", "--loader", str(inputs.loader_csv), "--visual-root",
                                       str(inputs.visual_root), "--audio-root", str(inputs.audio_root), "--split",
                                       "train", "--no-progress"])
    assert result.exit_code == 1
    assert "2 bad line(s)" in result.output
    assert f"line 1: key {key1!r}, file {inputs.visual_root}/train/*/{key1}: missing input" in result.output
    assert f"line 3: key {key3!r}, file {inputs.audio_root}/train/*/{key3}.wav: missing input" in result.output
    assert not out.exists()  # nothing published, not even the directory


def test_skip_missing_packs_the_rest_and_records_what_it_skipped(tmp_path):
    inputs = write_ava(tmp_path / "AVA")
    clip3, key3, *_ = AVA_TRACKS[2]
    (inputs.audio_root / "train" / clip3 / f"{key3}.wav").unlink()
    summary = build_ava(str(inputs.loader_csv), str(inputs.visual_root), str(inputs.audio_root), "train",
                        _options(tmp_path / "pack", skip_missing=True))
    assert summary.manifest.totals["samples"] == 2
    skipped = json.loads((tmp_path / "pack" / SKIPPED_NAME).read_text())["skipped"]
    assert [(s["line"], s["key"]) for s in skipped] == [(3, key3)]
    assert skipped[0]["reason"].startswith("missing input") and skipped[0]["path"].endswith(f"{key3}.wav")
    assert summary.manifest.provenance["options"]["skip_missing"] is True
    assert validate_pack(str(tmp_path / "pack")).ok


def test_skip_missing_does_not_skip_bad_lines(tmp_path):
    inputs = write_ava(tmp_path / "AVA")
    clip3, key3, *_ = AVA_TRACKS[2]
    (inputs.audio_root / "train" / clip3 / f"{key3}.wav").unlink()

    def one_label_too_many(lines):  # line 2: 45 labels for 44 faces
        fields = lines[1].split("\t")
        fields[3] = json.dumps(json.loads(fields[3]) + [0])
        return [lines[0], "\t".join(fields), *lines[2:]]

    _rewrite_csv(inputs, one_label_too_many)
    with pytest.raises(BuildError) as err:
        build_ava(str(inputs.loader_csv), str(inputs.visual_root), str(inputs.audio_root), "train",
                  _options(tmp_path / "pack", skip_missing=True))
    assert [(p.line, p.reason) for p in err.value.problems] == [
        (2, "44 faces but 45 labels: a track needs one label per native frame")]
    assert not (tmp_path / "pack").exists()
    summary = build_ava(str(inputs.loader_csv), str(inputs.visual_root), str(inputs.audio_root), "train",
                        _options(tmp_path / "pack", skip_missing=True, skip_bad=True))
    assert summary.manifest.totals["samples"] == 1 and [p.line for p in summary.skipped] == [2, 3]


def test_skip_missing_stops_at_a_track_that_only_fails_to_decode(tmp_path):
    inputs = write_ava(tmp_path / "AVA")
    clip2, key2, *_ = AVA_TRACKS[1]
    clip3, key3, *_ = AVA_TRACKS[2]
    (inputs.audio_root / "train" / clip3 / f"{key3}.wav").unlink()
    corrupt = sorted((inputs.visual_root / "train" / clip2 / key2).iterdir())[5]
    corrupt.write_bytes(b"not a JPEG any more")  # the header count still holds: only decoding finds it
    with pytest.raises(BuildError) as err:
        build_ava(str(inputs.loader_csv), str(inputs.visual_root), str(inputs.audio_root), "train",
                  _options(tmp_path / "pack", skip_missing=True))
    assert [(p.line, p.path, p.reason) for p in err.value.problems] == [
        (2, str(corrupt), "cannot decode the JPEG face crop")]
    assert not (tmp_path / "pack").exists()


def test_bad_loader_lines_are_reported_with_their_line(tmp_path):
    inputs = write_ava(tmp_path / "AVA")

    def spoil(lines):
        first = lines[0].split("\t")
        second = lines[1].split("\t")
        third = lines[2].split("\t")
        first[3] = "__import__('os').system('echo pwned')"  # parsed as JSON, never evaluated
        second[2] = "fast"
        third[3] = json.dumps([2] * len(json.loads(third[3])))
        return ["\t".join(first), "\t".join(second), "\t".join(third), "only\tthree\tcolumns"]

    _rewrite_csv(inputs, spoil)
    with pytest.raises(BuildError) as err:
        build_ava(str(inputs.loader_csv), str(inputs.visual_root), str(inputs.audio_root), "train",
                  _options(tmp_path / "pack"))
    reasons = {p.line: p.reason for p in err.value.problems}
    assert "not a JSON list" in reasons[1]
    assert reasons[2] == "source_fps 'fast' is not a number"
    assert reasons[3].startswith("label 0 is 2; a label must be 0 or 1")
    assert "3 column(s)" in reasons[4]


# ---------------------------------------------------------------------------------------------------------------
# AVCC
# ---------------------------------------------------------------------------------------------------------------


def test_avcc_pack_cuts_the_conversation_audio_at_start_sec(tmp_path):
    inputs = write_avcc(tmp_path / "AVCC")
    build_avcc(str(inputs.tsv), str(inputs.root), _options(tmp_path / "pack"))
    pack = open_pack(str(tmp_path / "pack"))
    conversation, rate = soundfile.read(inputs.root / "audio" / "conv1.wav", dtype="int16")
    assert rate == ASD_SAMPLE_RATE
    for index, (key, first, stop, kind, _size) in enumerate(
            [("conv1_spk1", 5, 45, "npy", 96), ("conv1_spk2", 30, 68, "jpg", None), ("conv1_spk3", 0, 68, "npy", 112)]):
        expected = inputs.tracks[key]
        assert pack.keys[index] == key
        sample = pack.sample(index)
        samples = _expected_samples(stop - first, expected.fps)
        begin = int(round(expected.start_sec * ASD_SAMPLE_RATE))
        want = conversation[begin:begin + samples]
        want = np.pad(want, (0, samples - len(want)))
        segment = pack.streams["audio"].offset[pack.segments_of("audio", index)[0]]
        stored = pack.stream_array(int(pack.streams["audio"].shard[index]), "audio")[segment:segment + samples]
        np.testing.assert_array_equal(stored, want)  # 16-bit 16 kHz PCM is stored bit-exactly
        visual = inputs.root / "faces" / (f"{key}.npy" if kind == "npy" else key)
        reference = read_npy_faces(str(visual)) if kind == "npy" else read_jpeg_faces(str(visual))
        np.testing.assert_array_equal(sample.data["faces"], reference)
        np.testing.assert_array_equal(sample.data["labels"], expected.labels)
        assert pack.attrs["start_sec"][index] == pytest.approx(expected.start_sec)
        assert pack.attrs["clip"][index] == "audio/conv1.wav"
    assert validate_pack(str(tmp_path / "pack")).ok


def _append_rows(tsv: Path, *rows: list[str]) -> None:
    with open(tsv, "a", encoding="utf-8") as fp:
        for row in rows:
            fp.write("\t".join(row) + "\n")


def test_avcc_reports_bad_labels_short_tracks_and_missing_files(tmp_path):
    inputs = write_avcc(tmp_path / "AVCC")
    np.save(inputs.root / "faces" / "one.npy", np.full((1, 112, 112), 90, dtype=np.uint8))
    _append_rows(inputs.tsv,
                 ["bad_label", "faces/conv1_spk1.npy", "audio/conv1.wav", "15.0", json.dumps([0, 2] * 20), "0",
                  "npy", "16000"],
                 ["one_frame", "faces/one.npy", "audio/conv1.wav", "30", "[1]", "0", "npy", "16000"],
                 ["no_faces", "faces/absent.npy", "audio/conv1.wav", "15.0", "[0]", "0", "npy", "16000"],
                 ["late_start", "faces/one.npy", "audio/conv1.wav", "15", "[0]", "99", "npy", ""],
                 ["wrong_rate", "faces/conv1_spk1.npy", "audio/conv1.wav", "15.0", json.dumps([0] * 40), "0", "npy",
                  "44100"],
                 ["conv1_spk1", "faces/conv1_spk1.npy", "audio/conv1.wav", "15.0", "[0]", "0", "npy", "16000"])
    runner = CliRunner()
    result = runner.invoke(main, ["build", "avcc", "--loader", str(inputs.tsv), "--root", str(inputs.root),
                                  "--out", str(tmp_path / "pack"), "--no-progress"])
    assert result.exit_code == 1
    output = result.output
    assert "line 5: key 'bad_label': label 1 is 2; a label must be 0 or 1" in output
    assert "line 6: key 'one_frame', file" in output and "shorter than one 25 Hz model frame" in output
    assert f"line 7: key 'no_faces', file {inputs.root}/faces/absent.npy: missing input" in output
    assert "line 8: key 'late_start'" in output and "start_sec 99 is outside the recording" in output
    assert "line 9: key 'wrong_rate'" in output and "the manifest says 44100 Hz, the file is 16000 Hz" in output
    assert "line 10: key 'conv1_spk1': duplicate sample_id (first on line 2)" in output
    assert not (tmp_path / "pack").exists()


def test_avcc_npy_audio_needs_its_rate_and_stores_int16_exactly(tmp_path):
    inputs = write_avcc(tmp_path / "AVCC")
    conversation, _rate = soundfile.read(inputs.root / "audio" / "conv1.wav", dtype="int16")
    np.save(inputs.root / "audio" / "conv1.npy", conversation)
    rows = inputs.tsv.read_text().splitlines()
    header, first = rows[0], rows[1].replace("audio/conv1.wav", "audio/conv1.npy")
    no_rate = first.split("\t")
    no_rate[0], no_rate[-1] = "no_rate", ""
    inputs.tsv.write_text("\n".join([header, first, "\t".join(no_rate)]) + "\n")
    with pytest.raises(BuildError) as err:
        build_avcc(str(inputs.tsv), str(inputs.root), _options(tmp_path / "pack"))
    assert [(p.line, p.reason) for p in err.value.problems] == [
        (3, ".npy audio needs its sample rate (the audio_sample_rate column)")]
    inputs.tsv.write_text("\n".join([header, first]) + "\n")
    build_avcc(str(inputs.tsv), str(inputs.root), _options(tmp_path / "pack"))
    pack = open_pack(str(tmp_path / "pack"))
    expected = inputs.tracks["conv1_spk1"]
    begin = int(round(expected.start_sec * ASD_SAMPLE_RATE))
    samples = _expected_samples(expected.frames, expected.fps)
    stored = pack.stream_array(0, "audio")[:samples]
    np.testing.assert_array_equal(stored, conversation[begin:begin + samples])  # int16 / 32768 round-trips


def test_a_track_cut_from_a_long_recording_sounds_as_if_the_whole_recording_were_resampled(tmp_path):
    """The resampler gets real context on both sides of the cut: no warm-up at the track's first samples."""
    movie = load_movie()
    wav = tmp_path / "conversation.wav"  # the movie's own rate: 11024 Hz, 689 frames per 1000 output samples
    soundfile.write(wav, np.clip(np.rint(movie.audio * 32768), -32768, 32767).astype(np.int16), movie.audio_rate,
                    subtype="PCM_16")
    whole = soxr.resample(soundfile.read(wav, dtype="float32")[0], movie.audio_rate, ASD_SAMPLE_RATE)
    for periods in (0, 1, 3, 7):
        start_sec = 689 * periods / movie.audio_rate  # on the output grid: 0, 62.5, 187.5, 437.5 ms
        begin = round(start_sec * ASD_SAMPLE_RATE)
        got, padding = track_audio(TrackAudio(str(wav), start_sec), movie.audio_rate, 20000)
        assert padding == 0 and got.shape == (1, 20000) and got.dtype == np.float32
        np.testing.assert_allclose(got[0], whole[begin:begin + 20000], atol=1e-6)
    tail, padding = track_audio(TrackAudio(str(wav), 4.0), movie.audio_rate, 16000)
    assert padding == 16000 - (len(whole) - 64000) and not tail[0, -padding:].any()


def test_avcc_tsv_without_required_columns_is_refused(tmp_path):
    tsv = tmp_path / "manifest.tsv"
    tsv.write_text("sample_id\tvisual_path\taudio_path\tlabels\nx\tf.npy\ta.wav\t[0]\n")
    result = CliRunner().invoke(main, ["build", "avcc", "--loader", str(tsv), "--root", str(tmp_path), "--out",
                                       str(tmp_path / "pack")])
    assert result.exit_code == 1 and f"{tsv}:1: header lacks the column(s) source_fps" in result.output
    tsv.write_bytes(b"sample_id\tvisual_path\taudio_path\tsource_fps\tlabels\ncaf\xe9\tf.npy\ta.wav\t25\t[0]\n")
    result = CliRunner().invoke(main, ["build", "avcc", "--loader", str(tsv), "--root", str(tmp_path), "--out",
                                       str(tmp_path / "pack")])
    assert result.exit_code == 1 and f"{tsv}: the TSV is not UTF-8 text (invalid continuation byte at byte 54)" \
        in result.output


# ---------------------------------------------------------------------------------------------------------------
# MSDWild
# ---------------------------------------------------------------------------------------------------------------


def test_incomplete_final_windows_are_discarded_unless_kept():
    # MuVAP's rule by default: only complete windows (the model has no padding mask)
    assert windows(0, 68, 30, 22) == [(0, 30), (22, 52)]
    assert windows(5, 35, 30, 20) == [(5, 35)]  # the first window ends exactly at the end
    assert windows(0, 20, 30, 20) == []  # a video shorter than one window gives none
    assert windows(0, 61, 30, 30) == [(0, 30), (30, 60)]
    # keep_tail: the tail is kept, unpadded, only when it adds frames
    assert windows(0, 68, 30, 22, keep_tail=True) == [(0, 30), (22, 52), (44, 68)]
    assert windows(5, 35, 30, 20, keep_tail=True) == [(5, 35)]  # the first window reaches the end: no tail
    assert windows(0, 20, 30, 20, keep_tail=True) == [(0, 20)]  # shorter than one window: one short window
    assert windows(0, 61, 30, 30, keep_tail=True) == [(0, 30), (30, 60), (60, 61)]  # a 1-frame tail (reported)


def _decoded_gray(mp4: Path) -> np.ndarray:
    with av.open(str(mp4)) as container:
        return np.stack([frame.to_ndarray(format="gray") for frame in container.decode(video=0)])


def test_msdwild_windows_tracks_labels_and_faces(tmp_path):
    inputs = write_msdwild(tmp_path / "MSDWild")
    result = CliRunner().invoke(main, ["build", "msdwild", "--input", str(inputs.input_dir), "--window", "2",
                                       "--overlap", "0.5", "--no-progress"])
    assert result.exit_code == 0, result.output
    # 2 s windows every 1.5 s at 15 fps (30 frames, stride round(22.5) = 22); the incomplete tail 44..68 is
    # discarded by default, kept (unpadded) with keep_tail; the transient track (5 frames) is in no window's 90%
    assert list(open_pack(str(tmp_path / "MSDWild" / "packed" / "all")).keys) == ["00001:000000:0",
                                                                                  "00001:000022:0"]
    out = tmp_path / "tail"
    build_msdwild(str(inputs.input_dir), _options(out), window_sec=2.0, overlap_sec=0.5, keep_tail=True)
    pack = open_pack(str(out))
    assert list(pack.keys) == ["00001:000000:0", "00001:000022:0", "00001:000044:0"]
    assert not any(key.endswith(f":{MSD_TRANSIENT_TRACK}") for key in pack.keys)
    gray = _decoded_gray(inputs.input_dir / "00001.mp4")
    for index, (start, stop) in enumerate([(0, 30), (22, 52), (44, 68)]):
        sample = pack.sample(index)
        np.testing.assert_array_equal(sample.data["labels"], inputs.labels[start:stop])
        for row in (0, stop - start - 1):
            box = Box(*inputs.boxes[start + row])
            np.testing.assert_array_equal(sample.data["faces"][row], crop_square(gray[start + row], box))
        assert sample.targets.shape == (1, _expected_samples(stop - start, 15.0))
        assert pack.attrs["start_sec"][index] == pytest.approx(start / 15.0)
        assert pack.attrs["clip"][index] == "00001"
    whole = np.concatenate([pack.sample(0).targets[0], pack.sample(2).targets[0][-_expected_samples(16, 15.0):]])
    assert _louder_when_speaking(whole, np.concatenate([inputs.labels[:30], inputs.labels[52:]]), 15.0)
    assert validate_pack(str(out)).ok


def test_msdwild_windows_seek_to_a_keyframe_and_decode_the_frames_counting_would(tmp_path):
    inputs = write_msdwild(tmp_path / "MSDWild")
    mp4 = str(inputs.input_dir / "00001.mp4")
    gray = _decoded_gray(inputs.input_dir / "00001.mp4")
    for first, count in ((0, 30), (13, 20), (44, 24), (60, 20)):
        window = _window_frames(mp4, first, count)
        assert window is not None  # constant frame rate: timestamps number the frames
        assert len(window) == min(count, len(gray) - first)
        np.testing.assert_array_equal(np.stack(window), gray[first:first + count])
        np.testing.assert_array_equal(np.stack(_counted_frames(mp4, first, count)), gray[first:first + count])


def test_msdwild_fills_frames_without_a_box_with_grey_and_reports_missing_videos(tmp_path):
    inputs = write_msdwild(tmp_path / "MSDWild")
    rows = (inputs.input_dir / "00001.csv").read_text().splitlines()
    kept = [row for row in rows if not (row.startswith("3,0,") or row.startswith("4,0,"))]  # 2 of 30 frames lost
    (inputs.input_dir / "00001.csv").write_text("\n".join(kept) + "\n")
    with open(inputs.rttm, "a", encoding="utf-8") as fp:
        fp.write("SPEAKER 00002 1 0.5 1.0 <NA> <NA> 0 <NA> <NA>\n")
    lines = len(inputs.rttm.read_text().splitlines())
    with pytest.raises(BuildError) as err:
        build_msdwild(str(inputs.input_dir), _options(tmp_path / "pack"), window_sec=2.0, overlap_sec=0.5)
    assert sorted((p.line, os.path.basename(p.path)) for p in err.value.problems) == [
        (lines, "00002.csv"), (lines, "00002.mp4")]
    summary = build_msdwild(str(inputs.input_dir), _options(tmp_path / "pack", skip_missing=True), window_sec=2.0,
                            overlap_sec=0.5)
    assert summary.manifest.totals["samples"] == 2 and len(summary.skipped) == 2
    faces = open_pack(str(tmp_path / "pack")).sample(0).data["faces"]
    assert (faces[3] == 128).all() and (faces[4] == 128).all() and not (faces[5] == 128).all()


def test_msdwild_reports_malformed_box_rows_and_rttm_lines(tmp_path):
    inputs = write_msdwild(tmp_path / "MSDWild")
    boxes = inputs.input_dir / "00001.csv"
    rows = boxes.read_text().splitlines()
    boxes.write_text("\n".join(["frame,track,x,y,w,h,active", *rows, "12,0,50,20,60,60,1", "13,0,50,20,0,60,1",
                                "x,0,1,2", "1.5,0,1,2,3,4", "14,0,1,2,wide,4"]) + "\n")  # a header is allowed
    with open(inputs.rttm, "a", encoding="utf-8") as fp:
        fp.write("SPEAKER 00001 1 soon 1.0 <NA> <NA> 0 <NA> <NA>\n")
    with pytest.raises(BuildError) as err:
        build_msdwild(str(inputs.input_dir), _options(tmp_path / "pack"), window_sec=2.0, overlap_sec=0.5)
    reasons = sorted(p.reason for p in err.value.problems)
    assert reasons == [
        f"line {len(rows) + 2}: track '0' has a second box in frame 12",
        f"line {len(rows) + 3}: frame 13 box ['50', '20', '0', '60']: negative frame or empty box",
        f"line {len(rows) + 4}: 4 column(s); a box row is frame, track, and four coordinates",
        f"line {len(rows) + 5}: frame '1.5' is not an integer",
        f"line {len(rows) + 6}: box ['1', '2', 'wide', '4'] is not four numbers",
        "turn start soon / duration 1.0 must be non-negative numbers",
    ]
    assert not (tmp_path / "pack").exists()
