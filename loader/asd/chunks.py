"""MuVAP's training chunks on the model timeline: ``train_window`` fed frames, ``hist_frames`` of them history.

MuVAP (docs/asd.md, "Training chunks and batches") scores spans of ``span = train_window - hist_frames`` model frames:
a track of ``M <= span`` frames is one chunk; a longer one is ``n = ceil(M / span)`` near-equal chunks with edges
``round(linspace(0, M, n + 1))``, so every frame is scored exactly once per epoch.  Each chunk is fed with up to
``hist_frames`` unscored frames before it (none before the track's start), so no fed chunk exceeds
``train_window`` and a frame near a chunk boundary still sees real history.

``loader.plan.train_windows.tile_windows`` does the tiling, with MuVAP's edges exactly (numpy rounds half to even, and so
does it).

Tracks with no model frame cannot be chunked (a zero-length chunk would crash a model); ``split_empty`` sets them
apart so the task can report them.

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

from speechpack.loader.plan.train_windows import Windows, tile_windows
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.rng import jitter_rng


def scored_span(train_window: int, hist_frames: int) -> int:
    """Scored frames per chunk: what is left of the fed window after its history."""
    if train_window < 1 or hist_frames < 0:
        raise ConfigError(f"train_window must be >= 1 and hist_frames >= 0, got {train_window}, {hist_frames}")
    if hist_frames >= train_window:
        raise ConfigError(f"hist_frames {hist_frames} leaves no scored frame in train_window {train_window} "
                          f"(MuVAP scores train_window - hist_frames frames per chunk)")
    return train_window - hist_frames


def muvap_windows(model_frames: np.ndarray, train_window: int, hist_frames: int) -> Windows:
    """Chunks of every track (``model_frames`` all positive), MuVAP's edges exactly."""
    lengths = np.asarray(model_frames, dtype=np.int64)
    if np.any(lengths < 1):
        raise ConfigError("muvap_windows: tracks without model frames must be set apart first (split_empty)")
    return tile_windows(lengths, scored_span(train_window, hist_frames), hist_frames)


def jitter_windows(windows: Windows, model_frames: np.ndarray, hist_frames: int, seed: int, epoch: int) -> Windows:
    """``windows`` with every chunk's scored span moved to a random start in its track (see the module docstring):
    one uniform draw per chunk, in chunk order."""
    span = windows.stop - windows.start
    room = np.asarray(model_frames, dtype=np.int64)[windows.item] - span + 1
    u = jitter_rng(seed, epoch).random(len(windows))
    start = np.minimum((u * room).astype(np.int64), room - 1)
    return Windows(item=windows.item, start=start, stop=start + span,
                   fed_start=np.maximum(start - hist_frames, 0), first=windows.first)


def split_empty(model_frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions of tracks with model frames, positions of tracks without any)."""
    model_frames = np.asarray(model_frames, dtype=np.int64)
    return np.flatnonzero(model_frames > 0), np.flatnonzero(model_frames <= 0)


__all__ = ["jitter_windows", "muvap_windows", "scored_span", "split_empty"]
