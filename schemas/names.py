"""Which names a pack may hold: the paths its manifest names, and the sample keys and speakers it stores.

**Paths.**  Every path a reader, a validator or a copy builds from ``dataset.json`` (or a build receipt) is checked
here first, so a crafted pack cannot make speechpack read or write outside it.

Packs live on shared storage and every node copies them, so a manifest is untrusted input.  Without these checks a
shard ``directory`` of ``"../../x"`` or a shard file named ``"../../../payload.txt"`` made ``speechpack copy`` write
outside its destination and ``validate``/``open_pack`` read outside the pack, and an absolute directory read any
path (``os.path.join`` drops everything before an absolute part).  The rules (``docs/format.md``, "Names"):

- a shard directory is ``shard-`` and at least six digits, written exactly as ``shard_dir_name`` writes its number;
- a file name is one path component made of ASCII letters, digits, ``_``, ``-`` and ``.``, not starting with ``.``
  (so never ``.``, ``..``, a ``.tmp-`` staging name or a hidden file), at most ``MAX_NAME_BYTES`` long;
- a path under ``cues/`` is such components joined by ``/``.

``schemas.format`` applies them while parsing, and then requires the exact names the format defines for the kind
(the stream files, the column files, ``skipped.json``): the pattern is the outer fence, the exact set the inner one.

**Sample keys and speakers**: what they may hold, checked once for every input family.

Keys and speakers end up in ``columns/*.npy`` as fixed-width ``|S`` byte strings, which numpy reads back with
trailing NUL bytes stripped: ``"a"`` and ``"a\\x00"`` would be stored apart and read back as the same name.
Other control characters are as unsafe in a name (a newline splits a log line or a grep, an escape sequence
rewrites a terminal), and a lone surrogate (``"\\ud800"``, which JSON's ``\\u`` escapes can produce) has
no UTF-8 encoding at all, so ``index.json`` could not be written.  All of them are refused when the input is
read, as a problem of the line that holds them.
"""

from __future__ import annotations

import re

from speechpack.schemas.constants import SHARD_DIR_DIGITS, SHARD_DIR_PREFIX, shard_dir_name
from speechpack.schemas.errors import PackFormatError

#: One path component of a pack: no separator, no leading dot, nothing a shell or a filesystem treats specially.
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_SHARD_DIRECTORY = re.compile(re.escape(SHARD_DIR_PREFIX) + r"([0-9]{%d,})" % SHARD_DIR_DIGITS)
#: Longest name a pack may use (the usual filesystem limit, NAME_MAX).
MAX_NAME_BYTES = 255


def check_component(name: object, where: str) -> str:
    """``name`` if it is one safe path component, else a ``PackFormatError`` naming ``where`` and the value."""
    if not _is_component(name):
        raise PackFormatError(f"{where}: {name!r} is not a file name a pack may use (one path component of letters, "
                              f"digits, '_', '-' and '.', not starting with '.'; no '/', '\\', '..' or absolute path)")
    return name


def check_shard_directory(name: object, where: str) -> str:
    """``name`` if it is a shard directory name (``shard-000042``), else a ``PackFormatError``."""
    match = _SHARD_DIRECTORY.fullmatch(name) if isinstance(name, str) else None
    if match is None or shard_dir_name(int(match.group(1))) != name:
        raise PackFormatError(f"{where}: {name!r} is not a shard directory name ({shard_dir_name(0)!r}, "
                              f"{shard_dir_name(1)!r}, ...)")
    return name


def check_relative_path(path: object, where: str, inside: str = "the pack") -> str:
    """``path`` if it is safe components joined by ``/`` (a file under ``cues/``), else a ``PackFormatError``
    saying it is not a relative path ``inside`` and which component is wrong."""
    if not isinstance(path, str) or not path:
        raise PackFormatError(f"{where}: {path!r} is not a relative path inside {inside}")
    for part in path.split("/"):
        if not _is_component(part):
            raise PackFormatError(f"{where}: {path!r} is not a relative path inside {inside} ({part!r} is not a "
                                  f"file name a pack may use)")
    return path


def _is_component(name: object) -> bool:
    return isinstance(name, str) and len(name) <= MAX_NAME_BYTES and _COMPONENT.fullmatch(name) is not None


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


__all__ = ["MAX_NAME_BYTES", "check_component", "check_name", "check_relative_path", "check_shard_directory",
           "encoding_problem", "name_problem"]
