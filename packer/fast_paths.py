"""Which input files a build reads without libsndfile, and opening them: one ``open`` and one ``fstat`` each.

``packer.audio`` asks here first.  A ``.wav`` file that ``packer.pcm_wav`` reads exactly (plain 16-bit PCM) is
probed and decoded from its header and ``data`` chunk; a ``.flac`` file is probed from its STREAMINFO block
(``packer.flac_header``) and decoded by libsndfile.  Anything these do not take, or cannot open, goes the
libsndfile way, which also words every error (docs/performance.md, "Packing throughput", says what this saves).
"""

from __future__ import annotations

import os
import stat

from packer import pcm_wav
from packer.flac_header import read_streaminfo

#: Extensions of files that may be plain 16-bit PCM WAV, read by ``packer.pcm_wav`` without libsndfile.
_PLAIN_WAV_EXTENSIONS = {".wav", ".wave"}
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def open_regular(path: str):
    """``(file, size)`` of a regular file, open for reading; ``None`` for anything else or an unreadable file
    (``packer.audio`` then checks the path and libsndfile words the error).  One ``open`` and one ``fstat``
    instead of a ``stat`` plus libsndfile's open; ``O_NONBLOCK`` so that a FIFO does not block."""
    try:
        fp = open(os.open(path, os.O_RDONLY | _NONBLOCK), "rb")
    except OSError:
        return None
    try:
        status = os.fstat(fp.fileno())
        if stat.S_ISREG(status.st_mode):
            return fp, status.st_size
    except OSError:
        pass
    fp.close()
    return None


def open_plain_wav(path: str):
    """``(file, layout)`` of a ``.wav`` file that ``packer.pcm_wav`` reads without libsndfile; else ``None``."""
    opened = open_regular(path) if os.path.splitext(path)[1].lower() in _PLAIN_WAV_EXTENSIONS else None
    if opened is None:
        return None
    fp, size = opened
    try:
        layout = pcm_wav.plain_pcm16(fp, size)
    except OSError:
        layout = None
    if layout is None:
        fp.close()
        return None
    return fp, layout


def flac_streaminfo(path: str):
    """``packer.flac_header``'s STREAMINFO of a ``.flac`` file, else ``None`` (libsndfile probes it)."""
    opened = open_regular(path) if path.lower().endswith(".flac") else None
    if opened is None:
        return None
    with opened[0] as fp:
        try:
            return read_streaminfo(fp, opened[1])
        except OSError:
            return None


__all__ = ["flac_streaminfo", "open_plain_wav", "open_regular"]
