"""Reading JSON from files nobody vouches for (whole documents, and input lists line by line), and showing a
value in a message whatever its size.

**Documents.**  The one layer every JSON reader of speechpack goes through (a pack's ``dataset.json`` and shard
``index.json``, local or on an object store, MuVAP's files, cue resources, build state); YAML files go through
``schemas.yaml_document``, which shares the limits and the error.

Every way a document can fail to decode ends as one ``DocumentError`` (or the class the caller names) whose message
says the file, what is wrong, and where: the line when known, the key path (``samples[3].duration``) when known.
The decoders themselves raise a zoo (``JSONDecodeError``, a bare ``ValueError`` for an integer past Python's
int-string limit, ``RecursionError`` for deep nesting, ``UnicodeDecodeError``); none of them escapes here.

Limits, each checked before the value reaches any other code:

- **nesting**: at most ``MAX_DEPTH`` levels.  ``json`` parses recursively (``RecursionError`` near 1,000 levels,
  and every later recursive walk, copy or comparison of the value would fail the same way), so the depth is
  measured on the text first, without parsing.  Real documents nest a few levels (a shard ``index.json`` holds
  each input line, itself at most ``MAX_LINE_DEPTH`` deep, a few levels down).
- **integers**: at most ``MAX_INT_DIGITS`` digits, Python's default int-string limit
  (https://docs.python.org/3/library/stdtypes.html#int-max-str-digits).  It is a constant here, so a document
  is read the same whatever limit the interpreter was started with.
- **YAML aliases**: see ``schemas.yaml_document``.

**Values in messages.**  ``bounded_repr(value)``: a value as a message may show it, at most ``MAX_SHOWN`` characters
whatever it holds.

Messages name the value they refuse (``got [0.5, 0.5]``) so the user sees what was read.  A value read from a
config can be arbitrarily large: a YAML alias tree (the "billion laughs" construction) expands to millions of
nodes, a list may hold a million items, and an integer past Python's int-string limit
(``sys.int_info.default_max_str_digits``) cannot be converted to text at all (``repr`` raises ``ValueError``).
``reprlib.Repr`` shows a bounded number of levels and of items per level, so its work is bounded by its limits and
not by the value; big integers are described by their size instead of being converted.

**Input lists.**  Line-oriented input lists (WeSep raw lists, ASR JSON-lines manifests, bank and shard lists), read
one line at a time so that whatever a line holds is a problem *of that line*, never a traceback for the whole build.

- Each line is decoded on its own: a byte that is not UTF-8 is reported with its line, the rest of the list is
  still read (a list decoded as a whole stops at the first bad byte, with no line number).
- ``parse_json_line`` raises only ``ValueError``: bad JSON, a value nested deeper than ``MAX_LINE_DEPTH`` (far deeper
  ones make ``json`` raise ``RecursionError``), an integer literal past Python's digit limit, and a string that
  UTF-8 cannot encode (a lone surrogate from a ``\\u`` escape, which would make ``index.json`` unwritable).

Lines are split at ``\\n`` only (JSON Lines, https://jsonlines.org/: a ``\\r`` before it is whitespace), and
numbered from 1 with blank lines counted, so numbers match an editor's.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.names import encoding_problem

#: Deepest nesting of lists and mappings a document may have.
MAX_DEPTH = 100
#: Most digits an integer may have (Python's default int-string limit).
MAX_INT_DIGITS = sys.int_info.default_max_str_digits

#: A JSON string: quotes, then any characters but a quote or a backslash, or a backslash and the character it escapes.
_JSON_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
_JSON_TOKEN = re.compile(_JSON_STRING + rb"|[\[\]{}]", re.S)
_JSON_STRINGS = re.compile(_JSON_STRING, re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_CODES = np.frombuffer(b"[]{}", dtype=np.uint8)


class DocumentError(SpeechpackError):
    """A JSON or YAML file could not be read into a value: ``reason`` says why, ``line`` (1-based) and ``key`` (a
    path such as ``dataset_args.chunk_len``) say where when known."""

    def __init__(self, path: str, reason: str, line: int | None = None, key: str | None = None):
        super().__init__(describe(path, reason, line, key))
        self.path, self.reason, self.line, self.key = path, reason, line, key


def describe(path: str, reason: str, line: int | None = None, key: str | None = None) -> str:
    """``path: reason (line N, key K)``: the message of every refusal of this layer."""
    where = ", ".join(part for part in (f"line {line}" if line else "", f"key {key}" if key else "") if part)
    return f"{path}: {reason}{f' ({where})' if where else ''}"


def refuse(error: type[Exception], path: str, reason: str, line: int | None = None, key: str | None = None):
    """``error`` for the refusal: a ``DocumentError`` with its fields, or the caller's class with the same message."""
    if error is DocumentError:
        return DocumentError(path, reason, line, key)
    return error(describe(path, reason, line, key))


@dataclass(frozen=True)
class LongInteger:
    """An integer literal past ``MAX_INT_DIGITS``, held as a placeholder so the key that holds it can be named."""

    digits: int
    text: str
    line: int | None = None


def long_integer_reason(digits: int) -> str:
    return (f"an integer of {digits} digits (at most {MAX_INT_DIGITS} are read, Python's int-string limit); "
            f"no value of a speechpack file needs more")


def key_path(parts: list) -> str:
    """``a.b[3].c`` from the keys and indices on the way to a value."""
    text = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(the document itself)"


def find_value(root: Any, wanted: Callable[[Any], bool]) -> tuple[Any, list] | None:
    """The first value under ``root`` (document order) for which ``wanted`` holds, and the keys leading to it.
    Iterative; each container is visited once (values that YAML aliases share are not walked twice)."""
    stack: list[tuple[Any, list]] = [(root, [])]
    seen: set[int] = set()
    while stack:
        value, parts = stack.pop()
        if wanted(value):
            return value, parts
        if isinstance(value, (dict, list)):
            if id(value) in seen:
                continue
            seen.add(id(value))
            children = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
            stack.extend((child, [*parts, key]) for key, child in reversed(children))
    return None


def _depth_steps(raw: bytes) -> np.ndarray:
    """+1 for each ``[``/``{`` and -1 for each ``]``/``}`` of the JSON text ``raw`` outside its strings, in order.

    Without a backslash before a quote (nearly every document) the strings are the spans between consecutive
    quotes, found with numpy's running parity; otherwise the strings are cut out with a regular expression."""
    if b'\\"' in raw:
        brackets = np.frombuffer(_JSON_STRINGS.sub(b"", raw).translate(None, _NOT_BRACKETS), dtype=np.uint8)
    else:
        codes = np.frombuffer(raw, dtype=np.uint8)
        inside = np.bitwise_xor.accumulate((codes == ord('"')).view(np.uint8))
        brackets = codes[np.isin(codes, _BRACKET_CODES) & (inside == 0)]
    return np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1).astype(np.int32)


def json_depth_problem(raw: bytes, max_depth: int = MAX_DEPTH) -> tuple[int, str] | None:
    """``(line, reason)`` when the JSON text ``raw`` nests lists and objects deeper than ``max_depth``, else None.

    Counted on the text (brackets inside strings do not nest) in C-speed passes, without parsing: a document of any
    depth is measured without recursion."""
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return None
    steps = _depth_steps(raw)
    if not len(steps) or int(np.cumsum(steps).max()) <= max_depth:
        return None
    depth = 0
    for match in _JSON_TOKEN.finditer(raw):  # only on refusal: where the limit is crossed, for the line number
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                return raw.count(b"\n", 0, match.start()) + 1, f"nested more than {max_depth} levels deep"
        elif token in (b"]", b"}"):
            depth -= 1
    return None


def _has_long_digit_run(raw: bytes) -> bool:
    """Whether ``raw`` holds more than ``MAX_INT_DIGITS`` consecutive digits anywhere (strings included)."""
    if len(raw) <= MAX_INT_DIGITS:
        return False
    digit = np.frombuffer(raw, dtype=np.uint8) - ord("0") < 10
    edges = np.flatnonzero(np.diff(np.concatenate(([False], digit, [False])).view(np.int8)))
    return bool(len(edges)) and int((edges[1::2] - edges[::2]).max()) > MAX_INT_DIGITS


def parse_json(data: bytes | str, path: str, *, error: type[Exception] = DocumentError,
               max_depth: int = MAX_DEPTH, object_pairs_hook: Callable | None = None) -> Any:
    """The JSON value of ``data`` (the bytes or text of the file ``path``); any failure raises ``error`` with a
    message naming ``path``, the line and the key when known (module docstring)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    try:
        text = raw.decode("utf-8") if not isinstance(data, str) else data
    except UnicodeDecodeError as err:
        raise refuse(error, path, f"not UTF-8 text (byte 0x{raw[err.start]:02x})",
                     raw.count(b"\n", 0, err.start) + 1) from None
    problem = json_depth_problem(raw, max_depth)
    if problem is not None:
        raise refuse(error, path, problem[1], problem[0])
    found_long: list[str] = []

    def integer(literal: str):
        digits = len(literal.lstrip("-"))
        if digits > MAX_INT_DIGITS:
            found_long.append(literal)
            return LongInteger(digits, literal)
        return int(literal)

    try:
        # The hook costs a call per integer: only a document with a long run of digits needs it.
        value = json.loads(text, parse_int=integer if _has_long_digit_run(raw) else None,
                           object_pairs_hook=object_pairs_hook)
    except json.JSONDecodeError as err:
        raise refuse(error, path, f"not valid JSON ({err.msg} at column {err.colno})", err.lineno) from None
    except RecursionError:  # a thread with a small stack; the depth check keeps the main thread's far below
        raise refuse(error, path, "not readable JSON: nested too deep for the parser") from None
    except (ValueError, TypeError) as err:  # an object_pairs_hook refusal (a duplicate key) or a decoder limit
        raise refuse(error, path, f"not readable JSON ({err})") from None
    if found_long:
        place = find_value(value, lambda v: isinstance(v, LongInteger))
        literal = found_long[0]
        offset = text.find(literal)
        line = text.count("\n", 0, offset) + 1 if offset >= 0 else None
        digits = len(literal.lstrip("-"))
        raise refuse(error, path, long_integer_reason(digits), line,
                     key_path(place[1]) if place is not None else None)
    return value


def read_json(path: str, *, error: type[Exception] = DocumentError, max_depth: int = MAX_DEPTH,
              object_pairs_hook: Callable | None = None) -> Any:
    """``parse_json`` of the file at ``path``; ``OSError`` is left to the caller (which knows what a missing file
    means to it)."""
    with open(path, "rb") as fp:
        raw = fp.read()
    return parse_json(raw, path, error=error, max_depth=max_depth, object_pairs_hook=object_pairs_hook)


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


def key_list(keys: Iterable) -> str:
    """Keys for a message, sorted and comma-separated: a string as it is; any other key (YAML reads an unquoted
    ``on``, ``yes``, ``1`` or ``~`` as a boolean, a number or null) as its repr and type, so the user sees what to
    quote.  Never fails on keys of mixed types, which ``sorted`` alone cannot order."""
    kinds = {bool: "a boolean", int: "a number", float: "a number", type(None): "null"}
    return ", ".join(sorted(key if isinstance(key, str) else f"{bounded_repr(key)} "
                            f"({kinds.get(type(key), 'a ' + type(key).__name__)} key: quote it to mean the text)"
                            for key in keys))


#: Deepest nesting a line may have.  A list line is a flat record; its value is also stored nested a few levels
#: deeper in ``index.json`` (under ``provenance.extra``), which every reader must still be able to parse.
MAX_LINE_DEPTH = 32


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
            if depth > MAX_LINE_DEPTH:
                return f"nested more than {MAX_LINE_DEPTH} levels deep"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "MAX_SHOWN", "DocumentError", "bounded_repr", "decode_line", "key_list",
           "key_path", "long_integer_reason", "parse_json", "parse_json_line", "read_json", "read_lines", "refuse"]
