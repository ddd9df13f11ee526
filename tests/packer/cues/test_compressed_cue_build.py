"""Cue banks written with the build's ``--codec`` (real recordings): the enrollment audio is encoded in the build's
workers, the same bytes whatever ``--workers`` is, the choice recorded in provenance like the pack audio's, and an
enrollment a codec cannot store is a cue problem naming the cue, key and file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from factories import pack_files
from factories.cue_corpus import cue
from speechpack.cli import main
from speechpack.loader.pack import open_pack
from speechpack.schemas.constants import MINOR_DEFLATED_COLUMNS


def cues(corpus) -> dict:
    return {"audio": cue(corpus.resources["by_speaker"], "random", "spk_id"),
            "spatial": cue(corpus.resources["track"], fields=["azimuth", "elevation"])}


@pytest.mark.parametrize("codec", ["flac", "opus"])
def test_compressed_cue_banks_are_byte_identical_whatever_the_workers(corpus, codec):
    one = Path(corpus.build(f"{codec}-1", cues(corpus), codec=codec, block_seconds=0.3, workers=1))
    two = Path(corpus.build(f"{codec}-2", cues(corpus), codec=codec, block_seconds=0.3, workers=2))
    first = {rel: data for rel, data in pack_files(one).items() if rel.startswith("cues/")}
    assert {"cues/audio/blocks.npy", "cues/audio/digests.npy"} <= set(first)
    assert first == {rel: data for rel, data in pack_files(two).items() if rel.startswith("cues/")}
    manifest = json.loads((one / "dataset.json").read_text())
    assert manifest["format_minor"] == MINOR_DEFLATED_COLUMNS  # a codec: digests, so deflated columns too
    options = manifest["provenance"]["options"]
    assert (options["codec"], options["block_frames"]) == (codec, 4800)


def test_build_wesep_codec_options_reach_the_cue_bank(corpus, tmp_path):
    import yaml

    yaml_path = tmp_path / "cues.yaml"
    yaml_path.write_text(yaml.safe_dump({"cues": cues(corpus)}), encoding="utf-8")
    out = tmp_path / "pack"
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(corpus.case.list_path), "--cues",
                                       str(yaml_path), "--out", str(out), "--codec", "opus", "--opus-bitrate",
                                       "16000", "--block-seconds", "0.5", "--no-progress"])
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "cues/audio/meta.json").read_text())
    assert (meta["codec"], meta["block_frames"], meta["digests"]) == ("opus", 8000, "blake2b-128")
    bank = open_pack(str(out)).cues["audio"]
    assert [bank.read(i).shape[1] for i in range(bank.num_items)] == \
        [int(bank.field("length", i)) for i in range(bank.num_items)]
