"""What decoding a plan's compressed packs costs: the seconds of audio the workers decode per epoch, and the core
time that takes at the decoders' measured speed (``speechpack plan``'s ``decode`` line).

Why.  A compressed pack (format 1.4, ``flac`` or ``opus``) trades bytes for decoding in the loader's workers, and
whether the workers keep up is a question of these two figures against the training step: a FLAC epoch costs
about 4 core-seconds per hour of audio decoded, an Opus epoch about seven times more.

How.  A batch decodes the part of each block under its windows (``loader.pack.blocks``): FLAC seeks to the frame
holding a window's first sample (libsndfile writes frames of ``FLAC_FRAME`` samples, so about half a frame is
decoded before it on average), Opus decodes from the first block's start (half a block before it on average); both
stop at the window's end.  So a window of ``w`` seconds costs ``w`` plus that lead-in, and never more than the
segment.  Each valid unit of the epoch counts, for every compressed audio stream of its sample (a TSE mixture and
each of its targets, an online source, an ASR utterance, an ASD clip), that many seconds; ``w`` is the unit's row
length at the loader's rate, or the whole sample where the task's units are not audio samples (ASD's model
frames): the figure is then an upper bound.  Noise and RIR bank
entries, decoded whole when drawn, are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.media.codecs import codec
from speechpack.schemas.constants import STREAM_TYPES

#: Decoding speed per core, in times real time, measured with libsndfile 1.2 through ``media.codecs`` on real
#: 16 kHz speech in 1 s blocks, on a loaded machine (docs/performance.md, "Compressed packs": a block costs about
#: 1.5x its share of a whole file's decode, the file opened per block): conservative figures to divide by.
DECODE_SPEED = {"flac": 1000.0, "opus": 140.0}
#: Samples per FLAC frame as libsndfile's encoder writes them (its default level), the unit a FLAC seek lands on.
FLAC_FRAME = 4096


@dataclass(frozen=True)
class DecodeCost:
    """Seconds of audio decoded in one epoch by codec, and whether they are an upper bound (``bounded``)."""

    seconds: dict[str, float]
    bounded: bool = False

    @property
    def core_seconds(self) -> float:
        return sum(seconds / DECODE_SPEED[codec] for codec, seconds in self.seconds.items())

    def describe(self) -> str:
        parts = ", ".join(f"{seconds:.1f} s of {codec} at {DECODE_SPEED[codec]:.0f}x real time"
                          for codec, seconds in sorted(self.seconds.items()))
        most = "at most " if self.bounded else "about "
        return f"  decode: {most}{parts} per epoch: {self.core_seconds:.2f} core-seconds in the workers"


def decode_cost(packs: list, unit_pack: np.ndarray, unit_sample: np.ndarray, items: np.ndarray, valid: np.ndarray,
                lengths: np.ndarray, rate: int | None) -> DecodeCost | None:
    """The decode cost of an epoch's valid ``items`` (plan units; ``unit_pack``/``unit_sample`` their pack and
    sample, ``lengths`` their row lengths at ``rate``, None: not audio samples), None when no pack is
    compressed."""
    if not any(pack.blocks for pack in packs):
        return None
    units = np.asarray(items).reshape(-1)[np.asarray(valid).reshape(-1)]
    seconds: dict[str, float] = {}
    for p, pack in enumerate(packs):
        if not pack.blocks:
            continue
        mine = units[unit_pack[units] == p]
        sample = unit_sample[mine]
        window = (np.full(len(mine), np.inf) if rate is None
                  else np.asarray(lengths, dtype=np.float64)[mine] / rate)
        for stream, blocks in pack.blocks.items():
            if not STREAM_TYPES[stream].audio:
                continue
            table = pack.streams[stream]
            first, count = table.first[sample], table.count[sample]
            segment = np.repeat(first, count) + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count,
                                                                                         count))
            whole = table.length[segment] / pack.sample_rate
            lead_in = (FLAC_FRAME if codec(blocks.codec).seeks else blocks.block_frames) / 2 / pack.sample_rate
            per_window = np.repeat(window, count) + lead_in
            seconds[blocks.codec] = seconds.get(blocks.codec, 0.0) + float(np.minimum(whole, per_window).sum())
    return DecodeCost(seconds, bounded=rate is None)


__all__ = ["DECODE_SPEED", "FLAC_FRAME", "DecodeCost", "decode_cost"]
