"""``wav/waveform`` (audio cue): an enrollment recording, float32 ``[C, T]`` at the loader's rate, never chunked.

The bank stores int16 at the pack's rate with a per-item scale (``packer/cues/waveform.py``); a loader at another
rate resamples with soxr.
"""

from __future__ import annotations

import numpy as np
import soxr

from speechpack.loader.tse.cues.values import ChunkInfo
from speechpack.schemas.constants import AUDIO_FULL_SCALE


def read(bank, item: int, data: np.ndarray) -> np.ndarray:
    """The item's audio, float32 ``[C, T]`` at the bank's rate (a copy)."""
    offset, channels, length = (int(bank.field(n, item)) for n in ("offset", "channels", "length"))
    factor = np.float32(float(bank.field("scale", item)) / AUDIO_FULL_SCALE)
    return data[offset:offset + channels * length].reshape(channels, length).astype(np.float32) * factor


def value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    audio = bank.read(item)
    if bank.sample_rate != chunk.rate:
        audio = np.ascontiguousarray(soxr.resample(np.ascontiguousarray(audio.T, dtype=np.float32),
                                                   bank.sample_rate, chunk.rate).T)
    return np.asarray(audio, dtype=np.float32)
