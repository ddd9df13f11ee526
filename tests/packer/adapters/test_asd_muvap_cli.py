"""MuVAP's command-line spellings on the asd builds (``--output``, ``--max-shard-gb``, MSDWild's
``--overlap-seconds``) and ``--keep-tail``, on corpora made from the real talking-face video."""

from __future__ import annotations

import json

from click.testing import CliRunner

from factories.asd_inputs import write_ava, write_msdwild
from speechpack.cli import main
from speechpack.loader.pack import open_pack


def test_output_and_max_shard_gb_are_muvaps_spellings(tmp_path):
    inputs = write_ava(tmp_path / "AVA")
    out = tmp_path / "elsewhere"
    result = CliRunner().invoke(main, ["build", "ava", "--loader", str(inputs.loader_csv), "--visual-root",
                                       str(inputs.visual_root), "--audio-root", str(inputs.audio_root), "--split",
                                       "train", "--output", str(out), "--max-shard-gb", "0.0014", "--no-progress"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["provenance"]["options"]["shard_bytes"] == 1_400_000  # round(0.0014 * 1e9)
    assert len(manifest["shards"]) == 2  # tracks of 0.59, 0.65 and 0.73 MB: the first two fit under 1.4 MB
    assert len(open_pack(str(out))) == 3
    both = CliRunner().invoke(main, ["build", "ava", "--loader", str(inputs.loader_csv), "--visual-root",
                                     str(inputs.visual_root), "--audio-root", str(inputs.audio_root), "--split",
                                     "train", "--out", str(tmp_path / "x"), "--max-shard-gb", "1",
                                     "--shard-size", "1GB"])
    assert both.exit_code == 2 and "--max-shard-gb and --shard-size set the same limit" in both.output
    # without --output, MuVAP's default: <dataset root>/packed/<split>
    default = CliRunner().invoke(main, ["build", "wasd", "--loader", str(inputs.loader_csv), "--visual-root",
                                        str(inputs.visual_root), "--audio-root", str(inputs.audio_root), "--split",
                                        "train", "--no-progress"])
    assert default.exit_code == 0, default.output
    assert (tmp_path / "AVA" / "packed" / "train" / "dataset.json").is_file()


def test_msdwild_overlap_seconds_and_keep_tail(tmp_path):
    inputs = write_msdwild(tmp_path / "MSDWild")
    common = ["build", "msdwild", "--input", str(inputs.input_dir), "--window", "2", "--overlap-seconds", "0.5",
              "--no-progress"]
    result = CliRunner().invoke(main, [*common, "--output", str(tmp_path / "complete")])
    assert result.exit_code == 0, result.output
    assert list(open_pack(str(tmp_path / "complete")).keys) == ["00001:000000:0", "00001:000022:0"]
    result = CliRunner().invoke(main, [*common, "--output", str(tmp_path / "tail"), "--keep-tail"])
    assert result.exit_code == 0, result.output
    assert list(open_pack(str(tmp_path / "tail")).keys)[-1] == "00001:000044:0"
    manifest = json.loads((tmp_path / "tail" / "dataset.json").read_text())
    assert manifest["provenance"]["options"]["overlap_sec"] == 0.5 and manifest["provenance"]["options"]["keep_tail"]
    # a window longer than the video: nothing complete, and the error says how to keep the tail
    result = CliRunner().invoke(main, [*common[:4], "--window", "10", "--overlap-seconds", "0", "--output",
                                       str(tmp_path / "none")])
    assert result.exit_code == 1 and "--keep-tail keeps them" in result.output


def test_avcc_output_defaults_to_root_packed_split(tmp_path):
    from factories.asd_inputs import write_avcc

    inputs = write_avcc(tmp_path / "AVCC")
    base = ["build", "avcc", "--loader", str(inputs.tsv), "--root", str(inputs.root), "--no-progress"]
    missing = CliRunner().invoke(main, base)
    assert missing.exit_code == 1 and "give --out (MuVAP: --output), or --split" in missing.output
    result = CliRunner().invoke(main, [*base, "--split", "train"])
    assert result.exit_code == 0, result.output
    assert len(open_pack(str(tmp_path / "AVCC" / "packed" / "train"))) == 3
