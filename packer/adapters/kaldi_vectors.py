"""Kaldi ``scp``/``ark`` vectors (mainline WeSep's ``embed.scp`` of speaker embeddings), read by speechpack itself:
no command is ever run, and every read is bounded by the files' real sizes.

**What an ``embed.scp`` line may name.**  A line is ``key rxfilename``.  Two forms of Kaldi's rxfilename are read:
``path:offset`` (the object at byte ``offset`` of an ark, as ``ark,scp:embed.ark,embed.scp`` writes them) and
``path`` (a file holding one object).  Kaldi, and kaldiio on which mainline reads the file, also take ``cmd |`` (run
by a shell) and ``-`` (standard input); a list file must never run anything, so those, a leading ``|``, an
rspecifier (``ark:...``, ``scp:...``, ``ark,t:-``) and kaldiio's ``[...]`` slices are refused by file and line
before any file is opened.  Relative paths are opened from the current directory, as kaldiio opens them.

**What an object may be.**  A float or double vector, or a matrix of one row (``[1, D]``, what mainline's
``read_vec_scp_file`` makes of a vector), binary (``\\0B``, then ``FV ``/``DV ``/``FM ``/``DM ``, then each size
as the byte 4 and a little-endian int32, then the values) or text (``[ v1 v2 ... ]``).  Compressed matrices
(``CM``) and matrices of several rows are refused: a speaker embedding is one vector.  Its values must be finite
float32 numbers (NaN, infinities and doubles beyond float32's range are refused by line), written in decimal
in a text object (``1.5e-3``; ``nan``, ``inf`` and Python's ``1_0`` are not numbers here), and every vector of
one scp has the dimension of its first line's.

**Bounds** (each checked before the bytes it concerns are read):

- a dimension of at most ``MAX_DIM`` (65,536) values: speaker embeddings hold a few hundred (x-vectors 512,
  ECAPA-TDNN 192, WeSpeaker's ResNets 256, i-vectors 400 to 600), so this is far above any real one, and a
  header claiming 2^31 values is refused from its 20 bytes;
- every read lies within the file's real size (a regular file: a device such as ``/dev/zero`` or a FIFO is
  refused before it is opened for reading), and an offset or a size past the end is refused, not read;
- a text object is scanned for its closing ``]`` over at most ``MAX_TEXT_BYTES`` (the longest text a vector of
  ``MAX_DIM`` values takes, 32 characters a value);
- the objects of one file may not overlap (they never do in an ark Kaldi or kaldiio wrote): each byte of a file is
  read at most once whatever the scp says, so time and memory are bounded by the arks' sizes.  Lines naming the
  same object share it.

Every problem is reported at once, each as ``embed.scp:LINE: ...``.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

import numpy as np

from speechpack.schemas.documents import bounded_repr, read_lines
from speechpack.schemas.errors import SpeechpackError

#: Largest dimension of a speaker embedding read (module docstring).
MAX_DIM = 1 << 16
#: Longest text object scanned for its ``]``: ``MAX_DIM`` values of up to 32 characters, and the brackets.
MAX_TEXT_BYTES = MAX_DIM * 32 + 64
#: Binary object types: the numpy type of their values, and whether they are matrices.
_BINARY = {b"FV": ("<f4", False), b"DV": ("<f8", False), b"FM": ("<f4", True), b"DM": ("<f8", True)}
#: ``path:offset``: the offset is the digits after the last ``:`` (more than 19 is past any file's end).
_OFFSET = re.compile(r"(.+):([0-9]+)")
_MAX_OFFSET_DIGITS = 19
_RSPECIFIER = re.compile(r"(ark|scp)(,[a-z]+)*:", re.IGNORECASE)
#: Bytes of a binary object's header read at once: ``\0B``, a type token, two sizes.
_HEAD_BYTES = 24
#: A value of a text vector: a decimal number as Kaldi writes one (Python's ``float`` takes more: ``1_0``, ``nan``).
_DECIMAL = re.compile(rb"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
#: Whitespace Kaldi's text reader skips before ``[``.
_SPACE = b" \t\r\n"


@dataclass(frozen=True)
class ScpVector:
    """One vector of an scp: the line naming it, its values (float32 ``[D]``), and where they are (``source``:
    the absolute ``ark:offset``, or the file, as the line names it)."""

    line: int
    vector: np.ndarray
    source: str


@dataclass(frozen=True)
class _Entry:
    line: int
    key: str
    path: str
    offset: int
    whole_file: bool = False  # the line names a file, no offset

    @property
    def source(self) -> str:
        path = os.path.abspath(self.path)
        return path if self.whole_file else f"{path}:{self.offset}"


class _Refused(Exception):
    """One object cannot be read; the message is the reason, ``end`` the byte after what was read of it."""

    def __init__(self, reason: str, end: int | None = None):
        super().__init__(reason)
        self.end = end


def rxfilename_problem(value: str) -> str | None:
    """Why ``value`` (the rest of an scp line) is not a ``path`` or ``path:offset`` speechpack reads, or None."""
    text = value.strip()
    if text.endswith("|") or text.startswith("|"):
        return (f"{bounded_repr(text)} is a shell command (Kaldi's pipe form); a list file never runs one here: "
                f"write the vectors to an ark (ark,scp:embed.ark,embed.scp) and list their offsets")
    if text == "-" or text.startswith("-:"):
        return f"{bounded_repr(text)} reads standard input (Kaldi's '-'); name the ark file and offset instead"
    if _RSPECIFIER.match(text):
        return (f"{bounded_repr(text)} is an rspecifier (ark:/scp:), not a file: an scp line names a file, "
                f"path or path:offset")
    if "\0" in text:
        return f"{bounded_repr(text)}: a file name holds no NUL byte"
    if text.endswith("]") and "[" in text:
        return f"{bounded_repr(text)}: [...] slices are not read; name the whole vector (path:offset)"
    return None


def _parse_line(text: str, number: int) -> _Entry:
    fields = text.split(maxsplit=1)
    if len(fields) < 2:
        raise _Refused("expected a key and a file (key path:offset)")
    key, value = fields[0], fields[1].strip()
    problem = rxfilename_problem(value)
    if problem is not None:
        raise _Refused(problem)
    match = _OFFSET.fullmatch(value)
    if match is None:
        return _Entry(number, key, value, 0, whole_file=True)
    digits = match.group(2)
    if len(digits) > _MAX_OFFSET_DIGITS:
        raise _Refused(f"an offset of {len(digits)} digits is past the end of any file")
    return _Entry(number, key, match.group(1), int(digits))


def _open_regular(path: str) -> tuple[int, int]:
    """``(fd, size)`` of a regular file, opened without blocking (a FIFO would wait for a writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise _Refused(f"{path}: file not found") from None
    except OSError as err:
        raise _Refused(f"{path}: cannot open ({err.strerror or err})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _Refused(f"{path}: not a regular file (a device, FIFO or directory holds no ark)")
    return fd, info.st_size


def _read(fd: int, size: int, offset: int, count: int) -> bytes:
    """Exactly ``count`` bytes at ``offset`` (the caller checked they lie within ``size``)."""
    parts, done = [], 0
    while done < count:
        chunk = os.pread(fd, count - done, offset + done)
        if not chunk:
            raise _Refused(f"the file ended at byte {offset + done} while reading {count} bytes (it shrank)")
        parts.append(chunk)
        done += len(chunk)
    return b"".join(parts)


def _int32(head: bytes, at: int, what: str) -> int:
    if len(head) < at + 5 or head[at] != 4:
        raise _Refused(f"truncated or malformed binary header: expected the {what} as the byte 4 and an int32")
    return int.from_bytes(head[at + 1:at + 5], "little", signed=True)


def _binary(fd: int, size: int, offset: int) -> tuple[np.ndarray, int]:
    head = os.pread(fd, _HEAD_BYTES, offset)
    space = head.find(b" ", 2)
    token = head[2:space] if space > 0 else head[2:6]
    if token.startswith(b"CM"):
        raise _Refused("a compressed matrix (CM): a speaker embedding is a vector (FV/DV) or a one-row matrix "
                       "(FM/DM)")
    if token not in _BINARY:
        raise _Refused(f"unknown binary object type {bounded_repr(token.decode('latin-1'))} (expected FV, DV, FM "
                       f"or DM)")
    dtype, matrix = _BINARY[token]
    at = space + 1
    if matrix:
        rows, cols = _int32(head, at, "row count"), _int32(head, at + 5, "column count")
        if rows != 1:
            raise _Refused(f"a matrix of {rows} rows: a speaker embedding is one vector ([D] or [1, D])")
        dim, at = cols, at + 10
    else:
        dim, at = _int32(head, at, "dimension"), at + 5
    if not 0 < dim <= MAX_DIM:
        raise _Refused(f"dimension {dim}: a speaker embedding has 1 to {MAX_DIM} values")
    start, nbytes = offset + at, dim * np.dtype(dtype).itemsize
    if start + nbytes > size:
        raise _Refused(f"truncated: {dim} values need {nbytes} bytes from byte {start}, the file has {size}")
    values = np.frombuffer(_read(fd, size, start, nbytes), dtype=dtype)
    try:
        return _finite(values), start + nbytes
    except _Refused as err:
        err.end = start + nbytes
        raise


def _text(fd: int, size: int, offset: int) -> tuple[np.ndarray, int]:
    """A text vector: read in growing blocks up to its ``]`` (at most ``MAX_TEXT_BYTES``), so a line costs about
    its vector's bytes."""
    window, block, close = b"", 4096, -1
    while close < 0:
        count = min(block, MAX_TEXT_BYTES - len(window), size - offset - len(window))
        if count <= 0 or window.lstrip(_SPACE)[:1] not in (b"", b"["):
            break
        searched = len(window)
        window += _read(fd, size, offset + searched, count)
        close = window.find(b"]", searched)
        block *= 2
    end = offset + len(window)
    first = len(window) - len(window.lstrip(_SPACE))
    if window[first:first + 1] != b"[":
        raise _Refused(f"no Kaldi vector at byte {offset} (expected \\0B or '[', found "
                       f"{bounded_repr(window[first:first + 8])})", end)
    if close < 0:
        where = "before the end of the file" if end >= size else f"within {MAX_TEXT_BYTES} bytes"
        raise _Refused(f"a text vector with no closing ']' {where}", end)
    body = window[first + 1:close]
    rows = [row for row in body.split(b"\n") if row.strip()]
    if len(rows) > 1:
        raise _Refused(f"a text matrix of {len(rows)} rows: a speaker embedding is one vector")
    tokens = body.split()
    if not tokens:
        raise _Refused("an empty vector")
    if len(tokens) > MAX_DIM:
        raise _Refused(f"{len(tokens)} values: a speaker embedding has at most {MAX_DIM}")
    bad = next((token for token in tokens if not _DECIMAL.fullmatch(token)), None)
    if bad is not None:
        raise _Refused(f"not a number in the text vector: {bounded_repr(bad.decode('latin-1'))}")
    return _finite(np.array([float(token) for token in tokens], dtype=np.float64)), offset + close + 1


def _finite(values: np.ndarray) -> np.ndarray:
    """``values`` as float32, refused when one is NaN or infinite, or beyond float32's range (``1e999``, a double
    of ``1e300``): an embedding holding one would poison every batch it joins."""
    with np.errstate(over="ignore", invalid="ignore"):
        result = values.astype(np.float32)
    finite = np.isfinite(result)
    if not finite.all():
        first = int(np.argmin(finite))
        raise _Refused(f"{int(finite.size - np.count_nonzero(finite))} value(s) NaN, infinite or beyond float32's "
                       f"range (the first, at index {first}, is {float(values[first])!r})")
    return result


def _read_object(fd: int, size: int, offset: int) -> tuple[np.ndarray, int]:
    """The vector at ``offset`` and the byte after it."""
    if offset >= size:
        raise _Refused(f"offset {offset} is past the end of the file ({size} bytes)")
    if os.pread(fd, 2, offset) != b"\0B":
        return _text(fd, size, offset)
    try:
        return _binary(fd, size, offset)
    except _Refused as err:
        err.end = min(size, offset + _HEAD_BYTES) if err.end is None else err.end
        raise


def _read_file(path: str, entries: list[_Entry], problems: list[tuple[int, str]]) -> dict[int, np.ndarray]:
    """The vectors of one file's ``entries``, by line; objects read in offset order, none overlapping another."""
    try:
        fd, size = _open_regular(path)
    except _Refused as err:
        problems.extend((entry.line, str(err)) for entry in entries)
        return {}
    found: dict[int, np.ndarray] = {}
    try:
        by_offset: dict[int, list[_Entry]] = {}
        for entry in entries:
            by_offset.setdefault(entry.offset, []).append(entry)
        start, end, end_line = 0, 0, None
        for offset in sorted(by_offset):
            named = by_offset[offset]
            try:
                if offset < end:
                    raise _Refused(f"byte {offset} lies inside what line {end_line} names (bytes {start} to "
                                   f"{end - 1}): the objects of an ark never overlap")
                start, end_line = offset, named[0].line
                vector, end = _read_object(fd, size, offset)
            except _Refused as err:
                if err.end is not None:  # bytes read are never read again for another line
                    end = max(end, err.end)
                problems.extend((entry.line, f"{path}:{offset}: {err}") for entry in named)
                continue
            for entry in named:
                found[entry.line] = vector
    finally:
        os.close(fd)
    return found


def read_vector_scp(scp_path: str) -> dict[str, ScpVector]:
    """The vectors ``scp_path`` names, by key in line order (module docstring: what is read, the bounds).  Every
    bad line is reported at once in one ``SpeechpackError``, each as ``scp_path:LINE: reason``."""
    if not os.path.isfile(scp_path):
        raise SpeechpackError(f"{scp_path}: file not found")
    problems: list[tuple[int, str]] = []
    entries: dict[str, _Entry] = {}
    for number, text, problem in read_lines(scp_path):
        if problem is None and not text.strip():
            continue
        try:
            if problem is not None:
                raise _Refused(problem)
            entry = _parse_line(text, number)
            if entry.key in entries:
                raise _Refused(f"key {entry.key!r} appears twice (first at line {entries[entry.key].line})")
        except _Refused as err:
            problems.append((number, str(err)))
            continue
        entries[entry.key] = entry
    by_file: dict[object, list[_Entry]] = {}
    for entry in entries.values():
        try:
            info = os.stat(entry.path)
            identity = (info.st_dev, info.st_ino)  # one file however it is spelled: read once, in order
        except OSError:
            identity = entry.path  # opening it says what is wrong
        by_file.setdefault(identity, []).append(entry)
    found: dict[int, np.ndarray] = {}
    for file_entries in by_file.values():
        found.update(_read_file(file_entries[0].path, file_entries, problems))
    first = min(found, default=None)  # the first line read gives the dimension every embedding must have
    for line in sorted(found):
        if found[line].shape != found[first].shape:
            problems.append((line, f"an embedding of dimension {found[line].shape[0]}, line {first}'s has "
                                   f"{found[first].shape[0]}: one scp holds embeddings of one dimension"))
    if problems:
        raise SpeechpackError(f"{scp_path}: {len(problems)} bad line(s):\n  "
                              + "\n  ".join(f"{scp_path}:{line}: {reason}" for line, reason in sorted(problems)))
    return {key: ScpVector(entry.line, found[entry.line], entry.source) for key, entry in entries.items()}


__all__ = ["MAX_DIM", "MAX_TEXT_BYTES", "ScpVector", "read_vector_scp", "rxfilename_problem"]
