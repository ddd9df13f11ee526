"""The pack's columnar index: ``PACK/columns/*.npy``, every shard's ``index.json`` as a few numpy arrays.

``index.json`` is the human-readable record; the columns say the same thing in a form a reader loads in
milliseconds (parsing a million JSON records takes many seconds, and start-up time is a training job's idle GPU).
Both are written by the build and hashed in the manifest; ``speechpack validate`` recomputes the columns from the
shard indexes and requires them to be equal.

Files (all plain ``.npy``, no pickled objects):

``samples.npy``   one row per sample, in pack order: ``shard``, ``num_frames``, ``orig_sample_rate``, ``line``,
                  ``speaker_first``, ``speaker_count``, and per stream ``<stream>_first``, ``<stream>_count`` (the
                  sample's rows in that stream's table).
``keys.npy``      UTF-8 key per sample (numpy bytes, ``|S<n>``).
``speakers.npy``  UTF-8 speaker id per slot, every sample's slots one after another (``|S<n>``).
``<stream>.npy``  one row per segment.  Audio streams: ``shard``, ``offset``, ``channels``, ``length``,
                  ``scale``, ``mean``, ``rms``, ``peak``; data streams (faces, labels, text): ``shard``, ``offset``,
                  ``length`` (in rows).
``<stream>_blocks.npy`` a compressed audio stream (format 1.4): ``<i8``, every block's byte size, segments in
                  storage order (segment ``s`` owns ``ceil(length_s / block_frames)`` consecutive rows); the
                  ``offset`` of such a stream's segments is in bytes.
``attr_<name>.npy`` kinds with per-sample attributes (``asd``, ``asr``; ``ATTRIBUTES_BY_KIND``): one value per
                  sample, ``<f8`` for numbers, UTF-8 ``|S<n>`` for strings.

**What a reader checks** at open, beyond the hashes (``check_column_types``, ``check_column_values``): every index
into another array is in range, and every segment lies inside its shard's stream file.  Pure numpy, vectorised
(tens of milliseconds for a million samples; ``docs/format.md``, "What a reader verifies").  ``open_pack`` first
compares each column file's sha256 with ``dataset.json``, which refuses any edit of a column alone; these checks
cover what a hash cannot: a manifest rewritten to match edited columns, or a writer bug.  Before them an edited
``offset``, ``length``, ``shard`` or ``scale`` opened fine and returned other audio, or failed deep inside a batch
with "cannot reshape".

The rules follow from the format (``schemas/format.py``): samples are stored shard after shard; every sample owns
at least one speaker slot and one segment per stream, the next sample's right after; a segment lives in its
sample's shard; segments of a stream follow each other with no gap from element (or row) 0, so a shard's stream
file holds exactly their total, which :func:`check_column_values` returns so that the reader can compare it with the
file's ``.npy`` header when it maps the file (at open, only the size ``dataset.json`` records is known: it must be
that total plus an aligned ``.npy`` header, which catches any segment beyond the file by more than the header's
slack); ``scale`` is finite and at least 1 (it only ever grows to avoid clipping).  A compressed stream follows
the same rules in bytes: every block size is positive, each segment owns exactly ``ceil(length / block_frames)``
blocks, its size is the sum of its blocks' sizes, and its segments follow each other with no gap from byte 0.

Digests (format 1.4, ``shard-k/digests.npy``) hold one row per *piece* of a shard: every block of a compressed
segment, every whole segment of any other stream, streams in catalogue order; :func:`digest_piece_counts` gives
the row count each shard's file must have.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

import numpy as np

from speechpack.schemas.constants import (
    BLOCK_SIZE_DTYPE,
    COMPRESSED_DTYPE,
    KEYS_FILE,
    MANIFEST_NAME,
    SAMPLES_FILE,
    SPEAKERS_FILE,
    STREAM_TYPES,
    attr_file,
    block_count,
    blocks_column_file,
    stream_column_file,
)
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import Manifest
from speechpack.schemas.kinds import ATTRIBUTES_BY_KIND, STREAMS_BY_KIND

SEGMENT_DTYPE = np.dtype([
    ("shard", "<i4"), ("offset", "<i8"), ("channels", "<i4"), ("length", "<i8"),
    ("scale", "<f8"), ("mean", "<f8"), ("rms", "<f8"), ("peak", "<f8"),
])
_SEGMENT_FIELDS = ("offset", "channels", "length", "scale", "mean", "rms", "peak")
DATA_SEGMENT_DTYPE = np.dtype([("shard", "<i4"), ("offset", "<i8"), ("length", "<i8")])
_DATA_SEGMENT_FIELDS = ("offset", "length")


def segment_fields(stream: str) -> tuple[str, ...]:
    """The keys of a segment record of ``stream`` (besides the shard, which the columns add)."""
    return _SEGMENT_FIELDS if STREAM_TYPES[stream].audio else _DATA_SEGMENT_FIELDS


def segment_dtype(stream: str) -> np.dtype:
    return SEGMENT_DTYPE if STREAM_TYPES[stream].audio else DATA_SEGMENT_DTYPE


def sample_dtype(kind: str) -> np.dtype:
    fields = [("shard", "<i4"), ("num_frames", "<i8"), ("orig_sample_rate", "<i4"), ("line", "<i8"),
              ("speaker_first", "<i8"), ("speaker_count", "<i4")]
    for stream in STREAMS_BY_KIND[kind]:
        fields += [(f"{stream}_first", "<i8"), (f"{stream}_count", "<i4")]
    return np.dtype(fields)


class ColumnBuilder:
    """Accumulates sample records (``index.json`` form) and turns them into the column arrays.  ``compressed``
    names the streams with a codec: their segments' ``blocks`` go to ``<stream>_blocks.npy``."""

    def __init__(self, kind: str, compressed: Iterable[str] = ()):
        self.kind = kind
        self._samples: list[tuple] = []
        self._keys: list[bytes] = []
        self._speakers: list[bytes] = []
        self._segments: dict[str, list[tuple]] = {s: [] for s in STREAMS_BY_KIND[kind]}
        self._blocks: dict[str, list[int]] = {s: [] for s in STREAMS_BY_KIND[kind] if s in set(compressed)}
        self._attrs: dict[str, list] = {name: [] for name in ATTRIBUTES_BY_KIND.get(kind, {})}

    def add(self, shard: int, record: dict) -> None:
        row = [shard, record["num_frames"], record["orig_sample_rate"], record["line"], len(self._speakers),
               len(record["speakers"])]
        for stream, rows in self._segments.items():
            segments = record["streams"][stream]
            row += [len(rows), len(segments)]
            fields = segment_fields(stream)
            rows.extend((shard, *(seg[f] for f in fields)) for seg in segments)
            blocks = self._blocks.get(stream)
            if blocks is not None:
                for seg in segments:
                    blocks.extend(seg["blocks"])
        for name, values in self._attrs.items():
            values.append(record["attrs"][name])
        self._samples.append(tuple(row))
        self._keys.append(record["key"].encode("utf-8"))
        self._speakers.extend(s.encode("utf-8") for s in record["speakers"])

    def arrays(self) -> dict[str, np.ndarray]:
        """File name -> array, for every column file."""
        result = {
            SAMPLES_FILE: np.array(self._samples, dtype=sample_dtype(self.kind)),
            KEYS_FILE: _bytes_array(self._keys),
            SPEAKERS_FILE: _bytes_array(self._speakers),
        }
        for stream, rows in self._segments.items():
            result[stream_column_file(stream)] = np.array(rows, dtype=segment_dtype(stream))
        for stream, sizes in self._blocks.items():
            result[blocks_column_file(stream)] = np.array(sizes, dtype=BLOCK_SIZE_DTYPE)
        for name, values in self._attrs.items():
            if ATTRIBUTES_BY_KIND[self.kind][name] is str:
                result[attr_file(name)] = _bytes_array([v.encode("utf-8") for v in values])
            else:
                result[attr_file(name)] = np.array(values, dtype="<f8")
        return result


def _bytes_array(values: list[bytes]) -> np.ndarray:
    width = max((len(v) for v in values), default=1) or 1
    return np.array(values, dtype=f"|S{width}")


#: The largest ``.npy`` header a stream file may have: format 1.0 stores the header length in 16 bits.
_MAX_NPY_HEADER = 10 + 0xFFFF
_MIN_NPY_HEADER = 10
#: The ``.npy`` format pads its header so the data is aligned: to 64 bytes since numpy 1.9 (what its format
#: documentation now requires), to 16 before.  A recorded file size must leave room for such a header.
_NPY_HEADER_ALIGN = 16


def check_column_types(manifest: Manifest, columns: dict[str, np.ndarray], columns_dir: str) -> None:
    """Every column file has the kind's dtype, one dimension and the manifest's row count (cheap: no data read)."""
    kind = manifest.kind
    n = manifest.num_samples
    at = os.path.join(columns_dir, SAMPLES_FILE)
    _dtype(columns[SAMPLES_FILE], sample_dtype(kind), at)
    _length(columns[SAMPLES_FILE], n, at)
    for name in (KEYS_FILE, SPEAKERS_FILE):
        array = columns[name]
        if array.ndim != 1 or array.dtype.kind != "S":
            raise PackFormatError(f"{os.path.join(columns_dir, name)}: expected 1-D UTF-8 bytes (|S<n>), got "
                                  f"{array.dtype.str} {array.shape}")
    _length(columns[KEYS_FILE], n, os.path.join(columns_dir, KEYS_FILE))
    for name, kind_of in ATTRIBUTES_BY_KIND.get(kind, {}).items():
        array = columns[attr_file(name)]
        where = os.path.join(columns_dir, attr_file(name))
        if array.ndim != 1 or (array.dtype.kind != "S" if kind_of is str else array.dtype.str != "<f8"):
            raise PackFormatError(f"{where}: unexpected dtype {array.dtype.str} {array.shape}")
        _length(array, n, where)
    for stream in STREAMS_BY_KIND[kind]:
        file = stream_column_file(stream)
        _dtype(columns[file], segment_dtype(stream), os.path.join(columns_dir, file))
    for stream in manifest.block_frames:
        file = blocks_column_file(stream)
        _dtype(columns[file], BLOCK_SIZE_DTYPE, os.path.join(columns_dir, file))


def check_column_values(manifest: Manifest, sample_shard: np.ndarray, speaker_first: np.ndarray,
                        speaker_count: np.ndarray, speaker_rows: int, streams: dict[str, Any],
                        columns_dir: str, blocks: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Check the columns' values against each other and the manifest, given as the reader's own arrays
    (views of the columns' fields: nothing is copied): ``streams`` maps each stream to an object with the per-segment arrays
    ``shard``, ``offset``, ``length`` (and ``channels``, ``scale`` for audio) and the per-sample ``first`` and
    ``count``.  ``blocks`` maps each compressed stream (format 1.4) to its ``<stream>_blocks.npy`` array; such a
    stream's offsets and rows are in bytes.  Raise ``PackFormatError`` naming the column file, the row and both
    values.  Return, per stream, the row count each shard's stream file must have (int64, one entry per shard;
    bytes for a compressed stream)."""
    at = os.path.join(columns_dir, SAMPLES_FILE)
    shard = sample_shard
    _in_range(shard, len(manifest.shards), "shard", at)
    if len(shard) and np.any(shard[1:] < shard[:-1]):
        row = int(np.flatnonzero(shard[1:] < shard[:-1])[0]) + 1
        raise PackFormatError(f"{at}: row {row}: shard {int(shard[row])} after shard {int(shard[row - 1])} "
                              f"(samples are stored shard after shard)")
    per_shard = np.bincount(shard, minlength=len(manifest.shards)) if len(shard) else np.zeros(len(manifest.shards))
    expected = np.array([entry.samples for entry in manifest.shards], dtype=np.int64)
    if not np.array_equal(per_shard, expected):
        bad = int(np.flatnonzero(per_shard != expected)[0])
        raise PackFormatError(f"{at}: {int(per_shard[bad])} samples in shard {bad}, {MANIFEST_NAME} says "
                              f"{int(expected[bad])}")
    _runs(speaker_first, speaker_count, speaker_rows, "speaker", at)

    rows = {}
    for stream in STREAMS_BY_KIND[manifest.kind]:
        table = streams[stream]
        where = os.path.join(columns_dir, stream_column_file(stream))
        _runs(table.first, table.count, len(table.shard), stream, at)
        owner_shard = np.repeat(shard, table.count)
        if not np.array_equal(table.shard, owner_shard):
            row = int(np.flatnonzero(table.shard != owner_shard)[0])
            raise PackFormatError(f"{where}: row {row}: shard {int(table.shard[row])}, but its sample is in "
                                  f"shard {int(owner_shard[row])}")
        frames = manifest.block_frames.get(stream)
        if frames is None:
            rows[stream] = _segment_rows(manifest, stream, table, where)
            continue
        sizes = (blocks or {}).get(stream)
        if sizes is None:
            raise PackFormatError(f"{os.path.join(columns_dir, blocks_column_file(stream))}: the {stream} stream is "
                                  f"compressed, its block sizes are needed to check its segments")
        rows[stream] = _segment_rows(manifest, stream, table, where,
                                     _block_bytes(manifest, stream, table, frames, sizes, columns_dir))
    return rows


def _block_bytes(manifest: Manifest, stream: str, table: Any, block_frames: int, sizes: np.ndarray,
                 columns_dir: str) -> np.ndarray:
    """Each segment's size in bytes, the sum of its blocks' (format 1.4), after checking the block column: every
    size positive and no larger than the largest stream file, and exactly ``ceil(length / block_frames)`` blocks
    per segment, segments in storage order."""
    where = os.path.join(columns_dir, blocks_column_file(stream))
    file_name = manifest.stream(stream).file
    largest = max((entry.files[file_name].size for entry in manifest.shards), default=0)
    bad = (sizes <= 0) | (sizes > largest)
    if np.any(bad):
        row = int(np.flatnonzero(bad)[0])
        raise PackFormatError(f"{where}: row {row}: block size {int(sizes[row])} (a block has at least one byte and "
                              f"fits in the largest {file_name} of the pack, {largest} bytes)")
    length = table.length
    if np.any(length < 0):
        row = int(np.flatnonzero(length < 0)[0])
        raise PackFormatError(f"{os.path.join(columns_dir, stream_column_file(stream))}: row {row}: negative length "
                              f"{int(length[row])}")
    counts = block_count(length.astype(np.int64), block_frames)
    if np.any(counts > len(sizes)):  # bounds the sum below: no overflow
        row = int(np.flatnonzero(counts > len(sizes))[0])
        raise PackFormatError(f"{where}: segment {row} of {int(length[row])} frames needs {int(counts[row])} blocks "
                              f"of {block_frames}, the column has {len(sizes)}")
    ends = np.cumsum(counts, dtype=np.int64)
    used = int(ends[-1]) if len(ends) else 0
    if used != len(sizes):
        raise PackFormatError(f"{where}: the {stream} segments need {used} blocks of {block_frames} frames "
                              f"(ceil(length / block_frames) each), the column has {len(sizes)}")
    if float(largest) * len(sizes) >= 2.0 ** 62 and float(np.sum(sizes, dtype=np.float64)) >= 2.0 ** 62:
        raise PackFormatError(f"{where}: the block sizes add up to more than any pack holds")
    cumulative = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    return cumulative[ends] - cumulative[ends - counts]


def digest_piece_counts(manifest: Manifest, streams: dict[str, Any]) -> np.ndarray:
    """The rows each shard's ``digests.npy`` must have (int64, one per shard; format 1.4): a piece per block of a
    compressed segment (``ceil(length / block_frames)``) and per segment of every other stream.  ``streams`` are
    the tables :func:`check_column_values` checked."""
    counts = np.zeros(len(manifest.shards), dtype=np.int64)
    for stream in STREAMS_BY_KIND[manifest.kind]:
        table = streams[stream]
        frames = manifest.block_frames.get(stream)
        weights = None if frames is None else block_count(table.length.astype(np.int64), frames)
        if len(table.shard):
            counts += np.bincount(table.shard, weights=weights, minlength=len(manifest.shards)).astype(np.int64)
    return counts


def _segment_rows(manifest: Manifest, stream: str, table: Any, where: str,
                  segment_bytes: np.ndarray | None = None) -> np.ndarray:
    """Check offsets, lengths, channels and scales of one stream's segments; return each shard file's row count.
    ``segment_bytes``: a compressed stream's segment sizes (its rows are bytes, ``_block_bytes``)."""
    compressed = segment_bytes is not None
    row_bytes = COMPRESSED_DTYPE.itemsize if compressed else STREAM_TYPES[stream].row_bytes
    stream_type = STREAM_TYPES[stream]
    file_name = manifest.stream(stream).file
    recorded = np.array([entry.files[file_name].size for entry in manifest.shards], dtype=np.int64)
    max_rows = recorded // row_bytes  # no segment can be longer than its file
    shard, offset, length = table.shard, table.offset, table.length
    for name, values in (("offset", offset), ("length", length)):
        if np.any(values < 0):
            row = int(np.flatnonzero(values < 0)[0])
            raise PackFormatError(f"{where}: row {row}: negative {name} {int(values[row])}")
    channels = table.channels if stream_type.audio else None
    if channels is not None:
        if np.any(channels < 1):
            row = int(np.flatnonzero(channels < 1)[0])
            raise PackFormatError(f"{where}: row {row}: {int(channels[row])} channels")
        scale = table.scale
        bad = ~(np.isfinite(scale) & (scale >= 1.0))
        if np.any(bad):
            row = int(np.flatnonzero(bad)[0])
            raise PackFormatError(f"{where}: row {row}: scale {float(scale[row])!r} (a scale is finite and at "
                                  f"least 1.0)")
    # Each segment fits in the largest file (one comparison with a scalar); its size channels * length then cannot
    # overflow int64 unless a file holds more than 2**31 rows, where the product is checked in float64.
    largest = int(max_rows.max(initial=0))
    if compressed:  # frames are not bytes: the blocks bound a compressed segment (``_block_bytes``)
        too_long = segment_bytes > largest
    else:
        too_long = length > largest
        if channels is not None:
            too_long |= channels > largest
        if largest > 2 ** 31 and channels is not None:
            too_long |= channels.astype(np.float64) * length > largest
    if np.any(too_long):
        row = int(np.flatnonzero(too_long)[0])
        raise PackFormatError(f"{where}: row {row}: a segment of length {int(length[row])} does not fit in any "
                              f"{file_name} of the pack (the largest has {largest} rows by {MANIFEST_NAME})")
    if compressed:
        sizes = segment_bytes
    else:
        sizes = channels.astype(np.int64) * length if channels is not None else length.astype(np.int64)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    boundaries = np.searchsorted(shard, np.arange(len(manifest.shards) + 1), side="left")
    totals = np.concatenate([[0], ends])
    group_start = totals[boundaries[:-1]]  # the cumulative size where each shard's segments begin
    expected_offset = starts - np.repeat(group_start, np.diff(boundaries))
    if not np.array_equal(offset, expected_offset):
        row = int(np.flatnonzero(offset != expected_offset)[0])
        raise PackFormatError(f"{where}: row {row}: offset {int(offset[row])}, expected {int(expected_offset[row])} "
                              f"(segments follow each other with no gap in "
                              f"{manifest.shards[int(shard[row])].directory}/{file_name})")
    rows = totals[boundaries[1:]] - totals[boundaries[:-1]]
    header = recorded - rows * row_bytes
    bad = (header < _MIN_NPY_HEADER) | (header > _MAX_NPY_HEADER) | (header % _NPY_HEADER_ALIGN != 0)
    if np.any(bad):
        k = int(np.flatnonzero(bad)[0])
        raise PackFormatError(f"{where}: the segments of {manifest.shards[k].directory} need {int(rows[k])} rows of "
                              f"{file_name}, but {MANIFEST_NAME} records {int(recorded[k])} bytes for it")
    return rows


def _runs(first: np.ndarray, count: np.ndarray, total: int, what: str, where: str) -> None:
    """Sample ``i`` owns ``count[i] >= 1`` consecutive rows from ``first[i]`` (the ``<what>_first`` and
    ``<what>_count`` fields of ``samples.npy``), right after sample ``i - 1``'s."""
    if np.any(count < 1):
        row = int(np.flatnonzero(count < 1)[0])
        raise PackFormatError(f"{where}: row {row}: {what}_count is {int(count[row])}, at least 1 is required")
    expected = np.cumsum(count, dtype=np.int64) - count
    if not np.array_equal(first, expected):
        row = int(np.flatnonzero(first != expected)[0])
        raise PackFormatError(f"{where}: row {row}: {what}_first is {int(first[row])}, expected {int(expected[row])}")
    used = int(expected[-1] + count[-1]) if len(count) else 0
    if used != total:
        raise PackFormatError(f"{where}: the samples own {used} {what} rows, the {what} column has {total}")


def _dtype(array: np.ndarray, expected: np.dtype, where: str) -> None:
    if array.ndim != 1 or array.dtype != expected:
        raise PackFormatError(f"{where}: expected a 1-D array of {expected.descr}, got {array.dtype.descr} "
                              f"{array.shape}")


def _length(array: np.ndarray, n: int, where: str) -> None:
    if len(array) != n:
        raise PackFormatError(f"{where}: {len(array)} rows, {MANIFEST_NAME} says {n} samples")


def _in_range(values: np.ndarray, limit: int, name: str, where: str) -> None:
    if not len(values) or (values.min() >= 0 and values.max() < limit):
        return
    bad = (values < 0) | (values >= limit)
    if np.any(bad):
        row = int(np.flatnonzero(bad)[0])
        raise PackFormatError(f"{where}: row {row}: {name} {int(values[row])} is not in [0, {limit})")


__all__ = ["DATA_SEGMENT_DTYPE", "SEGMENT_DTYPE", "ColumnBuilder", "check_column_types", "check_column_values",
           "digest_piece_counts", "sample_dtype", "segment_dtype", "segment_fields"]
