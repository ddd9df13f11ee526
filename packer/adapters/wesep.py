"""WeSep raw lists (``raw.list``/``samples.jsonl``) to samples, under WeSep's strict waveform policy.

- Mixture lines give a ``tse`` sample: ``mix.default`` files concatenated along channels (they must share rate
  and length), and one target per speaker, the first channel of the first file of ``src[spk]`` (same rate and
  length as the mixture).
- Single-speaker lines (no ``mix``) give a ``sources`` sample: one mono file.

Unlike WeSep, which logged and dropped unreadable samples, every problem is reported with its line and key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from packer.audio import Audio, AudioError, read_audio, resample, to_segment
from packer.sample import PackedSample
from schemas.constants import KIND_SOURCES, KIND_TSE, STREAM_MIX, STREAM_SOURCE, STREAM_TARGET
from schemas.wesep_list import LineProblem, WesepLine, best_effort_key, parse_wesep_line


@dataclass(frozen=True)
class WesepList:
    """A read list: the usable lines, the problems found without decoding audio, and the pack kind."""

    lines: list[WesepLine]
    problems: list[LineProblem]
    kind: str


def read_wesep_list(list_path: str, root: str | None = None) -> WesepList:
    """Parse every line of ``list_path``; collect all problems instead of stopping at the first.

    Relative audio paths are resolved against ``root`` when given, else against the current directory (what
    WeSep's ``torchaudio.load`` does).  Blank lines are ignored but still counted, so line numbers match an editor.
    """
    lines: list[WesepLine] = []
    problems: list[LineProblem] = []
    first_line_of_key: dict[str, int] = {}
    with open(list_path, encoding="utf-8") as fp:
        for number, text in enumerate(fp, start=1):
            if not text.strip():
                continue
            try:
                parsed = parse_wesep_line(text, number)
            except ValueError as err:
                problems.append(LineProblem(number, best_effort_key(text), None, str(err)))
                continue
            if parsed.key in first_line_of_key:
                problems.append(LineProblem(number, parsed.key, None,
                                            f"duplicate key (first on line {first_line_of_key[parsed.key]})"))
                continue
            first_line_of_key[parsed.key] = number
            lines.append(_resolve(parsed, root) if root else parsed)
    kind = _majority_kind(lines)
    usable = []
    for parsed in lines:
        if parsed.kind == kind:
            usable.append(parsed)
        else:
            problems.append(LineProblem(parsed.line, parsed.key, None,
                                        f"a {parsed.kind} line in a list of {kind} lines: a pack holds one kind"))
    problems.sort(key=lambda p: p.line)
    return WesepList(lines=usable, problems=problems, kind=kind)


def _majority_kind(lines: list[WesepLine]) -> str:
    """The kind most lines have (mixtures win a tie), so the odd lines out are the ones reported."""
    mixtures = sum(1 for parsed in lines if parsed.kind == KIND_TSE)
    return KIND_TSE if mixtures * 2 >= len(lines) and mixtures else KIND_SOURCES


def _resolve(parsed: WesepLine, root: str) -> WesepLine:
    def join(path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(root, path)

    return WesepLine(line=parsed.line, key=parsed.key, speakers=parsed.speakers,
                     mix_paths=tuple(join(p) for p in parsed.mix_paths),
                     target_paths=tuple(join(p) for p in parsed.target_paths),
                     provenance=parsed.provenance)


def load_wesep_sample(parsed: WesepLine, sample_rate: int) -> PackedSample:
    """Decode, check, resample and quantise one line; raise ``AudioError`` naming the offending file."""
    if parsed.mix_paths:
        return _load_mixture(parsed, sample_rate)
    return _load_source(parsed, sample_rate)


def _load_mixture(parsed: WesepLine, sample_rate: int) -> PackedSample:
    reference_path = parsed.mix_paths[0]
    mix_parts = []
    reference: Audio | None = None
    for path in parsed.mix_paths:
        audio = read_audio(path)
        if reference is None:
            reference = audio
        else:
            _check_same_shape(audio, reference, path, reference_path, "mixture file")
        mix_parts.append(audio.data)
    mix = Audio(np.concatenate(mix_parts, axis=0) if len(mix_parts) > 1 else mix_parts[0], reference.sample_rate)
    targets = []
    for path in parsed.target_paths:
        audio = read_audio(path)
        _check_same_shape(audio, reference, path, reference_path, "source")
        targets.append(Audio(np.ascontiguousarray(audio.data[:1]), audio.sample_rate))
    mix = resample(mix, sample_rate)
    return PackedSample(
        key=parsed.key,
        speakers=parsed.speakers,
        line=parsed.line,
        orig_sample_rate=reference.sample_rate,
        num_frames=mix.num_frames,
        provenance=parsed.provenance,
        streams={
            STREAM_MIX: [to_segment(mix.data)],
            STREAM_TARGET: [to_segment(resample(t, sample_rate).data) for t in targets],
        },
    )


def _check_same_shape(audio: Audio, reference: Audio, path: str, reference_path: str, what: str) -> None:
    """WeSep's strict policy: every file of a sample shares the mixture's sample rate and length."""
    if audio.sample_rate != reference.sample_rate:
        raise AudioError(path, f"{what} sample rate {audio.sample_rate} Hz differs from the mixture's "
                               f"{reference.sample_rate} Hz ({reference_path})")
    if audio.num_frames != reference.num_frames:
        raise AudioError(path, f"{what} length {audio.num_frames} samples differs from the mixture's "
                               f"{reference.num_frames} ({reference_path})")


def _load_source(parsed: WesepLine, sample_rate: int) -> PackedSample:
    path = parsed.target_paths[0]
    audio = read_audio(path)
    if audio.channels != 1:
        raise AudioError(path, f"a single-speaker source must be mono, got {audio.channels} channels")
    resampled = resample(audio, sample_rate)
    return PackedSample(
        key=parsed.key,
        speakers=parsed.speakers,
        line=parsed.line,
        orig_sample_rate=audio.sample_rate,
        num_frames=resampled.num_frames,
        provenance=parsed.provenance,
        streams={STREAM_SOURCE: [to_segment(resampled.data)]},
    )
