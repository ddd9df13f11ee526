"""What an adapter hands to the build: a plan of each sample (from headers) and the decoded sample.

Both check, whatever adapter made them, what every pack needs of a sample: a key and speaker names the pack can
store (``schemas.sample_names``: no control character, no lone surrogate) and at least one frame of audio.  Adapters
check the same when they read their input, naming the field; these checks are the net that no input family
slips through: they raise ``UnstorableSample``, an ``AudioError``, which the build turns into a problem of the
sample's line (skippable with ``--skip-bad``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from speechpack.packer.audio.decode import AudioError
from speechpack.packer.audio.store import StoredAudio
from speechpack.schemas.constants import STREAM_TYPES
from speechpack.schemas.sample_names import name_problem


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


@dataclass(frozen=True)
class PackedSample:
    """One sample, decoded and quantised, ready to append to a shard.

    ``streams`` maps a stream name to its segments in slot order (one ``mix``; one ``target`` per speaker; one
    ``source``; an ``asd`` track's ``audio``, ``faces`` and ``labels``...): :class:`~packer.audio.StoredAudio` for
    audio streams, :class:`StoredArray` for data streams.  Every audio segment of a sample has ``num_frames``
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
        return {name: sum(seg.data.size if STREAM_TYPES[name].audio else seg.length for seg in segs)
                for name, segs in self.streams.items()}
