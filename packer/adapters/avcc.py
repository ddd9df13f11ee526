"""AVCC's headered TSV to an ``asd`` pack (``speechpack build avcc``).

MuVAP calls AVCC's manifest the canonical ASD TSV: one row per face track, naming everything a track needs::

    sample_id  visual_path  audio_path  source_fps  labels  start_sec  visual_kind  audio_sample_rate
    conv1_spk1 faces/conv1_spk1.npy  audio/conv1.wav  25.0  [0,1,1,0]  12.0  npy  16000

Each row becomes an ``AsdTrack`` (``packer.adapters.asd_common``, which also says what a track's sample holds and
the invariants checked); its ``clip`` is AVCC's ``audio_path`` as written, so the tracks of one conversation share
a clip.

TSV rules: columns by header name (any order); ``sample_id``, ``visual_path``, ``audio_path``, ``source_fps`` and
``labels`` are required; ``start_sec`` (default 0), ``visual_kind`` (``npy`` or ``jpg``; default from the path:
``*.npy`` is an array, anything else a JPEG directory) and ``audio_sample_rate`` (required for ``.npy`` audio,
checked against the header otherwise) are optional; other columns are kept as provenance.  ``labels`` is a JSON
list of 0/1 (parsed as JSON, never evaluated).  Relative paths are resolved against ``--root``.
"""

from __future__ import annotations

import csv
import io
import math
import os

from speechpack.packer.adapters.asd_common import (
    PACKED_DIR,
    AsdBuildOptions,
    AsdTrack,
    JpegFaces,
    NpyFaces,
    TrackAudio,
    build_tracks,
    parse_fps,
    parse_labels,
    read_text,
)
from speechpack.packer.build.run import BuildSummary
from speechpack.schemas.errors import ManifestError, SpeechpackError
from speechpack.schemas.line_problems import LineProblem

#: Columns of the AVCC TSV: required, then optional.
REQUIRED_COLUMNS = ("sample_id", "visual_path", "audio_path", "source_fps", "labels")
OPTIONAL_COLUMNS = ("start_sec", "visual_kind", "audio_sample_rate")
VISUAL_KINDS = ("npy", "jpg")


def read_avcc_tsv(tsv_path: str, root: str) -> tuple[list[AsdTrack], list[LineProblem]]:
    """Every row of an AVCC TSV as a track, and every problem found without opening a media file."""
    if not os.path.isfile(tsv_path):
        raise SpeechpackError(f"{tsv_path}: TSV not found")
    tracks: list[AsdTrack] = []
    problems: list[LineProblem] = []
    first_line: dict[str, int] = {}
    with io.StringIO(read_text(tsv_path, "TSV"), newline="") as fp:
        reader = csv.DictReader(fp, delimiter="\t")
        header = reader.fieldnames or []
        absent = [name for name in REQUIRED_COLUMNS if name not in header]
        if absent:
            raise ManifestError(f"{tsv_path}:1: header lacks the column(s) {', '.join(absent)} (it has "
                                f"{', '.join(header) or 'nothing'})")
        for row in reader:
            line = reader.line_num
            key = (row.get("sample_id") or "").strip() or None
            try:
                if key is None:
                    raise ValueError("empty sample_id")
                if key in first_line:
                    raise ValueError(f"duplicate sample_id (first on line {first_line[key]})")
                first_line[key] = line
                tracks.append(_avcc_track(row, line, key, root))
            except ValueError as err:
                problems.append(LineProblem(line, key, None, str(err)))
    if not tracks and not problems:
        raise ManifestError(f"{tsv_path}: the TSV holds no rows")
    return tracks, problems


def _avcc_track(row: dict, line: int, key: str, root: str) -> AsdTrack:
    if None in row or any(row.get(name) is None for name in REQUIRED_COLUMNS):
        raise ValueError("the row does not have as many fields as the header")
    visual, audio = row["visual_path"].strip(), row["audio_path"].strip()
    if not visual or not audio:
        raise ValueError("visual_path and audio_path must not be empty")
    kind = (row.get("visual_kind") or "").strip().lower() or ("npy" if visual.lower().endswith(".npy") else "jpg")
    if kind not in VISUAL_KINDS:
        raise ValueError(f"visual_kind {kind!r} is not one of {', '.join(VISUAL_KINDS)}")
    start_text = (row.get("start_sec") or "").strip()
    try:
        start_sec = float(start_text) if start_text else 0.0
    except ValueError:
        raise ValueError(f"start_sec {start_text!r} is not a number") from None
    if not math.isfinite(start_sec) or start_sec < 0:
        raise ValueError(f"start_sec must be a non-negative number of seconds, got {start_text!r}")
    rate_text = (row.get("audio_sample_rate") or "").strip()
    try:
        rate = int(rate_text) if rate_text else None
    except ValueError:
        raise ValueError(f"audio_sample_rate {rate_text!r} is not an integer") from None
    if rate is not None and rate <= 0:
        raise ValueError(f"audio_sample_rate must be positive, got {rate}")
    visual_path, audio_path = (p if os.path.isabs(p) else os.path.join(root, p) for p in (visual, audio))
    extra = {name: value for name, value in row.items() if name not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS}
    provenance = {"visual_path": visual, "audio_path": audio, **({"extra": extra} if extra else {})}
    return AsdTrack(line=line, key=key, clip=os.path.normpath(audio), source_fps=parse_fps(row["source_fps"].strip()),
                    labels=parse_labels(row["labels"]),
                    faces=NpyFaces(visual_path) if kind == "npy" else JpegFaces(visual_path),
                    audio=TrackAudio(audio_path, start_sec, rate), provenance=provenance)


def default_out(root: str, split: str | None) -> str:
    """MuVAP's default for AVCC: ``<root>/packed/<split>``; without a split there is no default."""
    if not split:
        raise SpeechpackError("build avcc: give --out (MuVAP: --output), or --split to pack into "
                              "<root>/packed/<split>")
    return os.path.join(os.path.abspath(root), PACKED_DIR, split)


def build_avcc(tsv_path: str, root: str, options: AsdBuildOptions) -> BuildSummary:
    """``speechpack build avcc``: an AVCC TSV (paths relative to ``root``) to an ``asd`` pack."""
    if not os.path.isdir(root):
        raise SpeechpackError(f"{root}: --root is not a directory")
    tracks, problems = read_avcc_tsv(tsv_path, root)
    return build_tracks(tracks, problems, options, input_path=tsv_path, command="build avcc",
                        recorded={"root": os.path.abspath(root)})


__all__ = ["OPTIONAL_COLUMNS", "REQUIRED_COLUMNS", "VISUAL_KINDS", "build_avcc", "default_out", "read_avcc_tsv"]
