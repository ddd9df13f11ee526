"""ASD packs written with ``PackWriter`` from real speech and generated faces whose pixels encode (track, native
frame), so every face a batch holds can be traced back to the native frame it came from; and the loader calls the
ASD tests share.  (Packs made by the real ASD adapters from a real video: factories.asd_inputs.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import soundfile

from speechpack.loader import build_loader
from speechpack.packer.audio import StoredAudio
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.packer.build.writer import PackWriter
from speechpack.schemas.constants import ASD_SAMPLE_RATE, FACE_SHAPE, KIND_ASD
from speechpack.schemas.timebase import audio_sample_count

@dataclass(frozen=True)
class Track:
    """One face track: ``frames`` native frames at ``fps`` of clip ``clip``; ``gain`` scales its speech;
    ``click`` puts one full-scale sample in the middle (a crest factor only the peak cap can handle)."""

    key: str
    clip: str
    frames: int
    fps: float
    gain: float = 1.0
    silent: bool = False
    click: bool = False


def track_faces(track_no: int, frames: int) -> np.ndarray:
    """Faces whose pixel (0, 0) is the track number and (0, 1), (0, 2) the native frame (big-endian)."""
    faces = np.full((frames, *FACE_SHAPE), 128, dtype=np.uint8)
    faces[:, 0, 0] = track_no
    faces[:, 0, 1] = np.arange(frames) // 256
    faces[:, 0, 2] = np.arange(frames) % 256
    return faces


def face_frame(face: np.ndarray) -> tuple[int, int]:
    """(track number, native frame) encoded by ``track_faces``."""
    return int(face[0, 0]), int(face[0, 1]) * 256 + int(face[0, 2])


def speech(paths: list[str], samples: int, offset: int) -> np.ndarray:
    """``samples`` of real 16 kHz speech (the clips concatenated, cycled), from ``offset``."""
    audio = np.concatenate([soundfile.read(p, dtype="int16")[0] for p in paths])
    return np.resize(np.roll(audio, -offset), samples)


def write_asd_pack(path: str, tracks: list[Track], paths: list[str], per_shard: int = 3) -> None:
    """An asd pack of ``tracks`` (labels: speaking on every third native frame)."""
    samples = []
    for number, track in enumerate(tracks):
        n = int(audio_sample_count(track.frames, track.fps))
        audio = np.zeros(n, np.int16) if track.silent else speech(paths, n, 7919 * number)
        audio = np.clip(np.rint(audio * track.gain), -32768, 32767).astype(np.int16)
        if track.click:
            audio[n // 2] = 32767
        labels = (np.arange(track.frames) % 3 == 0).astype(np.uint8)
        samples.append(PackedSample(
            key=track.key, speakers=(track.key,), line=number + 1, orig_sample_rate=ASD_SAMPLE_RATE,
            num_frames=n, provenance={"clip": track.clip},
            attrs={"source_fps": track.fps, "start_sec": 0.0, "clip": track.clip},
            streams={"audio": [StoredAudio(audio[None, :], 1.0)],
                     "faces": [StoredArray(track_faces(number, track.frames))], "labels": [StoredArray(labels)]}))
    plans = [SamplePlan(line=s.line, key=s.key, num_frames=s.num_frames, elements=s.elements) for s in samples]
    os.makedirs(path, exist_ok=True)
    with PackWriter(path, KIND_ASD, ASD_SAMPLE_RATE,
                    [plans[i:i + per_shard] for i in range(0, len(plans), per_shard)]) as writer:
        for sample in samples:
            writer.add(sample)
        writer.finish({"input": {"path": "generated", "sha256": "0" * 64}, "tool": "speechpack",
                       "tool_version": "test", "command": "test", "options": {}}, [])


#: Tracks at the frame rates real corpora use (AVA 30/29.97, WASD 25, films 23.976, webcams 15), two clips
#: sharing several tracks (WASD-style), one track too short for a model frame.
TRACKS = [
    Track("c0:a", "c0", 30, 30.0), Track("c0:b", "c0", 300, 25.0, gain=0.3), Track("c1:a", "c1", 1, 30.0),
    Track("c1:b", "c1", 90, 29.97, gain=2.0), Track("c2:a", "c2", 520, 23.976), Track("c2:b", "c2", 45, 15.0),
    Track("c3:a", "c3", 260, 30.0, gain=0.05), Track("c3:b", "c3", 64, 25.0),
]


def asd_config(path: str, **dataset_args) -> dict:
    return {"task": "asd", "packs": [{"path": path}], "dataset_args": dataset_args}


def batches(config: dict, state: str, world_size: int = 1, epoch: int = 0, seed: int = 1, num_workers: int = 0):
    """Every rank's batches of one epoch, as numpy."""
    out = []
    for rank in range(world_size):
        loader = build_loader(config, state, rank=rank, world_size=world_size, seed=seed, num_workers=num_workers)
        loader.set_epoch(epoch)
        out.append([{k: v.numpy() if hasattr(v, "numpy") else v for k, v in b.items()} for b in loader])
    return out
