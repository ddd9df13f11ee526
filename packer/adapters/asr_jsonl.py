"""ASR manifests of one JSON object per line (NeMo/Lhotse style) to an ``asr`` pack (``speechpack build asr-jsonl``).

A line::

    {"audio_filepath": "wav/a.flac", "text": "hello there", "language": "en", "corpus": "mls",
     "key": "a-001", "speaker": "s12", "offset": 3.2, "duration": 4.05}

- ``audio_filepath`` and ``text`` are required; ``language`` and ``corpus`` too unless the build gives defaults
  (``--language``/``--corpus``).  A relative ``audio_filepath`` is resolved against the manifest's directory, so
  a manifest and its audio move together.
- ``key`` defaults to ``audio_filepath`` without its extension, followed by ``@<offset>`` when the line cuts a
  span; keys must be unique.
- ``offset``/``duration`` (seconds) cut the span ``[offset, offset + duration)`` of a longer file (``duration``
  alone: from the start; ``offset`` alone: to the end), converted to samples at the file's rate by
  ``schemas.units.seconds_to_samples`` (half up).  A span past the end of the file is an error.  libsndfile
  formats read only the span; others (PyAV) decode the file and cut it.
- ``speaker`` becomes the sample's one speaker (``"unknown"`` without it).  Other keys are kept as provenance.

What an asr sample holds is described in ``packer.adapters.asr_common``.  Bad lines (bad JSON, missing or mistyped
field, empty text, missing or undecodable audio, bad span, duplicate key) are reported together with line, key and
field.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import soundfile

from speechpack.packer.adapters.asr_common import asr_plan, asr_sample, check_label, check_text
from speechpack.packer.audio import Audio, AudioError, probe_audio, read_audio
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.build.plan import PackedSample, SamplePlan
from speechpack.schemas.constants import KIND_ASR
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.documents import parse_json_line, read_lines
from speechpack.schemas.names import check_name
from speechpack.media.sound_blocks import read_frames
from speechpack.schemas.units import seconds_to_samples
from speechpack.schemas.line_problems import LineProblem

#: Fields of a manifest line the adapter interprets; any other is kept under ``provenance.extra``.
_INTERPRETED = frozenset({"key", "audio_filepath", "text", "language", "corpus", "speaker", "offset", "duration"})


@dataclass(frozen=True)
class AsrLine:
    """A parsed manifest line; ``offset``/``duration`` in seconds (None: not given)."""

    line: int
    key: str
    path: str
    text: str
    language: str
    corpus: str
    speaker: str | None
    offset: float | None
    duration: float | None
    extra: dict


@dataclass(frozen=True)
class AsrManifest:
    lines: list[AsrLine]
    problems: list[LineProblem]


def read_asr_manifest(manifest_path: str, language: str | None = None, corpus: str | None = None) -> AsrManifest:
    """Parse every line of ``manifest_path`` (blank lines skipped but counted); collect every problem."""
    if not os.path.isfile(manifest_path):
        raise SpeechpackError(f"{manifest_path}: manifest not found")
    base = os.path.dirname(os.path.abspath(manifest_path))
    lines: list[AsrLine] = []
    problems: list[LineProblem] = []
    first_line: dict[str, int] = {}
    for number, raw, undecodable in read_lines(manifest_path):
        if undecodable is not None:
            problems.append(LineProblem(number, None, None, undecodable))
            continue
        if not raw.strip():
            continue
        try:
            parsed = _parse_line(raw, number, base, language, corpus)
        except ValueError as err:
            problems.append(LineProblem(number, _best_effort_key(raw), None, str(err)))
            continue
        if parsed.key in first_line:
            problems.append(LineProblem(number, parsed.key, parsed.path,
                                        f"duplicate key (first on line {first_line[parsed.key]})"))
            continue
        first_line[parsed.key] = number
        lines.append(parsed)
    return AsrManifest(lines, problems)


def _best_effort_key(raw: str) -> str | None:
    try:
        obj = parse_json_line(raw)
    except ValueError:
        return None
    if isinstance(obj, dict):
        key = obj.get("key", obj.get("audio_filepath"))
        return key if isinstance(key, str) else None
    return None


def _seconds(obj: dict, field: str) -> float | None:
    value = obj.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
        raise ValueError(f"{field}: expected a non-negative number of seconds, got {value!r}")
    return float(value)


def _parse_line(raw: str, number: int, base: str, language: str | None, corpus: str | None) -> AsrLine:
    obj = parse_json_line(raw)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    for field in ("audio_filepath", "text"):
        if field not in obj:
            raise ValueError(f"missing field {field!r}")
    path = obj["audio_filepath"]
    if not isinstance(path, str) or not path:
        raise ValueError(f"audio_filepath: expected a path, got {path!r}")
    text = check_text(obj["text"])
    labels = {}
    for field, default in (("language", language), ("corpus", corpus)):
        if field not in obj and default is None:
            raise ValueError(f"missing field {field!r} (or give --{field} for lines without one)")
        labels[field] = check_label(obj.get(field, default), field)
    speaker = check_label(obj["speaker"], "speaker") if obj.get("speaker") is not None else None
    offset, duration = _seconds(obj, "offset"), _seconds(obj, "duration")
    if duration is not None and duration <= 0:
        raise ValueError(f"duration: must be positive, got {duration}")
    key = obj.get("key")
    if key is None:
        key = os.path.splitext(path)[0] + (f"@{offset:g}" if offset else "")
    if not isinstance(key, str) or not key:
        raise ValueError(f"key: expected a non-empty string, got {key!r}")
    check_name(key, "key")
    return AsrLine(line=number, key=key, path=path if os.path.isabs(path) else os.path.join(base, path), text=text,
                   speaker=speaker, offset=offset, duration=duration,
                   extra={k: v for k, v in obj.items() if k not in _INTERPRETED}, **labels)


def _span(item: AsrLine, frames: int, rate: int) -> tuple[int, int]:
    """``[start, stop)`` in samples of the file; raises ``AudioError`` for a span past the end."""
    start = seconds_to_samples(item.offset or 0.0, rate)
    stop = frames if item.duration is None else start + seconds_to_samples(item.duration, rate)
    if stop > frames or start >= stop:
        raise AudioError(item.path, f"offset/duration: span [{start}, {stop}) samples is outside the file's "
                                    f"{frames} samples at {rate} Hz")
    return start, stop


def plan_asr_line(item: AsrLine, sample_rate: int) -> SamplePlan:
    """Size a line's sample from the file header (span applied)."""
    info = probe_audio(item.path)
    start, stop = _span(item, info.frames, info.sample_rate)
    return asr_plan(item.line, item.key, info.channels, stop - start, info.sample_rate, sample_rate, item.text,
                    item.path)


def _read_span(item: AsrLine, int16_at: int) -> Audio:
    """The line's span of audio: libsndfile seeks to it; PyAV formats are decoded whole and cut."""
    if item.offset is None and item.duration is None:
        return read_audio(item.path, int16_at=int16_at)
    try:
        with soundfile.SoundFile(item.path) as sound:
            start, stop = _span(item, int(sound.frames), int(sound.samplerate))
            dtype = "int16" if sound.subtype == "PCM_16" and sound.samplerate == int16_at else "float32"
            sound.seek(start)
            data = read_frames(sound, dtype, stop - start)  # bounded blocks: the header may overstate the length
            audio = Audio(np.ascontiguousarray(data.T), int(sound.samplerate))
            short = data.shape[0] < stop - start
    except (soundfile.LibsndfileError, RuntimeError, ValueError, TypeError):
        whole = read_audio(item.path)  # not libsndfile's (or unreadable: read_audio names the reason)
        start, stop = _span(item, whole.num_frames, whole.sample_rate)
        return Audio(np.ascontiguousarray(whole.data[:, start:stop]), whole.sample_rate)
    if short:
        raise AudioError(item.path, f"offset/duration: span [{start}, {stop}) samples runs past the audio the file "
                                    f"decodes to ({start + audio.num_frames}; its header declares more)")
    if audio.data.dtype != np.int16 and not np.isfinite(audio.data).all():
        raise AudioError(item.path, "audio holds NaN/Inf values")
    return audio


def load_asr_line(item: AsrLine, sample_rate: int) -> PackedSample:
    """Decode a line's span, resample and assemble its sample; raise ``AudioError`` for bad audio."""
    audio = _read_span(item, sample_rate)
    provenance = {"path": item.path}
    if item.offset is not None or item.duration is not None:
        provenance.update(offset=item.offset, duration=item.duration)
    if item.extra:
        provenance["extra"] = item.extra
    return asr_sample(line=item.line, key=item.key, audio=audio, sample_rate=sample_rate, text=item.text,
                      language=item.language, corpus=item.corpus, speaker=item.speaker, provenance=provenance)


def build_asr_jsonl(manifest_path: str, options: BuildOptions, language: str | None = None,
                    corpus: str | None = None) -> BuildSummary:
    """``speechpack build asr-jsonl``: a JSON-lines ASR manifest to an ``asr`` pack."""
    manifest = read_asr_manifest(manifest_path, language, corpus)
    recorded = {**options.recorded(), "language": language, "corpus": corpus}
    return run_build(
        items=manifest.lines,
        problems=manifest.problems,
        plan=functools.partial(plan_asr_line, sample_rate=options.sample_rate),
        load=functools.partial(load_asr_line, sample_rate=options.sample_rate),
        kind=KIND_ASR,
        input_path=manifest_path,
        command="build asr-jsonl",
        recorded_options=recorded,
        options=options,
    )


__all__ = ["AsrLine", "AsrManifest", "build_asr_jsonl", "load_asr_line", "plan_asr_line", "read_asr_manifest"]
