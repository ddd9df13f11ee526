"""Where each row's samples come from: WeSep's ``random_chunk`` windows, whole utterances, or train-window chunks.

``Chunking`` holds the settings for one loader state and turns a mixture (or source) into a ``Window``; it also
gives the plan the row length each unit will have (``unit_lengths``), so budget batching counts what the batch
will hold.  Every draw comes from the caller (the batch's counter-based generator), so a window depends on
nothing else.

Reading a batch's windows out of the mapped stream files: where each segment lies (``Segments``), the stream
arrays themselves (``StreamArrays``), the read-ahead ranges of a batch (``window_ranges``, ``advise``) and the copy
loop (``decode_windows``).  ``loader.tse.table`` plans a batch; the functions below do its reading, the only part of a
batch whose cost grows with its audio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from speechpack.loader.pack import Pack
from speechpack.loader.pack.blocks import BlockSamples
from speechpack.loader.pack.readahead import will_need_ranges
from speechpack.loader.plan.train_windows import TrainWindows
from speechpack.loader.samples import copy_window


#: WeSep re-draws a training window at most this many times while the mixture chunk is silent.
ZERO_CHUNK_REDRAWS = 3
#: Mainline WeSep's windows (``Chunking.mainline``): uniform draws tried before the exact choice among the starts
#: where every signal sounds (its ``get_random_chunk`` re-draws without a bound), plus the one that choice uses.
MAINLINE_REDRAWS = 7
MAINLINE_WINDOW_DRAWS = MAINLINE_REDRAWS + 1
#: Stride of the first look for a non-zero sample in a window (any hit proves it is not silent).
SOUND_PROBE_STRIDE = 512


class Window(NamedTuple):
    """Where one item's rows come from: samples ``[start, start + take)`` of the source, written at the row's
    start, in a row of ``length`` samples (``length > take`` means right zero padding).  A named tuple: several
    are made per mixture, and a frozen dataclass costs several times more to build."""

    start: int
    take: int
    length: int
    orig_len: int

    def chunk_ratio(self) -> dict:
        """WeSep's chunk metadata: ``{start_ratio, end_ratio, orig_len, chunk_len}`` (``end_ratio > 1`` when
        padded)."""
        end = self.start + (self.length if self.length > self.take else self.take)
        return {"start_ratio": self.start / self.orig_len, "end_ratio": end / self.orig_len,
                "orig_len": self.orig_len, "chunk_len": self.length}

    def padded_to(self, length: int) -> "Window":
        """The same samples in a row of ``length`` (an online group padded to its longest source)."""
        return Window(self.start, self.take, length, self.orig_len)


@dataclass(frozen=True)
class Chunking:
    """How rows are cut in one state: ``chunk`` (train, not ``whole_utt``) windows of ``chunk_len`` samples,
    starting at random (``random_start``) or at 0; shorter items ``pad``-ded to ``chunk_len`` or kept
    (``short_policy``); otherwise whole utterances.

    ``mainline``: mainline WeSep's ``get_random_chunk`` (a mainline recipe, ``loader.tse.mainline``): a shorter item
    is tiled (repeated from its start up to ``chunk_len``; ``tile_row``), and a window is re-drawn while the
    mixture or any target in it is all zeros (``sounding_start``), so every row is ``chunk_len`` long and no
    target row is silent where the data allows it."""

    chunk: bool
    chunk_len: int
    random_start: bool
    short_policy: str
    mainline: bool = False

    @property
    def draws_per_window(self) -> int:
        """Uniform draws one window takes from its generator."""
        return MAINLINE_WINDOW_DRAWS if self.mainline else ZERO_CHUNK_REDRAWS + 1

    @property
    def tile(self) -> bool:
        """Whether a short item is tiled rather than padded or kept (mainline)."""
        return self.mainline

    def window(self, mix: np.ndarray, draws: np.ndarray, redraw_silence: bool = True,
               targets: list[np.ndarray] = ()) -> Window:
        """WeSep's ``random_chunk`` window of ``mix`` ``[C, T]``.  ``redraw_silence``: re-draw (up to 3 times)
        while the chunk is all zeros — WeSep does this only when a sample has a mixture, so online-mixing sources
        skip it (a silent group is redrawn after mixing instead).  Mainline: ``sounding_start`` over ``mix`` and
        ``targets`` (each ``[C, T]``; an online source is its own mixture, and mainline re-draws it too)."""
        total = mix.shape[1]
        length = self.chunk_len
        if not self.chunk:
            return Window(0, total, total, total)
        if total >= length:
            start = 0
            if self.random_start and self.mainline:
                start = sounding_start([mix, *targets], length, draws)
            elif self.random_start:
                for attempt in range(ZERO_CHUNK_REDRAWS + 1):
                    start = int(draws[attempt] * (total - length + 1))
                    if not redraw_silence or sounds(mix[:, start:start + length]):
                        break
            return Window(start, length, length, total)
        if self.short_policy == "pad" or self.tile:
            return Window(0, total, length, total)
        return Window(0, total, total, total)

    def windows(self, totals: np.ndarray, draws: np.ndarray, audible: Callable[[int, int], bool],
                surely_audible: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                signals: Callable[[int], list[np.ndarray]] | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``window`` for a whole batch of mixtures at once: ``(start, take, length)`` arrays for mixtures of
        ``totals`` samples, the same values ``window`` gives each; ``audible(i, start)`` tells whether mixture
        ``i``'s chunk at ``start`` has a non-zero sample (asked only where a random start may be re-drawn).
        ``surely_audible(index, start)``, where given, answers for the first draws of all those mixtures at once
        (True: audible; False: ask ``audible``): one numpy gather instead of a call per mixture, which was a
        tenth of a short batch's fixed cost (docs/performance.md, "Against the pack-based peers").  Mainline:
        ``signals(i)`` gives mixture ``i``'s whole mixture and targets (``[C, T]`` each) for ``sounding_start``."""
        totals = np.asarray(totals, dtype=np.int64)
        if not self.chunk:
            return np.zeros(len(totals), dtype=np.int64), totals, totals
        length = self.chunk_len
        long = totals >= length
        take = np.where(long, length, totals)
        rows = np.where(long | (self.short_policy == "pad") | self.tile, length, totals)
        if not self.random_start:
            return np.zeros(len(totals), dtype=np.int64), take, rows
        if self.mainline:  # every signal of the mixture looked at (``signals``): item by item
            starts = np.zeros(len(totals), dtype=np.int64)
            for i in np.flatnonzero(long).tolist():
                starts[i] = sounding_start(signals(i), length, draws[i])
            return starts, take, rows
        products = (draws * (totals - length + 1)[:, None]).astype(np.int64)  # int() of each product
        candidates = products.tolist()
        starts = np.zeros(len(totals), dtype=np.int64)
        asked = np.flatnonzero(long)
        if surely_audible is not None and len(asked):
            first = products[asked, 0]
            sure = surely_audible(asked, first)
            starts[asked[sure]] = first[sure]
            asked = asked[~sure]
        for i in asked.tolist():
            for attempt in candidates[i]:
                if audible(i, attempt):
                    break
            starts[i] = attempt
        return starts, take, rows

    @property
    def fixed_length(self) -> bool:
        """Whether every row is exactly ``chunk_len`` long (train chunks, ``pad``; mainline's tiles)."""
        return self.chunk and (self.short_policy == "pad" or self.tile)

    def row_lengths(self, whole: np.ndarray) -> np.ndarray:
        """The row length of items of ``whole`` samples (at the loader's rate)."""
        if not self.chunk:
            return whole
        if self.short_policy == "pad" or self.tile:
            return np.full(len(whole), self.chunk_len, dtype=np.int64)
        return np.minimum(whole, self.chunk_len)


def unit_window(windows: TrainWindows, unit: int, total: int) -> Window:
    """The fed span (history and chunk) of train-window unit ``unit`` of an item of ``total`` samples."""
    fed, stop = int(windows.fed_start[unit]), int(windows.stop[unit])
    return Window(fed, stop - fed, stop - fed, total)


def scored_mask(windows: TrainWindows, units: list[int], length: int) -> np.ndarray:
    """``scored`` ``[rows, length]``: True on each row's chunk, False on its history and the padding."""
    scored = np.zeros((len(units), length), dtype=bool)
    for r, unit in enumerate(units):
        lo = int(windows.start[unit] - windows.fed_start[unit])
        scored[r, lo:lo + int(windows.stop[unit] - windows.start[unit])] = True
    return scored


def audible_starts(signals: list[np.ndarray], length: int) -> np.ndarray:
    """``[T - length + 1]`` bool (``T`` the first signal's length): where a window of ``length`` samples has a
    non-zero sample in every one of ``signals`` (``[C, T']`` each; past a signal's end it is silent), from running
    counts of non-zero samples: one pass per signal."""
    positions = max(signals[0].shape[-1] - length + 1, 0)
    ok = np.ones(positions, dtype=bool)
    for signal in signals:
        nonzero = np.count_nonzero(signal.reshape(-1, signal.shape[-1]), axis=0) > 0
        running = np.concatenate([[0], np.cumsum(nonzero, dtype=np.int64)])
        here = np.zeros(positions, dtype=bool)
        reach = min(positions, max(len(running) - length, 0))
        here[:reach] = running[length:length + reach] > running[:reach]
        ok &= here
    return ok


def sounding_start(signals: list[np.ndarray], length: int, draws: np.ndarray) -> int:
    """Mainline WeSep's window start over ``signals`` (the mixture first, then its targets; ``[C, T]`` each, ``T >=
    length``): a uniform start, re-drawn while any signal's window is all zeros, as its ``get_random_chunk`` does.
    Its loop has no bound; here ``MAINLINE_REDRAWS`` draws are tried, then the last draw picks uniformly among
    the starts where every signal sounds (``audible_starts``): the same distribution, in bounded time.  Where no
    start makes every signal sound (a target silent throughout), the starts where the mixture sounds are used,
    and where it never does, the first draw."""
    positions = signals[0].shape[-1] - length + 1
    for u in draws[:MAINLINE_REDRAWS].tolist():
        start = int(u * positions)
        if all(sounds(signal[..., start:start + length]) for signal in signals):
            return start
    ok = audible_starts(signals, length)
    if not ok.any():
        ok = audible_starts(signals[:1], length)
    if not ok.any():
        return int(draws[0] * positions)
    choices = np.flatnonzero(ok)
    return int(choices[min(int(draws[MAINLINE_REDRAWS] * len(choices)), len(choices) - 1)])


def tile_row(row: np.ndarray, take: int) -> None:
    """Mainline's tiling, in place: ``row[..., take:]`` filled by repeating ``row[..., :take]`` from its start
    (``[C, T]`` or ``[T]``; ``take`` 0 leaves zeros)."""
    width = row.shape[-1]
    if take <= 0:
        row[..., :] = 0.0
        return
    filled = take
    while filled < width:
        step = min(filled, width - filled)
        row[..., filled:filled + step] = row[..., :step]
        filled += step


def sounds(chunk: np.ndarray) -> bool:
    """Whether ``chunk`` (``[T]`` or ``[C, T]``) has a non-zero sample: a strided look first (speech is rarely
    zero, so this decides almost every window for a 512th of the reads), then the whole window only if that look
    saw zeros."""
    return bool(np.count_nonzero(chunk[..., ::SOUND_PROBE_STRIDE]) or np.count_nonzero(chunk))


@dataclass(frozen=True)
class Segments:
    """Where each entry's segment lies and how it decodes, as parallel arrays: in pack ``pack``, shard ``shard``,
    elements ``offset : offset + channels * length`` of the stream file (channel-major; a compressed stream's
    ``offset`` is in bytes, its samples are read through ``segment``, the segment's row in its stream's table);
    ``scale`` and ``shift`` are the float32 multiplier and subtrahend of the decode (``shift`` None: no
    normalisation, nothing to subtract)."""

    pack: np.ndarray
    shard: np.ndarray
    offset: np.ndarray
    channels: np.ndarray
    length: np.ndarray
    scale: np.ndarray
    shift: np.ndarray | None
    segment: np.ndarray | None = None

    def part(self, lo: int, hi: int) -> "Segments":
        """Entries ``lo`` to ``hi - 1`` (views)."""
        return Segments(self.pack[lo:hi], self.shard[lo:hi], self.offset[lo:hi], self.channels[lo:hi],
                        self.length[lo:hi], self.scale[lo:hi], None if self.shift is None else self.shift[lo:hi],
                        None if self.segment is None else self.segment[lo:hi])


#: Stream files a ``StreamArrays`` keeps at hand between batches; past this many it starts again (the pack's own
#: bounded cache of mappings, ``loader.pack.reader.MAX_OPEN_STREAM_FILES``, is the one that limits what stays mapped).
KEPT_STREAM_ARRAYS = 64


class StreamArrays:
    """The mapped stream files a batch reads, per entry: looked up in the pack (which maps a file on first use)
    once, then kept at hand for the next batches, which mostly read the same shards.  Pickles empty, as the arrays
    are mappings: a worker started by spawn looks them up again.  An entry of a pack whose stream is compressed is
    its segment's ``BlockSamples`` instead (``loader.pack.blocks``: its window's blocks decoded when sliced)."""

    def __init__(self, packs: list[Pack], stream: str):
        self.packs = packs
        self.stream = stream
        self._kept: dict[tuple[int, int], np.ndarray] = {}
        self.compressed = [stream in pack.blocks for pack in packs]

    def __getstate__(self) -> dict:
        return {"packs": self.packs, "stream": self.stream, "_kept": {}, "compressed": self.compressed}

    def of(self, segments: Segments) -> list[np.ndarray | BlockSamples]:
        """The stream array (or compressed segment) of every entry of ``segments``."""
        kept = self._kept
        arrays = []
        compressed = self.compressed if any(self.compressed) else None
        for e, key in enumerate(zip(segments.pack.tolist(), segments.shard.tolist())):
            if compressed is not None and compressed[key[0]]:
                arrays.append(BlockSamples(self.packs[key[0]], self.stream, int(segments.segment[e])))
                continue
            array = kept.get(key)
            if array is None:
                if len(kept) >= KEPT_STREAM_ARRAYS:
                    kept.clear()
                array = kept[key] = self.packs[key[0]].stream_array(key[1], self.stream)
            arrays.append(array)
        for p, pack in enumerate(self.packs):  # a pack read by ranges fetches the batch's segments (Pack.need)
            if pack.files.range_reads is not None:
                mine = segments.pack == p
                pack.need_at(self.stream, segments.shard[mine], segments.offset[mine])
        if any(pack.checks.unsettled for pack in self.packs):  # empty once every mapped file's content is checked
            for p, shard in set(zip(segments.pack.tolist(), segments.shard.tolist())):
                self.packs[p].check_content(shard, self.stream)
        return arrays


def array_addresses(arrays: list[np.ndarray]) -> np.ndarray:
    """The address of each array's first element (for read-ahead ranges)."""
    return np.asarray([array.__array_interface__["data"][0] for array in arrays], dtype=np.uint64)


def window_view(array: np.ndarray, offset: int, channels: int, length: int, start: int, take: int) -> np.ndarray:
    """Samples ``[start, start + take)`` of every channel of a channel-major segment, as a ``[C, take]`` view."""
    return array[offset:offset + channels * length].reshape(channels, length)[:, start:start + take]


def compressed_entries(arrays: list) -> list[int]:
    """The entries of a batch whose segment is compressed (``BlockSamples``): read ahead and probed by their
    pack, not by addresses in a mapping."""
    return [e for e, array in enumerate(arrays) if isinstance(array, BlockSamples)]


def window_ranges(addresses: np.ndarray, itemsize: int, segments: Segments, start: np.ndarray,
                  take: np.ndarray) -> np.ndarray:
    """(address, bytes) of the windows ``[start, start + take)`` of every entry, one range per channel, as a
    ``[n, 2]`` uint64 array for ``loader.pack.readahead.will_need_ranges``; ``addresses`` are the entries' stream
    arrays' first elements."""
    offset, length, channels = segments.offset, segments.length, segments.channels
    element = offset + start
    if (channels != 1).any():  # a range per channel of a channel-major segment
        channel = np.arange(int(channels.sum())) - np.repeat(np.cumsum(channels) - channels, channels)
        element = np.repeat(element, channels) + channel * np.repeat(length, channels)
        addresses, take = np.repeat(addresses, channels), np.repeat(take, channels)
    ranges = np.empty((len(element), 2), dtype=np.uint64)
    ranges[:, 0] = addresses + element.astype(np.uint64) * np.uint64(itemsize)
    ranges[:, 1] = take.astype(np.uint64) * np.uint64(itemsize)
    return ranges[take > 0]


def advise(*ranges: np.ndarray) -> None:
    """Announce every window of the batch (``window_ranges`` of each stream) in one system call: a cold pack is
    then read in one request per window, before any copy waits on it (``loader.pack.readahead``)."""
    will_need_ranges(np.concatenate(ranges))


def decode_windows(out: np.ndarray, arrays: list[np.ndarray], segments: Segments, start: np.ndarray,
                   take: np.ndarray, dest_rows: list[int] | None = None, repeats: list[int] | None = None,
                   tile: bool = False) -> None:
    """Decode entry ``e``'s window into row ``dest_rows[e]`` of ``out`` ``[rows, C, T]`` (row ``e`` when None),
    zero-padded on the right (``tile``: tiled, ``tile_row``), then copy it into the ``repeats[e]`` rows that follow
    (a mixture's other targets).  ``take`` is already cut to ``T``."""
    width = out.shape[-1]
    single = out.shape[1] == 1
    count = len(arrays)
    shifts = [0.0] * count if segments.shift is None else segments.shift.tolist()
    rows = zip(range(count) if dest_rows is None else dest_rows, arrays, segments.offset.tolist(),
               segments.channels.tolist(), segments.length.tolist(), start.tolist(), take.tolist(),
               segments.scale.tolist(), shifts, [0] * count if repeats is None else repeats)
    for r, array, offset, channels, length, begin, n, scale, shift, repeat in rows:
        if isinstance(array, BlockSamples):  # a compressed segment: the blocks under its window decoded to int16
            copy_window(out[r, :, :n], array[:, begin:begin + n], scale, shift)
        elif single and channels == 1:
            copy_window(out[r, 0, :n], array[offset + begin:offset + begin + n], scale, shift)
        else:
            copy_window(out[r, :, :n], window_view(array, offset, channels, length, begin, n), scale, shift)
        if n < width:
            if tile:
                tile_row(out[r], n)
            else:
                out[r, :, n:] = 0.0
        for copy in range(r + 1, r + 1 + repeat):
            out[copy] = out[r]


__all__ = ["Chunking", "KEPT_STREAM_ARRAYS", "MAINLINE_REDRAWS", "MAINLINE_WINDOW_DRAWS", "SOUND_PROBE_STRIDE",
           "Segments", "StreamArrays", "Window", "ZERO_CHUNK_REDRAWS", "advise", "array_addresses", "audible_starts",
           "compressed_entries",
           "decode_windows", "scored_mask", "sounding_start", "sounds", "tile_row", "unit_window", "window_ranges",
           "window_view"]
