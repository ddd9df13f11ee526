"""The canonical face track every ``asd`` adapter produces, and the build they all run.

MuVAP calls AVCC's manifest (``packer.adapters.avcc``) the canonical ASD TSV: one row per face track, naming
everything a track needs.  This module holds what the ``asd`` adapters (``avcc``, ``ava``, ``msdwild``) share:
:class:`AsdTrack` (a track as any adapter describes it), :func:`plan_track` (sizes and invariants from file
headers), :func:`load_track` (decode), :class:`AsdBuildOptions` and :func:`build_tracks` (the build, with
``--skip-missing``).  Each adapter only turns its own inputs into ``AsdTrack`` s.

A track becomes one sample of kind ``asd``: ``faces`` (uint8 ``[F, 112, 112]``, ``packer.faces``), ``labels`` (uint8
``[F]``, 0/1, one per native frame), ``audio`` (mono int16 at 16 kHz, unnormalised); attributes ``source_fps``,
``start_sec`` and ``clip`` (the recording the track was cut from, so the tracks of one conversation share a clip).
Invariants checked before anything is written: faces == labels == ``F``; audio samples ==
``round(F / source_fps * 16000)`` (the audio is cut from ``start_sec``, or zero-padded where the recording ends
early: the padding is recorded in the sample's provenance); ``floor(F / source_fps * 25 + 1e-9) > 0`` model frames.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np
import soundfile

from speechpack.packer.audio import SOUNDFILE_EXTENSIONS, Audio, AudioError, probe_audio, read_audio, resample, to_stored
from speechpack.packer.audio.decode import path_problem
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.faces import FaceError, jpeg_frames, npy_face_count, read_jpeg_faces, read_npy_faces
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.schemas.constants import ASD_SAMPLE_RATE, KIND_ASD, STREAM_AUDIO, STREAM_FACES, STREAM_LABELS
from speechpack.schemas.documents import parse_json
from speechpack.schemas.errors import BuildError, ManifestError, NpyHeaderError, SpeechpackError
from speechpack.schemas.npyfile import read_npy_header
from speechpack.schemas.timebase import audio_sample_count, model_frame_count, track_start_sample
from speechpack.schemas.line_problems import LineProblem

#: Where an asd pack goes by default, beside its corpus: ``<dataset root>/packed/<split>`` (MuVAP's ``--output``
#: default; each adapter says what its dataset root and split are).
PACKED_DIR = "packed"
#: Reason prefix of a missing input: what ``--skip-missing`` skips (and nothing else).
MISSING = "missing input"


# ---------------------------------------------------------------------------------------------------------------
# The canonical track
# ---------------------------------------------------------------------------------------------------------------


class FaceSource(Protocol):
    """Where a track's faces come from: ``path`` names it in errors, ``count()`` reads only headers (for the
    plan), ``read()`` decodes uint8 ``[F, *FACE_SHAPE]``.  Picklable, for worker processes."""

    @property
    def path(self) -> str: ...

    def count(self) -> int: ...

    def read(self) -> np.ndarray: ...


@dataclass(frozen=True)
class JpegFaces:
    """A directory of JPEG crops named by timestamp (``packer.faces.jpeg_frames``)."""

    directory: str

    @property
    def path(self) -> str:
        return self.directory

    def count(self) -> int:
        return len(jpeg_frames(self.directory))

    def read(self) -> np.ndarray:
        return read_jpeg_faces(self.directory)


@dataclass(frozen=True)
class NpyFaces:
    """A uint8 ``[F, H, W]`` array of crops (``packer.faces.read_npy_faces``)."""

    path: str

    def count(self) -> int:
        return npy_face_count(self.path)

    def read(self) -> np.ndarray:
        return read_npy_faces(self.path)


@dataclass(frozen=True)
class TrackAudio:
    """Where a track's audio is: a file (anything ``packer.audio`` decodes, or a 1-D ``.npy``), from ``start_sec``.
    ``sample_rate`` is the declared rate: required for ``.npy`` audio (it has no header that says), and checked
    against the file's header otherwise."""

    path: str
    start_sec: float = 0.0
    sample_rate: int | None = None


@dataclass(frozen=True, eq=False)
class AsdTrack:
    """One face track, as any adapter describes it: ``labels`` is uint8 0/1 per native frame; ``provenance`` is
    recorded in the sample's index record."""

    line: int
    key: str
    clip: str
    source_fps: float
    labels: np.ndarray
    faces: FaceSource
    audio: TrackAudio
    provenance: dict = field(default_factory=dict)
    #: Input files the track needs besides its faces and audio (MSDWild's box CSV).
    other_inputs: tuple[str, ...] = ()

    def missing_inputs(self) -> list[str]:
        """The input paths of this track that do not exist (what ``--skip-missing`` is about), each once."""
        paths = dict.fromkeys((self.faces.path, self.audio.path, *self.other_inputs))
        return [path for path in paths if not os.path.exists(path)]


def missing_problems(track: AsdTrack) -> list[LineProblem]:
    """One problem per missing input of ``track`` (so a failed build lists every missing file)."""
    return [LineProblem(track.line, track.key, path, f"{MISSING}: no such file or directory")
            for path in track.missing_inputs()]


def read_text(path: str, what: str) -> str:
    """A whole input manifest as text; raise ``ManifestError`` naming the file and the byte when it is not UTF-8
    (newlines kept as written, so ``csv`` sees quoted line breaks)."""
    with open(path, "rb") as fp:
        data = fp.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ManifestError(f"{path}: the {what} is not UTF-8 text ({err.reason} at byte {err.start})") from None


def parse_labels(text: str, names: dict[str, int] | None = None) -> np.ndarray:
    """A JSON list of 0/1 per frame (never ``eval``-ed) as uint8; ``names`` maps label strings to 0/1 where a
    corpus may spell them out (AVA).  Raise ``ValueError`` saying what is wrong."""
    try:
        values = parse_json(text, "labels", error=ValueError)
    except ValueError as err:
        raise ValueError(f"labels are not a JSON list ({err}): {text[:60]!r}") from None
    if not isinstance(values, list) or not values:
        raise ValueError(f"labels must be a non-empty JSON list of 0/1, got {text[:60]!r}")
    out = np.empty(len(values), dtype=np.uint8)
    for i, value in enumerate(values):
        if isinstance(value, str) and names is not None and value in names:
            out[i] = names[value]
        elif type(value) is int and value in (0, 1):
            out[i] = value
        else:
            allowed = "0 or 1" + (f" (or {', '.join(names)})" if names else "")
            raise ValueError(f"label {i} is {value!r}; a label must be {allowed}")
    return out


def parse_fps(text: str) -> float:
    try:
        fps = float(text)
    except ValueError:
        raise ValueError(f"source_fps {text!r} is not a number") from None
    if not math.isfinite(fps) or fps <= 0:
        raise ValueError(f"source_fps must be a positive frame rate, got {text!r}")
    return fps


def _header_of(audio: TrackAudio) -> tuple[int, int]:
    """``(sample_rate, frames)`` of a track's audio file, from its header."""
    if audio.path.lower().endswith(".npy"):
        problem = path_problem(audio.path)
        if problem is not None:
            raise AudioError(audio.path, f"audio {problem}")
        try:
            header = read_npy_header(audio.path)
        except NpyHeaderError as err:
            raise AudioError(audio.path, f"unreadable .npy header ({err.reason})") from None
        if len(header.shape) != 1 or header.dtype.kind not in "iuf" or header.shape[0] == 0:
            raise AudioError(audio.path, f".npy audio must be a non-empty 1-D numeric array, got {header.dtype} "
                                         f"{list(header.shape)}")
        if audio.sample_rate is None:
            raise AudioError(audio.path, ".npy audio needs its sample rate (the audio_sample_rate column)")
        return audio.sample_rate, header.shape[0]
    info = probe_audio(audio.path)
    if audio.sample_rate is not None and audio.sample_rate != info.sample_rate:
        raise AudioError(audio.path, f"the manifest says {audio.sample_rate} Hz, the file is {info.sample_rate} Hz")
    return info.sample_rate, info.frames


def plan_track(track: AsdTrack) -> SamplePlan:
    """Check a track's invariants from headers only (no pixel or sample decoded) and size its sample."""
    frames = track.faces.count()
    if frames != len(track.labels):
        raise FaceError(track.faces.path, f"{frames} faces but {len(track.labels)} labels: a track needs one label "
                                          f"per native frame")
    if int(model_frame_count(frames, track.source_fps)) == 0:
        raise FaceError(track.faces.path, f"{frames} frame(s) at {track.source_fps:g} fps is shorter than one "
                                          f"25 Hz model frame: the model cannot see this track")
    rate, available = _header_of(track.audio)
    first = track_start_sample(track.audio.start_sec, rate)
    if track.audio.start_sec < 0 or first >= available:
        raise AudioError(track.audio.path, f"start_sec {track.audio.start_sec:g} is outside the recording "
                                           f"({available / rate:.3f} s long)")
    samples = int(audio_sample_count(frames, track.source_fps))
    return SamplePlan(line=track.line, key=track.key, num_frames=samples,
                      elements={STREAM_AUDIO: samples, STREAM_FACES: frames, STREAM_LABELS: frames})


#: Audio read on each side of a track before resampling, then cut away, so the resampler's filter sees the real
#: signal at the track's edges instead of silence (its warm-up would otherwise smear the first milliseconds).
RESAMPLE_CONTEXT_SEC = 0.02


def _source_frames(audio: TrackAudio, begin: int, count: int, rate: int) -> np.ndarray:
    """Frames ``[begin, begin + count)`` of a track's audio file (fewer where it ends), mono by the channel mean:
    int16 when the file is mono 16-bit PCM at 16 kHz (stored as it is), else float32."""
    if audio.path.lower().endswith(".npy"):
        stored = np.load(audio.path, mmap_mode="r", allow_pickle=False)[begin:begin + count]
        if stored.dtype.kind in "iu":
            info = np.iinfo(stored.dtype)
            data = stored.astype(np.float32) / np.float32(max(abs(info.min), info.max))
        else:
            data = np.asarray(stored, dtype=np.float32)
        if not np.isfinite(data).all():
            raise AudioError(audio.path, "audio holds NaN/Inf values")
        return np.ascontiguousarray(data[None, :])
    if os.path.splitext(audio.path)[1].lower() in SOUNDFILE_EXTENSIONS:
        try:
            with soundfile.SoundFile(audio.path) as sound:
                sound.seek(begin)
                int16 = sound.subtype == "PCM_16" and rate == ASD_SAMPLE_RATE and sound.channels == 1
                data = sound.read(count, dtype="int16" if int16 else "float32", always_2d=True).T
        except (soundfile.LibsndfileError, RuntimeError, ValueError, TypeError) as err:
            raise AudioError(audio.path, f"cannot decode audio ({err})") from None
        if not int16 and not np.isfinite(data).all():
            raise AudioError(audio.path, "audio holds NaN/Inf values")
    else:  # containers soundfile cannot read (MSDWild's mp4): decoded whole by PyAV, once per process
        data = _decoded(audio.path)[:, begin:begin + count]
    if data.shape[0] > 1:
        data = data.astype(np.float32).mean(axis=0, keepdims=True)
    return np.ascontiguousarray(data)


@functools.lru_cache(maxsize=2)
def _decoded(path: str) -> np.ndarray:
    """A whole recording decoded by PyAV: the tracks of one video follow each other, so it is decoded once."""
    return read_audio(path).data


def track_audio(audio: TrackAudio, rate: int, samples: int) -> tuple[np.ndarray, int]:
    """A track's audio at 16 kHz, mono, exactly ``samples`` long from ``start_sec``: ``[1, samples]`` (int16 when
    stored as it is, else float32), and the zero padding added where the recording ended early.

    Resampling reads ``RESAMPLE_CONTEXT_SEC`` more on each side and cuts it away afterwards.  The context before
    is a whole number of resampling periods (``rate / gcd(rate, 16000)`` source frames make a whole number of
    output samples), so the cut falls exactly on the output sample the track starts at."""
    first = track_start_sample(audio.start_sec, rate)
    if rate == ASD_SAMPLE_RATE:
        data = _source_frames(audio, first, samples, rate)
    else:
        period = rate // math.gcd(rate, ASD_SAMPLE_RATE)
        context = period * math.ceil(RESAMPLE_CONTEXT_SEC * rate / period)
        lead = min(context, first - first % period)
        span = _source_frames(audio, first - lead, lead + math.ceil(samples * rate / ASD_SAMPLE_RATE) + context,
                              rate)
        resampled = resample(Audio(span.astype(np.float32, copy=False), rate), ASD_SAMPLE_RATE).data
        skip = lead * ASD_SAMPLE_RATE // rate
        data = resampled[:, skip:skip + samples]
    padding = samples - data.shape[1]
    if padding > 0:
        data = np.concatenate([data, np.zeros((1, padding), dtype=data.dtype)], axis=1)
    return np.ascontiguousarray(data), max(padding, 0)


def load_track(track: AsdTrack) -> PackedSample:
    """Decode a track: faces, labels, and its audio resampled (soxr) to 16 kHz, mono by mean, cut to the pack
    invariant.  Raise ``AudioError`` (or ``FaceError``) naming the file at fault."""
    faces = track.faces.read()
    if len(faces) != len(track.labels):
        raise FaceError(track.faces.path, f"decoded {len(faces)} faces, the plan counted {len(track.labels)}")
    samples = int(audio_sample_count(len(faces), track.source_fps))
    rate, _frames = _header_of(track.audio)
    data, padding = track_audio(track.audio, rate, samples)
    provenance = dict(track.provenance)
    if padding:
        provenance["audio_padded_samples"] = padding
    return PackedSample(
        key=track.key, speakers=(track.key,), line=track.line, orig_sample_rate=rate, num_frames=samples,
        provenance=provenance,
        streams={STREAM_AUDIO: [to_stored(Audio(data, ASD_SAMPLE_RATE))],
                 STREAM_FACES: [StoredArray(faces)],
                 STREAM_LABELS: [StoredArray(np.ascontiguousarray(track.labels, dtype=np.uint8))]},
        attrs={"source_fps": float(track.source_fps), "start_sec": float(track.audio.start_sec), "clip": track.clip},
    )


# ---------------------------------------------------------------------------------------------------------------
# The build every asd adapter runs
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AsdBuildOptions(BuildOptions):
    """``BuildOptions`` of ``speechpack build ava|wasd|avcc|msdwild``: the rate is always 16 kHz
    (``ASD_SAMPLE_RATE``, the rate the model reads).

    ``skip_missing`` packs what is there when inputs are missing (a partial development copy) and records the
    missing ones in ``skipped.json``; every other problem still fails the build unless ``skip_bad``."""

    sample_rate: int = ASD_SAMPLE_RATE
    skip_missing: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sample_rate != ASD_SAMPLE_RATE:
            raise SpeechpackError(f"asd packs are stored at {ASD_SAMPLE_RATE} Hz, got sample_rate {self.sample_rate}")

    def recorded(self) -> dict:
        return {**super().recorded(), "skip_missing": self.skip_missing}


class _StrictFailure(Exception):
    """A bad track in a ``--skip-missing`` build without ``--skip-bad``: stops the build (see ``build_tracks``)."""

    def __init__(self, problem: LineProblem):
        super().__init__(problem)
        self.problem = problem


@dataclass(frozen=True)
class _Strict:
    """``step`` with bad input turned into :class:`_StrictFailure`, which the build does not catch (picklable,
    for worker processes)."""

    step: Callable

    def __call__(self, track: AsdTrack):
        try:
            return self.step(track)
        except AudioError as err:
            raise _StrictFailure(LineProblem(track.line, track.key, err.path, err.reason)) from None


def build_tracks(tracks: Sequence[AsdTrack], problems: Sequence[LineProblem], options: AsdBuildOptions, *,
                 input_path: str, command: str, recorded: dict) -> BuildSummary:
    """Pack ``tracks`` (and report ``problems`` found while reading the input) as an ``asd`` pack.

    Missing inputs are problems like any other: by default the build fails and lists every one of them.  With
    ``skip_missing`` the tracks whose inputs are missing are left out and recorded in ``skipped.json``, while any
    other problem still fails the build (unless ``skip_bad``): every header problem is listed before anything is
    written, and a file that only fails to decode stops the build at its line.
    """
    tracks = list(tracks)
    missing = [problem for track in tracks for problem in missing_problems(track)]
    present = [track for track in tracks if not track.missing_inputs()]
    recorded = {**options.recorded(), **recorded}
    common = dict(kind=KIND_ASD, input_path=input_path, command=command, recorded_options=recorded)
    if not (options.skip_missing and missing) or options.skip_bad:
        return run_build(items=present, problems=sorted([*problems, *missing], key=lambda p: p.line),
                         plan=plan_track, load=load_track, options=options, **common)
    bad = list(problems)
    for track in present:
        try:
            plan_track(track)
        except AudioError as err:
            bad.append(LineProblem(track.line, track.key, err.path, err.reason))
    if bad:
        bad.sort(key=lambda p: p.line)
        raise BuildError(f"{input_path}: {len(bad)} bad line(s) besides {len(missing)} missing input(s); nothing was "
                         f"packed (fix them, or pass --skip-bad as well)", bad)
    try:
        return run_build(items=present, problems=missing, plan=_Strict(plan_track), load=_Strict(load_track),
                         options=dataclasses.replace(options, skip_bad=True), **common)
    except _StrictFailure as failure:
        raise BuildError(f"{input_path}: a track failed to decode; nothing was packed (fix it, or pass --skip-bad "
                         f"as well)", [failure.problem]) from None


__all__ = ["MISSING", "PACKED_DIR", "AsdBuildOptions", "AsdTrack", "FaceSource", "JpegFaces", "NpyFaces", "TrackAudio",
           "build_tracks", "load_track", "missing_problems", "parse_fps", "parse_labels", "plan_track", "read_text",
           "track_audio"]
