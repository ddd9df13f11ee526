"""Windowed shuffling with fairseq2's semantics, as a pure function of a counter-based generator.

fairseq2's pipelines (and so Omnilingual's recipes) shuffle a stream through a buffer of ``window`` elements:
``0`` shuffles the whole stream, ``1`` leaves it as it is, ``n > 1`` is a sliding window: the first ``n``
elements fill the buffer; each next element replaces one drawn uniformly from the buffer, which is emitted; when
the stream ends the buffer is emitted in a random order.  An element can therefore move at most ``n - 1`` places
towards the front, and any distance towards the back (fairseq2's ``DataPipelineBuilder.shuffle``,
https://facebookresearch.github.io/fairseq2/ , "shuffle(shuffle_window)").

speechpack computes the same process on indices, in the plan: the result is a permutation drawn only from the
generator it is given (``loader.rng.batch_rng(seed, epoch, ...)``), so the order is the same on every rank and
worker and after a resume.  ``window_order`` costs one Python step per element for ``n > 1`` (a few tenths of a second
per million), which the plan pays once per epoch and process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The shuffle window that shuffles the whole stream (fairseq2's 0).
WHOLE = 0
#: The shuffle window that leaves the order as it is.
NO_SHUFFLE = 1


def window_order(count: int, window: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation of ``range(count)``: the order a ``window``-element shuffle buffer emits (module docstring)."""
    if window < 0:
        raise ValueError(f"shuffle window must be >= 0, got {window}")
    if window == NO_SHUFFLE or count <= 1:
        return np.arange(count, dtype=np.int64)
    if window == WHOLE or window >= count:
        # A buffer that holds everything emits a uniform permutation: the whole-stream shuffle.
        return rng.permutation(count).astype(np.int64)
    draws = rng.integers(0, window, size=count - window).tolist()
    buffer = list(range(window))
    emitted = []
    for step, slot in enumerate(draws, start=window):
        emitted.append(buffer[slot])
        buffer[slot] = step
    tail = np.asarray(buffer, dtype=np.int64)[rng.permutation(window)]
    return np.concatenate([np.asarray(emitted, dtype=np.int64), tail])


@dataclass(frozen=True)
class ShuffleWindows:
    """The three shuffles of an epoch plan, each a fairseq2 window (``0`` whole, ``1`` none, ``n`` sliding):
    ``source`` reorders the items as read (Omnilingual's fragment shuffle), ``example`` reorders them before
    batching, ``batch`` reorders the batches.  A task whose planning view has no ``shuffle_windows`` shuffles
    the items and the batches whole, as speechpack always did."""

    source: int = WHOLE
    example: int = WHOLE
    batch: int = WHOLE

    def item_order(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """The items' order before batching: the source shuffle, then the example shuffle."""
        order = window_order(count, self.source, rng)
        return order[window_order(count, self.example, rng)]


__all__ = ["NO_SHUFFLE", "WHOLE", "ShuffleWindows", "window_order"]
