"""Sample-granular, verified reads of a pack on object storage: :class:`RangeReads`, what ``CachedPackFiles`` reads
a pack with digests through (format 1.4: ``shard-k/digests.npy``, one BLAKE2b-128 per *piece*, a compressed
segment's block or any other segment whole; ``schemas.digests``).

**Why.**  A shuffled batch touches one stream file per sample; with whole files as the cache's unit, a cache must
hold a file per sample in flight, so a node with a small disk cannot train the default order from a store (or the
order must change with the disk).  A pack with digests lets a reader trust any piece it fetched on its own: a batch
fetches only its samples' segments, each compared with its digest before a byte of it is used, and the cache's unit
is a segment (``segment_key``: named by its file's sha256 and its byte range), so an epoch of the default
shuffle fetches each segment once, about 1.0x the pack's distinct bytes, with any limit that holds the batches in
flight.

**Reading.**  The reader asks for the segments a batch reads before it reads them (``Pack.need``: the batch code
of every task, ``stored_segment``, ``read_rows``); :meth:`RangeReads.need` takes those not yet present in this
process, reads each from the node cache's entry (hashed again as it is read: a copy changed on disk is removed
and fetched again) or claims it (``NodeCache.claim``: one fetch per node; a segment another process is fetching
is waited for), and fetches the claimed ones from the store: segments that lie next to each other in one stream
file coalesced into one range request (up to ``COALESCE_BYTES``; ``COALESCE_GAP``: none left between them),
up to ``cache.fetches`` requests in flight (``fetch_pool``).  A piece whose digest does not match is fetched once
more on its own; a second mismatch is a ``CacheIntegrityError`` naming the pack, shard, stream and segment.  The
verified bytes become the segment's cache entry and are copied into the stream's array in this process.
``cache.limit: 0`` reads through: nothing is written to the node's disk.

**The arrays** (:class:`RangeBuffer`).  The batch code sees one array per stream file as for any pack (views at
element offsets), so each (shard, stream) of this process gets an anonymous mapping of the file's data size, whose
pages are inaccessible (``PROT_NONE``) until a segment over them is filled: memory is spent only on the segments
read, and a read of a segment that was never asked for faults instead of returning zeros.  Segments not asked
for in the last ``RESIDENT_BYTES`` of reads are given back (``MADV_DONTNEED``, pages made inaccessible again, but
for pages shared with a neighbour); a segment's bytes are thus valid from ``need`` until that much more was read,
ample for a batch's copies.

**The plan** (``segment_schedule``).  The same per-batch schedule the node cache's fetch-ahead and Belady eviction
use (``loader.cache.schedule.FileSchedule``), with segments as entries: what ``PlanFeed`` schedules for a pack
read by ranges.  :meth:`RangeReads.fetch_ahead` fetches the next batches' segments into the node cache (claimed,
coalesced, ``fetches`` requests at a time, each round admitted by ``NodeCache.reserve_ahead`` within the limit less
the headroom of the batches being built); a batch's own claims are made in rounds of half the limit
(``claim_rounds``) and may evict what was fetched ahead (``NodeCache._make_room``, ``last_resort``), so a fetch
ahead never makes a batch's claim wait or fail.

The stream file's ``.npy`` header is never read: its data starts at the file size less the stream's data bytes (the
no-gap rule: the columns give every segment's size), and no byte outside a verified piece is ever used.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import math
import mmap
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from speechpack.loader.cache.node_cache import CacheIntegrityError, Claim, EntryKey, NodeCache
from speechpack.loader.pack.files import MappedStream
from speechpack.schemas.constants import (DIGEST_SIZE, DIGESTS_NAME, STREAM_TYPES, block_count, blocks_column_file,
                                          COLUMNS_DIR)
from speechpack.schemas.digests import check_digests_header
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.npyfile import NpyHeaderError, read_npy_header_from

#: Largest range request: neighbouring segments of one stream file are fetched together up to this many bytes.
COALESCE_BYTES = 8 << 20
#: Largest gap between two wanted segments that one request still spans (its bytes read and dropped): none, so an
#: epoch fetches no byte it does not use (segments a batch reads together in a shard window are adjacent anyway).
COALESCE_GAP = 0
#: Bytes of segments one process keeps filled per pack beyond those of the current request (least recently asked
#: for given back first).
RESIDENT_BYTES = 64 << 20
#: Fetches of a piece whose digest does not match before it is an error (the first plus one more).
FETCH_ATTEMPTS = 2

_PAGE = mmap.PAGESIZE
_PROT_NONE, _PROT_RW = 0, mmap.PROT_READ | mmap.PROT_WRITE
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def segment_key(file_sha256: str, start: int, size: int) -> EntryKey:
    """The cache entry of bytes ``[start, start + size)`` of the stream file whose sha256 is ``file_sha256``: 32 hex
    digits, the file's first 64 bits of sha256 and the start, with the size.  Known from the manifest and the
    columns alone (no digest needs fetching to name, schedule or evict an entry; the plan's millions are named only
    when asked for: ``loader.cache.schedule_entries``); an entry's bytes are checked against the digests whenever
    they are read, so a name is an address, never a claim about content."""
    return EntryKey(f"{file_sha256[:_KEY_PREFIX]}{start:016x}", size)


def segment_key_parts(name: str) -> tuple[str, int, int] | None:
    """``(file sha256 prefix, start, size)`` as the entry name ``name`` spells them (``segment_key``); None for a
    name of another form.  Lenient as ``int`` is: a caller compares the name it rebuilds with ``name``."""
    key, dash, size = name.partition("-")
    if len(key) != _KEY_DIGITS or not dash:
        return None
    try:
        return key[:_KEY_PREFIX], int(key[_KEY_PREFIX:], 16), int(size)
    except ValueError:
        return None


#: Hex digits of a segment entry's key (``segment_key``), the first of them its stream file's sha256 prefix.
_KEY_DIGITS, _KEY_PREFIX = 32, 16


@dataclass
class StreamLayout:
    """Where each segment of one shard's stream file lies and which pieces it is: segments in storage order
    (``segments`` their ids), their byte ``start`` (in the file) and ``size``, the element ``offset`` the columns
    give (what batch code indexes the array by), and their pieces: rows ``piece_first[i]`` on of the shard's
    ``digests.npy``, cut at ``piece_bounds`` (bytes from the segment's start; None: one piece per segment)."""

    rel: str
    shard: int
    stream: str
    file_sha256: str
    segments: np.ndarray
    offset: np.ndarray
    start: np.ndarray
    size: np.ndarray
    piece_first: np.ndarray
    piece_count: np.ndarray
    piece_sizes: np.ndarray | None
    piece_size_first: np.ndarray | None
    data_offset: int
    data_bytes: int

    def pieces(self, i: int) -> list[int]:
        """Byte sizes of segment ``i``'s pieces."""
        if self.piece_sizes is None:
            return [int(self.size[i])]
        first = int(self.piece_size_first[i])
        return self.piece_sizes[first:first + int(self.piece_count[i])].tolist()


class ShardLayouts:
    """Every stream's :class:`StreamLayout` in each shard of one pack, computed from its columns once per shard
    (vectorised: a sort of each stream's segments by shard at first use)."""

    def __init__(self, pack, blocks: dict[str, np.ndarray]):
        self.pack = pack
        self.blocks = blocks
        manifest = pack.manifest
        #: Catalogue order: the order of pieces in ``digests.npy``.
        self.streams = [spec.name for spec in manifest.streams]
        self._by_shard: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._block_first: dict[str, np.ndarray] = {}
        self._sizes: dict[str, np.ndarray] = {}
        self._layouts: dict[int, dict[str, StreamLayout]] = {}
        #: Per stream, each segment's index within its shard's layout.
        self.local: dict[str, np.ndarray] = {}

    def _sorted(self, stream: str) -> tuple[np.ndarray, np.ndarray]:
        found = self._by_shard.get(stream)
        if found is None:
            table = self.pack.streams[stream]
            shard = np.asarray(table.shard, dtype=np.int64)
            offset = np.asarray(table.offset, dtype=np.int64)
            step = shard[1:] - shard[:-1]
            if np.all((step > 0) | ((step == 0) & (offset[1:] > offset[:-1]))):  # as a build writes it
                order = np.arange(len(shard))
            else:
                order = np.lexsort((offset, shard))
            bounds = np.searchsorted(shard[order], np.arange(len(self.pack.manifest.shards) + 1))
            local = np.empty(len(order), dtype=np.int64)
            local[order] = np.arange(len(order)) - np.repeat(bounds[:-1], np.diff(bounds))
            self.local[stream] = local
            found = self._by_shard[stream] = (order, bounds)
        return found

    def of(self, shard: int) -> dict[str, StreamLayout]:
        found = self._layouts.get(shard)
        if found is None:
            found = self._layouts[shard] = self._compute(shard)
        return found

    def _compute(self, shard: int) -> dict[str, StreamLayout]:
        pack, manifest = self.pack, self.pack.manifest
        entry_of = manifest.shards[shard]
        layouts = {}
        piece_base = 0
        for stream in self.streams:
            spec = manifest.stream(stream)
            table = pack.streams[stream]
            order, bounds = self._sorted(stream)
            segments = order[bounds[shard]:bounds[shard + 1]]
            offset = np.asarray(table.offset[segments], dtype=np.int64)
            length = np.asarray(table.length[segments], dtype=np.int64)
            rel = f"{entry_of.directory}/{spec.file}"
            piece_sizes = piece_size_first = None
            size = self.sizes(stream)[segments]
            if spec.codec is not None:
                counts = -(-length // spec.block_frames)
                first_block = self._blocks_first(stream)[segments]
                rows = np.repeat(first_block, counts) + (np.arange(int(counts.sum()))
                                                          - np.repeat(np.cumsum(counts) - counts, counts))
                piece_sizes = np.asarray(self.blocks[stream], dtype=np.int64)[rows]
                piece_size_first = np.cumsum(counts) - counts
                start = offset
                piece_count = counts
            else:
                start = offset * _element_bytes(spec)
                piece_count = np.ones(len(segments), dtype=np.int64)
            data_bytes = int(size.sum())
            file_size = entry_of.files[spec.file].size
            data_offset = file_size - data_bytes
            if data_offset < 0 or (len(start) and (start[0] != 0 or (start[1:] != (start + size)[:-1]).any())):
                raise PackFormatError(f"{pack.files.where(rel)}: its segments do not fill the file's data ({file_size} "
                                      f"bytes, the columns give {data_bytes}); validate the pack")
            piece_first = piece_base + np.cumsum(piece_count) - piece_count
            piece_base += int(piece_count.sum())
            layouts[stream] = StreamLayout(rel, shard, stream, entry_of.files[spec.file].sha256, segments, offset, start + data_offset, size, piece_first,
                                           piece_count, piece_sizes, piece_size_first, data_offset, data_bytes)
        return layouts

    def sizes(self, stream: str) -> np.ndarray:
        """Every segment's stored bytes, for the whole table of ``stream`` (computed once): ``channels x length``
        elements of a pcm stream, the sum of its blocks' sizes for a compressed one."""
        found = self._sizes.get(stream)
        if found is None:
            spec = self.pack.manifest.stream(stream)
            table = self.pack.streams[stream]
            length = np.asarray(table.length, dtype=np.int64)
            if spec.codec is not None:
                first = self._blocks_first(stream)
                total = np.concatenate([np.zeros(1, np.int64), np.cumsum(np.asarray(self.blocks[stream], np.int64))])
                found = total[first + -(-length // spec.block_frames)] - total[first]
            else:
                elements = length * np.asarray(table.channels, dtype=np.int64) if STREAM_TYPES[stream].audio else length
                found = elements * _element_bytes(spec)
            self._sizes[stream] = found
        return found

    def _blocks_first(self, stream: str) -> np.ndarray:
        found = self._block_first.get(stream)
        if found is None:
            table = self.pack.streams[stream]
            counts = -(-np.asarray(table.length, dtype=np.int64) // self.pack.manifest.stream(stream).block_frames)
            found = self._block_first[stream] = np.cumsum(counts) - counts
            if int(counts.sum()) != len(self.blocks[stream]):
                raise PackFormatError(f"{self.pack.files.where(COLUMNS_DIR)}/{blocks_column_file(stream)}: "
                                      f"{len(self.blocks[stream])} blocks, the segments need {int(counts.sum())}")
        return found

    def pieces_in(self, shard: int) -> int:
        return sum(int(layout.piece_count.sum()) for layout in self.of(shard).values())


def _element_bytes(spec) -> int:
    """Bytes of one element of a pcm or data stream's file (a sample, or a row of ``row_shape``)."""
    return np.dtype(spec.dtype).itemsize * math.prod(spec.row_shape)


class RangeBuffer:
    """One stream file's array in this process, filled segment by segment (module docstring, "The arrays")."""

    def __init__(self, layout: StreamLayout, dtype: str, row_shape: tuple[int, ...], file_size: int):
        self.layout = layout
        row_bytes = np.dtype(dtype).itemsize * math.prod(row_shape)
        rows = layout.data_bytes // max(row_bytes, 1)
        self._map = mmap.mmap(-1, max(layout.data_bytes, _PAGE), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                              prot=mmap.PROT_READ)
        array = np.frombuffer(self._map, dtype=dtype, count=rows * math.prod(row_shape)).reshape((rows, *row_shape))
        self.address = np.frombuffer(self._map, dtype=np.uint8, count=1).__array_interface__["data"][0]
        _protect(self.address, len(self._map), _PROT_NONE)
        self.mapped = MappedStream(array, None, layout.data_offset, row_bytes, file_size)
        self.filled = np.zeros(len(layout.segments), dtype=bool)

    def fill(self, i: int, data) -> None:
        """Copy segment ``i``'s verified bytes into place (its pages made readable first)."""
        lo = int(self.layout.start[i]) - self.layout.data_offset
        size = int(self.layout.size[i])
        if size:
            first = lo - lo % _PAGE
            _protect(self.address + first, lo + size - first, _PROT_RW)
            source = np.frombuffer(data, dtype=np.uint8, count=size)
            ctypes.memmove(self.address + lo, source.ctypes.data, size)
        self.filled[i] = True

    def release(self, i: int) -> None:
        """Give segment ``i``'s memory back: pages wholly inside it are dropped and made inaccessible again."""
        lo = int(self.layout.start[i]) - self.layout.data_offset
        hi = lo + int(self.layout.size[i])
        first, last = -(-lo // _PAGE) * _PAGE, hi - hi % _PAGE
        if last > first:
            _LIBC.madvise(self.address + first, last - first, mmap.MADV_DONTNEED)
            _protect(self.address + first, last - first, _PROT_NONE)
        self.filled[i] = False


def _protect(address: int, length: int, prot: int) -> None:
    if _LIBC.mprotect(address, length, prot) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed on a range-read buffer")


@dataclass(frozen=True, eq=False)
class _Want:
    """One segment to obtain: its buffer (None: into the node cache only), index in its layout and cache key."""

    buffer: RangeBuffer | None
    index: int
    key: EntryKey
    stream_layout: StreamLayout | None = None

    @property
    def layout(self) -> StreamLayout:
        return self.stream_layout if self.buffer is None else self.buffer.layout


class RangeReads:
    """The range reads of one ``CachedPackFiles`` (module docstring); process-local state is dropped when pickled."""

    def __init__(self, files):
        self.files = files
        self._layouts: ShardLayouts | None = None
        self._buffers: dict[tuple[int, str], RangeBuffer] = {}
        self._digests: OrderedDict[int, np.ndarray] = OrderedDict()
        self._resident: OrderedDict[tuple[int, str, int], int] = OrderedDict()
        self._resident_bytes = 0
        self._lock = threading.RLock()
        self._digest_lock = threading.Lock()
        self._layout_lock = threading.RLock()
        #: Segments whose pieces never matched when fetched ahead (cache key -> the error): the batch that needs
        #: one raises it instead of fetching it twice more.
        self._failed: dict[EntryKey, CacheIntegrityError] = {}
        self.pack = None
        self._shard_index: dict[str, int] | None = None
        #: Range requests this process sent and bytes they returned (reports, the benchmark, tests).
        self.requests = 0
        self.request_bytes = 0

    def __getstate__(self) -> dict:
        return {"files": self.files, "pack": self.pack, "_shard_index": None, "_layouts": None, "_buffers": {}, "_digests": OrderedDict(),
                "_resident": OrderedDict(), "_resident_bytes": 0, "requests": 0, "request_bytes": 0, "_failed": {}}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()
        self._digest_lock = threading.Lock()
        self._layout_lock = threading.RLock()

    # -- layout ------------------------------------------------------------------------------------------------

    def layouts(self, pack) -> ShardLayouts:
        with self._layout_lock:
            return self._layouts_of(pack)

    def layout(self, pack, shard: int, stream: str) -> StreamLayout:
        """Shard ``shard``'s layout of ``stream`` (computed once, under the layout lock: the fetch-ahead thread
        and the batch's reads share it)."""
        with self._layout_lock:
            return self._layouts_of(pack).of(shard)[stream]

    def _layouts_of(self, pack) -> ShardLayouts:
        if self._layouts is None or self._layouts.pack is not pack:
            blocks = {}
            for spec in pack.manifest.streams:
                if spec.codec is not None:
                    rel = f"{COLUMNS_DIR}/{blocks_column_file(spec.name)}"
                    blocks[spec.name] = _npy_1d(self.files.read_bytes(rel), self.files.where(rel))
            self._layouts = ShardLayouts(pack, blocks)
            self.pack = pack
        return self._layouts

    def digests(self, pack, shard: int) -> np.ndarray:
        """Shard ``shard``'s ``digests.npy`` (fetched whole on first use, verified by its sha256), kept for the
        last 1024 shards used."""
        with self._digest_lock:
            found = self._digests.get(shard)
            if found is not None:
                self._digests.move_to_end(shard)
                return found
        rel = f"{pack.manifest.shards[shard].directory}/{DIGESTS_NAME}"
        where = self.files.where(rel)
        data = self.files.read_bytes(rel)
        try:
            header = read_npy_header_from(io.BytesIO(data), where)
        except NpyHeaderError as err:
            raise PackFormatError(f"{where}: not a digests file ({err.reason})") from None
        with self._layout_lock:
            pieces = self.layouts(pack).pieces_in(shard)
        check_digests_header(header, pieces, where)
        found = np.frombuffer(data, dtype=np.uint8, count=header.shape[0] * DIGEST_SIZE,
                              offset=header.data_offset).reshape(header.shape)
        with self._digest_lock:
            self._digests[shard] = found
            if len(self._digests) > 1024:
                self._digests.popitem(last=False)
        return found

    def buffer(self, pack, shard: int, stream: str) -> RangeBuffer:
        """The array of shard ``shard``'s ``stream`` file in this process."""
        found = self._buffers.get((shard, stream))
        if found is None:
            spec = pack.manifest.stream(stream)
            layout = self.layout(pack, shard, stream)
            size = pack.manifest.shards[shard].files[spec.file].size
            found = self._buffers[(shard, stream)] = RangeBuffer(layout, spec.dtype, spec.row_shape, size)
        return found

    def bind(self, pack) -> None:
        """The ``Pack`` these files are read for (its columns give every segment's place)."""
        self.pack = pack

    def reads(self, stream: str) -> bool:
        """Whether ``stream`` is read by ranges: audio streams (the bulk of a pack, read a segment at a time).
        Data streams (faces, labels, text) are read whole, as batch code reads them per file."""
        return STREAM_TYPES[stream].audio

    def stream(self, rel: str) -> MappedStream:
        """The array of stream file ``rel`` (a shard's audio stream) in this process."""
        pack = self.pack
        directory, _, name = rel.partition("/")
        stream = next(spec.name for spec in pack.manifest.streams if spec.file == name)
        if self._shard_index is None:
            self._shard_index = {s.directory: k for k, s in enumerate(pack.manifest.shards)}
        shard = self._shard_index.get(directory)
        if shard is None:
            raise PackFormatError(f"{self.files.where(rel)}: not a shard's file of the pack")
        return self.buffer(pack, shard, stream).mapped

    # -- reading -----------------------------------------------------------------------------------------------

    def need(self, pack, stream: str, segments) -> None:
        """Make segments ``segments`` of ``stream`` present and verified in their arrays (module docstring)."""
        if len(segments) == 1 and self._layouts is not None and stream in self._layouts.local:
            # one segment (a stored_segment, a block's decode): present already is the common case, answered
            # without numpy's set operations
            segment = int(segments[0])
            shard = int(pack.streams[stream].shard[segment])
            buffer = self._buffers.get((shard, stream))
            if buffer is not None:
                i = int(self._layouts.local[stream][segment])
                if buffer.filled[i]:
                    item = (shard, stream, i)
                    if item in self._resident:
                        self._resident.move_to_end(item)
                        return
        segments = np.unique(np.asarray(segments, dtype=np.int64).ravel())
        if not len(segments):
            return
        with self._lock:
            with self._layout_lock:
                layouts = self.layouts(pack)
                layouts._sorted(stream)
            local = layouts.local[stream][segments]
            shards = np.asarray(pack.streams[stream].shard[segments], dtype=np.int64)
            wants: list[_Want] = []
            asked: list[tuple[int, str, int]] = []
            for shard in np.unique(shards).tolist():
                buffer = self.buffer(pack, shard, stream)
                mine = local[shards == shard]
                asked += [(shard, stream, i) for i in mine.tolist()]
                missing = mine[~buffer.filled[mine]]
                if len(missing):
                    layout = buffer.layout
                    for i in missing.tolist():
                        wants.append(_Want(buffer, i, segment_key(layout.file_sha256, int(layout.start[i]),
                                                                  int(layout.size[i]))))
            if wants:
                self._obtain(pack, wants)
            self._keep(asked)

    def prefetch(self, shard: int, stream: str, i: int, wait: bool = True) -> str | None:
        """Segment ``i`` of shard ``shard``'s ``stream`` layout into the node cache, not into this process's array
        (the plan's fetch-ahead: ``segment_schedule``); its data path.  ``wait`` False: ``CacheFullError`` at once
        when it does not fit now.  Nothing when reading through."""
        if self.files.read_through:
            return None
        pack = self.pack
        layout = self.layout(pack, shard, stream)
        self.digests(pack, shard)
        key = segment_key(layout.file_sha256, int(layout.start[i]), int(layout.size[i]))
        want = _Want(None, i, key, layout)
        cache = self.files.node_cache
        claimed = cache.claim(key, self._source(want))
        if isinstance(claimed, Claim):
            try:
                return claimed.fill(self._fetch_one(pack, want), wait)
            finally:
                claimed.release()
        if claimed is None:  # another process fetches it
            return cache.ensure(key, lambda fp: fp.write(self._fetch_one(pack, want)), self._source(want), wait)
        return claimed

    def fetch_ahead(self, items: list[tuple[int, str, int, int]], fetches: int, horizon: int = -1) -> int | None:
        """The plan's fetch-ahead of segments into the node cache (``loader.cache.schedule.PlanFeed``): ``items``
        ``(shard, stream, index in its layout, batch position)`` in plan order.  Segments present, being fetched by
        another process or thread, or known corrupt are passed over; the rest are claimed, coalesced into range
        requests as the batch's own reads are (``coalesce``), and sent ``fetches`` at a time in plan order, each
        admitted first under the fetch-ahead budget (``NodeCache.reserve_ahead``: the limit less the headroom of
        the batches being built, evicting only entries used after position ``horizon`` and after the round's
        first: what any builder of the node fetched ahead, up to the horizon, stays).  Returns the position of the first item not
        admitted (None: all were); the caller waits for the plan to move before trying it again.  Never waits for
        space or for another fetcher; a piece that never matches its digest is recorded for the batch that needs
        it (fetched once more, then named there: ``CacheIntegrityError``), and a store's error is raised."""
        if self.files.read_through or not items:
            return None
        pack, cache = self.pack, self.files.node_cache
        step = 2 * max(1, fetches)
        for lo in range(0, len(items), step):  # a round: claimed, admitted and fetched together
            refused = self._fetch_ahead_round(pack, cache, items[lo:lo + step], fetches, horizon)
            if refused is not None:
                return refused
        return None

    def _fetch_ahead_round(self, pack, cache: NodeCache, items: list[tuple[int, str, int, int]],
                           fetches: int, horizon: int = -1) -> int | None:
        claims: dict[_Want, Claim] = {}
        at: dict[_Want, int] = {}
        try:
            for shard, stream, i, position in items:
                layout = self.layout(pack, shard, stream)
                key = segment_key(layout.file_sha256, int(layout.start[i]), int(layout.size[i]))
                if key in self._failed:
                    continue
                want = _Want(None, i, key, layout)
                claimed = cache.claim(key, self._source(want))
                if isinstance(claimed, Claim):
                    claims[want], at[want] = claimed, position
            if not claims:
                return None
            with self._digest_lock:
                untouched = sorted({w.layout.shard for w in claims} - set(self._digests))
            # each shard's digests.npy on its first touch, fetched together (a cold start's first round touches
            # a shard per segment)
            self.files.fetch_all([lambda shard=shard: self.digests(pack, shard) for shard in untouched])
            groups = coalesce([(w.layout.rel, int(w.layout.start[w.index]), w.key.size, w) for w in claims])
            groups.sort(key=lambda g: min(at[w] for w in g[3]))
            wanted = [claims[w] for g in groups for w in g[3]]
            admitted = set(map(id, cache.reserve_ahead(wanted, max(min(at.values()), horizon))))
            sent, refused = [], None
            for group in groups:
                if not all(id(claims[w]) in admitted for w in group[3]):
                    refused = min(at[w] for w in group[3])
                    break
                sent.append(group)
            self.files.fetch_all([lambda group=group: self._fetch_ahead_group(pack, group, claims)
                                  for group in sent])
            return refused
        finally:
            for claim in claims.values():
                claim.release()

    def _fetch_ahead_group(self, pack, group: tuple[str, int, int, list], claims: dict) -> None:
        """One coalesced request of the fetch-ahead: each segment verified, then its claim filled (its room was
        made by ``reserve_ahead``); a segment that never matches is recorded, its claim let go."""
        for want, piece in self._group_pieces(pack, group):
            if isinstance(piece, CacheIntegrityError):
                self._failed[want.key] = piece
                claims.pop(want).release()
                continue
            claims.pop(want).fill(piece)

    def need_at(self, pack, stream: str, shards, offsets) -> None:
        """:meth:`need` for the segments at element offsets ``offsets`` of shards ``shards`` (batch code that holds
        offsets, not segment ids)."""
        shards = np.asarray(shards, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        ids = []
        for shard in np.unique(shards).tolist():
            layout = self.layout(pack, shard, stream)
            wanted = offsets[shards == shard]
            at = np.minimum(np.searchsorted(layout.offset, wanted), max(len(layout.segments) - 1, 0))
            if not len(layout.segments) or (layout.offset[at] != wanted).any():
                raise ValueError(f"{self.files.where(layout.rel)}: an offset asked for is not a segment's start")
            ids.append(layout.segments[at])
        if ids:
            self.need(pack, stream, np.concatenate(ids))

    def _keep(self, asked: list[tuple[int, str, int]]) -> None:
        """Mark ``asked`` as the most recently read; give back the oldest beyond ``RESIDENT_BYTES``."""
        now = set(asked)
        for item in asked:
            if item in self._resident:
                self._resident.move_to_end(item)
            else:
                size = int(self._buffers[item[:2]].layout.size[item[2]])
                self._resident[item] = size
                self._resident_bytes += size
        while self._resident_bytes > RESIDENT_BYTES and self._resident:
            item, size = next(iter(self._resident.items()))
            if item in now:
                break
            del self._resident[item]
            self._resident_bytes -= size
            self._buffers[item[:2]].release(item[2])

    def _obtain(self, pack, wants: list[_Want]) -> None:
        """Fill every segment of ``wants``: from the node cache, else fetched (claimed ones coalesced, the rest
        waited for), each verified."""
        cache: NodeCache | None = None if self.files.read_through else self.files.node_cache
        claims: dict[_Want, Claim] = {}
        others: list[_Want] = []
        fetch: list[_Want] = []
        try:
            for want in wants:
                failed = self._failed.get(want.key)
                if failed is not None:
                    raise failed
                if cache is None:
                    fetch.append(want)
                    continue
                if self._from_cache(pack, cache, want):
                    continue
                claimed = cache.claim(want.key, self._source(want))
                if isinstance(claimed, Claim):
                    claims[want] = claimed
                    fetch.append(want)
                elif claimed is None:
                    others.append(want)
                elif not self._from_cache(pack, cache, want):
                    others.append(want)  # completed meanwhile, changed on disk: fetched again below
            for want in fetch:  # the fetch-ahead may have met a corrupt piece while this process waited for it
                if want.key in self._failed:
                    raise self._failed[want.key]
            # each shard's digests.npy on its first touch, fetched beside the segments' requests (a request's
            # pieces are compared with them as it returns, before any byte is used)
            with self._digest_lock:
                untouched = sorted({w.layout.shard for w in wants} - set(self._digests))
            calls = [lambda shard=shard: self.digests(pack, shard) for shard in untouched]
            for part in claim_rounds(fetch, None if cache is None else cache.limit):
                if claims:
                    cache.reserve_claims([claims[w] for w in part])
                groups = coalesce([(w.layout.rel, int(w.layout.start[w.index]), w.key.size, w) for w in part])
                calls += [lambda group=group: self._fetch_group(pack, group, claims) for group in groups]
                self.files.fetch_all(calls)
                calls = []
            if calls:
                self.files.fetch_all(calls)
            for want in others:
                path = cache.ensure(want.key, lambda fp, want=want: fp.write(self._fetch_one(pack, want)),
                                    self._source(want))
                if not self._fill_from_path(pack, cache, want, path):
                    cache.discard(want.key)
                    want.buffer.fill(want.index, self._fetch_one(pack, want))
        finally:
            for claim in claims.values():
                claim.release()

    def _source(self, want: _Want) -> str:
        return f"{self.files.where(want.layout.rel)}#segment={int(want.layout.segments[want.index])}"

    def _from_cache(self, pack, cache: NodeCache, want: _Want) -> bool:
        path = cache.lookup(want.key)
        return path is not None and self._fill_from_path(pack, cache, want, path)

    def _fill_from_path(self, pack, cache: NodeCache, want: _Want, path: str) -> bool:
        """Fill ``want`` from the cache's entry at ``path`` when it holds the segment's bytes (hashed now); a copy
        that does not is removed from the cache (the caller fetches it)."""
        try:
            with open(path, "rb") as fp:
                data = fp.read(want.key.size + 1)
        except FileNotFoundError:
            return False
        if len(data) == want.key.size and self._mismatch(pack, want, data) is None:
            want.buffer.fill(want.index, data)
            return True
        cache.discard(want.key)
        return False

    def _mismatch(self, pack, want: _Want, data) -> int | None:
        """The first piece of ``want``'s segment whose digest ``data`` does not match (None: all match)."""
        layout = want.layout
        digests = self.digests(pack, layout.shard)
        row = int(layout.piece_first[want.index])
        at = 0
        view = memoryview(data)
        for piece, size in enumerate(layout.pieces(want.index)):
            if hashlib.blake2b(view[at:at + size], digest_size=DIGEST_SIZE).digest() != digests[row + piece].tobytes():
                return piece
            at += size
        return None

    def _request(self, rel: str, start: int, stop: int) -> bytes:
        data = self.files.retried(lambda: self.files.store.read_range(rel, start, stop))
        with self._counter:
            self.requests += 1
            self.request_bytes += len(data)
        if len(data) != stop - start:
            raise CacheIntegrityError(f"{self.files.where(rel)}: the store returned {len(data)} bytes for range "
                                      f"[{start}, {stop}) (the object changed; open the pack again)")
        return data

    _counter = threading.Lock()

    def _group_pieces(self, pack, group: tuple[str, int, int, list]):
        """Each segment of one coalesced request, verified, in order: ``(want, bytes)``, or ``(want, error)`` (a
        ``CacheIntegrityError``) for one whose pieces still differ when fetched once more alone."""
        rel, start, stop, wants = group
        data = memoryview(self._request(rel, start, stop))
        for want in wants:
            lo = int(want.layout.start[want.index]) - start
            piece = data[lo:lo + want.key.size]
            if self._mismatch(pack, want, piece) is not None:
                try:
                    piece = memoryview(self._fetch_one(pack, want, attempts=FETCH_ATTEMPTS - 1))
                except CacheIntegrityError as err:
                    yield want, err
                    continue
            yield want, piece

    def _fetch_group(self, pack, group: tuple[str, int, int, list], claims: dict) -> None:
        for want, piece in self._group_pieces(pack, group):
            if isinstance(piece, CacheIntegrityError):
                raise piece
            want.buffer.fill(want.index, piece)
            claim = claims.pop(want, None)
            if claim is not None:
                claim.fill(piece)

    def _fetch_one(self, pack, want: _Want, attempts: int = FETCH_ATTEMPTS) -> bytes:
        """Segment ``want`` alone from the store, verified; ``CacheIntegrityError`` naming it when its pieces
        never match."""
        failed = self._failed.get(want.key)
        if failed is not None:  # fetched ahead already, twice, in this process
            raise failed
        layout = want.layout
        start = int(layout.start[want.index])
        piece = None
        for _attempt in range(attempts):
            data = self._request(layout.rel, start, start + want.key.size)
            piece = self._mismatch(pack, want, data)
            if piece is None:
                return data
        segment = int(layout.segments[want.index])
        spec = pack.manifest.stream(layout.stream)
        what = f"block {piece} of " if spec.codec is not None else ""
        raise CacheIntegrityError(
            f"{self.files.location}: {what}segment {segment} of stream {layout.stream!r} in "
            f"{layout.rel.split('/')[0]} ({self.files.where(layout.rel)}, bytes [{start}, {start + want.key.size})) "
            f"does not match its digest in {DIGESTS_NAME} after {FETCH_ATTEMPTS} fetches: the object is corrupt on "
            f"the store, or the pack was replaced since it was opened (validate it: speechpack validate "
            f"{self.files.location})")


def claim_rounds(wants: list[_Want], limit: int | None) -> list[list[_Want]]:
    """``wants`` in file and byte order, cut into rounds of at most half the cache ``limit`` each (None: one
    round): a block's segments are claimed, fetched and copied out a round at a time, so a limit smaller than a
    block's segments still reads it (each round's entries may go once copied into this process)."""
    ordered = sorted(wants, key=lambda w: (w.layout.rel, int(w.layout.start[w.index])))
    if limit is None:
        return [ordered] if ordered else []
    budget = max(limit // 2, 1)
    rounds: list[list[_Want]] = []
    held = budget + 1
    for want in ordered:
        if held + want.key.size > budget:
            rounds.append([])
            held = 0
        rounds[-1].append(want)
        held += want.key.size
    return rounds


def coalesce(ranges: list[tuple[str, int, int, object]], most: int = COALESCE_BYTES,
             gap: int = COALESCE_GAP) -> list[tuple[str, int, int, list]]:
    """``(file, start, size, item)`` ranges grouped into requests ``(file, start, stop, items)``: ranges of one file
    in byte order, joined while the next starts within ``gap`` bytes of the request's end and the request stays
    within ``most`` bytes (a single larger range is a request of its own)."""
    groups: list[tuple[str, int, int, list]] = []
    for rel, start, size, item in sorted(ranges, key=lambda r: (r[0], r[1])):
        if groups:
            g_rel, g_start, g_stop, items = groups[-1]
            if g_rel == rel and start - g_stop <= gap and max(g_stop, start + size) - g_start <= most:
                groups[-1] = (g_rel, g_start, max(g_stop, start + size), items + [item])
                continue
        groups.append((rel, start, start + size, [item]))
    return groups


def _npy_1d(data: bytes, where: str) -> np.ndarray:
    try:
        header = read_npy_header_from(io.BytesIO(data), where)
    except NpyHeaderError as err:
        raise PackFormatError(f"{where}: cannot read column ({err.reason})") from None
    return np.frombuffer(data, dtype=header.dtype, count=header.shape[0], offset=header.data_offset)


__all__ = ["COALESCE_BYTES", "COALESCE_GAP", "RESIDENT_BYTES", "RangeBuffer", "RangeReads", "ShardLayouts",
           "StreamLayout", "claim_rounds", "coalesce", "segment_key", "segment_key_parts"]
