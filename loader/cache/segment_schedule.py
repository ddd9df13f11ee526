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


def _stream_entries(pack, stream: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per segment of ``stream``: entry name, size, shard and index in its shard's layout (all segments at once)."""
    ranges = pack.files.range_reads
    with ranges._layout_lock:  # shared with the fetch-ahead thread of a later epoch's process
        layouts = ranges.layouts(pack)
        layouts._sorted(stream)
    table = pack.streams[stream]
    shard = np.asarray(table.shard, dtype=np.int64)
    spec = pack.manifest.stream(stream)
    starts = np.zeros(len(shard), dtype=np.int64)
    sizes = np.zeros(len(shard), dtype=np.int64)
    prefixes = np.empty(len(shard), dtype="<U16")
    for k in np.unique(shard).tolist():  # one vectorised layout per shard the stream has segments in
        layout = ranges.layout(pack, k, stream)
        starts[layout.segments], sizes[layout.segments] = layout.start, layout.size
        prefixes[layout.segments] = pack.manifest.shards[k].files[spec.file].sha256[:16]
    hexes = np.char.zfill(np.char.mod("%x", starts), 16)
    names = np.char.add(np.char.add(prefixes, hexes), np.char.add("-", sizes.astype(str)))
    return names, sizes, shard, layouts.local[stream]


def segment_schedule(packs: list, plans: list, units: tuple[np.ndarray, np.ndarray]) -> FileSchedule:
    """``FileSchedule.of(packs, plans, units)`` with the audio segments of packs read by ranges as entries (each
    batch position's segments in the order its rows first reach them, after its whole files)."""
    files = FileSchedule.of(packs, plans, units)
    unit_pack, unit_sample = (np.asarray(a, dtype=np.int64) for a in units)
    position, unit = _plan_rows(plans)
    names: list[str] = list(files.names or [])
    sizes, sources = dict(files.sizes), dict(files.sources)
    entry_position = [np.asarray(files.entry_position, dtype=np.int64)]
    entry_file = [np.asarray(files.entry_file, dtype=np.int64)]
    for pid, pack in enumerate(packs):
        ranges = pack.files.range_reads
        if ranges is None or pack.files.read_through or not len(position):  # read through: nothing to schedule
            continue
        mine = unit_pack[unit] == pid
        at, sample = position[mine], unit_sample[unit[mine]]
        source = SegmentSource(pack.files)
        for spec in pack.manifest.streams:
            if not ranges.reads(spec.name):
                continue
            table = pack.streams[spec.name]
            first = np.asarray(table.first, dtype=np.int64)[sample]
            count = np.asarray(table.count, dtype=np.int64)[sample]
            segment = np.repeat(first, count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
            seg_at = np.repeat(at, count)
            keep = _first_in_batch(seg_at, segment, len(table.shard))
            seg_at, segment = seg_at[keep], segment[keep]
            used, inverse = np.unique(segment, return_inverse=True)
            all_names, all_sizes, shard, local = _stream_entries(pack, spec.name)
            base = len(names)
            used_names = all_names[used].tolist()
            names += used_names
            for name, seg, size in zip(used_names, used.tolist(), all_sizes[used].tolist()):
                sizes[name] = size
                sources[name] = (source, (int(shard[seg]), spec.name, int(local[seg])))
            entry_position.append(seg_at)
            entry_file.append(base + inverse.astype(np.int64))
    position_all = np.concatenate(entry_position)
    file_all = np.concatenate(entry_file)
    order = np.argsort(position_all, kind="stable")  # whole files first within a position, then segments
    position_all, file_all = position_all[order], file_all[order]
    # the same name reached through two packs' entries (one version of a file in two packs) is one entry
    index: dict[str, int] = {}
    remap = np.asarray([index.setdefault(n, len(index)) for n in names], dtype=np.int64)
    file_all = remap[file_all] if len(file_all) else file_all
    first = _first_in_batch(position_all, file_all, len(index))
    position_all, file_all = position_all[first], file_all[first]
    count = max((len(p) for p in plans), default=0)
    schedule = FileSchedule(None, sizes, sources, list(index), position_all, file_all, count)
    schedule.ranged = len(names) > len(files.names or [])
    return schedule


__all__ = ["SegmentSource", "segment_schedule"]
