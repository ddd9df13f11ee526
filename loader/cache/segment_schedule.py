"""The epoch plan's schedule for packs read by ranges (``loader.cache.ranges``): ``segment_schedule``, a
``loader.cache.schedule.FileSchedule`` whose entries are the audio segments each batch position reads (the range
entries of the node cache, named by ``ranges.segment_key``) beside the whole files of everything else.

Why the same class: the plan-ordered fetch-ahead, Belady eviction, the check that a limit holds the batches built
together and ``speechpack plan``'s replay (``simulate``, ``once_limit``) all read a ``FileSchedule``; with segments
as its entries they hold for range reads unchanged.  An entry's source is a :class:`SegmentSource`, whose
``local_path`` fetches the segment into the node cache (``RangeReads.prefetch``), as ``CachedPackFiles.local_path``
does a whole file.  Names come from the manifest and the columns alone (no digest is fetched to build it).
"""

from __future__ import annotations

import numpy as np

from speechpack.loader.cache.cached_files import CachedPackFiles
from speechpack.loader.cache.schedule import FileSchedule, _first_in_batch, _plan_rows
from speechpack.loader.cache.schedule_entries import SegmentEntries, SegmentGroup


class SegmentSource:
    """Where the fetch-ahead gets a segment entry: ``local_path((shard, stream, i), wait)`` fetches segment ``i`` of
    that shard's stream layout into the node cache."""

    def __init__(self, files: CachedPackFiles):
        self.files = files

    def local_path(self, where: tuple[int, str, int], wait: bool = True) -> str | None:
        return self.files.range_reads.prefetch(*where, wait=wait)

    def fetch_ahead(self, items: list[tuple[tuple[int, str, int], int]], fetches: int, horizon: int = -1) -> int | None:
        """Entries ``(where, batch position)`` fetched ahead together (``RangeReads.fetch_ahead``): the position
        of the first not admitted, None when all were."""
        return self.files.range_reads.fetch_ahead([(*where, position) for where, position in items], fetches, horizon)


def _stream_segments(pack, stream: str, source: SegmentSource, used: np.ndarray) -> SegmentGroup:
    """The ``used`` segments of ``stream`` as schedule entries: their shard, byte start, size and index in their
    shard's layout, from the layouts of the shards they lie in (each vectorised once)."""
    ranges = pack.files.range_reads
    with ranges._layout_lock:  # shared with the fetch-ahead thread of a later epoch's process
        layouts = ranges.layouts(pack)
        layouts._sorted(stream)
    table = pack.streams[stream]
    shard = np.asarray(table.shard[used], dtype=np.int64)
    starts = np.zeros(len(used), dtype=np.int64)
    sizes = np.zeros(len(used), dtype=np.int64)
    local = layouts.local[stream][used]
    # used is in storage order: one run per shard (none when no segment is used: a window that reads none here)
    bounds = np.flatnonzero(np.concatenate([[True], shard[1:] != shard[:-1], [True]])) if len(used) else []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        layout = ranges.layout(pack, int(shard[lo]), stream)
        starts[lo:hi], sizes[lo:hi] = layout.start[local[lo:hi]], layout.size[local[lo:hi]]
    file = pack.manifest.stream(stream).file
    prefixes = [entry.files[file].sha256[:16] for entry in pack.manifest.shards]
    return SegmentGroup(source, stream, prefixes, shard, starts, sizes, local)


#: A stream's segments are found by sorting the rows' when the rows are fewer than 1 in this many of them.
_FEW = 16


def segment_schedule(packs: list, plans: list, units: tuple[np.ndarray, np.ndarray]) -> FileSchedule:
    """``FileSchedule.of(packs, plans, units)`` with the audio segments of packs read by ranges as entries (each
    batch position's segments in the order its rows first reach them, after its whole files)."""
    files = FileSchedule.of(packs, plans, units)
    unit_pack, unit_sample = (np.asarray(a, dtype=np.int64) for a in units)
    position, unit = _plan_rows(plans)
    groups: list[SegmentGroup] = []
    rows: list[tuple[np.ndarray, np.ndarray]] = []  # per group: each row's position and index in its used segments
    for pid, pack in enumerate(packs):
        ranges = pack.files.range_reads
        if ranges is None or pack.files.read_through or not len(position):  # read through: nothing to schedule
            continue
        if len(packs) == 1:
            at, sample = position, unit_sample[unit]
        else:
            mine = unit_pack[unit] == pid
            at, sample = position[mine], unit_sample[unit[mine]]
        source = SegmentSource(pack.files)
        for spec in pack.manifest.streams:
            if not ranges.reads(spec.name):
                continue
            table = pack.streams[spec.name]
            segment = np.asarray(table.first[sample], dtype=np.int64)
            per_sample = np.asarray(table.count[sample], dtype=np.int64)
            if np.any(per_sample != 1):  # a sample of several segments
                segment = np.repeat(segment, per_sample) + (np.arange(int(per_sample.sum()))
                                                            - np.repeat(np.cumsum(per_sample) - per_sample, per_sample))
                seg_at = np.repeat(at, per_sample)
            else:
                seg_at = at
            keep = _first_in_batch(seg_at, segment, len(table.shard))
            seg_at, segment = seg_at[keep], segment[keep]
            if len(segment) * _FEW < len(table.shard):  # a window's few rows: a sort of them, not a pass over all
                used, index = np.unique(segment, return_inverse=True)
            else:
                reached = np.zeros(len(table.shard), dtype=bool)
                reached[segment] = True
                used, index = np.flatnonzero(reached), (np.cumsum(reached) - 1)[segment]
            groups.append(_stream_segments(pack, spec.name, source, used))  # used: in storage order
            rows.append((seg_at, index.reshape(-1)))
    segments = SegmentEntries(groups)
    whole = files.entries.whole
    count = max((len(p) for p in plans), default=0)
    # fewer entries than segments: one version of a stream file in two shards or packs, a segment reached through
    # both being one entry (which a position may then reach twice)
    merged = len(segments) < sum(len(g.shard) for g in groups)
    if whole == 0 and len(rows) == 1 and not merged:  # one stream's segments, each distinct in its position already
        position_all, file_all = rows[0][0], segments.row_entry[0][rows[0][1]]
    else:
        position_all = np.concatenate([files.entry_position] + [at for at, _ in rows])
        file_all = np.concatenate([files.entry_file] + [whole + segments.row_entry[g][inverse]
                                                        for g, (_, inverse) in enumerate(rows)])
        order = np.argsort(position_all, kind="stable")  # whole files first within a position, then segments
        position_all, file_all = position_all[order], file_all[order]
        if merged:
            first = _first_in_batch(position_all, file_all, whole + len(segments))
            position_all, file_all = position_all[first], file_all[first]
    schedule = FileSchedule(files.entries.with_segments(segments), position_all, file_all, count)
    schedule.ranged = len(segments) > 0
    return schedule


def segment_bound(packs: list, plans: list, units: tuple[np.ndarray, np.ndarray]) -> int | None:
    """An upper bound of the bytes any batch position of ``plans`` reads from the node cache, where every entry
    of these packs' schedule is a segment (None where some is a whole file: a pack without block digests, a data
    stream's file, which only the schedule itself counts once per position): the most rows one position holds
    (every local rank's batch at it) times the most bytes one sample's segments take.  What
    ``FileSchedule.batch_bytes(1)`` of the schedule is at most, from a few passes over the plans and the columns in
    storage order, without the schedule (``PlanFeed.check``: a batch's samples lie anywhere in the columns, and
    gathering a million of them costs most of what the schedule does)."""
    largest = 0
    for pack in packs:
        files = pack.files
        if not isinstance(files, CachedPackFiles) or files.read_through:
            continue  # a local pack, or one read through: nothing of it is scheduled
        ranges = files.range_reads
        if ranges is None or not all(ranges.reads(spec.name) for spec in pack.manifest.streams):
            return None
        with ranges._layout_lock:  # shared with the fetch-ahead thread
            layouts = ranges.layouts(pack)
            largest = max(largest, sum(_largest_sample(pack.streams[spec.name], layouts.sizes(spec.name))
                                       for spec in pack.manifest.streams))
    rows = 0
    for plan in plans:
        if not len(plan):
            continue
        if plan.offsets is None:
            rows += int(np.asarray(plan.items).reshape(len(plan), -1).shape[1])
        else:
            rows += int(np.diff(np.asarray(plan.offsets, dtype=np.int64)).max())
    return rows * largest


def _largest_sample(table, sizes: np.ndarray) -> int:
    """The most bytes one sample's segments of ``table`` take (``sizes``: every segment's)."""
    count = np.asarray(table.count, dtype=np.int64)
    if not len(count):
        return 0
    if np.all(count == 1):
        return int(sizes.max(initial=0))
    total = np.concatenate([np.zeros(1, np.int64), np.cumsum(sizes)])
    first = np.asarray(table.first, dtype=np.int64)
    return int((total[first + count] - total[first]).max())


__all__ = ["SegmentSource", "segment_bound", "segment_schedule"]
