"""ASD corpus inputs made from a real talking-face video, for the asd packing and loader tests (not a test module).

kphotoalbum's demo ``movie.avi`` (a man talking into a webcam: MJPEG 160x120 at 15 fps, 68 frames, PCM u8 audio at
11.025 kHz; located like every video test: ``$SPEECHPACK_TEST_VIDEO`` or ``.cache/test-data/kphotoalbum/``, see
docs/testing.md) is decoded with PyAV, its face found in every frame by OpenCV's Haar cascade (Debian's
``opencv-data``), and written the way each corpus ships:

- :func:`write_ava`: AVA/WASD -- JPEG face crops per track named by timestamp, one WAV per track, the loader CSV;
- :func:`write_avcc`: AVCC -- ``.npy`` faces (and one JPEG directory), one conversation WAV, the headered TSV;
- :func:`write_msdwild`: MSDWild -- the video re-encoded as H.264/AAC MP4, a box CSV, an RTTM.

Speaking labels are measured, not typed in (:func:`speaking_labels`): a frame is speaking when the audio under it
is louder than halfway, in dB, between the quiet (10th percentile) and loud (90th percentile) frames of the clip.
The man talks in bursts with pauses, so the labels hold both values.

A missing video or cascade fails the test in CI (``CI`` set) and skips it elsewhere, naming what to install.
:func:`make_asd_pack` is the one-call pack other test modules build on (signature kept stable).
"""

from __future__ import annotations

import csv
import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile

from factories.recordings import real_video_path, unavailable

HAAR_CASCADE = "/usr/share/opencv4/haarcascades/haarcascade_frontalface_default.xml"
#: Timestamps of the AVA crops start here, so they cross 10 s (a string sort would misorder 9.93 and 10.00).
AVA_TIME_OFFSET = 9.0


def _cascade():
    import cv2

    if not os.path.isfile(HAAR_CASCADE):
        unavailable(f"Haar cascade {HAAR_CASCADE} is missing: install the Debian package opencv-data "
                    f"(apt-get install -y --no-install-recommends opencv-data)")
    if not hasattr(cv2, "CascadeClassifier"):
        unavailable(f"OpenCV {cv2.__version__} has no CascadeClassifier (OpenCV 5 moved Haar cascades out of the main "
                    f"wheel): install opencv-python-headless<5")
    return cv2.CascadeClassifier(HAAR_CASCADE)


@dataclass(frozen=True)
class Movie:
    """The decoded video: ``gray`` ``[T, H, W]`` and ``bgr`` ``[T, H, W, 3]`` uint8 frames, ``fps``, ``audio``
    float32 ``[N]`` at ``audio_rate``, the face box ``(x, y, w, h)`` of every frame (None where none was found),
    and the measured speaking ``labels`` per frame."""

    path: str
    gray: np.ndarray
    bgr: np.ndarray
    fps: float
    audio: np.ndarray
    audio_rate: int
    boxes: tuple
    labels: np.ndarray

    @property
    def frames(self) -> int:
        return len(self.gray)


def speaking_labels(audio: np.ndarray, rate: int, fps: float, frames: int) -> np.ndarray:
    """1 where the RMS of the audio under a frame is above halfway (in dB) between the 10th and 90th percentile
    frame levels, else 0 (see the module docstring)."""
    edges = np.round(np.arange(frames + 1) / fps * rate).astype(np.int64)
    centred = audio - audio.mean()
    levels = np.array([20 * np.log10(max(float(np.sqrt(np.mean(centred[a:b] ** 2))) if b > a else 0.0, 1e-6))
                       for a, b in zip(edges[:-1], edges[1:])])
    threshold = (np.percentile(levels, 10) + np.percentile(levels, 90)) / 2
    return (levels > threshold).astype(np.uint8)


@functools.lru_cache(maxsize=2)
def _load_movie(path: str) -> Movie:
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate)
        decoded = [(frame.to_ndarray(format="gray"), frame.to_ndarray(format="bgr24"))
                   for frame in container.decode(stream)]
    with av.open(path) as container:
        audio_stream = container.streams.audio[0]
        rate = audio_stream.codec_context.sample_rate
        to_float = av.AudioResampler(format="flt", layout="mono")
        pieces = [out.to_ndarray().reshape(-1) for frame in container.decode(audio_stream)
                  for out in to_float.resample(frame)]
        pieces += [out.to_ndarray().reshape(-1) for out in to_float.resample(None)]
    gray = np.stack([g for g, _ in decoded])
    bgr = np.stack([c for _, c in decoded])
    cascade = _cascade()
    boxes = []
    for image in gray:
        found = cascade.detectMultiScale(image, scaleFactor=1.1, minNeighbors=4, minSize=(24, 24))
        if len(found) == 0:
            boxes.append(None)
        else:  # the largest detection is the man's face
            x, y, w, h = max((tuple(int(v) for v in box) for box in found), key=lambda b: b[2] * b[3])
            boxes.append((x, y, w, h))
    audio = np.concatenate(pieces).astype(np.float32)
    labels = speaking_labels(audio, rate, fps, len(gray))
    return Movie(path, gray, bgr, fps, audio, rate, tuple(boxes), labels)


def load_movie() -> Movie:
    """The real video, decoded and analysed once per test process."""
    return _load_movie(real_video_path())


def crop_face(movie: Movie, frame: int, margin: float = 0.25) -> np.ndarray:
    """A colour face crop of ``frame``: the detected box grown by ``margin`` on each side, clipped to the frame."""
    box = movie.boxes[frame] or movie.boxes[next(i for i, b in enumerate(movie.boxes) if b)]
    x, y, w, h = box
    height, width = movie.gray.shape[1:]
    x0, y0 = max(int(x - margin * w), 0), max(int(y - margin * h), 0)
    x1, y1 = min(int(x + w * (1 + margin)), width), min(int(y + h * (1 + margin)), height)
    return movie.bgr[frame, y0:y1, x0:x1]


def _audio_span(movie: Movie, first: int, stop: int) -> np.ndarray:
    a, b = (int(round(f / movie.fps * movie.audio_rate)) for f in (first, stop))
    return movie.audio[a:b]


def pcm16(audio: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(audio * 32768.0), -32768, 32767).astype(np.int16)


@dataclass(frozen=True)
class ExpectedTrack:
    """What a track should pack to: its frames of the movie, labels, frame rate, clip and where its audio starts."""

    key: str
    clip: str
    first: int
    stop: int
    labels: np.ndarray
    fps: float
    start_sec: float = 0.0

    @property
    def frames(self) -> int:
        return self.stop - self.first


@dataclass
class AvaInputs:
    loader_csv: Path
    visual_root: Path
    audio_root: Path
    split: str
    tracks: dict[str, ExpectedTrack] = field(default_factory=dict)


#: (clip, track id, first frame, stop frame, WAV channels) of the AVA-style corpus: two clips, three tracks.
AVA_TRACKS = (
    ("clipA", "clipA_0000_0040:faceA1", 0, 40, 1),
    ("clipA", "clipA_0000_0040:faceA2", 24, 68, 2),
    ("clipB", "clipB_0010_0060:faceB1", 10, 60, 1),
)


def write_ava(root: Path, split: str = "train") -> AvaInputs:
    """An AVA/WASD-style corpus under ``root``: ``clips_videos/<split>/<clip>/<track>/<timestamp>.jpg``,
    ``clips_audios/<split>/<clip>/<track>.wav`` (PCM_16 at the movie's 11.025 kHz; one track stereo) and
    ``csv/<split>_loader.csv`` (tab-separated: id, frames, fps, labels)."""
    import cv2

    movie = load_movie()
    inputs = AvaInputs(root / "csv" / f"{split}_loader.csv", root / "clips_videos", root / "clips_audios", split)
    rows = []
    for clip, key, first, stop, channels in AVA_TRACKS:
        face_dir = inputs.visual_root / split / clip / key
        face_dir.mkdir(parents=True)
        for frame in range(first, stop):
            stamp = AVA_TIME_OFFSET + frame / movie.fps
            cv2.imwrite(str(face_dir / f"{stamp:.2f}.jpg"), crop_face(movie, frame))
        wav = inputs.audio_root / split / clip / f"{key}.wav"
        wav.parent.mkdir(parents=True, exist_ok=True)
        mono = pcm16(_audio_span(movie, first, stop))
        data = mono if channels == 1 else np.stack([mono, mono // 2], axis=1)
        soundfile.write(wav, data, movie.audio_rate, subtype="PCM_16")
        labels = movie.labels[first:stop]
        rows.append([key, str(stop - first), f"{movie.fps!r}", json.dumps(labels.tolist())])
        inputs.tracks[key] = ExpectedTrack(key, clip, first, stop, labels, movie.fps)
    inputs.loader_csv.parent.mkdir(parents=True)
    with open(inputs.loader_csv, "w", encoding="utf-8", newline="") as fp:
        csv.writer(fp, delimiter="\t", lineterminator="\n").writerows(rows)
    return inputs


@dataclass
class AvccInputs:
    tsv: Path
    root: Path
    tracks: dict[str, ExpectedTrack] = field(default_factory=dict)


#: (track id, first frame, stop frame, visual kind, npy face size) of the AVCC-style corpus: one conversation WAV.
AVCC_TRACKS = (
    ("conv1_spk1", 5, 45, "npy", 96),
    ("conv1_spk2", 30, 68, "jpg", None),
    ("conv1_spk3", 0, 68, "npy", 112),
)


def write_avcc(root: Path) -> AvccInputs:
    """An AVCC-style corpus under ``root``: ``audio/conv1.wav`` (the whole movie audio, 16 kHz after soxr, so
    ``start_sec`` cuts at the pack's rate), faces as ``faces/<id>.npy`` (grayscale, at 96 or 112 pixels) or a JPEG
    directory, and ``asd_manifest.tsv`` with relative paths and a ``start_sec`` per track."""
    import cv2
    import soxr

    movie = load_movie()
    inputs = AvccInputs(root / "asd_manifest.tsv", root)
    (root / "audio").mkdir(parents=True)
    audio16 = soxr.resample(movie.audio, movie.audio_rate, 16000).astype(np.float32)
    soundfile.write(root / "audio" / "conv1.wav", pcm16(audio16), 16000, subtype="PCM_16")
    (root / "faces").mkdir()
    header = ["sample_id", "visual_path", "audio_path", "source_fps", "labels", "start_sec", "visual_kind",
              "audio_sample_rate"]
    rows = [header]
    for key, first, stop, kind, size in AVCC_TRACKS:
        if kind == "npy":
            crops = [cv2.cvtColor(crop_face(movie, f), cv2.COLOR_BGR2GRAY) for f in range(first, stop)]
            faces = np.stack([cv2.resize(c, (size, size), interpolation=cv2.INTER_AREA) for c in crops])
            visual = f"faces/{key}.npy"
            np.save(root / visual, faces)
        else:
            visual = f"faces/{key}"
            (root / visual).mkdir()
            for frame in range(first, stop):
                cv2.imwrite(str(root / visual / f"{frame / movie.fps:.3f}.jpg"), crop_face(movie, frame))
        start_sec = first / movie.fps
        labels = movie.labels[first:stop]
        rows.append([key, visual, "audio/conv1.wav", f"{movie.fps!r}", json.dumps(labels.tolist()), f"{start_sec!r}",
                     kind, "16000"])
        inputs.tracks[key] = ExpectedTrack(key, "audio/conv1.wav", first, stop, labels, movie.fps, start_sec)
    with open(inputs.tsv, "w", encoding="utf-8", newline="") as fp:
        csv.writer(fp, delimiter="\t", lineterminator="\n").writerows(rows)
    return inputs


@dataclass
class MsdwildInputs:
    input_dir: Path
    rttm: Path
    video: str
    fps: float
    frames: int
    labels: np.ndarray
    boxes: tuple


#: The MSDWild-style video's id, and the id of a transient detection (a few frames only: below the 90% rule).
MSD_VIDEO = "00001"
MSD_TRANSIENT_TRACK = "7"


def write_msdwild(root: Path) -> MsdwildInputs:
    """An MSDWild-style corpus in ``root/msdwild_boundingbox_labels``: ``00001.mp4`` (the movie as H.264 with a
    keyframe every 10 frames + AAC, written with PyAV), ``00001.csv`` (``frame, track, x, y, w, h, 1``: the
    detected face as track ``0``, plus a transient track in 5 frames) and ``all.rttm`` (track ``0``'s turns: the
    runs of measured speaking frames)."""
    import av

    movie = load_movie()
    folder = root / "msdwild_boundingbox_labels"
    folder.mkdir(parents=True)
    mp4 = folder / f"{MSD_VIDEO}.mp4"
    with av.open(str(mp4), "w") as container:
        video = container.add_stream("libx264", rate=15)
        video.width, video.height, video.pix_fmt = movie.gray.shape[2], movie.gray.shape[1], "yuv420p"
        video.codec_context.gop_size = 10  # keyframes every 10 frames, as real footage has: windows seek to them
        audio = container.add_stream("aac", rate=16000)
        audio.layout = "mono"
        for image in movie.bgr:
            for packet in video.encode(av.VideoFrame.from_ndarray(image, format="bgr24")):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        import soxr

        pcm = pcm16(soxr.resample(movie.audio, movie.audio_rate, 16000).astype(np.float32))
        frame = av.AudioFrame.from_ndarray(pcm[None, :], format="s16", layout="mono")
        frame.sample_rate = 16000
        for packet in audio.encode(frame):
            container.mux(packet)
        for packet in audio.encode():
            container.mux(packet)
    with open(folder / f"{MSD_VIDEO}.csv", "w", encoding="utf-8", newline="") as fp:
        writer = csv.writer(fp, lineterminator="\n")
        for index, box in enumerate(movie.boxes):
            if box is not None:
                writer.writerow([index, 0, *box, 1])
            if 20 <= index < 25:
                writer.writerow([index, MSD_TRANSIENT_TRACK, 2, 2, 20, 24, 0])
    lines = []
    labels = movie.labels
    run_start = None
    for index in range(movie.frames + 1):
        on = index < movie.frames and labels[index] == 1
        if on and run_start is None:
            run_start = index
        elif not on and run_start is not None:
            start, stop = run_start / 15.0, index / 15.0
            lines.append(f"SPEAKER {MSD_VIDEO} 1 {start:.6f} {stop - start:.6f} <NA> <NA> 0 <NA> <NA>")
            run_start = None
    (folder / "all.rttm").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return MsdwildInputs(folder, folder / "all.rttm", MSD_VIDEO, 15.0, movie.frames, labels, movie.boxes)


def make_asd_pack(tmp_path: Path) -> str:
    """An ``asd`` pack of the AVA-style corpus (three tracks in two clips, real faces, audio and measured labels),
    built in ``tmp_path``; returns the pack's path.  For tests of anything that reads asd packs."""
    from speechpack.packer.adapters.ava import build_ava
    from speechpack.packer.adapters.asd_common import AsdBuildOptions

    inputs = write_ava(Path(tmp_path) / "ava_corpus")
    out = Path(tmp_path) / "asd_pack"
    build_ava(str(inputs.loader_csv), str(inputs.visual_root), str(inputs.audio_root), inputs.split,
              AsdBuildOptions(out=str(out), progress=False))
    return str(out)
