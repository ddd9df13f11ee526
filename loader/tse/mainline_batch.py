"""The batch of mainline WeSep's ``tse_collate_fn`` (github.com/wenet-e2e/wesep, ``wesep/dataset/dataset.py``), so
its ``train.py`` loop runs unchanged on a speechpack loader (docs/wesep.md, "Coming from mainline WeSep").

``MainlineBatchBuilder`` wraps the TSE builder (same plan, rows, draws) and renames and reshapes its batch:

- ``wav_mix``, ``wav_targets``: ``[rows, T]`` float32, one row per (mixture, target), the first channel (mainline's
  chunking keeps channel 0);
- ``spk_embeds``: the audio cue of each row as mainline's ``sample_*`` and ``compute_fbank``/``apply_cmvn`` leave
  it, cut to the shortest row of the batch (its ``mode="min"``): ``[rows, D]`` embeddings, ``[rows, L]``
  enrollment waveforms, or ``[rows, frames, num_mel_bins]`` Kaldi fbank of the enrollment scaled by 2**15 with
  the enrollment's mean removed (``speaker_feat``);
- ``length_spk_embeds``: each row's length before the cut (a list, as mainline gives it);
- ``spk``, ``key``: lists; ``spk_label``: the speaker's index in ``spk2enroll.json`` order in training with
  ``multi_task``, else an empty tensor (mainline's val set has no labels).

The contract names stay: ``wav_target``, ``audio_aux``, ``speaker_label``, ``valid``, ``lengths`` and the rest
(``wav_mix`` is mainline's).  Dither noise is drawn from a generator keyed by (seed, epoch, batch), so a batch is the
same with any number of workers; val has no dither (mainline dithers val enrollments too).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from speechpack.loader.config_checks import ConfigError
from speechpack.loader.tse.mainline import MainlineArgs

#: Kaldi's defaults that mainline's ``compute_fbank`` keeps (``torchaudio.compliance.kaldi.fbank``).
PREEMPHASIS = 0.97
LOW_FREQ = 20.0
WAVEFORM_SCALE = 1 << 15
#: Word of the dither generator's counter (the other streams use theirs: ``loader.tse.streams``).
DITHER_STREAM_WORD = 0x6D61696E


def _mel(freq):
    return 1127.0 * np.log(1.0 + np.asarray(freq, dtype=np.float64) / 700.0)


@functools.lru_cache(maxsize=8)
def mel_banks(num_bins: int, fft_size: int, sample_rate: int) -> np.ndarray:
    """Kaldi's triangular mel filters ``[num_bins, fft_size // 2]`` from 20 Hz to Nyquist (no VTLN)."""
    low, high = _mel(LOW_FREQ), _mel(sample_rate / 2)
    delta = (high - low) / (num_bins + 1)
    left = low + np.arange(num_bins)[:, None] * delta
    center, right = left + delta, left + 2 * delta
    mel = _mel(sample_rate / fft_size * np.arange(fft_size // 2))[None, :]
    up, down = (mel - left) / (center - left), (right - mel) / (right - center)
    return np.maximum(0.0, np.minimum(up, down)).astype(np.float32)


def kaldi_fbank(wave: np.ndarray, sample_rate: int, args: MainlineArgs, rng: np.random.Generator | None) -> np.ndarray:
    """``[frames, num_mel_bins]`` log-mel energies of ``wave`` (float, already scaled by 2**15) with Kaldi's
    options as mainline passes them: hamming window, ``snip_edges``, DC removal, pre-emphasis 0.97, power
    spectrum, no energy, log floored at float32's epsilon; ``dither`` Gaussian noise per frame from ``rng``."""
    length = int(sample_rate * args.frame_length * 0.001)
    shift = int(sample_rate * args.frame_shift * 0.001)
    if length < 2 or shift < 1 or len(wave) < length:
        return np.zeros((0, args.num_mel_bins), dtype=np.float32)
    count = 1 + (len(wave) - length) // shift
    frames = np.lib.stride_tricks.sliding_window_view(wave.astype(np.float32), length)[::shift][:count].copy()
    if args.dither and rng is not None:
        frames += np.float32(args.dither) * rng.standard_normal(frames.shape, dtype=np.float32)
    frames -= frames.mean(axis=1, keepdims=True)
    previous = np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    frames -= np.float32(PREEMPHASIS) * previous
    frames *= np.hamming(length).astype(np.float32)
    fft_size = 1 << math.ceil(math.log2(length))
    spectrum = np.fft.rfft(frames, n=fft_size, axis=1)[:, :fft_size // 2]
    power = (spectrum.real ** 2 + spectrum.imag ** 2).astype(np.float32)
    energies = power @ mel_banks(args.num_mel_bins, fft_size, sample_rate).T
    return np.log(np.maximum(energies, np.finfo(np.float32).eps)).astype(np.float32)


def dither_rng(seed: int, epoch: int, global_batch: int) -> np.random.Generator:
    counter = np.array([0, DITHER_STREAM_WORD, global_batch + 1, epoch], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=seed, counter=counter))


class MainlineBatchBuilder:
    """The TSE builder, its batches in mainline's collate shape (module docstring)."""

    def __init__(self, inner, args: MainlineArgs, state: str, seed: int):
        self.inner, self.mainline, self.state, self.seed = inner, args, state, seed
        cues = [cue for cue in inner.cues if cue.field.name == "audio_aux"]
        if not cues:
            raise ConfigError("a mainline WeSep recipe needs packs with an enrollment cue: build them with "
                              "`speechpack build wesep --enroll spk2enroll.json` (or --fixed-enroll, --spk-embeds)")
        wanted = "waveform" if args.joint_training else "spk_embedding"
        if cues[0].representation != wanted:
            raise ConfigError(f"model_args.tse_model.joint_training: {str(args.joint_training).lower()} reads "
                              f"{'enrollment audio' if args.joint_training else 'speaker embeddings'}, but the "
                              f"packs' audio cue holds {cues[0].representation}: build them with "
                              f"{'--enroll' if args.joint_training else '--spk-embeds'}")

    def __getattr__(self, name):  # args, windows, packs, items, num_units, unit_lengths, ...
        if name == "inner":  # not set yet (unpickling in a spawned worker): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def build(self, item_ids: np.ndarray, valid: np.ndarray, epoch: int, global_batch: int) -> dict:
        return self._mainline(self.inner.build(item_ids, valid, epoch, global_batch), epoch, global_batch)

    def build_block(self, batches):
        for batch, (_, _, epoch, global_batch) in zip(self.inner.build_block(batches), batches):
            yield self._mainline(batch, epoch, global_batch)

    def _mainline(self, batch: dict, epoch: int, global_batch: int) -> dict:
        rows = batch.pop("audio_aux_rows")
        rate = self.inner.rate
        if self.mainline.joint_training:
            values = [np.asarray(v[0], dtype=np.float32) for v in rows]  # channel 0: mainline reads mono files
            if self.mainline.speaker_feat:
                rng = dither_rng(self.seed, epoch, global_batch) if self.state == "train" else None
                feats = [kaldi_fbank(v * np.float32(WAVEFORM_SCALE), rate, self.mainline, rng) for v in values]
                values = [f - f.mean(axis=0, keepdims=True) if len(f) else f for f in feats]
        else:
            values = [np.asarray(v, dtype=np.float32).reshape(-1) for v in rows]
        lengths = [len(v) for v in values]
        shortest = min(lengths)
        out = dict(batch)
        out["wav_mix"] = np.ascontiguousarray(batch["wav_mix"][:, 0])
        out["wav_targets"] = np.ascontiguousarray(batch["wav_target"][:, 0])
        out["spk_embeds"] = np.stack([v[:shortest] for v in values])
        out["length_spk_embeds"] = lengths
        if self.mainline.multi_task and self.state == "train":
            out["spk_label"] = np.asarray(batch["speaker_label"], dtype=np.int64)
        else:
            out["spk_label"] = np.zeros(0, dtype=np.float32)
        return out


__all__ = ["MainlineBatchBuilder", "kaldi_fbank", "mel_banks"]
