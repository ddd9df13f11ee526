"""SpecAugment (one frequency mask and one time mask per utterance, applied with probability ``spec_aug_p``).

Where the masks go depends on what the model reads:

- ``use_fbank``: on the standardised log-mel features themselves, the usual SpecAugment.  Masked cells are set
  to zero, which after standardisation is the utterance's mean: the mask carries no energy and no bias.
- raw waveforms (Omnilingual ASR's wav2vec2-style models): as Omnilingual describes, on a complex spectrogram
  that is turned back into a waveform: ``torch.stft`` with a 400-point FFT (25 ms at 16 kHz), a Hann window and a
  hop of half the window, masked cells set to zero, then ``torch.istft`` to the original length.  An unmasked
  utterance is returned unchanged (it is not sent through the round trip at all), and so is one of at most 200
  samples (the STFT's reflect padding needs more).

The draws follow torchaudio's ``mask_along_axis``: width ``floor(u * param)``, start ``floor(v * (size - width))``
with ``u, v`` uniform, so a mask is at most ``param - 1`` wide and always inside the utterance's valid frames;
``param`` larger than the axis is clamped to it.  Every draw comes from the numpy generator passed in (the batch's
counter-based ``loader.rng.batch_rng``): five per utterance, in row order, whether it is masked or not, so one
row's draws never depend on another row's length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

#: FFT size of the waveform round trip (torchaudio's ``Spectrogram`` default, which Omnilingual uses).
ROUND_TRIP_FFT = 400
ROUND_TRIP_HOP = ROUND_TRIP_FFT // 2
#: Uniform draws per utterance: apply?, frequency width, frequency start, time width, time start.
DRAWS_PER_ROW = 5


@dataclass(frozen=True)
class Masks:
    """Per row: whether it is masked, and its masks as ``[start, stop)`` bins and frames (empty when width 0)."""

    applied: np.ndarray
    freq_start: np.ndarray
    freq_stop: np.ndarray
    time_start: np.ndarray
    time_stop: np.ndarray


def draw_masks(rng: np.random.Generator, frames: np.ndarray, num_bins: int, p: float, freq_param: int,
               time_param: int) -> Masks:
    """One frequency and one time mask per row of ``frames`` valid frames (see the module docstring)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"spec_aug_p must be in [0, 1], got {p}")
    if freq_param < 0 or time_param < 0:
        raise ValueError(f"SpecAugment mask parameters must be non-negative, got {freq_param} and {time_param}")
    frames = np.asarray(frames, dtype=np.int64)
    u = rng.random((len(frames), DRAWS_PER_ROW))
    applied = u[:, 0] < p
    freq_width = np.floor(u[:, 1] * min(freq_param, num_bins)).astype(np.int64)
    freq_start = np.floor(u[:, 2] * (num_bins - freq_width)).astype(np.int64)
    time_width = np.floor(u[:, 3] * np.minimum(time_param, frames)).astype(np.int64)
    time_start = np.floor(u[:, 4] * (frames - time_width)).astype(np.int64)
    return Masks(applied, freq_start, freq_start + freq_width, time_start, time_start + time_width)


def mask_features(feats: torch.Tensor, masks: Masks) -> torch.Tensor:
    """Zero the masked cells of ``feats`` ``[B, F, bins]`` (a new tensor; rows not applied are untouched)."""
    keep = _keep(masks, feats.shape[1], feats.shape[2], feats.device)
    return feats * keep.to(feats.dtype)


def _keep(masks: Masks, width: int, bins: int, device) -> torch.Tensor:
    """``[B, width, bins]`` boolean: False on masked cells of applied rows."""
    t = torch.arange(width, device=device)[None, :]
    f = torch.arange(bins, device=device)[None, :]

    def col(a):
        return torch.as_tensor(a, device=device)[:, None]

    in_time = (t >= col(masks.time_start)) & (t < col(masks.time_stop))
    in_freq = (f >= col(masks.freq_start)) & (f < col(masks.freq_stop))
    masked = (in_time[:, :, None] | in_freq[:, None, :]) & col(masks.applied)[:, :, None]
    return ~masked


def spec_augment_features(feats: torch.Tensor, frames: np.ndarray, rng: np.random.Generator, p: float,
                          freq_param: int, time_param: int) -> tuple[torch.Tensor, Masks]:
    """SpecAugment on fbank features ``[B, F, bins]`` with ``frames`` valid frames per row."""
    masks = draw_masks(rng, frames, feats.shape[2], p, freq_param, time_param)
    return mask_features(feats, masks), masks


def round_trip_frames(lengths: np.ndarray) -> np.ndarray:
    """STFT frames of each row in the round trip (``center=True``: ``1 + n // hop``; none for an empty row)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.where(lengths > 0, 1 + lengths // ROUND_TRIP_HOP, 0)


def spec_augment_waveforms(waves: torch.Tensor, lengths: np.ndarray, rng: np.random.Generator, p: float,
                           freq_param: int, time_param: int) -> tuple[torch.Tensor, Masks]:
    """SpecAugment on raw waveforms ``[B, T]`` through an STFT round trip (module docstring); samples past each
    row's length stay zero."""
    lengths = np.asarray(lengths, dtype=np.int64)
    bins = ROUND_TRIP_FFT // 2 + 1
    masks = draw_masks(rng, round_trip_frames(lengths), bins, p, freq_param, time_param)
    # The STFT's reflect padding needs more than fft/2 samples: shorter rows are left as they are.
    masks = replace(masks, applied=masks.applied & (lengths > ROUND_TRIP_FFT // 2))
    rows = np.flatnonzero(masks.applied)
    if not len(rows):
        return waves, masks
    out = waves.clone()
    window = torch.hann_window(ROUND_TRIP_FFT, dtype=waves.dtype, device=waves.device)
    for row in rows.tolist():  # rows differ in length: each is transformed on its own valid samples
        n = int(lengths[row])
        spec = torch.stft(waves[row, :n], ROUND_TRIP_FFT, ROUND_TRIP_HOP, window=window, center=True,
                          return_complex=True)  # [bins, frames]
        one = Masks(*(np.asarray(a[row:row + 1]) for a in (masks.applied, masks.freq_start, masks.freq_stop,
                                                            masks.time_start, masks.time_stop)))
        keep = _keep(one, spec.shape[1], spec.shape[0], waves.device)[0].T  # [bins, frames]
        out[row, :n] = torch.istft(spec * keep, ROUND_TRIP_FFT, ROUND_TRIP_HOP, window=window, center=True,
                                   length=n)
    return out, masks


__all__ = ["DRAWS_PER_ROW", "Masks", "ROUND_TRIP_FFT", "ROUND_TRIP_HOP", "draw_masks", "mask_features",
           "round_trip_frames", "spec_augment_features", "spec_augment_waveforms"]
