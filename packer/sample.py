"""The in-memory sample an adapter produces and the shard writer consumes."""

from __future__ import annotations

from dataclasses import dataclass

from packer.audio import Segment


@dataclass(frozen=True)
class PackedSample:
    """One sample, decoded and quantised, ready to append to a shard.

    ``streams`` maps a stream name to its segments in slot order (one ``mix`` segment; one ``target`` segment
    per speaker; one ``source`` segment).  Every segment of a sample has ``num_frames`` samples per channel.
    """

    key: str
    speakers: tuple[str, ...]
    line: int
    orig_sample_rate: int
    num_frames: int
    provenance: dict
    streams: dict[str, list[Segment]]

    @property
    def nbytes(self) -> int:
        return sum(seg.data.nbytes for segs in self.streams.values() for seg in segs)
