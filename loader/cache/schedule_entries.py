"""The entries of a ``FileSchedule`` (``loader.cache.schedule``): each entry id's cache name, size and source
(where the fetch-ahead gets it), held for a plan's millions of entries without a Python object per entry.

Whole stream files (a few per shard) are listed by name.  The segments of packs read by ranges
(``loader.cache.segment_schedule``) are arrays (their stream file's version, byte start and size), and a segment's
name (``loader.cache.ranges.segment_key``) is spelled only when asked for: the entries of a batch being fetched, an
entry the cache weighs for eviction.  ``find`` reads a name back to its id (a sorted search), so a schedule of a
million segments is built in arrays, tenths of a second, where a dict of their names took seconds and hundreds of
megabytes.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from speechpack.loader.cache.ranges import segment_key, segment_key_parts
from speechpack.schemas.errors import PackFormatError


@dataclass(frozen=True)
class SegmentGroup:
    """The segments one pack's stream contributes, one row per segment: ``prefixes`` (the sha256 prefix of each
    shard's stream file), and per segment its ``shard``, byte ``start`` in the file, ``size``, and ``local`` index
    in its shard's layout; ``source`` fetches ``(shard, stream, local)`` (``segment_schedule.SegmentSource``)."""

    source: object
    stream: str
    prefixes: Sequence[str]
    shard: np.ndarray
    start: np.ndarray
    size: np.ndarray
    local: np.ndarray


class SegmentEntries:
    """Segment entries sorted by (stream file version, start, size): one per distinct segment of the groups, a
    segment two packs share (one version of a file in both) once."""

    def __init__(self, groups: Sequence[SegmentGroup]):
        self.groups = list(groups)
        self._prefix_id: dict[str, int] = {}
        ids = [np.asarray([self._prefix_id.setdefault(p, len(self._prefix_id)) for p in group.prefixes],
                          dtype=np.int64) for group in self.groups]
        #: The stream file versions' sha256 prefixes, by file id.
        self.prefixes = list(self._prefix_id)

        def joined(arrays) -> np.ndarray:  # every group's rows, one after another (one group's: not copied)
            arrays = [np.asarray(a, dtype=np.int64) for a in arrays]
            return arrays[0] if len(arrays) == 1 else np.concatenate([np.zeros(0, np.int64)] + arrays)

        start, size = joined(g.start for g in self.groups), joined(g.size for g in self.groups)
        shard, local = joined(g.shard for g in self.groups), joined(g.local for g in self.groups)
        counts = [len(g.shard) for g in self.groups]
        #: A key orders (file version, start) as one integer: ``file * span + start``.
        self.span = 1 + int(start.max(initial=0))
        if len(self.prefixes) * self.span >= 2 ** 62:
            raise PackFormatError(f"the plan's packs hold {len(self.prefixes)} stream files of up to {self.span} "
                                  f"bytes: more than a schedule can number")
        key = joined(ids[g][np.asarray(group.shard, dtype=np.int64)] for g, group in enumerate(self.groups))
        key = key * self.span + start
        group = np.repeat(np.arange(len(self.groups), dtype=np.int64), counts)
        if np.all(key[1:] > key[:-1]):  # one pack's segments in storage order: already distinct and sorted
            inverse = np.arange(len(key))
        else:  # an entry is (file version, start, size): a file two shards or packs hold is one entry per segment
            order = np.lexsort((size, key))
            new = np.concatenate([[True], (key[order][1:] != key[order][:-1]) | (size[order][1:] != size[order][:-1])])
            first = order[new]
            inverse = np.empty(len(key), dtype=np.int64)
            inverse[order] = np.cumsum(new) - 1
            key, size, group, shard, local = key[first], size[first], group[first], shard[first], local[first]
        #: Sorted ascending (ties, one start given two sizes, by size).
        self.key, self.size = key, size
        #: Where the fetch-ahead gets each entry: its group's source, its shard and index in the shard's layout.
        self.group, self.shard, self.local = group, shard, local
        bounds = np.cumsum([0] + counts)
        #: Per group, the entry of each of its rows.
        self.row_entry = [inverse[bounds[g]:bounds[g + 1]] for g in range(len(self.groups))]

    def __len__(self) -> int:
        return len(self.key)

    def name(self, i: int) -> str:
        file, start = divmod(int(self.key[i]), self.span)
        return segment_key(self.prefixes[file], start, int(self.size[i])).name

    def find(self, name: str) -> int | None:
        """The id of the entry ``name`` spells (None: not one of these)."""
        parts = segment_key_parts(name)
        file = None if parts is None else self._prefix_id.get(parts[0])
        if file is None or not 0 <= parts[1] < self.span:
            return None
        key = file * self.span + parts[1]
        i = int(np.searchsorted(self.key, key))
        while i < len(self.key) and int(self.key[i]) == key:
            if int(self.size[i]) == parts[2]:
                return i if self.name(i) == name else None
            i += 1
        return None

    def source(self, i: int) -> tuple[object, tuple[int, str, int]]:
        group = self.groups[int(self.group[i])]
        return group.source, (int(self.shard[i]), group.stream, int(self.local[i]))


class ScheduleEntries:
    """Whole files first (``names``, ``sizes`` and ``sources`` listed alike), then ``segments``' entries."""

    def __init__(self, names: list[str], sizes: Sequence[int], sources: list, segments: SegmentEntries | None = None):
        self._names, self._sources = names, sources
        self._index = {name: i for i, name in enumerate(names)}
        self.whole = len(names)
        self.segments = segments
        whole = np.asarray(sizes, dtype=np.int64).reshape(-1)
        #: Each entry's size in bytes.
        self.sizes = whole if segments is None else np.concatenate([whole, segments.size])

    def __len__(self) -> int:
        return len(self.sizes)

    def name(self, i: int) -> str:
        return self._names[i] if i < self.whole else self.segments.name(i - self.whole)

    def find(self, name: str) -> int | None:
        found = self._index.get(name)
        if found is None and self.segments is not None:
            found = self.segments.find(name)
            found = None if found is None else found + self.whole
        return found

    def source(self, i: int):
        return self._sources[i] if i < self.whole else self.segments.source(i - self.whole)

    def with_segments(self, segments: SegmentEntries) -> "ScheduleEntries":
        """These whole files, then ``segments``."""
        return ScheduleEntries(self._names, self.sizes[:self.whole], self._sources, segments)


__all__ = ["ScheduleEntries", "SegmentEntries", "SegmentGroup"]
