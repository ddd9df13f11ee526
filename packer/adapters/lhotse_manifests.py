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

Apart from ``packer.adapters.lhotse`` (cuts to samples, the build) because reading manifest lines is what every
Lhotse input shares: the plain manifests here, a Shar directory's cuts files (``packer.adapters.lhotse_shar``, which
adds their tar members), and ``speechpack export lhotse`` (``require_lhotse``).

Every line is parsed on its own with Lhotse's deserialiser, so a bad line is a problem of that line (file, line,
key), never a traceback for the whole build; every problem is collected.  Lhotse is imported here, lazily: it is
the optional extra ``speechpack[lhotse]``.

**Fields.**  The fields of a Lhotse manifest line are checked for type and range before Lhotse deserialises it.

Lhotse's deserialiser trusts the JSON it is given: an ``id`` that is a number, a ``sampling_rate`` of ``"fast"``, a
``duration`` of ``NaN`` or ``Infinity`` (which Python's JSON reader accepts), a ``recording_id`` that is a list or
a ``start`` of ``"zero"`` all deserialise, and then fail later, far from the line, as ``TypeError``,
``ValueError`` or ``decimal.InvalidOperation`` (Lhotse computes sample counts with ``Decimal``).  Lhotse's own
checks (``lhotse.qa``) use ``assert`` and run only when asked.  So each line's dict is checked here first, field by
field, and the first wrong field becomes the line's problem, in words that name it: ``cut.duration: expected a
finite number, got nan``.

The rules are Lhotse's (``lhotse.qa.validate_cut``, ``validate_recording``, ``validate_supervision``) made explicit:
ids are strings; times are finite numbers (``bool`` is not a number), a cut's ``start`` and a supervision's
``start`` relative to its recording are non-negative, durations are positive; a recording's ``sampling_rate`` is a
positive integer and its ``num_samples`` a non-negative one, its ``duration`` within Lhotse's default tolerance
(``AUDIO_DURATION_TOLERANCE``) of ``num_samples / sampling_rate``; a cut lies inside its recording.  A MixedCut's
tracks are checked as cuts, at most ``MAX_TRACK_DEPTH`` mixes deep.

Supervision spans are checked where a sample is made from them: :func:`span_problem` (relative to the audio they
describe: starting at or after its start and ending by its end, give or take ``SPAN_TOLERANCE``).
"""

from __future__ import annotations

import gzip
import math
import os
import sys
from dataclasses import dataclass

from speechpack.schemas.documents import decode_line, parse_json_line
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.line_problems import LineProblem

#: Lhotse's default tolerance between a recording's declared duration and ``num_samples / sampling_rate``
#: (``lhotse.audio.utils.get_audio_duration_mismatch_tolerance``), in seconds.
AUDIO_DURATION_TOLERANCE = 0.5
#: How far a supervision's end may pass its audio's, in seconds: the rounding of ``start + duration`` in a double.
SPAN_TOLERANCE = 1e-6
#: The largest sample count (and rate) a pack indexes: int64.
MAX_NUM_SAMPLES = 2 ** 63 - 1
#: How deep MixedCuts may nest (Lhotse flattens mixes of mixes into one level of tracks).
MAX_TRACK_DEPTH = 4
_OPTIONAL_STRINGS = ("text", "speaker", "language", "gender")
#: What ``_shown`` is given for a field that is not there at all.
_ABSENT = object()


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value) -> bool:
    """A finite number a double holds (``math.isfinite`` raises ``OverflowError`` on a 400-digit JSON integer)."""
    if not _is_number(value):
        return False
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= sys.float_info.max


def _number(obj: dict, field: str, where: str, *, positive: bool = False, required: bool = True) -> str | None:
    """Why ``obj[field]`` is not a finite (non-negative, or ``positive``) number, or ``None``."""
    if field not in obj and not required:
        return None
    value = obj.get(field, _ABSENT)
    if not _finite(value):
        return f"{where}.{field}: expected a finite number, got {_shown(value)}"
    if value < 0 or (positive and value == 0):
        return f"{where}.{field}: must be {'positive' if positive else 'non-negative'}, got {value!r}"
    return None


def _string(obj: dict, field: str, where: str, *, required: bool = True) -> str | None:
    value = obj.get(field, _ABSENT)
    if value in (None, _ABSENT) and not required:
        return None
    if not isinstance(value, str) or not value:
        return f"{where}.{field}: expected a non-empty string, got {_shown(value)}"
    return None


def _shown(value) -> str:
    """A wrong value, for a message: its repr when short, else its type (a line may hold megabytes)."""
    if value is _ABSENT:
        return "nothing (the field is missing)"
    text = repr(value)
    return text if len(text) <= 80 else f"a {type(value).__name__}"


def recording_problem(recording, where: str = "recording") -> str | None:
    """Why a recording's dict has a mistyped or impossible field, or ``None``."""
    if not isinstance(recording, dict):
        return f"{where}: expected an object, got {_shown(recording)}"
    reason = _string(recording, "id", where)
    if reason is not None:
        return reason
    rate = recording.get("sampling_rate", _ABSENT)
    if type(rate) is not int or not 0 < rate <= MAX_NUM_SAMPLES:
        return f"{where}.sampling_rate: expected a positive integer, got {_shown(rate)}"
    samples = recording.get("num_samples", _ABSENT)
    if type(samples) is not int or not 0 <= samples <= MAX_NUM_SAMPLES:
        return f"{where}.num_samples: expected an integer from 0 to 2**63 - 1, got {_shown(samples)}"
    reason = _number(recording, "duration", where, positive=True)
    if reason is not None:
        return reason
    if abs(samples / rate - recording["duration"]) > AUDIO_DURATION_TOLERANCE:
        return (f"{where}.duration: {recording['duration']!r} s, but num_samples / sampling_rate is "
                f"{samples / rate:.6g} s")
    sources = recording.get("sources")
    if not isinstance(sources, list) or not sources or not all(isinstance(s, dict) for s in sources):
        return f"{where}.sources: expected a non-empty list of objects, got {_shown(sources)}"
    for number, source in enumerate(sources):
        if not isinstance(source.get("type"), str):
            return f"{where}.sources[{number}].type: expected a string, got {_shown(source.get('type'))}"
    return None


def supervision_problem(supervision, where: str = "supervision") -> str | None:
    """Why a supervision's dict has a mistyped or impossible field, or ``None`` (its span is checked against its
    audio by :func:`span_problem`)."""
    if not isinstance(supervision, dict):
        return f"{where}: expected an object, got {_shown(supervision)}"
    for field in ("id", "recording_id"):
        reason = _string(supervision, field, where)
        if reason is not None:
            return reason
    start = supervision.get("start", _ABSENT)
    if not _finite(start):
        return f"{where}.start: expected a finite number, got {_shown(start)}"
    reason = _number(supervision, "duration", where, positive=True)
    if reason is not None:
        return reason
    for field in _OPTIONAL_STRINGS:
        if supervision.get(field) is not None and not isinstance(supervision[field], str):
            return f"{where}.{field}: expected a string or null, got {_shown(supervision[field])}"
    return None


def cut_problem(cut, where: str = "cut") -> str | None:
    """Why a cut's dict (MonoCut, PaddingCut or MixedCut, as ``Cut.to_dict`` writes them) has a mistyped or
    impossible field, or ``None``.  Iterative: a MixedCut's tracks are checked as cuts, ``MAX_TRACK_DEPTH`` deep."""
    pending = [(cut, where, 0)]
    while pending:
        cut, where, depth = pending.pop()
        if not isinstance(cut, dict):
            return f"{where}: expected an object, got {_shown(cut)}"
        reason = _string(cut, "id", where)
        if reason is not None:
            return reason
        if "tracks" in cut:  # a MixedCut: its duration is its tracks'
            tracks = cut["tracks"]
            if not isinstance(tracks, list) or not tracks:
                return f"{where}.tracks: expected a non-empty list, got {_shown(tracks)}"
            if depth >= MAX_TRACK_DEPTH:
                return f"{where}: mixes nested deeper than {MAX_TRACK_DEPTH}"
            for number, track in enumerate(tracks):
                here = f"{where}.tracks[{number}]"
                if not isinstance(track, dict):
                    return f"{here}: expected an object, got {_shown(track)}"
                reason = _number(track, "offset", here, required=False)
                if reason is not None:
                    return reason
                pending.append((track.get("cut"), f"{here}.cut", depth + 1))
            continue
        for field, positive in (("start", False), ("duration", True)):
            reason = _number(cut, field, where, positive=positive, required=field == "duration")
            if reason is not None:
                return reason
        supervisions = cut.get("supervisions", [])
        if not isinstance(supervisions, list):
            return f"{where}.supervisions: expected a list, got {_shown(supervisions)}"
        for number, supervision in enumerate(supervisions):
            reason = supervision_problem(supervision, f"{where}.supervisions[{number}]")
            if reason is not None:
                return reason
        if "recording" in cut:
            reason = recording_problem(cut["recording"], f"{where}.recording")
            if reason is not None:
                return reason
            end = cut.get("start", 0) + cut["duration"]
            if end > cut["recording"]["duration"] + SPAN_TOLERANCE:
                return (f"{where}: [{cut.get('start', 0)}, {end:.6g}) s lies past the end of its recording "
                        f"({cut['recording']['duration']} s)")
        elif "sampling_rate" in cut and (type(cut["sampling_rate"]) is not int
                                     or not 0 < cut["sampling_rate"] <= MAX_NUM_SAMPLES):
            return f"{where}.sampling_rate: expected a positive integer, got {_shown(cut['sampling_rate'])}"
    return None


def span_problem(start: float, duration: float, audio: float, what: str) -> str | None:
    """Why a supervision ``[start, start + duration)`` does not lie inside ``audio`` seconds (``what`` names that
    audio; its end may pass by ``SPAN_TOLERANCE``), or ``None``."""
    end = start + duration
    if start < 0 or duration <= 0 or end > audio + SPAN_TOLERANCE:
        return f"span [{start:.6g}, {end:.6g}) s is outside {what} ({audio:.6g} s)"
    return None


#: The field check of each kind of manifest line (``packer.adapters.lhotse_manifests``), run before Lhotse's deserialiser.
FIELD_CHECKS = {"cut": cut_problem, "recording": recording_problem, "supervision": supervision_problem}
#: What a manifest file name must end with: Lhotse's JSON-lines manifests (recipes write ``.jsonl.gz``).
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz")


@dataclass(frozen=True)
class CutLine:
    """A cut and where it came from: ``path`` (the manifest file) and its 1-based ``line``.  ``audio`` is the tar
    member holding a Shar cut's audio (``packer.adapters.tar_members.TarMember``), read when the build decodes the cut;
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


__all__ = ["AUDIO_DURATION_TOLERANCE", "JSONL_SUFFIXES", "MAX_TRACK_DEPTH", "SPAN_TOLERANCE", "CutLine", "ReadCuts",
           "collect_lines", "cut_problem", "read_cuts", "read_recordings_supervisions", "reason_of",
           "recording_problem", "require_lhotse", "span_problem", "supervision_problem"]
