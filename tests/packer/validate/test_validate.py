"""``speechpack validate``: every check finds what it is for, names the file, and a good pack passes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from factories import Mix
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.validate.pack import validate_pack

pytestmark = pytest.mark.real_data


@pytest.fixture
def built_pack(tmp_path, wesep_list, real_audio):
    """A real two-shard tse pack with one skipped line (so skipped.json exists too)."""
    librivox = real_audio("pocketsphinx", 4)
    case = wesep_list([
        Mix("m1", tuple(librivox[:2])),
        Mix("m2", tuple(librivox[1:4]), layout="stereo"),
        Mix("m3", (librivox[0], librivox[3])),
        '{"key": "broken", "spk": ["a"]',
    ])
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=150_000, skip_bad=True, progress=False))
    return out


def _errors(pack: Path, **kwargs) -> list[str]:
    return [str(issue) for issue in validate_pack(str(pack), **kwargs).errors]


def test_a_fresh_pack_is_valid_and_summarised(built_pack, tmp_path):
    report_path = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["validate", str(built_pack), "--json", str(report_path)])
    assert result.exit_code == 0, result.output
    assert "OK   " in result.output and "all packs valid" in result.output
    assert "3 samples" in result.output and "duration s" in result.output and "rms dBFS" in result.output
    report = json.loads(report_path.read_text())
    assert report["ok"] is True
    summary = report["packs"][0]["summary"]
    assert summary["samples"] == 3 and summary["shards"] >= 2 and summary["skipped"] == 1
    assert set(summary["levels"]) == {"mix", "target"}
    assert summary["duration_s"]["p50"] == pytest.approx(1.5)


def _shard_files(pack: Path) -> list[Path]:
    return sorted(p for p in pack.rglob("*") if p.is_file() and p.name != "dataset.json")


def test_a_flipped_byte_in_any_file_fails_naming_that_file(built_pack, tmp_path):
    files = _shard_files(built_pack)
    assert {p.name for p in files} >= {"index.json", "mix.npy", "target.npy", "skipped.json"}
    for file in files:
        copy = tmp_path / f"flip-{file.parent.name}-{file.name}"
        shutil.copytree(built_pack, copy)
        target = copy / file.relative_to(built_pack)
        data = bytearray(target.read_bytes())
        position = len(data) // 2  # in the samples of an .npy, inside a record of a JSON file
        data[position] ^= 0x01
        target.write_bytes(bytes(data))
        errors = _errors(copy)
        assert errors, f"flipping a byte of {file} went unnoticed"
        assert any(str(target) in e for e in errors), errors


def test_without_hashes_corrupted_samples_still_fail_the_statistics(built_pack):
    target = built_pack / "shard-000000" / "target.npy"
    data = bytearray(target.read_bytes())
    data[200] ^= 0x40  # a high bit of one stored sample
    target.write_bytes(bytes(data))
    errors = _errors(built_pack, check_hashes=False)
    assert any("recomputed" in e and str(target) in e for e in errors), errors
    assert not any("sha256" in e for e in errors)


def test_truncated_npy_is_reported(built_pack):
    target = built_pack / "shard-000000" / "mix.npy"
    target.write_bytes(target.read_bytes()[:-1])
    errors = _errors(built_pack, check_hashes=False)
    assert any(str(target) in e and "truncated" in e for e in errors), errors


def _edit_index(pack: Path, shard: str, edit) -> Path:
    path = pack / shard / "index.json"
    index = json.loads(path.read_text())
    edit(index["samples"])
    path.write_text(json.dumps(index))
    return path


def test_non_contiguous_offsets_and_duplicate_keys(built_pack):
    def shift(samples):
        samples[-1]["streams"]["target"][-1]["offset"] += 3

    path0 = _edit_index(built_pack, "shard-000000", shift)
    first_key = json.loads(path0.read_text())["samples"][0]["key"]

    def duplicate(samples):
        samples[0]["key"] = first_key

    _edit_index(built_pack, "shard-000001", duplicate)
    errors = _errors(built_pack, check_hashes=False)
    assert any("must be contiguous" in e for e in errors), errors
    assert any("duplicate key" in e and first_key in e for e in errors), errors


def test_tampered_statistics_are_reported(built_pack):
    def louder(samples):
        samples[0]["streams"]["mix"][0]["rms"] *= 2

    path = _edit_index(built_pack, "shard-000000", louder)
    errors = _errors(built_pack, check_hashes=False)
    assert any("rms recorded" in e and str(path.parent / "mix.npy") in e for e in errors), errors


def test_layout_problems_are_collected_together(built_pack):
    (built_pack / "shard-000000" / "stray.bin").write_bytes(b"x")
    shutil.copytree(built_pack / "shard-000001", built_pack / "shard-000099")
    shutil.rmtree(built_pack / "shard-000001")
    errors = _errors(built_pack)
    assert any("stray.bin" in e and "not listed" in e for e in errors)
    assert any("shard-000099" in e and "not listed" in e for e in errors)
    assert any("shard-000001" in e and "missing" in e for e in errors)
    assert any("totals.samples" in e for e in errors)


def test_not_a_pack_and_unknown_version(built_pack, tmp_path):
    manifest = json.loads((built_pack / "dataset.json").read_text())
    manifest["format_version"] = 2
    (built_pack / "dataset.json").write_text(json.dumps(manifest))
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["validate", str(built_pack), str(empty)])
    assert result.exit_code == 1
    assert "format_version 2 is not supported; this speechpack reads format_version 1" in result.output
    assert "not a pack (no dataset.json" in result.output
    assert "2 error(s) in 2 pack(s)" in result.output


def test_leftover_temp_directory_is_a_warning_not_an_error(built_pack):
    os.makedirs(built_pack / ".tmp-shard-000005")
    report = validate_pack(str(built_pack))
    assert report.ok
    assert any(".tmp-shard-000005" in str(w) for w in report.warnings)


def test_columns_must_agree_with_the_shard_indexes(built_pack):
    import numpy as np

    keys_path = built_pack / "columns" / "keys.npy"
    keys = np.load(keys_path)
    keys[0] = b"m9"  # same width, same file size: only the comparison with index.json can tell
    np.save(keys_path, keys)
    errors = _errors(built_pack, check_hashes=False)
    assert any(str(keys_path) in e and "disagrees with the shard indexes" in e for e in errors), errors
    (built_pack / "columns" / "extra.npy").write_bytes(b"")
    assert any("extra.npy" in e and "not listed" in e for e in _errors(built_pack, check_hashes=False))
