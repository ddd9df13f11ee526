"""Kaldi-compatible log-mel filterbanks over a padded batch, in torch (CPU or GPU), as Omnilingual ASR feeds them.

Omnilingual ASR (through fairseq2's ``WaveformToFbankConverter``) computes 80 log-mel bins with kaldi-native-fbank
on the waveform scaled by 2**15, then standardises every bin over the utterance's frames.  This module computes
the same numbers for a whole padded batch at once, so the features can be made where the batch is (a DataLoader
worker, or the GPU):

- frames of 25 ms every 10 ms, ``snip_edges`` (an utterance of ``n`` samples has ``1 + (n - 400) // 160`` frames
  at 16 kHz, none when shorter than one frame);
- per frame: remove the DC offset, pre-emphasis 0.97 (the first sample is scaled by ``1 - 0.97``, Kaldi's rule),
  Povey window (Hann to the power 0.85), zero-padded to the next power of two, power spectrum;
- 80 triangular filters on Kaldi's mel scale ``1127 ln(1 + f / 700)`` from 20 Hz to Nyquist, over the FFT bins
  below Nyquist; the log is floored at float32's machine epsilon (Kaldi's ``use_log_floor``; its
  ``energy_floor`` only concerns the energy coefficient, which fbank does not emit);
- no dither: features are a pure function of the audio, so a batch is the same whichever worker builds it
  (kaldi-native-fbank's default dither of 3e-5 is the only deliberate difference);
- ``standardize``: per utterance and bin, subtract the mean over its frames and divide by the standard deviation
  (unbiased, as ``torch.std_mean``); padded frames are left at zero.  An utterance of one frame, or a bin that is
  constant, is only centred (fairseq2 would divide by zero there).

Everything is computed in the input's floating dtype (float32 normally; tests compare with kaldi-native-fbank).

Waveform processing of ASR batches, in torch over a padded batch: Omnilingual's ``normalize_audio`` (the batch
builder mixes each row to mono, by channel mean, as it reads it: ``loader.asr.task``).

``normalize_rows`` is ``layer_norm`` over each whole utterance, as Omnilingual applies it
(``layer_norm(waveform, waveform.shape)``): subtract the mean, divide by ``sqrt(var + 1e-5)`` with the biased
variance, over the row's valid samples only (padding stays zero and does not count).

SpecAugment (one frequency mask and one time mask per utterance, applied with probability ``spec_aug_p``).

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
import functools
import math

import numpy as np
import torch


#: Mel bins Omnilingual ASR uses.
NUM_MEL_BINS = 80
FRAME_LENGTH_MS = 25
FRAME_SHIFT_MS = 10
PREEMPHASIS = 0.97
#: Exponent of the Povey window (a Hann window raised to it; Kaldi's default window).
POVEY_POWER = 0.85
LOW_FREQ_HZ = 20.0
#: fairseq2's ``waveform_scale``: float audio in [-1, 1) back to the int16 range Kaldi's constants assume.
WAVEFORM_SCALE = 2.0 ** 15
#: Floor of the mel energies before the log (float32 machine epsilon, Kaldi's ``eps``).
LOG_FLOOR = float(np.finfo(np.float32).eps)
#: Frames per FFT call on CPU: the chunk's buffers (about 1 MB each in float32) stay in cache.
CPU_CHUNK_FRAMES = 512


def frame_geometry(sample_rate: int) -> tuple[int, int, int]:
    """(frame length, frame shift, FFT size) in samples at ``sample_rate``."""
    if sample_rate < 100:
        raise ValueError(f"fbank needs a sample rate of at least 100 Hz, got {sample_rate}")
    length = int(sample_rate * FRAME_LENGTH_MS / 1000)
    shift = int(sample_rate * FRAME_SHIFT_MS / 1000)
    return length, shift, 1 << (length - 1).bit_length()


def num_frames(lengths, sample_rate: int):
    """Frames per utterance of ``lengths`` samples (numpy or torch integers; Kaldi's ``snip_edges``)."""
    length, shift, _ = frame_geometry(sample_rate)
    if isinstance(lengths, torch.Tensor):
        return torch.where(lengths >= length, 1 + torch.div(lengths - length, shift, rounding_mode="floor"), 0)
    lengths = np.asarray(lengths, dtype=np.int64)
    return np.where(lengths >= length, 1 + (lengths - length) // shift, 0)


def _mel_scale(freq: np.ndarray) -> np.ndarray:
    return 1127.0 * np.log1p(freq / 700.0)


@functools.lru_cache(maxsize=8)
def mel_weights(sample_rate: int, num_bins: int = NUM_MEL_BINS) -> np.ndarray:
    """Kaldi's triangular filters, ``[num_bins, fft_size // 2]`` float64 (the Nyquist bin gets no weight)."""
    _, _, fft_size = frame_geometry(sample_rate)
    nyquist = sample_rate / 2
    mel_low, mel_high = _mel_scale(np.float64(LOW_FREQ_HZ)), _mel_scale(np.float64(nyquist))
    delta = (mel_high - mel_low) / (num_bins + 1)
    mel = _mel_scale(np.arange(fft_size // 2) * (sample_rate / fft_size))[None, :]
    left = mel_low + delta * np.arange(num_bins)[:, None]
    center, right = left + delta, left + 2 * delta
    rising = (mel - left) / (center - left)
    falling = (right - mel) / (right - center)
    weights = np.where(mel <= center, rising, falling)
    return np.where((mel > left) & (mel < right), weights, 0.0)


@functools.lru_cache(maxsize=8)
def _povey_window(length: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * math.pi * np.arange(length) / (length - 1))) ** POVEY_POWER


def _log_mel(x: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor, frame_len: int, shift: int,
             fft_size: int, scale: float) -> torch.Tensor:
    """Floored log-mel energies of the frames flagged in ``valid`` ``[B, F]`` only: ``[N, bins]``, N the valid
    frames in row-major order (a padded frame's features would be zeroed anyway, and the rows of a padded batch
    differ in length).

    Per frame Kaldi computes ``w * P(x - m)`` (``P``: pre-emphasis with the first sample scaled by ``1 - c``).
    ``P`` is linear and ``P1 = (1 - c) 1``, so this is ``w * (Px - m (1 - c))``: pre-emphasis runs once on the
    whole row instead of once per overlapping frame (a frame's first sample then differs from Kaldi's, but the
    Povey window is exactly 0 there).  On CPU the frames go through the FFT, power and mel projection in chunks of
    ``CPU_CHUNK_FRAMES`` written into one reused, zero-tailed FFT buffer: every temporary then stays in cache, and
    no batch-sized array is allocated (and page-faulted) per step, which halves the time of one big FFT call.
    """
    dtype, device = x.dtype, x.device
    window = torch.as_tensor(_povey_window(frame_len) * scale, dtype=dtype, device=device)
    emphasised = torch.empty_like(x)
    emphasised[:, 1:] = x[:, 1:] - PREEMPHASIS * x[:, :-1]
    emphasised[:, :1] = x[:, :1] * (1 - PREEMPHASIS)
    frames = emphasised.unfold(1, frame_len, shift)  # a view [B, F, L]
    offsets = x.unfold(1, frame_len, shift).mean(dim=-1).mul_(1 - PREEMPHASIS)  # [B, F], a reduction over a view
    rows, cols = valid.nonzero(as_tuple=True)
    total = len(rows)
    chunk = CPU_CHUNK_FRAMES if device.type == "cpu" else max(total, 1)
    buffer = x.new_zeros(min(chunk, max(total, 1)), fft_size)  # columns past frame_len stay zero: the FFT padding
    out = x.new_empty(total, weights.shape[0])
    for lo in range(0, total, chunk):
        r, c = rows[lo:lo + chunk], cols[lo:lo + chunk]
        n = len(r)
        head = buffer[:n, :frame_len]
        torch.sub(frames[r, c], offsets[r, c][:, None], out=head)
        head.mul_(window)
        spectrum = torch.fft.rfft(buffer[:n])[:, :fft_size // 2]
        power = spectrum.real.square().addcmul_(spectrum.imag, spectrum.imag)
        torch.matmul(power, weights.T, out=out[lo:lo + n])
    return torch.log(out.clamp_min_(LOG_FLOOR), out=out)


def fbank(waves: torch.Tensor, lengths: torch.Tensor, sample_rate: int, *, num_bins: int = NUM_MEL_BINS,
          waveform_scale: float = WAVEFORM_SCALE, standardize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-mel features of a padded batch: ``waves`` ``[B, T]`` (float, samples past ``lengths[b]`` ignored) to
    ``([B, F, num_bins], frames [B])`` with ``F`` the most frames of any row; rows past their frames are zero.
    Only the valid frames of the batch are transformed (``_log_mel``)."""
    if waves.ndim != 2 or not waves.is_floating_point():
        raise ValueError(f"fbank expects a [batch, samples] float tensor, got {tuple(waves.shape)} {waves.dtype}")
    lengths = torch.as_tensor(lengths, device=waves.device).to(torch.int64)
    if lengths.shape != waves.shape[:1] or bool((lengths > waves.shape[1]).any()) or bool((lengths < 0).any()):
        raise ValueError(f"lengths {lengths.tolist()} do not fit a batch of shape {tuple(waves.shape)}")
    frame_len, shift, fft_size = frame_geometry(sample_rate)
    frames = num_frames(lengths, sample_rate)
    width = int(frames.max()) if len(frames) else 0
    dtype, device = waves.dtype, waves.device
    if width == 0:
        return waves.new_zeros(waves.shape[0], 0, num_bins), frames
    valid = torch.arange(width, device=device)[None, :] < frames[:, None]  # [B, F]
    weights = torch.as_tensor(mel_weights(sample_rate, num_bins), dtype=dtype, device=device)
    feats = waves.new_zeros(waves.shape[0], width, num_bins)
    feats[valid] = _log_mel(waves[:, :(width - 1) * shift + frame_len], valid, weights, frame_len, shift, fft_size,
                            waveform_scale)
    if standardize:
        feats = standardize_frames(feats, frames)
    return feats, frames


def standardize_frames(feats: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """fairseq2's ``standardize``: per row and bin, zero mean and unit (unbiased) standard deviation over the row's
    valid frames; invalid frames stay zero, and a row of one frame or a constant bin is only centred."""
    width = feats.shape[1]
    valid = (torch.arange(width, device=feats.device)[None, :] < frames[:, None]).unsqueeze(-1)
    count = frames.to(feats.dtype)[:, None, None]
    mean = (feats * valid).sum(dim=1, keepdim=True) / count.clamp_min(1)
    centred = (feats - mean) * valid
    var = centred.square().sum(dim=1, keepdim=True) / (count - 1).clamp_min(1)
    std = torch.sqrt(var)
    std = torch.where((std > 0) & (count > 1), std, torch.ones_like(std))
    return centred / std


#: ``torch.nn.functional.layer_norm``'s default epsilon, which Omnilingual's normalisation inherits.
LAYER_NORM_EPS = 1e-5


def valid_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """``[B, width]`` True on each row's first ``lengths[b]`` positions."""
    return torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]


def normalize_rows(waves: torch.Tensor, lengths: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Zero mean, unit variance per row over its valid samples (module docstring); padding stays zero.  ``out``
    (the shape of ``waves``) receives the result, so a batch can be written straight into its destination."""
    lengths = torch.as_tensor(lengths, device=waves.device)
    valid = valid_mask(lengths, waves.shape[1]).to(waves.dtype)
    count = lengths.to(waves.dtype).clamp_min(1)[:, None]
    mean = (waves * valid).sum(dim=1, keepdim=True) / count
    centred = (waves - mean) * valid
    var = centred.square().sum(dim=1, keepdim=True) / count
    return torch.div(centred, torch.sqrt(var + LAYER_NORM_EPS), out=out)


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


__all__ = ["DRAWS_PER_ROW", "LAYER_NORM_EPS", "LOG_FLOOR", "Masks", "NUM_MEL_BINS", "ROUND_TRIP_FFT", "ROUND_TRIP_HOP",
           "WAVEFORM_SCALE", "draw_masks", "fbank", "frame_geometry", "mask_features", "mel_weights", "normalize_rows",
           "num_frames", "round_trip_frames", "spec_augment_features", "spec_augment_waveforms", "standardize_frames",
           "valid_mask"]
