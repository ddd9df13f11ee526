"""The cache knows the epoch plan: which cached files each batch of the epoch reads (``FileSchedule``), per
process where the loader is in it (``PlanFeed``: fetch ahead in plan order, evict the file used farthest in the
future), and what a cache of a given limit does over it (``simulate``, what ``speechpack plan`` reports).

The epoch plan is a pure function of (seed, epoch, rank, world size), so the files every batch needs are known
before the epoch starts.  A schedule holds, for each batch position, the cache entries its items live in, merged
over the node's ranks (``LOCAL_WORLD_SIZE`` ranks from this one's node start: DDP ranks advance in lockstep, so
position ``b`` of every local rank is needed at about the same time).  ``PlanFeed.at(epoch_pass, batch)`` is called
where a batch is built (a DataLoader worker, or the training process without workers); it moves the position,
and a thread of that process then fetches the next ``ahead`` batches' files in plan order.  The first pass's
schedule is built once, in the training process before the workers fork (``loader.torch.SpeechLoader``), so the
workers inherit it; a later epoch's is built by each process that builds its batches.  Eviction
(``loader.cache.node_cache``) asks the feed for its order: files no batch uses again first, then by next use,
farthest first (Belady's rule), never one of the next ``ahead`` batches.

For a pack read by ranges (``loader.cache.ranges``) the loader's schedule is ``segment_schedule``'s: its entries
are the audio segments each batch reads, fetched ahead a round of a few batches at a time (``_fetch_ranged``), the
``ahead`` batches after those being built as far as half the limit holds them (``_window``, the protected entries),
within the limit less what the batches being built still claim (``_headroom_bytes``; ``NodeCache.reserve_ahead``).

A unit of the plan maps to its pack sample through the builder's ``unit_samples`` hook (``loader.tasks``); a
builder without one gets no schedule (the cache then fetches on demand and evicts the oldest entries first).

``simulate`` replays a schedule through a cache of ``limit`` bytes that evicts as the node cache does (with files of
different sizes Belady's rule is the standard heuristic, not a proven optimum): bytes fetched and the hit rate.
The smallest limit that fetches each file once per epoch (``once_limit``) is exact for any policy: a file fetched
once must stay from its first use to its last, so the limit must hold the largest set of such spans that overlap
at one position.  Fetch-ahead is left out (it changes when files arrive, not which), and so is what processes still
map beyond the limit.
"""
from __future__ import annotations

import heapq
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from speechpack.loader.cache.cached_files import CachedPackFiles, fetch_pool, run_all
from speechpack.loader.cache.node_cache import CacheFullError
from speechpack.loader.cache.schedule_entries import ScheduleEntries
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.kinds import STREAMS_BY_KIND
from speechpack.schemas.units import format_bytes

#: The environment variable that tells how many ranks share this node (torchrun sets it).
LOCAL_WORLD_ENV = "LOCAL_WORLD_SIZE"
#: Batch positions a window's schedule covers at least (``PlanFeed.windowed``): the fetch-ahead's reach, with room
#: for the batches built while the whole pass's schedule is being built.
WINDOW_POSITIONS = 256


def _plan_rows(plans: list) -> tuple[np.ndarray, np.ndarray]:
    """(batch position, unit) of every row of ``plans``, ordered by position, then local rank, then row: the order
    the old per-item loop visited them in."""
    positions, units = [], []
    for plan in plans:
        if plan.offsets is None:
            items = np.asarray(plan.items, dtype=np.int64).reshape(len(plan), -1)
            positions.append(np.repeat(np.arange(len(plan), dtype=np.int64), items.shape[1]))
            units.append(items.ravel())
        else:
            offsets = np.asarray(plan.offsets, dtype=np.int64)
            positions.append(np.repeat(np.arange(len(plan), dtype=np.int64), np.diff(offsets)))
            units.append(np.asarray(plan.items, dtype=np.int64)[offsets[0]:offsets[-1]])
    if not positions:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(plans) == 1:
        return positions[0], units[0]
    position, unit = np.concatenate(positions), np.concatenate(units)
    order = np.argsort(position, kind="stable")  # plans were concatenated in rank order: stable keeps it
    return position[order], unit[order]


class _PlanWindow:
    """Positions ``first`` to ``first + count - 1`` of an ``EpochPlan`` as a plan of those positions alone (of fewer
    where the plan ends before), in the form ``_plan_rows`` reads (``items`` with ``offsets``, ``len``): a
    schedule of it numbers them from 0 (``FileSchedule.shifted`` puts them back in place)."""

    def __init__(self, plan, first: int, count: int = 1):
        first = max(0, first)
        stop = max(first, min(len(plan), first + count))
        self._len = stop - first
        if plan.offsets is None:
            items = np.asarray(plan.items, dtype=np.int64).reshape(len(plan), -1) if len(plan) else np.zeros((0, 0))
            width = items.shape[1]
            self.items = np.asarray(items[first:stop], dtype=np.int64).reshape(-1)
            self.offsets = np.arange(self._len + 1, dtype=np.int64) * width
        else:
            offsets = np.asarray(plan.offsets, dtype=np.int64)
            lo = int(offsets[first]) if self._len else 0
            self.items = np.asarray(plan.items, dtype=np.int64)[lo:int(offsets[stop])] if self._len else \
                np.zeros(0, np.int64)
            self.offsets = offsets[first:stop + 1] - lo if self._len else np.zeros(1, np.int64)

    def __len__(self) -> int:
        return self._len


def _first_in_batch(position: np.ndarray, value: np.ndarray, values: int) -> np.ndarray:
    """Indices of the first row of each distinct (position, value), in row order (rows sorted by position).  A row
    repeats only a row of its own position, so with few rows per position each is compared with the rows just
    before it (a few vectorised passes); many rows per position take one sort instead."""
    if len(position) == 0:
        return np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate([[True], position[1:] != position[:-1]]))
    widest = int(np.diff(np.append(starts, len(position))).max())
    if widest <= _COMPARED_ROWS:
        repeat = np.zeros(len(position), dtype=bool)
        for shift in range(1, widest):
            repeat[shift:] |= (position[shift:] == position[:-shift]) & (value[shift:] == value[:-shift])
        return np.flatnonzero(~repeat)
    _, first = np.unique(position * max(values, 1) + value, return_index=True)
    return np.sort(first)


#: Rows per batch position up to which ``_first_in_batch`` compares neighbours rather than sorting.
_COMPARED_ROWS = 16


class _ByName(Mapping):
    """A schedule's per-entry values by entry name (``sizes``, ``sources``, ``uses``), looked up through
    ``ScheduleEntries.find``; it iterates over the entries some position uses."""

    def __init__(self, schedule: "FileSchedule", value):
        self._schedule, self._value = schedule, value

    def __getitem__(self, name: str):
        i = self._schedule.entries.find(name)
        if i is None:
            raise KeyError(name)
        return self._value(i)

    def __iter__(self):
        entries = self._schedule.entries
        return (entries.name(i) for i in self._schedule.used_entries().tolist())

    def __len__(self) -> int:
        return len(self._schedule.used_entries())


class FileSchedule:
    """Cache entries per batch position (``batch(b)``), their sizes and where to fetch each.

    Held as flat arrays, ``entry_position``/``entry_file`` (position, entry id in ``entries``), row by row in
    position order, and each entry's uses in position order (``_use_positions`` cut at ``_use_bounds``): what
    ``uses``, ``batch_bytes`` and ``batch`` are computed from, without a Python object per position or entry (a
    million items make tens of thousands of positions and, read by ranges, a million segment entries;
    ``batches``, the lists, is made only when asked for: the dry run's replay).  By name, ``sizes``, ``sources``
    and ``uses`` look entries up (``loader.cache.schedule_entries``).  ``from_batches`` builds one from
    lists, as a caller may."""

    def __init__(self, entries: ScheduleEntries, entry_position: np.ndarray, entry_file: np.ndarray, count: int):
        self.entries = entries
        self.entry_position = np.asarray(entry_position, dtype=np.int64)
        self.entry_file = np.asarray(entry_file, dtype=np.int64)
        #: Batch positions (every local rank's longest plan).
        self.count = int(count)
        self._batches: list[list[str]] | None = None
        self._bounds = np.searchsorted(self.entry_position, np.arange(self.count + 1))
        uses = np.bincount(self.entry_file, minlength=len(entries))
        self._use_bounds = np.concatenate([np.zeros(1, np.int64), np.cumsum(uses)])
        if uses.max(initial=0) <= 1:  # each entry read once (a shuffled epoch's segments): placed, not sorted
            self._by_file = np.empty(len(self.entry_file), dtype=np.int64)
            self._by_file[self._use_bounds[self.entry_file]] = np.arange(len(self.entry_file))
        else:
            self._by_file = np.argsort(self.entry_file, kind="stable")  # positions stay ascending within a file
        self._use_positions = self.entry_position[self._by_file]
        self.sizes = _ByName(self, lambda i: int(entries.sizes[i]))
        self.sources = _ByName(self, entries.source)
        #: Each entry's batch positions, ascending.
        self.uses = _ByName(self, self.uses_of)

    @classmethod
    def from_batches(cls, batches: list[list[str]], sizes: Mapping[str, int],
                     sources: Mapping[str, tuple]) -> "FileSchedule":
        """The schedule whose position ``b`` reads ``batches[b]``."""
        names = list(dict.fromkeys(n for batch in batches for n in batch))
        index = {n: i for i, n in enumerate(names)}
        entries = ScheduleEntries(names, [sizes[n] for n in names], [sources[n] for n in names])
        position = np.asarray([b for b, batch in enumerate(batches) for _ in batch], np.int64)
        file = np.asarray([index[n] for batch in batches for n in batch], np.int64)
        schedule = cls(entries, position, file, len(batches))
        schedule._batches = batches
        return schedule

    #: Whether some entries are segments of a pack read by ranges (``loader.cache.segment_schedule``), whose
    #: sources fetch many entries at once (``fetch_ahead``) and whose entries are never mapped.
    ranged = False

    def __len__(self) -> int:
        return self.count

    def batch_ids(self, b: int) -> np.ndarray:
        """The entry ids batch position ``b`` reads, in the order its rows first reach them."""
        return self.entry_file[int(self._bounds[b]):int(self._bounds[b + 1])]

    def batch(self, b: int) -> list[str]:
        """The entry names batch position ``b`` reads, in the order its rows first reach them."""
        return [self.entries.name(i) for i in self.batch_ids(b).tolist()]

    @property
    def batches(self) -> list[list[str]]:
        """Every position's ``batch(b)``, made on first use."""
        if self._batches is None:
            self._batches = [self.batch(b) for b in range(self.count)]
        return self._batches

    def uses_of(self, i: int) -> np.ndarray:
        """Entry ``i``'s batch positions, ascending."""
        return self._use_positions[int(self._use_bounds[i]):int(self._use_bounds[i + 1])]

    def used_entries(self) -> np.ndarray:
        """The ids of the entries some position reads."""
        return np.flatnonzero(np.diff(self._use_bounds) > 0)

    @classmethod
    def of(cls, packs: list, plans: list, units: tuple[np.ndarray, np.ndarray]) -> "FileSchedule":
        """The schedule of ``plans`` (one ``EpochPlan`` per local rank) over ``packs``' cached files: each batch
        position's files in the order its rows first reach them, local rank 0's rows first."""
        unit_pack, unit_sample = (np.asarray(a, dtype=np.int64) for a in units)
        names: dict[str, int] = {}
        sizes: list[int] = []
        sources: list[tuple[CachedPackFiles, str]] = []
        pair_first = np.zeros(len(packs) + 1, dtype=np.int64)  # pair id of (pack, shard) = pair_first[pack] + shard
        pair_files: list[list[int]] = []
        for pid, pack in enumerate(packs):
            files = pack.files
            shards = pack.manifest.shards if isinstance(files, CachedPackFiles) else []
            for shard in shards:
                ids = []
                for stream in STREAMS_BY_KIND[pack.kind]:
                    rel = f"{shard.directory}/{pack.manifest.stream(stream).file}"
                    key = files.key(rel)
                    if key is not None:
                        if key.name not in names:
                            names[key.name] = len(names)
                            sizes.append(key.size)
                            sources.append((files, rel))
                        ids.append(names[key.name])
                pair_files.append(ids)
            pair_first[pid + 1] = pair_first[pid] + len(shards)
        count = max((len(p) for p in plans), default=0)
        if not names:  # every pack on local disk or read by ranges: no whole file to schedule
            return cls(ScheduleEntries([], [], []), np.zeros(0, np.int64), np.zeros(0, np.int64), count)
        # the (pack, shard) pair of every unit; -1 for a unit of a pack read from local disk
        unit_pair = np.full(len(unit_pack), -1, dtype=np.int64)
        for pid, pack in enumerate(packs):
            if pair_first[pid + 1] > pair_first[pid]:
                mine = unit_pack == pid
                unit_pair[mine] = pair_first[pid] + np.asarray(pack.shard, dtype=np.int64)[unit_sample[mine]]
        position, unit = _plan_rows(plans)
        pair = unit_pair[unit]
        cached = pair >= 0
        position, pair = position[cached], pair[cached]
        first = _first_in_batch(position, pair, len(pair_files))
        position, pair = position[first], pair[first]
        # each (position, pair) expands to its pair's files, then a file met twice in a position is kept once
        counts = np.asarray([len(ids) for ids in pair_files], dtype=np.int64)
        flat = np.asarray([i for ids in pair_files for i in ids], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
        per_row = counts[pair]
        row_of = np.repeat(np.arange(len(pair)), per_row)
        within = np.arange(len(row_of)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
        file = flat[starts[pair][row_of] + within] if len(row_of) else np.zeros(0, np.int64)
        position = position[row_of]
        first = _first_in_batch(position, file, len(names))
        position, file = position[first], file[first]
        return cls(ScheduleEntries(list(names), sizes, sources), position, file, count)

    def batch_bytes(self, together: int = 1) -> int:
        """The most bytes ``together`` consecutive batch positions read from the cache (every local rank's batches
        at those positions): what must fit at once while they are built.

        A file used at position ``b`` and last before at ``p`` adds its size to every window that starts in
        ``(max(p, b - together), b]`` (a window counts a file once); a difference array sums them all."""
        count = self.count
        if count == 0 or len(self.entry_file) == 0:
            return 0
        b = self._use_positions
        f = self.entry_file[self._by_file]
        previous = np.full(len(b), -1, dtype=np.int64)
        same = f[1:] == f[:-1]
        previous[1:][same] = b[:-1][same]
        lo = np.maximum(previous + 1, b - together + 1)
        weight = self.entries.sizes[f].astype(np.float64)  # exact: sums stay far below 2**53 bytes
        delta = np.bincount(lo, weight, count + 1) - np.bincount(b + 1, weight, count + 1)
        windows = np.cumsum(delta)[:max(count - together + 1, 1)]
        return int(round(windows.max()))

    def shifted(self, first: int) -> "FileSchedule":
        """This schedule (of a ``_PlanWindow`` starting at ``first``) with its positions in place: position ``b`` here
        is ``first + b`` there, the positions before ``first`` read nothing."""
        moved = FileSchedule(self.entries, self.entry_position + first, self.entry_file, self.count + first)
        moved.ranged = self.ranged
        return moved

    def next_use_of(self, i: int, position: int) -> float:
        """The first position from ``position`` on that reads entry ``i`` (inf: none)."""
        at = self.uses_of(i)
        j = int(np.searchsorted(at, position))
        return float("inf") if j == len(at) else float(at[j])

    def next_use(self, name: str, position: int) -> float:
        i = self.entries.find(name)
        return float("inf") if i is None else self.next_use_of(i, position)


@dataclass(frozen=True)
class CacheSimulation:
    """One epoch of a node cache: ``fetched`` bytes of ``distinct`` bytes read at all, in ``requests`` fetches
    (one per file fetched: a pack without block digests is fetched a whole file at a time), ``hits`` of
    ``accesses`` (a file a batch position reads counts once), and ``once_limit``, the smallest limit that fetches
    each file, so each byte, once."""

    limit: int | None
    fetched: int
    distinct: int
    accesses: int
    hits: int
    once_limit: int
    requests: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.accesses if self.accesses else 1.0


def once_limit(schedule: FileSchedule) -> int:
    """The most bytes whose [first use, last use] spans overlap at one batch position (a sweep over first and last
    uses)."""
    used = schedule.used_entries()
    if not len(used):
        return 0
    first = schedule._use_positions[schedule._use_bounds[used]]
    last = schedule._use_positions[schedule._use_bounds[used + 1] - 1]
    weight = schedule.entries.sizes[used].astype(np.float64)  # exact: sums stay far below 2**53 bytes
    delta = (np.bincount(first, weight, schedule.count + 1) - np.bincount(last + 1, weight, schedule.count + 1))
    return max(0, int(round(np.cumsum(delta).max())))


def simulate(schedule: FileSchedule, limit: int | None) -> CacheSimulation:
    """Replay one epoch's schedule through a ``limit``-byte cache (None: unbounded); see the module docstring."""
    sizes = schedule.entries.sizes.tolist()
    cached: dict[int, float] = {}  # entry -> its next use when last touched
    farthest: list[tuple[float, int]] = []  # (-next use, entry), stale entries skipped
    held = fetched = accesses = hits = 0
    for position in range(schedule.count):
        ids = schedule.batch_ids(position).tolist()
        now = set(ids)
        for i in ids:
            accesses += 1
            size = sizes[i]
            if i in cached:
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
                        held -= sizes[victim]
                    for entry in kept:
                        heapq.heappush(farthest, entry)
                held += size
            cached[i] = schedule.next_use_of(i, position + 1)
            heapq.heappush(farthest, (-cached[i], i))
    distinct = int(schedule.entries.sizes[schedule.used_entries()].sum())
    return CacheSimulation(limit=limit, fetched=fetched, distinct=distinct, accesses=accesses, hits=hits,
                           once_limit=once_limit(schedule), requests=accesses - hits)


def local_ranks(rank: int, world_size: int) -> list[int]:
    """The ranks on this rank's node: ``LOCAL_WORLD_SIZE`` consecutive ranks (1 when unset)."""
    try:
        local = max(1, int(os.environ.get(LOCAL_WORLD_ENV, "1")))
    except ValueError:
        local = 1
    start = rank - rank % local
    return [r for r in range(start, min(start + local, world_size))]


class PlanFeed:
    """One process's view of the file schedule of the epoch plan (see the module docstring).
    ``plan_of(epoch_pass, rank)`` returns an ``EpochPlan``; ``epoch_pass`` is the loader's key of a pass,
    ``(epoch, global_start)`` (a resumed pass is dealt from a global batch: ``loader.plan.static_plan``), and batch
    positions count within it; ``ahead`` and the limit come from the packs' cache settings."""

    def __init__(self, packs: list, builder, plan_of, rank: int, world_size: int, schedule_of=None, bound_of=None):
        self.packs = packs
        #: ``(packs, plans, units) -> FileSchedule``: ``FileSchedule.of`` (whole files), or
        #: ``loader.cache.segment_schedule.segment_schedule`` (segments of packs read by ranges too).
        self.schedule_of = schedule_of or FileSchedule.of
        #: ``(packs, plans, units) -> int | None``: an upper bound of one position's bytes without the schedule,
        #: None where the schedule holds whole files (``segment_schedule.segment_bound``); None: no bound.
        self.bound_of = bound_of
        #: Processes of this rank that build batches at once (DataLoader workers; 1 without): set by ``check``.
        self.builders = 1
        self.plan_of = plan_of
        self.rank, self.world_size = rank, world_size
        cached = [p.files for p in packs if isinstance(p.files, CachedPackFiles)]
        self.ahead = max((f.settings.ahead for f in cached), default=0)
        self.fetches = max((f.settings.fetches for f in cached), default=1)
        self.caches = [f.node_cache for f in cached]
        #: One cache per directory (and limit): the packs of a loader share one, and counting its room lists it.
        self._distinct_caches = list({(c.root, c.limit): c for c in self.caches}.values())
        #: (pack id, sample) of every planning unit (the builder's ``unit_samples`` hook), taken once: None when no
        #: pack is cached or the task has no item index (the feed then does nothing).
        self.units = builder.units.samples() if self.caches else None
        #: Whether a pass is scheduled a window of positions at a time (every entry a segment: a window's schedule
        #: is a few rows' work, where the whole pass's takes tenths of a second per million items): the first
        #: batches are fetched from a window's, and each builder's fetch-ahead thread builds the whole pass's.
        self.windowed = bound_of is not None and self.active and bound_of(packs, [], self.units) is not None
        #: (pass, its schedule, whether it is a window's): the one this process holds.
        self._schedule: tuple[tuple[int, int], FileSchedule, bool] | None = None
        self._position = 0
        self._building = 1
        #: The schedule the position is in (set by ``at``).
        self._current: FileSchedule | None = None
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
        """Whether the feed schedules anything: a cached pack, and a task with an item index."""
        return self.units is not None

    def schedule(self, epoch_pass: tuple[int, int]) -> FileSchedule:
        """The whole pass's schedule, built on first use in this process (or inherited from the process that forked
        it) and kept until another pass asks."""
        with self._wake:
            held = self._schedule
            if held is None or held[0] != epoch_pass or held[2]:
                self._schedule = (epoch_pass, self.schedule_of(self.packs, self._plans(epoch_pass), self.units), False)
            return self._schedule[1]

    def _plans(self, epoch_pass: tuple[int, int]) -> list:
        """The pass's plan of every local rank."""
        return [self.plan_of(epoch_pass, r) for r in local_ranks(self.rank, self.world_size)]

    def _schedule_at(self, epoch_pass: tuple[int, int], batch: int) -> FileSchedule:
        """A schedule of the pass that reaches position ``batch``: the one held, else a window's from ``batch``
        when the pass is scheduled a window at a time and a fetch-ahead thread will build the whole one
        (``_fetch_ahead``), else the whole pass's."""
        with self._wake:
            held = self._schedule
            if held is not None and held[0] == epoch_pass and (not held[2] or batch < held[1].count):
                return held[1]
            if not (self.windowed and self.ahead):
                return self.schedule(epoch_pass)
            window = self._window_of(epoch_pass, batch)
            self._schedule = (epoch_pass, window, True)
            return window

    def _window_of(self, epoch_pass: tuple[int, int], batch: int, count: int | None = None) -> FileSchedule:
        """The schedule of positions ``batch`` to ``batch + count - 1`` of the pass (``WINDOW_POSITIONS``, or more
        where the fetch-ahead reaches farther), in place."""
        count = count or max(WINDOW_POSITIONS, 4 * (self.ahead + 1) * self.builders)
        windows = [_PlanWindow(plan, batch, count) for plan in self._plans(epoch_pass)]
        return self.schedule_of(self.packs, windows, self.units).shifted(batch)

    def check(self, epoch_pass: tuple[int, int], together: int = 1, shard_window: int | None = None,
              builders: int = 1) -> None:
        """A limit smaller than what the batches built together (``together``: a block of the loader without
        workers) need is an error now, never a wait later.  The message explains the minimum: the schedule's unit
        is a whole stream file (a pack without block digests is fetched so), and a shuffled batch touches one per
        sample; the two ways out keep the batches as they are (a larger limit) or choose another order, the same
        wherever the pack lies (``dataset_args.shard_window``; ``shard_window``: the one the plan uses).  A
        schedule with range entries needs one batch at a time (a batch's segments are copied into its process as
        they are claimed: the batches after it claim theirs later).  ``builders``: the processes of this rank
        that build batches at once (the fetch-ahead leaves room for their batches: ``_headroom_bytes``)."""
        if not self.active:
            return
        self.builders = max(1, builders)
        if self.windowed:  # every entry a segment: one batch at a time, and a bound that fits needs no schedule
            bound = self.bound_of(self.packs, self._plans(epoch_pass), self.units)
            if all(cache.limit is None or bound <= cache.limit for cache in self.caches):
                return
        schedule = self.schedule(epoch_pass)
        if schedule.ranged:
            together = 1
        need = schedule.batch_bytes(together)
        what = "one batch needs" if together == 1 else f"{together} batches built together need"
        for cache in self.caches:
            if cache.limit is not None and need > cache.limit and schedule.ranged:
                raise CacheFullError(
                    f"{cache.root}: cache limit {format_bytes(cache.limit)} is smaller than one batch needs "
                    f"({format_bytes(need)} of segments and files for the node's ranks at one batch position): "
                    f"raise cache.limit to at least that (several times it to fetch ahead), or set it to 0 to "
                    f"read through; `speechpack plan` reports the limit each order needs")
            if cache.limit is not None and need > cache.limit:
                order = (f"the batches of a window of {shard_window} shards read them" if shard_window is not None
                         else "a shuffled batch touches a file per sample")
                way_out = ("" if shard_window is not None else
                           ", or set dataset_args.shard_window (an order of windows of shards, the same batches on "
                           "every copy of the pack)")
                raise CacheFullError(
                    f"{cache.root}: cache limit {format_bytes(cache.limit)} is smaller than {what} "
                    f"({format_bytes(need)} of stream files for the node's ranks at once): this pack is fetched a "
                    f"whole stream file at a time (it has no block digests; `speechpack convert` adds them, then a "
                    f"batch reads only its samples' ranges) and {order}.  Raise cache.limit to at least that "
                    f"(several times it to fetch ahead){way_out}; `speechpack plan` reports the limit each order "
                    f"needs")

    def prefetch(self, epoch_pass: tuple[int, int], batch: int) -> None:
        """Fetch batch position ``batch``'s files now, in this process, while the caches have room for all of them
        (a full cache is left to the eviction rules of the processes that build the batches).  The training
        process does so for a pass's first batch before its workers start, so that neither a worker's store client
        (a few tenths of a second to make) nor its fetch stands before the first batch.  A failure here is left to
        the process that builds the batch: it fetches the file again and raises what it meets there (a worker's
        error reaches the training loop as itself: ``loader.torch.WorkerFailure``)."""
        if not self.active:
            return
        self._prefetch_from(self._schedule_at(epoch_pass, batch), batch)

    def _prefetch_from(self, schedule: "FileSchedule", batch: int) -> None:
        """``prefetch`` of position ``batch`` of ``schedule``."""
        if not 0 <= batch < schedule.count:
            return
        needed = int(schedule.entries.sizes[schedule.batch_ids(batch)].sum())
        if any(free is not None and free < needed for free in (c.free_bytes() for c in self._distinct_caches)):
            return
        try:
            if schedule.ranged:
                self._fetch_ranged(schedule, batch, batch)
            else:
                self._fetch_batch(schedule, batch)
        except (SpeechpackError, OSError):  # room taken meanwhile, the store failing: the batch's builder's to meet
            pass

    def start_pass(self, epoch_pass: tuple[int, int], batch: int) -> None:
        """The pass's schedule built here while batch position ``batch``'s files are fetched (``prefetch``) in a
        thread: that batch's files come from a schedule of it alone (the same names: positions are independent),
        so the store's transfer runs during the pass's schedule (tenths of a second per million items) instead of
        after it.  A pass scheduled a window at a time (``windowed``) gets the window's schedule only (the fetch
        then runs during the window's: hundredths of a second); each builder's fetch-ahead thread builds the whole
        pass's after the window's fetches.  Both have ended when it returns: no fetch is in flight when the workers
        fork (a child inheriting a held entry lock would keep it held).  An error other than the fetch's own
        (``prefetch``) is raised."""
        if not self.active:
            return
        held = self._schedule
        if held is not None and held[0] == epoch_pass and (not held[2] or batch < held[1].count):
            self._prefetch_from(held[1], batch)
            return
        first = self._window_of(epoch_pass, batch, 1)
        failed: list[BaseException] = []

        def fetch() -> None:
            try:
                self._prefetch_from(first, batch)
            except BaseException as err:  # noqa: BLE001 - raised in the caller's thread below
                failed.append(err)

        thread = threading.Thread(target=fetch, name="speechpack-first-batch", daemon=True)
        thread.start()
        try:
            self._schedule_at(epoch_pass, batch)  # the pass's, or a window's
        finally:
            thread.join()
        if failed:
            raise failed[0]

    def at(self, epoch_pass: tuple[int, int], batch: int, stop: int | None = None) -> None:
        """This process is about to build batches ``batch`` to ``stop - 1`` of the pass ``epoch_pass`` (one when
        ``stop`` is None): move the position and wake the fetch-ahead."""
        if not self.active:
            return
        schedule = self._schedule_at(epoch_pass, batch)
        with self._wake:
            self._position, self._current = batch, schedule
            self._building = max(1, (stop if stop is not None else batch + 1) - batch)
            self._wake.notify()
        if self._pid != os.getpid():  # first call in this process (a forked worker inherits no thread)
            self._pid = os.getpid()
            for cache in self.caches:
                cache.next_use, cache.protected = self._next_use, self._protected
                cache.headroom = self._headroom_bytes if schedule.ranged else None
            if self.ahead:
                self._thread = threading.Thread(target=self._fetch_ahead, name="speechpack-cache-ahead", daemon=True)
                self._thread.start()

    def _protected(self) -> set[str]:
        """The files of the batches being built and of the next ``ahead`` ones, as many as fit half the limit."""
        return self._window()[0]

    def _window(self) -> tuple[set[str], int]:
        """``_protected``'s entries, and the last position they reach (for range entries, where the fetch-ahead
        stops: what it fetched is then never what a fetch for a later batch may evict)."""
        schedule, start = self._current, self._position
        limit = min((c.limit for c in self.caches if c.limit is not None), default=None)
        sizes = schedule.entries.sizes
        keep: set[int] = set()
        held = 0
        lag = min(self._lag(), start)  # range entries: the batches the rank's other builders may still read
        extra = self._building - 1 if schedule.ranged else 0  # range entries: ``ahead`` after those being built
        last = start - 1
        for b in range(-lag, min(self.ahead + extra + 1, schedule.count - start)):
            more = [i for i in schedule.batch_ids(start + b).tolist() if i not in keep]
            size = int(sizes[more].sum())
            if (b < 0 or b >= self._building) and limit is not None and held + size > limit // 2:
                if b < 0:
                    continue  # behind: the other builders' batches, kept only while they fit
                break
            keep.update(more)
            held += size
            last = max(last, start + b)
        return {schedule.entries.name(i) for i in keep}, last

    def _headroom_bytes(self, held: set[str]) -> int:
        """What the batches being built on the node still claim (``held``: the entries the cache holds): the
        entries not held of ``builders`` times this process's batches from its position (each worker builds a
        message of them; the schedule merges the node's ranks), and of those its rank's other builders may still be
        reading (``_lag``); at most half the limit (a batch claims a round of half the limit at a time:
        ``loader.cache.ranges.claim_rounds``).  A fetch ahead of need fills the cache only to the limit less this,
        so a batch's own claims find room without waiting on, or evicting, what was fetched for the batches after
        it."""
        schedule, start = self._current, self._position
        stop = min(schedule.count, start + self.builders * self._building)
        ids = {i for b in range(max(0, start - self._lag()), stop) for i in schedule.batch_ids(b).tolist()}
        need = sum(int(schedule.entries.sizes[i]) for i in ids if schedule.entries.name(i) not in held)
        limit = min((c.limit for c in self.caches if c.limit is not None), default=None)
        return need if limit is None else min(need, limit // 2)

    def _lag(self) -> int:
        """Positions behind this process's that other builders of the rank may still be reading (a range entry
        fetched for them is not "used before now" to this process: ``_next_use``)."""
        current = self._current
        return (self.builders - 1) * self._building if current is not None and current.ranged else 0

    def _next_use(self, name: str) -> float:
        """The batch position that next reads ``name`` (inf: none left this epoch), from the earliest position a
        builder of this rank may still be at."""
        return self._current.next_use(name, max(0, self._position - self._lag()))

    def _fetch_batch(self, schedule: FileSchedule, b: int) -> None:
        """Fetch the files of batch position ``b``, up to ``fetches`` at once (``fetch_pool``) while the cache
        has room for all of them; one after another when it must evict to take them, so that a fetch ahead stops at
        the first file that does not fit instead of evicting for the files behind it."""
        ids = schedule.batch_ids(b)
        sources = [schedule.entries.source(i) for i in ids.tolist()]
        calls = [lambda source=source, where=where: source.local_path(where, wait=False) for source, where in sources]
        room = [cache.free_bytes() for cache in self._distinct_caches]
        needed = int(schedule.entries.sizes[ids].sum())
        if self.fetches <= 1 or len(calls) <= 1 or any(free is not None and free < needed for free in room):
            for call in calls:
                call()
        else:
            run_all(fetch_pool(self.fetches), calls)

    def _fetch_ranged(self, schedule: FileSchedule, first: int, last: int, horizon: int = -1) -> int:
        """Fetch ahead the entries of positions ``first`` to ``last`` of a schedule with range entries: whole files
        batch by batch as ``_fetch_batch`` does, the segments of each pack together (``SegmentSource.fetch_ahead``:
        coalesced, ``fetches`` requests in flight, admitted under the fetch-ahead budget, evicting nothing used
        up to position ``horizon``).  Returns the last position wholly fetched or admitted (``first - 1``: none)."""
        segments: dict[int, tuple[object, list]] = {}
        for b in range(first, last + 1):
            for i in schedule.batch_ids(b).tolist():
                source, where = schedule.entries.source(i)
                if isinstance(source, CachedPackFiles):
                    try:
                        source.local_path(where, wait=False)
                    except CacheFullError:
                        last = b - 1
                        break
                else:
                    segments.setdefault(id(source), (source, []))[1].append((where, b))
            else:
                continue
            break
        for source, items in segments.values():
            items = [item for item in items if item[1] <= last]
            refused = source.fetch_ahead(items, self.fetches, horizon)
            if refused is not None:
                last = min(last, refused - 1)
        return last

    def _complete(self, epoch_pass: tuple[int, int], window: FileSchedule, fetched: tuple) -> tuple:
        """Build the whole schedule of the pass whose window's schedule (``window``) this process holds, outside
        the lock (the batches go on meanwhile), and put it in the window's place, where the position still is in
        that pass; ``fetched`` (the fetch-ahead's progress) carries over to it."""
        whole = self.schedule_of(self.packs, self._plans(epoch_pass), self.units)
        with self._wake:
            held = self._schedule
            if held is not None and held[0] == epoch_pass and held[2]:
                self._schedule = (epoch_pass, whole, False)
                if self._current is held[1] or self._current is window:
                    self._current = whole
            if fetched[0] is window and self._current is whole:
                fetched = (whole, fetched[1])
        return fetched

    def _fetch_ahead(self) -> None:
        """Fetch the files of the next ``ahead`` batches in plan order as the position moves, each batch's files
        together; a file that does not fit now is left to the batch that needs it (the thread never waits for
        space).  With range entries, the ``ahead`` batches after those being built, a round of a few batches'
        segments at a time (``_fetch_ranged``)."""
        fetched: tuple[FileSchedule | None, int] = (None, -1)
        while True:
            complete = None  # the pass whose window's schedule to complete where the thread would wait
            with self._wake:
                while True:
                    schedule, start = self._current, self._position
                    last = fetched[1] if fetched[0] is schedule else start - 1
                    if schedule.ranged:  # as far as the protected window reaches (half the limit)
                        target = self._window()[1]
                    else:
                        target = min(start + self.ahead, schedule.count - 1)
                    if last < target:
                        break
                    complete = self._window_pass(schedule)
                    if complete is not None:
                        break
                    self._wake.wait()
            try:
                if complete is None and schedule.ranged:
                    # a round: enough positions for ``fetches`` requests twice over (the pool kept busy), then
                    # the position is read again
                    b, entries = max(start, last + 1), 0
                    stop = b
                    while stop <= target and entries < 2 * self.fetches:
                        entries += len(schedule.batch_ids(stop))
                        stop += 1
                    # evicting nothing the node's builders fetched ahead: this window's end and the other
                    # builders' reach beyond it (``_lag``: one message each)
                    done = self._fetch_ranged(schedule, b, stop - 1, target + self._lag())
                    fetched = (schedule, done)
                    if done < stop - 1:
                        complete = self._pause(schedule, start)
                elif complete is None:
                    for b in range(max(start, last + 1), target + 1):
                        try:
                            self._fetch_batch(schedule, b)
                        except CacheFullError:
                            target = b - 1
                            break
                    fetched = (schedule, target)
                    if target < start + self.ahead and target < schedule.count - 1:
                        complete = self._pause(schedule, start)
                if complete is not None:
                    fetched = self._complete(complete, schedule, fetched)
            except BaseException as err:  # noqa: BLE001 - the batch that needs the entry fetches it and raises
                self.error = err
                return

    def _window_pass(self, schedule: FileSchedule) -> tuple[int, int] | None:
        """The pass whose window's schedule ``schedule`` is (``windowed``: the thread builds the whole one when it
        has nothing to fetch), else None.  Called holding ``_wake``."""
        held = self._schedule
        return held[0] if held is not None and held[2] and held[1] is schedule else None

    def _pause(self, schedule: FileSchedule, start: int) -> tuple[int, int] | None:
        """No room now: wait for the position to move before trying again; where a window's schedule is held,
        return its pass instead, to complete it meanwhile."""
        with self._wake:
            if self._position == start and self._current is schedule:
                complete = self._window_pass(schedule)
                if complete is None:
                    self._wake.wait()
                return complete
        return None

__all__ = ["CacheSimulation", "FileSchedule", "LOCAL_WORLD_ENV", "PlanFeed", "local_ranks", "once_limit", "simulate"]
