"""The ASD item universe: one item per face track of every pack, as numpy columns.

Each track's native frame count is its faces segment's length, its rate the ``source_fps`` attribute, and its
model frame count follows from both (``loader.asd.timeline``).  Tracks without a single model frame cannot be fed
to a model; ``asd_tracks`` sets them apart so the task reports them (count and keys), instead of dropping them the
way MuVAP's chunker does.  Nothing here holds a Python object per track (cheap to fork into workers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.schemas.timebase import model_frame_count
from speechpack.loader.pack import Pack
from speechpack.schemas.constants import ASD_SAMPLE_RATE, FACE_SHAPE, KIND_ASD, STREAM_AUDIO, STREAM_FACES, STREAM_LABELS
from speechpack.schemas.errors import SpeechpackError


@dataclass(frozen=True)
class TrackIndex:
    """Parallel arrays, one row per track: where it lives and its timeline.  ``clip`` is a code unique per
    (pack, clip attribute), so tracks of equally named clips of two packs never count as one clip."""

    pack: np.ndarray
    sample: np.ndarray
    source_frames: np.ndarray
    source_fps: np.ndarray
    model_frames: np.ndarray
    clip: np.ndarray
    audio_segment: np.ndarray
    faces_segment: np.ndarray
    labels_segment: np.ndarray

    def __len__(self) -> int:
        return len(self.pack)

    def subset(self, keep: np.ndarray) -> "TrackIndex":
        return TrackIndex(**{name: getattr(self, name)[keep] for name in self.__dataclass_fields__})


def check_asd_packs(packs: list[Pack]) -> None:
    """Every pack is an asd pack at 16 kHz with the face geometry this code was built for."""
    for pack in packs:
        if pack.kind != KIND_ASD:
            raise SpeechpackError(f"{pack.path}: task asd reads asd packs; this one is {pack.kind}")
        if pack.sample_rate != ASD_SAMPLE_RATE:
            raise SpeechpackError(f"{pack.path}: asd packs are {ASD_SAMPLE_RATE} Hz, this one is {pack.sample_rate}")
        faces = pack.manifest.stream(STREAM_FACES)
        if tuple(faces.row_shape) != FACE_SHAPE:
            raise SpeechpackError(f"{pack.path}: faces are {list(faces.row_shape)}, this loader reads "
                                  f"{list(FACE_SHAPE)} (re-pack at that size)")


def asd_tracks(packs: list[Pack]) -> tuple[TrackIndex, TrackIndex]:
    """(tracks with model frames, tracks without any), in pack order then storage order."""
    check_asd_packs(packs)
    columns: dict[str, list[np.ndarray]] = {name: [] for name in TrackIndex.__dataclass_fields__}
    clip_base = 0
    for pack_id, pack in enumerate(packs):
        n = len(pack)
        faces = pack.streams[STREAM_FACES]
        labels = pack.streams[STREAM_LABELS]
        audio = pack.streams[STREAM_AUDIO]
        for name, table in ((STREAM_FACES, faces), (STREAM_LABELS, labels), (STREAM_AUDIO, audio)):
            if n and np.any(np.asarray(table.count) != 1):
                raise SpeechpackError(f"{pack.path}: every asd track has one {name} segment")
        frames = np.asarray(faces.length, dtype=np.int64)[faces.first]
        fps = np.asarray(pack.attrs["source_fps"], dtype=np.float64)
        _names, clip = np.unique(np.asarray(pack.attrs["clip"].raw), return_inverse=True)
        columns["pack"].append(np.full(n, pack_id, dtype=np.int32))
        columns["sample"].append(np.arange(n, dtype=np.int64))
        columns["source_frames"].append(frames)
        columns["source_fps"].append(fps)
        columns["model_frames"].append(model_frame_count(frames, fps) if n else np.zeros(0, np.int64))
        columns["clip"].append(clip.astype(np.int64) + clip_base)
        columns["audio_segment"].append(np.asarray(audio.first, dtype=np.int64))
        columns["faces_segment"].append(np.asarray(faces.first, dtype=np.int64))
        columns["labels_segment"].append(np.asarray(labels.first, dtype=np.int64))
        clip_base += len(_names)
    tracks = TrackIndex(**{name: np.concatenate(parts) for name, parts in columns.items()})
    has_frames = tracks.model_frames > 0
    return tracks.subset(has_frames), tracks.subset(~has_frames)


__all__ = ["TrackIndex", "asd_tracks", "check_asd_packs"]
