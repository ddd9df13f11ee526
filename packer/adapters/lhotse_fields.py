"""The fields of a Lhotse manifest line, checked for type and range before Lhotse deserialises it.

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

import math
import sys

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


__all__ = ["AUDIO_DURATION_TOLERANCE", "MAX_TRACK_DEPTH", "SPAN_TOLERANCE", "cut_problem", "recording_problem",
           "span_problem", "supervision_problem"]
