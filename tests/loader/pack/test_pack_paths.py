"""Relative pack paths: read from the current directory (not the config file's), and an error about one says
which directory that was (docs/loader.md, "Pack paths")."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader.pack import open_pack
from speechpack.schemas.errors import PackFormatError

pytestmark = pytest.mark.fast


def test_a_missing_relative_pack_in_a_config_names_the_directory_it_was_read_from(tmp_path, monkeypatch):
    (tmp_path / "recipe" / "conf").mkdir(parents=True)
    config = tmp_path / "recipe" / "conf" / "train.yaml"
    config.write_text("packs:\n  - path: packs/train\ndataset_args: {batch_size: 2}\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(main, ["plan", str(config)])
    assert result.exit_code == 1
    assert (f"packs/train: no such pack directory (a relative path, read from the current directory {elsewhere})"
            in result.output)


def test_an_absolute_pack_path_needs_no_directory_in_its_error(tmp_path):
    with pytest.raises(PackFormatError) as err:
        open_pack(str(tmp_path / "missing"))
    assert str(err.value) == f"{tmp_path / 'missing'}: no such pack directory"


def test_a_relative_directory_that_is_not_a_pack_names_the_directory_too(tmp_path, monkeypatch):
    (tmp_path / "not-a-pack").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PackFormatError, match=f"read from the current directory {os.getcwd()}"):
        open_pack("not-a-pack")
