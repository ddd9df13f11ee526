"""``npy/muse_frontend`` (visual cue): a precomputed visual front-end ``[..., T]``, aligned to the audio through its
``duration_sec`` and cut to the row's chunk."""

from __future__ import annotations

import math

import numpy as np

from speechpack.loader.tse.cues.values import ChunkInfo, align_to_duration, crop_by_ratio


def read(bank, item: int, data: np.ndarray) -> tuple[np.ndarray, float]:
    """``(features, duration_sec)`` (a copy)."""
    shape = tuple(int(d) for d in bank.field("shape", item)[:int(bank.field("ndim", item))])
    offset = int(bank.field("offset", item))
    return (np.array(data[offset:offset + math.prod(shape)].reshape(shape)), float(bank.field("duration_sec", item)))


def value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    features, duration = bank.read(item)
    return muse_chunk(features, duration, chunk)


def muse_chunk(features: np.ndarray, duration_sec: float | None, chunk: ChunkInfo) -> np.ndarray:
    """A precomputed visual front-end ``[..., T]`` (ndim >= 2), aligned to the audio and cut to its chunk."""
    features = np.asarray(features, dtype=np.float32)
    if features.ndim < 2:
        raise ValueError(f"a muse_frontend cue needs at least 2 dimensions, got {list(features.shape)}")
    return np.ascontiguousarray(crop_by_ratio(align_to_duration(features, duration_sec, chunk.audio_seconds), chunk))
