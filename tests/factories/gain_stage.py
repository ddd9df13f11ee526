"""A toy TSE stage: each training mixture's ``wav_mix`` rows scaled by one random gain, drawn from the stage's own
stream (``loader.rng.stage_rng``), so no other stage's draws move.  docs/extending.md ("Adding a stage") shows
the same stage; tests/loader/tse/test_tse_stages.py registers it."""

from __future__ import annotations

import numpy as np

from speechpack.loader.rng import stage_rng
from speechpack.loader.tse.stages.protocol import BatchState, Stage

#: The gain range, in dB.
LOW_DB, HIGH_DB = -6.0, 0.0


class RandomGain(Stage):
    """``wav_mix`` of every mixture of the batch times ``10 ** (g / 20)``, ``g`` uniform in [LOW_DB, HIGH_DB)."""

    name = "gain"
    stream = "gain"

    def __init__(self, seed: int):
        self.seed = seed

    def gains(self, state: BatchState) -> np.ndarray:
        """The float32 factor of each mixture of the batch."""
        rng = stage_rng(self.seed, self.name, state.epoch, state.global_batch)
        return (10 ** (rng.uniform(LOW_DB, HIGH_DB, len(state.item_ids)) / 20)).astype(np.float32)

    def step(self, state: BatchState) -> None:
        factors = self.gains(state)
        wav_mix = state.audio["wav_mix"]
        for r, row in enumerate(state.rows):
            wav_mix[r] *= factors[row.item]


def gain_stage(builder) -> RandomGain | None:
    """The factory ``register_stage`` takes: the stage in training, none in val and test."""
    return RandomGain(builder.seed) if builder.state == "train" else None
