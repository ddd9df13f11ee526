"""Shard-aware epoch order (``cache: {shard_order: true}``): an epoch that reads each cached file once.

A whole-epoch shuffle touches every shard at random: with a cache smaller than the pack, a shard's file is
evicted and fetched again many times per epoch.  This order shuffles the shards (keyed by seed and epoch), cuts
that order into windows of ``window`` shards that fit half the cache, and shuffles the items within each window;
the plan then batches and deals that order as always (consecutive batches to consecutive ranks, the batch order
kept), so every rank works through the same window at the same time and a window's files are fetched once per
epoch (the block shuffles of MosaicML Streaming's ``py1b``/``py1br`` follow the same idea).  The order is a
permutation of the units, so exactly-once and equal steps per rank hold as with the plain shuffle.

It is part of the plan, so its window is part of a resume state's fingerprint (``window_identity``): the window
the plan uses (at most the shard count), never the limit it came from, so another ``cache.limit`` that gives the
same plan resumes the same states.  It applies
to unweighted epochs (a weighted epoch draws items, repeats included, before the order exists).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.loader.cache.cached_files import CachedPackFiles
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.plan.static_plan import NO_SHUFFLE


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
            raise ConfigError(f"cache.shard_order: the plan orders {count} units, the shard map has "
                              f"{len(self.unit_shard)}")
        shards = int(self.unit_shard.max()) + 1 if count else 0
        rank_of_shard = np.empty(shards, dtype=np.int64)
        rank_of_shard[rng.permutation(shards)] = np.arange(shards)
        window_of_unit = rank_of_shard[self.unit_shard] // self.window
        return np.lexsort((rng.random(count), window_of_unit)).astype(np.int64)


class PlanningView:
    """A task's planning view (``args``) with ``shuffle_windows`` replaced, everything else read through."""

    def __init__(self, args, shard_order: ShardWindows):
        self._args = args
        self.shuffle_windows = shard_order

    def __getattr__(self, name):
        return getattr(self._args, name)


def shard_windows(packs: list, builder, weighted: bool) -> ShardWindows | None:
    """The shard-aware order of ``builder``'s units, when a cached pack's settings ask for it (else None); the
    window is as many shards as fit half the smallest limit (all of them without a limit)."""
    settings = [p.files.settings for p in packs if isinstance(p.files, CachedPackFiles)]
    if not any(s.shard_order for s in settings):
        return None
    if weighted:
        raise ConfigError("cache.shard_order: applies to unweighted epochs (no weight, hours_beta, repeat, choose "
                          "or sample_num_per_epoch)")
    units = builder.units.samples()
    if units is None:
        raise ConfigError("cache.shard_order: this task's builder has no item index to order by shard")
    unit_pack, unit_sample = units
    first = np.cumsum([0] + [len(p.manifest.shards) for p in packs])
    shard_of = np.concatenate([np.asarray(p.shard, dtype=np.int64) for p in packs]) if packs else np.zeros(0)
    sample_base = np.cumsum([0] + [len(p) for p in packs])
    unit_shard = first[unit_pack] + shard_of[sample_base[unit_pack] + unit_sample]
    shard_bytes = max((sum(f.size for f in shard.files.values()) for p in packs for shard in p.manifest.shards),
                      default=1)
    limits = [s.limit for s in settings if s.limit is not None]
    shards = int(first[-1])
    window = shards if not limits else max(1, min(limits) // 2 // max(shard_bytes, 1))
    # A window of every shard or more is one order: clamped, so limits that give the same plan give one window
    # (and one fingerprint: ``window_identity``).
    return ShardWindows(unit_shard=unit_shard.astype(np.int64), window=max(1, min(window, shards)))


def window_identity(shard_order: ShardWindows | None) -> dict:
    """What a resume state's fingerprint records of the order (empty without it: older states still resume)."""
    return {} if shard_order is None else {"shard_order_window": shard_order.window}


__all__ = ["PlanningView", "ShardWindows", "shard_windows", "window_identity"]
