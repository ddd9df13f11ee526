"""Lhotse manifests to Lhotse cuts, each with the line of the manifest it came from (``speechpack build lhotse``).

Three inputs, each what Lhotse's recipes and tools write (https://lhotse.readthedocs.io, "Representing a corpus"):

- ``--cuts``: a CutSet in JSON lines (``cuts.jsonl`` or ``cuts.jsonl.gz``, ``CutSet.to_file``), one cut a line.
- ``--recordings`` and ``--supervisions``: a RecordingSet and a SupervisionSet in JSON lines.  Each supervision
  becomes one cut spanning ``[start, start + duration)`` of its recording with every channel of the recording
  (what ``CutSet.from_manifests(...).trim_to_supervisions(keep_all_channels=True)`` gives, one supervision per
  cut); its line is the supervision's line.
- ``--shar``: a Lhotse Shar directory (``CutSet.to_shar``): ``cuts.NNNNNN.jsonl(.gz)`` and one tar per field,
  read by ``packer.adapters.lhotse_shar``: each cut keeps where its audio is in the ``recording`` tar, and the
  bytes are read only when the build decodes it (memory stays bounded by what is being decoded); a cut's line is
  its line in its shard's cuts file.

Every line is parsed on its own with Lhotse's deserialiser, so a bad line is a problem of that line (file, line,
key), never a traceback for the whole build; every problem is collected.  Lhotse is imported here, lazily: it is
the optional extra ``speechpack[lhotse]``.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass

from speechpack.packer.adapters.lhotse_fields import cut_problem, recording_problem, span_problem, supervision_problem
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.documents import decode_line, parse_json_line
from speechpack.schemas.wesep_list import LineProblem

#: The field check of each kind of manifest line (``packer.adapters.lhotse_fields``), run before Lhotse's deserialiser.
FIELD_CHECKS = {"cut": cut_problem, "recording": recording_problem, "supervision": supervision_problem}
#: What a manifest file name must end with: Lhotse's JSON-lines manifests (recipes write ``.jsonl.gz``).
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")


@dataclass(frozen=True)
class CutLine:
    """A cut and where it came from: ``path`` (the manifest file) and its 1-based ``line``.  ``audio`` is the tar
    member holding a Shar cut's audio (``packer.adapters.wesep.TarMember``), read when the build decodes the cut;
    ``None`` for every other input."""

    line: int
    path: str
    cut: object
    audio: object = None


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
                reason = FIELD_CHECKS[what](data, what)
                if reason is not None:
                    yield number, key, None, f"not a Lhotse {what}: {reason}"
                    continue
                try:
                    item = deserialize_item(dict(data))
                except Exception as err:  # Lhotse raises KeyError/TypeError/ValueError/AssertionError for bad fields
                    yield number, key, None, f"not a Lhotse {what}: {reason_of(err)}"
                    continue
                if not isinstance(item, expected):
                    yield number, key, None, f"not a Lhotse {what} (a {type(item).__name__})"
                    continue
                yield number, key, item, None
        except (OSError, EOFError) as err:  # a truncated or corrupt .gz
            raise SpeechpackError(f"{path}: unreadable ({err})") from None


def reason_of(err: Exception) -> str:
    """An exception from Lhotse or ``tarfile`` as the reason of a problem (a ``KeyError`` is a missing field)."""
    if isinstance(err, KeyError):
        return f"missing field {err.args[0]!r}"
    return str(err) or type(err).__name__


def collect_lines(path: str, expected: type, what: str) -> tuple[list[CutLine], list[LineProblem]]:
    """The ``expected`` objects of a JSON-lines manifest with their lines; bad lines and duplicate ids as
    problems naming ``path``, line and key."""
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

    return ReadCuts(*collect_lines(cuts_path, Cut, "cut"))


def read_recordings_supervisions(recordings_path: str, supervisions_path: str) -> ReadCuts:
    """One cut per supervision, cut from its recording with all the recording's channels (see the module doc)."""
    require_lhotse()
    from lhotse import Recording, SupervisionSegment
    from lhotse.utils import fastcopy

    recordings, problems = collect_lines(recordings_path, Recording, "recording")
    supervisions, supervision_problems = collect_lines(supervisions_path, SupervisionSegment, "supervision")
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
        reason = span_problem(supervision.start, supervision.duration, recording.duration,
                              f"recording {recording.id!r}")
        if reason is not None:
            problems.append(LineProblem(entry.line, supervision.id, supervisions_path, reason))
            continue
        cut = recording.to_cut().truncate(offset=supervision.start, duration=supervision.duration,
                                          keep_excessive_supervisions=False)
        cut = fastcopy(cut, id=supervision.id, supervisions=[fastcopy(supervision, start=0.0)])
        cuts.append(CutLine(entry.line, supervisions_path, cut))
    return ReadCuts(cuts, problems)


__all__ = ["CutLine", "JSONL_SUFFIXES", "ReadCuts", "collect_lines", "read_cuts",
           "read_recordings_supervisions", "reason_of", "require_lhotse"]
