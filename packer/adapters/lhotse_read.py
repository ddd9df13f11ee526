"""Lhotse manifests to Lhotse cuts, each with the line of the manifest it came from (``speechpack build lhotse``).

Three inputs, each what Lhotse's recipes and tools write (https://lhotse.readthedocs.io, "Representing a corpus"):

- ``--cuts``: a CutSet in JSON lines (``cuts.jsonl`` or ``cuts.jsonl.gz``, ``CutSet.to_file``), one cut a line.
- ``--recordings`` and ``--supervisions``: a RecordingSet and a SupervisionSet in JSON lines.  Each supervision
  becomes one cut spanning ``[start, start + duration)`` of its recording with every channel of the recording
  (what ``CutSet.from_manifests(...).trim_to_supervisions(keep_all_channels=True)`` gives, one supervision per
  cut); its line is the supervision's line.
- ``--shar``: a Lhotse Shar directory (``CutSet.to_shar``): ``cuts.NNNNNN.jsonl(.gz)`` and one tar per field.
  Lhotse's own ``CutSet.from_shar`` attaches each cut's audio from the ``recording`` tars, in memory; a cut's line
  is its line in its shard's cuts file.  The compressed audio of the whole directory is held in memory while it
  is packed (Shar exists to be streamed; build a very large Shar corpus a few shards at a time).

Every line is parsed on its own with Lhotse's deserialiser, so a bad line is a problem of that line (file, line,
key), never a traceback for the whole build; every problem is collected.  Lhotse is imported here, lazily: it is
the optional extra ``speechpack[lhotse]``.
"""

from __future__ import annotations

import glob
import gzip
import os
from dataclasses import dataclass

from schemas.errors import SpeechpackError
from schemas.jsonlines import decode_line, parse_json_line
from schemas.wesep_list import LineProblem

#: What a manifest file name must end with: Lhotse's JSON-lines manifests (recipes write ``.jsonl.gz``).
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")
#: Keys ``CutSet.from_shar`` adds to a cut's ``custom``: where Lhotse read it from, not a property of the cut.
SHAR_BOOKKEEPING = frozenset({"shard_origin", "shar_epoch", "dataloading_info"})


@dataclass(frozen=True)
class CutLine:
    """A cut and where it came from: ``path`` (the manifest file) and its 1-based ``line``."""

    line: int
    path: str
    cut: object


@dataclass(frozen=True)
class ReadCuts:
    cuts: list[CutLine]
    problems: list[LineProblem]


def require_lhotse():
    """The ``lhotse`` module, or a ``SpeechpackError`` saying how to install it."""
    try:
        import lhotse
    except ImportError:
        raise SpeechpackError("speechpack build/export lhotse needs the lhotse package: "
                              "pip install 'speechpack[lhotse]'") from None
    return lhotse


def _open_lines(path: str):
    if not os.path.isfile(path):
        raise SpeechpackError(f"{path}: manifest not found")
    if not path.endswith(JSONL_SUFFIXES):
        raise SpeechpackError(f"{path}: expected a Lhotse manifest in JSON lines ({', '.join(JSONL_SUFFIXES)}; "
                              f"convert others with lhotse's load_manifest(...).to_file('x.jsonl.gz'))")
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _manifest_lines(path: str, expected: type, what: str):
    """``(line, key, object_or_None, problem_or_None)`` for every non-blank line of a JSON-lines manifest."""
    from lhotse.serialization import deserialize_item

    with _open_lines(path) as fp:
        try:
            for number, raw in enumerate(fp, start=1):
                text, problem = decode_line(raw)
                if problem is not None:
                    yield number, None, None, problem
                    continue
                if not text.strip():
                    continue
                try:
                    data = parse_json_line(text)
                except ValueError as err:
                    yield number, None, None, str(err)
                    continue
                if not isinstance(data, dict):
                    yield number, None, None, f"expected a JSON object, got {type(data).__name__}"
                    continue
                key = data.get("id") if isinstance(data.get("id"), str) else None
                try:
                    item = deserialize_item(dict(data))
                except Exception as err:  # Lhotse raises KeyError/TypeError/ValueError/AssertionError for bad fields
                    yield number, key, None, f"not a Lhotse {what}: {_reason(err)}"
                    continue
                if not isinstance(item, expected):
                    yield number, key, None, f"not a Lhotse {what} (a {type(item).__name__})"
                    continue
                yield number, key, item, None
        except (OSError, EOFError) as err:  # a truncated or corrupt .gz
            raise SpeechpackError(f"{path}: unreadable ({err})") from None


def _reason(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"missing field {err.args[0]!r}"
    return str(err) or type(err).__name__


def _collect(path: str, expected: type, what: str) -> tuple[list[CutLine], list[LineProblem]]:
    good, problems, first = [], [], {}
    for number, key, item, problem in _manifest_lines(path, expected, what):
        if problem is None and item.id in first:
            problem = f"duplicate id (first on line {first[item.id]})"
        if problem is not None:
            problems.append(LineProblem(number, key, path, problem))
            continue
        first[item.id] = number
        good.append(CutLine(number, path, item))
    return good, problems


def read_cuts(cuts_path: str) -> ReadCuts:
    """Every cut of a CutSet manifest, with its line; bad lines and duplicate ids as problems."""
    require_lhotse()
    from lhotse.cut import Cut

    return ReadCuts(*_collect(cuts_path, Cut, "cut"))


def read_recordings_supervisions(recordings_path: str, supervisions_path: str) -> ReadCuts:
    """One cut per supervision, cut from its recording with all the recording's channels (see the module doc)."""
    require_lhotse()
    from lhotse import Recording, SupervisionSegment
    from lhotse.utils import fastcopy

    recordings, problems = _collect(recordings_path, Recording, "recording")
    supervisions, supervision_problems = _collect(supervisions_path, SupervisionSegment, "supervision")
    problems += supervision_problems
    by_id = {entry.cut.id: entry.cut for entry in recordings}
    cuts = []
    for entry in supervisions:
        supervision = entry.cut
        recording = by_id.get(supervision.recording_id)
        if recording is None:
            problems.append(LineProblem(entry.line, supervision.id, supervisions_path,
                                        f"recording_id {supervision.recording_id!r} is not in {recordings_path}"))
            continue
        end = supervision.start + supervision.duration
        if supervision.start < 0 or supervision.duration <= 0 or end > recording.duration + 1e-6:
            problems.append(LineProblem(entry.line, supervision.id, supervisions_path,
                                        f"span [{supervision.start}, {end}) s is outside recording "
                                        f"{recording.id!r} ({recording.duration} s)"))
            continue
        cut = recording.to_cut().truncate(offset=supervision.start, duration=supervision.duration,
                                          keep_excessive_supervisions=False)
        cut = fastcopy(cut, id=supervision.id, supervisions=[fastcopy(supervision, start=0.0)])
        cuts.append(CutLine(entry.line, supervisions_path, cut))
    return ReadCuts(cuts, problems)


def read_shar(shar_dir: str) -> ReadCuts:
    """Every cut of a Shar directory with its audio attached in memory by ``CutSet.from_shar``."""
    lhotse = require_lhotse()
    from lhotse.cut import Cut
    from lhotse.utils import fastcopy

    if not os.path.isdir(shar_dir):
        raise SpeechpackError(f"{shar_dir}: Shar directory not found")
    cut_files = sorted(glob.glob(os.path.join(shar_dir, "cuts.*.jsonl*")))
    if not cut_files:
        raise SpeechpackError(f"{shar_dir}: not a Lhotse Shar directory (no cuts.NNNNNN.jsonl.gz)")
    cuts, problems = [], []
    for cut_file in cut_files:
        stem = os.path.basename(cut_file).split(".")[1]
        recording_tars = sorted(glob.glob(os.path.join(shar_dir, f"recording.{stem}.tar*")))
        if len(recording_tars) != 1:
            raise SpeechpackError(f"{shar_dir}: shard {stem} has no recording.{stem}.tar (export the Shar with "
                                  f"fields={{'recording': ...}}: speechpack reads the audio Lhotse stored)")
        parsed, shard_problems = _collect(cut_file, Cut, "cut")
        problems += shard_problems
        if shard_problems:
            continue  # the shard's cuts and tar members no longer pair up line by line
        try:
            loaded = list(lhotse.CutSet.from_shar(fields={"cuts": [cut_file], "recording": recording_tars}))
        except Exception as err:  # a corrupt tar, a member that does not match its cut
            raise SpeechpackError(f"{recording_tars[0]}: unreadable Shar shard ({_reason(err)})") from None
        if [c.id for c in loaded] != [entry.cut.id for entry in parsed]:
            raise SpeechpackError(f"{recording_tars[0]}: its recordings do not pair up with the cuts of {cut_file} "
                                  f"({len(loaded)} read for {len(parsed)} cuts)")
        for entry, cut in zip(parsed, loaded):
            custom = {k: v for k, v in (cut.custom or {}).items() if k not in SHAR_BOOKKEEPING}
            cuts.append(CutLine(entry.line, cut_file, fastcopy(cut, custom=custom or None)))
    return ReadCuts(cuts, problems)


__all__ = ["CutLine", "JSONL_SUFFIXES", "ReadCuts", "read_cuts", "read_recordings_supervisions", "read_shar",
           "require_lhotse"]
