"""Builds with ``--codec flac|opus`` (format 1.4) on real recordings: flac stores exactly the pcm16 pack's int16
with its statistics, opus keeps every length and stays sample-aligned, the bytes do not depend on ``--workers`` or
on a kill and resume, ``--digests`` adds only ``digests.npy``, codec options that cannot work are usage errors, and
``validate`` decodes and checks every block."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

import factories.paths
from factories import pack_files
from factories.format_rules import v13_refusals
from factories.wesep_lists import Source
from speechpack.cli import main
from speechpack.media.codecs import decode_run
from speechpack.packer.build.state import KILL_AT_ENV
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.constants import MINOR_DEFLATED_COLUMNS

REPO = str(factories.paths.REPO)
SHARD_BYTES = "100000"  # six_line_corpus: two samples per shard, three shards


def build(list_path, out, *extra) -> None:
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(list_path), "--out", str(out),
                                       "--shard-size", SHARD_BYTES, "--no-progress", *extra])
    assert result.exit_code == 0, (result.output, result.exception)


def records(pack):
    """Every index record of the pack, in pack order, with its shard directory."""
    manifest = json.loads((pack / "dataset.json").read_text())
    for shard in manifest["shards"]:
        for record in json.loads((pack / shard["directory"] / "index.json").read_text())["samples"]:
            yield shard["directory"], record


def segments(pack, stream):
    """``(record, segment, int16 [C, T])`` of every segment of ``stream``: read as stored (pcm16) or decoded
    from its blocks with ``media.codecs`` (a flac or opus stream); a data stream's segment is its rows."""
    manifest = json.loads((pack / "dataset.json").read_text())
    spec = next(s for s in manifest["streams"] if s["name"] == stream)
    for directory, record in records(pack):
        array = np.load(pack / directory / f"{stream}.npy", mmap_mode="r")
        for seg in record["streams"][stream]:
            if "channels" not in seg:  # a data stream: rows
                yield record, seg, np.asarray(array[seg["offset"]:seg["offset"] + seg["length"]])
                continue
            if "codec" not in spec:
                size = seg["channels"] * seg["length"]
                yield record, seg, np.asarray(array[seg["offset"]:seg["offset"] + size]).reshape(seg["channels"], -1)
                continue
            starts = seg["offset"] + np.concatenate([[0], np.cumsum(seg["blocks"])[:-1]]).astype(int)
            pieces = [array[s:s + n] for s, n in zip(starts, seg["blocks"])]
            yield record, seg, decode_run(spec["codec"], pieces, manifest["sample_rate"], seg["channels"],
                                          seg["length"], spec["block_frames"])


@pytest.fixture
def pcm16_pack(six_line_corpus, tmp_path):
    out = tmp_path / "pcm16"
    build(six_line_corpus.list_path, out)
    return out


def test_flac_pack_decodes_to_the_pcm16_packs_int16_with_equal_statistics(six_line_corpus, pcm16_pack, tmp_path):
    out = tmp_path / "flac"
    build(six_line_corpus.list_path, out, "--codec", "flac", "--block-seconds", "0.2")
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["format_minor"] == MINOR_DEFLATED_COLUMNS and manifest["digests"] == "blake2b-128"
    assert v13_refusals(manifest) and not v13_refusals(json.loads((pcm16_pack / "dataset.json").read_text()))
    assert [s["codec"] for s in manifest["streams"]] == ["flac", "flac"]
    assert [s["block_frames"] for s in manifest["streams"]] == [3200, 3200]
    assert manifest["provenance"]["options"]["codec"] == "flac"
    for stream in ("mix", "target"):
        for (rec, seg, decoded), (pcm_rec, pcm_seg, stored) in zip(segments(out, stream),
                                                                    segments(pcm16_pack, stream), strict=True):
            assert rec["key"] == pcm_rec["key"]
            assert decoded.dtype == stored.dtype and np.array_equal(decoded, stored)
            assert {k: seg[k] for k in ("channels", "length", "scale", "mean", "rms", "peak")} == \
                {k: pcm_seg[k] for k in ("channels", "length", "scale", "mean", "rms", "peak")}
            assert len(seg["blocks"]) == -(-seg["length"] // 3200)
    for field in ("scale", "mean", "rms", "peak", "channels", "length", "shard"):
        for stream in ("mix", "target"):
            assert np.array_equal(np.load(out / "columns" / f"{stream}.npy")[field],
                                  np.load(pcm16_pack / "columns" / f"{stream}.npy")[field])
    blocks = np.load(out / "columns" / "mix_blocks.npy")
    assert blocks.dtype.str == "<i8" and list(blocks) == [b for _, r in records(out) for b in r["streams"]["mix"][0]["blocks"]]


def test_opus_pack_keeps_exact_lengths_and_sample_alignment_of_mix_and_targets(six_line_corpus, pcm16_pack, tmp_path):
    out = tmp_path / "opus"
    build(six_line_corpus.list_path, out, "--codec", "opus")
    for stream in ("mix", "target"):
        for (rec, seg, decoded), (_, pcm_seg, stored) in zip(segments(out, stream), segments(pcm16_pack, stream),
                                                             strict=True):
            assert decoded.shape == stored.shape and seg["length"] == rec["num_frames"] == pcm_seg["length"]
            a, b = stored[0].astype(np.float64), decoded[0].astype(np.float64)
            lags = list(range(-24, 25))
            scores = [np.dot(a[30 + lag:-30 + lag], b[30:-30]) for lag in lags]
            assert lags[int(np.argmax(scores))] == 0, (rec["key"], stream)
            # the statistics describe what a reader decodes, not the input
            from speechpack.packer.audio.store import int16_statistics
            assert tuple(seg[k] for k in ("mean", "rms", "peak")) == int16_statistics(decoded, seg["scale"])
    assert sum(f.stat().st_size for f in out.glob("shard-*/mix.npy")) < \
        0.3 * sum(f.stat().st_size for f in pcm16_pack.glob("shard-*/mix.npy"))


def test_flac_is_at_most_0_6x_pcm16_on_real_speech(real_audio, wesep_list, tmp_path):
    case = wesep_list([Source(f"u{i}", path, seconds=2.9, start=0.05) for i, path in
                       enumerate(real_audio("pocketsphinx"))])
    sizes = {}
    for codec in ("pcm16", "flac", "opus"):
        out = tmp_path / codec
        build(case.list_path, out, "--codec", codec)
        sizes[codec] = sum(f.stat().st_size for f in out.glob("shard-*/source.npy"))
    assert sizes["flac"] <= 0.6 * sizes["pcm16"], sizes
    assert sizes["opus"] <= 0.15 * sizes["pcm16"], sizes


@pytest.mark.parametrize("codec", ["flac", "opus"])
def test_compressed_packs_are_byte_identical_across_workers(six_line_corpus, tmp_path, codec):
    build(six_line_corpus.list_path, tmp_path / "one", "--codec", codec)
    build(six_line_corpus.list_path, tmp_path / "three", "--codec", codec, "--workers", "3")  # streamed samples
    assert pack_files(tmp_path / "one") == pack_files(tmp_path / "three")
    # one sample per shard: six shards, so two workers write whole shards in their own processes
    build(six_line_corpus.list_path, tmp_path / "one_each", "--codec", codec, "--shard-size", "50000")
    build(six_line_corpus.list_path, tmp_path / "two", "--codec", codec, "--shard-size", "50000", "--workers", "2")
    assert len(list((tmp_path / "two").glob("shard-*"))) == 6
    assert pack_files(tmp_path / "one_each") == pack_files(tmp_path / "two")


def _run(list_path, out, *extra, kill_at=None):
    env = {k: v for k, v in os.environ.items() if k != KILL_AT_ENV}
    if kill_at is not None:
        env[KILL_AT_ENV] = kill_at
    return subprocess.run([sys.executable, "-m", "speechpack.cli", "build", "wesep", "--list", str(list_path),
                           "--out", str(out), "--shard-size", SHARD_BYTES, "--no-progress", "--codec", "opus",
                           *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kill_at", ["sample:utt2", "receipt:1", "columns"])
def test_killed_and_resumed_compressed_build_is_byte_identical(six_line_corpus, tmp_path, kill_at):
    reference = _run(six_line_corpus.list_path, tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr
    out = tmp_path / "pack"
    killed = _run(six_line_corpus.list_path, out, "--resume", kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _run(six_line_corpus.list_path, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert pack_files(out) == pack_files(tmp_path / "reference")


def test_pcm16_with_digests_adds_digests_npy_and_keeps_every_stream_byte(six_line_corpus, pcm16_pack, tmp_path):
    out = tmp_path / "digests"
    build(six_line_corpus.list_path, out, "--digests")
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["format_minor"] == MINOR_DEFLATED_COLUMNS and manifest["digests"] == "blake2b-128"
    assert "codec" not in manifest["streams"][0] and manifest["provenance"]["options"]["digests"] is True
    assert v13_refusals(manifest) == ["unknown key(s) ['digests']"] + [
        "shard files ['digests.npy', 'index.json', 'mix.npy', 'target.npy']"] * len(manifest["shards"])
    for shard in manifest["shards"]:
        directory = shard["directory"]
        for name in ("mix.npy", "target.npy", "index.json"):
            assert (out / directory / name).read_bytes() == (pcm16_pack / directory / name).read_bytes()
        assert sorted(shard["files"]) == ["digests.npy", "index.json", "mix.npy", "target.npy"]
    rows = np.concatenate([np.load(out / s["directory"] / "digests.npy") for s in manifest["shards"]])
    expected = []
    for shard in manifest["shards"]:  # per shard: every mix segment, then every target segment
        shard_records = [r for d, r in records(out) if d == shard["directory"]]
        for stream in ("mix", "target"):
            array = np.load(out / shard["directory"] / f"{stream}.npy")
            for record in shard_records:
                for seg in record["streams"][stream]:
                    piece = array[seg["offset"]:seg["offset"] + seg["channels"] * seg["length"]].tobytes()
                    expected.append(hashlib.blake2b(piece, digest_size=16).digest())
    assert rows.shape == (len(expected), 16) and [r.tobytes() for r in rows] == expected


@pytest.mark.parametrize("extra,message", [
    (("--codec", "opus", "--sample-rate", "22050"), "--codec opus cannot encode 22050 Hz; Opus encodes sample rates "
                                                    "8000, 12000, 16000, 24000, 48000 only"),
    (("--codec", "flac", "--opus-bitrate", "24000"), "--opus-bitrate only applies with --codec opus"),
    (("--codec", "flac", "--no-digests"), "--no-digests cannot be combined with --codec flac"),
    (("--codec", "opus", "--opus-bitrate", "1000"), "--opus-bitrate"),
    (("--codec", "flac", "--block-seconds", "0"), "--block-seconds"),
    (("--codec", "mp3",), "'mp3' is not one of 'pcm16', 'flac', 'opus'"),
])
def test_codec_options_that_cannot_work_are_usage_errors(six_line_corpus, tmp_path, extra, message):
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(six_line_corpus.list_path), "--out",
                                       str(tmp_path / "pack"), "--no-progress", *extra])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "pack" / "dataset.json").exists()


def test_validate_passes_compressed_packs_and_names_the_segment_of_a_flipped_byte(six_line_corpus, tmp_path):
    out = tmp_path / "flac"
    build(six_line_corpus.list_path, out, "--codec", "flac", "--block-seconds", "0.2")
    ok = CliRunner().invoke(main, ["validate", str(out)])
    assert ok.exit_code == 0, ok.output
    _, record = next(records(out))
    seg = record["streams"]["mix"][0]
    mix = out / "shard-000000" / "mix.npy"
    data = bytearray(mix.read_bytes())
    header = len(data) - sum(b for _, r in records(out) if _ == "shard-000000" for b in r["streams"]["mix"][0]["blocks"])
    data[header + seg["blocks"][0] + seg["blocks"][1] // 2] ^= 0x01  # in the audio frames of the segment's block 1
    mix.write_bytes(bytes(data))
    for extra in ((), ("--no-hash",)):
        bad = CliRunner().invoke(main, ["validate", str(out), *extra])
        assert bad.exit_code == 1, bad.output
        named = f"shard-000000/mix.npy key {record['key']!r} mix[0]"
        assert f"{named} block 1: bytes differ from their digest" in bad.output
        assert f"{named}: flac block 1: " in bad.output  # the decode itself refuses it too


def test_every_command_that_writes_audio_takes_the_codec_options():
    from speechpack.packer.adapters import ADAPTERS

    commands = [["build", name] for name in ADAPTERS] + [["import", "muvap"]]
    assert ["build", "audio-bank"] in commands and ["build", "asr-jsonl"] in commands
    for command in commands:
        result = CliRunner().invoke(main, [*command, "--help"])
        assert result.exit_code == 0, result.output
        for flag in ("--codec", "--opus-bitrate", "--block-seconds", "--digests / --no-digests"):
            assert flag in result.output, (command, flag)


def test_inspect_reports_bytes_per_hour_by_codec(six_line_corpus, tmp_path):
    from speechpack.packer.inspect import inspect_pack

    out = tmp_path / "digests"
    build(six_line_corpus.list_path, out, "--digests")
    report = inspect_pack(str(out))
    mix = report.figures["streams"]["mix"]
    hours = report.figures["pack"]["hours"]
    assert mix["codec"] == "pcm16" and mix["bytes_per_hour"] == pytest.approx(mix["bytes"] / hours)
    assert 1.0 < mix["of_pcm16"] < 1.01  # the stored int16 plus each shard file's .npy header
    assert "mix      " in report.describe() and "pcm16: " in report.describe() and "x pcm16)" in report.describe()


def _same_audio(pcm16_pack, flac_pack, stream):
    pairs = list(zip(segments(flac_pack, stream), segments(pcm16_pack, stream), strict=True))
    assert pairs
    for (rec, seg, decoded), (pcm_rec, pcm_seg, stored) in pairs:
        assert rec["key"] == pcm_rec["key"] and np.array_equal(decoded, stored)
        assert [seg[k] for k in ("scale", "mean", "rms", "peak")] == [pcm_seg[k] for k in ("scale", "mean", "rms", "peak")]


def test_an_audio_bank_and_an_asr_pack_store_flac_as_their_pcm16_twins(real_audio, tmp_path):
    from factories.asr import librivox_clips, write_jsonl_manifest

    bank = tmp_path / "noise"
    bank.mkdir()
    for path in real_audio("alsa", 3):  # 48 kHz files, resampled to the pack's 16 kHz
        (bank / os.path.basename(path)).write_bytes(open(path, "rb").read())
    clips = librivox_clips()
    manifest = write_jsonl_manifest(tmp_path / "train.jsonl", [
        {"audio_filepath": clip.path, "text": clip.text, "language": "en", "corpus": "librivox"} for clip in clips[:3]])
    for codec in ("pcm16", "flac"):
        result = CliRunner().invoke(main, ["build", "audio-bank", str(bank), "--kind", "noise", "--out",
                                           str(tmp_path / f"bank-{codec}"), "--no-progress", "--codec", codec])
        assert result.exit_code == 0, result.output
        result = CliRunner().invoke(main, ["build", "asr-jsonl", "--list", str(manifest), "--language", "en", "--out",
                                           str(tmp_path / f"asr-{codec}"), "--no-progress", "--codec", codec])
        assert result.exit_code == 0, result.output
    _same_audio(tmp_path / "bank-pcm16", tmp_path / "bank-flac", "audio")
    _same_audio(tmp_path / "asr-pcm16", tmp_path / "asr-flac", "audio")
    asr = json.loads((tmp_path / "asr-flac" / "dataset.json").read_text())
    assert [s.get("codec") for s in asr["streams"]] == ["flac", None]  # text is never compressed
    assert asr["char_counts"] == json.loads((tmp_path / "asr-pcm16" / "dataset.json").read_text())["char_counts"]
    for pack in ("bank-flac", "asr-flac"):
        result = CliRunner().invoke(main, ["validate", str(tmp_path / pack)])
        assert result.exit_code == 0, result.output


def test_asd_builds_and_the_muvap_import_compress_audio_and_keep_faces_and_labels(tmp_path):
    """The asd families and ``import muvap`` take the codec options too; faces and labels are never compressed."""
    from factories.asd_inputs import write_ava
    from factories.muvap_packs import muvap_avcc_corpus

    inputs = write_ava(tmp_path / "AVA")
    corpus = muvap_avcc_corpus(tmp_path / "muvap")
    for codec in ("pcm16", "flac"):
        result = CliRunner().invoke(main, ["build", "ava", "--loader", str(inputs.loader_csv), "--visual-root",
                                           str(inputs.visual_root), "--audio-root", str(inputs.audio_root),
                                           "--split", "train", "--out", str(tmp_path / f"ava-{codec}"),
                                           "--no-progress", "--codec", codec])
        assert result.exit_code == 0, result.output
        result = CliRunner().invoke(main, ["import", "muvap", str(corpus.muvap), "--out",
                                           str(tmp_path / f"muvap-{codec}"), "--no-progress", "--codec", codec])
        assert result.exit_code == 0, result.output
    for name in ("ava", "muvap"):
        _same_audio(tmp_path / f"{name}-pcm16", tmp_path / f"{name}-flac", "audio")
        flac = json.loads((tmp_path / f"{name}-flac" / "dataset.json").read_text())
        assert [s.get("codec") for s in flac["streams"]] == ["flac", None, None]
        for stream in ("faces", "labels"):
            for (_, _, a), (_, _, b) in zip(segments(tmp_path / f"{name}-flac", stream),
                                            segments(tmp_path / f"{name}-pcm16", stream), strict=True):
                assert np.array_equal(a, b)
        # validate_pack: every check of the pack itself (the CLI's asd level comparison reads through the loader)
        report = validate_pack(str(tmp_path / f"{name}-flac"))
        assert report.ok, report.describe()
    wrong = CliRunner().invoke(main, ["import", "muvap", str(corpus.muvap), "--out", str(tmp_path / "x"),
                                      "--codec", "flac", "--no-digests"])
    assert wrong.exit_code == 2 and "--no-digests cannot be combined with --codec flac" in wrong.output


def test_audio_the_codec_cannot_store_is_a_problem_of_its_line(real_audio, tmp_path):
    import soundfile

    bank = tmp_path / "bank"
    bank.mkdir()
    speech, rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="int16")
    soundfile.write(bank / "mono.wav", speech[:8000], rate, subtype="PCM_16")
    soundfile.write(bank / "nine.wav", np.stack([np.roll(speech[:8000], 50 * c) for c in range(9)], axis=1), rate,
                    subtype="PCM_16")
    common = ["build", "audio-bank", str(bank), "--kind", "noise", "--no-progress", "--codec", "flac"]
    failed = CliRunner().invoke(main, [*common, "--out", str(tmp_path / "failed")])
    assert failed.exit_code == 1 and "--codec flac stores at most 8 channels, this audio has 9" in failed.output
    assert not (tmp_path / "failed" / "dataset.json").exists()
    skipped = CliRunner().invoke(main, [*common, "--out", str(tmp_path / "skipped"), "--skip-bad"])
    assert skipped.exit_code == 0, skipped.output
    assert [r["key"] for _, r in records(tmp_path / "skipped")] == ["mono.wav"]
    opus = CliRunner().invoke(main, [*common[:-1], "opus", "--out", str(tmp_path / "opus")])
    assert opus.exit_code == 0, opus.output  # Ogg Opus maps up to 255 channels


def test_array_job_slices_of_a_compressed_build_finalize_to_the_single_build(six_line_corpus, tmp_path):
    build(six_line_corpus.list_path, tmp_path / "one", "--codec", "flac")
    for part in ("0/2", "1/2"):
        build(six_line_corpus.list_path, tmp_path / "sliced", "--codec", "flac", "--shards", part)
    result = CliRunner().invoke(main, ["finalize", str(tmp_path / "sliced"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert pack_files(tmp_path / "sliced") == pack_files(tmp_path / "one")


@pytest.mark.parametrize("codec", ["flac", "opus"])
def test_an_in_process_encode_leaves_digests_and_statistics_to_the_writer_with_equal_values(real_audio, codec):
    import soundfile

    from speechpack.packer.audio.store import StoredAudio
    from speechpack.packer.build.encoding import Encoding, encode_audio

    speech = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="int16")[0][:40000]
    stored = StoredAudio(np.ascontiguousarray(speech[None, :]), 1.0)
    encoding = Encoding(codec=codec, block_frames=16000, digests=True)
    now, later = encode_audio(stored, encoding, 16000), encode_audio(stored, encoding, 16000, measure_later=True)
    assert later.digests is None and later.stats is None  # nothing measured on the encoding thread
    assert np.array_equal(later.data, now.data) and later.sizes == now.sizes
    assert later.block_digests() == now.digests and later.statistics() == now.stats
    settled = later.settled()  # what the encoding thread does instead when the writer is behind
    assert settled.digests == now.digests and settled.stats == now.stats and settled.measure is None
