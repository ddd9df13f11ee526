"""Stage ``windows``: a pre-mixed batch's window draws, and the items its units read.

Draws: ``items x Chunking.draws_per_window`` uniforms from the batch stream (``loader.rng.batch_rng``, positions
``0 ..``), or, for mainline val and test windows, each mixture's own stream (``loader.rng.window_rng``: the same
window every epoch).  Train-window units (``train_window``) read their chunk's item and draw nothing here.
"""

from __future__ import annotations

import numpy as np

from speechpack.loader.plan.train_windows import TrainWindows
from speechpack.loader.rng import BatchGenerator, window_rng
from speechpack.loader.tse.items import ItemIndex
from speechpack.loader.tse.stages.protocol import BatchState, Stage


class WindowDraws(Stage):
    """The batch's window draws (module docstring); ``fixed``: mainline's per-mixture val windows."""

    name = "windows"
    stream = "batch"
    keys = ("whole_utt", "chunk_len", "chunk_random_start", "chunk_short_policy", "train_window", "hist_frames",
            "mainline")

    def __init__(self, seed: int, items: ItemIndex, width: int, windows: TrainWindows | None, fixed: bool):
        self.seed, self.items, self.width, self.windows, self.fixed = seed, items, width, windows, fixed
        self.batch_rng = BatchGenerator(seed)

    def step(self, state: BatchState) -> None:
        units = state.units
        if self.fixed:
            state.draws = window_draws(self.seed, self.items, units, self.width)
        else:
            state.draws = self.batch_rng(state.epoch, state.global_batch).random((len(units), self.width))
        state.item_ids = units
        if self.windows is not None:
            state.chunks, state.item_ids = units, self.windows.item[units]


def window_draws(seed: int, items: ItemIndex, item_ids: np.ndarray, width: int) -> np.ndarray:
    """``[items, width]`` window draws, each item's from its own stream (``loader.rng.window_rng``): a mainline
    val window depends on the mixture alone, not on the epoch or the batch it is in."""
    draws = np.empty((len(item_ids), width), dtype=np.float64)
    for row, item in enumerate(np.asarray(item_ids).tolist()):
        draws[row] = window_rng(seed, int(items.pack[item]), int(items.sample[item])).random(width)
    return draws


__all__ = ["WindowDraws", "window_draws"]
