"""What a node cache of a given limit does over an epoch, computed from the plan alone (``speechpack plan``):
bytes fetched, the smallest limit at which every file is fetched once per epoch, and the hit rate.

``simulate`` replays a ``FileSchedule`` (the files of every batch position, all ranks of the node) through a cache of
``limit`` bytes that evicts as the node cache does: the file whose next use is farthest away (Belady's rule; with
files of different sizes it is the standard heuristic, not a proven optimum).  The smallest once-per-epoch limit
is exact for any policy: a file fetched once must stay from its first use to its last, so the limit must hold the
largest set of such spans that overlap at one position (a sweep over first and last uses).  Fetch-ahead is left
out: it changes when files arrive, not which; and what processes still map beyond the limit is not counted.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from speechpack.loader.cache.schedule import FileSchedule


@dataclass(frozen=True)
class CacheSimulation:
    """One epoch of a node cache: ``fetched`` bytes of ``distinct`` bytes read at all, ``hits`` of ``accesses``
    (a file a batch position reads counts once), and ``once_limit``, the smallest limit that fetches each file once."""

    limit: int | None
    fetched: int
    distinct: int
    accesses: int
    hits: int
    once_limit: int

    @property
    def hit_rate(self) -> float:
        return self.hits / self.accesses if self.accesses else 1.0


def once_limit(schedule: FileSchedule) -> int:
    """The most bytes whose [first use, last use] spans overlap at one batch position."""
    delta = [0] * (len(schedule.batches) + 1)
    for name, uses in schedule.uses.items():
        delta[int(uses[0])] += schedule.sizes[name]
        delta[int(uses[-1]) + 1] -= schedule.sizes[name]
    held = peak = 0
    for change in delta:
        held += change
        peak = max(peak, held)
    return peak


def simulate(schedule: FileSchedule, limit: int | None) -> CacheSimulation:
    """Replay one epoch's schedule through a ``limit``-byte cache (None: unbounded); see the module docstring."""
    cached: dict[str, float] = {}  # name -> its next use when last touched
    farthest: list[tuple[float, str]] = []  # (-next use, name), stale entries skipped
    held = fetched = accesses = hits = 0
    for position, names in enumerate(schedule.batches):
        now = set(names)
        for name in names:
            accesses += 1
            size = schedule.sizes[name]
            if name in cached:
                hits += 1
            else:
                fetched += size
                if limit is not None:
                    kept = []
                    while held + size > limit and farthest:
                        key, victim = heapq.heappop(farthest)
                        if cached.get(victim) != -key:
                            continue  # stale
                        if victim in now:
                            kept.append((key, victim))
                            continue
                        del cached[victim]
                        held -= schedule.sizes[victim]
                    for entry in kept:
                        heapq.heappush(farthest, entry)
                held += size
            cached[name] = schedule.next_use(name, position + 1)
            heapq.heappush(farthest, (-cached[name], name))
    return CacheSimulation(limit=limit, fetched=fetched, distinct=sum(schedule.sizes[n] for n in schedule.uses),
                           accesses=accesses, hits=hits, once_limit=once_limit(schedule))


__all__ = ["CacheSimulation", "once_limit", "simulate"]
