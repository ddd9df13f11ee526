"""How a build stores its audio: the codec, its blocks and the digests (format 1.4), and the encoding of a decoded
sample's audio segments, which runs where the sample was decoded.

``Encoding`` is the build's choice (``--codec``, ``--opus-bitrate``, ``--block-seconds``, ``--digests``): a value
that travels with every shard job (a pool worker, a Ray task) and that a finished build's plan gives back
(``from_options``: the choice is recorded in provenance ``options``, so it is part of the plan's fingerprint and a
resumed build or ``finalize`` writes what the first run did).  A pcm16 build without digests records nothing new
and writes the bytes it always wrote.

``encode_sample`` turns each ``StoredAudio`` of a decoded sample into ``EncodedAudio`` (its blocks, their digests,
and the statistics of what a reader will decode: for flac the input itself, for opus every block decoded again),
in the process that decoded the sample (``packer.build.shards``), so the encode scales with ``--workers`` and
the writer thread only appends bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from speechpack.media.codecs import (
    DEFAULT_BLOCK_SECONDS,
    DEFAULT_OPUS_BITRATE,
    block_frames_of,
    check_encoding,
    codec,
    encode_segment,
)
from speechpack.packer.audio.store import StoredAudio, int16_statistics
from speechpack.schemas import units
from speechpack.schemas.constants import (
    CODEC_OPUS,
    CODEC_PCM16,
    COMPRESSED_DTYPE,
    DIGEST_ALGORITHM,
    STREAM_TYPES,
)
from speechpack.schemas.digests import piece_digest
from speechpack.schemas.errors import OptionError
from speechpack.schemas.format import StreamSpec


@dataclass(frozen=True)
class Encoding:
    """The storage of a build's audio streams: ``codec`` (pcm16, flac, opus), ``block_frames`` (compressed),
    ``opus_bitrate`` (bits/s per channel, opus) and ``digests`` (always with a codec)."""

    codec: str = CODEC_PCM16
    block_frames: int | None = None
    opus_bitrate: int | None = None
    digests: bool = False

    @property
    def compressed(self) -> bool:
        return self.codec != CODEC_PCM16

    @classmethod
    def of(cls, codec_name: str, sample_rate: int, block_seconds: float = DEFAULT_BLOCK_SECONDS,
           opus_bitrate: int | None = None, digests: bool | None = None) -> "Encoding":
        """The encoding the options ask for, or an ``OptionError`` (a usage error) when they cannot work:
        opus at a rate it cannot encode, a bitrate out of range or without opus, ``--no-digests`` with a codec."""
        row = codec(codec_name)
        if opus_bitrate is not None and row.name != CODEC_OPUS:
            raise OptionError("--opus-bitrate only applies with --codec opus")
        if row.blocked and digests is False:
            raise OptionError(f"--no-digests cannot be combined with --codec {row.name}: a compressed pack always "
                              f"has its block digests (format 1.4)")
        if not row.blocked:
            return cls(CODEC_PCM16, digests=bool(digests))
        problem = units.BLOCK_SECONDS.problem(block_seconds)
        if problem is not None:
            raise OptionError(problem)
        frames = block_frames_of(block_seconds, sample_rate)
        bitrate = (DEFAULT_OPUS_BITRATE if opus_bitrate is None else opus_bitrate) if row.name == CODEC_OPUS else None
        check_encoding(row.name, sample_rate, frames, bitrate)
        return cls(row.name, frames, bitrate, True)

    def recorded(self, block_seconds: float) -> dict:
        """What provenance ``options`` records of the choice: nothing for pcm16 without digests (its packs keep
        their bytes), else ``codec``, ``block_seconds``, ``opus_bitrate`` and ``digests`` as they apply."""
        found: dict = {}
        if self.compressed:
            found.update(codec=self.codec, block_seconds=block_seconds, block_frames=self.block_frames)
        if self.opus_bitrate is not None:
            found["opus_bitrate"] = self.opus_bitrate
        if self.digests:
            found["digests"] = True
        return found

    @classmethod
    def from_options(cls, options: dict) -> "Encoding":
        """The encoding a build recorded in provenance ``options`` (``recorded``)."""
        return cls(options.get("codec", CODEC_PCM16), options.get("block_frames"), options.get("opus_bitrate"),
                   bool(options.get("digests", False)))

    def stream_spec(self, stream: str) -> StreamSpec:
        """The catalogue entry of ``stream`` in a pack of this encoding."""
        kind = STREAM_TYPES[stream]
        if self.compressed and kind.audio:
            return StreamSpec(stream, COMPRESSED_DTYPE.str, (), codec=self.codec, block_frames=self.block_frames)
        return StreamSpec(stream, kind.dtype.str, kind.row_shape)

    def compressed_streams(self, streams) -> tuple[str, ...]:
        """The streams of ``streams`` this encoding compresses (every audio stream, with a codec)."""
        return tuple(s for s in streams if self.compressed and STREAM_TYPES[s].audio)

    @property
    def digest_algorithm(self) -> str | None:
        """``dataset.json["digests"]``."""
        return DIGEST_ALGORITHM if self.digests else None


#: The encoding of every pack before format 1.4.
PCM16 = Encoding()


@dataclass(frozen=True)
class EncodedAudio:
    """An audio segment as a compressed stream stores it: its blocks (``data``: their bytes back to back, uint8),
    each block's size and digest, and the scale and statistics of the int16 a reader decodes from it.

    Encoded in the writer's own process (``--workers 1``), the digests and statistics are left to the writer
    thread (``digests`` and ``stats`` None, ``measure`` the int16 the statistics are of), unless that thread is
    behind (``packer.build.shards.submit_decoded`` then settles them first, as it measures pcm16 samples).
    Whichever thread computes them, the pack's bytes are the same."""

    data: np.ndarray
    sizes: tuple[int, ...]
    digests: tuple[bytes, ...] | None
    channels: int
    length: int
    scale: float
    stats: tuple[float, float, float] | None
    measure: np.ndarray | None = None

    def block_digests(self) -> tuple[bytes, ...]:
        """Each block's digest (computed here when the encoder left them to the writer)."""
        if self.digests is not None:
            return self.digests
        view, begin, out = memoryview(self.data), 0, []
        for size in self.sizes:
            out.append(piece_digest(view[begin:begin + size]))
            begin += size
        return tuple(out)

    def settled(self) -> "EncodedAudio":
        """This segment with its digests and statistics computed (the same object when it has them)."""
        if self.digests is not None and self.stats is not None:
            return self
        return replace(self, digests=self.block_digests(), stats=self.statistics(), measure=None)

    def statistics(self) -> tuple[float, float, float]:
        """``(mean, rms, peak)`` of what a reader decodes (measured here when the encoder left them)."""
        return self.stats if self.stats is not None else int16_statistics(self.measure, self.scale)

    @property
    def rows(self) -> int:
        """What the sample's plan counts of it: ``channels * length`` (the stored bytes are known only now)."""
        return self.channels * self.length


def encode_audio(stored: StoredAudio, encoding: Encoding, sample_rate: int,
                 measure_later: bool = False) -> EncodedAudio:
    """One segment's blocks (module docstring); ``measure_later``: digests and statistics left to the writer
    thread of this process (``EncodedAudio``)."""
    encoded = encode_segment(encoding.codec, stored.data, sample_rate, encoding.block_frames, encoding.opus_bitrate)
    data = np.frombuffer(b"".join(encoded.blocks), dtype=np.uint8)
    sizes = tuple(len(b) for b in encoded.blocks)
    if stored.stats is not None and codec(encoding.codec).lossless:
        stats = stored.stats
    elif measure_later:
        return EncodedAudio(data=data, sizes=sizes, digests=None, channels=stored.channels, length=stored.length,
                            scale=stored.scale, stats=None, measure=encoded.decoded)
    else:
        stats = int16_statistics(encoded.decoded, stored.scale)
    digests = None if measure_later else tuple(piece_digest(b) for b in encoded.blocks)
    return EncodedAudio(data=data, sizes=sizes, digests=digests, channels=stored.channels, length=stored.length,
                        scale=stored.scale, stats=stats)


def encode_sample(sample, encoding: Encoding, sample_rate: int, measure_later: bool = False):
    """A ``PackedSample`` with every audio segment encoded (unchanged for pcm16); ``measure_later``: see
    ``encode_audio``."""
    if not encoding.compressed:
        return sample
    streams = {name: [encode_audio(seg, encoding, sample_rate, measure_later) if isinstance(seg, StoredAudio)
                      else seg
                      for seg in segments]
               for name, segments in sample.streams.items()}
    return replace(sample, streams=streams)


__all__ = ["PCM16", "EncodedAudio", "Encoding", "encode_audio", "encode_sample"]
