"""One open per audio file: the descriptor that the regular-file check, libsndfile and the WAV header check share.

A build reads every input file twice, probing its header to plan the shards and then decoding it, and on a corpus
of short 16-bit WAV clips the per-file overhead is most of the work (decoding is a memcpy).  Opened by path, each
of the two steps cost a ``stat`` of its own, soundfile's ``isfile`` check and libsndfile's open, then a second open
for the truncation check (``packer.wav_header``).  Opened here once per step, the file is checked with ``fstat``
on the descriptor and the same descriptor goes to libsndfile (``soundfile.SoundFile(fd, closefd=False)``) and to
the header reader (one ``pread`` of the first 4 KiB; every blocking call lets go of the GIL, and a build's writer
and hashing threads take it each time).

Only formats libsndfile recognises from their first bytes are opened this way (``DESCRIPTOR_EXTENSIONS``);
libsndfile recognises some headerless ones (``.raw``, ``.vox``, ``.gsm``...) by their file name, which a
descriptor does not carry.  Anything unusual goes the path's way, which says what it always said: an ``open``
that fails for another reason than a missing file, and (in ``packer.audio``) a file libsndfile refuses, whose
message names the path.
"""

from __future__ import annotations

import io
import os
import stat

from speechpack.packer.wav_header import declared_frames

#: Extensions opened through one descriptor (see the module docstring): WAV and FLAC, what corpora are stored as.
DESCRIPTOR_EXTENSIONS = frozenset({".wav", ".flac"})
#: Bytes read at once for a WAV header's chunks (:func:`declared_frames_of`); a plain header is 44.
HEADER_BYTES = 4096
#: ``O_NONBLOCK``: a FIFO named in a list must not block the build on ``open``; it is refused by ``fstat`` next,
#: and a regular file's descriptor is made blocking again (local file systems ignore the flag, FUSE ones may not).
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class MissingFile(Exception):
    """``open`` said the file does not exist; ``packer.audio`` words the message (one wording for both ways)."""


class NotRegularFile(Exception):
    """The path names a directory, a FIFO, a device: not an audio file."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else "not a plain file"


def path_problem(path: str) -> str | None:
    """Why ``path`` cannot be read as an input file, or ``None``: "file not found" only when nothing is there; a
    directory, FIFO or device (``/dev/zero``) is "not a regular file", which is what is wrong with it.  One
    ``stat``, following links as ``open`` would."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "file not found"
    except OSError as err:
        return f"cannot read the file ({err.strerror or err})"
    return None if stat.S_ISREG(mode) else f"not a regular file ({_kind(mode)})"


def by_descriptor(path: str) -> bool:
    """Whether :func:`open_regular` should open ``path`` (its extension is one of ``DESCRIPTOR_EXTENSIONS``)."""
    return os.path.splitext(path)[1].lower() in DESCRIPTOR_EXTENSIONS


def open_regular(path: str) -> int | None:
    """A read-only descriptor of the regular file ``path`` (the caller closes it); ``None`` when opening
    failed for another reason than a missing file (no permission, a loop of links...): the caller then takes the
    path's way, whose messages for those cases are the ones speechpack has always given.

    Raises ``MissingFile`` or ``NotRegularFile``."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise MissingFile(path) from None
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(path)
        if _OPEN_FLAGS & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def declared_frames_of(fd: int) -> int | None:
    """``packer.wav_header.declared_frames`` of the file open as ``fd``, from one ``pread`` of its first
    ``HEADER_BYTES``; a header whose chunks run on beyond them is read again through a file object, as a path is."""
    head = os.pread(fd, HEADER_BYTES, 0)
    declared = declared_frames(io.BytesIO(head))
    if declared is None and len(head) == HEADER_BYTES:  # maybe cut short by the read, not by the file
        with open(fd, "rb", closefd=False) as fp:
            fp.seek(0)
            declared = declared_frames(fp)
    return declared


__all__ = ["DESCRIPTOR_EXTENSIONS", "HEADER_BYTES", "MissingFile", "NotRegularFile", "by_descriptor",
           "declared_frames_of", "open_regular"]
