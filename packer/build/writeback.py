"""Starting a file's writeback without waiting for it: Linux's ``sync_file_range(SYNC_FILE_RANGE_WRITE)``.

Python's ``os`` module has no binding for it (``os.sync_file_range`` does not exist, on any version so far), so
until this module the stream writer's "start writeback every 8 MB" never ran: every byte of a shard was still
dirty when its files were closed, and the closing fsyncs wrote the whole shard while the build waited (on a
16 kHz WAV corpus, about 70 ms of a 0.5 s build).  libc's function is called through ``ctypes``, which lets go of
the GIL for the call; it returns once the kernel has queued the range, so the disk writes while the build goes on.

The call is advice: where it is missing (not Linux, no libc symbol) or fails (a file system that refuses it),
nothing happens, and each file's closing fsync still writes and waits for everything.  Durability never depends
on it (docs/building.md, "Durability").
"""

from __future__ import annotations

import ctypes
import sys

#: ``SYNC_FILE_RANGE_WRITE`` in Linux's ``<fcntl.h>``: start writeback of the range's dirty pages, do not wait.
SYNC_FILE_RANGE_WRITE = 2


def _libc_sync_file_range():
    """libc's ``sync_file_range`` with its argument types, or ``None`` where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


_SYNC_FILE_RANGE = _libc_sync_file_range()


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing ``nbytes`` of ``fd`` from ``offset`` to disk, without waiting for it (a
    no-op where the platform cannot; a failure is ignored: the closing fsync writes what is left)."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)


def can_start_writeback() -> bool:
    """Whether :func:`start_writeback` does anything on this machine."""
    return _SYNC_FILE_RANGE is not None


__all__ = ["SYNC_FILE_RANGE_WRITE", "can_start_writeback", "start_writeback"]
