"""A row's cue value at batch time: what a TSE batch makes of a bank item (``loader/pack/cues.py`` reads the item).

Per representation (:data:`VALUES`): a waveform resampled to the loader's rate (soxr), an embedding checked to be
``[D]``, a video's frames for the row's chunk, front-end features and spatial series aligned to the chunk, textual
phoneme ids selected.  A representation with no entry serves the item as its read function returns it, as an
array (docs/extending.md).  A ``ValueError``, ``IndexError`` or ``KeyError`` from a value function means "this
entry cannot be used" (``loader.tse.cues.resolve`` then drops the cue or names it, as the cue requires).

Time-varying cues follow the row's audio chunk (WeSep's ``chunk_ratio``).  The audio lasts ``orig_len / rate``
seconds; a cue lasting ``duration_sec`` is first aligned to it (cropped, or edge-padded), then cut at
``int(start_ratio * N) : int(end_ratio * N)`` (edge-padded past the end).  The shaping functions are pure, tested
on plain arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import soxr

from speechpack.schemas.cues import CueSpec

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


# ----------------------------------------------------------------------------------------------------------- waveform

def waveform_value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    """An enrollment recording, float32 ``[C, T]`` at the loader's rate (resampled with soxr when the pack's rate
    differs), never chunked."""
    audio = bank.read(item)
    if bank.sample_rate != chunk.rate:
        audio = np.ascontiguousarray(soxr.resample(np.ascontiguousarray(audio.T, dtype=np.float32),
                                                   bank.sample_rate, chunk.rate).T)
    return np.asarray(audio, dtype=np.float32)


# ------------------------------------------------------------------------------------------------------ spk_embedding

def spk_embedding_value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    """A speaker embedding, float32 ``[D]``."""
    return embedding(bank.read(item))


def embedding(value: np.ndarray) -> np.ndarray:
    """A speaker embedding as float32 ``[D]`` (``[1, D]`` is squeezed; any other rank is an error)."""
    value = np.asarray(value, dtype=np.float32)
    if value.ndim == 2 and value.shape[0] == 1:
        value = value[0]
    if value.ndim != 1:
        raise ValueError(f"speaker embedding must be [D] or [1, D], got {list(value.shape)}")
    return value


# ---------------------------------------------------------------------------------------------------------- raw_video

def raw_video_value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    """The chunk's frames of a face video, uint8 ``[H, W, C, T]`` (``video_chunk``)."""
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


# ------------------------------------------------------------------------------------------------------ muse_frontend

def muse_frontend_value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    """Precomputed visual front-end features ``[..., T]``, aligned to the audio through their ``duration_sec`` and
    cut to the row's chunk."""
    features, duration = bank.read(item)
    return muse_chunk(features, duration, chunk)


def muse_chunk(features: np.ndarray, duration_sec: float | None, chunk: ChunkInfo) -> np.ndarray:
    """A precomputed visual front-end ``[..., T]`` (ndim >= 2), aligned to the audio and cut to its chunk."""
    features = np.asarray(features, dtype=np.float32)
    if features.ndim < 2:
        raise ValueError(f"a muse_frontend cue needs at least 2 dimensions, got {list(features.shape)}")
    return np.ascontiguousarray(crop_by_ratio(align_to_duration(features, duration_sec, chunk.audio_seconds), chunk))


# ------------------------------------------------------------------------------------------------------------- fields

def fields_value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    """The ``cues.yaml`` ``fields`` in order: float32 ``[F]`` when all are scalars, else ``[F, T]``."""
    values, duration = bank.read(item)
    return spatial_value(values, duration, spec.fields, spec.field_defaults, chunk)


def fields_problem(spec: CueSpec) -> str | None:
    """What makes a ``cues.yaml`` entry of this representation unusable, or None."""
    return None if spec.fields else "a spatial cue needs a non-empty fields list"


def spatial_value(values: dict[str, np.ndarray], duration_sec: float | None, fields: tuple[str, ...],
                  field_defaults: dict, chunk: ChunkInfo) -> np.ndarray:
    """The listed ``fields`` in order: float32 ``[F]`` when all are scalars, else ``[F, T]`` (scalars broadcast).

    A field the item lacks takes ``field_defaults``, else ``KeyError``.  1-D fields are aligned to the audio via
    ``duration_sec`` and cut to the chunk (both with edge padding).
    """
    rows = []
    for name in fields:
        if name in values:
            value = np.asarray(values[name], dtype=np.float32)
        elif name in field_defaults:
            value = np.asarray(field_defaults[name], dtype=np.float32)
        else:
            raise KeyError(f"spatial field {name!r} missing (item has {', '.join(sorted(values)) or 'none'})")
        if value.ndim > 1:
            raise ValueError(f"spatial field {name!r} must be a scalar or 1-D, got {list(value.shape)}")
        if value.ndim == 1:
            value = crop_by_ratio(align_to_duration(value, duration_sec, chunk.audio_seconds), chunk)
        rows.append(value)
    lengths = {value.shape[0] for value in rows if value.ndim == 1}
    if not lengths:
        return np.asarray([float(value) for value in rows], dtype=np.float32)
    if len(lengths) > 1:
        raise ValueError(f"spatial sequence fields have different lengths {sorted(lengths)}")
    length = lengths.pop()
    return np.stack([value if value.ndim == 1 else np.full(length, value, dtype=np.float32) for value in rows])


# ------------------------------------------------------------------------------------------------ dae_keyword_phoneme

def dae_keyword_phoneme_value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    """DAE keyword phoneme ids, int64 ``[L]``, chosen by the cue's ``selection`` (``random``: a span of words drawn
    with the batch's draws; ``fixed``: ``kw_candidate``)."""
    words, keywords = bank.read(item)
    return select_phonemes(words, keywords, spec.selection or {}, draws[1:3])


def dae_keyword_phoneme_problem(spec: CueSpec) -> str | None:
    """What makes a ``cues.yaml`` entry of this representation unusable, or None."""
    return None if isinstance(spec.selection, dict) else "a dae_keyword_phoneme cue needs a selection"


def randint(lo: int, hi: int, u: float) -> int:
    """``random.randint(lo, hi)`` (inclusive) from one uniform draw ``u`` in [0, 1)."""
    return lo + min(int(u * (hi - lo + 1)), hi - lo)


def select_phonemes(words: list[np.ndarray], keywords: np.ndarray, selection: dict, draws: np.ndarray) -> np.ndarray:
    """WeSep's DAE keyword selection, int64 ``[L]``: ``random`` a contiguous span of ``min(randint(lo, hi),
    n_words)`` words from ``randint(0, n_words - n)``; ``fixed`` the words of ``kw_candidate`` in its order."""
    if not len(words):
        raise ValueError("a DAE keyword cue needs a non-empty phn_label")
    if any(len(word) == 0 for word in words):
        raise ValueError("each DAE keyword word needs phoneme ids")
    kind = selection.get("type")
    if kind == "random":
        lo, hi = selection.get("word_range", [2, 6])
        count = min(randint(lo, hi, float(draws[0])), len(words))
        start = randint(0, len(words) - count, float(draws[1]))
        chosen = words[start:start + count]
    elif kind == "fixed":
        if not len(keywords):
            raise ValueError("DAE fixed selection needs a non-empty kw_candidate")
        if any(not 0 <= int(i) < len(words) for i in keywords):
            raise IndexError(f"a kw_candidate index is outside phn_label ({len(words)} words): {list(keywords)}")
        chosen = [words[int(i)] for i in keywords]
    else:
        raise ValueError(f"unsupported DAE keyword selection {kind!r}")
    return np.concatenate([np.asarray(word, dtype=np.int64) for word in chosen])


# ------------------------------------------------------------------------------------------------ the registry

#: ``(bank, cues.yaml entry, item, chunk, the row's draws for this cue) -> the row's value``.
ValueFunction = Callable[[Any, CueSpec, int, ChunkInfo, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class CueValue:
    """How a representation is served in a batch: its ``value``, and what makes a ``cues.yaml`` entry unusable for
    it (``problem``, checked when the loader is built; None: nothing beyond ``schemas.cues``)."""

    value: ValueFunction
    problem: Callable[[CueSpec], str | None] | None = None


def as_read(bank, spec: CueSpec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    """The value of a representation without a :data:`VALUES` entry: the item as read, as an array."""
    return np.asarray(bank.read(item))


#: Representation name -> how a batch serves it; a representation absent here is served :func:`as_read`.
VALUES: dict[str, CueValue] = {
    "waveform": CueValue(waveform_value),
    "spk_embedding": CueValue(spk_embedding_value),
    "raw_video": CueValue(raw_video_value),
    "muse_frontend": CueValue(muse_frontend_value),
    "fields": CueValue(fields_value, fields_problem),
    "dae_keyword_phoneme": CueValue(dae_keyword_phoneme_value, dae_keyword_phoneme_problem),
}


def cue_value(representation: str) -> CueValue:
    """How ``representation`` is served (looked up when a batch is built)."""
    return VALUES.get(representation, CueValue(as_read))


__all__ = ["VALUES", "ChunkInfo", "CueValue", "MIN_WINDOW_SECONDS", "ValueFunction", "align_to_duration", "as_read",
           "crop_by_ratio", "cue_value", "edge_pad_last", "embedding", "muse_chunk", "randint", "select_phonemes",
           "spatial_value", "video_chunk"]
