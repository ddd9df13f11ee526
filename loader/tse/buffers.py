"""The online mixer's reused memory: a work area that keeps every pass over a group in cache, and a byte-budgeted
cache of decoded bank RIRs and their spectra.  Both pickle empty: each DataLoader worker fills its own."""

from __future__ import annotations

import collections
from typing import Callable, Hashable

import numpy as np

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


__all__ = ["RIR_CACHE_BYTES", "ByteBudgetCache", "Scratch"]
