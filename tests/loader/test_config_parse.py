"""A loader config is parsed once: every key checked once, naming its config path, and the task looked up once,
then held by the config for everything that asks for it (the fingerprint, the DataLoader settings, the loader)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from speechpack.loader import config as config_module
from speechpack.loader.config import ConfigError, LoaderConfig, PackSource, dataloader_settings
from speechpack.loader.tasks import task

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

_CHECKS = ("_check_pack_entry", "_check_packs_weighting", "_check_weighting", "_check_per_epoch", "task_of")


@pytest.fixture
def calls(monkeypatch):
    """How often each of the config's checks and the task lookup ran."""
    counts: Counter = Counter()
    for name in _CHECKS:
        real = getattr(config_module, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            counts[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(config_module, name, counted)
    return counts


def test_a_config_is_checked_once_and_its_task_looked_up_once(calls):
    config = LoaderConfig.from_dict({"packs": [{"path": "/nowhere/a", "weight": 1}, {"path": "/nowhere/b", "weight": 2}],
                                     "weighting": {"epoch_items": 10}, "dataset_args": {"batch_size": 2}})
    assert calls == {"_check_pack_entry": 2, "_check_packs_weighting": 1, "_check_weighting": 1,
                     "_check_per_epoch": 1, "task_of": 1}
    assert config.loader_task is task("tse")
    dataloader_settings(config)
    assert calls["task_of"] == 1  # the config holds its task


def test_a_config_of_another_task_holds_that_task(calls):
    config = LoaderConfig.from_dict({"packs": [{"path": "/nowhere/a"}], "task": "asd"})
    assert config.loader_task is task("asd") and calls["task_of"] == 1


def test_a_config_built_in_code_is_still_checked_naming_its_fields():
    with pytest.raises(ConfigError, match="LoaderConfig.task"):
        LoaderConfig(packs=(PackSource("/nowhere/a"),), task="nope")
    with pytest.raises(ConfigError, match="PackSource.path"):
        PackSource("")
    config = LoaderConfig(packs=(PackSource("/nowhere/a"),))
    assert config.loader_task is task("tse")
    assert replace(config, task="asd").loader_task is task("asd")


def test_a_parsed_config_equals_the_one_built_in_code():
    parsed = LoaderConfig.from_dict({"packs": [{"path": "/nowhere/a", "repeat": 2}]})
    built = LoaderConfig(packs=(PackSource("/nowhere/a", repeat=2.0),), dataset_args=parsed.dataset_args)
    assert parsed == built
