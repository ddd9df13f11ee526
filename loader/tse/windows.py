"""Where each row's samples come from: WeSep's ``random_chunk`` windows, whole utterances, or train-window chunks.

``Chunking`` holds the settings for one loader state and turns a mixture (or source) into a ``Window``; it also
gives the plan the row length each unit will have (``unit_lengths``), so budget batching counts what the batch
will hold.  Every draw comes from the caller (the batch's counter-based generator), so a window depends on
nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from speechpack.loader.plan.train_windows import Windows

#: WeSep re-draws a training window at most this many times while the mixture chunk is silent.
ZERO_CHUNK_REDRAWS = 3
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
    (``short_policy``); otherwise whole utterances."""

    chunk: bool
    chunk_len: int
    random_start: bool
    short_policy: str

    def window(self, mix: np.ndarray, draws: np.ndarray, redraw_silence: bool = True) -> Window:
        """WeSep's ``random_chunk`` window of ``mix`` ``[C, T]``.  ``redraw_silence``: re-draw (up to 3 times)
        while the chunk is all zeros — WeSep does this only when a sample has a mixture, so online-mixing sources
        skip it (a silent group is redrawn after mixing instead)."""
        total = mix.shape[1]
        length = self.chunk_len
        if not self.chunk:
            return Window(0, total, total, total)
        if total >= length:
            start = 0
            if self.random_start:
                for attempt in range(ZERO_CHUNK_REDRAWS + 1):
                    start = int(draws[attempt] * (total - length + 1))
                    if not redraw_silence or sounds(mix[:, start:start + length]):
                        break
            return Window(start, length, length, total)
        if self.short_policy == "pad":
            return Window(0, total, length, total)
        return Window(0, total, total, total)

    def windows(self, totals: np.ndarray, draws: np.ndarray, audible: Callable[[int, int], bool]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``window`` for a whole batch of mixtures at once: ``(start, take, length)`` arrays for mixtures of
        ``totals`` samples, the same values ``window`` gives each; ``audible(i, start)`` tells whether mixture
        ``i``'s chunk at ``start`` has a non-zero sample (asked only where a random start may be re-drawn)."""
        totals = np.asarray(totals, dtype=np.int64)
        if not self.chunk:
            return np.zeros(len(totals), dtype=np.int64), totals, totals
        length = self.chunk_len
        long = totals >= length
        take = np.where(long, length, totals)
        rows = np.where(long | (self.short_policy == "pad"), length, totals)
        if not self.random_start:
            return np.zeros(len(totals), dtype=np.int64), take, rows
        candidates = (draws * (totals - length + 1)[:, None]).astype(np.int64).tolist()  # int() of each product
        starts = [0] * len(totals)
        for i in np.flatnonzero(long).tolist():
            for attempt in candidates[i]:
                if audible(i, attempt):
                    break
            starts[i] = attempt
        return np.asarray(starts, dtype=np.int64), take, rows

    @property
    def fixed_length(self) -> bool:
        """Whether every row is exactly ``chunk_len`` long (train chunks, ``pad``)."""
        return self.chunk and self.short_policy == "pad"

    def row_lengths(self, whole: np.ndarray) -> np.ndarray:
        """The row length of items of ``whole`` samples (at the loader's rate)."""
        if not self.chunk:
            return whole
        if self.short_policy == "pad":
            return np.full(len(whole), self.chunk_len, dtype=np.int64)
        return np.minimum(whole, self.chunk_len)


def unit_window(windows: Windows, unit: int, total: int) -> Window:
    """The fed span (history and chunk) of train-window unit ``unit`` of an item of ``total`` samples."""
    fed, stop = int(windows.fed_start[unit]), int(windows.stop[unit])
    return Window(fed, stop - fed, stop - fed, total)


def scored_mask(windows: Windows, units: list[int], length: int) -> np.ndarray:
    """``scored`` ``[rows, length]``: True on each row's chunk, False on its history and the padding."""
    scored = np.zeros((len(units), length), dtype=bool)
    for r, unit in enumerate(units):
        lo = int(windows.start[unit] - windows.fed_start[unit])
        scored[r, lo:lo + int(windows.stop[unit] - windows.start[unit])] = True
    return scored


def sounds(chunk: np.ndarray) -> bool:
    """Whether ``chunk`` (``[T]`` or ``[C, T]``) has a non-zero sample: a strided look first (speech is rarely
    zero, so this decides almost every window for a 512th of the reads), then the whole window only if that look
    saw zeros."""
    return bool(np.count_nonzero(chunk[..., ::SOUND_PROBE_STRIDE]) or np.count_nonzero(chunk))


__all__ = ["Chunking", "SOUND_PROBE_STRIDE", "Window", "ZERO_CHUNK_REDRAWS", "scored_mask", "sounds",
           "unit_window"]
