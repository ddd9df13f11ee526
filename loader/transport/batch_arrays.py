"""Where a batch builder's output arrays live: ``BatchArrays.empty``, ``zeros`` and ``full`` as numpy's, unless a
DataLoader worker has handed the build the arrays of an ``Arena``, a slot of shared memory the batch will travel in.

Why: a batch built in a worker must reach the training process.  Built in private memory, it is copied into a
fresh shared-memory segment per tensor per batch (torch's transport), which on a VM costs more than building it
(docs/performance.md, "Scaling with workers").  Built straight into a slot that the worker reuses
(``loader.transport.batch_ring``), it crosses with no copy at all.  A build is given its ``BatchArrays`` (an
argument, never a module global: ``BatchBuilder.build(..., arrays)``) and allocates the arrays it returns (audio,
faces, labels, collated fields) through them, and its scratch with plain numpy; the values are the same wherever
the memory is, so batches stay bit-identical with and without workers.

Without an arena (``NUMPY``: one process, or a worker whose slots are all still in use) these are ``np.empty`` /
``np.zeros`` / ``np.full``.  An arena that is full also falls back to numpy; the transport then copies the
array into a slot it grows for the next batch.
"""

from __future__ import annotations

import math

import numpy as np

#: numpy 2 moved ``byte_bounds`` to ``numpy.lib.array_utils``; numpy 1.x has it at the top level.
_byte_bounds = getattr(getattr(np.lib, "array_utils", np), "byte_bounds")
#: Byte alignment of every array carved from an arena (a cache line; also what SIMD loads like).
ALIGN = 64


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to ``ALIGN``."""
    return -(-nbytes // ALIGN) * ALIGN


class Arena:
    """A bump allocator over one writable uint8 buffer: arrays are carved in order and never freed one by one;
    ``reset`` starts the buffer over for the next batch."""

    def __init__(self, buffer: np.ndarray):
        self.buffer = buffer
        self.used = 0
        #: The buffer's address, read once: ``offset_of`` runs for every array of every batch.
        self._base = buffer.ctypes.data

    @property
    def capacity(self) -> int:
        return len(self.buffer)

    def reset(self) -> None:
        self.used = 0

    def take(self, shape, dtype) -> np.ndarray | None:
        """A C-contiguous array of ``shape`` and ``dtype`` carved from the buffer, or None when it does not fit."""
        dtype = np.dtype(dtype)
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        start = self.used
        if start + nbytes > self.capacity:
            return None
        self.used = start + aligned(nbytes)
        return self.buffer[start:start + nbytes].view(dtype).reshape(shape)

    def offset_of(self, array: np.ndarray) -> int | None:
        """Byte offset of ``array``'s first element in the buffer, or None when ``array`` is not inside it."""
        base = self._base
        low, high = _byte_bounds(array)
        if array.size and base <= low and high <= base + self.capacity:
            # With no negative stride the first element is the lowest byte: no second address lookup.
            return low - base if min(array.strides, default=0) >= 0 else array.ctypes.data - base
        return None


class BatchArrays:
    """Where a build puts the arrays it returns: ``empty``, ``zeros`` and ``full`` as numpy's, carved from
    ``arena`` when there is one and the array fits (None, or full: plain numpy).

    Passed explicitly by its owner: the loader hands a build the arrays of the worker's slot
    (``loader.transport.batch_ring``: the slot keeps ``arena`` its current memory as it grows) or ``NUMPY``, and a
    builder hands them on to whatever allocates its outputs (``BatchBuilder.build(..., arrays)``)."""

    __slots__ = ("arena",)

    def __init__(self, arena: Arena | None = None):
        self.arena = arena

    def take(self, shape, dtype) -> np.ndarray | None:
        """An uninitialised array carved from the arena; None when there is none or it is full (the caller then
        allocates as it would without workers, e.g. from its own reused buffers: ``loader.tse.buffers``)."""
        return self.arena.take(shape, dtype) if self.arena is not None else None

    def empty(self, shape, dtype) -> np.ndarray:
        """``np.empty(shape, dtype)``, in the arena when there is one and it fits."""
        out = self.take(shape, dtype)
        return out if out is not None else np.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype) -> np.ndarray:
        """``np.zeros(shape, dtype)``, in the arena when there is one and it fits."""
        if self.arena is None:
            return np.zeros(shape, dtype=dtype)
        out = self.empty(shape, dtype)
        out.fill(0)
        return out

    def full(self, shape, fill_value, dtype) -> np.ndarray:
        """``np.full(shape, fill_value, dtype)``, in the arena when there is one and it fits (the same checks as
        numpy's: a value the dtype cannot hold raises as ``np.full`` does)."""
        if self.arena is None:
            return np.full(shape, fill_value, dtype=dtype)
        value = np.full((), fill_value, dtype=dtype)
        out = self.empty(shape, dtype)
        out.fill(value)
        return out


class _Numpy(BatchArrays):
    """``NUMPY``: always plain numpy (it holds no arena, and takes none)."""

    __slots__ = ()

    def __init__(self):
        object.__setattr__(self, "arena", None)

    def __setattr__(self, name, value):
        raise AttributeError("NUMPY holds no arena: make a BatchArrays(arena)")

    def __reduce__(self):
        return "NUMPY"


#: Plain numpy arrays: a build in one process, or in a worker without a free slot.
NUMPY = _Numpy()


__all__ = ["ALIGN", "Arena", "BatchArrays", "NUMPY", "aligned"]
