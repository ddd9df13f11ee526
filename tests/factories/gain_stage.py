"""A toy TSE stage: each training mixture's ``wav_mix`` rows scaled by one random gain, drawn from the stage's own
stream (``loader.rng.stage_rng``), so no other stage's draws move, in a range of its own config key
(``gain_db``, declared once in ``KEYS``).  docs/extending.md ("Adding a stage") shows the same stage;
tests/loader/tse/test_tse_stages.py registers it."""

from __future__ import annotations

import numpy as np

from speechpack.loader.config_keys import Key, Range
from speechpack.loader.rng import stage_rng
from speechpack.loader.tse.stages.protocol import BatchState, Stage

#: The gain range, in dB, by default.
LOW_DB, HIGH_DB = -6.0, 0.0
#: The stage's config keys: one declaration each (``register_stage(..., keys=KEYS)``).
KEYS = (Key("gain_db", (LOW_DB, HIGH_DB), Range(-40.0, 40.0, "dB"), "the toy gain stage's range of gains"),)


class RandomGain(Stage):
    """``wav_mix`` of every mixture of the batch times ``10 ** (g / 20)``, ``g`` uniform in ``gain_db``."""

    name = "gain"
    stream = "gain"

    def __init__(self, seed: int, gain_db: tuple[float, float] = (LOW_DB, HIGH_DB)):
        self.seed = seed
        self.gain_db = gain_db

    def gains(self, state: BatchState) -> np.ndarray:
        """The float32 factor of each mixture of the batch."""
        rng = stage_rng(self.seed, self.name, state.epoch, state.global_batch)
        return (10 ** (rng.uniform(*self.gain_db, len(state.item_ids)) / 20)).astype(np.float32)

    def step(self, state: BatchState) -> None:
        factors = self.gains(state)
        wav_mix = state.audio["wav_mix"]
        for r, row in enumerate(state.rows):
            wav_mix[r] *= factors[row.item]


def gain_stage(builder) -> RandomGain | None:
    """The factory ``register_stage`` takes: the stage in training, none in val and test."""
    return RandomGain(builder.seed, builder.args.stage_arg("gain_db")) if builder.state == "train" else None
