"""The build's plans: of each sample, from its headers (what an adapter hands to the build, with the decoded
sample), and of the shards: which samples go to which shard, decided from header-probed sizes before decoding.

Knowing every shard's size up front lets the writer put the final ``.npy`` header first and hash each file as it
streams out (no second read), and makes a shard's content a pure function of the input list and the options.

The same fact makes builds divisible: shard ``k`` of a ``BuildPlan`` can be written by any process on any machine
(a pool worker, a Ray task, one job of a cluster array), and a build that was killed can keep every shard that is
already complete.  ``BuildPlan.fingerprint`` is what two processes compare to know they are building the same pack.

**Samples.**  What an adapter hands to the build: a plan of each sample (from headers) and the decoded sample.
Both check, whatever adapter made them, what every pack needs of a sample: a key and speaker names the pack can
store (``schemas.names``: no control character, no lone surrogate) and at least one frame of audio.  Adapters
check the same when they read their input, naming the field; these checks are the net that no input family
slips through: they raise ``UnstorableSample``, an ``AudioError``, which the build turns into a problem of the
sample's line (skippable with ``--skip-bad``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from speechpack.packer.audio.decode import AudioError
from speechpack.packer.audio.store import StoredAudio
from speechpack.packer.build.encoding import Encoding
from speechpack.schemas import units
from speechpack.schemas.constants import STREAM_TYPES
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.names import name_problem


class UnstorableSample(AudioError):
    """A sample no pack can hold (a bad key or speaker name, no audio): bad input of its line, like a bad file."""

    def __init__(self, reason: str):
        super().__init__(None, reason)
        self.args = (reason,)


def _check_names(key: str, speakers: tuple[str, ...] = ()) -> None:
    problem = name_problem(key)
    if problem is not None:
        raise UnstorableSample(f"key {key!r} {problem}")
    for speaker in speakers:
        problem = name_problem(speaker)
        if problem is not None:
            raise UnstorableSample(f"speaker {speaker!r} {problem}")


@dataclass(frozen=True)
class SamplePlan:
    """A sample's size as probed from file headers, before decoding: what the shard plan is made of.

    ``elements`` maps each stream to the rows the sample will add to it: channels x frames for an audio stream
    (summed over its segments), frames for faces and labels, bytes for text.
    """

    line: int
    key: str
    num_frames: int
    elements: dict[str, int]
    #: What ``load`` gets instead of the item, when sizing the sample already did load's costly work (a simulated
    #: RIR's length is known only once it is simulated); the build hands it on and keeps no copy in its plan.
    prepared: object = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_names(self.key)
        empty = sorted(stream for stream, rows in self.elements.items() if STREAM_TYPES[stream].audio and rows <= 0)
        if empty:
            raise UnstorableSample(f"no audio to store in stream(s) {', '.join(empty)} (0 frames at the pack's rate)")

    @property
    def nbytes(self) -> int:
        return sum(rows * STREAM_TYPES[stream].row_bytes for stream, rows in self.elements.items())


@dataclass(frozen=True)
class StoredArray:
    """A segment of a data stream (faces, labels, text): ``data`` is C-contiguous ``[rows, *row_shape]`` of the
    stream's dtype, stored as is."""

    data: np.ndarray

    @property
    def length(self) -> int:
        return self.data.shape[0]

    @property
    def rows(self) -> int:
        return self.data.shape[0]


@dataclass(frozen=True)
class PackedSample:
    """One sample, decoded and quantised, ready to append to a shard.

    ``streams`` maps a stream name to its segments in slot order (one ``mix``; one ``target`` per speaker; one
    ``source``; an ``asd`` track's ``audio``, ``faces`` and ``labels``...): :class:`~packer.audio.StoredAudio` for
    audio streams (``packer.build.encoding.EncodedAudio`` once encoded for a codec), :class:`StoredArray` for data
    streams.  Every audio segment of a sample has ``num_frames``
    samples per channel.  ``attrs`` holds the kind's per-sample attributes (``schemas.kinds.ATTRIBUTES_BY_KIND``).
    """

    key: str
    speakers: tuple[str, ...]
    line: int
    orig_sample_rate: int
    num_frames: int
    provenance: dict
    streams: dict[str, list[StoredAudio | StoredArray]]
    attrs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_names(self.key, self.speakers)

    @property
    def nbytes(self) -> int:
        return sum(seg.data.nbytes for segs in self.streams.values() for seg in segs)

    @property
    def elements(self) -> dict[str, int]:
        """Rows per stream, as :attr:`SamplePlan.elements` counts them."""
        return {name: sum(seg.rows for seg in segs) for name, segs in self.streams.items()}


#: Version of the serialised plan (``.tmp-plan.json``); a different one is refused, never guessed at.
PLAN_VERSION = 1


def plan_shards(sample_bytes: Sequence[int], shard_bytes: int) -> list[range]:
    """Consecutive sample ranges, one per shard: a shard closes when the next sample would push its payload past
    ``shard_bytes`` (a sample larger than that gets a shard of its own; a sample is never split)."""
    shards: list[range] = []
    start = 0
    payload = 0
    for index, size in enumerate(sample_bytes):
        if index > start and payload + size > shard_bytes:
            shards.append(range(start, index))
            start, payload = index, 0
        payload += size
    if start < len(sample_bytes):
        shards.append(range(start, len(sample_bytes)))
    return shards


def _plan_to_dict(plan: SamplePlan) -> dict:
    return {"line": plan.line, "key": plan.key, "num_frames": plan.num_frames, "elements": dict(plan.elements)}


def _plan_from_dict(obj: dict) -> SamplePlan:
    return SamplePlan(line=obj["line"], key=obj["key"], num_frames=obj["num_frames"], elements=dict(obj["elements"]))


@dataclass(frozen=True)
class BuildPlan:
    """Everything that decides the bytes of a pack, known before any audio is decoded.

    ``shards[k]`` lists the sample plans of shard ``k`` in storage order.  ``provenance`` is the manifest's
    provenance (input path and hash, tool version, command and every byte-shaping option), ``problems`` the
    input lines refused while probing headers (``LineProblem.to_dict()``), ``cues`` whether the build packs a
    ``cues/`` directory.  Two processes with equal fingerprints write equal shards.
    """

    kind: str
    sample_rate: int
    shards: tuple[tuple[SamplePlan, ...], ...]
    provenance: dict
    problems: tuple[dict, ...] = ()
    skip_bad: bool = False
    cues: bool = False

    @property
    def num_shards(self) -> int:
        return len(self.shards)

    @property
    def encoding(self) -> Encoding:
        """How the build stores its audio (recorded in the provenance's options, so part of the fingerprint)."""
        return Encoding.from_options(self.provenance.get("options", {}))

    def to_dict(self) -> dict:
        return {
            "plan_version": PLAN_VERSION,
            "kind": self.kind,
            "sample_rate": self.sample_rate,
            "provenance": self.provenance,
            "problems": list(self.problems),
            "skip_bad": self.skip_bad,
            "cues": self.cues,
            "shards": [[_plan_to_dict(p) for p in shard] for shard in self.shards],
        }

    @classmethod
    def from_dict(cls, obj, where: str) -> "BuildPlan":
        if not isinstance(obj, dict) or obj.get("plan_version") != PLAN_VERSION:
            version = obj.get("plan_version") if isinstance(obj, dict) else None
            raise SpeechpackError(f"{where}: plan_version {version!r}, this speechpack reads {PLAN_VERSION}")
        try:
            return cls(kind=obj["kind"], sample_rate=obj["sample_rate"], provenance=obj["provenance"],
                       problems=tuple(obj["problems"]), skip_bad=obj["skip_bad"], cues=obj["cues"],
                       shards=tuple(tuple(_plan_from_dict(p) for p in shard) for shard in obj["shards"]))
        except (KeyError, TypeError) as err:
            raise SpeechpackError(f"{where}: not a build plan (missing or bad field {err})") from None

    def fingerprint(self) -> str:
        """SHA-256 of the plan's canonical JSON: equal exactly when the plans are equal."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def describe(self) -> str:
        """A short description for mismatch messages: the fields a person would compare."""
        options = self.provenance.get("options", {})
        digest = self.provenance.get("input", {}).get("sha256", "?")[:12]
        return (f"{self.kind} pack, {sum(len(s) for s in self.shards)} samples in {self.num_shards} shard(s), "
                f"input sha256 {digest}..., options {json.dumps(options, sort_keys=True)}, "
                f"tool {self.provenance.get('tool_version')}")


_SLICE = re.compile(r"(\d+)/(\d+)")
#: Longest i or n of ``--shards`` read as a number (far more digits than ``units.SHARD_SLICES`` allows).
_SLICE_DIGITS = 12


@dataclass(frozen=True)
class ShardSlice:
    """``--shards i/n``: the shards ``k`` of the plan with ``k % n == i``.

    Round-robin rather than contiguous ranges: neighbouring shards come from neighbouring input lines, which are
    often alike (one speaker, one session, one source rate), so dealing them out spreads slow decodes over the
    jobs; and the slice is known without knowing how many shards the plan has.
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise SpeechpackError(f"--shards {self.index}/{self.count}: need 0 <= i < n")
        if self.count > units.SHARD_SLICES.high:
            raise SpeechpackError(f"--shards {self.index}/{self.count}: n is the number of array jobs, at most "
                                  f"{units.SHARD_SLICES.high}")

    @classmethod
    def parse(cls, text: str) -> "ShardSlice":
        match = _SLICE.fullmatch(text.strip())
        if match is None:
            raise SpeechpackError(f"--shards {text!r}: expected i/n, e.g. 0/8 (the first of 8 array jobs)")
        if len(match.group(2)) > _SLICE_DIGITS:  # int() of thousands of digits raises ValueError
            raise SpeechpackError(f"--shards: n of {len(match.group(2))} digits; n is the number of array jobs, at "
                                  f"most {units.SHARD_SLICES.high}")
        if len(match.group(1)) > _SLICE_DIGITS:
            raise SpeechpackError(f"--shards: i of {len(match.group(1))} digits; need 0 <= i < n")
        return cls(int(match.group(1)), int(match.group(2)))

    def select(self, num_shards: int) -> list[int]:
        """The planned shard numbers this slice builds (possibly none: more jobs than shards)."""
        return list(range(self.index, num_shards, self.count))

    @property
    def builds_cues(self) -> bool:
        """The ``cues/`` directory is one unit of work; the first slice does it."""
        return self.index == 0

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


__all__ = ["PLAN_VERSION", "BuildPlan", "ShardSlice", "plan_shards"]
