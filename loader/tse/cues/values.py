"""Time-varying cues follow the row's audio chunk (WeSep's ``chunk_ratio``): what every temporal representation
shares.  The audio lasts ``orig_len / rate`` seconds; a cue lasting ``duration_sec`` is first aligned to it
(cropped, or edge-padded), then cut at ``int(start_ratio * N) : int(end_ratio * N)`` (edge-padded past the end).
Pure functions, tested on plain arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: WeSep's minimum window for a chunk with ``end <= start`` (``_chunk_time_window``): one 25 fps frame.
MIN_WINDOW_SECONDS = 1.0 / 25.0


@dataclass(frozen=True)
class ChunkInfo:
    """Where a row's audio comes from (WeSep's ``chunk_ratio``) and the loader's rate."""

    start_ratio: float
    end_ratio: float
    orig_len: int
    rate: int

    @property
    def audio_seconds(self) -> float:
        return self.orig_len / self.rate


def edge_pad_last(x: np.ndarray, length: int) -> np.ndarray:
    """``x`` cropped to ``length`` on its last axis, or right-padded by repeating its last value."""
    current = x.shape[-1]
    if current >= length:
        return x[..., :length]
    return np.concatenate([x, np.repeat(x[..., -1:], length - current, axis=-1)], axis=-1)


def align_to_duration(x: np.ndarray, duration_sec: float | None, audio_seconds: float) -> np.ndarray:
    """A temporal cue ``[..., N]`` lasting ``duration_sec`` matched to the audio: ``round(audio * N / duration)``
    frames (a prefix, or edge-padded).  Without a duration the cue is taken as it is."""
    if x.shape[-1] <= 0:
        raise ValueError("a temporal cue needs a non-empty last dimension")
    if duration_sec is None or np.isnan(float(duration_sec)):  # a bank stores "no duration" as NaN
        return x
    if duration_sec <= 0:
        raise ValueError(f"duration_sec must be positive, got {duration_sec}")
    target = int(round(audio_seconds * x.shape[-1] / float(duration_sec)))
    if target <= 0:
        raise ValueError(f"the aligned temporal length must be positive, got {target}")
    return edge_pad_last(x, target)


def crop_by_ratio(x: np.ndarray, chunk: ChunkInfo) -> np.ndarray:
    """The chunk's part of a duration-aligned cue ``[..., N]``: ``int(start * N) : int(end * N)``, at least one
    frame, edge-padded when the chunk runs past the end (``end_ratio > 1``)."""
    frames = x.shape[-1]
    start = int(chunk.start_ratio * frames)
    end = int(chunk.end_ratio * frames)
    start = max(0, min(start, frames))
    crop_end = max(start + 1, min(end, frames))
    out = x[..., start:crop_end]
    if end > frames:
        out = np.concatenate([out, np.repeat(out[..., -1:], end - frames, axis=-1)], axis=-1)
    return out


__all__ = ["ChunkInfo", "MIN_WINDOW_SECONDS", "align_to_duration", "crop_by_ratio", "edge_pad_last"]
