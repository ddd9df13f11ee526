"""Mainline WeSep's single-speaker JSON lines (``{key, wav, spk}``: ``parse_raw_single_spk``, the raw form of the
tars ``make_shard_online.py`` writes) pack as their tar form does: a ``sources`` pack with the same streams and
``columns/``, alone or with mainline's ``spk2enroll.json``; a malformed line is named by file, line and key."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from factories.recordings import pack_files
from factories.wesep_mainline import online_split
from speechpack.cli import main
from speechpack.packer.adapters.wesep_lines import read_wesep_list
from speechpack.packer.adapters.wesep_shards import write_shards


def single_spk_list(split: Path, facts: dict) -> Path:
    """``raw.list`` of the split's utterances as mainline's JSON lines, in the tars' order, with an extra key."""
    path = split / "raw.list"
    path.write_text("".join(json.dumps({"key": key, "wav": wav, "spk": spk, "duration": 1.2}) + "\n"
                            for spk, utts in facts["spk2enroll"].items() for key, wav in utts), encoding="utf-8")
    return path


def build(*args: str) -> str:
    result = CliRunner().invoke(main, ["build", "wesep", *args, "--no-progress"])
    assert result.exit_code == 0, result.output
    return result.output


def same_pack_but_provenance(a: Path, b: Path) -> None:
    """Every file equal (streams, ``columns/``, cues) but ``dataset.json`` and ``index.json``, whose sample records
    differ only in ``provenance``."""
    files_a, files_b = pack_files(a), pack_files(b)
    assert sorted(files_a) == sorted(files_b)
    compared = [n for n in files_a if not n.endswith(("dataset.json", "index.json"))]
    assert any(n.startswith("columns/") for n in compared) and any(n.endswith(".npy") for n in compared)
    for name in compared:
        assert files_a[name] == files_b[name], name
    for name in files_a:
        if name.endswith("index.json"):
            index_a, index_b = (json.loads(f[name]) for f in (files_a, files_b))
            for x, y in zip(index_a["samples"], index_b["samples"]):
                x.pop("provenance"), y.pop("provenance")
            assert index_a == index_b


def test_single_speaker_json_lines_pack_like_their_tar_shards(real_audio, tmp_path):
    recordings = real_audio("pocketsphinx", 3)
    split = tmp_path / "vox"
    facts = online_split(split, recordings)
    raw = single_spk_list(split, facts)
    build("--list", str(raw), "--out", str(tmp_path / "json"))
    build("--list", str(split / "shard.list"), "--out", str(tmp_path / "tar"))
    same_pack_but_provenance(tmp_path / "json", tmp_path / "tar")
    dataset = json.loads((tmp_path / "json" / "dataset.json").read_text())
    assert dataset["kind"] == "sources" and dataset["totals"]["samples"] == 9
    first = json.loads((tmp_path / "json" / "shard-000000" / "index.json").read_text())["samples"][0]
    assert first["provenance"] == {"wav": facts["spk2enroll"]["id10000"][0][1], "extra": {"duration": 1.2}}
    # with mainline's enrollments, as the tar form takes them: the same audio cue too
    enroll = str(split / "spk2enroll.json")
    build("--list", str(raw), "--enroll", enroll, "--out", str(tmp_path / "json-enroll"))
    build("--list", str(split / "shard.list"), "--enroll", enroll, "--out", str(tmp_path / "tar-enroll"))
    same_pack_but_provenance(tmp_path / "json-enroll", tmp_path / "tar-enroll")
    assert any(n.startswith("cues/") for n in pack_files(tmp_path / "json-enroll"))
    # and the tars written from the JSON lines are the tar form
    shard_list = write_shards(str(raw), str(tmp_path / "written"))
    build("--list", shard_list, "--out", str(tmp_path / "written-pack"))
    same_pack_but_provenance(tmp_path / "json", tmp_path / "written-pack")


def test_malformed_single_speaker_lines_are_named(real_audio, tmp_path):
    [wav] = real_audio("pocketsphinx", 1)
    lines = [{"key": "ok", "wav": wav, "spk": "s1"},
             {"key": "nowav", "spk": "s1", "wav": ""},
             {"key": "nospk", "wav": wav},
             {"key": "listspk", "wav": wav, "spk": ["s1"]},
             {"key": "both", "wav": wav, "spk": "s1", "src": {"s1": [wav]}},
             {"wav": wav, "spk": "s1"}]
    raw = tmp_path / "raw.list"
    raw.write_text("".join(json.dumps(line) + "\n" for line in lines))
    listed = read_wesep_list(str(raw))
    assert [parsed.key for parsed in listed.lines] == ["ok"]
    assert [(p.line, p.key) for p in listed.problems] == [(2, "nowav"), (3, "nospk"), (4, "listspk"), (5, "both"),
                                                          (6, None)]
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(raw), "--out", str(tmp_path / "pack"),
                                       "--no-progress"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    for expected in (
            "line 2: key 'nowav': key 'wav' of a single-speaker line (key, wav, spk) must be a non-empty string, "
            "got ''",
            "line 3: key 'nospk': missing key 'spk' (a single-speaker line holds key, wav, spk)",
            "line 4: key 'listspk': key 'spk' of a single-speaker line (key, wav, spk) must be a non-empty "
            "string, got ['s1']",
            "line 5: key 'both': a line with 'wav' is mainline's single-speaker line (key, wav, spk) and has no "
            "'src'",
            "line 6: key 'key' must be a non-empty string, got None"):
        assert expected in result.output, result.output
    assert str(raw) in result.output
