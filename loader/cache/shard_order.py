"""Shard windows (``dataset_args.shard_window: N``): an epoch order that reads each shard's files at one place.

A whole-epoch shuffle touches every shard at random: from a store with a cache smaller than the pack, a shard's
files are evicted and fetched again many times per epoch (where each request costs more than its bytes, reading
only the samples' ranges does not help either).  This order shuffles the shards (keyed by seed and epoch), cuts
that order into windows of ``N`` shards, and shuffles the items within each window; the plan then batches and
deals that order as always (consecutive batches to consecutive ranks, the batch order kept), so every rank works
through the same window at the same time and a cache of about a window's files fetches each file once per epoch
(the block shuffles of MosaicML Streaming's ``py1b``/``py1br`` follow the same idea).  The order is a permutation
of the units, so exactly-once and equal steps per rank hold as with the plain shuffle.

The order is a function of (config, the packs' contents, seed, epoch, world size) alone: it applies to local
packs and packs by URL alike and never reads ``cache.limit``, so the same config deals the same batches wherever
the pack lies and whatever the node's disk, and resume states move between them.  The window is a
``dataset_args`` key (``loader.config_keys.SHARD_WINDOW``), hashed into a resume state's fingerprint only while
set (states of the whole-epoch shuffle keep theirs).  It applies to unweighted epochs (a weighted epoch draws
items, repeats included, before the order exists) and to shuffled states (``shuffle: false`` keeps the packs'
order).

``cache: {shard_order: true}`` is its deprecated spelling: it stands for ``shard_window: ALIAS_WINDOW`` (16
shards, whatever the limit) and warns (``with_shard_order_alias``).  ``speechpack plan`` reports both orders at
the configured limit (``loader.plan.planning_report``); ``window_for_limit`` is the window it suggests there.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np

from speechpack.loader.config_checks import ConfigError
from speechpack.loader.plan.static_plan import NO_SHUFFLE

#: The window ``cache: {shard_order: true}`` (deprecated) stands for, in shards: fixed, so the order never
#: depends on the cache's limit (the alias once sized its window from half the smallest limit).
ALIAS_WINDOW = 16


@dataclass(frozen=True)
class ShardWindows:
    """The ``shuffle_windows`` of a planning view (``loader.plan.static_plan.ShuffleWindows``' interface):
    ``unit_shard[u]`` is unit ``u``'s shard, numbered across the packs; ``window`` shards are shuffled together."""

    unit_shard: np.ndarray
    window: int
    #: Batches keep the order their items came in (a batch shuffle would scatter the windows again).
    batch: int = NO_SHUFFLE

    def item_order(self, count: int, rng: np.random.Generator) -> np.ndarray:
        if count != len(self.unit_shard):
            raise ConfigError(f"dataset_args.shard_window: the plan orders {count} units, the shard map has "
                              f"{len(self.unit_shard)}")
        shards = int(self.unit_shard.max()) + 1 if count else 0
        rank_of_shard = np.empty(shards, dtype=np.int64)
        rank_of_shard[rng.permutation(shards)] = np.arange(shards)
        window_of_unit = rank_of_shard[self.unit_shard] // self.window
        return np.lexsort((rng.random(count), window_of_unit)).astype(np.int64)


def with_shard_order_alias(config):
    """``config`` (a ``LoaderConfig``) with the deprecated ``cache.shard_order: true`` written as
    ``dataset_args.shard_window: ALIAS_WINDOW`` (a ``FutureWarning`` says so), so the alias and the key give one
    plan and one fingerprint; a ``shard_window`` the config sets wins.  Any other config is returned as is."""
    cache = config.cache
    if cache is None or not cache.shard_order:
        return config
    given = config.dataset_args.shard_window
    warnings.warn(f"cache.shard_order is deprecated: it stands for dataset_args.shard_window: {ALIAS_WINDOW} "
                  f"(shards, whatever cache.limit); write that key instead"
                  + (f" (dataset_args.shard_window: {given} is set and used)" if given is not None else ""),
                  FutureWarning, stacklevel=3)
    cache = dataclasses.replace(cache, shard_order=False)
    if given is not None:
        return dataclasses.replace(config, cache=cache)
    return dataclasses.replace(config, cache=cache,
                               dataset_args=dataclasses.replace(config.dataset_args, shard_window=ALIAS_WINDOW))


def unit_shards(packs: list, builder) -> np.ndarray | None:
    """Every planning unit's shard, numbered across ``packs`` in order (None: the task has no item index)."""
    units = builder.units.samples()
    if units is None:
        return None
    unit_pack, unit_sample = (np.asarray(a, dtype=np.int64) for a in units)
    first = np.cumsum([0] + [len(p.manifest.shards) for p in packs])
    shard_of = (np.concatenate([np.asarray(p.shard, dtype=np.int64) for p in packs]) if packs
                else np.zeros(0, np.int64))
    sample_base = np.cumsum([0] + [len(p) for p in packs])
    return (first[unit_pack] + shard_of[sample_base[unit_pack] + unit_sample]).astype(np.int64)


def shard_windows(packs: list, builder, window: int | None, weighted: bool) -> ShardWindows | None:
    """The shard-window order of ``builder``'s units over ``packs`` (wherever they lie) for a window of ``window``
    shards (None: no such order, the whole-epoch shuffle)."""
    if window is None:
        return None
    if weighted:
        raise ConfigError("dataset_args.shard_window: applies to unweighted epochs (no weight, hours_beta, repeat, "
                          "choose or sample_num_per_epoch)")
    unit_shard = unit_shards(packs, builder)
    if unit_shard is None:
        raise ConfigError("dataset_args.shard_window: this task's builder has no item index to order by shard")
    shards = sum(len(p.manifest.shards) for p in packs)
    # A window of every shard or more is one order (clamped here; the fingerprint holds the key as written).
    return ShardWindows(unit_shard=unit_shard, window=max(1, min(window, shards)))


def window_for_limit(packs: list, limit: int | None) -> int:
    """The window ``speechpack plan`` suggests for a cache of ``limit`` bytes: as many of the packs' largest
    shards as fit half of it (every shard without a limit), at least one.  A suggestion only: the order never
    reads the limit."""
    shard_bytes = max((sum(f.size for f in shard.files.values()) for p in packs for shard in p.manifest.shards),
                      default=1)
    shards = max(1, sum(len(p.manifest.shards) for p in packs))
    if limit is None:
        return shards
    return max(1, min(shards, limit // 2 // max(shard_bytes, 1)))


def planning_view(args, order: ShardWindows | None):
    """The planning view ``plan_epoch`` reads (a ``loader.tasks.PlanArgs``): the task's own, with the shard
    windows as its ``shuffle_windows`` when the config asks for them."""
    return args if order is None else dataclasses.replace(args, shuffle_windows=order)


__all__ = ["ALIAS_WINDOW", "ShardWindows", "planning_view", "shard_windows", "unit_shards", "window_for_limit",
           "with_shard_order_alias"]
