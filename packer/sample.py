"""What an adapter hands to the build: a plan of each sample (from headers) and the decoded sample."""

from __future__ import annotations

from dataclasses import dataclass

from packer.audio import StoredAudio


@dataclass(frozen=True)
class SamplePlan:
    """A sample's size as probed from file headers, before decoding: what the shard plan is made of.

    ``elements`` maps each stream to the int16 elements the sample will add to it (channels x frames, summed
    over its segments).
    """

    line: int
    key: str
    num_frames: int
    elements: dict[str, int]

    @property
    def nbytes(self) -> int:
        return 2 * sum(self.elements.values())


@dataclass(frozen=True)
class PackedSample:
    """One sample, decoded and quantised, ready to append to a shard.

    ``streams`` maps a stream name to its audio in slot order (one ``mix``; one ``target`` per speaker; one
    ``source``).  Every segment of a sample has ``num_frames`` samples per channel.
    """

    key: str
    speakers: tuple[str, ...]
    line: int
    orig_sample_rate: int
    num_frames: int
    provenance: dict
    streams: dict[str, list[StoredAudio]]

    @property
    def nbytes(self) -> int:
        return sum(seg.data.nbytes for segs in self.streams.values() for seg in segs)

    @property
    def elements(self) -> dict[str, int]:
        return {name: sum(seg.data.size for seg in segs) for name, segs in self.streams.items()}
