"""``mp4/raw_video`` (visual cue): the chunk's frames of a face video, uint8 ``[H, W, C, T]``.

The bank stores decoded frames ``[T, H, W, C]`` with their fps; ``read`` hands out a read-only view of the mapping
(a clip is large and a chunk needs a few frames of it), ``video_chunk`` copies the chunk's frames.
"""

from __future__ import annotations

import math

import numpy as np

from speechpack.loader.tse.cues.values import MIN_WINDOW_SECONDS, ChunkInfo


def read(bank, item: int, data: np.ndarray) -> tuple[np.ndarray, float]:
    """``(frames [T, H, W, C], fps)``: the frames are a read-only view of the mapped bank."""
    shape = tuple(int(bank.field(n, item)) for n in ("frames", "height", "width", "channels"))
    offset = int(bank.field("offset", item))
    return data[offset:offset + math.prod(shape)].reshape(shape), float(bank.field("fps", item))


def value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    frames, fps = bank.read(item)
    return video_chunk(frames, fps, chunk)


def video_chunk(frames: np.ndarray, fps: float, chunk: ChunkInfo) -> np.ndarray:
    """Raw video ``[T, H, W, C]`` uint8 to the chunk's frames, ``[H, W, C, T]`` uint8.

    The video is first matched to the audio (``round(seconds * fps)`` frames: trimmed, or padded with its last
    frame); the chunk ``[start, end)`` seconds then gives ``round((end - start) * fps)`` frames from
    ``round(start * fps)`` (at least one), padded with the last frame past the end: a 3 s chunk of 25 fps video
    is always 75 frames.
    """
    if not fps or fps <= 0:
        raise ValueError(f"a raw_video cue needs a positive fps, got {fps!r}")
    if frames.shape[0] == 0:
        raise ValueError("empty video")
    seconds = chunk.audio_seconds
    aligned = max(1, int(round(seconds * fps)))
    # The window in whole samples first (the ratios are sample counts over orig_len), so a 0.5 s chunk is exactly
    # 0.5 s and not 0.5000000001 s, whose frame count would round the other way.
    start = round(chunk.start_ratio * chunk.orig_len)
    span = round((chunk.end_ratio - chunk.start_ratio) * chunk.orig_len) / chunk.rate
    if span <= 0:
        span = max(seconds * 1e-3, MIN_WINDOW_SECONDS)
    need = max(1, int(round(span * fps)))
    first = max(0, min(int(round(start / chunk.rate * fps)), aligned - 1))
    available = min(aligned, frames.shape[0])  # frames of the file within the aligned length
    if first < available:
        window = frames[first:min(first + need, available)]
    else:  # the aligned video repeats its last real frame up to ``aligned``
        window = frames[available - 1:available]
    if len(window) < need:
        window = np.concatenate([window, np.repeat(window[-1:], need - len(window), axis=0)], axis=0)
    # Always a copy: ``frames`` may be a read-only view of the mapped cue bank.
    return np.moveaxis(window, 0, -1).astype(np.uint8, order="C", copy=True)
