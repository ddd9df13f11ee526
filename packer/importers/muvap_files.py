"""Opening the files of a MuVAP pack without following links, so that what was checked is what is copied.

A MuVAP pack is untrusted input, and a link inside it could lead anywhere on the importing machine.  Checking a
path first (``os.path.realpath``) and opening it later leaves a gap in which a link can be swapped in, and a copy
that then follows it reads from outside the pack.  So every file of a pack is reached here by descriptors only:
the pack directory is opened once, each shard directory relative to it and each file relative to its shard, every
step with ``O_NOFOLLOW`` (POSIX ``openat(2)``; a link in the last component fails with ``ELOOP`` instead of being
followed), and the opened file itself is checked with ``fstat`` (a regular file, or a directory).  A MuVAP writer
never makes links (it writes with ``np.save`` and ``json.dump``), so every link is refused.

Arrays are read twice: their headers when the pack is checked, their rows when they are copied (maybe in a build
worker).  The check records each array's identity (``FileIdentity``: device, inode, size and header); the copy
opens the file again the same way, refuses anything that is not the same file with the same header, and maps the
rows from that descriptor (``mmap``), never by path.

Apart from ``packer.importers.muvap`` (what a MuVAP pack holds and how it is imported) because it is another
concern: how any file of an untrusted directory is reached, whatever it holds.  It knows no MuVAP field, only
descriptors, file types and identities (its messages name the MuVAP pack, its one user).
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from dataclasses import dataclass

import numpy as np

from speechpack.schemas.errors import NpyHeaderError, PackFormatError
from speechpack.schemas.npyfile import NpyHeader, read_npy_header_from

#: ``open`` flags of every file and directory of a pack (``O_NONBLOCK``: a FIFO put in a pack must not block the
#: import on ``open``; it is then refused by ``fstat``).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class FileIdentity:
    """What identifies a checked array file: the copy reads it only while it is still this file."""

    device: int
    inode: int
    size: int
    header: NpyHeader


def _link_refusal(root: str, path: str, what: str) -> PackFormatError:
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        return PackFormatError(f"{path}: the {what} leads outside the MuVAP pack {root} (to {real}); refusing to "
                               f"read it")
    return PackFormatError(f"{path}: the {what} is a symbolic link; a MuVAP pack holds none (a link can be "
                           f"changed to lead outside the pack), refusing to read it")


def _open_at(root: str, parts: tuple[str, ...], what: str, directory: bool) -> int:
    """A descriptor of ``root/parts...``, every component opened without following a link; ``PackFormatError`` for
    a link, a missing entry, or an entry of the wrong type."""
    path = os.path.join(root, *parts)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))  # the pack as named
    except OSError as err:
        raise PackFormatError(f"{root}: cannot open the MuVAP pack ({err.strerror})") from None
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        try:
            child = os.open(part, _FILE_FLAGS if last and not directory else _DIR_FLAGS, dir_fd=fd)
        except OSError as err:
            here = os.path.join(root, *parts[:depth + 1])
            if err.errno == errno.ELOOP or (err.errno == errno.ENOTDIR and os.path.islink(here)):
                raise _link_refusal(root, here, what if last else "shard directory") from None
            if err.errno in (errno.ENOENT, errno.ENOTDIR):
                raise PackFormatError(f"{here}: missing") from None
            raise PackFormatError(f"{here}: cannot open it ({err.strerror})") from None
        finally:
            os.close(fd)
        fd = child
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)):
            raise PackFormatError(f"{path}: the {what} is not a {'directory' if directory else 'regular file'}")
        if not directory:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_directory(root: str, *parts: str, what: str) -> None:
    """Refuse ``root/parts...`` unless it is a directory reached without a link."""
    os.close(_open_at(root, parts, what, directory=True))


def read_file(root: str, *parts: str, what: str) -> bytes:
    """The bytes of the regular file ``root/parts...``, reached without a link."""
    fd = _open_at(root, parts, what, directory=False)
    with open(fd, "rb") as fp:
        return fp.read()


def array_identity(root: str, *parts: str) -> FileIdentity:
    """The header and identity of the array file ``root/parts...``, from one descriptor (``PackFormatError``
    naming the file when its header is unreadable)."""
    path = os.path.join(root, *parts)
    fd = _open_at(root, parts, "array file", directory=False)
    with open(fd, "rb") as fp:
        try:
            header = read_npy_header_from(fp, path)
        except NpyHeaderError as err:
            raise PackFormatError(str(err)) from None
        info = os.fstat(fp.fileno())
    return FileIdentity(info.st_dev, info.st_ino, info.st_size, header)


def map_array(root: str, parts: tuple[str, ...], identity: FileIdentity) -> np.ndarray:
    """The rows of a checked array file, mapped read-only from a descriptor of that same file: a file that is no
    longer the one checked (another inode, size or header; a link now) is refused, never read."""
    path = os.path.join(root, *parts)
    fd = _open_at(root, parts, "array file", directory=False)
    try:
        info = os.fstat(fd)
        with open(fd, "rb", closefd=False) as fp:
            header = read_npy_header_from(fp, path)
        if (info.st_dev, info.st_ino, info.st_size, header) != (identity.device, identity.inode, identity.size,
                                                                 identity.header):
            raise PackFormatError(f"{path}: changed since the import checked it (another file, size or header); "
                                  f"nothing was copied from it")
        count = int(np.prod(header.shape))
        if count == 0:
            return np.empty(header.shape, dtype=header.dtype)
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except NpyHeaderError as err:
        raise PackFormatError(str(err)) from None
    finally:
        os.close(fd)
    return np.frombuffer(mapped, dtype=header.dtype, count=count, offset=header.data_offset).reshape(header.shape)


__all__ = ["FileIdentity", "array_identity", "check_directory", "map_array", "read_file"]
