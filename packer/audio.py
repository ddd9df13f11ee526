"""Audio in, int16 segments out: decode (soundfile, PyAV for what libsndfile cannot read), resample (soxr),
quantise without silent clipping, and measure the statistics the loader normalises with.

Everything here is a pure function of its input, so packs are byte-identical however many processes run it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import soundfile
import soxr

from schemas.constants import AUDIO_DTYPE, AUDIO_FULL_SCALE

#: Largest magnitude an int16 holds on both sides; a peak above it (after rounding) needs a scale factor.
_INT16_MAX = 32767
#: Extensions libsndfile reads; anything else goes to PyAV (m4a, wma, aac, g722, mp4 ...).
_SOUNDFILE_EXTENSIONS = {"." + fmt.lower() for fmt in soundfile.available_formats()} | {".oga", ".opus", ".aif"}


class AudioError(Exception):
    """A file could not be used as audio; the message is the reason, the caller adds line and key."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Audio:
    """Decoded float32 audio, channel-first ``[C, T]``, at ``sample_rate``."""

    data: np.ndarray
    sample_rate: int

    @property
    def channels(self) -> int:
        return self.data.shape[0]

    @property
    def num_frames(self) -> int:
        return self.data.shape[1]


def read_audio(path: str) -> Audio:
    """Decode ``path`` to float32 ``[C, T]``; raise ``AudioError`` for a missing, unreadable or unusable file."""
    if not os.path.exists(path):
        raise AudioError(path, "file not found")
    if not os.path.isfile(path):
        raise AudioError(path, "not a regular file")
    extension = os.path.splitext(path)[1].lower()
    if extension in _SOUNDFILE_EXTENSIONS:
        audio = _read_soundfile(path)
    else:
        audio = _read_pyav(path)
    if audio.num_frames == 0:
        raise AudioError(path, "empty audio (0 samples)")
    if not np.isfinite(audio.data).all():
        bad = int(np.size(audio.data) - np.count_nonzero(np.isfinite(audio.data)))
        raise AudioError(path, f"audio holds {bad} NaN/Inf value(s)")
    return audio


def _read_soundfile(path: str) -> Audio:
    try:
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as err:
        raise AudioError(path, f"cannot decode audio ({err})") from None
    return Audio(np.ascontiguousarray(data.T), int(rate))


def _read_pyav(path: str) -> Audio:
    import av  # imported lazily: most corpora are WAV/FLAC and never need FFmpeg

    planes = []
    try:
        with av.open(path) as container:
            if not container.streams.audio:
                raise AudioError(path, "no audio stream")
            stream = container.streams.audio[0]
            # swresample converts any sample format to float planar with libsndfile's scaling (s16 / 32768).
            to_float = av.AudioResampler(format="fltp")
            for frame in container.decode(stream):
                planes.extend(out.to_ndarray() for out in to_float.resample(frame))
            planes.extend(out.to_ndarray() for out in to_float.resample(None))
            rate = stream.codec_context.sample_rate
    except av.error.FFmpegError as err:
        raise AudioError(path, f"cannot decode audio ({err})") from None
    if not planes:
        raise AudioError(path, "empty audio (0 samples)")
    return Audio(np.ascontiguousarray(np.concatenate(planes, axis=1), dtype=np.float32), int(rate))


def resample(audio: Audio, sample_rate: int) -> Audio:
    """Resample with soxr (HQ) to ``sample_rate``; a no-op when the rate already matches."""
    if audio.sample_rate == sample_rate:
        return audio
    resampled = soxr.resample(audio.data.T, audio.sample_rate, sample_rate)
    return Audio(np.ascontiguousarray(resampled.T, dtype=np.float32), sample_rate)


@dataclass(frozen=True)
class Segment:
    """One stored audio segment: int16 ``[C, T]``, its decode scale and its statistics."""

    data: np.ndarray
    scale: float
    mean: float
    rms: float
    peak: float

    @property
    def channels(self) -> int:
        return self.data.shape[0]

    @property
    def length(self) -> int:
        return self.data.shape[1]


def to_segment(data: np.ndarray) -> Segment:
    """Quantise float ``[C, T]`` audio to int16 with no silent clipping, and measure it as the reader will."""
    quantised, scale = quantise(data)
    mean, rms, peak = int16_statistics(quantised, scale)
    return Segment(data=quantised, scale=scale, mean=mean, rms=rms, peak=peak)


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
    else:
        scaled = data * np.float32(AUDIO_FULL_SCALE)
    quantised = np.clip(np.rint(scaled), -AUDIO_FULL_SCALE, _INT16_MAX).astype(AUDIO_DTYPE)
    return np.ascontiguousarray(quantised), scale


def int16_statistics(stored: np.ndarray, scale: float) -> tuple[float, float, float]:
    """``(mean, rms, peak)`` of the decoded audio ``stored / 32768 * scale``; rms and peak after DC removal.

    Sums are exact integers, so the result does not depend on summation order, BLAS or the machine: the
    validator recomputes it and must get the same floats.
    """
    n = int(stored.size)
    if n == 0:
        return 0.0, 0.0, 0.0
    flat = stored.reshape(-1)
    total = 0
    total_sq = 0
    for start in range(0, n, 1 << 20):  # int64 squares, a chunk at a time, keep memory flat
        chunk = flat[start:start + (1 << 20)].astype(np.int64)
        total += int(chunk.sum())
        total_sq += int(np.dot(chunk, chunk))
    unit = scale / AUDIO_FULL_SCALE
    mean_int = total / n
    variance_int = (n * total_sq - total * total) / (n * n)  # exact numerator, one rounding
    peak_int = max(float(flat.max()) - mean_int, mean_int - float(flat.min()))
    return mean_int * unit, float(np.sqrt(max(variance_int, 0.0))) * unit, peak_int * unit


def decode_segment(stored: np.ndarray, scale: float) -> np.ndarray:
    """Reader side of :func:`quantise`: int16 to float32 in [-scale, scale)."""
    return stored.astype(np.float32) * np.float32(scale / AUDIO_FULL_SCALE)
