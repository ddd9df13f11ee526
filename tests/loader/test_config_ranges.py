"""Every numeric loader config value has a range, checked when the config is parsed (docs/loader.md, "Config").

Before: ``batch_size: 1e18`` raised MemoryError even in ``speechpack plan`` (a dry run), ``1e21`` and
``max_frames: 1e26`` OverflowError.  Now each is a ``ConfigError`` naming the key, before any pack is opened or
any array allocated, and an args object built directly is checked the same way (``__post_init__``).
Covered here: the generic config (``packs`` entries, ``weighting``), the ASD and the ASR ``dataset_args``, the
shared checks, and the loader arguments ``seed``/``epoch``/``world_size``.  TSE's keys are in test_tse_args.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader.asd.args import AsdArgs
from speechpack.loader.asd.args import parse_dataset_args as parse_asd
from speechpack.loader.asr.args import AsrArgs
from speechpack.loader.asr.args import parse_dataset_args as parse_asr
from speechpack.loader.config import LoaderConfig, PackSource, Weighting
from speechpack.loader.config_checks import MAX_BATCH_ROWS, MAX_COUNT, MAX_DB, MAX_EPOCH_ITEMS, ConfigError, check_int, integer, number, positive_int, value_range
from speechpack.loader.plan.epoch_plan import MAX_ROUND_ROWS, PlanError, plan_epoch
from speechpack.loader.plan.weighting import pack_counts

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

HUGE = (10 ** 18, 10 ** 21, 10 ** 26)


def cfg(task: str = "tse", entries: list | None = None, weighting: dict | None = None, **dataset_args) -> dict:
    entries = entries or [{}, {}]
    out = {"task": task, "packs": [{"path": f"/nowhere/p{i}", **e} for i, e in enumerate(entries)],
           "dataset_args": dataset_args}
    if weighting is not None:
        out["weighting"] = weighting
    return out


# -- the dry run: a config error, not MemoryError/OverflowError, and no pack is opened ---------------------------


@pytest.mark.parametrize("dataset_args, key", [
    ({"batch_size": 10 ** 18}, "batch_size"),
    ({"batch_size": 10 ** 21}, "batch_size"),
    ({"batching": {"type": "budget", "max_frames": 10 ** 26}}, "batching.max_frames"),
])
def test_plan_dry_run_names_the_key(tmp_path, dataset_args, key):
    import yaml

    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg(**dataset_args)))
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 1, result.output
    assert f"config.dataset_args.{key}: must be" in result.output and "Traceback" not in result.output
    assert not isinstance(result.exception, (MemoryError, OverflowError))


# -- generic config ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entries, weighting, match", [
    ([{"choose": MAX_EPOCH_ITEMS + 1}, {}], None, r"config.packs\[0\].choose: must be at most"),
    ([{"repeat": 1e30}, {}], None, r"config.packs\[0\].repeat: must be a number in"),
    ([{"repeat": math.inf}, {}], None, r"config.packs\[0\].repeat"),
    ([{"weight": math.nan}, {"weight": 1}], None, r"config.packs\[0\].weight"),
    ([{"weight": 1e300}, {"weight": 1}], None, r"config.packs\[0\].weight: must be a number in"),
    ([{"weight": 1}, {"weight": 1}], {"epoch_items": 10 ** 21}, "config.weighting.epoch_items: must be at most"),
    ([{"hours_beta": True}, {"hours_beta": True}], {"beta_corpus": 1e30}, "config.weighting.beta_corpus"),
    ([{"hours_beta": True}, {"hours_beta": True}], {"beta_language": math.inf}, "config.weighting.beta_language"),
])
def test_generic_config_ranges(entries, weighting, match):
    with pytest.raises(ConfigError, match=match):
        LoaderConfig.from_dict(cfg(entries=entries, weighting=weighting))


def test_repeat_times_pack_size_is_bounded_before_allocating():
    with pytest.raises(ConfigError, match="items per epoch, more than"):
        pack_counts([10 ** 6, 5], repeats=[1e6, None], chooses=[None, None])


def test_generic_objects_built_directly_are_checked():
    with pytest.raises(ConfigError, match="PackSource.path"):
        PackSource(path="")
    with pytest.raises(ConfigError, match="PackSource: weight and repeat together"):
        PackSource(path="/p", weight=1.0, repeat=2.0)
    with pytest.raises(ConfigError, match="PackSource.choose: must be at most"):
        PackSource(path="/p", choose=MAX_EPOCH_ITEMS + 1)
    with pytest.raises(ConfigError, match="Weighting.beta_corpus: must be non-negative"):
        Weighting(beta_corpus=-1.0)
    with pytest.raises(ConfigError, match="Weighting.epoch_items: must be at most"):
        Weighting(epoch_items=10 ** 21)
    with pytest.raises(ConfigError, match="LoaderConfig.task: 'vad' is not one of"):
        LoaderConfig(packs=(PackSource(path="/p"),), task="vad")
    with pytest.raises(ConfigError, match="LoaderConfig.packs: a non-empty list"):
        LoaderConfig(packs=())
    with pytest.raises(ConfigError, match="LoaderConfig.packs: proportions are all or none"):
        LoaderConfig(packs=(PackSource(path="/a", weight=1.0), PackSource(path="/b")))
    with pytest.raises(ConfigError, match="LoaderConfig.weighting.epoch_items: only with weight"):
        LoaderConfig(packs=(PackSource(path="/a"),), weighting=Weighting(epoch_items=5))
    ok = LoaderConfig(packs=(PackSource(path="/a", weight=1.0), PackSource(path="/b", weight=2.0)),
                      weighting=Weighting(epoch_items=5))
    assert ok.weighted and ok.task == "tse"


# -- ASD --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, value, match", [
    ("frame_budget", 10 ** 26, "must be at most"),
    ("val_frame_budget", 10 ** 21, "must be at most"),
    ("max_batch", 10 ** 18, "must be at most"),
    ("min_batch", MAX_BATCH_ROWS + 1, "must be at most"),
    ("val_max_batch", 10 ** 18, "must be at most"),
    ("train_window", 10 ** 21, "must be at most"),
    ("hist_frames", 10 ** 21, "must be at most"),
    ("sort_window", 10 ** 26, "must be at most"),
    ("audio_mix_snr", [-1e30, 5], "must lie within"),
    ("audio_mix_snr", [0, math.inf], "expected finite"),
    ("audio_mix_prob", math.nan, "must be in"),
])
def test_asd_ranges(key, value, match):
    with pytest.raises(ConfigError, match=rf"d\.{key}: {match}"):
        parse_asd({key: value}, "d")


def test_asd_args_built_directly_are_checked():
    with pytest.raises(ConfigError, match="dataset_args.frame_budget: must be at most"):
        AsdArgs(frame_budget=10 ** 26)
    with pytest.raises(ConfigError, match="dataset_args.hist_frames: 250 leaves no scored frame"):
        AsdArgs(hist_frames=250)
    with pytest.raises(ConfigError, match="dataset_args.normalize"):
        AsdArgs(normalize="loud")
    assert AsdArgs(frame_budget=100).val_frame_budget == 400
    assert parse_asd({"frame_budget": MAX_COUNT, "max_batch": MAX_BATCH_ROWS}, "d").frame_budget == MAX_COUNT


# -- ASR --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, value", [
    ("batch_size", 10 ** 18), ("batch_size", 10 ** 21), ("num_seqs_multiple_of", MAX_BATCH_ROWS + 1),
    ("max_num_elements", 10 ** 26), ("max_audio_len", 10 ** 21), ("min_samples_per_char", 10 ** 21),
    ("spec_aug_freq_mask_param", 10 ** 21), ("spec_aug_time_mask_param", 10 ** 21),
    ("filter_long_text_threshold", 10 ** 21),
])
def test_asr_ranges(key, value):
    with pytest.raises(ConfigError, match=rf"d\.{key}: must be at most"):
        parse_asr({key: value}, "d")


def test_asr_args_built_directly_are_checked():
    with pytest.raises(ConfigError, match="dataset_args.batch_size: must be at most"):
        AsrArgs(batch_size=10 ** 18)
    with pytest.raises(ConfigError, match="dataset_args.spec_aug_p: must be in"):
        AsrArgs(spec_aug_p=2.0)
    with pytest.raises(ConfigError, match="dataset_args.batching_strategy"):
        AsrArgs(batching_strategy="BUCKET")
    assert parse_asr({"batch_size": MAX_BATCH_ROWS, "batching_strategy": "static"}, "d").batch_size == MAX_BATCH_ROWS


# -- shared checks and loader arguments -------------------------------------------------------------------------


def test_shared_checks_bound_every_number():
    assert positive_int(MAX_COUNT, "k") == MAX_COUNT
    for value in HUGE:
        with pytest.raises(ConfigError, match="k: must be at most"):
            positive_int(value, "k")
    with pytest.raises(ConfigError, match="k: must be a number in"):
        number(math.nan, "k", 0, 1)
    with pytest.raises(ConfigError, match="k: expected finite"):
        value_range([-math.inf, 0], "k")
    assert value_range([-MAX_DB, MAX_DB], "k") == (-MAX_DB, MAX_DB)
    assert integer(np.int64(3), "seed", 0, 5) == 3
    for bad in (True, 2.0, "3", None, 6, -1):
        with pytest.raises(ConfigError, match="seed must be an integer in"):
            integer(bad, "seed", 0, 5)


def test_an_int_too_long_to_print_is_a_config_error_naming_the_key():
    """``check_int`` shows the value cut short: a 5000-digit int (beyond Python's int-string limit) is a
    ``ConfigError`` naming the key, not a ``ValueError`` from printing it."""
    with pytest.raises(ConfigError, match=r"config.dataset_args.resample_rate: must be in \[1000, 384000\] Hz, got "
                                          r"<an integer of about 5001 digits>"):
        LoaderConfig.from_dict(cfg(resample_rate=10 ** 5000))
    with pytest.raises(ConfigError, match="dataset_args.batch_size: must be in .* got -7$"):
        check_int(-7, "dataset_args.batch_size", 1, MAX_BATCH_ROWS)


def test_a_pair_is_a_value_range_named_by_its_path_with_a_bounded_message():
    """A TSE args pair reads as any ``[low, high]`` key, named by the path it is given, and a huge non-pair value
    is shown cut short, not whole."""
    where = "cfg.dataset_args.mix_snr.range"
    assert value_range([-3, 5.5], where, -MAX_DB, MAX_DB) == (-3.0, 5.5)
    with pytest.raises(ConfigError, match=r"cfg\.dataset_args\.mix_snr\.range: must lie within") as caught:
        value_range([-1e30, 5], where, -MAX_DB, MAX_DB)
    with pytest.raises(ConfigError, match=r"mix_snr\.range: expected \[low, high\]") as caught:
        value_range(list(range(100_000)), where, -MAX_DB, MAX_DB)
    assert len(str(caught.value)) < 500


class _Static:
    batch_size = MAX_BATCH_ROWS
    batching = None
    shuffle = True
    tail = "pad"
    shuffle_windows = None
    sync = None


def test_batch_size_times_world_size_is_bounded_in_the_plan():
    with pytest.raises(PlanError, match=f"over {MAX_ROUND_ROWS} rows per round"):
        plan_epoch(_Static(), 0, 0, 0, 1 << 10, num_units=10)
