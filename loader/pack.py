"""Reading packs: ``open_pack(path)`` checks the manifest, loads the shard indexes into numpy columns, and maps
stream files lazily (read-only) the first time a sample needs them.

No per-sample Python objects are kept: keys, speakers, offsets and statistics are numpy arrays, so DataLoader
workers forked from a process holding a ``Pack`` do not dirty copy-on-write pages by touching refcounts
(pytorch/pytorch#13246).  This module imports numpy only; the torch glue lives elsewhere in ``loader/``.
"""

from __future__ import annotations

import collections
import json
import os
from dataclasses import dataclass

import numpy as np

from schemas.constants import (
    AUDIO_FULL_SCALE,
    KIND_TSE,
    MANIFEST_NAME,
    OFFSET_DTYPE,
    SHARD_INDEX_NAME,
    STREAM_MIX,
    STREAM_SOURCE,
    STREAM_TARGET,
    STREAMS_BY_KIND,
)
from schemas.errors import PackFormatError
from schemas.format import Manifest, check_shard_index


@dataclass(frozen=True)
class SegmentTable:
    """Every segment of one stream across the pack, in storage order, as parallel arrays.

    Segment ``j`` of the stream lives in shard ``shard[j]`` at element ``offset[j]`` with ``channels[j]`` x
    ``length[j]`` samples.  Sample ``i`` owns segments ``first[i] : first[i] + count[i]``.
    """

    shard: np.ndarray
    offset: np.ndarray
    channels: np.ndarray
    length: np.ndarray
    scale: np.ndarray
    mean: np.ndarray
    rms: np.ndarray
    peak: np.ndarray
    first: np.ndarray
    count: np.ndarray

    _FIELDS = ("offset", "channels", "length", "scale", "mean", "rms", "peak")

    @classmethod
    def from_records(cls, stream: str, records_per_shard: list[list[dict]]) -> "SegmentTable":
        columns: dict[str, list] = {name: [] for name in cls._FIELDS}
        shard_ids: list[int] = []
        counts: list[int] = []
        for shard_id, records in enumerate(records_per_shard):
            for record in records:
                segments = record["streams"][stream]
                counts.append(len(segments))
                shard_ids.extend([shard_id] * len(segments))
                for seg in segments:
                    for name in cls._FIELDS:
                        columns[name].append(seg[name])
        count = np.asarray(counts, dtype=OFFSET_DTYPE)
        first = np.zeros(len(counts), dtype=OFFSET_DTYPE)
        np.cumsum(count[:-1], out=first[1:])
        return cls(
            shard=np.asarray(shard_ids, dtype=np.int32),
            offset=np.asarray(columns["offset"], dtype=OFFSET_DTYPE),
            channels=np.asarray(columns["channels"], dtype=np.int32),
            length=np.asarray(columns["length"], dtype=OFFSET_DTYPE),
            scale=np.asarray(columns["scale"], dtype=np.float64),
            mean=np.asarray(columns["mean"], dtype=np.float64),
            rms=np.asarray(columns["rms"], dtype=np.float64),
            peak=np.asarray(columns["peak"], dtype=np.float64),
            first=first,
            count=count,
        )


@dataclass(frozen=True)
class Sample:
    """One sample read back as float32: ``mix`` ``[C, T]`` (None in a sources pack) and ``targets`` ``[N, T]``,
    one row per speaker (a sources pack's single row is its source)."""

    key: str
    speakers: tuple[str, ...]
    mix: np.ndarray | None
    targets: np.ndarray


#: Stream files a Pack keeps mapped at once (per process).  Each mapping costs a file descriptor and one entry
#: of ``vm.max_map_count`` (65530 by default); least recently used files are unmapped beyond this.
MAX_OPEN_STREAM_FILES = 256


class Pack:
    """A read-only view of a pack.  Build it with :func:`open_pack`."""

    def __init__(self, path: str, manifest: Manifest, records_per_shard: list[list[dict]],
                 max_open_files: int = MAX_OPEN_STREAM_FILES):
        self.path = path
        self.manifest = manifest
        self.kind = manifest.kind
        self.sample_rate = manifest.sample_rate
        records = [r for shard in records_per_shard for r in shard]
        self.keys = np.asarray([r["key"] for r in records], dtype=np.str_)
        self.shard = np.repeat(np.arange(len(records_per_shard), dtype=np.int32),
                               [len(shard) for shard in records_per_shard])
        self.num_frames = np.asarray([r["num_frames"] for r in records], dtype=OFFSET_DTYPE)
        self.orig_sample_rate = np.asarray([r["orig_sample_rate"] for r in records], dtype=np.int64)
        speaker_counts = np.asarray([len(r["speakers"]) for r in records], dtype=OFFSET_DTYPE)
        self.speaker_first = np.zeros(len(records), dtype=OFFSET_DTYPE)
        np.cumsum(speaker_counts[:-1], out=self.speaker_first[1:])
        self.speaker_count = speaker_counts
        self.speakers = np.asarray([s for r in records for s in r["speakers"]], dtype=np.str_)
        self.streams = {name: SegmentTable.from_records(name, records_per_shard) for name in STREAMS_BY_KIND[self.kind]}
        self._shard_dirs = [os.path.join(path, shard.directory) for shard in manifest.shards]
        self._arrays: collections.OrderedDict[tuple[int, str], np.ndarray] = collections.OrderedDict()
        self._max_open = max_open_files

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"Pack({self.path!r}, kind={self.kind!r}, samples={len(self)}, sample_rate={self.sample_rate})"

    @property
    def duration(self) -> np.ndarray:
        """Seconds per sample."""
        return self.num_frames / self.sample_rate

    def speakers_of(self, index: int) -> tuple[str, ...]:
        start = self.speaker_first[index]
        return tuple(str(s) for s in self.speakers[start:start + self.speaker_count[index]])

    def __getstate__(self) -> dict:
        """Pickling (DataLoader workers under spawn) carries the index, never open mappings."""
        state = self.__dict__.copy()
        state["_arrays"] = collections.OrderedDict()
        return state

    def stream_array(self, shard: int, stream: str) -> np.ndarray:
        """The memory-mapped stream file of a shard: mapped on first use, kept in a bounded LRU."""
        cached = self._arrays.get((shard, stream))
        if cached is not None:
            self._arrays.move_to_end((shard, stream))
        else:
            spec = self.manifest.stream(stream)
            path = os.path.join(self._shard_dirs[shard], spec.file)
            try:
                cached = np.load(path, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as err:
                raise PackFormatError(f"{path}: cannot map stream file ({err})") from None
            if cached.dtype.str != spec.dtype or cached.ndim != 1 + len(spec.row_shape):
                raise PackFormatError(f"{path}: holds {cached.dtype.str} {cached.shape}, the catalogue says "
                                      f"{spec.dtype} rows of {list(spec.row_shape)}")
            self._arrays[(shard, stream)] = cached
            if len(self._arrays) > self._max_open:
                self._arrays.popitem(last=False)
        return cached

    def stored_segment(self, stream: str, segment: int) -> tuple[np.ndarray, float]:
        """Segment ``segment`` of ``stream`` as the stored int16 ``[C, T]`` view (no copy) and its decode factor
        (``scale / 32768``): ``view * factor`` is the audio."""
        table = self.streams[stream]
        channels, length = int(table.channels[segment]), int(table.length[segment])
        array = self.stream_array(int(table.shard[segment]), stream)
        offset = int(table.offset[segment])
        return array[offset:offset + channels * length].reshape(channels, length), float(table.scale[segment]) / AUDIO_FULL_SCALE

    def read_segment(self, stream: str, segment: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Decode samples ``[start, stop)`` of every channel of one segment to float32 ``[C, stop - start]``."""
        stored, factor = self.stored_segment(stream, segment)
        length = stored.shape[1]
        stop = length if stop is None else stop
        if not 0 <= start <= stop <= length:
            raise IndexError(f"segment {segment} of {stream!r} has {length} samples; asked for [{start}, {stop})")
        return stored[:, start:stop].astype(np.float32) * np.float32(factor)

    def segments_of(self, stream: str, index: int) -> range:
        table = self.streams[stream]
        first = int(table.first[index])
        return range(first, first + int(table.count[index]))

    def sample(self, index: int) -> Sample:
        """Sample ``index`` decoded to float32 (a copy; the mapping stays untouched)."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"sample {index} out of range for a pack of {len(self)}")
        index %= len(self)
        if self.kind == KIND_TSE:
            mix = self.read_segment(STREAM_MIX, self.segments_of(STREAM_MIX, index)[0])
            targets = np.concatenate([self.read_segment(STREAM_TARGET, j)
                                      for j in self.segments_of(STREAM_TARGET, index)], axis=0)
        else:
            mix = None
            targets = self.read_segment(STREAM_SOURCE, self.segments_of(STREAM_SOURCE, index)[0])
        return Sample(key=str(self.keys[index]), speakers=self.speakers_of(index), mix=mix, targets=targets)


def read_manifest(path: str) -> Manifest:
    """Parse and check ``PACK/dataset.json``; a directory without one is not a pack."""
    manifest_path = os.path.join(path, MANIFEST_NAME)
    if not os.path.isdir(path):
        raise PackFormatError(f"{path}: no such pack directory")
    if not os.path.isfile(manifest_path):
        raise PackFormatError(f"{path}: not a pack (no {MANIFEST_NAME}; an unfinished build leaves none)")
    try:
        with open(manifest_path, encoding="utf-8") as fp:
            raw = json.load(fp)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PackFormatError(f"{manifest_path}: cannot read JSON ({err})") from None
    return Manifest.from_dict(raw, manifest_path)


def read_shard_index(path: str, manifest: Manifest, shard: int) -> list[dict]:
    """Parse and check one shard's ``index.json`` against the manifest."""
    entry = manifest.shards[shard]
    index_path = os.path.join(path, entry.directory, SHARD_INDEX_NAME)
    try:
        with open(index_path, encoding="utf-8") as fp:
            raw = json.load(fp)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PackFormatError(f"{index_path}: cannot read shard index ({err})") from None
    records = check_shard_index(raw, manifest.kind, index_path)
    if len(records) != entry.samples:
        raise PackFormatError(f"{index_path}: holds {len(records)} samples, {MANIFEST_NAME} says {entry.samples}")
    return records


def open_pack(path: str | os.PathLike) -> Pack:
    """Open the pack at ``path`` for reading; refuses unknown major versions and malformed indexes."""
    path = os.fspath(path)
    manifest = read_manifest(path)
    records = [read_shard_index(path, manifest, shard) for shard in range(len(manifest.shards))]
    return Pack(path, manifest, records)
