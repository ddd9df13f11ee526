"""How a loader config may be written and still mean one thing: ``verify_streams: off`` as docs/loader.md writes it
(YAML reads it as a boolean), and one pack listed once however its path is spelled (docs/loader.md, "Config")."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader.config import ConfigError, LoaderConfig, PackSource, pack_identity
from speechpack.schemas.yaml_document import parse_yaml

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")


@pytest.mark.parametrize("written, mode", [
    ("off", "off"), ("false", "off"), ("no", "off"), ("'off'", "off"),
    ("on", "first-map"), ("true", "first-map"), ("yes", "first-map"),
    ("first-map", "first-map"), ("every-open", "every-open"),
])
def test_verify_streams_reads_yaml_booleans_as_modes(written, mode):
    config = parse_yaml(f"packs: [{{path: /nowhere/p}}]\nverify_streams: {written}\n", "train.yaml")
    assert LoaderConfig.from_dict(config).verify_streams == mode


def test_verify_streams_still_refuses_other_values():
    for value in ("never", 0, 1, None):
        with pytest.raises(ConfigError, match="config.verify_streams"):
            LoaderConfig.from_dict({"packs": [{"path": "/nowhere/p"}], "verify_streams": value})


def _spellings(pack: str, tmp_path) -> list[str]:
    """Other paths of ``pack``: a trailing slash, a detour through ``..``, a relative path and a symlink."""
    link = tmp_path / "link"
    link.symlink_to(pack, target_is_directory=True)
    parent, name = os.path.split(pack)
    return [pack + "/", os.path.join(parent, "..", os.path.basename(parent), name), os.path.relpath(pack),
            str(link)]


def test_the_same_pack_listed_twice_is_refused_naming_both_entries(four_items, tmp_path):
    for other in [four_items, *_spellings(four_items, tmp_path)]:
        with pytest.raises(ConfigError) as caught:
            LoaderConfig.from_dict({"packs": [{"path": four_items}, {"path": "/nowhere/else"}, {"path": other}]})
        message = str(caught.value)
        assert message.startswith("config.packs[0] and config.packs[2] are the same pack"), message
        assert repr(other) in message and "repeat: 2" in message


def test_objects_built_directly_refuse_a_repeated_pack_too(four_items, tmp_path):
    with pytest.raises(ConfigError, match=r"LoaderConfig.packs\[0\] and LoaderConfig.packs\[1\] are the same pack"):
        LoaderConfig(packs=(PackSource(four_items), PackSource(_spellings(four_items, tmp_path)[-1])))


def test_urls_that_differ_only_in_spelling_are_one_pack():
    assert pack_identity("s3://bucket/packs/train/") == pack_identity("s3://bucket/packs//x/../train")
    assert pack_identity("s3://bucket/packs/train") != pack_identity("s3://bucket/packs/val")
    assert pack_identity("s3://bucket/p") != pack_identity("gs://bucket/p")


def test_distinct_packs_and_repeat_still_plan(four_items, tmp_path, make_wav, write_list):
    """``repeat: 2`` is how a pack is read twice an epoch, and ``plan`` counts it so."""
    config = tmp_path / "train.yaml"
    config.write_text(f"packs: [{{path: {four_items}, repeat: 2}}]\ndataset_args: {{chunk_len: 4000}}\n",
                      encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(config)])
    assert result.exit_code == 0, result.output
    assert "2.000 epochs consumed" in result.output


def test_plan_refuses_a_pack_given_twice_on_the_command_line(four_items, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("dataset_args: {chunk_len: 4000}\nmodel: BSRNN\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(recipe), "--pack", four_items, "--pack", four_items + "/"])
    assert result.exit_code == 1
    assert "error: config.packs[0] and config.packs[1] are the same pack" in result.output


def test_paths_that_cannot_be_looked_up_are_compared_as_written():
    """A name no file can have (a NUL byte) or an absent directory is no traceback: compared by its spelling."""
    assert pack_identity("a\0b") == pack_identity("a\0b") != pack_identity("a\0c")
    assert pack_identity("/nowhere/x/") == pack_identity("/nowhere/x")
