"""AVA-ActiveSpeaker and WASD (same layout, same loader CSV) to ``asd`` packs.

Inputs, as TalkNet-style preprocessing leaves them (MuVAP reads the same):

- the loader CSV, header-less, one face track per line, tab-separated (comma-separated when the first line has no
  tab; a comma-separated label list is then quoted): ``sample_id, <ignored>, fps, labels[, ...]``.  Only these
  columns are read; ``labels`` is a JSON list, one per face crop;
- face crops ``VISUAL_ROOT/SPLIT/<clip>/<sample_id>/<timestamp>.jpg`` (``packer.faces``);
- one WAV per track ``AUDIO_ROOT/SPLIT/<clip>/<sample_id>.wav``, starting where the track starts (so
  ``start_sec`` is 0), at any rate and channel count: resampled with soxr to 16 kHz, mono by mean.

Face directories and WAVs are found by name under any clip directory (a name that two clips share is reported
rather than guessed at).  A track's ``clip`` attribute is the name of its face directory's parent: the video it
was cut from, which is what "a second voice from a different clip" must avoid.

Labels: AVA annotates ``NOT_SPEAKING``, ``SPEAKING_AUDIBLE`` and ``SPEAKING_NOT_AUDIBLE``.  Loader CSVs carry them
already as 0/1 (the CSV generator maps audible speech to 1, the rest to 0); a list may also spell the names out,
and then ``SPEAKING_NOT_AUDIBLE`` counts as 0: a face that speaks without being heard gives the audio-visual model
nothing to match, so training on it as positive teaches lip motion alone.  WASD labels are only ever 0/1.  Any
other value is a bad line.
"""

from __future__ import annotations

import csv
import os

from speechpack.packer.adapters.asd_common import (
    PACKED_DIR,
    AsdBuildOptions,
    AsdTrack,
    JpegFaces,
    TrackAudio,
    build_tracks,
    parse_fps,
    parse_labels,
    read_text,
)
from speechpack.packer.build.run import BuildSummary
from speechpack.schemas.errors import ManifestError, SpeechpackError
from speechpack.schemas.line_problems import LineProblem

#: AVA's annotation names and the label each packs to (``SPEAKING_NOT_AUDIBLE`` is negative; see the docstring).
AVA_LABEL_NAMES = {"NOT_SPEAKING": 0, "SPEAKING_AUDIBLE": 1, "SPEAKING_NOT_AUDIBLE": 0}
#: Columns of the loader CSV that are read: sample id, (ignored), frame rate, labels.
_ID, _FPS, _LABELS = 0, 2, 3


def default_out(visual_root: str, split: str) -> str:
    """MuVAP's default: each corpus keeps its packs beside its own media, so a dataset stays self-contained."""
    return os.path.join(os.path.dirname(os.path.abspath(visual_root)), PACKED_DIR, split)


def _index(root: str, split: str, want_dirs: bool, suffix: str = "") -> tuple[dict[str, str], dict[str, list[str]]]:
    """``{name: path}`` of every entry ``root/split/<clip>/<name><suffix>`` (directories or files), and the names
    found under more than one clip."""
    found: dict[str, list[str]] = {}
    split_dir = os.path.join(root, split)
    if not os.path.isdir(split_dir):
        return {}, {}
    for clip in sorted(os.listdir(split_dir)):
        clip_dir = os.path.join(split_dir, clip)
        if not os.path.isdir(clip_dir):
            continue
        for name in sorted(os.listdir(clip_dir)):
            path = os.path.join(clip_dir, name)
            if want_dirs != os.path.isdir(path) or not name.lower().endswith(suffix):
                continue
            found.setdefault(name[:len(name) - len(suffix)] if suffix else name, []).append(path)
    unique = {name: paths[0] for name, paths in found.items() if len(paths) == 1}
    return unique, {name: paths for name, paths in found.items() if len(paths) > 1}


def read_ava_loader(csv_path: str, visual_root: str, audio_root: str,
                    split: str) -> tuple[list[AsdTrack], list[LineProblem]]:
    """Every line of the loader CSV as a track (a missing face directory or WAV gives a track whose path does not
    exist, for ``--skip-missing`` to see), and every problem found without decoding."""
    if not os.path.isfile(csv_path):
        raise SpeechpackError(f"{csv_path}: loader CSV not found")
    for flag, root in (("--visual-root", visual_root), ("--audio-root", audio_root)):
        if not os.path.isdir(os.path.join(root, split)):
            raise SpeechpackError(f"{os.path.join(root, split)}: no split directory {split!r} under {flag}")
    face_dirs, shared_dirs = _index(visual_root, split, want_dirs=True)
    wavs, shared_wavs = _index(audio_root, split, want_dirs=False, suffix=".wav")
    text = read_text(csv_path, "loader CSV")
    first = next((line for line in text.splitlines() if line.strip()), "")
    delimiter = "\t" if "\t" in first else ","
    tracks: list[AsdTrack] = []
    problems: list[LineProblem] = []
    first_line: dict[str, int] = {}
    for number, row in enumerate(csv.reader(text.splitlines(), delimiter=delimiter), start=1):
        if not row or not "".join(row).strip():
            continue
        key = row[_ID].strip() or None
        try:
            if len(row) <= _LABELS:
                raise ValueError(f"{len(row)} column(s); the loader CSV needs sample_id, _, fps, labels")
            if key is None:
                raise ValueError("empty sample_id")
            if key in first_line:
                raise ValueError(f"duplicate sample_id (first on line {first_line[key]})")
            first_line[key] = number
            for name, shared, what in ((key, shared_dirs, "face directories"), (key, shared_wavs, "WAVs")):
                if name in shared:
                    raise ValueError(f"{len(shared[name])} {what} are named {name!r} ({', '.join(shared[name])}): "
                                     f"ambiguous")
            face_dir = face_dirs.get(key, os.path.join(visual_root, split, "*", key))
            wav = wavs.get(key, os.path.join(audio_root, split, "*", f"{key}.wav"))
            clip = os.path.basename(os.path.dirname(face_dir)) if key in face_dirs else key.split(":")[0]
            tracks.append(AsdTrack(
                line=number, key=key, clip=clip, source_fps=parse_fps(row[_FPS].strip()),
                labels=parse_labels(row[_LABELS], AVA_LABEL_NAMES), faces=JpegFaces(face_dir), audio=TrackAudio(wav),
                provenance={"faces": os.path.relpath(face_dir, visual_root),
                            "audio": os.path.relpath(wav, audio_root)}))
        except ValueError as err:
            problems.append(LineProblem(number, key, None, str(err)))
    if not tracks and not problems:
        raise ManifestError(f"{csv_path}: the loader CSV holds no lines")
    return tracks, problems


def build_ava(csv_path: str, visual_root: str, audio_root: str, split: str, options: AsdBuildOptions,
              corpus: str = "ava") -> BuildSummary:
    """``speechpack build ava|wasd``: a loader CSV, its face directories and WAVs to an ``asd`` pack."""
    tracks, problems = read_ava_loader(csv_path, visual_root, audio_root, split)
    return build_tracks(tracks, problems, options, input_path=csv_path, command=f"build {corpus}",
                        recorded={"split": split, "visual_root": os.path.abspath(visual_root),
                                  "audio_root": os.path.abspath(audio_root)})


__all__ = ["AVA_LABEL_NAMES", "build_ava", "default_out", "read_ava_loader"]
