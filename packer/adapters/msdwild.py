"""MSDWild to ``asd`` packs: windows cut from each raw MP4 and its face-box CSV, labelled from an RTTM.

MSDWild ships no loader CSV: each video ``<id>.mp4`` comes with a box file ``<id>.csv``, and speech activity comes
from a separate RTTM release (``all.rttm``; the split files ``few.train.rttm`` ... name the same videos).  The
last column of the box CSV is not an activity label and is ignored.

- **Videos**: every video the RTTM names (in order of first appearance); its ``<id>.csv`` must be in ``--input``
  and its ``<id>.mp4`` in ``--video-root`` (default: ``--input``).  A missing one is a missing input, reported
  with the RTTM line that names the video.
- **Boxes**: header-less rows ``frame, track, a, b, c, d[, ignored ...]``; ``frame`` is the 0-based index of the
  decoded frame, ``track`` the person's id, which is the speaker name the RTTM uses for that person.  ``a b c d``
  is ``x y width height`` (``--box-format xywh``, the default) or ``x1 y1 x2 y2`` (``xyxy``), in pixels.
- **Windows** of ``--window`` seconds (30) every ``window - overlap`` seconds (``--overlap`` 10), in native
  frames, from the first frame with any face.  A track becomes a sample of a window when it has a box in at least
  90% of the window's frames (transient detections are dropped before any face is cut); a frame of the window
  without its box gets a grey face (``packer.faces.crop_square``).
- **Incomplete final window**: discarded by default, as MuVAP's document says (its model has no padding mask, so a
  padded window would teach it artificial silence; packs never pad, but a short window is a length the model was
  not meant to see, and MuVAP's windows are what a MuVAP experiment expects).  A video shorter than one window then
  gives no sample.  ``keep_tail`` (``--keep-tail``) keeps it instead, unpadded, when it holds frames no earlier
  window covered (MuVAP's code keeps tails of at least 2 s: dropping them loses about a third of MSDWild); the 90%
  rule is then measured against the tail's own length, and a tail too short for one 25 Hz model frame is reported
  like any such track.
- **Labels**: frame ``i`` of a window starting at frame ``s`` is speaking when ``(s + i + 0.5) / fps`` falls in one of
  the track's RTTM turns ``[start, start + duration)``.
- **Audio**: the MP4's own audio (PyAV), from the window's start, resampled to 16 kHz, mono.

Sample keys are ``<video>:<first frame, 6 digits>:<track>``; a sample's ``clip`` is its video (overlapping windows
share audio, so a different-clip donor must come from another video).
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass

import numpy as np

from speechpack.packer.adapters.asd_common import PACKED_DIR, AsdBuildOptions, AsdTrack, TrackAudio, build_tracks, read_text
from speechpack.packer.audio.decode import path_problem
from speechpack.packer.build.run import BuildSummary
from speechpack.packer.faces import Box, FaceError, crop_square
from speechpack.schemas.constants import FACE_SHAPE
from speechpack.schemas.errors import ManifestError, SpeechpackError
from speechpack.schemas.units import OVERLAP_SECONDS, WINDOW_SECONDS
from speechpack.schemas.line_problems import LineProblem

DEFAULT_WINDOW_SEC = 30.0
DEFAULT_OVERLAP_SEC = 10.0
#: A track must have a box in at least this fraction of a window's frames (MuVAP's ``min_face_ratio``).
MIN_PRESENCE = 0.9
BOX_FORMATS = ("xywh", "xyxy")
#: Default RTTM file name inside ``--input``.
DEFAULT_RTTM = "all.rttm"


@dataclass(frozen=True)
class VideoWindowFaces:
    """The faces of one track in one window: ``frames`` frames of ``video`` from ``first``, cut around ``boxes``
    (one per frame, ``None`` where the track has no box)."""

    video: str
    first: int
    boxes: tuple

    @property
    def path(self) -> str:
        return self.video

    def count(self) -> int:
        problem = path_problem(self.video)
        if problem is not None:
            raise FaceError(self.video, f"video {problem}")
        return len(self.boxes)

    def read(self) -> np.ndarray:
        import av

        faces = np.empty((len(self.boxes), *FACE_SHAPE), dtype=np.uint8)
        try:
            frames = _window_frames(self.video, self.first, len(self.boxes))
            if frames is None:  # the timestamps cannot be trusted to number the frames: count them from the start
                frames = _counted_frames(self.video, self.first, len(self.boxes))
            row = 0
            for row, image in enumerate(frames, start=1):
                faces[row - 1] = crop_square(image, self.boxes[row - 1])
        except av.error.FFmpegError as err:
            raise FaceError(self.video, f"cannot decode the video ({err})") from None
        if row != len(self.boxes):
            raise FaceError(self.video, f"the video ends at frame {self.first + row}; the window needs frames "
                                        f"{self.first}..{self.first + len(self.boxes) - 1}")
        return faces


def _window_frames(video: str, first: int, count: int) -> list[np.ndarray] | None:
    """Grayscale frames ``first .. first + count - 1`` (fewer where the video ends), decoded from the keyframe
    before ``first`` instead of from the start: a window's frame number is its timestamp times the frame rate.
    None when the timestamps do not number the frames one by one (variable frame rate, missing or repeated
    timestamps, a seek that lands past ``first``): then the caller counts frames from the start, which is what a
    box file's frame numbers mean.  Frames after a keyframe decode the same whichever way the decoder got there."""
    import av

    out: list[np.ndarray] = []
    with av.open(os.path.abspath(video)) as container:  # a path, never an FFmpeg protocol
        stream = container.streams.video[0]
        fps, base, origin = float(stream.average_rate or 0), stream.time_base, stream.start_time or 0
        if fps <= 0 or base is None:
            return None
        if first > 0:
            container.seek(origin + int((first - 0.5) / fps / base), stream=stream, backward=True)
        expected = None
        for frame in container.decode(stream):
            if frame.pts is None:
                return None
            index = round(float((frame.pts - origin) * base) * fps)
            if expected is None and index > first:
                return None
            if expected is not None and index != expected:
                return None
            expected = index + 1
            if index >= first:
                out.append(frame.to_ndarray(format="gray"))
                if len(out) == count:
                    break
    return out


def _counted_frames(video: str, first: int, count: int) -> list[np.ndarray]:
    """Frames ``first .. first + count - 1`` by counting decoded frames from the start (the slow, sure way)."""
    import av

    out: list[np.ndarray] = []
    with av.open(os.path.abspath(video)) as container:  # a path, never an FFmpeg protocol
        for index, frame in enumerate(container.decode(video=0)):
            if index >= first:
                out.append(frame.to_ndarray(format="gray"))
                if len(out) == count:
                    break
    return out


@dataclass(frozen=True)
class _Turn:
    start: float
    end: float


def read_rttm(path: str) -> tuple[dict[str, int], dict[tuple[str, str], list[_Turn]], list[LineProblem]]:
    """``{video: first line}``, ``{(video, speaker): turns}`` and the malformed lines of an RTTM file."""
    if not os.path.isfile(path):
        raise SpeechpackError(f"{path}: RTTM not found (MSDWild's all.rttm ships separately from the boxes; "
                              f"download it, or name it with --rttm)")
    videos: dict[str, int] = {}
    turns: dict[tuple[str, str], list[_Turn]] = {}
    problems: list[LineProblem] = []
    for number, text in enumerate(read_text(path, "RTTM").splitlines(), start=1):
        fields = text.split()
        if not fields or fields[0] != "SPEAKER":
            continue
        try:
            if len(fields) < 8:
                raise ValueError(f"{len(fields)} fields; an RTTM SPEAKER line has at least 8")
            try:
                start, duration = float(fields[3]), float(fields[4])
            except ValueError:
                start = duration = math.nan
            if not (math.isfinite(start) and math.isfinite(duration)) or start < 0 or duration < 0:
                raise ValueError(f"turn start {fields[3]} / duration {fields[4]} must be non-negative numbers")
        except ValueError as err:
            problems.append(LineProblem(number, fields[1] if len(fields) > 1 else None, path, str(err)))
            continue
        videos.setdefault(fields[1], number)
        turns.setdefault((fields[1], fields[7]), []).append(_Turn(start, start + duration))
    return videos, turns, problems


def read_boxes(path: str, box_format: str) -> tuple[dict[str, dict[int, tuple[Box, int]]], list[str]]:
    """``{track: {frame: (box, line)}}`` of a box CSV, and its malformed lines (as messages naming the line)."""
    tracks: dict[str, dict[int, tuple[Box, int]]] = {}
    bad: list[str] = []
    with io.StringIO(read_text(path, "box CSV"), newline="") as fp:
        for number, row in enumerate(csv.reader(fp), start=1):
            if not row or not "".join(row).strip():
                continue
            try:
                if len(row) < 6:
                    raise ValueError(f"{len(row)} column(s); a box row is frame, track, and four coordinates")
                if not row[0].strip().lstrip("-").isdigit():
                    raise ValueError(f"frame {row[0]!r} is not an integer")
                frame, track = int(row[0]), row[1].strip()
                try:
                    a, b, c, d = (float(value) for value in row[2:6])
                except ValueError:
                    raise ValueError(f"box {row[2:6]} is not four numbers") from None
            except ValueError as err:
                if number == 1 and not row[0].strip().lstrip("-").isdigit():
                    continue  # a header row
                bad.append(f"line {number}: {err}")
                continue
            box = Box(a, b, c, d) if box_format == "xywh" else Box(a, b, c - a, d - b)
            if frame < 0 or box.width <= 0 or box.height <= 0:
                bad.append(f"line {number}: frame {frame} box {row[2:6]}: negative frame or empty box")
                continue
            if frame in tracks.setdefault(track, {}):
                bad.append(f"line {number}: track {track!r} has a second box in frame {frame}")
                continue
            tracks[track][frame] = (box, number)
    return tracks, bad


def video_timing(path: str) -> tuple[float, int]:
    """``(fps, frames)`` of a video's first stream: the frame count from the container when it states one,
    else counted from the packets (nothing is decoded)."""
    import av

    try:
        with av.open(os.path.abspath(path)) as container:  # a path, never an FFmpeg protocol
            stream = container.streams.video[0]
            fps = float(stream.average_rate or 0)
            frames = int(stream.frames or 0)
            if frames == 0:
                frames = sum(1 for packet in container.demux(stream) if packet.size)
    except (av.error.FFmpegError, IndexError) as err:
        raise FaceError(path, f"cannot read the video ({err})") from None
    if fps <= 0 or frames == 0:
        raise FaceError(path, f"no usable video stream ({frames} frames at {fps} fps)")
    return fps, frames


def windows(first: int, total: int, window: int, stride: int, keep_tail: bool = False) -> list[tuple[int, int]]:
    """``[start, stop)`` frame windows from ``first``: ``window`` long every ``stride`` while they fit before
    ``total``; with ``keep_tail`` the last one is cut at ``total`` and kept while it covers frames no earlier window
    did (see the module docstring)."""
    spans = []
    start = first
    while start < total:
        stop = min(start + window, total)
        if stop - start < window and not keep_tail:
            break
        spans.append((start, stop))
        if stop == total:
            break
        start += stride
    return spans


def speaking(turns: list[_Turn], start: int, stop: int, fps: float) -> np.ndarray:
    """Per frame of ``[start, stop)``: 1 when the frame's centre time falls in a turn."""
    centres = (np.arange(start, stop, dtype=np.float64) + 0.5) / fps
    labels = np.zeros(stop - start, dtype=np.uint8)
    for turn in turns:
        labels[(centres >= turn.start) & (centres < turn.end)] = 1
    return labels


def read_msdwild(input_dir: str, rttm_path: str, video_root: str, window_sec: float, overlap_sec: float,
                 box_format: str, keep_tail: bool = False) -> tuple[list[AsdTrack], list[LineProblem]]:
    """Every (window, track) of every video the RTTM names, and the problems found without decoding pixels."""
    if box_format not in BOX_FORMATS:
        raise SpeechpackError(f"box format {box_format!r} is not one of {', '.join(BOX_FORMATS)}")
    WINDOW_SECONDS.check(window_sec)
    OVERLAP_SECONDS.check(overlap_sec)
    if not window_sec > 0 or not 0 <= overlap_sec < window_sec:
        raise SpeechpackError(f"need window > 0 and 0 <= overlap < window seconds, got window {window_sec}, "
                              f"overlap {overlap_sec}")
    videos, turns, problems = read_rttm(rttm_path)
    if not videos and not problems:
        raise ManifestError(f"{rttm_path}: the RTTM names no video")
    tracks: list[AsdTrack] = []
    for video, line in videos.items():
        box_path = os.path.join(input_dir, f"{video}.csv")
        mp4 = os.path.join(video_root, f"{video}.mp4")
        absent = [path for path in (box_path, mp4) if not os.path.isfile(path)]
        if absent:  # a placeholder track, so the build reports (or --skip-missing skips) the missing files
            tracks.append(AsdTrack(line=line, key=video, clip=video, source_fps=1.0, labels=np.zeros(0, np.uint8),
                                   faces=VideoWindowFaces(mp4, 0, ()), audio=TrackAudio(mp4), other_inputs=(box_path,)))
            continue
        try:
            fps, total = video_timing(mp4)
        except FaceError as err:
            problems.append(LineProblem(line, video, err.path, err.reason))
            continue
        try:
            boxes, bad = read_boxes(box_path, box_format)
        except ManifestError as err:
            problems.append(LineProblem(line, video, box_path, str(err).split(": ", 1)[1]))
            continue
        problems += [LineProblem(line, video, box_path, message) for message in bad]
        if not boxes:
            problems.append(LineProblem(line, video, box_path, "no face boxes"))
            continue
        first = min(min(frames) for frames in boxes.values())
        spans = windows(first, total, max(1, round(window_sec * fps)), max(1, round((window_sec - overlap_sec) * fps)),
                        keep_tail)
        for start, stop in spans:
            for track, frames in sorted(boxes.items()):
                present = [frame for frame in range(start, stop) if frame in frames]
                if len(present) < MIN_PRESENCE * (stop - start):
                    continue
                tracks.append(AsdTrack(
                    line=frames[present[0]][1], key=f"{video}:{start:06d}:{track}", clip=video, source_fps=fps,
                    labels=speaking(turns.get((video, track), []), start, stop, fps),
                    faces=VideoWindowFaces(mp4, start, tuple(frames[f][0] if f in frames else None
                                                             for f in range(start, stop))),
                    audio=TrackAudio(mp4, start / fps),
                    provenance={"video": f"{video}.mp4", "boxes": f"{video}.csv", "first_frame": start,
                                "track": track}))
    return tracks, problems


def default_out(input_dir: str, rttm_path: str | None = None) -> str:
    """``<dataset root>/packed/<rttm name>``: beside the corpus, one pack per RTTM (split) file (default
    ``INPUT/all.rttm``)."""
    split = os.path.basename(rttm_path or DEFAULT_RTTM)
    split = split[:-len(".rttm")] if split.endswith(".rttm") else split
    return os.path.join(os.path.dirname(os.path.abspath(input_dir)), PACKED_DIR, split)


def build_msdwild(input_dir: str, options: AsdBuildOptions, rttm_path: str | None = None,
                  video_root: str | None = None, window_sec: float = DEFAULT_WINDOW_SEC,
                  overlap_sec: float = DEFAULT_OVERLAP_SEC, box_format: str = "xywh",
                  keep_tail: bool = False) -> BuildSummary:
    """``speechpack build msdwild``: MP4s, box CSVs and an RTTM to an ``asd`` pack of windows (incomplete final
    windows discarded unless ``keep_tail``)."""
    if not os.path.isdir(input_dir):
        raise SpeechpackError(f"{input_dir}: --input is not a directory")
    rttm_path = rttm_path or os.path.join(input_dir, DEFAULT_RTTM)
    video_root = video_root or input_dir
    tracks, problems = read_msdwild(input_dir, rttm_path, video_root, window_sec, overlap_sec, box_format, keep_tail)
    if not tracks and not problems:
        raise SpeechpackError(f"{rttm_path}: no video has a complete {window_sec:g} s window with a track in 90% of "
                              f"its frames (incomplete final windows are discarded: --keep-tail keeps them)")
    return build_tracks(tracks, problems, options, input_path=rttm_path, command="build msdwild",
                        recorded={"input": os.path.abspath(input_dir), "video_root": os.path.abspath(video_root),
                                  "window_sec": window_sec, "overlap_sec": overlap_sec, "box_format": box_format,
                                  "min_presence": MIN_PRESENCE, "keep_tail": keep_tail})


__all__ = ["build_msdwild", "default_out", "read_msdwild", "speaking", "windows"]
