"""Read-ahead advice for many mapped ranges at once: ``MADV_WILLNEED`` for a whole batch in one system call.

Why.  A batch builder copies short windows from mapped shards; announcing each window first lets a cold pack be
read in one request per window instead of a readahead-inflated fault per page (see ``loader/pack/reader.py``).  One
``madvise`` per window costs a system call each, 10-16 us per 64 KB window on a warm cache here — as much as a
quarter of what a 2 s training row costs.  Linux's ``process_madvise`` (5.10+) takes a vector of ranges: the
whole batch's windows cost one call (about 3.7 us per window measured, ``bench/advice_cost.py``; the kernel still
looks up each range's pages, which is what remains).

Ranges are page-aligned here.  ``process_madvise`` acts on the process its pidfd names, so the pidfd is opened
per process (a forked DataLoader worker opens its own).  Where the call is missing (an older kernel, another OS,
a seccomp filter), the ranges are advised one ``madvise`` each, as before: the advice is a hint, never needed for
correctness, and its errors are ignored like ``madvise``'s.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import resource
import sys

import numpy as np

#: Linux's generic system call numbers (asm-generic/unistd.h; x86_64 and arm64 share them).
_SYS_PIDFD_OPEN = 434
_SYS_PROCESS_MADVISE = 440
#: The kernel takes at most this many ranges per call (UIO_MAXIOV).
MAX_RANGES_PER_CALL = 1024

_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_LIBC.syscall.restype = ctypes.c_long


class _Vector:
    """This process's pidfd, or None where ``process_madvise`` is unavailable (then ranges go one by one)."""

    pid = -1
    fd: int | None = None
    broken = not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_WILLNEED")


def _pidfd() -> int | None:
    if _Vector.broken:
        return None
    pid = os.getpid()
    if _Vector.pid != pid:  # first use, or a forked child: the parent's pidfd would advise the parent
        _Vector.pid = pid
        fd = _LIBC.syscall(ctypes.c_long(_SYS_PIDFD_OPEN), ctypes.c_long(pid), ctypes.c_long(0))
        _Vector.fd = int(fd) if fd >= 0 else None
        _Vector.broken = _Vector.fd is None
    return _Vector.fd


def view_ranges(view: np.ndarray) -> list[tuple[int, int]]:
    """(address, bytes) of the memory under a 1-D view, or a 2-D view whose rows are contiguous (one range per
    row: a window of a channel-major audio segment)."""
    if view.size == 0:
        return []
    address = view.__array_interface__["data"][0]
    if view.ndim == 1 or view.flags.c_contiguous:
        return [(address, view.nbytes)]
    row_bytes = view.shape[-1] * view.itemsize
    return [(address + r * view.strides[0], row_bytes) for r in range(view.shape[0])]


def will_need_ranges(ranges: list[tuple[int, int]] | np.ndarray) -> None:
    """``MADV_WILLNEED`` on every (address, bytes) range (a list of pairs or a ``[n, 2]`` array), page-aligned;
    one system call per 1024 ranges where the kernel has ``process_madvise``.  Memory that is not a file mapping
    is left alone by the kernel."""
    if len(ranges) == 0:
        return
    table = np.array(ranges, dtype=np.uint64).reshape(-1, 2)  # a copy: aligned in place below
    aligned = table[:, 0] - table[:, 0] % np.uint64(mmap.PAGESIZE)
    table[:, 1] += table[:, 0] - aligned  # struct iovec {void *base; size_t len;}: the same layout
    table[:, 0] = aligned
    fd = _pidfd()
    if fd is not None:
        for first in range(0, len(table), MAX_RANGES_PER_CALL):
            part = table[first:first + MAX_RANGES_PER_CALL]
            done = _LIBC.syscall(ctypes.c_long(_SYS_PROCESS_MADVISE), ctypes.c_long(fd),
                                 ctypes.c_void_p(part.ctypes.data), ctypes.c_size_t(len(part)),
                                 ctypes.c_long(mmap.MADV_WILLNEED), ctypes.c_long(0))
            if done < 0 and first == 0:  # not allowed here (e.g. seccomp, EPERM): advise one range at a time
                _Vector.broken = True
                break
        else:
            return
    for address, length in table.tolist():
        _LIBC.madvise(address, length, mmap.MADV_WILLNEED)


def will_need_views(views: list[np.ndarray]) -> None:
    """Announce every view's memory in one go (see the module docstring): for a batch builder, before it copies
    any of them."""
    ranges = []
    for view in views:
        ranges += view_ranges(view)
    will_need_ranges(ranges)


#: While a pack reads as cached, no batch is announced; while it does not, one batch in this many is copied without
#: its announcement, to find out from its page faults whether the pack is cached by now.
PROBE_EVERY = 16

_THREAD_USAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def major_faults() -> int:
    """Page faults of this thread so far that had to read from the disk (the page was not in the page cache)."""
    return resource.getrusage(_THREAD_USAGE).ru_majflt


class AdaptiveAdvice:
    """Whether a batch builder should announce its next batch's windows.

    Why.  On a cached pack the announcement finds every page present and only costs its system call (about a tenth
    of a 2 s TSE batch's time, docs/performance.md); on a cold one it makes the disk serve the batch's windows
    together (1.6-1.9x faster).  A batch copied *without* an announcement tells which case holds: a window that was
    not in the page cache costs a major page fault.  So the builder announces while the pack reads as cold, skips
    the announcement once every ``PROBE_EVERY`` batches to look, and stops announcing while unannounced batches
    find everything cached; the first major fault turns announcing back on.  (Faults of announced batches say
    nothing: an announced page is in the cache, locked for its read, when the copy waits on it.)

    Use: ``advised = policy.wanted()``; announce if so; ``before = major_faults()``; copy;
    ``policy.copied(advised, major_faults() - before)``.
    """

    def __init__(self) -> None:
        self.cached = False
        self._since_probe = 0

    def wanted(self) -> bool:
        if self.cached:
            return False
        self._since_probe += 1
        if self._since_probe >= PROBE_EVERY:
            self._since_probe = 0
            return False
        return True

    def copied(self, advised: bool, faults: int) -> None:
        if not advised:
            self.cached = faults == 0
