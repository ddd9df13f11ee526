"""Plain 16-bit PCM WAV, probed and read with one ``open`` and no libsndfile: the commonest input of a build.

A build reads every input file twice, once for its header (to plan the shards) and once for its samples.  Through
libsndfile each of those is an ``sf_open`` plus the Python wrapper's format lookups, about 100-200 µs per file
before a sample is read, and ``packer.audio`` reads the header again itself to catch truncation
(``packer.wav_header``).  On a corpus of short 16 kHz WAV files that overhead was larger than reading the samples
(docs/performance.md, "Packing throughput").  A little-endian RIFF file whose coding is PCM with 16 bits per
sample is fully described by the header that ``packer.wav_header`` already walks: its samples are the bytes of
the ``data`` chunk, as int16.  So for exactly that layout this module takes the frames, rate and channels from the
header and the samples from one read; everything else (other codings and widths, RIFX, RF64, a ``data`` chunk that
declares no size, runs past the end of the file, or holds a partial frame, no frames at all) goes to libsndfile,
which also words every error.  The values are libsndfile's bit for bit: int16 as stored, and float32 as
libsndfile converts 16-bit PCM (``int16 * 2**-15``, exact in float32), checked against it on real recordings
(``tests/test_audio_fast_paths.py``).
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from packer.wav_header import WavLayout, read_layout

#: ``wFormatTag`` of integer PCM (``WAVE_FORMAT_PCM``, or an EXTENSIBLE header's PCM SubFormat).
_PCM = 0x0001
#: libsndfile's limit on channels (``SF_MAX_CHANNELS``); a header beyond it is libsndfile's to refuse.
_MAX_CHANNELS = 1024
#: How libsndfile scales 16-bit PCM to float (``1.0 / 0x8000``): a power of two, so the product is exact.
_PCM16_TO_FLOAT = np.float32(1.0 / 0x8000)


def plain_pcm16(fp: BinaryIO, file_size: int) -> WavLayout | None:
    """The layout of the file open in ``fp`` (at its start) when it is a plain little-endian 16-bit PCM WAV whose
    ``data`` chunk holds a whole, non-zero number of frames within the file's ``file_size`` bytes; ``None``
    otherwise (read it with libsndfile)."""
    layout = read_layout(fp)
    if (layout is None or layout.container != b"RIFF" or layout.tag != _PCM or layout.bits != 16
            or not 1 <= layout.channels <= _MAX_CHANNELS or layout.sample_rate <= 0
            or layout.block_align != 2 * layout.channels or not layout.data_size
            or layout.data_size % layout.block_align
            or layout.data_offset + layout.data_size > file_size):
        return None
    return layout


def frames(layout: WavLayout) -> int:
    """Frames per channel of a :func:`plain_pcm16` layout."""
    return layout.data_size // layout.block_align


def read_pcm16(fp: BinaryIO, layout: WavLayout, as_float: bool) -> np.ndarray | None:
    """The samples of the :func:`plain_pcm16` file open in ``fp``, channel-first ``[C, T]`` and C-contiguous:
    int16 as stored, or float32 as libsndfile scales them (``as_float``).  ``None`` when the file no longer holds
    them all (it changed since its layout was read): the caller reads it with libsndfile, which says what is
    wrong."""
    count = layout.data_size // 2
    fp.seek(layout.data_offset)
    samples = np.fromfile(fp, dtype="<i2", count=count)
    if samples.size != count:
        return None
    if samples.dtype != np.int16:  # a big-endian machine: the values, in native order
        samples = samples.astype(np.int16)
    data = np.ascontiguousarray(samples.reshape(-1, layout.channels).T)
    if as_float:
        return data.astype(np.float32) * _PCM16_TO_FLOAT
    return data


__all__ = ["frames", "plain_pcm16", "read_pcm16"]
