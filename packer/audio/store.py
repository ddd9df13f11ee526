"""Audio as a pack stores it: resampled to the pack's rate (soxr), quantised to int16 without silent clipping,
and measured (the statistics the loader normalises with, which the validator recomputes).

Everything here is a pure function of its input, so packs are byte-identical however many processes run it.
Resampling's output length is known from the rates alone (:func:`resampled_length`), so a build plans its shards
from headers before decoding anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import numpy as np
import soxr

from speechpack.packer.audio.decode import Audio, AudioError
from speechpack.schemas.constants import AUDIO_DTYPE, AUDIO_FULL_SCALE
from speechpack.schemas.errors import InternalError, SpeechpackError
from speechpack.schemas.units import resample_ratio_problem

#: Largest magnitude an int16 holds on both sides; a peak above it (after rounding) needs a scale factor.
_INT16_MAX = 32767


def resampled_length(frames: int, rate: int, new_rate: int) -> int:
    """Frames soxr returns when resampling ``frames`` from ``rate`` to ``new_rate``: ``frames * new_rate /
    rate`` rounded half up, in exact integer arithmetic (checked against soxr for many lengths and rate pairs)."""
    if rate == new_rate:
        return frames
    return (2 * frames * new_rate + rate) // (2 * rate)


def resampled_frames(frames: int, rate: int, new_rate: int, name: str | None) -> int:
    """:func:`resampled_length` of the file ``name``, which the pack can hold: ``AudioError`` when resampling
    would leave no frame at all (one sample at 48 kHz is none at 16 kHz), or when the two rates are too far apart
    for soxr (:func:`resample_ratio_problem`).  The one check every adapter's plan makes."""
    reason = resample_ratio_problem(rate, new_rate)
    if reason is not None:
        raise AudioError(name, reason)
    length = resampled_length(frames, rate, new_rate)
    if length == 0:
        raise AudioError(name, f"empty after resampling: {frames} sample(s) at {rate} Hz are 0 at {new_rate} Hz")
    return length


def resample(audio: Audio, sample_rate: int) -> Audio:
    """Resample float audio with soxr (HQ) to ``sample_rate``; a no-op when the rate already matches.  Raise
    ``SpeechpackError`` for a pair of rates soxr must not be given (:func:`resample_ratio_problem`)."""
    if audio.sample_rate == sample_rate:
        return audio
    if audio.data.dtype != np.float32:
        raise InternalError(f"resample expects float32 audio, got {audio.data.dtype}")
    reason = resample_ratio_problem(audio.sample_rate, sample_rate)
    if reason is not None:
        raise SpeechpackError(reason)
    resampled = soxr.resample(audio.data.T, audio.sample_rate, sample_rate)
    return Audio(np.ascontiguousarray(resampled.T, dtype=np.float32), sample_rate)


@dataclass(frozen=True)
class StoredAudio:
    """Audio as it will be stored: int16 ``[C, T]`` and the scale that decodes it (``v / 32768 * scale``).

    ``stats`` is :func:`int16_statistics` of it once measured (:func:`measured`): a build measures each segment
    where it was decoded, so that the work runs in the decoding processes, beside decoding, rather than in the
    one thread that writes; the writer measures a segment that comes without."""

    data: np.ndarray
    scale: float
    stats: tuple[float, float, float] | None = None

    @property
    def channels(self) -> int:
        return self.data.shape[0]

    @property
    def length(self) -> int:
        return self.data.shape[1]

    @property
    def rows(self) -> int:
        """Elements of its stream file: ``channels * length``."""
        return int(self.data.size)


def measured(stored: StoredAudio) -> StoredAudio:
    """``stored`` with its :func:`int16_statistics` (the same object when it has them already)."""
    if stored.stats is not None:
        return stored
    return replace(stored, stats=int16_statistics(stored.data, stored.scale))


def to_stored(audio: Audio) -> StoredAudio:
    """int16 audio passes through (bit-exact, scale 1); float audio is quantised with :func:`quantise`."""
    if audio.data.dtype == AUDIO_DTYPE:
        return StoredAudio(np.ascontiguousarray(audio.data), 1.0)
    return StoredAudio(*quantise(audio.data))


def quantise(data: np.ndarray) -> tuple[np.ndarray, float]:
    """Round ``data * 32768`` to int16.  If the peak would not fit, divide by the smallest scale that fits it.

    int16 input read by soundfile round-trips bit-exactly (scale 1.0).  Audio that a resampler pushed past full
    scale, or float audio above 1.0, keeps its shape: the returned ``scale`` undoes the division on read.
    """
    high = float(data.max()) if data.size else 0.0
    low = float(data.min()) if data.size else 0.0
    scale = 1.0
    # int16 is asymmetric: -32768 fits, +32768 does not; rescale only when a side would really clip.
    if round(high * AUDIO_FULL_SCALE) > _INT16_MAX or round(low * AUDIO_FULL_SCALE) < -AUDIO_FULL_SCALE:
        scale = max(high * AUDIO_FULL_SCALE / _INT16_MAX, -low)
        scaled = data.astype(np.float64) * (AUDIO_FULL_SCALE / scale)
        quantised = np.clip(np.rint(scaled), -AUDIO_FULL_SCALE, _INT16_MAX).astype(AUDIO_DTYPE)
        return np.ascontiguousarray(quantised), scale
    # The range test above guarantees every rounded value fits: no clip pass, one rounding pass into int16.
    quantised = np.empty(data.shape, dtype=AUDIO_DTYPE)
    np.rint(data * np.float32(AUDIO_FULL_SCALE), out=quantised, casting="unsafe")
    return quantised, scale


#: Samples per chunk in :func:`int16_statistics`.  At most 2**22 squares of int16 values (each at most 2**30)
#: sum to at most 2**52, so every partial sum of a float64 reduction over a chunk is an exact integer, in any
#: summation order; 2**20 keeps the scratch buffer (8 MB) in cache.
_EXACT_CHUNK = 1 << 20
_scratch = threading.local()


def _scratch_buffer() -> np.ndarray:
    """A float64 buffer reused by each thread: a fresh 8 MB array per call costs more in page faults (and in
    contention for the process's memory map, with the writer thread and the decoder faulting at once) than the
    arithmetic does."""
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None:
        buffer = _scratch.buffer = np.empty(_EXACT_CHUNK, dtype=np.float64)
    return buffer


def int16_statistics(stored: np.ndarray, scale: float) -> tuple[float, float, float]:
    """``(mean, rms, peak)`` of the decoded audio ``stored / 32768 * scale``; rms and peak after DC removal.

    The sums are exact integers (float64 reductions over chunks small enough that no partial sum can round), so
    the result does not depend on summation order or the machine: the validator recomputes it and must get the
    same floats.  ``einsum`` rather than ``dot``: BLAS would start threads that compete with the decoder.
    """
    n = int(stored.size)
    if n == 0:
        return 0.0, 0.0, 0.0
    flat = stored.reshape(-1)
    buffer = _scratch_buffer()
    total = 0
    total_sq = 0
    for start in range(0, n, _EXACT_CHUNK):
        piece = flat[start:start + _EXACT_CHUNK]
        chunk = buffer[:piece.size]
        np.copyto(chunk, piece, casting="safe")
        total += int(chunk.sum())
        total_sq += int(np.einsum("i,i->", chunk, chunk))
    unit = scale / AUDIO_FULL_SCALE
    mean_int = total / n
    variance_int = (n * total_sq - total * total) / (n * n)  # exact numerator, one rounding
    peak_int = max(float(flat.max()) - mean_int, mean_int - float(flat.min()))
    return mean_int * unit, float(np.sqrt(max(variance_int, 0.0))) * unit, peak_int * unit


__all__ = ["StoredAudio", "int16_statistics", "measured", "quantise", "resample", "resampled_frames",
           "resampled_length", "to_stored"]
