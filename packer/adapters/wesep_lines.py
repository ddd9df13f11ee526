"""WeSep's lines and the samples they give, under WeSep's strict waveform policy: what every WeSep reader shares.

A raw list (``raw.list``/``samples.jsonl``: ``read_wesep_list``, the lines ``schemas.wesep_list`` parses), a tar
shard (``packer.adapters.wesep_shards``) and mainline's ``wav.scp`` (``packer.adapters.wesep_mainline``) all become
``WesepLine``s, of one kind per pack (``one_kind``), and each line is planned from headers and decoded here
(``wesep_steps``), whichever list it came from:

- Mixture lines give a ``tse`` sample: ``mix.default`` files concatenated along channels (they must share rate
  and length), and one target per speaker, the first channel of the first file of ``src[spk]`` (same rate and
  length as the mixture).
- Single-speaker lines (no ``mix``) give a ``sources`` sample: one mono file.  Mainline WeSep's
  ``{key, wav, spk}`` lines are such lines (``schemas.wesep_list``), and give the pack their tar form
  (``make_shard_online.py``'s ``key.spk`` + ``key.wav``) gives.

Unlike WeSep, which logged and dropped unreadable samples, every problem is reported with its line and key.
A line's audio is a file path or, for tar shards, a ``TarMember`` (``packer.adapters.tar_members``) read where it
lies in its tar; both go through the same probe, decode and checks.  The ``wesep`` command itself (a raw list with
its cues, a split directory, mainline's files) is ``packer.adapters.wesep``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from speechpack.packer.audio import (
    Audio,
    AudioError,
    AudioInfo,
    probe_audio,
    probe_audio_file,
    read_audio,
    read_audio_file,
    resample,
    resampled_frames,
    to_stored,
)
from speechpack.packer.adapters.tar_members import TarMember
from speechpack.packer.build.plan import PackedSample, SamplePlan
from speechpack.schemas.constants import AUDIO_FULL_SCALE, KIND_SOURCES, KIND_TSE, STREAM_MIX, STREAM_SOURCE, STREAM_TARGET
from speechpack.schemas.cues import SpeakerSlot
from speechpack.schemas.documents import read_lines
from speechpack.schemas.line_problems import LineProblem
from speechpack.schemas.wesep_list import WesepLine, best_effort_key, parse_wesep_line, resolve_path


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
    Each line is decoded and parsed on its own (``schemas.documents``): whatever it holds is a problem of that line.
    """
    lines: list[WesepLine] = []
    problems: list[LineProblem] = []
    first_line_of_key: dict[str, int] = {}
    for number, text, undecodable in read_lines(list_path):
        if undecodable is not None:
            problems.append(LineProblem(number, None, None, undecodable))
            continue
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
    return one_kind(lines, problems, "line")


def single_spk_form(listed: WesepList) -> bool:
    """Whether every usable line of ``listed`` is mainline WeSep's ``{key, wav, spk}`` line
    (``schemas.wesep_list``): such a list takes mainline's enrollment files, as its tar form does."""
    return bool(listed.lines) and all("wav" in parsed.provenance for parsed in listed.lines)


def one_kind(lines: list[WesepLine], problems: list[LineProblem], unit: str) -> WesepList:
    """Keep the lines of the majority kind; report the others (a pack holds one kind) with every problem, in order."""
    kind = _majority_kind(lines)
    usable = []
    for parsed in lines:
        if parsed.kind == kind:
            usable.append(parsed)
        else:
            problems.append(LineProblem(parsed.line, parsed.key, None,
                                        f"a {parsed.kind} {unit} in a list of {kind} {unit}s: a pack holds one kind"))
    problems.sort(key=lambda p: p.line)
    return WesepList(lines=usable, problems=problems, kind=kind)


def _majority_kind(lines: list[WesepLine]) -> str:
    """The kind most lines have (mixtures win a tie), so the odd lines out are the ones reported."""
    mixtures = sum(1 for parsed in lines if parsed.kind == KIND_TSE)
    return KIND_TSE if mixtures * 2 >= len(lines) and mixtures else KIND_SOURCES


def _resolve(parsed: WesepLine, root: str) -> WesepLine:
    return WesepLine(line=parsed.line, key=parsed.key, speakers=parsed.speakers,
                     mix_paths=tuple(resolve_path(p, root) for p in parsed.mix_paths),
                     target_paths=tuple(resolve_path(p, root) for p in parsed.target_paths),
                     provenance=parsed.provenance)


def probe_source(source: str | TarMember) -> AudioInfo:
    """Header facts of a file path or a tar member (one set of checks serves both)."""
    if isinstance(source, TarMember):
        with source.open() as fp:
            return probe_audio_file(fp, str(source))
    return probe_audio(source)


def read_source(source: str | TarMember, int16_at: int | None = None) -> Audio:
    """Decode a file path or a tar member."""
    if isinstance(source, TarMember):
        with source.open() as fp:
            return read_audio_file(fp, str(source), int16_at=int16_at)
    return read_audio(source, int16_at=int16_at)


def speaker_slots(lines: list[WesepLine]) -> Iterator[SpeakerSlot]:
    """Every slot of every line, in list order.  A mixture's slots use its key (WeSep's ``key::spk``); a
    sources line's key is the source key its online mixtures look cues up with (``source_key_spk{i}::spk``)."""
    for parsed in lines:
        for speaker in parsed.speakers:
            yield SpeakerSlot(parsed.line, parsed.key, speaker)


def plan_wesep_sample(parsed: WesepLine, sample_rate: int) -> SamplePlan:
    """Check a line against WeSep's strict policy from file headers only, and size its sample.

    ``mix_paths`` and ``target_paths`` may hold ``TarMember`` sources as well as paths (``wesep_shards``)."""
    if parsed.mix_paths:
        reference_path = parsed.mix_paths[0]
        reference = probe_source(reference_path)
        channels = reference.channels
        for path in parsed.mix_paths[1:]:
            info = probe_source(path)
            _check_same_shape(info, reference, path, reference_path, "mixture file")
            channels += info.channels
        for path in parsed.target_paths:
            _check_same_shape(probe_source(path), reference, path, reference_path, "source")
        frames = resampled_frames(reference.frames, reference.sample_rate, sample_rate, str(reference_path))
        elements = {STREAM_MIX: channels * frames, STREAM_TARGET: len(parsed.target_paths) * frames}
    else:
        path = parsed.target_paths[0]
        info = probe_source(path)
        _check_mono(info, path)
        frames = resampled_frames(info.frames, info.sample_rate, sample_rate, str(path))
        elements = {STREAM_SOURCE: frames}
    return SamplePlan(line=parsed.line, key=parsed.key, num_frames=frames, elements=elements)


def load_wesep_sample(parsed: WesepLine, sample_rate: int) -> PackedSample:
    """Decode, check, resample and quantise one line; raise ``AudioError`` naming the offending file."""
    if parsed.mix_paths:
        return _load_mixture(parsed, sample_rate)
    return _load_source(parsed, sample_rate)


def _read(path: str | TarMember, sample_rate: int) -> Audio:
    """Decode; 16-bit PCM already at the pack's rate is read as int16 and stored untouched (no float round
    trip, same bytes)."""
    return read_source(path, int16_at=sample_rate)


def _load_mixture(parsed: WesepLine, sample_rate: int) -> PackedSample:
    reference_path = parsed.mix_paths[0]
    mix_parts = []
    reference: Audio | None = None
    for path in parsed.mix_paths:
        audio = _read(path, sample_rate)
        if reference is None:
            reference = audio
        else:
            _check_same_shape(audio, reference, path, reference_path, "mixture file")
        mix_parts.append(audio.data)
    if len({part.dtype for part in mix_parts}) > 1:  # some files int16, some float: decode all as float
        mix_parts = [p if p.dtype == np.float32 else p.astype(np.float32) / np.float32(AUDIO_FULL_SCALE)
                     for p in mix_parts]
    mix = Audio(np.concatenate(mix_parts, axis=0) if len(mix_parts) > 1 else mix_parts[0], reference.sample_rate)
    targets = []
    for path in parsed.target_paths:
        audio = _read(path, sample_rate)
        _check_same_shape(audio, reference, path, reference_path, "source")
        targets.append(Audio(np.ascontiguousarray(audio.data[:1]), audio.sample_rate))
    mix = resample(mix, sample_rate)
    return _packed(parsed, reference.sample_rate, {
        STREAM_MIX: [to_stored(mix)],
        STREAM_TARGET: [to_stored(resample(t, sample_rate)) for t in targets],
    })


def _packed(parsed: WesepLine, orig_sample_rate: int, streams: dict) -> PackedSample:
    return PackedSample(key=parsed.key, speakers=parsed.speakers, line=parsed.line,
                        orig_sample_rate=orig_sample_rate, num_frames=streams[next(iter(streams))][0].length,
                        provenance=parsed.provenance, streams=streams)


def _check_same_shape(audio: Audio | AudioInfo, reference: Audio | AudioInfo, path: str | TarMember,
                      reference_path: str | TarMember, what: str) -> None:
    """WeSep's strict policy: every file of a sample shares the mixture's sample rate and length."""
    path = str(path)
    frames, reference_frames = audio.frames, reference.frames
    if audio.sample_rate != reference.sample_rate:
        raise AudioError(path, f"{what} sample rate {audio.sample_rate} Hz differs from the mixture's "
                               f"{reference.sample_rate} Hz ({reference_path})")
    if frames != reference_frames:
        raise AudioError(path, f"{what} length {frames} samples differs from the mixture's "
                               f"{reference_frames} ({reference_path})")


def _check_mono(audio: Audio | AudioInfo, path: str | TarMember) -> None:
    path = str(path)
    if audio.channels != 1:
        raise AudioError(path, f"a single-speaker source must be mono, got {audio.channels} channels")


def _load_source(parsed: WesepLine, sample_rate: int) -> PackedSample:
    path = parsed.target_paths[0]
    audio = _read(path, sample_rate)
    _check_mono(audio, path)
    return _packed(parsed, audio.sample_rate, {STREAM_SOURCE: [to_stored(resample(audio, sample_rate))]})


def wesep_steps(sample_rate: int) -> dict:
    """The plan and load steps of a WeSep sample, whether it comes from a raw list or from tar shards."""
    return {"plan": functools.partial(plan_wesep_sample, sample_rate=sample_rate),
            "load": functools.partial(load_wesep_sample, sample_rate=sample_rate)}
