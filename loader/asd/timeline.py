"""MuVAP's 25 Hz model timeline over a pack's native-rate face tracks (docs/asd.md, "The model timeline").

A pack keeps faces and labels at the source video's frame rate and audio at its full 16 kHz duration; the model
sees a fixed 25 Hz timeline.  The pack-side rules (``ASD_MODEL_FPS``, ``model_frame_count``, ``audio_sample_count``)
are contracts, defined in ``schemas.timebase``; this module maps batches between the two timelines:

- ``source_frame_index``: model frame ``k`` shows native frame ``clip(floor((k + 0.5) / 25 * fps), 0, F - 1)``;
  faces AND labels use this one index, so a label always stays attached to the face it describes;
- ``model_frame_index``: the inverse, for scoring every native frame: native frame ``j`` takes the score of model
  frame ``clip(floor((j + 0.5) / fps * 25), 0, M - 1)``;
- audio is never resampled: model frame ``k`` is samples ``[k * 640, (k + 1) * 640)`` (``16000 / 25``); reads
  (``loader.samples.read_window``) are clamped to the stored audio and right-zero-padded, so ``T`` frames always
  give exactly ``T * 640`` samples.

A track with ``M == 0`` (one frame at 30 fps) cannot be fed to the model at all; the task reports such tracks
(MuVAP drops them silently).

MuVAP's training chunks on the model timeline: ``train_window`` fed frames, ``hist_frames`` of them history.

MuVAP (docs/asd.md, "Training chunks and batches") scores spans of ``span = train_window - hist_frames`` model frames:
a track of ``M <= span`` frames is one chunk; a longer one is ``n = ceil(M / span)`` near-equal chunks with edges
``round(linspace(0, M, n + 1))``, so every frame lies in exactly one chunk's scored span (scored once per epoch,
unless its batch crops it to the batch's shortest chunk).  Each chunk is fed with up to
``hist_frames`` unscored frames before it (none before the track's start), so no fed chunk exceeds
``train_window`` and a frame near a chunk boundary still sees real history.

``loader.plan.train_windows.tile_windows`` does the tiling, with MuVAP's edges exactly (numpy rounds half to even, and so
does it).

Tracks with no model frame cannot be chunked (a zero-length chunk would crash a model); the task sets them apart
and reports them (``loader.asd.task.asd_tracks``).

``jitter_windows`` is MuVAP's ``jitter``: every epoch, each chunk's scored span (same length) moves to a start drawn
uniformly over its track, ``U{0 .. M - span_length}``, and is fed with up to ``hist_frames`` frames before it, so
the fed length changes with the start (a span that lands near the track's start gets less history).  MuVAP redraws
on every access from global random state, and its batch sampler keeps assuming the unjittered lengths, so a batch
cropped to its shortest row loses frames; here the draws are counter-based, keyed by (seed, epoch) and made for
every chunk at once, so the planner batches the lengths that are actually fed, and every worker and rank agrees on
them.  Coverage becomes random sampling: a frame may be scored twice or not at all in an epoch.
"""

from __future__ import annotations

import numpy as np

from speechpack.loader.config_checks import ConfigError
from speechpack.loader.plan.train_windows import TrainWindows, tile_windows
from speechpack.loader.rng import jitter_rng
from speechpack.schemas.timebase import (
    ASD_MODEL_FPS,
    TimelineError,
    check_timing as _check,
    model_frame_count,
)


def source_frame_index(start: int, stop: int, source_frames: int, source_fps: float) -> np.ndarray:
    """Native frame shown at each model frame of ``[start, stop)``: one index for faces and labels."""
    frames, fps = _check(int(source_frames), float(source_fps))
    if frames == 0:
        raise TimelineError("a track without frames has no model frames to index")
    k = np.arange(start, stop, dtype=np.float64)
    return np.clip(np.floor((k + 0.5) / ASD_MODEL_FPS * fps), 0, int(frames) - 1).astype(np.int64)


def model_frame_index(source_frames: int, source_fps: float) -> np.ndarray:
    """For each of the ``source_frames`` native frames, the model frame whose score it takes."""
    frames, fps = _check(int(source_frames), float(source_fps))
    m = int(model_frame_count(frames, fps))
    if m == 0:
        raise TimelineError(f"{int(frames)} frames at {float(fps)} fps have no model frame to score from")
    j = np.arange(int(frames), dtype=np.float64)
    return np.clip(np.floor((j + 0.5) / fps * ASD_MODEL_FPS), 0, m - 1).astype(np.int64)


def native_frame_scores(model_scores: np.ndarray, source_frames: int, source_fps: float) -> np.ndarray:
    """One score per native frame from a track's ``[M, ...]`` model-frame scores (padding already stripped):
    what an AVA-style evaluation compares with the native-rate ground truth."""
    index = model_frame_index(source_frames, source_fps)
    scores = np.asarray(model_scores)
    if len(scores) != int(model_frame_count(source_frames, source_fps)):
        raise TimelineError(f"expected {int(model_frame_count(source_frames, source_fps))} model-frame scores, "
                            f"got {len(scores)}")
    return scores[index]


def scored_span(train_window: int, hist_frames: int) -> int:
    """Scored frames per chunk: what is left of the fed window after its history."""
    if train_window < 1 or hist_frames < 0:
        raise ConfigError(f"train_window must be >= 1 and hist_frames >= 0, got {train_window}, {hist_frames}")
    if hist_frames >= train_window:
        raise ConfigError(f"hist_frames {hist_frames} leaves no scored frame in train_window {train_window} "
                          f"(MuVAP scores train_window - hist_frames frames per chunk)")
    return train_window - hist_frames


def muvap_windows(model_frames: np.ndarray, train_window: int, hist_frames: int) -> TrainWindows:
    """Chunks of every track (``model_frames`` all positive), MuVAP's edges exactly."""
    lengths = np.asarray(model_frames, dtype=np.int64)
    if np.any(lengths < 1):
        raise ConfigError("muvap_windows: tracks without model frames must be set apart first "
                          "(loader.asd.task.asd_tracks)")
    return tile_windows(lengths, scored_span(train_window, hist_frames), hist_frames)


def jitter_windows(windows: TrainWindows, model_frames: np.ndarray, hist_frames: int, seed: int,
                   epoch: int) -> TrainWindows:
    """``windows`` with every chunk's scored span moved to a random start in its track (see the module docstring):
    one uniform draw per chunk, in chunk order."""
    span = windows.stop - windows.start
    room = np.asarray(model_frames, dtype=np.int64)[windows.item] - span + 1
    u = jitter_rng(seed, epoch).random(len(windows))
    start = np.minimum((u * room).astype(np.int64), room - 1)
    return TrainWindows(item=windows.item, start=start, stop=start + span,
                        fed_start=np.maximum(start - hist_frames, 0), first=windows.first)


__all__ = ["jitter_windows", "model_frame_index", "muvap_windows", "native_frame_scores", "scored_span",
           "source_frame_index"]
