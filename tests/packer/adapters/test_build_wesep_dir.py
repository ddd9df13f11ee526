"""``speechpack build wesep --data-dir``: a WeSep split directory (samples.jsonl / raw.list / shard.list, cues.yaml,
spk2label.json) packed in one command, on real recordings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from factories import Mix, pack_files
from speechpack.loader import build_loader, open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.adapters.wesep import find_split
from speechpack.packer.adapters.wesep_shards import write_shards
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.errors import SpeechpackError

CUES_YAML = """cues:
  audio:
    type: wav
    format: waveform
    scope: speaker
    guaranteed: true
    policy: {type: fixed, key: spk_id, resource: %s}
%s"""
LABELS = "labels:\n  speaker_label: {resource: %s}\n"


def split_dir(tmp_path: Path, case, *, labels_in_cues: bool = True, raw_link: bool = True) -> Path:
    """A WeSep recipe's data/train: samples.jsonl, raw.list -> samples.jsonl, cues.yaml, cues/audio.json and
    spk2label.json, laid out as its recipes write them (resources named relative to the recipe directory)."""
    split = tmp_path / "data" / "train"
    (split / "cues").mkdir(parents=True)
    (split / "samples.jsonl").write_text(case.list_path.read_text(encoding="utf-8"), encoding="utf-8")
    if raw_link:
        os.symlink("samples.jsonl", split / "raw.list")
    speakers = sorted({spk for line in case.lines for spk in line.speakers})
    first = {}
    for line in case.lines:
        for spk in line.speakers:
            first.setdefault(spk, [{"utt_id": f"{line.key}/{spk}", "path": line.record["src"][spk][0]}])
    (split / "cues" / "audio.json").write_text(json.dumps(first), encoding="utf-8")
    (split / "spk2label.json").write_text(json.dumps({spk: i for i, spk in enumerate(speakers)}), encoding="utf-8")
    labels = LABELS % "data/train/spk2label.json" if labels_in_cues else ""
    (split / "cues.yaml").write_text(CUES_YAML % ("data/train/cues/audio.json", labels), encoding="utf-8")
    return split


@pytest.fixture
def case(real_audio, wesep_list):
    a, b, c = real_audio("pocketsphinx", 3)
    return wesep_list([Mix("mixA", (a, b)), Mix("mixB", (b, c), start=0.4), Mix("mixC", (a, c), start=0.2)])


def test_data_dir_builds_the_split_with_its_cues_and_labels(case, tmp_path, monkeypatch):
    split = split_dir(tmp_path, case)
    out = tmp_path / "pack"
    result = CliRunner().invoke(main, ["build", "wesep", "--data-dir", str(split), "--out", str(out),
                                       "--root", str(tmp_path), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert f"{split}: found samples.jsonl (raw list), cues.yaml, spk2label.json" in result.output
    assert "spk2label.json: packed through cues.yaml labels.speaker_label" in result.output
    pack = open_pack(str(out))
    speakers = sorted({spk for line in case.lines for spk in line.speakers})
    assert dict(pack.speaker_labels) == {spk: i for i, spk in enumerate(speakers)}
    loader = build_loader({"packs": [{"path": str(out)}], "dataset_args": {"cues": {"audio": {"use": True}},
                                                                           "batch_size": 3}}, "val")
    batch = next(iter(loader))
    assert batch["speaker_label"].tolist() == [speakers.index(spk) for spk in batch["spk"]]
    assert batch["audio_aux_present"].all()
    # the same pack as build wesep --list --cues gives
    monkeypatch.chdir(tmp_path)
    build_wesep(str(split / "samples.jsonl"), BuildOptions(out=str(tmp_path / "by_list"), progress=False),
                cues=str(split / "cues.yaml"))
    assert {k: v for k, v in pack_files(out).items() if k != "dataset.json"} == \
        {k: v for k, v in pack_files(tmp_path / "by_list").items() if k != "dataset.json"}


def test_raw_list_alone_and_labels_not_named_by_cues_yaml(case, tmp_path):
    split = split_dir(tmp_path, case, labels_in_cues=False, raw_link=False)
    (split / "samples.jsonl").rename(split / "raw.list")
    found = find_split(str(split))
    assert found.list_path.endswith("raw.list") and found.list_kind == "raw" and found.labels is None
    assert "spk2label.json: not packed (cues.yaml names no labels.speaker_label resource" in found.describe()


def test_shard_list_alone_builds_like_wesep_shards(case, tmp_path):
    split = tmp_path / "data" / "dev"
    split.mkdir(parents=True)
    shard_list = write_shards(str(case.list_path), str(split / "shards"), samples_per_shard=2)
    os.rename(shard_list, split / "shard.list")
    out = tmp_path / "pack"
    result = CliRunner().invoke(main, ["build", "wesep", "--data-dir", str(split), "--out", str(out),
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "found shard.list (shard list), no cues.yaml (no cues packed)" in result.output
    assert open_pack(str(out)).manifest.totals["samples"] == 3
    (split / "cues.yaml").write_text("cues: {}\n", encoding="utf-8")
    with pytest.raises(SpeechpackError, match="cues.yaml with only shard.list"):
        find_split(str(split))


def test_data_dir_problems_are_named(tmp_path):
    with pytest.raises(SpeechpackError, match="holds none of samples.jsonl, raw.list, shard.list"):
        find_split(str(tmp_path))
    with pytest.raises(SpeechpackError, match="not a directory"):
        find_split(str(tmp_path / "absent"))
    runner = CliRunner()
    result = runner.invoke(main, ["build", "wesep", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "give one of --list and --data-dir" in result.output
    result = runner.invoke(main, ["build", "wesep", "--data-dir", str(tmp_path), "--cues", "c.yaml",
                                  "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--data-dir uses the split's cues.yaml" in result.output
