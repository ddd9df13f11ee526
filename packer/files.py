"""The file helpers every part of packer writes and checks with: JSON in the pack's one style, written atomically;
``.npy`` files saved with their hash; directories fsynced; whole files hashed or read.

One home so that every writer (the build, cue banks, copies, exports) makes the same durability promise
(docs/building.md, "Durability"): a file is complete and fsynced before anything renames or names it, and a
rename is followed by an fsync of its directory.  This module imports nothing from the rest of packer: it is the
floor the build, copy, validate and export stand on.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from typing import Callable

import numpy as np

from speechpack.schemas.constants import TEMP_PREFIX
from speechpack.schemas.format import FileEntry

#: Bytes read at once when a whole file is hashed.
_HASH_BLOCK = 1 << 22


def dump_json(obj, fp) -> None:
    """The one JSON style of a pack: sorted keys, one-space indent, UTF-8, trailing newline."""
    json.dump(obj, fp, sort_keys=True, indent=1, ensure_ascii=False)
    fp.write("\n")


def write_json_atomic(path: str, obj, before_rename: Callable[[], None] | None = None) -> None:
    """Write JSON to ``path`` through a temporary file, fsync and rename: readers see all of it or nothing.

    ``before_rename`` runs once the temporary file is complete (a build's kill point: a process killed there
    leaves the ``.tmp-`` file, which the build's own tidying must remove)."""
    directory, name = os.path.split(path)
    temp = os.path.join(directory, f"{TEMP_PREFIX}{name}")
    with open(temp, "w", encoding="utf-8") as fp:
        dump_json(obj, fp)
        fp.flush()
        os.fsync(fp.fileno())
    if before_rename is not None:
        before_rename()
    os.replace(temp, path)
    fsync_dir(directory)


def make_directory(path: str) -> bool:
    """Create ``path`` (and its parents); return whether *this call* created it.

    ``os.mkdir`` either creates the directory or fails, atomically, so of two commands started together exactly
    one is told it created it (checking ``os.path.exists`` first tells both).  Only that one may remove the
    directory again, and only while it holds the destination's lock: the other may be about to write there.
    Raises ``OSError`` (``FileExistsError`` when ``path`` is something other than a directory)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return False
    return True


def fsync_dir(directory: str) -> None:
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_npy(path: str, array: np.ndarray) -> FileEntry:
    """``np.save`` to ``path`` (fsynced), returning its size and hash computed from the bytes written."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return save_bytes(path, buffer.getvalue())


def save_bytes(path: str, data: bytes) -> FileEntry:
    """``data`` written to ``path`` (fsynced), returning its size and hash."""
    with open(path, "wb") as fp:
        fp.write(data)
        fp.flush()
        os.fsync(fp.fileno())
    return FileEntry(size=len(data), sha256=hashlib.sha256(data).hexdigest())


def fresh_temp_dir(pack_dir: str, name: str) -> tuple[str, str]:
    """``(temporary, final)`` paths of a pack directory written as a whole and renamed into place when complete;
    stale copies of both (an earlier, killed build) are removed and the temporary one is created empty."""
    final = os.path.join(pack_dir, name)
    temp = os.path.join(pack_dir, TEMP_PREFIX + name)
    for stale in (temp, final):
        if os.path.exists(stale):
            shutil.rmtree(stale)
    os.makedirs(temp)
    return temp, final


def commit_temp_dir(temp: str, final: str) -> dict[str, FileEntry]:
    """Rename a directory ``fresh_temp_dir`` gave, once written, into place: every file hashed and every directory
    fsynced first (so the rename publishes only durable bytes), then the parent fsynced.  Returns each file's
    entry by its ``/``-separated path under the directory, sorted."""
    files = {}
    for directory, subdirs, names in os.walk(temp):
        subdirs.sort()
        for name in sorted(names):
            path = os.path.join(directory, name)
            files[os.path.relpath(path, temp).replace(os.sep, "/")] = hash_file(path)
        fsync_dir(directory)
    os.replace(temp, final)
    fsync_dir(os.path.dirname(final))
    return dict(sorted(files.items()))


def hash_file(path: str) -> FileEntry:
    """Size and SHA-256 of a file, read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fp:
        while block := fp.read(_HASH_BLOCK):
            digest.update(block)
    return FileEntry(size=os.path.getsize(path), sha256=digest.hexdigest())


def read_bytes(path: str) -> bytes:
    """A small file's whole content (the manifest)."""
    with open(path, "rb") as fp:
        return fp.read()


__all__ = ["commit_temp_dir", "dump_json", "fresh_temp_dir", "fsync_dir", "hash_file", "make_directory", "read_bytes",
           "save_npy", "write_json_atomic"]
