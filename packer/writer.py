"""Writing packs: shards under temporary names renamed into place, hashes, and ``dataset.json`` last.

The shard plan (``packer.plan``) fixes every shard's length before a byte is written, so each stream file gets
its final ``.npy`` header first and is hashed as it streams out: no file is read back.  Memory stays flat (a 1 GB
shard never sits in memory), and data is flushed to disk as it goes, so closing a shard costs little.  The writer
also measures each segment (``int16_statistics``): it is the one place that sees exactly the stored bytes.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import shutil
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from packer.audio import int16_statistics
from packer.sample import PackedSample, SamplePlan
from schemas.constants import (
    ATTRIBUTES_BY_KIND,
    FORMAT_VERSION,
    KIND_ASR,
    MANIFEST_NAME,
    SHARD_INDEX_NAME,
    SKIPPED_NAME,
    STREAM_TEXT,
    STREAM_TYPES,
    STREAMS_BY_KIND,
    TEMP_PREFIX,
    shard_dir_name,
    stream_file_name,
)
from schemas.columns import COLUMNS_DIR, ColumnBuilder
from schemas.errors import InternalError
from schemas.format import FileEntry, Manifest, ShardEntry, StreamSpec, lowest_minor

_HASH_BLOCK = 1 << 22
#: Bytes written to a stream file between fsyncs: the writer thread waits for the disk while decoding goes on,
#: and the final fsync of a shard has little left to do.
_FSYNC_EVERY = 8 << 20


def dump_json(obj, fp) -> None:
    """The one JSON style of a pack: sorted keys, one-space indent, UTF-8, trailing newline."""
    json.dump(obj, fp, sort_keys=True, indent=1, ensure_ascii=False)
    fp.write("\n")


def dump_shard_index(shard: str, records: list[dict], fp) -> None:
    """``index.json``: the same sorted-key JSON, one compact sample record per line (grep- and diff-friendly,
    a third of the indented size)."""
    fp.write(f'{{"format_version":{FORMAT_VERSION},"shard":{json.dumps(shard)},"samples":[\n')
    fp.write(",\n".join(json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=False) for r in records))
    fp.write("\n]}\n")


def write_json_atomic(path: str, obj) -> None:
    """Write JSON to ``path`` through a temporary file, fsync and rename: readers see all of it or nothing."""
    directory, name = os.path.split(path)
    temp = os.path.join(directory, f"{TEMP_PREFIX}{name}")
    with open(temp, "w", encoding="utf-8") as fp:
        dump_json(obj, fp)
        fp.flush()
        os.fsync(fp.fileno())
    os.replace(temp, path)
    fsync_dir(directory)


def fsync_dir(directory: str) -> None:
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hash_file(path: str) -> FileEntry:
    """Size and SHA-256 of a file, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fp:
        while block := fp.read(_HASH_BLOCK):
            digest.update(block)
    return FileEntry(size=os.path.getsize(path), sha256=digest.hexdigest())


def save_npy(path: str, array: np.ndarray) -> FileEntry:
    """``np.save`` to ``path`` (fsynced), returning its size and hash computed from the bytes written."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    data = buffer.getvalue()
    with open(path, "wb") as fp:
        fp.write(data)
        fp.flush()
        os.fsync(fp.fileno())
    return FileEntry(size=len(data), sha256=hashlib.sha256(data).hexdigest())


def fresh_temp_dir(pack_dir: str, name: str) -> tuple[str, str]:
    """``(temporary, final)`` paths of a pack directory written as a whole and renamed into place when complete;
    stale copies of both (an earlier, killed build) are removed and the temporary one is created empty."""
    final = os.path.join(pack_dir, name)
    temp = os.path.join(pack_dir, TEMP_PREFIX + name)
    for stale in (temp, final):
        if os.path.exists(stale):
            shutil.rmtree(stale)
    os.makedirs(temp)
    return temp, final


def write_columns(pack_dir: str, columns: ColumnBuilder) -> dict[str, FileEntry]:
    """Write ``columns/`` under a temporary name, then rename it into place."""
    temp, final = fresh_temp_dir(pack_dir, COLUMNS_DIR)
    entries = {name: save_npy(os.path.join(temp, name), array) for name, array in columns.arrays().items()}
    os.replace(temp, final)
    return entries


class NpyStream:
    """A ``.npy`` file written in pieces (rows along axis 0) and hashed as it goes.

    The header is written first for the planned number of rows (``planned=None``: unknown, the header says 0).
    If another number arrives (a sample failed to decode under ``--skip-bad``, or the length was not known),
    ``close`` rewrites the header with the real count (numpy pads version-1.0 headers so axis 0 can grow to 21
    digits without moving the data; checked anyway) and hashes the file again.
    """

    def __init__(self, path: str, dtype: np.dtype, planned: int | None, row_shape: tuple[int, ...] = ()):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.planned = planned
        self.count = 0
        self._row_size = int(np.prod(self.row_shape, dtype=np.int64))
        self._fp: BinaryIO = open(path, "wb")
        self._digest = hashlib.sha256()
        header = self._header(planned or 0)
        self._header_size = len(header)
        self._write(header)
        self._unsynced = 0

    def _header(self, count: int) -> bytes:
        buffer = io.BytesIO()
        npy_format.write_array_header_1_0(
            buffer, {"descr": npy_format.dtype_to_descr(self.dtype), "fortran_order": False,
                     "shape": (count, *self.row_shape)}
        )
        return buffer.getvalue()

    def _write(self, data) -> None:
        self._fp.write(data)
        self._digest.update(data)

    def append(self, array: np.ndarray) -> int:
        """Append ``array`` (C-contiguous, this file's dtype; flat, or rows of ``row_shape``); return the row
        offset it starts at (the element offset of a 1-D file)."""
        if array.dtype != self.dtype or not array.flags.c_contiguous:
            raise InternalError(f"{self.path}: appending {array.dtype} (contiguous={array.flags.c_contiguous})")
        if self.row_shape and array.shape[-len(self.row_shape):] != self.row_shape:
            raise InternalError(f"{self.path}: appending shape {array.shape} to rows of {self.row_shape}")
        rows = array.size // self._row_size if self._row_size else 0
        if self.planned is not None and self.count + rows > self.planned:
            raise InternalError(f"{self.path}: more elements than planned ({self.count + rows} > {self.planned})")
        offset = self.count
        self._write(memoryview(array).cast("B"))
        self.count += rows
        self._unsynced += array.nbytes
        if self._unsynced >= _FSYNC_EVERY:
            self._fp.flush()
            os.fsync(self._fp.fileno())
            self._unsynced = 0
        return offset

    def close(self) -> FileEntry:
        """Flush, fsync and return the file's size and hash."""
        size = self._header_size + self.count * self._row_size * self.dtype.itemsize
        rewrite = self.count != (self.planned or 0)
        if rewrite:
            header = self._header(self.count)
            if len(header) != self._header_size:
                raise InternalError(f"{self.path}: .npy header changed size when rewritten")
            self._fp.seek(0)
            self._fp.write(header)
            self._fp.truncate(size)
        self._fp.flush()
        os.fsync(self._fp.fileno())
        self._fp.close()
        if rewrite:
            return hash_file(self.path)
        return FileEntry(size=size, sha256=self._digest.hexdigest())

    def abort(self) -> None:
        self._fp.close()


class ShardWriter:
    """One shard directory, written under ``.tmp-shard-NNNNNN`` and renamed to ``shard-NNNNNN`` by ``finish``."""

    def __init__(self, pack_dir: str, shard_id: int, kind: str, sample_rate: int, planned: dict[str, int]):
        self.name = shard_dir_name(shard_id)
        self.final_dir = os.path.join(pack_dir, self.name)
        self.temp_dir = os.path.join(pack_dir, TEMP_PREFIX + self.name)
        self.sample_rate = sample_rate
        if os.path.exists(self.temp_dir):  # debris of an earlier, killed build
            shutil.rmtree(self.temp_dir)
        os.makedirs(self.temp_dir)
        self.records: list[dict] = []
        self._attributes = ATTRIBUTES_BY_KIND.get(kind)
        self._files = {
            stream: NpyStream(os.path.join(self.temp_dir, stream_file_name(stream)), STREAM_TYPES[stream].dtype,
                              planned[stream], STREAM_TYPES[stream].row_shape)
            for stream in STREAMS_BY_KIND[kind]
        }

    def __len__(self) -> int:
        return len(self.records)

    def add(self, sample: PackedSample) -> None:
        if set(sample.streams) != set(self._files):
            raise InternalError(f"sample {sample.key!r} has streams {sorted(sample.streams)}, shard {sorted(self._files)}")
        if self._attributes is not None and set(sample.attrs) != set(self._attributes):
            raise InternalError(f"sample {sample.key!r} has attributes {sorted(sample.attrs)}, the kind "
                                f"{sorted(self._attributes)}")
        streams = {}
        for stream, segments in sample.streams.items():
            entries = []
            audio = STREAM_TYPES[stream].audio
            for seg in segments:
                offset = self._files[stream].append(seg.data)
                if audio:
                    mean, rms, peak = int16_statistics(seg.data, seg.scale)
                    entries.append({"offset": offset, "channels": seg.channels, "length": seg.length,
                                    "scale": seg.scale, "mean": mean, "rms": rms, "peak": peak})
                else:
                    entries.append({"offset": offset, "length": seg.length})
            streams[stream] = entries
        record = {
            "key": sample.key,
            "speakers": list(sample.speakers),
            "num_frames": sample.num_frames,
            "duration": sample.num_frames / self.sample_rate,
            "orig_sample_rate": sample.orig_sample_rate,
            "line": sample.line,
            "provenance": sample.provenance,
            "streams": streams,
        }
        if self._attributes is not None:
            record["attrs"] = dict(sample.attrs)
        self.records.append(record)

    def finish(self) -> ShardEntry:
        """Close every file, write ``index.json``, and rename the directory into place."""
        files = {stream_file_name(stream): growing.close() for stream, growing in self._files.items()}
        index_path = os.path.join(self.temp_dir, SHARD_INDEX_NAME)
        buffer = io.StringIO()
        dump_shard_index(self.name, self.records, buffer)
        encoded = buffer.getvalue().encode("utf-8")
        with open(index_path, "wb") as fp:
            fp.write(encoded)
            fp.flush()
            os.fsync(fp.fileno())
        files[SHARD_INDEX_NAME] = FileEntry(size=len(encoded), sha256=hashlib.sha256(encoded).hexdigest())
        if os.path.exists(self.final_dir):
            shutil.rmtree(self.final_dir)
        os.replace(self.temp_dir, self.final_dir)
        return ShardEntry(directory=self.name, samples=len(self.records), files=dict(sorted(files.items())))

    def abort(self) -> None:
        for growing in self._files.values():
            growing.abort()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


class PackWriter:
    """Writes samples into the planned shards, in plan order, then commits the pack.

    ``shard_plans`` lists each shard's sample plans.  Every planned sample must be either ``add``-ed or
    ``skip``-ped, in order; a shard is published as soon as its last sample is through, and a shard whose every
    sample was skipped is not created (shard numbers stay contiguous).  Use as a context manager: leaving the block
    with an exception removes the shard being written and never writes ``dataset.json``.
    """

    def __init__(self, pack_dir: str, kind: str, sample_rate: int, shard_plans: list[list[SamplePlan]]):
        self.pack_dir = pack_dir
        self.kind = kind
        self.sample_rate = sample_rate
        self.shards: list[ShardEntry] = []
        self._plans = shard_plans
        self._shard = 0  # index into shard_plans
        self._position = 0  # next sample within it
        self._current: ShardWriter | None = None
        self._columns = ColumnBuilder(kind)
        self._speakers: set[str] = set()
        self._frames = 0
        self._samples = 0
        # asr packs: what corpus/language weighting and the character vocabulary need (format 1.3)
        self._frames_by_corpus: dict[tuple[str, str], int] = collections.Counter()
        self._char_counts: collections.Counter[str] = collections.Counter()

    def __enter__(self) -> "PackWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self._current is not None:
            self._current.abort()
            self._current = None

    @property
    def num_samples(self) -> int:
        return self._samples

    def _expect(self) -> SamplePlan:
        if self._shard >= len(self._plans):
            raise InternalError("more samples than planned")
        return self._plans[self._shard][self._position]

    def add(self, sample: PackedSample) -> None:
        plan = self._expect()
        if (sample.line, sample.key) != (plan.line, plan.key) or sample.elements != plan.elements:
            raise InternalError(f"sample {sample.key!r} (line {sample.line}, {sample.elements}) does not match the "
                                f"plan ({plan.key!r}, line {plan.line}, {plan.elements})")
        if self._current is None:
            planned = {stream: sum(p.elements[stream] for p in self._plans[self._shard])
                       for stream in STREAMS_BY_KIND[self.kind]}
            self._current = ShardWriter(self.pack_dir, len(self.shards), self.kind, self.sample_rate, planned)
        self._current.add(sample)
        if self.kind == KIND_ASR:
            self._frames_by_corpus[(sample.attrs["corpus"], sample.attrs["language"])] += sample.num_frames
            for segment in sample.streams[STREAM_TEXT]:
                self._char_counts.update(segment.data.tobytes().decode("utf-8"))
        self._speakers.update(sample.speakers)
        self._frames += sample.num_frames
        self._samples += 1
        self._advance()

    def skip(self) -> None:
        """The next planned sample failed to decode (``--skip-bad``): leave it out."""
        self._expect()
        self._advance()

    def _advance(self) -> None:
        self._position += 1
        if self._position == len(self._plans[self._shard]):
            if self._current is not None:
                self.shards.append(self._current.finish())
                for record in self._current.records:
                    self._columns.add(len(self.shards) - 1, record)
                self._current = None
            self._shard += 1
            self._position = 0

    def finish(self, provenance: dict, skipped: list[dict], cues: dict[str, FileEntry] | None = None) -> Manifest:
        """Publish ``skipped.json`` if anything was skipped, and ``dataset.json`` last.  ``cues`` lists the files of
        the ``cues/`` directory, already in place (``packer.cues.write_cues``)."""
        if self._shard != len(self._plans):
            raise InternalError(f"finishing after {self._shard} of {len(self._plans)} planned shards")
        skipped_entry: dict = {"count": len(skipped)}
        if skipped:
            skipped_path = os.path.join(self.pack_dir, SKIPPED_NAME)
            write_json_atomic(skipped_path, {"skipped": skipped})
            skipped_entry["file"] = {"name": SKIPPED_NAME, **hash_file(skipped_path).to_dict()}
        columns = write_columns(self.pack_dir, self._columns)
        total_bytes = sum(entry.size for shard in self.shards for entry in shard.files.values())
        manifest = Manifest(
            kind=self.kind,
            sample_rate=self.sample_rate,
            streams=tuple(StreamSpec(name, STREAM_TYPES[name].dtype.str, STREAM_TYPES[name].row_shape)
                          for name in STREAMS_BY_KIND[self.kind]),
            shards=tuple(self.shards),
            totals={
                "samples": self._samples,
                "hours": self._frames / self.sample_rate / 3600.0,
                "speakers": len(self._speakers),
                "bytes": total_bytes,
            },
            provenance=provenance,
            columns=columns,
            skipped=skipped_entry,
            cues=dict(cues or {}),
            format_minor=lowest_minor(self.kind, bool(cues)),
            **self._asr_totals(),
        )
        fsync_dir(self.pack_dir)
        write_json_atomic(os.path.join(self.pack_dir, MANIFEST_NAME), manifest.to_dict())
        return manifest

    def _asr_totals(self) -> dict:
        """``hours_by_corpus`` and ``char_counts`` of an asr pack (sorted, so equal packs have equal manifests)."""
        if self.kind != KIND_ASR:
            return {}
        hours: dict[str, dict[str, float]] = {}
        for (corpus, language), frames in sorted(self._frames_by_corpus.items()):
            hours.setdefault(corpus, {})[language] = frames / self.sample_rate / 3600.0
        return {"hours_by_corpus": hours, "char_counts": dict(sorted(self._char_counts.items()))}
