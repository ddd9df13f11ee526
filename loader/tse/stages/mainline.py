"""Stage ``mainline``: the batch of mainline WeSep's ``tse_collate_fn`` made from the contract batch (a mainline
recipe only; ``loader.tse.mainline`` says what each key holds): ``wav_mix``, ``wav_targets`` (channel 0),
``spk_embeds`` (the audio cue's rows as mainline's ``sample_*`` and ``compute_fbank``/``apply_cmvn`` leave them,
cut to the shortest row), ``length_spk_embeds``, ``spk``, ``key``, ``spk_label``; the contract's keys stay beside
them with ``contract_keys``.

Draws: the enrollment fbank's dither, from the batch's dither stream (``loader.rng.dither_rng``; train only).
"""

from __future__ import annotations

import numpy as np

from speechpack.loader.config_checks import ConfigError
from speechpack.loader.rng import dither_rng
from speechpack.loader.tse.mainline import WAVEFORM_SCALE, MainlineArgs, kaldi_fbank
from speechpack.loader.tse.stages.protocol import BatchState, Stage


class MainlineCollate(Stage):
    """Mainline's batch from the contract's (module docstring); refuses packs without the enrollment cue the
    recipe's ``joint_training`` reads."""

    name = "mainline"
    stream = "dither"
    keys = ("mainline",)

    def __init__(self, args: MainlineArgs, cues: list, state: str, seed: int, rate: int):
        self.mainline, self.state, self.seed, self.rate = args, state, seed, rate
        audio = [cue for cue in cues if cue.field.name == "audio_aux"]
        if not audio:
            raise ConfigError("a mainline WeSep recipe needs packs with an enrollment cue: build them with "
                              "`speechpack build wesep --enroll spk2enroll.json` (or --fixed-enroll, --spk-embeds)")
        wanted = "waveform" if args.joint_training else "spk_embedding"
        if audio[0].representation != wanted:
            raise ConfigError(f"model_args.tse_model.joint_training: {str(args.joint_training).lower()} reads "
                              f"{'enrollment audio' if args.joint_training else 'speaker embeddings'}, but the "
                              f"packs' audio cue holds {audio[0].representation}: build them with "
                              f"{'--enroll' if args.joint_training else '--spk-embeds'}")

    def step(self, state: BatchState) -> None:
        batch = state.batch
        rows = batch.pop("audio_aux_rows")
        mainline = self.mainline
        if mainline.joint_training:
            values = [np.asarray(v[0], dtype=np.float32) for v in rows]  # channel 0: mainline reads mono files
            if mainline.speaker_feat:
                rng = dither_rng(self.seed, state.epoch, state.global_batch) if self.state == "train" else None
                feats = [kaldi_fbank(v * np.float32(WAVEFORM_SCALE), self.rate, mainline, rng) for v in values]
                values = [f - f.mean(axis=0, keepdims=True) if len(f) else f for f in feats]
        else:
            values = [np.asarray(v, dtype=np.float32).reshape(-1) for v in rows]
        lengths = [len(v) for v in values]
        shortest = min(lengths)
        out = dict(batch) if mainline.contract_keys else {}
        out["wav_mix"] = np.ascontiguousarray(batch["wav_mix"][:, 0])
        out["wav_targets"] = np.ascontiguousarray(batch["wav_target"][:, 0])
        out["spk_embeds"] = np.stack([v[:shortest] for v in values])
        out["length_spk_embeds"] = lengths
        out["spk"], out["key"] = batch["spk"], batch["key"]
        if mainline.multi_task and self.state == "train":
            out["spk_label"] = np.asarray(batch["speaker_label"], dtype=np.int64)
        else:
            out["spk_label"] = np.zeros(0, dtype=np.float32)
        state.batch = out


__all__ = ["MainlineCollate"]
