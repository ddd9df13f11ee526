"""A FLAC file's STREAMINFO, read with one ``open`` and no libsndfile, to plan a build's shards.

Planning needs every input's rate, channels and length before anything is decoded (``packer.build.plan``).  For
FLAC, libsndfile's open (``sf_open``, then the Python wrapper's format lookups) costs 150-400 µs per file, more than
a tenth of decoding a short utterance, while everything it reports is in the STREAMINFO block that every FLAC
stream starts with (https://xiph.org/flac/format.html#metadata_block_streaminfo; RFC 9639, section 8.2):
libsndfile reads the metadata only and takes its rate, channels, bits per sample and total samples from there.
So ``packer.audio.probe_audio`` reads that block itself when the file is plainly laid out: the ``fLaC`` marker,
STREAMINFO first, a chain of metadata block headers that ends inside the file, a frame sync code right after it,
a known total length, and 8, 16 or 24 bits per sample (what libsndfile reads).  Anything else (ID3 tags in front,
Ogg FLAC, an unknown length, a broken chain) goes to libsndfile, which also words every error.  Decoding is
always libsndfile's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

_MARKER = b"fLaC"
_STREAMINFO = 0
_STREAMINFO_SIZE = 34
#: Metadata blocks walked at most before the first frame: real files have a handful.
_MAX_BLOCKS = 1000
#: Bits per sample libsndfile decodes FLAC at (PCM_S8, PCM_16, PCM_24).
_LIBSNDFILE_BITS = (8, 16, 24)


@dataclass(frozen=True)
class StreamInfo:
    sample_rate: int
    channels: int
    bits: int
    frames: int


def read_streaminfo(fp: BinaryIO, file_size: int) -> StreamInfo | None:
    """STREAMINFO of the FLAC file open in ``fp`` (at its start, ``file_size`` bytes long) when it is laid out as
    the module docstring says; ``None`` otherwise."""
    head = fp.read(8 + _STREAMINFO_SIZE)
    if len(head) < 8 + _STREAMINFO_SIZE or head[:4] != _MARKER:
        return None
    last, kind, size = head[4] >> 7, head[4] & 0x7F, int.from_bytes(head[5:8], "big")
    if kind != _STREAMINFO or size != _STREAMINFO_SIZE:
        return None
    packed = int.from_bytes(head[8 + 10:8 + 18], "big")  # rate (20 bits), channels-1 (3), bits-1 (5), samples (36)
    info = StreamInfo(sample_rate=packed >> 44, channels=((packed >> 41) & 0x7) + 1,
                      bits=((packed >> 36) & 0x1F) + 1, frames=packed & 0xFFFFFFFFF)
    if info.sample_rate == 0 or info.frames == 0 or info.bits not in _LIBSNDFILE_BITS:
        return None
    position = 8 + _STREAMINFO_SIZE
    for _ in range(_MAX_BLOCKS):
        if last:
            break
        fp.seek(position)
        header = fp.read(4)
        if len(header) < 4:
            return None
        last, position = header[0] >> 7, position + 4 + int.from_bytes(header[1:4], "big")
        if (header[0] & 0x7F) == 0x7F or position > file_size:  # 127 is forbidden as a block type
            return None
    else:
        return None
    fp.seek(position)
    sync = fp.read(2)
    if len(sync) < 2 or sync[0] != 0xFF or sync[1] & 0xFE != 0xF8:
        return None
    return info


__all__ = ["StreamInfo", "read_streaminfo"]
