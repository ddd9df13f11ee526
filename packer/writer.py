"""Writing packs: shards under temporary names renamed into place, hashes, and ``dataset.json`` last.

Memory stays flat: each stream file is written as it grows (an ``.npy`` header sized for any length first,
rewritten with the final shape on close), so a 1 GB shard never sits in memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from packer.sample import PackedSample
from schemas.constants import (
    AUDIO_DTYPE,
    FORMAT_VERSION,
    MANIFEST_NAME,
    SHARD_INDEX_NAME,
    SKIPPED_NAME,
    STREAMS_BY_KIND,
    TEMP_PREFIX,
    shard_dir_name,
    stream_file_name,
)
from schemas.errors import InternalError
from schemas.format import FileEntry, Manifest, ShardEntry, StreamSpec

_HASH_BLOCK = 1 << 22


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
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
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


class _GrowingNpy:
    """A 1-D ``.npy`` file appended to in pieces; the header is rewritten with the final length on close.

    numpy pads version-1.0 headers so that the length field can grow to 21 digits without moving the data,
    which is what makes rewriting in place safe; ``close`` checks it anyway.
    """

    def __init__(self, path: str, dtype: np.dtype):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.count = 0
        self._fp: BinaryIO = open(path, "wb")
        self._header_size = self._write_header(0)

    def _write_header(self, count: int) -> int:
        self._fp.seek(0)
        npy_format.write_array_header_1_0(
            self._fp, {"descr": npy_format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (count,)}
        )
        return self._fp.tell()

    def append(self, array: np.ndarray) -> int:
        """Append ``array`` (C-contiguous, this file's dtype) flattened; return its element offset."""
        if array.dtype != self.dtype or not array.flags.c_contiguous:
            raise InternalError(f"{self.path}: appending {array.dtype} (contiguous={array.flags.c_contiguous})")
        offset = self.count
        self._fp.write(memoryview(array).cast("B"))
        self.count += array.size
        return offset

    def close(self) -> None:
        end = self._fp.tell()
        if self._write_header(self.count) != self._header_size:
            raise InternalError(f"{self.path}: .npy header changed size when rewritten")
        self._fp.seek(end)
        self._fp.flush()
        os.fsync(self._fp.fileno())
        self._fp.close()

    def abort(self) -> None:
        self._fp.close()


class ShardWriter:
    """One shard directory, written under ``.tmp-shard-NNNNNN`` and renamed to ``shard-NNNNNN`` by ``finish``."""

    def __init__(self, pack_dir: str, shard_id: int, kind: str, sample_rate: int):
        self.name = shard_dir_name(shard_id)
        self.final_dir = os.path.join(pack_dir, self.name)
        self.temp_dir = os.path.join(pack_dir, TEMP_PREFIX + self.name)
        self.sample_rate = sample_rate
        if os.path.exists(self.temp_dir):  # debris of an earlier, killed build
            shutil.rmtree(self.temp_dir)
        os.makedirs(self.temp_dir)
        self.records: list[dict] = []
        self.payload_bytes = 0
        self._files = {
            stream: _GrowingNpy(os.path.join(self.temp_dir, stream_file_name(stream)), AUDIO_DTYPE)
            for stream in STREAMS_BY_KIND[kind]
        }

    def __len__(self) -> int:
        return len(self.records)

    def add(self, sample: PackedSample) -> None:
        if set(sample.streams) != set(self._files):
            raise InternalError(f"sample {sample.key!r} has streams {sorted(sample.streams)}, shard {sorted(self._files)}")
        streams = {}
        for stream, segments in sample.streams.items():
            entries = []
            for seg in segments:
                offset = self._files[stream].append(seg.data)
                entries.append({"offset": offset, "channels": seg.channels, "length": seg.length,
                                "scale": seg.scale, "mean": seg.mean, "rms": seg.rms, "peak": seg.peak})
            streams[stream] = entries
        self.records.append({
            "key": sample.key,
            "speakers": list(sample.speakers),
            "num_frames": sample.num_frames,
            "duration": sample.num_frames / self.sample_rate,
            "orig_sample_rate": sample.orig_sample_rate,
            "line": sample.line,
            "provenance": sample.provenance,
            "streams": streams,
        })
        self.payload_bytes += sample.nbytes

    def finish(self) -> ShardEntry:
        """Close every file, write ``index.json``, hash everything, and rename the directory into place."""
        for growing in self._files.values():
            growing.close()
        index_path = os.path.join(self.temp_dir, SHARD_INDEX_NAME)
        with open(index_path, "w", encoding="utf-8") as fp:
            dump_shard_index(self.name, self.records, fp)
            fp.flush()
            os.fsync(fp.fileno())
        files = {name: hash_file(os.path.join(self.temp_dir, name)) for name in sorted(os.listdir(self.temp_dir))}
        if os.path.exists(self.final_dir):
            shutil.rmtree(self.final_dir)
        os.replace(self.temp_dir, self.final_dir)
        return ShardEntry(directory=self.name, samples=len(self.records), files=files)

    def abort(self) -> None:
        for growing in self._files.values():
            growing.abort()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


class PackWriter:
    """Appends samples to shards that close near ``shard_bytes`` (a sample is never split), then commits.

    Use as a context manager: leaving the block with an exception removes the shard being written and never
    writes ``dataset.json``, so an interrupted build cannot look complete.
    """

    def __init__(self, pack_dir: str, kind: str, sample_rate: int, shard_bytes: int):
        self.pack_dir = pack_dir
        self.kind = kind
        self.sample_rate = sample_rate
        self.shard_bytes = shard_bytes
        self.shards: list[ShardEntry] = []
        self._current: ShardWriter | None = None
        self._speakers: set[str] = set()
        self._frames = 0
        self._samples = 0

    def __enter__(self) -> "PackWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self._current is not None:
            self._current.abort()
            self._current = None

    @property
    def num_samples(self) -> int:
        return self._samples

    def add(self, sample: PackedSample) -> None:
        current = self._current
        # Same rule as MuVAP's writer: close a non-empty shard if this sample would push it past the limit.
        if current is not None and len(current) and current.payload_bytes + sample.nbytes > self.shard_bytes:
            self.shards.append(current.finish())
            current = None
        if current is None:
            current = self._current = ShardWriter(self.pack_dir, len(self.shards), self.kind, self.sample_rate)
        current.add(sample)
        self._speakers.update(sample.speakers)
        self._frames += sample.num_frames
        self._samples += 1

    def finish(self, provenance: dict, skipped: list[dict]) -> Manifest:
        """Publish the last shard, ``skipped.json`` if anything was skipped, and ``dataset.json`` last."""
        if self._current is not None:
            self.shards.append(self._current.finish())
            self._current = None
        skipped_entry: dict = {"count": len(skipped)}
        if skipped:
            skipped_path = os.path.join(self.pack_dir, SKIPPED_NAME)
            write_json_atomic(skipped_path, {"skipped": skipped})
            skipped_entry["file"] = {"name": SKIPPED_NAME, **hash_file(skipped_path).to_dict()}
        total_bytes = sum(entry.size for shard in self.shards for entry in shard.files.values())
        manifest = Manifest(
            kind=self.kind,
            sample_rate=self.sample_rate,
            streams=tuple(StreamSpec(name) for name in STREAMS_BY_KIND[self.kind]),
            shards=tuple(self.shards),
            totals={
                "samples": self._samples,
                "hours": self._frames / self.sample_rate / 3600.0,
                "speakers": len(self._speakers),
                "bytes": total_bytes,
            },
            provenance=provenance,
            skipped=skipped_entry,
        )
        _fsync_dir(self.pack_dir)
        write_json_atomic(os.path.join(self.pack_dir, MANIFEST_NAME), manifest.to_dict())
        return manifest
