"""``npy/spk_embedding`` (audio cue): a speaker embedding, float32 ``[D]`` (WeSep's rule: ``[1, D]`` is squeezed,
any other rank refused)."""

from __future__ import annotations

import numpy as np

from speechpack.loader.tse.cues.values import ChunkInfo


def read(bank, item: int, data: np.ndarray) -> np.ndarray:
    return np.array(data[int(bank.field("row", item))])


def value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    return embedding(bank.read(item))


def embedding(value: np.ndarray) -> np.ndarray:
    """A speaker embedding as float32 ``[D]`` (``[1, D]`` is squeezed; any other rank is an error)."""
    value = np.asarray(value, dtype=np.float32)
    if value.ndim == 2 and value.shape[0] == 1:
        value = value[0]
    if value.ndim != 1:
        raise ValueError(f"speaker embedding must be [D] or [1, D], got {list(value.shape)}")
    return value
