"""``dataset_args.shard_window``: the shard-window order as a plan option of a local pack (loader.cache.shard_order):
windows of shards dealt one after another, every item once, the fingerprint changed only while the key is set, the
deprecated ``cache.shard_order`` read as ``shard_window: 16``, and the planning view a plain ``PlanArgs``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from factories.tse import config, mixture
from speechpack.loader.cache.shard_order import ALIAS_WINDOW, planning_view, shard_windows, with_shard_order_alias
from speechpack.loader.config import ConfigError, LoaderConfig, loader_fingerprint
from speechpack.loader.pack import open_pack
from speechpack.loader.plan.epoch_plan import EVERY_RANK, plan_epoch
from speechpack.loader.tasks import PlanArgs, prepare
from speechpack.loader.tse.args import DatasetArgs

FAST_MODULE = True  # imports without torch: its tests marked fast join the tier (docs/testing.md)


@pytest.fixture
def sharded(tse_pack):
    """18 mixtures in small shards (several per pack), two packs."""
    a, _ = tse_pack("wa", [mixture(f"a{i:02d}", 4000 + 97 * i) for i in range(12)], shard_bytes=20_000)
    b, _ = tse_pack("wb", [mixture(f"b{i:02d}", 4000 + 89 * i) for i in range(6)], shard_bytes=20_000)
    return a, b


def _planned(cfg: dict, seed: int = 1, epoch: int = 0, world_size: int = 2):
    loader_config = with_shard_order_alias(LoaderConfig.from_dict(cfg, state="train"))
    packs = [open_pack(p.path) for p in loader_config.packs]
    prepared = prepare(loader_config, "train", packs, seed)
    order = shard_windows(packs, prepared.builder, loader_config.dataset_args.shard_window,
                          prepared.weighting is not None)
    args = planning_view(prepared.builder.plan_args, order)
    plan = plan_epoch(args, seed, epoch, EVERY_RANK, world_size, num_units=prepared.builder.units.count)
    return loader_config, packs, order, args, plan


def test_shard_windows_deal_a_local_packs_windows_one_after_another_every_item_once(sharded):
    _, packs, order, args, plan = _planned(config(*sharded, batch_size=2, shard_window=2))
    assert isinstance(args, PlanArgs) and args.shuffle_windows is order  # an explicit view, no proxy
    shards = sum(len(p.manifest.shards) for p in packs)
    assert shards >= 6 and order.window == 2
    items = np.asarray(plan.items)[np.asarray(plan.valid)]
    assert sorted(items.tolist()) == list(range(18)), "every item once"
    shard_of_item = order.unit_shard[items].tolist()
    # every window's shards are dealt together: the shards in the order they are first met, two at a time, are the
    # windows, and once the plan has left a window it never comes back to it
    met = list(dict.fromkeys(shard_of_item))
    window_of = {shard: i // 2 for i, shard in enumerate(met)}
    assert len(met) == shards
    assert (np.diff([window_of[s] for s in shard_of_item]) >= 0).all()


def test_the_shard_order_is_the_same_for_any_cache_setting_and_other_epochs_differ(sharded, tmp_path):
    base = config(*sharded, batch_size=2, shard_window=3)
    one = _planned({**base, "cache": {"dir": str(tmp_path / "a"), "limit": 1000}})[4]
    two = _planned({**base, "cache": {"dir": str(tmp_path / "b"), "limit": "1GB"}})[4]
    assert np.array_equal(one.items, two.items)
    other_epoch = _planned(base, epoch=1)[4]
    assert not np.array_equal(one.items, other_epoch.items)


def test_the_fingerprint_changes_only_while_shard_window_is_set(sharded):
    plain = LoaderConfig.from_dict(config(*sharded, batch_size=2), state="train")
    unset = LoaderConfig.from_dict(config(*sharded, batch_size=2, shard_window=None), state="train")
    three = LoaderConfig.from_dict(config(*sharded, batch_size=2, shard_window=3), state="train")
    four = LoaderConfig.from_dict(config(*sharded, batch_size=2, shard_window=4), state="train")
    packs = [open_pack(p) for p in sharded]
    prints = [loader_fingerprint(c, "train", packs) for c in (plain, unset, three, four)]
    assert prints[0] == prints[1] and len(set(prints[1:])) == 3


@pytest.mark.fast
def test_shard_window_is_checked_like_every_dataset_args_key():
    assert DatasetArgs.from_dict({"shard_window": 8}).shard_window == 8
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(ConfigError, match=r"dataset_args.shard_window"):
            DatasetArgs.from_dict({"shard_window": bad})


def test_the_deprecated_cache_shard_order_reads_as_shard_window_16(sharded, tmp_path):
    cfg = {**config(*sharded, batch_size=2), "cache": {"dir": str(tmp_path / "c"), "shard_order": True}}
    with pytest.warns(FutureWarning, match=f"dataset_args.shard_window: {ALIAS_WINDOW}"):
        aliased = _planned(cfg)
    keyed = _planned(config(*sharded, batch_size=2, shard_window=ALIAS_WINDOW))
    assert aliased[0].dataset_args.shard_window == ALIAS_WINDOW and not aliased[0].cache.shard_order
    assert np.array_equal(aliased[4].items, keyed[4].items)
    assert loader_fingerprint(aliased[0], "train", aliased[1]) == loader_fingerprint(keyed[0], "train", keyed[1])
    both = {**cfg, "dataset_args": {"batch_size": 2, "shard_window": 2}}
    with pytest.warns(FutureWarning, match="shard_window: 2 is set and used"):
        assert _planned(both)[2].window == 2


def test_shard_windows_are_refused_for_weighted_epochs(sharded):
    cfg = config(*sharded, batch_size=2, shard_window=2)
    cfg["packs"][0]["weight"], cfg["packs"][1]["weight"] = 2.0, 1.0
    with pytest.raises(ConfigError, match="dataset_args.shard_window: applies to unweighted epochs"):
        _planned(cfg)


def test_the_planning_view_is_the_tasks_own_without_shard_windows(sharded):
    _, _, order, args, _ = _planned(config(*sharded, batch_size=2))
    assert order is None and args == dataclasses.replace(args) and args.shuffle_windows is None
