"""``bounded_repr(value)``: a value as a message may show it, at most ``MAX_SHOWN`` characters whatever it holds.

Messages name the value they refuse (``got [0.5, 0.5]``) so the user sees what was read.  A value read from a
config can be arbitrarily large: a YAML alias tree (the "billion laughs" construction) expands to millions of
nodes, a list may hold a million items, and an integer past Python's int-string limit
(``sys.int_info.default_max_str_digits``) cannot be converted to text at all (``repr`` raises ``ValueError``).
``reprlib.Repr`` shows a bounded number of levels and of items per level, so its work is bounded by its limits and
not by the value; big integers are described by their size instead of being converted.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

#: Longest text ``bounded_repr`` returns.
MAX_SHOWN = 240
#: Integers longer than this many digits are shown by their size (``<an integer of 5000 digits>``).
MAX_INT_SHOWN = 60


class _BoundedRepr(reprlib.Repr):
    """``reprlib``'s limits, set for messages: three levels, ten items per container, 80 characters per string."""

    def __init__(self):
        super().__init__()
        self.maxlevel = 3
        self.maxtuple = self.maxlist = self.maxarray = self.maxdict = 10
        self.maxset = self.maxfrozenset = self.maxdeque = 10
        self.maxstring = 80
        self.maxother = 80

    def repr_int(self, x: int, level: int) -> str:
        if abs(x).bit_length() > MAX_INT_SHOWN * math.log2(10):
            return f"<an integer of about {int(abs(x).bit_length() * math.log10(2)) + 1} digits>"
        return repr(x)


_REPR = _BoundedRepr()


def bounded_repr(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` for small values; for large ones a shortened form (``...`` where items were left out), never
    longer than ``limit`` characters and never costlier than the shortened form."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a foreign object whose __repr__ fails: its type is still worth showing
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


__all__ = ["MAX_SHOWN", "bounded_repr"]
