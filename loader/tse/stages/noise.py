"""Stage ``noise``: WeSep's ``add_noise`` on pre-mixed training batches: per mixture, with ``noise_prob``, noise
over its chunk (``window.length``, padding included, as WeSep adds it after chunking) in every row of that
mixture; the targets are untouched.  (Online mixtures get their noise while mixing, ``online_mix``.)

Draws: ``items x NOISE_DRAWS`` uniforms from the batch's augmentation stream (``loader.rng.augment_rng``,
positions ``0 ..``).
"""

from __future__ import annotations

from speechpack.loader.rng import augment_rng
from speechpack.loader.tse.augment import NOISE_DRAWS, NoiseSource, noisy_mixture
from speechpack.loader.tse.stages.protocol import BatchState, Stage


class OfflineNoise(Stage):
    """Noise over pre-mixed mixtures (module docstring)."""

    name = "noise"
    stream = "augment"
    keys = ("augment",)

    def __init__(self, seed: int, source: NoiseSource, prob: float, rate: int):
        self.seed, self.source, self.prob, self.rate = seed, source, prob, rate

    def step(self, state: BatchState) -> None:
        draws = augment_rng(self.seed, state.epoch, state.global_batch).random((len(state.item_ids), NOISE_DRAWS))
        rows, wav_mix = state.rows, state.audio["wav_mix"]
        first: dict[int, int] = {}
        for r, row in enumerate(rows):
            first.setdefault(row.item, r)
        for item, r in first.items():
            length = min(rows[r].window.length, wav_mix.shape[-1])
            noisy = noisy_mixture(wav_mix[r, :, :length], draws[item], self.source, self.prob, self.rate)
            if noisy is not None:
                for s, row in enumerate(rows):
                    if row.item == item:
                        wav_mix[s, :, :length] = noisy


__all__ = ["OfflineNoise"]
