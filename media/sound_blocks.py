"""Decoding with libsndfile in bounded blocks, so memory follows what a file holds, not what its header claims.

Why.  A header states the length, and a reader that allocates it up front trusts the file: a FLAC whose STREAMINFO
says ``total_samples = 2**35`` over 16,000 real frames makes ``np.empty((frames, channels))`` ask for 64 GiB
(128 GiB as float32) before a sample is decoded, and the whole build dies with a ``MemoryError`` (or is killed).
Real corpora hold such files (a writer that filled in the length wrongly, a file cut after encoding).  Here a
length up to ``DIRECT_BYTES`` is allocated at once, as before (one allocation, no copy); beyond that the file is
decoded in blocks of at most ``DIRECT_BYTES`` and joined, so what is allocated is what decoding produced plus one
block.  The caller compares the frames decoded with the header (``overstated``), as the WAV data-chunk size is
compared (``packer.audio.wav_header``), and names the file.

Used by ``packer.audio`` (every build's decode), the ASR line spans and the WeSep noise LMDB reader.
"""

from __future__ import annotations

import numpy as np

#: Largest decode allocated in one piece from the header's length; longer files are read in blocks of this size.
DIRECT_BYTES = 64 << 20
#: libsndfile formats whose header states the exact length (``sf_info.frames`` is not an estimate there), so a
#: file that decodes to fewer frames is damaged: FLAC's STREAMINFO.  WAV-family headers are compared by
#: ``packer.audio.wav_header``, which reads the data chunk's size itself.
EXACT_LENGTH_FORMATS = frozenset({"FLAC"})


class DecodeStopped(RuntimeError):
    """libsndfile failed part-way (a FLAC read past its real end fails with ``Internal psf_fseek() failed``): the
    message says how far decoding got against what the header declares.  A ``RuntimeError``, as libsndfile's own
    failures are, so callers that catch those name the file the same way."""

    def __init__(self, err: Exception, decoded: int, sound):
        super().__init__(f"{err}; decoding stopped after {decoded} of the {int(sound.frames)} frames its "
                         f"{sound.format} header declares")


def read_frames(sound, dtype: str, frames: int | None = None) -> np.ndarray:
    """Decode up to ``frames`` frames (default: the header's ``sound.frames``) of an open ``soundfile.SoundFile``
    from its current position as ``[T, C]`` of ``dtype``; ``T`` is what the file actually held.  A libsndfile
    failure is raised as :class:`DecodeStopped`."""
    channels = int(sound.channels)
    want = int(sound.frames if frames is None else frames)
    if want <= 0:
        return np.empty((0, channels), dtype=dtype)
    row = channels * np.dtype(dtype).itemsize
    block = max(1, DIRECT_BYTES // row)
    if want <= block:
        data = np.empty((want, channels), dtype=dtype)
        return data[:_read_into(sound, data, dtype, 0)]
    parts = []
    remaining = want
    while remaining > 0:
        part = np.empty((min(block, remaining), channels), dtype=dtype)
        got = _read_into(sound, part, dtype, want - remaining)
        if got:
            parts.append(part[:got])
        remaining -= got
        if got < len(part):
            break
    if not parts:
        return np.empty((0, channels), dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _read_into(sound, out: np.ndarray, dtype: str, decoded: int) -> int:
    try:
        return sound.buffer_read_into(out, dtype)
    except (RuntimeError, ValueError) as err:  # soundfile.LibsndfileError is a RuntimeError
        raise DecodeStopped(err, decoded, sound) from None


def overstated(sound, decoded: int) -> str | None:
    """What is wrong when a file whose header states its exact length decoded to fewer frames; None otherwise."""
    declared = int(sound.frames)
    if sound.format in EXACT_LENGTH_FORMATS and decoded < declared:
        return (f"the {sound.format} header declares {declared} frames, the file decodes to {decoded} (a header "
                f"that overstates the length, or a cut file)")
    return None


__all__ = ["DIRECT_BYTES", "overstated", "read_frames"]
