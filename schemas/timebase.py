"""The ASD time base: the rules that tie an ``asd`` pack's native-rate face tracks to its 16 kHz audio and to the
25 Hz timeline an ASD model sees (docs/asd.md, "The model timeline").

These are contracts, not loader details: the adapters build tracks by them (``packer.adapters.avcc``),
``speechpack validate`` holds a pack to them (``packer.validate.asd``) and the loader indexes tracks by them
(``loader.asd.timeline``), so they live here, where both sides can import them.

- ``model_frame_count``: a track of ``F`` native frames at ``fps`` has ``M = floor(F / fps * 25 + 1e-9)`` model
  frames (the epsilon keeps exact ratios such as 30 frames at 30 fps from flooring one frame short);
- ``audio_sample_count``: the track's stored audio has ``round(F / fps * 16000)`` samples;
- ``track_start_sample``: a track starting ``start_sec`` into a recording at ``rate`` Hz starts at sample
  ``round(start_sec * rate)``.

Rounding.  Both ``round`` rules here round half to even (Python's ``round``, numpy's ``rint``), the rule the ASD
tracks have always been cut by, while every other seconds-to-samples conversion uses
``schemas.units.seconds_to_samples`` (half up).  They differ only on an exact tie (a start or a length that falls
on half a sample, e.g. 0.25 s at 22050 Hz), but there they give a different sample count, and so different bytes in
an ``asd`` pack and a different invariant for ``speechpack validate``.  Packs stay byte-identical across versions,
so the asd rule is kept, named, and defined once, here.
"""

from __future__ import annotations

import numpy as np

from speechpack.schemas.constants import ASD_SAMPLE_RATE
from speechpack.schemas.errors import SpeechpackError

#: The model's frame rate: every ASD batch is on this timeline, whatever the source video's rate.
ASD_MODEL_FPS = 25
#: Audio samples per model frame (640 at 16 kHz and 25 Hz).
SAMPLES_PER_MODEL_FRAME = ASD_SAMPLE_RATE // ASD_MODEL_FPS
if SAMPLES_PER_MODEL_FRAME * ASD_MODEL_FPS != ASD_SAMPLE_RATE:  # pragma: no cover - a constants edit gone wrong
    raise ImportError(f"ASD_SAMPLE_RATE {ASD_SAMPLE_RATE} is not a multiple of ASD_MODEL_FPS {ASD_MODEL_FPS}")
#: Added before flooring the model frame count, so float error never loses a frame on exact ratios.
FRAME_COUNT_EPSILON = 1e-9


class TimelineError(SpeechpackError):
    """A track's frame count or frame rate cannot be put on the model timeline."""


def check_timing(source_frames, source_fps) -> tuple[np.ndarray, np.ndarray]:
    """``(frames as int64, fps as float64)``, after refusing non-integer or negative frame counts and frame rates
    that are not finite and positive."""
    frames = np.asarray(source_frames)
    fps = np.asarray(source_fps, dtype=np.float64)
    if frames.dtype.kind not in "iu":
        raise TimelineError(f"source_frames must be integers, got {frames.dtype}")
    if np.any(frames < 0):
        raise TimelineError(f"source_frames must be non-negative, got {frames[frames < 0][:3].tolist()}")
    bad = ~(np.isfinite(fps) & (fps > 0))
    if np.any(bad):
        raise TimelineError(f"source_fps must be finite and positive, got {fps[bad][:3].tolist()}")
    return frames.astype(np.int64), fps


def model_frame_count(source_frames, source_fps) -> np.ndarray:
    """``M`` per track (vectorised): model frames of ``source_frames`` native frames at ``source_fps``."""
    frames, fps = check_timing(source_frames, source_fps)
    return np.floor(frames / fps * ASD_MODEL_FPS + FRAME_COUNT_EPSILON).astype(np.int64)


def audio_sample_count(source_frames, source_fps) -> np.ndarray:
    """The pack invariant: a track's stored audio has ``round(F / fps * 16000)`` samples (half to even)."""
    frames, fps = check_timing(source_frames, source_fps)
    return np.round(frames / fps * ASD_SAMPLE_RATE).astype(np.int64)


def track_start_sample(start_sec: float, rate: int) -> int:
    """The sample of a ``rate`` Hz recording where a track starting ``start_sec`` into it begins (half to even;
    see "Rounding" above for why this is not ``seconds_to_samples``)."""
    return int(round(start_sec * rate))


__all__ = ["ASD_MODEL_FPS", "FRAME_COUNT_EPSILON", "SAMPLES_PER_MODEL_FRAME", "TimelineError", "audio_sample_count",
           "check_timing", "model_frame_count", "track_start_sample"]
