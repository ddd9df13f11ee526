"""MuVAP-layout ASD packs (``muvap-asd-mmap`` version 4) written the way MuVAP's preprocessing documents them, for
the import tests (not a test module).

``write_muvap_pack`` follows the documented writer: per track, the audio is cut or right-zero-padded to
``round(frames / fps * 16000)`` samples, its mean, and its rms and peak after removing the mean, are measured on
that float waveform (padding included), and it is quantised as ``round(clip(x, -1, 1) * 32767)``; a shard is
flushed when its payload (faces + audio + labels bytes) would pass ``max_shard_bytes`` and it already holds a
track; each array is one ``np.save`` of the concatenated tracks; ``index.json`` is one compact JSON list with
shard-local offsets; ``dataset.json`` (indent 2) is written last.  :func:`muvap_avcc_corpus` writes the same
media twice: as an AVCC TSV corpus for ``speechpack build avcc`` and as the MuVAP pack MuVAP's own AVCC path
would make of it.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

MUVAP_SAMPLE_RATE = 16000


@dataclass(frozen=True)
class MuvapTrack:
    """A track as MuVAP's writer receives it: faces uint8 ``[F, 112, 112]``, 0/1 labels, the float waveform at
    16 kHz starting at the track (longer or shorter than the track is fine)."""

    sample_id: str
    faces: np.ndarray
    labels: np.ndarray
    fps: float
    audio: np.ndarray
    start_sec: float = 0.0
    dataset: str = "avcc"


def _record(track: MuvapTrack, face_offset: int, audio_offset: int) -> tuple[dict, np.ndarray]:
    frames = len(track.faces)
    samples = int(round(frames / track.fps * MUVAP_SAMPLE_RATE))
    audio = np.zeros(samples, dtype=np.float64)
    audio[:min(samples, len(track.audio))] = track.audio[:samples]
    mean = float(audio.mean())
    centred = audio - mean
    rms, peak = float(np.sqrt(np.mean(centred ** 2))), float(np.max(np.abs(centred)))
    stored = np.round(np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16)
    record = {"dataset": track.dataset, "sample_id": track.sample_id, "source_fps": float(track.fps),
              "source_frames": frames, "start_sec": float(track.start_sec),
              "model_frames": int(math.floor(frames / track.fps * 25 + 1e-9)), "face_offset": face_offset,
              "audio_offset": audio_offset, "audio_samples": samples, "label_offset": face_offset,
              "audio_mean": mean, "audio_rms": rms, "audio_peak": peak,
              "speaking_ratio": float(np.mean(track.labels))}
    return record, stored


def write_muvap_pack(out: Path, tracks: list[MuvapTrack], max_shard_bytes: int = 1_000_000_000) -> Path:
    """A MuVAP pack of ``tracks`` at ``out`` (see the module docstring); returns ``out``."""
    out = Path(out)
    out.mkdir(parents=True)
    shards: list[list[tuple[MuvapTrack, np.ndarray, dict]]] = [[]]
    size = 0
    for track in tracks:
        faces_bytes = track.faces.nbytes + len(track.labels)
        record, stored = _record(track, 0, 0)
        sample_bytes = faces_bytes + stored.nbytes
        if shards[-1] and size + sample_bytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((track, stored, record))
        size += sample_bytes
    for number, shard in enumerate(shards):
        directory = out / f"shard-{number:06d}"
        directory.mkdir()
        records, face_offset, audio_offset = [], 0, 0
        for track, stored, record in shard:
            record = dict(record, face_offset=face_offset, label_offset=face_offset, audio_offset=audio_offset)
            records.append(record)
            face_offset += len(track.faces)
            audio_offset += len(stored)
        np.save(directory / "faces.npy", np.concatenate([t.faces for t, _, _ in shard]).astype(np.uint8))
        np.save(directory / "audio.npy", np.concatenate([s for _, s, _ in shard]))
        np.save(directory / "labels.npy", np.concatenate([t.labels for t, _, _ in shard]).astype(np.uint8))
        (directory / "index.json").write_text(json.dumps(records, separators=(",", ":")), encoding="utf-8")
    manifest = {"format": "muvap-asd-mmap", "version": 4, "timeline": "native",
                "audio_sample_rate": MUVAP_SAMPLE_RATE, "audio_normalization": None, "face_shape": [112, 112],
                "face_color": "grayscale", "face_dtype": "uint8", "audio_dtype": "int16", "label_dtype": "uint8",
                "shards": len(shards), "samples": len(tracks)}
    (out / "dataset.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return out


#: (track id, first frame, stop frame) of the shared corpus: overlapping tracks of one conversation.
CORPUS_TRACKS = (("conv1:spk1", 0, 40), ("conv1:spk2", 20, 68), ("conv2:spk1", 5, 60))


@dataclass
class SharedCorpus:
    """The same media as an AVCC corpus (``tsv``, ``root``) and as a MuVAP pack (``muvap``)."""

    tsv: Path
    root: Path
    muvap: Path
    tracks: list[MuvapTrack]


def muvap_avcc_corpus(root: Path, max_shard_bytes: int = 150_000) -> SharedCorpus:
    """The real talking-face video's tracks, once as AVCC inputs (112x112 ``.npy`` faces, a 16 kHz PCM16
    conversation WAV cut at ``start_sec``) and once as the MuVAP pack made from those same files (faces as they
    are, the WAV read as ``int16 / 32768``, as MuVAP's loader reads it); small shards, so the pack has several."""
    import cv2
    import soxr

    from factories.asd_inputs import crop_face, load_movie, pcm16

    movie = load_movie()
    root = Path(root)
    corpus = root / "avcc"
    (corpus / "faces").mkdir(parents=True)
    (corpus / "audio").mkdir()
    pcm = pcm16(soxr.resample(movie.audio, movie.audio_rate, MUVAP_SAMPLE_RATE).astype(np.float32))
    soundfile.write(corpus / "audio" / "conv.wav", pcm, MUVAP_SAMPLE_RATE, subtype="PCM_16")
    wav, _rate = soundfile.read(corpus / "audio" / "conv.wav", dtype="int16")
    rows = [["sample_id", "visual_path", "audio_path", "source_fps", "labels", "start_sec"]]
    tracks = []
    for key, first, stop in CORPUS_TRACKS:
        crops = [cv2.cvtColor(crop_face(movie, f), cv2.COLOR_BGR2GRAY) for f in range(first, stop)]
        faces = np.stack([cv2.resize(c, (112, 112), interpolation=cv2.INTER_AREA) for c in crops])
        visual = f"faces/{key.replace(':', '_')}.npy"
        np.save(corpus / visual, faces)
        start_sec = first / movie.fps
        labels = movie.labels[first:stop].astype(np.uint8)
        rows.append([key, visual, "audio/conv.wav", repr(movie.fps), json.dumps(labels.tolist()), repr(start_sec)])
        begin = int(round(start_sec * MUVAP_SAMPLE_RATE))
        tracks.append(MuvapTrack(key, faces, labels, movie.fps, wav[begin:].astype(np.float64) / 32768.0, start_sec))
    tsv = corpus / "asd_manifest.tsv"
    with open(tsv, "w", encoding="utf-8", newline="") as fp:
        csv.writer(fp, delimiter="\t", lineterminator="\n").writerows(rows)
    muvap = write_muvap_pack(root / "AVCC" / "packed" / "train", tracks, max_shard_bytes)
    return SharedCorpus(tsv, corpus, muvap, tracks)


def edit_index(pack: Path, shard: int, entry: int, **changes) -> None:
    """Change fields of one record of a MuVAP pack's index (for the bad-input tests)."""
    path = Path(pack) / f"shard-{shard:06d}" / "index.json"
    records = json.loads(path.read_text(encoding="utf-8"))
    records[entry].update(changes)
    path.write_text(json.dumps(records, separators=(",", ":")), encoding="utf-8")


def shard_count(pack: Path) -> int:
    return len([name for name in os.listdir(pack) if name.startswith("shard-")])
