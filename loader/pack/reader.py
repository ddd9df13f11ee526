"""Reading packs: ``open_pack(path)`` checks the manifest, loads the shard indexes into numpy columns, and maps
stream files lazily (read-only) the first time a sample needs them.  Every file comes through a ``PackFiles``
(``loader.pack.files``): a local directory, or an object store by URL (``loader.pack.object_store``), whose stream
files are read into memory instead of mapped; the ``Pack`` and the batch code are the same for both.

Compressed audio streams (format 1.4, ``flac``/``opus``): the uint8 stream file is mapped and checked as any other;
``Pack.blocks`` holds each compressed stream's ``BlockTable`` (block offsets by a cumulative sum of
``columns/<stream>_blocks.npy``), ``stored_segment`` hands out a ``BlockSamples`` that decodes the blocks under a
slice, and ``decode_block`` checks a block against its digest (``shard-k/digests.npy``) before decoding it, once
per mapping of its stream file (``loader.pack.blocks``).

No per-sample Python objects are kept: keys, speakers, offsets and statistics are numpy arrays, so DataLoader
workers forked from a process holding a ``Pack`` do not dirty copy-on-write pages by touching refcounts
(pytorch/pytorch#13246).  This module imports numpy only; the torch glue lives elsewhere in ``loader/``.

Cold reads.  A training epoch reads short windows at random places.  When the pack is not in the page cache, the
kernel's readahead turns each page fault into a large sequential read, and a plain mapping pulls in several times
the bytes the windows need (5.8x measured; ``bench/cold_reads.py``).  A read whose exact range is known asks for
that range first with ``MADV_WILLNEED``: the kernel reads exactly those pages in one request, the copy then finds
them in the cache and no fault triggers readahead (0.9x the useful bytes, 2x faster).  :meth:`Pack.read_segment`,
which decodes every sample of its range, does it itself; views (:meth:`Pack.stored_segment`,
:meth:`Pack.read_rows`) announce nothing, because their caller may touch a small part of them (an ASD builder
takes a few frames of a track's rows): the caller calls :meth:`Pack.will_need` with what it will read, best for a
whole batch before copying any of it (4x faster than plain mmap: the disk serves the batch's requests together).  Mappings keep the kernel's default readahead:
``MADV_RANDOM`` would also stop the over-read, but then every fault without a hint waits for its own 4 KB read
(4x slower than plain mmap), and sequential readers lose their readahead.  On a warm cache the advice costs one
system call (about a microsecond).
"""

from __future__ import annotations

import collections
import hashlib
import io
import os
from dataclasses import dataclass
from typing import Hashable

import numpy as np

from speechpack.loader.pack.files import DirectoryPackFiles, MappedStream, PackFiles, is_remote
from speechpack.loader.pack.object_store import ObjectStorePackFiles
from speechpack.loader.pack.readahead import view_ranges, will_need_ranges
from speechpack.loader.pack.cues import CueBank, PackCues, SpeakerLabels, open_cues
from speechpack.loader.pack import blocks as block_codec  # its decode_block by attribute: tests count decodes
from speechpack.loader.pack.blocks import BlockSamples, BlockTable, CorruptBlock, DIGEST_BYTES, check_digest, piece_rows
from speechpack.schemas.constants import (
    AUDIO_FULL_SCALE,
    COLUMNS_DIR,
    DIGESTS_NAME,
    KEYS_FILE,
    MANIFEST_NAME,
    SAMPLES_FILE,
    SPEAKERS_FILE,
    STREAM_TYPES,
    attr_file,
    blocks_column_file,
    stream_column_file,
)
from speechpack.schemas.columns import digest_piece_counts
from speechpack.schemas.digests import check_digests_header
from speechpack.schemas.cues import CuesConfig
from speechpack.schemas.errors import NpyHeaderError, PackFormatError
from speechpack.schemas.npyfile import read_npy_header_from
from speechpack.schemas.format import Manifest
from speechpack.schemas.kinds import ATTRIBUTES_BY_KIND, KIND_SPECS, STREAMS_BY_KIND
from speechpack.loader.pack.verify import OpenedPack, read_columns
from speechpack.loader.pack.content_check import (DEFAULT_VERIFY, VERIFY_OFF, RecordPlace, StreamChecks,
                                                  check_verify_mode)


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

    @classmethod
    def from_columns(cls, segments: np.ndarray, first: np.ndarray, count: np.ndarray) -> "SegmentTable":
        """A ``columns/<stream>.npy`` table as per-field arrays: views of the column's fields, not copies (a batch
        indexes a few rows; copying every field of a million segments cost more at open than all of a pass's
        lookups)."""
        return cls(**{name: segments[name] for name in segments.dtype.names}, first=first, count=count)


@dataclass(frozen=True)
class DataSegmentTable:
    """Every segment of a data stream (faces, labels, text): segment ``j`` is ``length[j]`` rows from row
    ``offset[j]`` of shard ``shard[j]``'s file; sample ``i`` owns segments ``first[i] : first[i] + count[i]``."""

    shard: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    first: np.ndarray
    count: np.ndarray

    #: The same split as ``SegmentTable.from_columns``, building this class (``cls`` is the class it is called on).
    from_columns = classmethod(SegmentTable.from_columns.__func__)


class StringColumn:
    """UTF-8 strings stored as one numpy bytes array: one allocation, not a Python object per string."""

    def __init__(self, values: np.ndarray):
        self._values = values

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [v.decode("utf-8") for v in self._values[index]]
        return self._values[index].decode("utf-8")

    def __iter__(self):
        return (v.decode("utf-8") for v in self._values)

    def tolist(self) -> list[str]:
        return list(self)

    @property
    def raw(self) -> np.ndarray:
        """The UTF-8 bytes array itself (``|S<n>``, read-only use): for vectorised work such as ``np.unique``."""
        return self._values

    def __repr__(self) -> str:
        shown = ", ".join(repr(v) for v in self[:3])
        return f"StringColumn([{shown}{', ...' if len(self) > 3 else ''}], n={len(self)})"


@dataclass(frozen=True)
class Sample:
    """One sample read back as float32: ``mix`` ``[C, T]`` (None in a sources pack) and ``targets`` ``[N, T]``,
    one row per speaker (a sources pack's single row is its source).  In a ``noise`` or ``rir`` bank, ``mix`` is
    None and ``targets`` is the audio ``[C, T]``, every channel of the file; ``speakers`` is ``(kind,)``.  In an
    ``asd`` or ``asr`` pack ``targets`` is the audio ``[C, T]`` and the data streams are in ``data`` (views of the
    stored rows: ``faces`` ``[F, 112, 112]`` uint8 and ``labels`` ``[F]``, or ``text`` UTF-8 bytes)."""

    key: str
    speakers: tuple[str, ...]
    mix: np.ndarray | None
    targets: np.ndarray
    data: dict[str, np.ndarray] | None = None


def will_need_view(view: np.ndarray) -> None:
    """Ask the kernel to read the pages under ``view`` now, asynchronously: a 1-D view, or a 2-D view whose rows
    are contiguous (a window of a channel-major audio segment: one range per channel).  For builders that hold
    views of :meth:`Pack.stored_segment` and know their windows only after choosing them; a builder with a whole
    batch of views calls ``loader.pack.readahead.will_need_views`` once instead (one system call for the batch).
    Memory that is not a file mapping (a resampled copy) is left alone by the kernel."""
    will_need_ranges(view_ranges(view))


#: Stream files a Pack keeps mapped at once (per process).  Each mapping costs a file descriptor and one entry
#: of ``vm.max_map_count`` (65530 by default); least recently used files are unmapped beyond this.
MAX_OPEN_STREAM_FILES = 256


class Pack:
    """A read-only view of a pack.  Build it with :func:`open_pack`.

    Speaker cues (packs built with ``--cues``): ``cues`` maps each cue name of the pack's ``cues.yaml`` to its
    :class:`~speechpack.loader.pack.cues.CueBank` (empty without cues); ``cues_config`` is that ``cues.yaml`` parsed
    (``schemas.cues.CuesConfig``, None without cues); ``speaker_labels`` maps speaker id to class index (a
    read-only mapping, None when the pack has no ``labels.speaker_label``) and ``speaker_label(spk)`` looks one up.

    ``streams`` maps each stream to its :class:`SegmentTable` (audio) or :class:`DataSegmentTable` (faces, labels,
    text).  ``attrs`` holds the kind's per-sample attributes (``asd``: ``source_fps``, ``start_sec``, ``clip``;
    ``asr``: ``language``, ``corpus``): float64 arrays and :class:`StringColumn` s.
    """

    def __init__(self, path: str, manifest: Manifest, columns: dict[str, np.ndarray],
                 max_open_files: int = MAX_OPEN_STREAM_FILES, cues: PackCues | None = None,
                 manifest_identity: Hashable | None = None, manifest_sha256: str | None = None,
                 files: PackFiles | None = None, verify: str = DEFAULT_VERIFY):
        self.path = path
        #: Where the pack's files are read from (a local directory unless ``open_pack`` was given a URL).
        self.files: PackFiles = files if files is not None else DirectoryPackFiles(path)
        self.manifest = manifest
        self.kind = manifest.kind
        self.sample_rate = manifest.sample_rate
        samples = columns[SAMPLES_FILE]
        self.keys = StringColumn(columns[KEYS_FILE])
        self.speakers = StringColumn(columns[SPEAKERS_FILE])
        self.shard = samples["shard"]  # views of the column's fields, as the segment tables' (``from_columns``)
        self.num_frames = samples["num_frames"]
        self.orig_sample_rate = samples["orig_sample_rate"]
        self.speaker_first = samples["speaker_first"]
        self.speaker_count = samples["speaker_count"]
        self.streams: dict[str, SegmentTable | DataSegmentTable] = {
            name: (SegmentTable if STREAM_TYPES[name].audio else DataSegmentTable).from_columns(
                columns[stream_column_file(name)], samples[f"{name}_first"], samples[f"{name}_count"])
            for name in STREAMS_BY_KIND[self.kind]}
        self.attrs: dict[str, np.ndarray | StringColumn] = {
            name: StringColumn(columns[attr_file(name)]) if kind is str else np.ascontiguousarray(columns[attr_file(name)])
            for name, kind in ATTRIBUTES_BY_KIND.get(self.kind, {}).items()}
        self._maps: collections.OrderedDict[tuple[int, str], MappedStream] = collections.OrderedDict()
        # A store's node cache bounds the mappings it lets one process pin (loader.cache.cached_files).
        bound = self.files.max_open_streams
        self._max_open = max_open_files if bound is None else min(max_open_files, bound)
        cues = cues or PackCues(config=None, banks={}, labels=None)
        self.cues: dict[str, CueBank] = cues.banks
        self.cues_config: CuesConfig | None = cues.config
        self.speaker_labels: SpeakerLabels | None = cues.labels
        #: The columns' values checked, and what each stream file must be when it is mapped (``OpenedPack``).
        self.opened = OpenedPack.of(self.files, manifest, self.shard, self.speaker_first, self.speaker_count,
                                    len(self.speakers), self.streams, manifest_identity, manifest_sha256,
                                    {name: columns[blocks_column_file(name)] for name in manifest.block_frames})
        #: The block tables of compressed audio streams (``loader.pack.blocks``; a pcm16 stream has none).
        self.blocks: dict[str, BlockTable] = _block_tables(manifest, self.streams, columns, self.files)
        self._digests: dict[int, np.ndarray] = {}
        #: Block rows of each mapped stream file whose bytes matched their digest (checked once per mapping: a
        #: block kept mapped is not hashed again on every window that decodes it; a new mapping starts empty).
        self._verified: dict[tuple[int, str], set[int]] = {}
        self._pieces_per_shard = None
        if manifest.digests is not None:
            self.blocks, self._pieces_per_shard = _with_pieces(manifest, self.streams, self.blocks)
        #: The content checks of mapped stream files (``loader.pack.content_check``; ``verify`` chooses the mode).
        #: Files whose bytes were checked against their sha256 before they are read (``PackFiles.hashes_checked``:
        #: the node cache's copies) are not hashed again.
        self.checks = StreamChecks(VERIFY_OFF if self.files.hashes_checked else verify,
                                   RecordPlace(self.files.root) if isinstance(self.files, DirectoryPackFiles) else None)
        if self.files.range_reads is not None:
            self.files.range_reads.bind(self)

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"Pack({self.path!r}, kind={self.kind!r}, samples={len(self)}, sample_rate={self.sample_rate})"

    @property
    def duration(self) -> np.ndarray:
        """Seconds per sample."""
        return self.num_frames / self.sample_rate

    def speaker_label(self, speaker: str) -> int | None:
        """``labels.speaker_label`` of ``speaker``; None when the pack has no speaker labels.  A speaker the labels
        lack raises ``KeyError`` (as WeSep does; a build checks that every speaker of its list has one)."""
        return None if self.speaker_labels is None else self.speaker_labels[speaker]

    def speakers_of(self, index: int) -> tuple[str, ...]:
        start = int(self.speaker_first[index])
        return tuple(self.speakers[start:start + int(self.speaker_count[index])])

    def __getstate__(self) -> dict:
        """Pickling (DataLoader workers under spawn) carries the index, never open mappings."""
        state = self.__dict__.copy()
        state["_maps"] = collections.OrderedDict()
        state["_digests"] = {}
        state["_verified"] = {}
        return state

    def stream_array(self, shard: int, stream: str) -> np.ndarray:
        """The stream file of a shard: mapped on first use (read into memory from an object store), kept in a
        bounded LRU."""
        return self._mapped(shard, stream).array

    def check_content(self, shard: int, stream: str) -> None:
        """Raise ``PackFormatError`` when this stream file's content check has failed (callers that keep stream
        arrays between batches call it while ``checks.unsettled`` is not empty; ``stream_array`` does it itself)."""
        if (shard, stream) in self.checks.unsettled:
            try:
                self.checks.settle((shard, stream))
            except PackFormatError:
                self._maps.pop((shard, stream), None)
                raise

    def _mapped(self, shard: int, stream: str) -> MappedStream:
        cached = self._maps.get((shard, stream))
        if cached is not None:
            if self.checks.unsettled:
                self.check_content(shard, stream)
            self._maps.move_to_end((shard, stream))
            return cached
        spec = self.manifest.stream(stream)
        rel = f"{self.manifest.shards[shard].directory}/{spec.file}"
        file_path = self.files.where(rel)
        try:
            cached = self.files.stream(rel, spec.dtype, spec.row_shape)
        except PackFormatError:
            self.opened.check_unchanged(file_path)  # a replaced pack is named as such, not as a corrupt file
            raise
        self.opened.check_mapped(self.manifest, shard, stream, file_path, cached)
        entry = self.manifest.shards[shard].files[spec.file]
        self.checks.mapped((shard, stream), rel, file_path, entry.sha256, cached.source, cached.identity)
        self._maps[(shard, stream)] = cached
        self._verified[(shard, stream)] = set()  # a file mapped afresh has its blocks checked afresh
        if len(self._maps) > self._max_open:
            self._maps.popitem(last=False)  # views handed out keep their mapping alive
        return cached

    def need(self, stream: str, segments) -> None:
        """Make the stored bytes of ``segments`` (ids) of ``stream`` present and verified before they are read: a
        pack read by ranges from a store fetches them (``loader.cache.ranges``); for any other, nothing.  Batch code
        that holds a stream file's array (``stream_array``) calls it (or ``need_at``) for every batch."""
        ranges = self.files.range_reads
        if ranges is not None and ranges.reads(stream):
            ranges.need(self, stream, segments)

    def need_at(self, stream: str, shards, offsets) -> None:
        """:meth:`need` for the segments that start at element ``offsets`` of shards ``shards``."""
        ranges = self.files.range_reads
        if ranges is not None and ranges.reads(stream):
            ranges.need_at(self, stream, shards, offsets)

    def will_need(self, stream: str, segment: int, start: int = 0, stop: int | None = None) -> None:
        """Start reading samples (audio, every channel) or rows (data streams) ``[start, stop)`` of one segment into
        the page cache, asynchronously: on a cold cache, call it for a batch's windows before copying them."""
        table = self.streams[stream]
        length = int(table.length[segment])
        stop = length if stop is None else min(stop, length)
        start = max(start, 0)
        if start >= stop:
            return
        self.need(stream, (segment,))
        mapped = self._mapped(int(table.shard[segment]), stream)
        offset = int(table.offset[segment])
        blocks = self.blocks.get(stream)
        if blocks is not None:  # the bytes of the blocks holding the frames
            rows = blocks.blocks_of(segment, start, stop)
            first = int(blocks.start[rows.start])
            mapped.will_need(first, int(blocks.start[rows.stop - 1] + blocks.size[rows.stop - 1]) - first)
        elif isinstance(table, SegmentTable):
            for channel in range(int(table.channels[segment])):  # channel-major: one range per channel
                mapped.will_need(offset + channel * length + start, stop - start)
        else:
            mapped.will_need(offset + start, stop - start)

    def stored_segment(self, stream: str, segment: int) -> tuple[np.ndarray | BlockSamples, float]:
        """Segment ``segment`` of ``stream`` as the stored int16 ``[C, T]`` view (no copy) and its decode factor
        (``scale / 32768``): ``view * factor`` is the audio.  A compressed stream's segment is a
        :class:`~loader.pack.blocks.BlockSamples`: sliced the same way, it decodes only the blocks under the
        slice."""
        table = self.streams[stream]
        if stream in self.blocks:
            return BlockSamples(self, stream, segment), float(table.scale[segment]) / AUDIO_FULL_SCALE
        channels, length = int(table.channels[segment]), int(table.length[segment])
        self.need(stream, (segment,))
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
        self.will_need(stream, segment, start, stop)
        return stored[:, start:stop].astype(np.float32) * np.float32(factor)

    def decode_block(self, stream: str, segment: int, block: int, start: int = 0,
                     stop: int | None = None) -> np.ndarray:
        """Block row ``block`` (of segment ``segment``) of compressed stream ``stream``, decoded to read-only int16
        ``[C, frames]`` (frames ``[start, stop)`` of the block only, when given: ``loader.pack.blocks``); its bytes
        are checked against their digest first when the pack has digests (once per mapping of its stream file: a
        block decoded again, by the next window or epoch, is not hashed again).
        ``CorruptBlock`` names what does not decode to what the index records."""
        table, blocks = self.streams[stream], self.blocks[stream]
        shard = int(table.shard[segment])
        self.need(stream, (segment,))
        array = self.stream_array(shard, stream)
        byte, size = int(blocks.start[block]), int(blocks.size[block])
        data = array[byte:byte + size]
        index = block - int(blocks.first[segment])
        frames = min(blocks.block_frames, int(table.length[segment]) - index * blocks.block_frames)
        if len(data) != size:
            raise CorruptBlock(f"the stream file ends at byte {len(array)}, before the block's end at {byte + size} "
                               f"(validate the pack)", index, self._block_place(stream, segment, index))
        if blocks.piece is not None:
            verified = self._verified.setdefault((shard, stream), set())
            if block not in verified:
                if not check_digest(data, self.block_digests(shard)[blocks.piece[block]]):
                    raise CorruptBlock("its bytes differ from their digest in digests.npy (the file changed after "
                                       "the pack was written; validate the pack)", index,
                                       self._block_place(stream, segment, index))
                verified.add(block)
        try:
            decoded = block_codec.decode_block(blocks.codec, data.tobytes(), int(table.channels[segment]), frames,
                                               self.sample_rate, start, stop)
        except CorruptBlock as err:
            raise CorruptBlock(f"{err.reason} (validate the pack)", index,
                               self._block_place(stream, segment, index)) from None
        decoded.flags.writeable = False
        return decoded

    def _block_place(self, stream: str, segment: int, index: int) -> str:
        """Where block ``index`` of a segment is, as an error names it: file, stream, segment, sample, block."""
        table = self.streams[stream]
        shard = int(table.shard[segment])
        rel = f"{self.manifest.shards[shard].directory}/{self.manifest.stream(stream).file}"
        sample = int(np.searchsorted(table.first, segment, side="right")) - 1
        key = self.keys[sample] if 0 <= sample < len(self) else "?"
        byte = int(self.blocks[stream].start[int(self.blocks[stream].first[segment]) + index])
        return f"{self.files.where(rel)}: {stream} segment {segment} (sample {key!r}, byte {byte})"

    def block_digests(self, shard: int) -> np.ndarray:
        """``shard-k/digests.npy`` (uint8 ``[pieces, 16]``): read once per process, checked against its size and
        sha256 in ``dataset.json`` and against the shard's piece count."""
        cached = self._digests.get(shard)
        if cached is None:
            cached = self._digests[shard] = _read_digests(self.files, self.manifest, shard,
                                                          int(self._pieces_per_shard[shard]))
        return cached

    def read_rows(self, stream: str, segment: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` of one segment of a data stream, as a read-only view of the mapping (no copy)."""
        table = self.streams[stream]
        length = int(table.length[segment])
        stop = length if stop is None else stop
        if not 0 <= start <= stop <= length:
            raise IndexError(f"segment {segment} of {stream!r} has {length} rows; asked for [{start}, {stop})")
        offset = int(table.offset[segment])
        return self.stream_array(int(table.shard[segment]), stream)[offset + start:offset + stop]

    def segments_of(self, stream: str, index: int) -> range:
        table = self.streams[stream]
        first = int(table.first[index])
        return range(first, first + int(table.count[index]))

    def sample(self, index: int) -> Sample:
        """Sample ``index`` decoded to float32 (a copy; the mapping stays untouched)."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"sample {index} out of range for a pack of {len(self)}")
        index %= len(self)
        spec = KIND_SPECS[self.kind]  # which streams are the mix, the targets and the data
        mix = None if spec.mix is None else self.read_segment(spec.mix, self.segments_of(spec.mix, index)[0])
        segments = self.segments_of(spec.targets, index)
        targets = (self.read_segment(spec.targets, segments[0]) if len(segments) == 1 else
                   np.concatenate([self.read_segment(spec.targets, j) for j in segments], axis=0))
        data = {name: self.read_rows(name, self.segments_of(name, index)[0]) for name in spec.data_streams}
        return Sample(key=self.keys[index], speakers=self.speakers_of(index), mix=mix, targets=targets,
                      data=data or None)


def _block_tables(manifest: Manifest, streams: dict, columns: dict[str, np.ndarray], files: PackFiles
                  ) -> dict[str, BlockTable]:
    """The ``BlockTable`` of every compressed audio stream, from its blocks column (checked with the other columns
    by ``schemas.columns.check_column_values``)."""
    tables = {}
    for spec in manifest.streams:
        if spec.codec is not None:
            name = blocks_column_file(spec.name)
            tables[spec.name] = BlockTable.of(spec.codec, spec.block_frames, streams[spec.name].offset,
                                              streams[spec.name].length, columns[name],
                                              files.where(f"{COLUMNS_DIR}/{name}"))
    return tables


def _with_pieces(manifest: Manifest, streams: dict, blocks: dict[str, BlockTable]
                 ) -> tuple[dict[str, BlockTable], np.ndarray]:
    """``blocks`` with each block's row in its shard's ``digests.npy``, and every shard's piece count."""
    kinds = [(streams[spec.name].shard, blocks[spec.name].first if spec.name in blocks else None)
             for spec in manifest.streams]
    rows, _ = piece_rows(kinds, len(manifest.shards))
    per_shard = digest_piece_counts(manifest, streams)  # the rows each digests.npy must have
    placed = {spec.name: blocks[spec.name].with_pieces(row)
              for spec, row in zip(manifest.streams, rows) if spec.name in blocks}
    return placed, per_shard


def _read_digests(files: PackFiles, manifest: Manifest, shard: int, pieces: int) -> np.ndarray:
    """``shard-k/digests.npy`` read whole and checked (size, sha256, ``uint8 [pieces, 16]``)."""
    entry_of = manifest.shards[shard]
    rel = f"{entry_of.directory}/{DIGESTS_NAME}"
    where = files.where(rel)
    entry = entry_of.files[DIGESTS_NAME]  # listed in every shard of a pack with digests (schemas.format)
    try:
        data = files.read_bytes(rel)
    except OSError as err:
        raise PackFormatError(f"{where}: cannot read digests ({err.strerror or err})") from None
    if len(data) != entry.size or (not files.hashes_checked and hashlib.sha256(data).hexdigest() != entry.sha256):
        raise PackFormatError(f"{where}: {len(data)} bytes differing from {MANIFEST_NAME}'s size {entry.size} or "
                              f"sha256 (the file changed after the pack was written; validate the pack)")
    try:
        header = read_npy_header_from(io.BytesIO(data), where)
    except NpyHeaderError as err:
        raise PackFormatError(f"{where}: cannot read digests ({err.reason})") from None
    check_digests_header(header, pieces, where)
    if len(data) < header.data_offset + pieces * DIGEST_BYTES:
        raise PackFormatError(f"{where}: {len(data)} bytes, its header promises "
                              f"{header.data_offset + pieces * DIGEST_BYTES} (the file is truncated)")
    return np.frombuffer(data, dtype=np.uint8, count=pieces * DIGEST_BYTES,
                         offset=header.data_offset).reshape(pieces, DIGEST_BYTES)


def pack_files(location: str | os.PathLike, endpoint_url: str | None = None) -> PackFiles:
    """The files of the pack at ``location``: an object store for a URL (``s3://bucket/packs/train``; the ``s3``
    extra), a local directory otherwise (a ``file://`` URL too).  ``endpoint_url`` names an S3-compatible
    store's endpoint where ``AWS_ENDPOINT_URL`` does not."""
    location = os.fspath(location)
    if is_remote(location):
        return ObjectStorePackFiles(location, endpoint_url=endpoint_url)
    return DirectoryPackFiles(location[len("file://"):] if location.lower().startswith("file://") else location)


def read_manifest(location: str | os.PathLike, endpoint_url: str | None = None) -> Manifest:
    """Parse and check ``PACK/dataset.json`` (names included: ``schemas.manifest_file``); a directory without one
    is not a pack."""
    return pack_files(location, endpoint_url).read_manifest().manifest


def open_pack(location: str | os.PathLike | PackFiles, *, endpoint_url: str | None = None,
              verify: str = DEFAULT_VERIFY) -> Pack:
    """Open the pack at ``location`` for reading: a directory, an object-store URL (``s3://bucket/packs/train``,
    see :func:`pack_files`) or a :class:`~loader.pack.files.PackFiles`.  Refuses unknown major versions, unsafe
    names, column files that differ from their hashes and segments outside their stream files (``docs/format.md``,
    "What a reader verifies").

    Start-up reads ``dataset.json``, the column files (hashed as they are read) and the cue banks' index files only
    (a fraction of a second for a million samples); the shard indexes are for people and for ``speechpack
    validate``.  From an object store, stream files are read whole into memory when first used, and so is a cue
    bank's payload (each cue file hashed against ``dataset.json`` before use: ``loader.pack.cues``).

    ``verify`` checks each stream file's content against its sha256 (``loader.pack.content_check``):
    ``first-map`` (default: hashed once per node in the background, remembered by file identity), ``every-open``
    (hashed at each open before its first read) or ``off``.
    """
    check_verify_mode(verify)
    files = location if isinstance(location, PackFiles) else pack_files(location, endpoint_url)
    manifest_file = files.read_manifest()
    manifest = manifest_file.manifest
    columns = read_columns(files, manifest)
    cues = open_cues(files, manifest)  # a store's verified as read (loader.pack.cues)
    return Pack(files.location, manifest, columns, cues=cues, manifest_identity=manifest_file.identity,
                manifest_sha256=manifest_file.sha256, files=files, verify=verify)
