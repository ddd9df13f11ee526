"""Compressed audio streams (format 1.4, ``codec`` ``flac`` or ``opus``): where each block of a segment lies, and
its samples decoded a block at a time.

Why blocks.  A compressed segment is cut into independently decodable blocks of ``block_frames`` frames
(docs/format.md), so a reader that needs a window decodes only the blocks the window touches, and of those only
the part under the window: a 2 s training window of a 60 s utterance decodes about 2 s, not 60.  ``BlockTable``
turns the ``columns/<stream>_blocks.npy`` column (every block's byte size) into each block's byte offset in its
shard's stream file (a cumulative sum), and each segment's first block.  ``BlockSamples`` is one segment's stored
samples, ``[C, T]`` int16, as a reader sees them: sliced like the int16 view of a pcm16 segment (``samples[:, a:b]``,
``samples[0, a:b]``), it decodes the part of each block under the slice (a FLAC block from the FLAC frame holding
the slice's first sample, libsndfile seeking sample-exactly; an Opus block from its first frame; each block's
decoding stops at the slice's end) and keeps what it decoded while the object lives, so the next slice of the same
frames decodes nothing.  It returns int16 exactly as a pcm16 pack would hold them (FLAC is lossless; an Opus
block's decoded samples are its stored samples by definition, and a decode stopped early gives their first
frames).  ``Pack.stored_segment`` hands one out for a compressed stream, so every reader of stored audio
(``loader.samples``, TSE's table and item paths, ASD, ASR, ``Pack.sample``) decodes through here, in whichever
process builds the batch (the DataLoader's workers).

Corrupt input is a named error, never garbage audio: a block whose bytes differ from its digest
(``shard-k/digests.npy``, when the pack has digests, which every compressed pack has), that libsndfile cannot
decode, or that decodes to another frame count, channel count or rate than the index records raises
``CorruptBlock`` naming the stream file, stream, segment, its sample's key and the block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.media.codecs import CorruptBlock
from speechpack.media.codecs import codec as codec_row
from speechpack.schemas.constants import DIGEST_SIZE as DIGEST_BYTES
from speechpack.schemas.digests import piece_digest
from speechpack.schemas.errors import PackFormatError


@dataclass(frozen=True)
class BlockTable:
    """The blocks of one compressed stream across the pack: segment ``j`` owns blocks ``first[j] : first[j + 1]``;
    block ``b`` is ``size[b]`` bytes at byte ``start[b]`` of its shard's stream file data and holds frames
    ``[(b - first[j]) * block_frames, ...)`` of its segment; ``piece[b]`` is its row in its shard's
    ``digests.npy`` (None: the pack has no digests)."""

    codec: str
    block_frames: int
    first: np.ndarray
    start: np.ndarray
    size: np.ndarray
    piece: np.ndarray | None = None

    @classmethod
    def of(cls, codec: str, block_frames: int, offset: np.ndarray, length: np.ndarray, sizes: np.ndarray,
           where: str) -> "BlockTable":
        """The table of segments at byte ``offset`` of ``length`` frames, from the blocks column ``sizes``
        (``where``: its file, for messages); ``PackFormatError`` when the column does not fit the segments."""
        sizes = np.ascontiguousarray(sizes, dtype=np.int64)
        counts = -(-np.asarray(length, dtype=np.int64) // block_frames)  # ceil(length / block_frames)
        first = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        if int(first[-1]) != len(sizes):
            raise PackFormatError(f"{where}: {len(sizes)} blocks, the segments' lengths need {int(first[-1])} "
                                  f"(ceil(length / {block_frames}) each)")
        if len(sizes) and int(sizes.min()) <= 0:
            row = int(np.flatnonzero(sizes <= 0)[0])
            raise PackFormatError(f"{where}: row {row}: block of {int(sizes[row])} bytes (a block is a whole "
                                  f"encoded file)")
        before = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=before[1:])
        owner = np.repeat(np.arange(len(counts)), counts)
        start = np.asarray(offset, dtype=np.int64)[owner] + before[:-1] - before[first[:-1]][owner]
        return cls(codec, int(block_frames), first, start, sizes)

    def segment_bytes(self) -> np.ndarray:
        """Bytes of each segment (the sum of its blocks' sizes)."""
        before = np.zeros(len(self.size) + 1, dtype=np.int64)
        np.cumsum(self.size, out=before[1:])
        return before[self.first[1:]] - before[self.first[:-1]]

    def blocks_of(self, segment: int, start: int, stop: int) -> range:
        """The blocks of ``segment`` holding frames ``[start, stop)`` (``stop > start``), as absolute block rows."""
        base = int(self.first[segment])
        return range(base + start // self.block_frames, base + -(-stop // self.block_frames))

    def with_pieces(self, piece: np.ndarray) -> "BlockTable":
        return BlockTable(self.codec, self.block_frames, self.first, self.start, self.size, piece)


def piece_rows(kinds: list[tuple[np.ndarray, np.ndarray | None]], shards: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Where each piece of the pack lies in its shard's ``digests.npy`` (docs/format.md, "Digests"): for each
    stream in catalogue order, ``(segment_shard, blocks_first)`` (``blocks_first`` None: one piece per segment; else
    ``BlockTable.first``: one piece per block).  Returns per stream the digest row of each piece (per segment, or
    per block) and the piece count of each shard."""
    taken = np.zeros(shards, dtype=np.int64)
    rows = []
    for segment_shard, first in kinds:
        segment_shard = np.asarray(segment_shard, dtype=np.int64)
        if first is None:
            piece_shard = segment_shard
        else:
            piece_shard = np.repeat(segment_shard, np.diff(first))
        # pieces of a shard are consecutive in storage order: a piece's row is its rank within its shard
        counts = np.bincount(piece_shard, minlength=shards) if len(piece_shard) else np.zeros(shards, np.int64)
        shard_first = np.zeros(shards, dtype=np.int64)
        np.cumsum(counts[:-1], out=shard_first[1:])
        rank = np.arange(len(piece_shard), dtype=np.int64) - shard_first[piece_shard]
        rows.append(taken[piece_shard] + rank)
        taken = taken + counts
    return rows, taken


def check_digest(data, expected: np.ndarray) -> bool:
    """Whether ``data``'s ``blake2b-128`` is ``expected`` (16 uint8)."""
    return piece_digest(data) == expected.tobytes()


def decode_block(codec: str, data: bytes, channels: int, frames: int, sample_rate: int, start: int = 0,
                 stop: int | None = None) -> np.ndarray:
    """One block's ``data`` decoded to int16 ``[channels, frames]`` through its codec's registry row
    (``media.codecs``: libsndfile); ``CorruptBlock`` when it does not decode to exactly that at that rate.  With
    ``start``/``stop``: frames ``[start, stop)`` of the block only (a codec that ``seeks``, FLAC, decodes from the
    FLAC frame holding ``start``; any stops at ``stop``).  Module-level, so a test can count the frames a read
    decodes."""
    return codec_row(codec).decode(data, sample_rate, channels, frames, start, stop)


class BlockSamples:
    """Segment ``segment`` of compressed stream ``stream`` of ``pack``, as its stored int16 samples ``[C, T]``
    decoded on demand (see the module docstring).  Slicing (``[:, a:b]``, ``[0, a:b]``, ``[..., a:b:step]``)
    decodes the blocks under the slice and returns a read-only int16 array; ``np.asarray`` decodes it whole."""

    ndim = 2
    dtype = np.dtype(np.int16)

    def __init__(self, pack, stream: str, segment: int):
        table = pack.streams[stream]
        self.pack = pack
        self.stream = stream
        self.segment = segment
        self.shape = (int(table.channels[segment]), int(table.length[segment]))
        self.blocks: BlockTable = pack.blocks[stream]
        self._seeks = codec_row(self.blocks.codec).seeks
        #: block row -> (first frame decoded, int16 [C, frames decoded]) of the blocks sliced so far
        self._decoded: dict[int, tuple[int, np.ndarray]] = {}

    def __repr__(self) -> str:
        return f"BlockSamples({self.stream!r}, segment={self.segment}, shape={self.shape}, codec={self.blocks.codec})"

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def window(self, start: int, stop: int) -> np.ndarray:
        """Frames ``[start, stop)`` of every channel (clamped to the segment), read-only int16 ``[C, stop - start]``.
        Only the part of each block under the window is decoded (a FLAC block from the FLAC frame holding the
        window's first sample; an Opus block from its start, see ``media.codecs``), and kept for the next slice of
        the same frames (a batch probes a window's sound, then copies it)."""
        channels, length = self.shape
        start, stop = max(0, start), min(stop, length)
        if stop <= start:
            return np.zeros((channels, 0), dtype=np.int16)
        blocks = self.blocks
        size = blocks.block_frames
        rows = blocks.blocks_of(self.segment, start, stop)
        first_row = int(blocks.first[self.segment])
        parts = []
        for b in rows:
            origin = (b - first_row) * size
            parts.append(self._span(b, max(start, origin) - origin, min(stop, origin + size) - origin))
        if len(parts) == 1:
            return parts[0]
        joined = np.concatenate(parts, axis=1)
        joined.flags.writeable = False
        return joined

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) == 1 or key[0] is Ellipsis:
            rows, cols = (slice(None), key[-1]) if key[0] is Ellipsis else (key[0], slice(None))
        elif len(key) == 2:
            rows, cols = key
        else:
            raise IndexError(f"{self!r}: too many indices {key!r}")
        if not isinstance(cols, slice):
            raise IndexError(f"{self!r}: frames are taken by a slice, got {cols!r}")
        start, stop, step = cols.indices(self.shape[1])
        if step < 0:
            return np.asarray(self)[rows, cols]
        window = self.window(start, max(stop, start))
        return window[rows, ::step] if step != 1 else window[rows]

    @property
    def T(self) -> np.ndarray:  # noqa: N802 - numpy's name
        """The whole segment decoded, ``[T, C]`` (writers that hand frames to soundfile)."""
        return np.asarray(self).T

    def astype(self, dtype) -> np.ndarray:
        """The whole segment decoded, cast to ``dtype``."""
        return np.asarray(self).astype(dtype)

    def reshape(self, *shape) -> np.ndarray:
        """The whole segment decoded, reshaped (``audible_starts`` looks at whole signals)."""
        return np.asarray(self).reshape(*shape)

    def __array__(self, dtype=None, copy=None):
        whole = self.window(0, self.shape[1])
        return whole if dtype is None else whole.astype(dtype)

    def _span(self, b: int, start: int, stop: int) -> np.ndarray:
        """Frames ``[start, stop)`` of block row ``b`` (frames counted from the block's first), from what this view
        decoded of the block before, or decoded now: a span that the kept one does not cover is decoded as one
        with it (their union), so it stays one array per block."""
        kept = self._decoded.get(b)
        if kept is not None:
            lo, array = kept
            if lo <= start and stop <= lo + array.shape[1]:
                return array[:, start - lo:stop - lo]
            start_all, stop_all = min(start, lo), max(stop, lo + array.shape[1])
        else:
            start_all, stop_all = start, stop
        if not self._seeks:
            start_all = 0  # decoded from the block's first frame anyway: keep all of it
        decoded = self.pack.decode_block(self.stream, self.segment, b, start_all, stop_all)
        self._decoded[b] = (start_all, decoded)
        return decoded[:, start - start_all:stop - start_all]


__all__ = ["BlockSamples", "BlockTable", "CorruptBlock", "DIGEST_BYTES", "check_digest", "decode_block",
           "piece_rows"]
