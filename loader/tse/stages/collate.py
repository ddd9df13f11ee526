"""Stage ``collate``: the contract batch, in WeSep's field order: the audio (``wav_mix``, ``wav_target``; or the
records that make them, ``augment_on: batch``), the row metadata (``spk``, ``key``, ``num_speaker``, online's
``source_key``), the per-row fields of the stages before (labels, cues), then ``valid``, ``lengths``,
``chunk_ratio`` and the stages' trailing fields (online's ``timeline``, ``overlap_ratio_2spk``; a train window's
``scored`` mask).  Draws nothing.
"""

from __future__ import annotations

import numpy as np

from speechpack.loader.plan.train_windows import TrainWindows
from speechpack.loader.tse.stages.protocol import BatchState, Stage
from speechpack.loader.tse.windows import scored_mask


class Collate(Stage):
    """The contract batch (module docstring); ``windows``: train-window units, whose rows get a ``scored`` mask."""

    name = "collate"
    keys = ("train_window", "hist_frames")

    def __init__(self, windows: TrainWindows | None):
        self.windows = windows

    def step(self, state: BatchState) -> None:
        rows = state.rows
        batch = {
            **state.audio,
            "spk": [row.speaker for row in rows],
            "key": [row.key for row in rows],
            "num_speaker": [row.num_speaker for row in rows],
        }
        if state.source_keys is not None:
            batch["source_key"] = state.source_keys
        batch.update(state.fields)
        batch["valid"] = np.asarray(state.valid, dtype=bool)[[row.item for row in rows]]
        batch["lengths"] = np.minimum(state.real, state.target_len)
        batch["chunk_ratio"] = state.chunk_ratio
        batch.update(state.extra)
        if state.chunks is not None:  # scored samples: the chunk itself, not its history
            batch["scored"] = scored_mask(self.windows, [int(state.chunks[row.item]) for row in rows],
                                          state.target_len)
        state.batch = batch


__all__ = ["Collate"]
