"""Writing packs: shards under temporary names renamed into place, hashes, and ``dataset.json`` last.

The shard plan (``packer.build.plan``) fixes every shard's length before a byte is written, so each stream file gets
its final ``.npy`` header first and is hashed as it streams out: no file is read back.  Memory stays flat (a 1 GB
shard never sits in memory), and data is flushed to disk as it goes, so closing a shard costs little.  The writer
records each segment's statistics (``int16_statistics`` of exactly the stored values): measured where the sample
was decoded (``packer.build.shards.decode_measured``), or here when a sample comes without them.

A compressed build (format 1.4, ``packer.build.encoding``) gets its audio segments already encoded, with their
statistics and block digests, from where they were decoded; the writer appends their bytes.  Their size is known
only then, so a compressed stream file is written with a header for an unknown count, rewritten with the real one
at close (the same length: numpy pads the header for it, and the writer checks), and hashed by reading it back;
fsynced before its shard is renamed, as every file.  A pack with digests gets ``digests.npy`` per shard: the
blake2b-128 of every piece (a block, or a whole segment of any other stream), in catalogue then storage order.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import shutil
from typing import Callable, Sequence

import numpy as np

from speechpack.packer.audio.store import int16_statistics
from speechpack.packer.build.encoding import PCM16, EncodedAudio, Encoding
from speechpack.packer.build.state import checkpoint
from speechpack.packer.build.plan import PackedSample, SamplePlan
from speechpack.packer.build.streams import NpyStream, run_together
from speechpack.packer.files import fresh_temp_dir, fsync_dir, hash_file, save_bytes, save_npy, write_json_atomic
from speechpack.schemas.constants import (
    COLUMNS_DIR,
    COMPRESSED_DTYPE,
    DIGESTS_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    SHARD_INDEX_NAME,
    SKIPPED_NAME,
    STREAM_TYPES,
    TEMP_PREFIX,
    shard_dir_name,
    stream_file_name,
)
from speechpack.schemas.columns import ColumnBuilder
from speechpack.schemas.deflated_columns import deflate, deflated_name
from speechpack.schemas.digests import digests_array, piece_digest
from speechpack.schemas.errors import InternalError
from speechpack.schemas.format import FileEntry, Manifest, ShardEntry, lowest_minor
from speechpack.schemas.kinds import ATTRIBUTES_BY_KIND, KIND_SPECS, STREAMS_BY_KIND



def dump_shard_index(shard: str, records: list[dict], fp) -> None:
    """``index.json``: the same sorted-key JSON, one compact sample record per line (grep- and diff-friendly,
    a third of the indented size)."""
    fp.write(f'{{"format_version":{FORMAT_VERSION},"shard":{json.dumps(shard)},"samples":[\n')
    fp.write(",\n".join(json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=False) for r in records))
    fp.write("\n]}\n")


def write_columns(pack_dir: str, columns: ColumnBuilder, deflated: bool = False
                  ) -> tuple[dict[str, FileEntry], dict[str, FileEntry]]:
    """Write ``columns/`` under a temporary name, then rename it into place; with ``deflated``, each column's
    deflated copy too (format 1.5, ``schemas.deflated_columns``).  Returns the columns' entries and the copies'."""
    temp, final = fresh_temp_dir(pack_dir, COLUMNS_DIR)
    arrays = columns.arrays()
    # each file fsynced before the rename; the fsyncs overlap (packer.build.streams.run_together)
    saved = run_together([functools.partial(save_npy, os.path.join(temp, name), array)
                          for name, array in arrays.items()])
    entries = dict(zip(arrays, saved))
    copies = {}
    if deflated:  # zlib releases the GIL: the columns deflate side by side
        saved = run_together([functools.partial(_save_deflated, os.path.join(temp, name)) for name in arrays])
        copies = dict(zip(arrays, saved))
    os.replace(temp, final)
    return entries, copies


def _save_deflated(column_path: str) -> FileEntry:
    with open(column_path, "rb") as fp:
        data = fp.read()
    directory, name = os.path.split(column_path)
    return save_bytes(os.path.join(directory, deflated_name(name)), deflate(data))


class ShardWriter:
    """One shard directory, written under ``.tmp-shard-NNNNNN`` and renamed to ``shard-NNNNNN`` by ``finish``."""

    def __init__(self, pack_dir: str, shard_id: int, kind: str, sample_rate: int, planned: dict[str, int],
                 encoding: Encoding = PCM16):
        self.name = shard_dir_name(shard_id)
        self.final_dir = os.path.join(pack_dir, self.name)
        self.temp_dir = os.path.join(pack_dir, TEMP_PREFIX + self.name)
        self.sample_rate = sample_rate
        if os.path.exists(self.temp_dir):  # debris of an earlier, killed build
            shutil.rmtree(self.temp_dir)
        os.makedirs(self.temp_dir)
        self.records: list[dict] = []
        self._attributes = ATTRIBUTES_BY_KIND.get(kind)
        compressed = set(encoding.compressed_streams(STREAMS_BY_KIND[kind]))
        self._files = {
            stream: NpyStream(os.path.join(self.temp_dir, stream_file_name(stream)), COMPRESSED_DTYPE, None)
            if stream in compressed else
            NpyStream(os.path.join(self.temp_dir, stream_file_name(stream)), STREAM_TYPES[stream].dtype,
                      planned[stream], STREAM_TYPES[stream].row_shape)
            for stream in STREAMS_BY_KIND[kind]
        }
        self._compressed = compressed
        #: Per stream, the digest of every piece so far (``digests.npy``); None without digests.
        self._digests: dict[str, list[bytes]] | None = (
            {stream: [] for stream in STREAMS_BY_KIND[kind]} if encoding.digests else None)

    def __len__(self) -> int:
        return len(self.records)

    def add(self, sample: PackedSample) -> None:
        if set(sample.streams) != set(self._files):
            raise InternalError(f"sample {sample.key!r} has streams {sorted(sample.streams)}, "
                                f"shard {sorted(self._files)}")
        if self._attributes is not None and set(sample.attrs) != set(self._attributes):
            raise InternalError(f"sample {sample.key!r} has attributes {sorted(sample.attrs)}, the kind "
                                f"{sorted(self._attributes)}")
        streams = {}
        for stream, segments in sample.streams.items():
            entries = []
            audio = STREAM_TYPES[stream].audio
            if isinstance(segments[0], EncodedAudio) != (stream in self._compressed):
                raise InternalError(f"sample {sample.key!r}: stream {stream!r} segments of type "
                                    f"{type(segments[0]).__name__} in a shard that stores it "
                                    f"{'compressed' if stream in self._compressed else 'as pcm16'}")
            for seg in segments:
                offset = self._files[stream].append(seg.data)
                if isinstance(seg, EncodedAudio):
                    mean, rms, peak = seg.statistics()
                    entries.append({"offset": offset, "channels": seg.channels, "length": seg.length,
                                    "scale": seg.scale, "mean": mean, "rms": rms, "peak": peak,
                                    "blocks": list(seg.sizes)})
                    if self._digests is not None:
                        self._digests[stream].extend(seg.block_digests())
                    continue
                if self._digests is not None:
                    self._digests[stream].append(piece_digest(seg.data))
                if audio:
                    mean, rms, peak = seg.stats if seg.stats is not None else int16_statistics(seg.data, seg.scale)
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
        names = [stream_file_name(stream) for stream in self._files] + [SHARD_INDEX_NAME]
        calls = [growing.close for growing in self._files.values()] + [self._write_index]
        if self._digests is not None:
            pieces = [digest for stream in self._files for digest in self._digests[stream]]  # catalogue order
            names.append(DIGESTS_NAME)
            calls.append(functools.partial(save_npy, os.path.join(self.temp_dir, DIGESTS_NAME),
                                           digests_array(pieces)))
        # every file is fsynced before the rename below; their fsyncs overlap (packer.build.streams.run_together)
        closed = run_together(calls)
        files = dict(zip(names, closed))
        if os.path.exists(self.final_dir):
            shutil.rmtree(self.final_dir)
        os.replace(self.temp_dir, self.final_dir)
        return ShardEntry(directory=self.name, samples=len(self.records), files=dict(sorted(files.items())))

    def _write_index(self) -> FileEntry:
        buffer = io.StringIO()
        dump_shard_index(self.name, self.records, buffer)
        encoded = buffer.getvalue().encode("utf-8")
        with open(os.path.join(self.temp_dir, SHARD_INDEX_NAME), "wb") as fp:
            fp.write(encoded)
            fp.flush()
            os.fsync(fp.fileno())
        return FileEntry(size=len(encoded), sha256=hashlib.sha256(encoded).hexdigest())

    def abort(self) -> None:
        for growing in self._files.values():
            growing.abort()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


class PackTotals:
    """What ``columns/`` and ``dataset.json`` say about the samples, gathered shard by shard in plan order.

    Built from the shards' index records (and, for a kind with extra totals, its stored data: ``asr`` text), never
    from decoded samples, so a
    build in one process, on a Ray cluster, or from shards verified on disk (``--resume``, ``finalize``) commits
    the same manifest.
    """

    def __init__(self, kind: str, sample_rate: int, encoding: Encoding = PCM16):
        self.kind = kind
        self.sample_rate = sample_rate
        self.encoding = encoding
        self.shards: list[ShardEntry] = []
        self.columns = ColumnBuilder(kind, encoding.compressed_streams(STREAMS_BY_KIND[kind]))
        self.samples = 0
        self._speakers: set[str] = set()
        self._frames = 0
        # the kind's extra manifest totals (asr: what corpus/language weighting and the character vocabulary need)
        extra = KIND_SPECS[kind].totals
        self._extra = extra() if extra is not None else None

    def add_shard(self, pack_dir: str, entry: ShardEntry, records: list[dict]) -> None:
        """Count the next shard of the plan (already in place under ``pack_dir``)."""
        index = len(self.shards)
        self.shards.append(entry)
        for record in records:
            self.columns.add(index, record)
            self._speakers.update(record["speakers"])
            self._frames += record["num_frames"]
            self.samples += 1
        if self._extra is not None:
            self._extra.add(records, lambda stream: np.load(
                os.path.join(pack_dir, entry.directory, stream_file_name(stream)), mmap_mode="r"))

    def totals(self) -> dict:
        return {
            "samples": self.samples,
            "hours": self._frames / self.sample_rate / 3600.0,
            "speakers": len(self._speakers),
            "bytes": sum(entry.size for shard in self.shards for entry in shard.files.values()),
        }

    def extra_totals(self) -> dict:
        """The kind's extra manifest keys (asr: ``hours_by_corpus``, ``char_counts``); empty for other kinds."""
        return self._extra.manifest_fields(self.sample_rate) if self._extra is not None else {}


def commit_pack(pack_dir: str, totals: PackTotals, provenance: dict, skipped: list[dict],
                cues: dict[str, FileEntry] | None = None) -> Manifest:
    """Publish ``skipped.json`` if anything was skipped, ``columns/``, and ``dataset.json`` last.  Every shard of
    ``totals`` is in place; ``cues`` lists the files of the ``cues/`` directory, already in place
    (``packer.cues.write_cues``)."""
    skipped_entry: dict = {"count": len(skipped)}
    if skipped:
        skipped_path = os.path.join(pack_dir, SKIPPED_NAME)
        write_json_atomic(skipped_path, {"skipped": skipped})
        skipped_entry["file"] = {"name": SKIPPED_NAME, **hash_file(skipped_path).to_dict()}
    # a pack with digests is the format for stores, whose readers fetch the columns: they get the deflated copies
    columns, deflated = write_columns(pack_dir, totals.columns, deflated=totals.encoding.digests)
    manifest = Manifest(
        kind=totals.kind,
        sample_rate=totals.sample_rate,
        streams=tuple(totals.encoding.stream_spec(name) for name in STREAMS_BY_KIND[totals.kind]),
        shards=tuple(totals.shards),
        totals=totals.totals(),
        provenance=provenance,
        columns=columns,
        skipped=skipped_entry,
        cues=dict(cues or {}),
        format_minor=lowest_minor(totals.kind, bool(cues), totals.encoding.compressed or totals.encoding.digests,
                                  bool(deflated)),
        digests=totals.encoding.digest_algorithm,
        deflated_columns=deflated,
        **totals.extra_totals(),
    )
    fsync_dir(pack_dir)
    checkpoint("columns")
    write_json_atomic(os.path.join(pack_dir, MANIFEST_NAME), manifest.to_dict())
    return manifest


#: ``on_shard(shard_id, entry, records, problems)``: called when a planned shard is in place.
ShardCallback = Callable[[int, ShardEntry, list, list], None]


class PackWriter:
    """Writes samples into the planned shards, in plan order, then commits the pack.

    ``shard_plans`` lists each shard's sample plans; ``shard_ids`` their numbers in the build's plan (default
    ``0, 1, ...``: a build of a subset of the plan, ``--resume`` or ``--shards i/n``, passes the ones it builds).
    Every planned sample must be either ``add``-ed or ``skip``-ped, in order; a shard is published as soon as its
    last sample is through, as ``shard-<its planned number>``, even when every sample was skipped (then empty):
    a shard's name never depends on what other shards held, so any process can write any shard.  ``on_shard``
    hears of every published shard.  Use as a context manager: leaving the block with an exception removes the
    shard being written and never writes ``dataset.json``.
    """

    def __init__(self, pack_dir: str, kind: str, sample_rate: int, shard_plans: list[list[SamplePlan]],
                 shard_ids: Sequence[int] | None = None, on_shard: ShardCallback | None = None,
                 encoding: Encoding = PCM16):
        self.pack_dir = pack_dir
        self.kind = kind
        self.sample_rate = sample_rate
        self.encoding = encoding
        self._plans = shard_plans
        self._ids = list(range(len(shard_plans)) if shard_ids is None else shard_ids)
        if len(self._ids) != len(shard_plans):
            raise InternalError(f"{len(shard_plans)} shard plans but {len(self._ids)} shard numbers")
        self._on_shard = on_shard
        self._shard = 0  # index into shard_plans
        self._position = 0  # next sample within it
        self._current: ShardWriter | None = None
        self._problems: list = []  # what skip() was told about the current shard
        self._published: list[tuple[ShardEntry, list[dict]]] = []
        self._samples = 0

    def __enter__(self) -> "PackWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self._current is not None:
            self._current.abort()
            self._current = None

    @property
    def shards(self) -> list[ShardEntry]:
        return [entry for entry, _ in self._published]

    @property
    def num_samples(self) -> int:
        return self._samples

    def _expect(self) -> SamplePlan:
        if self._shard >= len(self._plans):
            raise InternalError("more samples than planned")
        return self._plans[self._shard][self._position]

    def _open_shard(self) -> ShardWriter:
        planned = {stream: sum(p.elements[stream] for p in self._plans[self._shard])
                   for stream in STREAMS_BY_KIND[self.kind]}
        return ShardWriter(self.pack_dir, self._ids[self._shard], self.kind, self.sample_rate, planned, self.encoding)

    def add(self, sample: PackedSample) -> None:
        plan = self._expect()
        if (sample.line, sample.key) != (plan.line, plan.key) or sample.elements != plan.elements:
            raise InternalError(f"sample {sample.key!r} (line {sample.line}, {sample.elements}) does not match the "
                                f"plan ({plan.key!r}, line {plan.line}, {plan.elements})")
        if self._current is None:
            self._current = self._open_shard()
        self._current.add(sample)
        self._samples += 1
        checkpoint(f"sample:{sample.key}")
        self._advance()

    def skip(self, problem=None) -> None:
        """The next planned sample failed to decode (``--skip-bad``): leave it out (``problem`` says why; it is
        handed to ``on_shard`` with the shard)."""
        self._expect()
        if problem is not None:
            self._problems.append(problem)
        self._advance()

    def _advance(self) -> None:
        self._position += 1
        if self._position == len(self._plans[self._shard]):
            shard = self._current if self._current is not None else self._open_shard()
            self._current = None
            entry = shard.finish()
            shard_id = self._ids[self._shard]
            checkpoint(f"shard:{shard_id}")
            self._published.append((entry, shard.records))
            if self._on_shard is not None:
                self._on_shard(shard_id, entry, shard.records, self._problems)
            self._problems = []
            self._shard += 1
            self._position = 0

    def finish(self, provenance: dict, skipped: list[dict], cues: dict[str, FileEntry] | None = None) -> Manifest:
        """Commit the pack (``commit_pack``); only when this writer wrote every shard of the plan."""
        if self._shard != len(self._plans) or self._ids != list(range(len(self._plans))):
            raise InternalError(f"finishing after {self._shard} of {len(self._plans)} planned shards "
                                f"(numbers {self._ids[:5]}...)")
        totals = PackTotals(self.kind, self.sample_rate, self.encoding)
        for entry, records in self._published:
            totals.add_shard(self.pack_dir, entry, records)
        return commit_pack(self.pack_dir, totals, provenance, skipped, cues)
