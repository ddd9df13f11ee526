"""``speechpack validate`` for ``asd`` packs: the checks only this kind has, read from the files themselves.

``packer.validate.pack`` checks what every pack shares (hashes, ``.npy`` headers against the catalogue, offsets
contiguous, one segment per stream, faces rows == labels rows).  This module adds the meaning of an asd track,
the rules ``packer.adapters.avcc`` enforces at build time, so a pack edited or written by another tool is held to
them too:

- the pack: sample rate ``ASD_SAMPLE_RATE``; the ``faces`` catalogue entry uint8 rows of ``FACE_SHAPE``;
- each track (``F`` = its faces rows): labels rows == F; every label value 0 or 1 (read from ``labels.npy``);
  ``source_fps`` finite and positive; audio samples == ``round(F / source_fps * 16000)``; at least one 25 Hz model
  frame (``floor(F / source_fps * 25 + 1e-9) > 0``).

It returns ``(file, message)`` pairs, as ``schemas.cue_banks`` does, so ``packer.validate.pack`` files them as errors
without this module importing it back.
"""

from __future__ import annotations

import math
import os
from typing import Callable

import numpy as np

from speechpack.schemas.constants import (
    ASD_SAMPLE_RATE,
    FACE_SHAPE,
    MANIFEST_NAME,
    SHARD_INDEX_NAME,
    STREAM_AUDIO,
    STREAM_FACES,
    STREAM_LABELS,
    STREAM_TYPES,
    stream_file_name,
)
from speechpack.schemas.format import Manifest
from speechpack.schemas.timebase import audio_sample_count, model_frame_count

#: Label values an asd pack may hold.
LABEL_VALUES = (0, 1)


def asd_issues(pack_path: str, manifest: Manifest, records_by_shard: dict[str, list[dict]],
               labels_of: Callable[[str], np.ndarray | None] | None = None) -> list[tuple[str, str]]:
    """Every asd-specific problem of a pack whose shard indexes were read: ``records_by_shard`` maps a shard
    directory name to its index records (shards whose index could not be read are left out by the caller).
    ``labels_of(shard_dir)`` gives a shard's label rows (default: mapped from the file; ``packer.validate.pack``
    passes the arrays it checked, mapped or fetched)."""
    labels_of = labels_of or _labels
    issues: list[tuple[str, str]] = []
    at = os.path.join(pack_path, MANIFEST_NAME)
    if manifest.sample_rate != ASD_SAMPLE_RATE:
        issues.append((at, f"an asd pack is {ASD_SAMPLE_RATE} Hz, this one says {manifest.sample_rate}"))
    faces_type = STREAM_TYPES[STREAM_FACES]
    for spec in manifest.streams:
        if spec.name == STREAM_FACES and (tuple(spec.row_shape) != FACE_SHAPE or spec.dtype != faces_type.dtype.str):
            issues.append((at, f"faces are {spec.dtype} rows of {list(spec.row_shape)}; this code reads "
                               f"{faces_type.dtype.str} rows of {list(FACE_SHAPE)} (a pack cannot be read at "
                               f"another face size)"))
    for directory, records in records_by_shard.items():
        shard_dir = os.path.join(pack_path, directory)
        labels = labels_of(shard_dir)
        for record in records:
            issues += _track_issues(shard_dir, record, labels)
    return issues


def _labels(shard_dir: str) -> np.ndarray | None:
    """The shard's labels, mapped; None when the file cannot be read (``packer.validate.pack`` reports that)."""
    try:
        return np.load(os.path.join(shard_dir, stream_file_name(STREAM_LABELS)), mmap_mode="r", allow_pickle=False)
    except Exception:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError, TokenError...
        return None


def _track_issues(shard_dir: str, record: dict, labels: np.ndarray | None) -> list[tuple[str, str]]:
    at = f"{os.path.join(shard_dir, SHARD_INDEX_NAME)} key {record['key']!r}"
    streams = record["streams"]
    try:
        faces, = streams[STREAM_FACES]
        label_seg, = streams[STREAM_LABELS]
        audio, = streams[STREAM_AUDIO]
    except (KeyError, ValueError):
        return []  # the generic check reports a track without exactly one segment per stream
    issues = []
    frames = faces["length"]
    if label_seg["length"] != frames:
        issues.append((at, f"{label_seg['length']} labels for {frames} faces"))
    fps = record["attrs"].get("source_fps")
    if not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
        return issues + [(at, f"source_fps must be a positive frame rate, got {fps!r}")]
    if frames > 0:
        expected = int(audio_sample_count(frames, fps))
        if audio["length"] != expected:
            issues.append((at, f"audio has {audio['length']} samples; {frames} frames at {fps:g} fps need "
                               f"round({frames} / {fps:g} * {ASD_SAMPLE_RATE}) = {expected}"))
        if int(model_frame_count(frames, fps)) == 0:
            issues.append((at, f"{frames} frame(s) at {fps:g} fps make no 25 Hz model frame: the loader cannot "
                               f"feed this track"))
    stop = label_seg["offset"] + label_seg["length"]
    if labels is not None and labels.ndim == 1 and stop <= labels.shape[0]:
        values = np.asarray(labels[label_seg["offset"]:stop])
        bad = values[(values != LABEL_VALUES[0]) & (values != LABEL_VALUES[1])]
        if bad.size:
            first = int(np.flatnonzero((values != LABEL_VALUES[0]) & (values != LABEL_VALUES[1]))[0])
            issues.append((f"{os.path.join(shard_dir, stream_file_name(STREAM_LABELS))} key {record['key']!r}",
                           f"{bad.size} label(s) not 0 or 1 (first: {int(bad[0])} at frame {first})"))
    return issues


__all__ = ["LABEL_VALUES", "asd_issues"]
