"""Plain 16-bit PCM WAV read without libsndfile: the header parsed from one ``pread``, the samples read straight
into their array with one more.

Why: on a corpus of short clips (2-5 s dialogue lines, three files each) the per-file cost of going through
soundfile is most of a build's decoding: ``SoundFile`` checks its arguments, builds an info struct, opens libsndfile
(which reads and parses the header itself) and closes it, about 30 µs of Python and C per file and step, twice per
file (the plan probes every header before anything is decoded, then the sample is decoded).  Reading the
little-endian RIFF header the truncation check reads anyway (``packer.audio.wav_header``) and then the ``data``
payload into an ``int16`` array costs a few system calls and no per-file Python beyond this module.

``packer.audio.decode`` tries this way for files named ``.wav`` that it opened through a descriptor.  Only the
layout nearly every speech corpus is stored in takes it, and only when nothing about it is unusual:
``RIFF`` (little-endian), ``WAVE_FORMAT_PCM`` (tag 1, not the extensible header), 16 bits, ``block_align`` of two
bytes per channel, a ``data`` chunk within the first ``HEADER_BYTES`` that declares its size, and every declared
byte present in the file.  Anything else (RIFX, RF64, extensible, 8/24/32-bit, float, A-law, a streaming writer's
unknown size, a truncated file) returns ``None`` and goes to libsndfile as before, so every message about an odd
file is the one it always was.

The values are libsndfile's exactly: for ``PCM_16`` its ``sf_readf_short`` copies the little-endian samples as they
are, and its float read multiplies each by ``1 / 0x8000`` in single precision (``pcm.c``, normalised float
reads), which is exact for every int16; numpy's ``float32`` multiply by ``2**-15`` gives the same bits.  The frame
count is libsndfile's too: the declared ``data`` size divided by ``block_align``, trailing chunks ignored
(tests/test_audio_plain_wav.py compares both readers on these layouts and on the ones that fall back).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import numpy as np

from speechpack.packer.audio.wav_header import WavLayout, read_layout

#: Bytes read at once for the header; the ``data`` chunk must start within them (a plain header is 44 bytes).
HEADER_BYTES = 4096
#: ``WAVE_FORMAT_PCM``.
_PCM = 0x0001
#: Most channels libsndfile opens (``SF_MAX_CHANNELS``); a header that claims more goes to libsndfile to be refused.
_MAX_CHANNELS = 1024
#: libsndfile's scale of a 16-bit sample read as float (``1 / 0x8000``), exact in float32.
_INT16_TO_FLOAT = np.float32(1.0 / 0x8000)


@dataclass(frozen=True)
class PlainWav:
    """A plain 16-bit PCM WAV (see the module docstring): where its samples are and how many."""

    sample_rate: int
    channels: int
    frames: int
    data_offset: int


def plain_layout(head: bytes, file_size: int) -> PlainWav | None:
    """``head`` (the file's first bytes, at most ``HEADER_BYTES``) parsed as a plain 16-bit PCM WAV of
    ``file_size`` bytes, or ``None`` when the file must go to libsndfile (see the module docstring)."""
    if head[:4] != b"RIFF":
        return None
    layout = read_layout(io.BytesIO(head))
    if layout is None or not _plain(layout):
        return None
    if layout.data_offset + layout.data_size > file_size:  # truncated: libsndfile's way words the error
        return None
    return PlainWav(layout.sample_rate, layout.channels, layout.data_size // layout.block_align, layout.data_offset)


def _plain(layout: WavLayout) -> bool:
    return (layout.tag == _PCM and layout.bits == 16 and 1 <= layout.channels <= _MAX_CHANNELS and layout.sample_rate > 0
            and layout.block_align == 2 * layout.channels and layout.data_size is not None)


def probe_plain(fd: int) -> PlainWav | None:
    """:func:`plain_layout` of the regular file open as ``fd``: one ``pread`` and one ``fstat``."""
    return plain_layout(os.pread(fd, HEADER_BYTES, 0), os.fstat(fd).st_size)


def read_plain(fd: int, int16_at: int | None) -> tuple[np.ndarray, int] | None:
    """The samples of the plain WAV open as ``fd``, channel-first ``[C, T]``, and its rate: int16 when the rate is
    ``int16_at``, else float32 as libsndfile scales them; ``None`` when the file must go to libsndfile (not plain,
    or shorter than its header said by the time it was read)."""
    wav = probe_plain(fd)
    if wav is None:
        return None
    data = np.empty((wav.frames, wav.channels), dtype=np.int16)
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], wav.data_offset + done)
        if got == 0:
            return None  # the file shrank since fstat: libsndfile's way reports it
        done += got
    if wav.sample_rate != int16_at:
        scaled = data.astype(np.float32)
        scaled *= _INT16_TO_FLOAT
        data = scaled
    return np.ascontiguousarray(data.T), wav.sample_rate


__all__ = ["HEADER_BYTES", "PlainWav", "plain_layout", "probe_plain", "read_plain"]
