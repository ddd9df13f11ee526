"""Numeric build options are refused out of range before any input is read, with the option named and exit status 2
(``schemas.units``): the CLI declares each range on its option and the library checks it again when the options
are made.  Numbers reach allocators and C libraries (soxr, numpy, pyroomacoustics) that fail badly outside what
audio needs.  No recordings needed: every command here stops at its options.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.errors import SpeechpackError

pytestmark = pytest.mark.fast


def options(out: Path, **kwargs) -> BuildOptions:
    kwargs.setdefault("progress", False)
    return BuildOptions(out=str(out), **kwargs)


def source(key: str, spk: str, path: str) -> dict:
    return {"key": key, "spk": [spk], "src": {spk: [path]}}


def write_lines(path: Path, lines: list) -> Path:
    with open(path, "w", encoding="utf-8") as fp:
        fp.writelines(json.dumps(line) + "\n" for line in lines)
    return path


@pytest.mark.parametrize("args, option", [
    (["--sample-rate", "1000000000000"], "--sample-rate"),
    (["--sample-rate", "1e12"], "--sample-rate"),
    (["--sample-rate", "0"], "--sample-rate"),
    (["--workers", "100000"], "--workers"),
    (["--shard-size", "99999TB"], "--shard-size"),
])
def test_build_options_out_of_range_are_refused_up_front(args, option, tmp_path):
    listed = write_lines(tmp_path / "raw.list", [source("a", "s", "/nonexistent.wav")])
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(listed), "--out", str(tmp_path / "p"), *args])
    assert result.exit_code == 2, result.output
    assert option in result.output and "Traceback" not in result.output
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("args, option", [
    (["--simulate", "1000000000"], "--simulate"),
    (["--simulate", "2", "--rt60", "0.1", "1e9"], "--rt60"),
    (["--simulate", "2", "--room-max", "8", "6", "1e7"], "--room-max"),
    (["--simulate", "2", "--distance", "0.5", "inf"], "--distance"),
    (["--simulate", "2", "--seed", "-1"], "--seed"),
])
def test_audio_bank_simulation_ranges(args, option, tmp_path):
    result = CliRunner().invoke(main, ["build", "audio-bank", "--kind", "rir", "--out", str(tmp_path / "p"), *args])
    assert result.exit_code == 2, result.output
    assert option in result.output


@pytest.mark.parametrize("args, option", [(["--window", "1e9"], "--window"), (["--overlap", "1e9"], "--overlap"),
                                          (["--workers", "0"], "--workers")])
def test_asd_build_ranges(args, option, tmp_path):
    result = CliRunner().invoke(main, ["build", "msdwild", "--input", str(tmp_path), "--out", str(tmp_path / "p"),
                                       *args])
    assert result.exit_code == 2, result.output
    assert option in result.output


def test_library_checks_the_same_ranges(tmp_path):
    for kwargs, option in (({"sample_rate": 10**12}, "--sample-rate"), ({"sample_rate": 16000.5}, "--sample-rate"),
                           ({"workers": 10**6}, "--workers"), ({"shard_bytes": 10**15}, "--shard-size")):
        with pytest.raises(SpeechpackError, match=option):
            options(tmp_path / "p", **kwargs)
