"""The online mixer's reused memory: a work area that keeps every pass over a group in cache, and a byte-budgeted
cache of decoded bank RIRs and their spectra.  Both pickle empty: each DataLoader worker fills its own.

Batch audio arrays carved from buffers that are reused once nothing refers to them any more.

Why.  A fresh ``np.empty`` of a few megabytes per batch field is, depending on the allocator's state, given back to
the kernel when the batch is dropped and faulted in again, page by page, when the next batch is written: 30,000
page faults per epoch of sixty 2 s batches, 0.07 s of a bare numpy loop's 0.10 s of CPU on this machine's VM
(docs/performance.md, "Against the pack-based peers").  A buffer that stays allocated keeps its pages mapped, so
writing a batch into it costs only the copy.

When a buffer is free.  Every array handed out is a view of a pool buffer, and numpy makes every view of a view
refer to the buffer itself (``ndarray.base``), as does a tensor made with ``torch.from_numpy`` (through the array
it wraps).  So while any part of a batch is alive — kept by the training loop, a list, a pinned copy in flight —
the buffer's reference count is above the pool's own, and it is not reused; once the batch is dropped it is.  This
relies on CPython's reference counts (``sys.getrefcount``); elsewhere every batch gets a fresh array.
"""

from __future__ import annotations

from typing import Callable, Hashable
import collections
import math
import sys

import numpy as np

from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays


#: Bytes of decoded RIRs and RIR spectra one loader process keeps for reuse (about two hundred RIR spectra at a
#: 4 s chunk's FFT size in single precision, 300 kB each).
RIR_CACHE_BYTES = 64 << 20


class ByteBudgetCache:
    """Read-only arrays by key, the least recently used dropped once they hold more than ``budget`` bytes.

    The online mixer keeps decoded RIRs and their spectra here.  It pickles empty: each DataLoader worker fills
    its own, and a spawned worker does not receive its parent's."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._bytes = 0

    def get(self, key: Hashable, make: Callable[[], np.ndarray]) -> np.ndarray:
        """The array under ``key``, made by ``make()`` (and kept, read-only) on a miss."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
            return value
        value = make()
        value.flags.writeable = False  # shared by every later group that draws it
        if value.nbytes <= self.budget:
            self._items[key] = value
            self._bytes += value.nbytes
            while self._bytes > self.budget:
                _key, dropped = self._items.popitem(last=False)
                self._bytes -= dropped.nbytes
        return value

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __getstate__(self) -> dict:
        return {"budget": self.budget}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["budget"])


class Scratch:
    """A float32 work area reused from mixture to mixture: a group's sources, its mixture and one product row.

    Reusing it keeps every pass over a group in cache and spares the page faults of fresh half-megabyte arrays
    (the allocator hands such sizes out as new mappings).  It grows to the largest group seen and stays there
    (1 MB for two 4 s sources at 16 kHz).  Nothing returned to a caller may alias it.  It pickles empty, so a
    builder sent to a spawned worker does not carry its parent's buffer."""

    def __init__(self) -> None:
        self._buffer = np.empty(0, dtype=np.float32)

    def rows(self, count: int, length: int) -> np.ndarray:
        """A ``[count, length]`` float32 view of the work area (contents undefined), grown when too small."""
        need = count * length
        if need > self._buffer.size:
            self._buffer = np.empty(need, dtype=np.float32)
        return self._buffer[:need].reshape(count, length)

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, _state: dict) -> None:
        self.__init__()


#: Buffers a pool keeps: a batch needs one per field, and the training loop holds the previous batch while the
#: next one is written (DataLoader workers' batches leave through shared memory, which frees theirs at once).
MAX_BUFFERS = 8
#: A free buffer larger than this many times the request is left for a larger batch (a pool serving short
#: validation rows does not pin a long batch's memory for each of them).
MAX_WASTE = 4

_COUNTS = sys.implementation.name == "cpython"


def _pool_refs() -> int:
    """``sys.getrefcount`` of a buffer only the pool's list refers to, asked as ``BufferPool`` asks it (the list's
    reference and the call's argument, on the interpreters this was written for; measured, not assumed)."""
    buffers = [np.empty(1, dtype=np.uint8)]
    return sys.getrefcount(buffers[0])


_POOL_REFS = _pool_refs()


class BufferPool:
    """Arrays for batch fields, recycled (see the module docstring).  Not shared: a pickled pool (a DataLoader
    worker started by spawn) arrives empty.  ``arrays``: where a batch's arrays are carved first, set by the pool's
    owner for the batches it builds next (the ``decode`` stage, from the loader's ``BatchArrays``)."""

    #: ``NUMPY`` (recycled buffers only) until the owner gives the pool a worker slot's arrays.
    arrays: BatchArrays = NUMPY

    def __init__(self, max_buffers: int = MAX_BUFFERS):
        self.max_buffers = max_buffers
        self._buffers: list[np.ndarray] = []

    def __getstate__(self) -> dict:
        return {"max_buffers": self.max_buffers, "_buffers": []}  # and the arrays of no slot

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape``: carved from the DataLoader worker's shared-memory slot
        when the batch is built in one (``arrays``: it then travels without a copy), else a view of a free buffer,
        or of a new one."""
        dtype = np.dtype(dtype)
        carved = self.arrays.take(shape, dtype)
        if carved is not None:
            return carved
        nbytes = math.prod(shape) * dtype.itemsize
        if not _COUNTS or nbytes == 0:
            return np.empty(shape, dtype=dtype)
        best = None
        for index in range(len(self._buffers)):
            size = self._buffers[index].nbytes
            if (nbytes <= size <= MAX_WASTE * nbytes and (best is None or size < self._buffers[best].nbytes)
                    and sys.getrefcount(self._buffers[index]) <= _POOL_REFS):
                best = index
        if best is None:
            # A power of two: batches of varying size fit it later; pages a batch never writes are never mapped.
            best = self._add(np.empty(1 << (nbytes - 1).bit_length(), dtype=np.uint8))
            if best is None:  # every buffer in use: an ordinary array
                return np.empty(shape, dtype=dtype)
        return self._buffers[best][:nbytes].view(dtype).reshape(shape)

    def _add(self, buffer: np.ndarray) -> int | None:
        """Keep ``buffer``, evicting the smallest free buffer when the pool is full; None if all are in use."""
        if len(self._buffers) >= self.max_buffers:
            free = [i for i in range(len(self._buffers)) if sys.getrefcount(self._buffers[i]) <= _POOL_REFS]
            if not free:
                return None
            del self._buffers[min(free, key=lambda i: self._buffers[i].nbytes)]
        self._buffers.append(buffer)
        return len(self._buffers) - 1


__all__ = ["BufferPool", "ByteBudgetCache", "MAX_BUFFERS", "RIR_CACHE_BYTES", "Scratch"]
