"""Stage ``online_mix``: training mixtures made from sources packs, in place of ``windows`` and ``decode``
(``loader.tse.online.OnlineMixer``: windows, decoding through the one decode path, reverberation, noise, the SNR
mix).  Draws: one stream per batch position (``loader.rng.item_rng``), and rooms keyed by one of its draws.  With
``augment_on: batch`` the records that make the audio take its place until ``augment_batch``.
"""

from __future__ import annotations

from speechpack.loader.tse.online import OnlineMixer
from speechpack.loader.tse.stages.protocol import BatchState, Stage


class OnlineMix(Stage):
    """One mixture per planned source (module docstring)."""

    name = "online_mix"
    stream = "item"
    keys = ("resample_rate", "normalize", "align", "whole_utt", "chunk_len", "chunk_random_start",
            "chunk_short_policy", "mix", "augment")

    def __init__(self, mixer: OnlineMixer):
        self.mixer = mixer

    def step(self, state: BatchState) -> None:
        mixed = self.mixer.build(state.units, state.epoch, state.global_batch, state.arrays)
        if mixed.records is not None:  # augment_on: batch: the records take the audio's place until augment_batch
            state.audio, state.target_len = mixed.records, int(mixed.records["aug_out_len"][1])
        else:
            state.audio = {"wav_mix": mixed.wav_mix, "wav_target": mixed.wav_target}
            state.target_len = mixed.wav_target.shape[-1]
        state.item_ids, state.rows, state.real = state.units, mixed.rows, mixed.real
        state.chunk_ratio, state.source_keys = mixed.chunk_ratio, mixed.source_keys
        state.extra["timeline"] = mixed.timeline
        state.extra["overlap_ratio_2spk"] = mixed.overlap_ratio_2spk


__all__ = ["OnlineMix"]
