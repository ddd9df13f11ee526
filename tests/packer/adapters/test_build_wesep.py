"""``speechpack build wesep`` on real speech: what goes in comes back out, and the pack is what the format says.

Mixtures are built from crops of real recordings (pocketsphinx-testdata 16 kHz, alsa-utils 48 kHz, codec2 8 kHz)
by the ``wesep_list`` factory in conftest.py, which also records what every line should read back as.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from speechpack.cli import main
from factories import FULL_SCALE, Mix, Source, at_rate, corpus_rate, pack_files
from speechpack.loader import open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.errors import PackFormatError, SpeechpackError

RATE = 16000


def build(case, out: Path, **options):
    options.setdefault("progress", False)
    return build_wesep(str(case.list_path), BuildOptions(out=str(out), **options))


def shard_index(pack_dir: Path, shard: str = "shard-000000") -> dict:
    return json.loads((pack_dir / shard / "index.json").read_text(encoding="utf-8"))


def all_records(pack_dir: Path) -> list[dict]:
    manifest = json.loads((pack_dir / "dataset.json").read_text(encoding="utf-8"))
    return [r for shard in manifest["shards"] for r in shard_index(pack_dir, shard["directory"])["samples"]]


def assert_close_to(actual: np.ndarray, expected: np.ndarray, scale: float, what: str) -> None:
    """Within one int16 step of the decode scale (rounding is half a step; float32 decoding adds a hair)."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    error = np.abs(actual.astype(np.float64) - expected).max()
    assert error <= scale / FULL_SCALE, f"{what}: max error {error * FULL_SCALE:.3f} int16 steps (scale {scale})"


def check_readback(pack_dir: Path, case, sample_rate: int = RATE) -> None:
    """Every sample of the pack equals its line's sources and mixture (resampled as the packer does)."""
    pack = open_pack(pack_dir)
    expected_lines = case.lines
    assert len(pack) == len(expected_lines)
    records = all_records(pack_dir)
    for i, expected in enumerate(expected_lines):
        sample = pack.sample(i)
        record = records[i]
        assert sample.key == expected.key
        assert list(sample.speakers) == expected.speakers
        assert record["line"] == expected.line
        assert int(pack.orig_sample_rate[i]) == expected.rate == record["orig_sample_rate"]
        targets = at_rate(expected.targets, expected.rate, sample_rate)
        frames = targets.shape[1]
        assert abs(frames - expected.targets.shape[1] * sample_rate / expected.rate) <= 1
        assert int(pack.num_frames[i]) == frames == record["num_frames"]
        assert record["duration"] == pytest.approx(frames / sample_rate)
        stream = "target" if expected.mix is not None else "source"
        for slot, segment in enumerate(record["streams"][stream]):
            if expected.rate == sample_rate:
                # Same-rate PCM_16 sources: bit-exact, no scale.
                assert segment["scale"] == 1.0
                np.testing.assert_array_equal(sample.targets[slot], targets[slot].astype(np.float32),
                                              err_msg=f"{expected.key} target {slot}")
            else:
                assert_close_to(sample.targets[slot], targets[slot], segment["scale"], f"{expected.key} target {slot}")
        if expected.mix is None:
            assert sample.mix is None
            continue
        mix = at_rate(expected.mix, expected.rate, sample_rate)
        (mix_segment,) = record["streams"]["mix"]
        assert mix_segment["channels"] == expected.mix.shape[0]
        assert sample.mix.shape == mix.shape
        if expected.rate == sample_rate and mix_segment["scale"] == 1.0:
            np.testing.assert_array_equal(sample.mix, mix.astype(np.float32), err_msg=f"{expected.key} mix")
        else:
            assert_close_to(sample.mix, mix, mix_segment["scale"], f"{expected.key} mix")


# ---------------------------------------------------------------------------------------------------------------
# CLI happy path
# ---------------------------------------------------------------------------------------------------------------


def test_cli_builds_pocketsphinx_mixtures(real_audio, wesep_list, tmp_path):
    a, b, c, d = real_audio("pocketsphinx", 4)
    case = wesep_list([Mix("mixA", (a, b)), Mix("mixB", (c, d), start=0.5), Mix("mixC", (b, c), subtype="PCM_16")])
    out = tmp_path / "pack"
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(case.list_path), "--out", str(out),
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "packed 3 samples" in result.stdout
    assert "4 speakers" in result.stdout
    assert "1 shard(s)" in result.stdout
    assert str(out) in result.stdout
    assert "skipped" not in result.stdout
    assert (out / "dataset.json").is_file()
    assert not (out / "skipped.json").exists()
    check_readback(out, case)


def test_cli_summary_counts_shards(real_audio, wesep_list, tmp_path):
    a, b, c = real_audio("pocketsphinx", 3)
    # 1.5 s x 16 kHz x (mix + 2 targets) x 2 bytes = 144 kB per sample: a 200 kB shard holds one sample.
    case = wesep_list([Mix(f"m{i}", (a, b) if i % 2 else (b, c), start=0.1 * i) for i in range(3)])
    out = tmp_path / "pack"
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(case.list_path), "--out", str(out),
                                       "--shard-size", "200KB", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "packed 3 samples" in result.stdout
    assert "3 shard(s)" in result.stdout
    assert json.loads((out / "dataset.json").read_text())["provenance"]["options"]["shard_bytes"] == 200_000


def test_cli_sample_rate_and_workers(real_audio, wesep_list, tmp_path):
    """--sample-rate 8000 downsamples the 16 kHz recordings; --workers 2 gives the same pack as the default."""
    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("m1", (a, b)), Mix("m2", (b, c))])
    outputs = []
    for extra in ([], ["--workers", "2"]):
        out = tmp_path / f"pack{len(outputs)}"
        result = CliRunner().invoke(main, ["build", "wesep", "--list", str(case.list_path), "--out", str(out),
                                           "--sample-rate", "8000", "--no-progress", *extra])
        assert result.exit_code == 0, result.output
        outputs.append(out)
    pack = open_pack(outputs[0])
    assert pack.sample_rate == 8000 and list(pack.num_frames) == [12000, 12000]
    assert list(pack.orig_sample_rate) == [16000, 16000]
    expected = at_rate(case.lines[0].targets, 16000, 8000)
    assert np.max(np.abs(pack.sample(0).targets - expected)) <= 1 / FULL_SCALE
    assert pack_files(outputs[0]) == pack_files(outputs[1])


def test_cli_rejects_bad_flags(real_audio, wesep_list, tmp_path):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("mixA", (a, b))])
    runner = CliRunner()
    for flags, message in ((["--shard-size", "12 parsecs"], "cannot read size"), (["--workers", "0"], "--workers"),
                           (["--sample-rate", "0"], "--sample-rate")):
        result = runner.invoke(main, ["build", "wesep", "--list", str(case.list_path), "--out",
                                      str(tmp_path / "pack"), *flags])
        assert result.exit_code == 2, (flags, result.output)
        assert message in result.stderr
    assert not (tmp_path / "pack").exists()


# ---------------------------------------------------------------------------------------------------------------
# Read-back on every corpus, 2 and 3 speakers
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("speakers", [2, 3])
@pytest.mark.parametrize("corpus", ["pocketsphinx", "alsa", "codec2"])
def test_mixtures_read_back_equal_to_sources(corpus, speakers, real_audio, wesep_list, tmp_path):
    paths = real_audio(corpus, speakers + 1)
    seconds = 1.0 if corpus == "alsa" else 1.5  # alsa clips are 1.3-1.5 s long
    case = wesep_list([
        Mix("m0", tuple(paths[:speakers]), seconds=seconds, start=0.1),
        Mix("m1", tuple(paths[1:speakers + 1]), seconds=seconds, start=0.2, subtype="PCM_16"),
    ])
    summary = build(case, tmp_path / "pack")
    assert summary.manifest.kind == "tse"
    assert summary.manifest.sample_rate == RATE
    assert summary.manifest.totals["speakers"] == speakers + 1
    check_readback(tmp_path / "pack", case)
    for record in all_records(tmp_path / "pack"):
        assert record["orig_sample_rate"] == corpus_rate(corpus)
        assert len(record["streams"]["target"]) == speakers
        assert record["provenance"]["src"] == case.by_key()[record["key"]].record["src"]


def test_resampled_48k_matches_soxr_and_is_close_to_the_source(real_audio, wesep_list, tmp_path):
    """48 kHz -> 16 kHz: the stored target is soxr's output, and that is the source's 0-8 kHz band."""
    import soxr

    a, b = real_audio("alsa", 2)
    case = wesep_list([Mix("m", (a, b), seconds=1.2, start=0.05)])
    build(case, tmp_path / "pack")
    sample = open_pack(tmp_path / "pack").sample(0)
    source = case.lines[0].targets[0]  # 57600 samples at 48 kHz
    reference = soxr.resample(source.astype(np.float32), 48000, RATE)
    assert len(source) == 57600 and sample.targets.shape == (2, len(reference)) == (2, 19200)
    assert np.abs(sample.targets[0] - reference).max() <= 1 / FULL_SCALE
    # Independent of soxr: the sources are speech, most of their energy is below 8 kHz, so decimating the
    # 48 kHz source by 3 lands near the resampled signal (well within the source's own level).
    decimated = source[::3]
    residual = np.sqrt(np.mean((sample.targets[0, 10:-10] - decimated[10:-10]) ** 2))
    assert residual < 0.25 * np.sqrt(np.mean(source ** 2))


def test_codec2_upsampled_8k_to_16k(real_audio, wesep_list, tmp_path):
    paths = real_audio("codec2", 3)  # includes the mu-law cross.wav
    assert "cross" in paths[2]
    case = wesep_list([Mix("m", tuple(paths), seconds=1.0, start=0.3)])
    build(case, tmp_path / "pack")
    pack = open_pack(tmp_path / "pack")
    assert int(pack.num_frames[0]) == 16000  # 8000 frames at 8 kHz, twice as many at 16 kHz
    assert int(pack.orig_sample_rate[0]) == 8000
    check_readback(tmp_path / "pack", case)


@pytest.mark.parametrize("layout", ["two_files", "stereo"])
@pytest.mark.parametrize("corpus", ["pocketsphinx", "alsa"])
def test_multichannel_mixture(corpus, layout, real_audio, wesep_list, tmp_path):
    a, b, c = real_audio(corpus, 3)
    case = wesep_list([Mix("mc", (a, b, c), seconds=1.0, start=0.1, layout=layout)])
    build(case, tmp_path / "pack")
    sample = open_pack(tmp_path / "pack").sample(0)
    assert sample.mix.shape[0] == 2
    (segment,) = shard_index(tmp_path / "pack")["samples"][0]["streams"]["mix"]
    assert segment["channels"] == 2 and segment["length"] == sample.mix.shape[1]
    check_readback(tmp_path / "pack", case)
    # The channels are not swapped: channel 0 is the plain sum of the targets.
    if corpus == "pocketsphinx":
        np.testing.assert_allclose(sample.mix[0], sample.targets.sum(axis=0), atol=2 * segment["scale"] / FULL_SCALE)
    record = shard_index(tmp_path / "pack")["samples"][0]
    assert record["provenance"]["mix"] == case.lines[0].record["mix"]["default"]


def test_target_is_first_channel_of_first_src_file(real_audio, wesep_list, tmp_path):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m", (a, b), src_stereo=True)])
    build(case, tmp_path / "pack")
    sample = open_pack(tmp_path / "pack").sample(0)
    expected = case.lines[0].targets.astype(np.float32)
    np.testing.assert_array_equal(sample.targets, expected)  # channel 0, not the reversed channel 1
    assert not np.array_equal(sample.targets[0], expected[0][::-1])
    # The full src lists (including the unused second files) are kept as provenance.
    record = shard_index(tmp_path / "pack")["samples"][0]
    assert record["provenance"]["src"] == case.lines[0].record["src"]
    assert all(len(files) == 2 for files in record["provenance"]["src"].values())


def test_relative_paths_resolved_against_root_and_kept_as_listed(real_audio, wesep_list, tmp_path):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m", (a, b))])
    root = case.list_path.parent
    record = case.lines[0].record
    relative = {
        "key": "m",
        "spk": record["spk"],
        "mix": {"default": [os.path.relpath(p, root) for p in record["mix"]["default"]]},
        "src": {spk: [os.path.relpath(p, root) for p in files] for spk, files in record["src"].items()},
    }
    relative_list = tmp_path / "relative.list"
    relative_list.write_text(json.dumps(relative) + "\n")
    summary = build_wesep(str(relative_list), BuildOptions(out=str(tmp_path / "pack"), progress=False),
                          root=str(root))
    assert summary.manifest.provenance["options"]["root"] == str(root)
    stored = shard_index(tmp_path / "pack")["samples"][0]["provenance"]
    assert stored["mix"] == relative["mix"]["default"]
    assert stored["src"] == relative["src"]
    np.testing.assert_array_equal(open_pack(tmp_path / "pack").sample(0).targets,
                                  case.lines[0].targets.astype(np.float32))


# ---------------------------------------------------------------------------------------------------------------
# Sources packs (single-speaker lines)
# ---------------------------------------------------------------------------------------------------------------


def test_sources_pack_from_single_speaker_lines(real_audio, wesep_list, tmp_path):
    ps = real_audio("pocketsphinx", 2)
    alsa = real_audio("alsa", 1)
    codec = real_audio("codec2", 1)
    case = wesep_list([Source("ps0", ps[0]), Source("ps1", ps[1]), Source("alsa0", alsa[0], seconds=1.0),
                       Source("c2", codec[0])])
    summary = build(case, tmp_path / "pack")
    manifest = summary.manifest
    assert manifest.kind == "sources"
    assert [s.name for s in manifest.streams] == ["source"]
    assert manifest.totals["samples"] == 4 and manifest.totals["speakers"] == 4
    pack = open_pack(tmp_path / "pack")
    assert [int(r) for r in pack.orig_sample_rate] == [16000, 16000, 48000, 8000]
    for i in range(len(pack)):
        sample = pack.sample(i)
        assert sample.mix is None
        assert sample.targets.shape[0] == 1
    check_readback(tmp_path / "pack", case)


# ---------------------------------------------------------------------------------------------------------------
# Determinism and sharding
# ---------------------------------------------------------------------------------------------------------------


def test_workers_1_and_2_give_byte_identical_packs(real_audio, wesep_list, tmp_path):
    ps = real_audio("pocketsphinx", 3)
    alsa = real_audio("alsa", 2)
    codec = real_audio("codec2", 2)
    case = wesep_list([
        Mix("a", (ps[0], ps[1]), seconds=1.0),
        Mix("b", tuple(alsa), seconds=1.0, layout="stereo"),
        Mix("c", tuple(codec), seconds=1.0, subtype="PCM_16"),
        Mix("d", (ps[1], ps[2]), seconds=1.0, gain=2.5),
        Mix("e", tuple(ps), seconds=1.0, layout="two_files"),
        Mix("f", (ps[2], ps[0]), seconds=1.0, start=1.0),
    ])
    # Small shards, so that shard boundaries are part of what must not depend on the worker count.
    build(case, tmp_path / "w1", workers=1, shard_bytes=150_000)
    build(case, tmp_path / "w2", workers=2, shard_bytes=150_000)
    one, two = pack_files(tmp_path / "w1"), pack_files(tmp_path / "w2")
    assert len([name for name in one if name.endswith("index.json")]) > 1
    assert sorted(one) == sorted(two)
    for name in one:
        assert one[name] == two[name], f"{name} differs between --workers 1 and --workers 2"


def test_rebuild_is_byte_identical(real_audio, wesep_list, tmp_path):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m", (a, b), seconds=1.0)])
    build(case, tmp_path / "pack")
    first = pack_files(tmp_path / "pack")
    build(case, tmp_path / "pack", overwrite=True)
    assert pack_files(tmp_path / "pack") == first


def test_small_shard_size_gives_several_shards_and_never_splits_a_sample(real_audio, wesep_list, tmp_path):
    ps = real_audio("pocketsphinx", 4)
    # Samples of 96 000 - 144 000 bytes of payload (1-1.5 s, 2 targets + a mono mixture) against 250 kB shards.
    case = wesep_list([Mix(f"m{i}", (ps[i % 4], ps[(i + 1) % 4]), seconds=1.0 + 0.1 * (i % 6), start=0.1 * i)
                       for i in range(7)])
    shard_bytes = 250_000
    summary = build(case, tmp_path / "pack", shard_bytes=shard_bytes)
    manifest = json.loads((tmp_path / "pack" / "dataset.json").read_text())
    shards = manifest["shards"]
    assert len(shards) >= 3
    assert sum(shard["samples"] for shard in shards) == manifest["totals"]["samples"] == 7
    assert summary.manifest.num_samples == 7
    keys, payloads, first_sample_bytes = [], [], []
    for shard in shards:
        directory = tmp_path / "pack" / shard["directory"]
        index = shard_index(tmp_path / "pack", shard["directory"])
        assert index["shard"] == shard["directory"] and len(index["samples"]) == shard["samples"] >= 1
        payload = 0
        for stream in ("mix", "target"):
            array = np.load(directory / f"{stream}.npy", mmap_mode="r")
            cursor = 0
            for record in index["samples"]:
                for segment in record["streams"][stream]:
                    # Each segment lies inside this shard's file, right after the previous one.
                    assert segment["offset"] == cursor
                    cursor += segment["channels"] * segment["length"]
                    assert segment["length"] == record["num_frames"]
            assert cursor == array.size  # nothing of a sample spills over into the next shard
            payload += array.nbytes
        # A shard closes before the sample that would push it past the limit (unless it holds one sample).
        assert payload <= shard_bytes or shard["samples"] == 1
        payloads.append(payload)
        first_sample_bytes.append(2 * 3 * index["samples"][0]["num_frames"])  # mono mix + 2 targets, int16
        keys.extend(record["key"] for record in index["samples"])
    assert keys == [line.key for line in case.lines]  # input order, across shards
    # Each shard but the last closed only because the next sample did not fit.
    for payload, next_bytes in zip(payloads, first_sample_bytes[1:]):
        assert payload + next_bytes > shard_bytes
    check_readback(tmp_path / "pack", case)


# ---------------------------------------------------------------------------------------------------------------
# Scale, statistics, manifest
# ---------------------------------------------------------------------------------------------------------------


def test_mixture_above_full_scale_is_scaled_not_clipped(real_audio, wesep_list, tmp_path):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("loud", (a, b), gain=4.0), Mix("quiet", (a, b), gain=1.0, start=0.4)])
    mix = case.lines[0].mix
    expected_peak = np.abs(mix).max()
    assert expected_peak > 1.0  # the fixture really wrote a float mixture past full scale
    build(case, tmp_path / "pack")
    loud, quiet = all_records(tmp_path / "pack")
    (segment,) = loud["streams"]["mix"]
    scale = segment["scale"]
    assert scale > 1.0
    # Large enough: both extremes fit int16 (+32767, -32768) after dividing by the scale ...
    assert np.rint(mix.max() * FULL_SCALE / scale) <= 32767
    assert np.rint(mix.min() * FULL_SCALE / scale) >= -32768
    # ... and the smallest such factor: one of the extremes lands on the edge of the int16 range.
    smallest = max(mix.max() * FULL_SCALE / 32767, -mix.min())
    assert scale == pytest.approx(smallest, rel=1e-6)
    assert quiet["streams"]["mix"][0]["scale"] == 1.0
    sample = open_pack(tmp_path / "pack").sample(0)
    assert np.abs(sample.mix).max() == pytest.approx(expected_peak, abs=segment["scale"] / FULL_SCALE)
    assert_close_to(sample.mix, case.lines[0].mix, segment["scale"], "loud mix")
    # The targets of the loud line were not affected.
    assert all(s["scale"] == 1.0 for s in loud["streams"]["target"])


def test_resampled_peak_over_full_scale_is_scaled(make_wav, write_list, tmp_path):
    """A full-scale square wave overshoots when resampled (Gibbs); the packer must scale, not clip."""
    frames = 48000
    square = np.where((np.arange(frames) // 240) % 2 == 0, 32767, -32767).astype(np.int16)
    path = make_wav("square.wav", rate=48000, data=square)
    list_path = write_list([{"key": "sq", "spk": ["s"], "src": {"s": [path]}}])
    build_wesep(str(list_path), BuildOptions(out=str(tmp_path / "pack"), progress=False))
    record = shard_index(tmp_path / "pack")["samples"][0]
    (segment,) = record["streams"]["source"]
    expected = at_rate(square[None, :].astype(np.float64) / FULL_SCALE, 48000, RATE)
    assert np.abs(expected).max() > 1.0
    assert segment["scale"] > 1.0
    sample = open_pack(tmp_path / "pack").sample(0)
    assert_close_to(sample.targets, expected, segment["scale"], "resampled square")


def test_full_scale_int16_source_round_trips_bit_exactly(make_wav, write_list, tmp_path):
    """int16 is asymmetric: -32768 and +32767 both fit, so a full-scale PCM_16 file needs no scale."""
    data = np.array([-32768, 32767, 0, -1, 1, 12345, -32768], dtype=np.int16)
    path = make_wav("full.wav", data=np.tile(data, 100))
    list_path = write_list([{"key": "full", "spk": ["s"], "src": {"s": [path]}}])
    build_wesep(str(list_path), BuildOptions(out=str(tmp_path / "pack"), progress=False))
    assert shard_index(tmp_path / "pack")["samples"][0]["streams"]["source"][0]["scale"] == 1.0
    stored = np.load(tmp_path / "pack" / "shard-000000" / "source.npy")
    np.testing.assert_array_equal(stored, np.tile(data, 100))
    np.testing.assert_array_equal(open_pack(tmp_path / "pack").sample(0).targets[0],
                                  np.tile(data, 100).astype(np.float32) / np.float32(FULL_SCALE))


def test_statistics_match_the_decoded_stored_audio(real_audio, wesep_list, tmp_path):
    ps = real_audio("pocketsphinx", 3)
    alsa = real_audio("alsa", 2)
    case = wesep_list([Mix("a", tuple(ps), seconds=1.0, gain=3.0), Mix("b", tuple(alsa), seconds=1.0),
                       Mix("c", (ps[0], ps[1]), seconds=1.0, layout="stereo")])
    build(case, tmp_path / "pack")
    pack = open_pack(tmp_path / "pack")
    checked = 0
    for record in all_records(tmp_path / "pack"):
        for stream, segments in record["streams"].items():
            stored = np.load(tmp_path / "pack" / "shard-000000" / f"{stream}.npy")
            for segment in segments:
                raw = stored[segment["offset"]:segment["offset"] + segment["channels"] * segment["length"]]
                # Exact decode (float64) of the stored int16 ...
                decoded = raw.astype(np.float64) * segment["scale"] / FULL_SCALE
                mean = decoded.mean()
                centred = decoded - mean
                assert segment["mean"] == pytest.approx(mean, rel=1e-9, abs=1e-12)
                assert segment["rms"] == pytest.approx(np.sqrt(np.mean(centred ** 2)), rel=1e-9)
                assert segment["peak"] == pytest.approx(np.abs(centred).max(), rel=1e-9)
                checked += 1
    assert checked == (1 + 3) + (1 + 2) + (1 + 2)  # one mix segment and one target per speaker, per sample
    # ... and what the reader hands out (float32) gives the same statistics to float32 precision.
    for i in range(len(pack)):
        for j in pack.segments_of("mix", i):
            decoded = pack.read_segment("mix", j).astype(np.float64)
            centred = decoded - decoded.mean()
            table = pack.streams["mix"]
            assert table.mean[j] == pytest.approx(decoded.mean(), rel=1e-5, abs=1e-9)
            assert table.rms[j] == pytest.approx(np.sqrt(np.mean(centred ** 2)), rel=1e-5)
            assert table.peak[j] == pytest.approx(np.abs(centred).max(), rel=1e-5)


def test_dataset_json_fields(real_audio, wesep_list, tmp_path):
    a, b, c = real_audio("pocketsphinx", 3)
    alsa = real_audio("alsa", 2)
    case = wesep_list([Mix("a", (a, b)), Mix("b", (b, c), seconds=1.0), Mix("c", tuple(alsa), seconds=1.0)])
    out = tmp_path / "pack"
    build(case, out, shard_bytes=200_000)
    text = (out / "dataset.json").read_text(encoding="utf-8")
    manifest = json.loads(text)
    # sorted keys, one-space indent, trailing newline: equal packs have equal bytes
    assert text == json.dumps(manifest, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    assert set(manifest) == {"format", "format_version", "format_minor", "kind", "sample_rate", "streams",
                             "shards", "totals", "provenance", "columns", "skipped"}
    assert manifest["format"] == "speechpack"
    assert manifest["format_version"] == 1
    assert manifest["format_minor"] == 0
    assert manifest["kind"] == "tse"
    assert manifest["sample_rate"] == RATE
    assert manifest["streams"] == [
        {"name": "mix", "dtype": "<i2", "row_shape": [], "file": "mix.npy"},
        {"name": "target", "dtype": "<i2", "row_shape": [], "file": "target.npy"},
    ]
    assert [s["directory"] for s in manifest["shards"]] == [f"shard-{i:06d}" for i in range(len(manifest["shards"]))]
    assert len(manifest["shards"]) >= 2
    total_bytes = 0
    for shard in manifest["shards"]:
        directory = out / shard["directory"]
        assert sorted(shard["files"]) == sorted(os.listdir(directory)) == ["index.json", "mix.npy", "target.npy"]
        for name, entry in shard["files"].items():
            data = (directory / name).read_bytes()
            assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            total_bytes += len(data)
    frames = sum(r["num_frames"] for r in all_records(out))
    assert manifest["totals"] == {
        "samples": 3,
        "hours": pytest.approx(frames / RATE / 3600),
        "speakers": len({s for line in case.lines for s in line.speakers}),
        "bytes": total_bytes,
    }
    assert manifest["totals"]["hours"] == frames / RATE / 3600
    list_bytes = case.list_path.read_bytes()
    assert manifest["provenance"] == {
        "input": {"path": os.path.abspath(case.list_path), "sha256": hashlib.sha256(list_bytes).hexdigest()},
        "tool": "speechpack",
        "tool_version": version("speechpack"),
        "command": "build wesep",
        "options": {"sample_rate": RATE, "shard_bytes": 200_000, "skip_bad": False},
    }
    assert manifest["skipped"] == {"count": 0}
    assert manifest["columns"]["directory"] == "columns"
    assert sorted(manifest["columns"]["files"]) == sorted(os.listdir(out / "columns")) == [
        "keys.npy", "mix.npy", "samples.npy", "speakers.npy", "target.npy"]
    for name, entry in manifest["columns"]["files"].items():
        data = (out / "columns" / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    # Nothing else in the pack: no skipped.json, no temporary debris.
    assert sorted(os.listdir(out)) == ["columns", "dataset.json"] + [s["directory"] for s in manifest["shards"]]
    # The library's Manifest reads what it wrote.
    assert open_pack(out).manifest.to_dict() == manifest


# ---------------------------------------------------------------------------------------------------------------
# Opening packs, overwriting
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def small_pack(real_audio, wesep_list, tmp_path) -> Path:
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m", (a, b), seconds=1.0)])
    build(case, tmp_path / "pack")
    return tmp_path / "pack"


def test_open_pack_refuses_unknown_major_version(small_pack):
    path = small_pack / "dataset.json"
    manifest = json.loads(path.read_text())
    manifest["format_version"] = 2
    path.write_text(json.dumps(manifest))
    with pytest.raises(PackFormatError, match=r"format_version 2 is not supported.*reads format_version 1"):
        open_pack(small_pack)


def test_open_pack_refuses_directory_without_dataset_json(small_pack, tmp_path):
    assert len(open_pack(small_pack)) == 1
    (small_pack / "dataset.json").unlink()
    with pytest.raises(PackFormatError, match="not a pack"):
        open_pack(small_pack)
    (tmp_path / "empty").mkdir()
    with pytest.raises(PackFormatError, match="no dataset.json"):
        open_pack(tmp_path / "empty")
    with pytest.raises(PackFormatError, match="no such pack directory"):
        open_pack(tmp_path / "absent")


def test_overwrite_needed_for_a_non_empty_out_dir(real_audio, wesep_list, tmp_path):
    a, b, c = real_audio("pocketsphinx", 3)
    first = wesep_list([Mix("old", (a, b), seconds=1.0)], name="first.list")
    second = wesep_list([Mix("new", (b, c), seconds=1.0)], name="second.list")
    out = tmp_path / "pack"
    build(first, out)
    before = pack_files(out)
    with pytest.raises(SpeechpackError, match="not empty; pass --overwrite"):
        build(second, out)
    assert pack_files(out) == before  # the refusal touched nothing
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(second.list_path), "--out", str(out),
                                       "--no-progress"])
    assert result.exit_code == 1
    assert "--overwrite" in result.stderr
    build(second, out, overwrite=True)
    assert [open_pack(out).sample(0).key] == ["new"]
    check_readback(out, second)


@pytest.mark.parametrize("foreign", ["notes.txt", "shard-notes.txt", ".tmp-notes.txt", "shards"])
def test_overwrite_refuses_to_delete_foreign_files(small_pack, wesep_list, real_audio, foreign):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("new", (b, a), seconds=1.0)], name="new.list")
    (small_pack / foreign).write_text("mine")
    before = pack_files(small_pack)
    with pytest.raises(SpeechpackError, match=rf"lists \({re.escape(foreign)}\); refusing to build into it"):
        build(case, small_pack, overwrite=True)
    assert pack_files(small_pack) == before  # nothing deleted, the user's file included
    assert open_pack(small_pack).sample(0).key == "m"  # the old pack is still whole


def test_overwrite_refuses_pack_like_names_no_record_lists(small_pack, wesep_list, real_audio):
    """Issue 13: a name that looks like a pack entry is not enough; the old pack's manifest does not list these
    (a build records its plan before writing, so its own debris is always listed)."""
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("new", (b, a), seconds=1.0)], name="new.list")
    (small_pack / ".tmp-shard-000003").mkdir()
    (small_pack / ".tmp-shard-000003" / "mix.npy").write_bytes(b"half")
    (small_pack / ".tmp-dataset.json").write_text("{")
    (small_pack / "shard-000007").mkdir()
    with pytest.raises(SpeechpackError, match=r"\(.tmp-shard-000003/mix.npy, shard-000007\)"):
        build(case, small_pack, overwrite=True)
    (small_pack / ".tmp-shard-000003" / "mix.npy").unlink()
    (small_pack / ".tmp-shard-000003").rmdir()
    (small_pack / "shard-000007").rmdir()
    build(case, small_pack, overwrite=True)
    assert sorted(os.listdir(small_pack)) == ["columns", "dataset.json", "shard-000000"]
    assert open_pack(small_pack).sample(0).key == "new"
