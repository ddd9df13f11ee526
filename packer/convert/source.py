"""The pack a convert reads: its samples as build items, each one's plan from its index record, and each one loaded
back into the ``PackedSample`` a build writes.

Everything comes from the pack itself, never from its sources: the shard indexes (read through the pack's files
and checked against the sha256 ``dataset.json`` lists, then against the schema), and the samples' stored values
through the reader floor (``loader.pack``), opened with ``every-open`` content checks so that a stream file whose
bytes changed since the pack was written is an error, never re-encoded into a pack that looks sound.  A sample
keeps its key, speakers, line, original rate, provenance, attributes and per-segment scale; the audio handed on is
the int16 the source stores (decoded, for a compressed source), so a lossless convert keeps every value.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np

from speechpack.loader.pack import Pack, open_pack
from speechpack.loader.pack.content_check import VERIFY_EVERY_OPEN
from speechpack.packer.audio.store import StoredAudio
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.schemas.constants import SHARD_INDEX_NAME, STREAM_TYPES
from speechpack.schemas.documents import parse_json
from speechpack.schemas.errors import PackFormatError, SpeechpackError
from speechpack.schemas.format import check_shard_index
from speechpack.schemas.kinds import ATTRIBUTES_BY_KIND, STREAMS_BY_KIND


@dataclass(frozen=True)
class PackItem:
    """One sample of the source pack, as a build item: ``index`` in pack order, its shard and its index record.
    ``source`` and ``manifest_sha256`` name the pack (a worker opens it once and checks it is the same pack)."""

    line: int
    key: str
    index: int
    shard: int
    record: dict
    source: str
    manifest_sha256: str


def open_source(location: str) -> Pack:
    """The source pack, opened so that each stream file is checked against its sha256 before it is read."""
    return open_pack(location, verify=VERIFY_EVERY_OPEN)


def shard_records(pack: Pack, shard: int) -> list[dict]:
    """Shard ``shard``'s index records, read through the pack's files and checked against their hash and the
    schema; they must be the samples the columns place in that shard, in order."""
    entry = pack.manifest.shards[shard]
    rel = f"{entry.directory}/{SHARD_INDEX_NAME}"
    where = pack.files.where(rel)
    raw = pack.files.read_bytes(rel)
    expected = entry.files[SHARD_INDEX_NAME]
    if len(raw) != expected.size or hashlib.sha256(raw).hexdigest() != expected.sha256:
        raise PackFormatError(f"{where}: differs from the size and sha256 dataset.json lists (changed or corrupt "
                              f"since the pack was written); nothing converted")
    records = check_shard_index(parse_json(raw, where, error=PackFormatError), pack.kind, where,
                                pack.manifest.block_frames)
    if len(records) != entry.samples:
        raise PackFormatError(f"{where}: {len(records)} samples, dataset.json says {entry.samples}")
    return records


def pack_items(pack: Pack) -> list[list[PackItem]]:
    """Every sample of ``pack`` as a build item, shard by shard (the source's cuts are the convert's)."""
    source = os.path.abspath(pack.path) if not "://" in pack.path else pack.path
    by_shard: list[list[PackItem]] = []
    index = 0
    for shard in range(len(pack.manifest.shards)):
        items = []
        for record in shard_records(pack, shard):
            if record["key"] != pack.keys[index] or int(pack.shard[index]) != shard:
                raise PackFormatError(f"{pack.path}: shard {shard}'s index lists {record['key']!r} where the "
                                      f"columns have sample {index} ({pack.keys[index]!r} in shard "
                                      f"{int(pack.shard[index])})")
            items.append(PackItem(line=record["line"], key=record["key"], index=index, shard=shard, record=record,
                                  source=source, manifest_sha256=pack.opened.manifest_sha256))
            index += 1
        by_shard.append(items)
    if index != len(pack):
        raise PackFormatError(f"{pack.path}: the shard indexes list {index} samples, the columns {len(pack)}")
    _use_source(source, pack)
    return by_shard


def segment_rows(stream: str, segment: dict) -> int:
    """Rows a segment adds to its stream, as a plan counts them: channels x frames for audio, rows for data."""
    return segment["channels"] * segment["length"] if STREAM_TYPES[stream].audio else segment["length"]


def plan_item(item: PackItem) -> SamplePlan:
    """The sample's plan, from its index record (the convert writes what the source holds)."""
    record = item.record
    return SamplePlan(line=item.line, key=item.key, num_frames=record["num_frames"],
                      elements={stream: sum(segment_rows(stream, seg) for seg in segments)
                                for stream, segments in record["streams"].items()})


#: The source pack each worker process has open, by location: the run's own (``pack_items`` puts the pack it
#: lists there, and a worker forked later inherits it), else opened on the first sample a worker loads.
_OPENED: dict[str, Pack] = {}


def _use_source(location: str, pack: Pack) -> None:
    """``pack``, just opened and checked, as the source of the samples loaded in this process from now on (so a
    second convert in one process checks its source again, never reads through the first run's pack)."""
    _OPENED.clear()
    _OPENED[location] = pack


def _opened(item: PackItem) -> Pack:
    pack = _OPENED.get(item.source)
    if pack is None:
        pack = open_source(item.source)
        _OPENED.clear()  # one source at a time: a long-lived process converting many packs keeps one open
        _OPENED[item.source] = pack
    if pack.opened.manifest_sha256 != item.manifest_sha256:
        raise SpeechpackError(f"{item.source}: dataset.json changed while the convert read it (another pack was "
                              f"written there); run the convert again")
    return pack


def stored_int16(pack: Pack, stream: str, segment: int) -> np.ndarray:
    """The int16 ``[C, T]`` values segment ``segment`` of ``stream`` stores, C-contiguous: a pcm16 segment's
    read-only view of the mapping (no copy: the view keeps its mapping alive, and the writer only reads it; a pool
    worker's sample is pickled, which copies it once), a compressed one's decoded blocks."""
    view, _factor = pack.stored_segment(stream, segment)
    return np.ascontiguousarray(np.asarray(view), dtype=np.int16)


def load_item(item: PackItem, keep_statistics: bool = True) -> PackedSample:
    """The sample as a build writes it: every audio segment's stored int16 values and scale (and, when
    ``keep_statistics``, the statistics its record holds: a lossless target stores the same values, so they are
    the same numbers), every data segment's rows as stored."""
    pack = _opened(item)
    record = item.record
    streams: dict[str, list] = {}
    for stream in STREAMS_BY_KIND[pack.kind]:
        recorded = record["streams"][stream]
        segments = pack.segments_of(stream, item.index)
        if len(segments) != len(recorded):
            raise PackFormatError(f"{item.source}: sample {item.key!r} has {len(recorded)} {stream!r} segment(s) in "
                                  f"its shard index, {len(segments)} in the columns")
        loaded = []
        for number, seg in zip(segments, recorded):
            if STREAM_TYPES[stream].audio:
                data = stored_int16(pack, stream, number)
                if data.shape != (seg["channels"], seg["length"]):
                    raise PackFormatError(f"{item.source}: sample {item.key!r} stream {stream!r}: the columns hold "
                                          f"{data.shape[0]} x {data.shape[1]}, the index "
                                          f"{seg['channels']} x {seg['length']}")
                stats = (seg["mean"], seg["rms"], seg["peak"]) if keep_statistics else None
                loaded.append(StoredAudio(data, float(seg["scale"]), stats))
            else:
                rows = pack.read_rows(stream, number)
                if rows.shape[0] != seg["length"]:
                    raise PackFormatError(f"{item.source}: sample {item.key!r} stream {stream!r}: "
                                          f"{rows.shape[0]} rows in the columns, {seg['length']} in the index")
                loaded.append(StoredArray(np.ascontiguousarray(rows).copy()))
        streams[stream] = loaded
    attrs = dict(record["attrs"]) if ATTRIBUTES_BY_KIND.get(pack.kind) is not None else {}
    return PackedSample(key=item.key, speakers=tuple(record["speakers"]), line=item.line,
                        orig_sample_rate=record["orig_sample_rate"], num_frames=record["num_frames"],
                        provenance=record["provenance"], streams=streams, attrs=attrs)


__all__ = ["PackItem", "load_item", "open_source", "pack_items", "plan_item", "shard_records", "stored_int16"]
