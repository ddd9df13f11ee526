"""Slots of shared memory on 2 MB pages, where the kernel can give them, for the batch ring.

Why: a worker writes every batch into a slot (``loader.transport.batch_ring``), and a memfd is mapped on 4 KB
pages unless ``/sys/kernel/mm/transparent_hugepage/shmem_enabled`` allows huge ones (many kernels ship
``never``).  Writing a 16 MB TSE batch then touches 4,096 pages, and each costs a TLB miss, on a VM a nested page
walk: measured on the 2-core VM of docs/performance.md ("Scaling with workers", "Slots on huge pages"), building
such a batch took 3.2-3.3 ms of CPU into a memfd on 4 KB pages and 2.6 ms into the same memfd on 2 MB pages, the
same as into heap arrays (numpy's get huge pages), whether one slot was reused or four of 64 MB were cycled
through.  (What is left of a worker's extra cost is the other half of that section: memory written 64 MB or more
ago is no longer in the cache, whatever its pages.)

How:

- ``map_shared`` maps a slot's memfd at a 2 MB-aligned address (a ``PROT_NONE`` reservation, the file mapped
  over it with ``MAP_FIXED``, the reservation's ends given back), in the worker and in the training process.  A
  huge page can back a mapping only where address and file offset are aligned alike; ``mmap.mmap`` cannot ask
  for an address.
- ``collapse`` asks for ``MADV_COLLAPSE`` (Linux 6.1) over the part of a slot a worker has written: the kernel
  moves those pages into huge pages, whatever ``shmem_enabled`` says (except ``deny``), once per slot; the
  training process's aligned mapping of the same memfd then maps them as huge pages when it faults them in.
  Only written blocks are collapsed, so a slot's unused reserve (``BatchRing.reserve``) stays unallocated.
- Where a step is refused (another kernel, another libc, no ``MADV_COLLAPSE``) the slot stays on whatever pages
  the kernel gives: the same bytes, only slower.  ``MADV_HUGEPAGE`` is still advised, for kernels whose
  ``shmem_enabled`` is ``advise``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import weakref

import numpy as np

#: The huge page size of x86-64 and arm64 (4 KB base pages): slots are mapped and collapsed in such blocks.
HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
#: ``MADV_COLLAPSE`` (include/uapi/asm-generic/mman-common.h, Linux 6.1).
_MADV_COLLAPSE = 25
_MAP_FIXED = 0x10
_PROT_NONE = 0

_libc = None
#: False once the kernel has refused ``MADV_COLLAPSE`` as unknown or forbidden: not asked again in this process.
_collapse_works = True


def _load_libc():
    """libc's ``mmap``, ``munmap`` and ``madvise`` through ctypes, or None where there is no such libc."""
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_long]
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _libc = libc
        except (OSError, AttributeError):
            _libc = False
    return _libc or None


_MAP_FAILED = ctypes.c_void_p(-1).value


class SharedMapping:
    """One mapping of a slot's memfd: ``address`` and ``size``, readable as a uint8 array (``np.asarray``) for as
    long as this object lives; unmapped when it dies.  Arrays made from it keep it alive (their base)."""

    __slots__ = ("address", "size", "__array_interface__", "_mmap", "__weakref__")

    def __init__(self, address: int, size: int, owner: mmap.mmap | None) -> None:
        self.address = address
        self.size = size
        self._mmap = owner  # the fallback's mmap object, which unmaps itself
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 3}
        if owner is None:
            # Not at interpreter exit: arrays of a batch may still be read while the interpreter shuts down.
            weakref.finalize(self, _unmap, address, size).atexit = False

    def __len__(self) -> int:  # as ``mmap.mmap``'s: the mapping's bytes
        return self.size

    def advise(self, advice: int, start: int = 0, stop: int | None = None) -> bool:
        """``madvise`` over ``[start, stop)`` of the mapping (page-aligned offsets); whether the kernel took it."""
        libc = _load_libc()
        stop = self.size if stop is None else stop
        if libc is None or stop <= start:
            return False
        if libc.madvise(self.address + start, stop - start, advice) == 0:
            return True
        return False


def _unmap(address: int, size: int) -> None:
    libc = _load_libc()
    if libc is not None:
        libc.munmap(address, size)


def map_shared(fd: int, size: int) -> SharedMapping:
    """``fd``'s first ``size`` bytes mapped shared and writable at a ``HUGE_PAGE``-aligned address (falling back to
    ``mmap.mmap`` where that cannot be done), with ``MADV_HUGEPAGE`` advised."""
    mapping = _aligned(fd, size)
    if mapping is None:
        owner = mmap.mmap(fd, size)
        mapping = SharedMapping(np.frombuffer(owner, dtype=np.uint8).ctypes.data, size, owner)
    mapping.advise(_MADV_HUGEPAGE)
    return mapping


def _aligned(fd: int, size: int) -> SharedMapping | None:
    libc = _load_libc()
    if libc is None or size <= 0:
        return None
    reserved = libc.mmap(None, size + HUGE_PAGE, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if reserved in (None, _MAP_FAILED):
        return None
    start = -(-reserved // HUGE_PAGE) * HUGE_PAGE
    got = libc.mmap(start, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_FIXED, fd, 0)
    if got != start:
        libc.munmap(reserved, size + HUGE_PAGE)
        return None
    if start > reserved:  # the reservation's ends, around the file's mapping
        libc.munmap(reserved, start - reserved)
    if reserved + HUGE_PAGE > start:
        libc.munmap(start + size, reserved + HUGE_PAGE - start)
    return SharedMapping(start, size, None)


def collapse(mapping: SharedMapping, start: int, stop: int) -> int:
    """Ask the kernel to back bytes ``[start, stop)`` of ``mapping`` (rounded out to whole huge pages within it)
    with huge pages, keeping their contents; returns the offset up to which this was asked, so the caller asks
    only for what it has written since."""
    global _collapse_works
    lo = start // HUGE_PAGE * HUGE_PAGE
    hi = min(-(-stop // HUGE_PAGE) * HUGE_PAGE, mapping.size // HUGE_PAGE * HUGE_PAGE)
    if not _collapse_works or hi <= lo or mapping.address % HUGE_PAGE:
        return max(stop, start)
    if not mapping.advise(_MADV_COLLAPSE, lo, hi):
        if ctypes.get_errno() in (errno.EINVAL, errno.EPERM, errno.ENOSYS):
            _collapse_works = False  # an older kernel, or huge pages denied: plain pages from now on
    return hi


def mapped_bytes(mapping: SharedMapping, field: str = "ShmemPmdMapped") -> int:
    """Bytes of ``field`` of ``/proc/self/smaps`` for the mapping that holds ``mapping`` (``ShmemPmdMapped``: what
    this process maps with huge pages; ``Rss``: what it has resident); 0 where that cannot be read.  For tests and
    benchmarks."""
    try:
        with open(f"/proc/{os.getpid()}/smaps") as fp:
            inside = False
            for line in fp:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):
                    low, high = (int(part, 16) for part in head.split("-"))
                    inside = low <= mapping.address < high
                elif inside and head == field + ":":
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def huge_bytes(mapping: SharedMapping) -> int:
    """Bytes of ``mapping`` this process maps with huge pages."""
    return mapped_bytes(mapping, "ShmemPmdMapped")


__all__ = ["HUGE_PAGE", "SharedMapping", "collapse", "huge_bytes", "map_shared", "mapped_bytes"]
