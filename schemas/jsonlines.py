"""Line-oriented input lists (WeSep raw lists, ASR JSON-lines manifests, bank and shard lists), read one line at a
time so that whatever a line holds is a problem *of that line*, never a traceback for the whole build.

- Each line is decoded on its own: a byte that is not UTF-8 is reported with its line, the rest of the list is
  still read (a list decoded as a whole stops at the first bad byte, with no line number).
- ``parse_json_line`` raises only ``ValueError``: bad JSON, a value nested deeper than ``MAX_DEPTH`` (far deeper
  ones make ``json`` raise ``RecursionError``), an integer literal past Python's digit limit, and a string that
  UTF-8 cannot encode (a lone surrogate from a ``\\u`` escape, which would make ``index.json`` unwritable).

Lines are split at ``\\n`` only (JSON Lines, https://jsonlines.org/: a ``\\r`` before it is whitespace), and
numbered from 1 with blank lines counted, so numbers match an editor's.
"""

from __future__ import annotations

import json
from typing import Iterator

from speechpack.schemas.names import encoding_problem

#: Deepest nesting a line may have.  A list line is a flat record; its value is also stored nested a few levels
#: deeper in ``index.json`` (under ``provenance.extra``), which every reader must still be able to parse.
MAX_DEPTH = 32


def read_lines(path: str) -> Iterator[tuple[int, str | None, str | None]]:
    """``(number, text, problem)`` for every line of ``path``: ``text`` decoded from UTF-8, or ``None`` and
    ``problem`` saying which byte is not UTF-8."""
    with open(path, "rb") as fp:
        for number, raw in enumerate(fp, start=1):
            yield (number, *decode_line(raw))


def decode_line(raw: bytes) -> tuple[str | None, str | None]:
    """``(text, None)``, or ``(None, problem)`` naming the first byte of ``raw`` that is not UTF-8."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 text (byte 0x{raw[err.start]:02x} at byte {err.start + 1} of the line)"


def parse_json_line(text: str):
    """The JSON value of one line; ``ValueError`` with the reason for anything a pack cannot hold."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err.msg} at column {err.colno})") from None
    except RecursionError:
        raise ValueError("not readable JSON: nested deeper than the parser's recursion limit") from None
    except ValueError as err:  # e.g. an integer literal longer than Python's int digit limit
        raise ValueError(f"not readable JSON ({err})") from None
    problem = _value_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _value_problem(value) -> str | None:
    """The first reason ``value`` cannot be stored as it is (too deep, a string UTF-8 cannot encode), or
    ``None``.  Iterative, so that no value can exhaust the stack."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            problem = encoding_problem(item)
            if problem is not None:
                return problem
        elif isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} levels deep"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


__all__ = ["MAX_DEPTH", "decode_line", "parse_json_line", "read_lines"]
