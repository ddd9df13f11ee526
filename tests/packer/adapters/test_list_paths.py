"""Relative paths in a WeSep list, on real recordings: they are read from the current directory (WeSep's rule) or
from ``--root``; a list written relative to itself is refused with the ``--root`` that reads it, and a missing
relative file names where it was looked for."""

from __future__ import annotations

import json
import os

import soundfile
from click.testing import CliRunner

from speechpack.cli import main


def _relative_list(real_audio, directory) -> str:
    """A list whose mixture paths are relative to the list's own directory (as the demo writes them)."""
    a, b = real_audio("pocketsphinx", 2)
    os.makedirs(directory / "mix")
    paths = {}
    for name, path in (("s1", a), ("s2", b)):
        data, rate = soundfile.read(path, dtype="float32")
        paths[name] = data[:rate]
        soundfile.write(directory / "mix" / f"{name}.wav", paths[name], rate, subtype="FLOAT")
    soundfile.write(directory / "mix" / "mix.wav", paths["s1"] + paths["s2"], rate, subtype="FLOAT")
    line = {"key": "m1", "spk": ["s1", "s2"], "mix": {"default": ["mix/mix.wav"]},
            "src": {"s1": ["mix/s1.wav"], "s2": ["mix/s2.wav"]}}
    list_path = directory / "raw.list"
    list_path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return str(list_path)


def test_a_list_relative_to_itself_names_the_root(real_audio, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    list_path = _relative_list(real_audio, corpus)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["build", "wesep", "--list", "corpus/raw.list", "--out", "p1", "--no-progress"])
    assert result.exit_code == 1
    assert "relative audio path(s) not found from the current directory" in result.output
    assert f"mix/mix.wav -> {tmp_path / 'mix' / 'mix.wav'}" in result.output and "--root corpus" in result.output
    assert not (tmp_path / "p1").exists()
    ok = CliRunner().invoke(main, ["build", "wesep", "--list", "corpus/raw.list", "--root", "corpus", "--out", "p2",
                                   "--no-progress"])
    assert ok.exit_code == 0, ok.output
    monkeypatch.chdir(corpus)  # WeSep's rule: relative paths are read from the current directory
    here = CliRunner().invoke(main, ["build", "wesep", "--list", list_path, "--out", str(tmp_path / "p3"),
                                     "--no-progress"])
    assert here.exit_code == 0, here.output


def test_a_missing_relative_file_shows_where_it_was_looked_for(tmp_path, monkeypatch, write_list):
    list_path = write_list([{"key": "m1", "spk": ["a"], "src": {"a": ["nowhere/a.wav"]}}])
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(list_path), "--out", "p", "--no-progress"])
    assert result.exit_code == 1
    assert f"file not found (a relative path, looked for at {tmp_path / 'nowhere' / 'a.wav'})" in result.output
