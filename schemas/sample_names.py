"""Names a pack stores (sample keys, speakers): what they may hold, checked once for every input family.

Keys and speakers end up in ``columns/*.npy`` as fixed-width ``|S`` byte strings, which numpy reads back with
trailing NUL bytes stripped: ``"a"`` and ``"a\\x00"`` would be stored apart and read back as the same name (issue
13, item 5).  Other control characters are as unsafe in a name (a newline splits a log line or a grep, an escape
sequence rewrites a terminal), and a lone surrogate (``"\\ud800"``, which JSON's ``\\u`` escapes can produce) has
no UTF-8 encoding at all, so ``index.json`` could not be written.  All of them are refused when the input is
read, as a problem of the line that holds them.
"""

from __future__ import annotations

import re

#: C0 controls (NUL included), DEL, C1 controls (Unicode category ``Cc``), and lone surrogates (``Cs``).
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as a key or speaker name, or ``None`` when it can."""
    bad = _FORBIDDEN.search(value)
    if bad is None:
        return None
    char = bad.group()
    what = "a lone surrogate, which UTF-8 cannot store" if "\ud800" <= char <= "\udfff" else "a control character"
    return f"holds {what} (U+{ord(char):04X} at character {bad.start() + 1})"


def check_name(value: str, field: str) -> str:
    """``value`` when a pack can store it as a key or speaker name; ``ValueError`` naming ``field`` otherwise
    (callers turn it into a line problem)."""
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(f"{field} {value!r} {problem}")
    return value


def encoding_problem(value: str) -> str | None:
    """Why UTF-8 cannot encode ``value`` (a lone surrogate from a JSON ``\\u`` escape), or ``None``.  Such a
    string anywhere in a line (a path, an extra field kept as provenance) would make ``index.json`` or
    ``skipped.json`` unwritable."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        return f"the string {value!r} holds a lone surrogate (U+{ord(value[err.start]):04X}), which UTF-8 cannot store"
    return None


__all__ = ["check_name", "encoding_problem", "name_problem"]
