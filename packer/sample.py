"""What an adapter hands to the build: a plan of each sample (from headers) and the decoded sample."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from packer.audio import StoredAudio
from schemas.constants import STREAM_TYPES


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

    @property
    def nbytes(self) -> int:
        return sum(seg.data.nbytes for segs in self.streams.values() for seg in segs)

    @property
    def elements(self) -> dict[str, int]:
        """Rows per stream, as :attr:`SamplePlan.elements` counts them."""
        return {name: sum(seg.data.size if STREAM_TYPES[name].audio else seg.length for seg in segs)
                for name, segs in self.streams.items()}
