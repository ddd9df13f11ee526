"""Train windows (MuVAP's chunking), as a pure function of the items' lengths.

``tile_windows``: an item of ``M`` samples longer than ``window`` is cut into ``n = ceil(M / window)`` near-equal
chunks with edges ``k * M / n`` rounded half to even (MuVAP's ``round(linspace(0, M, n + 1))``, computed exactly in
integers), so the chunks tile every sample exactly once.  With ``hist`` each chunk is fed with up to ``hist``
samples before it as unscored context (none before the item's start): the fed length is
``stop - max(0, start - hist)``, and that is the length the batcher plans with.  With train windows the plan's
units are chunks (``loader.plan.epoch_plan.plan_epoch``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.schemas.errors import PlanError


@dataclass(frozen=True)
class TrainWindows:
    """Train-window chunks as parallel arrays: chunk ``c`` feeds samples ``[fed_start, stop)`` of item
    ``item[c]`` and scores ``[start, stop)``."""

    item: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    fed_start: np.ndarray
    #: item ``i``'s chunks are ``first[i]:first[i + 1]``
    first: np.ndarray

    def __len__(self) -> int:
        return len(self.item)

    def units_of(self, items: np.ndarray) -> np.ndarray:
        """The chunk ids of ``items`` (in that order, repeats kept)."""
        items = np.asarray(items, dtype=np.int64)
        counts = self.first[items + 1] - self.first[items]
        return np.repeat(self.first[items] - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))

    @property
    def fed_length(self) -> np.ndarray:
        return self.stop - self.fed_start


def _round_half_even(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``numerator / denominator`` rounded to the nearest integer, ties to even (numpy's ``round``), exactly."""
    quotient, remainder = np.divmod(numerator, denominator)
    up = (2 * remainder > denominator) | ((2 * remainder == denominator) & (quotient % 2 == 1))
    return quotient + up


def tile_windows(lengths: np.ndarray, window: int, hist: int = 0) -> TrainWindows:
    """Chunks of every item (see the module docstring); an item no longer than ``window`` is one chunk."""
    if window < 1 or hist < 0:
        raise PlanError(f"train window must be >= 1 and hist >= 0, got window={window}, hist={hist}")
    lengths = np.asarray(lengths, dtype=np.int64)
    counts = np.maximum(-(-lengths // window), 1)
    item = np.repeat(np.arange(len(lengths), dtype=np.int64), counts)
    first = np.cumsum(counts) - counts
    start = np.zeros(len(item), dtype=np.int64)
    stop = lengths[item]
    # Only items of several chunks need the edges formula (most items are one chunk).
    multi = np.flatnonzero(counts > 1)
    if len(multi):
        c = counts[multi]
        rows = np.repeat(first[multi] - (np.cumsum(c) - c), c) + np.arange(int(c.sum()), dtype=np.int64)
        k = rows - np.repeat(first[multi], c)
        m, n = np.repeat(lengths[multi], c), np.repeat(c, c)
        start[rows] = _round_half_even(k * m, n)
        stop[rows] = _round_half_even((k + 1) * m, n)
    return TrainWindows(item=item, start=start, stop=stop, fed_start=np.maximum(start - hist, 0),
                        first=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))


__all__ = ["TrainWindows", "tile_windows"]
