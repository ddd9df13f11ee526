"""The cache knows the plan: which cached files each batch of the epoch reads (``FileSchedule``), and, per process,
where the loader is in it (``PlanFeed``): fetch ahead in plan order, evict the file used farthest in the future.

The epoch plan is a pure function of (seed, epoch, rank, world size), so the files every batch needs are known
before the epoch starts.  A schedule holds, for each batch position, the cache entries its items live in, merged
over the node's ranks (``LOCAL_WORLD_SIZE`` ranks from this one's node start: DDP ranks advance in lockstep, so
position ``b`` of every local rank is needed at about the same time).  ``PlanFeed.at(epoch_pass, batch)`` is called
where a batch is built (a DataLoader worker, or the training process without workers); it moves the position,
and a thread of that process then fetches the next ``ahead`` batches' files in plan order.  Eviction
(``loader.cache.node_cache``) asks the feed for its order: files no batch uses again first, then by next use,
farthest first (Belady's rule), never one of the next ``ahead`` batches.

A unit of the plan maps to its pack sample through the builder's ``unit_samples`` hook (``loader.tasks``); a
builder without one gets no schedule (the cache then fetches on demand and evicts the oldest entries first).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from speechpack.loader.cache.cached_files import CachedPackFiles
from speechpack.loader.cache.node_cache import CacheFullError
from speechpack.schemas.kinds import STREAMS_BY_KIND
from speechpack.schemas.units import format_bytes

#: The environment variable that tells how many ranks share this node (torchrun sets it).
LOCAL_WORLD_ENV = "LOCAL_WORLD_SIZE"


def unit_samples(builder) -> tuple[np.ndarray, np.ndarray] | None:
    """(pack id, sample) of every planning unit of ``builder`` (its ``BatchBuilder.unit_samples`` hook); None when
    the task has no item index."""
    return builder.unit_samples()


@dataclass
class FileSchedule:
    """Cache entry names per batch position (``batches[b]``), their sizes and where to fetch each."""

    batches: list[list[str]]
    sizes: dict[str, int]
    sources: dict[str, tuple[CachedPackFiles, str]]

    def __post_init__(self) -> None:
        uses: dict[str, list[int]] = {}
        for b, names in enumerate(self.batches):
            for name in names:
                uses.setdefault(name, []).append(b)
        self.uses = {name: np.asarray(at, dtype=np.int64) for name, at in uses.items()}

    @classmethod
    def of(cls, packs: list, plans: list, units: tuple[np.ndarray, np.ndarray]) -> "FileSchedule":
        """The schedule of ``plans`` (one ``EpochPlan`` per local rank) over ``packs``' cached files."""
        unit_pack, unit_sample = units
        shard_files: dict[tuple[int, int], list[str]] = {}
        sizes, sources = {}, {}
        for pid, pack in enumerate(packs):
            files = pack.files
            if not isinstance(files, CachedPackFiles):
                continue
            for k, shard in enumerate(pack.manifest.shards):
                names = []
                for stream in STREAMS_BY_KIND[pack.kind]:
                    rel = f"{shard.directory}/{pack.manifest.stream(stream).file}"
                    key = files.key(rel)
                    if key is not None:
                        names.append(key.name)
                        sizes[key.name], sources[key.name] = key.size, (files, rel)
                shard_files[(pid, k)] = names
        batches = []
        for b in range(max((len(p) for p in plans), default=0)):
            needed: dict[str, None] = {}
            for plan in plans:
                if b < len(plan):
                    items = np.asarray(plan.batch(b)[0], dtype=np.int64)
                    pids, samples = unit_pack[items], unit_sample[items]
                    for pid, sample in zip(pids.tolist(), samples.tolist()):
                        shard = int(packs[pid].shard[sample])
                        needed.update(dict.fromkeys(shard_files.get((pid, shard), ())))
            batches.append(list(needed))
        return cls(batches, sizes, sources)

    def batch_bytes(self, together: int = 1) -> int:
        """The most bytes ``together`` consecutive batch positions read from the cache (every local rank's batches
        at those positions): what must fit at once while they are built."""
        most = 0
        for b in range(max(len(self.batches) - together + 1, 1)):
            names = {n for batch in self.batches[b:b + together] for n in batch}
            most = max(most, sum(self.sizes[n] for n in names))
        return most

    def next_use(self, name: str, position: int) -> float:
        at = self.uses.get(name)
        if at is None:
            return float("inf")
        i = int(np.searchsorted(at, position))
        return float("inf") if i == len(at) else float(at[i])


def local_ranks(rank: int, world_size: int) -> list[int]:
    """The ranks on this rank's node: ``LOCAL_WORLD_SIZE`` consecutive ranks (1 when unset)."""
    try:
        local = max(1, int(os.environ.get(LOCAL_WORLD_ENV, "1")))
    except ValueError:
        local = 1
    start = rank - rank % local
    return [r for r in range(start, min(start + local, world_size))]


class PlanFeed:
    """One process's view of the cache's plan (see the module docstring).  ``plan_of(epoch_pass, rank)`` returns an
    ``EpochPlan``; ``epoch_pass`` is the loader's key of a pass, ``(epoch, global_start)`` (a resumed pass is dealt
    from a global batch: ``loader.plan.dealing``), and batch positions count within it; ``ahead`` and the limit come
    from the packs' cache settings."""

    def __init__(self, packs: list, builder, plan_of, rank: int, world_size: int):
        self.packs = packs
        self.builder = builder
        self.plan_of = plan_of
        self.rank, self.world_size = rank, world_size
        cached = [p.files for p in packs if isinstance(p.files, CachedPackFiles)]
        self.ahead = max((f.settings.ahead for f in cached), default=0)
        self.caches = [f.cache for f in cached]
        self._schedule: tuple[int, FileSchedule] | None = None
        self._position = 0
        self._building = 1
        self._pid = -1
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_wake": None, "_thread": None, "_pid": -1, "_schedule": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._wake = threading.Condition()

    @property
    def active(self) -> bool:
        return bool(self.caches) and unit_samples(self.builder) is not None

    def schedule(self, epoch_pass: tuple[int, int]) -> FileSchedule:
        if self._schedule is None or self._schedule[0] != epoch_pass:
            plans = [self.plan_of(epoch_pass, r) for r in local_ranks(self.rank, self.world_size)]
            self._schedule = (epoch_pass, FileSchedule.of(self.packs, plans, unit_samples(self.builder)))
        return self._schedule[1]

    def check(self, epoch_pass: tuple[int, int], together: int = 1) -> None:
        """A limit smaller than what the batches built together (``together``: a block of the loader without
        workers) need is an error now, never a wait later."""
        if not self.active:
            return
        need = self.schedule(epoch_pass).batch_bytes(together)
        what = "one batch needs" if together == 1 else f"{together} batches built together need"
        for cache in self.caches:
            if cache.limit is not None and need > cache.limit:
                raise CacheFullError(f"{cache.root}: cache limit {format_bytes(cache.limit)} is smaller than {what} "
                                     f"({format_bytes(need)} of stream files for the node's ranks at once); raise "
                                     f"cache.limit to at least that, several times it to fetch ahead")

    def at(self, epoch_pass: tuple[int, int], batch: int, stop: int | None = None) -> None:
        """This process is about to build batches ``batch`` to ``stop - 1`` of the pass ``epoch_pass`` (one when
        ``stop`` is None): move the position and wake the fetch-ahead."""
        if not self.active:
            return
        schedule = self.schedule(epoch_pass)
        with self._wake:
            self._position, self._current = batch, schedule
            self._building = max(1, (stop if stop is not None else batch + 1) - batch)
            self._wake.notify()
        if self._pid != os.getpid():  # first call in this process (a forked worker inherits no thread)
            self._pid = os.getpid()
            for cache in self.caches:
                cache.next_use, cache.protected = self._next_use, self._protected
            if self.ahead:
                self._thread = threading.Thread(target=self._fetch_ahead, name="speechpack-cache-ahead", daemon=True)
                self._thread.start()

    def _protected(self) -> set[str]:
        """The files of the batches being built and of the next ``ahead`` ones, as many as fit half the limit."""
        schedule, start = self._current, self._position
        limit = min((c.limit for c in self.caches if c.limit is not None), default=None)
        keep: set[str] = set()
        held = 0
        for b, names in enumerate(schedule.batches[start:start + self.ahead + 1]):
            more = [n for n in names if n not in keep]
            size = sum(schedule.sizes[n] for n in more)
            if b >= self._building and limit is not None and held + size > limit // 2:
                break
            keep.update(more)
            held += size
        return keep

    def _next_use(self, name: str) -> float:
        """The batch position that next reads ``name`` (inf: none left this epoch)."""
        return self._current.next_use(name, self._position)

    def _fetch_ahead(self) -> None:
        """Fetch the files of the next ``ahead`` batches in plan order as the position moves; a file that does not
        fit now is left to the batch that needs it (the thread never waits for space)."""
        fetched: tuple[FileSchedule | None, int] = (None, -1)
        while True:
            with self._wake:
                while True:
                    schedule, start = self._current, self._position
                    last = fetched[1] if fetched[0] is schedule else start - 1
                    target = min(start + self.ahead, len(schedule.batches) - 1)
                    if last < target:
                        break
                    self._wake.wait()
            for b in range(max(start, last + 1), target + 1):
                try:
                    for name in schedule.batches[b]:
                        files, rel = schedule.sources[name]
                        files.local_path(rel, wait=False)
                except CacheFullError:
                    target = b - 1
                    break
                except BaseException as err:  # noqa: BLE001 - the batch that needs the file fetches and raises
                    self.error = err
                    return
            fetched = (schedule, target)
            if target < start + self.ahead and target < len(schedule.batches) - 1:
                with self._wake:  # no room now: wait for the position to move before trying again
                    if self._position == start and self._current is schedule:
                        self._wake.wait()


__all__ = ["FileSchedule", "LOCAL_WORLD_ENV", "PlanFeed", "local_ranks", "unit_samples"]
