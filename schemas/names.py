"""Which names a manifest may hold: every path a reader, a validator or a copy builds from ``dataset.json`` (or a
build receipt) is checked here first, so a crafted pack cannot make speechpack read or write outside it.

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


__all__ = ["MAX_NAME_BYTES", "check_component", "check_relative_path", "check_shard_directory"]
