"""Loader tasks (``loader.tasks``): the config's ``task`` selects how packs become batches; filters are reported."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from speechpack import loader
from speechpack.loader.config import ConfigError, LoaderConfig
from speechpack.loader.tse.args import DatasetArgs
from speechpack.loader.tasks import TASK_MODULES, task, task_module
from factories.tse import RATE, config, frames_list, mixture


def test_default_task_is_tse_and_unknown_tasks_are_named():
    parsed = LoaderConfig.from_dict({"packs": [{"path": "x"}]})
    assert parsed.task == "tse" and isinstance(parsed.dataset_args, DatasetArgs)
    with pytest.raises(ConfigError, match=r"config.task: 'vad' is not one of tse, asd, asr"):
        LoaderConfig.from_dict({"packs": [{"path": "x"}], "task": "vad"})
    with pytest.raises(ConfigError, match="config.task"):
        LoaderConfig.from_dict({"packs": [{"path": "x"}], "task": 3})


def test_an_unset_mainline_is_left_out_of_the_resume_fingerprint():
    """``mainline`` came after the first release: unset, it is not hashed, so older states still resume."""
    plain = LoaderConfig.from_dict({"packs": [{"path": "x"}]})
    assert "mainline" not in task("tse").fingerprint_args(asdict(plain.dataset_args))
    recipe = LoaderConfig.from_dict({"packs": [{"path": "x"}], "dataset_args": {"mainline": {"joint_training": True}}})
    assert task("tse").fingerprint_args(asdict(recipe.dataset_args))["mainline"]["joint_training"] is True


def test_only_the_configs_task_reads_its_recipe_dialects():
    """The config's task (default tse) alone reads recipe dialects: an asd config with a trainer's sections is an
    asd config, not a WeSep recipe."""
    sections = {"dataloader_args": {"num_workers": 2}, "model_args": {"tse_model": {"joint_training": True}}}
    asd = LoaderConfig.from_dict({"task": "asd", "packs": [{"path": "x"}], **sections})
    assert asd.dialect is None and asd.dataloader.num_workers == 2 and asd.ignored == ("model_args",)
    assert LoaderConfig.from_dict({"packs": [{"path": "x"}], **sections}).dialect == "wesep-mainline"


def test_every_task_module_provides_the_interface():
    for name in TASK_MODULES:
        module = task_module(name)
        assert callable(module.parse_dataset_args) and callable(module.prepare), name


def test_filtered_items_are_reported_by_reason(tse_pack):
    lengths = frames_list(6, 4000, 40000, seed=3)
    path, _ = tse_pack("p", [mixture(f"m{i}", n) for i, n in enumerate(lengths)])
    cfg = config(path, whole_utt=True, filter_len=True, filter_len_args={"min_num_seconds": 1.0})
    report = loader.build_loader(cfg, "train").report()
    too_short = sum(n < RATE for n in lengths)  # under min_num_seconds
    assert report.filtered == too_short and report.items == len(lengths) - too_short
    assert report.filter_report == ({"filter_len": too_short} if too_short else {})
