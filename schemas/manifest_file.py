"""Reading ``PACK/dataset.json``: the one function every command goes through (``open_pack`` and so ``inspect``
and the loaders, ``validate``, ``copy``), so every manifest is checked the same way, names included
(``schemas.names``), before any path is built from it.

It returns the exact bytes (``copy`` publishes them verbatim) and the file's identity at the moment it was read
(``fstat`` of the descriptor the bytes came from): a reader maps stream files lazily, maybe hours later and in
another process, and compares this identity then to notice that the pack was replaced under it
(``docs/format.md``, "What a reader verifies").
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Callable

from speechpack.schemas.constants import MANIFEST_NAME
from speechpack.schemas.documents import parse_json
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import Manifest


@dataclass(frozen=True)
class FileIdentity:
    """What identifies one version of a file cheaply: a writer that replaces it (by rename, or by deleting and
    writing again) gives a new inode or modification time; one that rewrites it in place a new modification time."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, stat: os.stat_result) -> "FileIdentity":
        return cls(device=stat.st_dev, inode=stat.st_ino, size=stat.st_size, mtime_ns=stat.st_mtime_ns)

    @classmethod
    def of_path(cls, path: str) -> "FileIdentity | None":
        """The identity of ``path`` now; None when it is gone."""
        try:
            return cls.of(os.stat(path))
        except FileNotFoundError:
            return None


@dataclass(frozen=True)
class ManifestFile:
    """A parsed, checked ``dataset.json``, its exact bytes and its identity when read."""

    path: str
    manifest: Manifest
    raw: bytes
    identity: FileIdentity

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()


def read_from(path: str) -> str:
    """For a relative path, where it was read from: a pack path in a config is read from the current directory,
    not from the config file's (docs/loader.md, "Pack paths"), which an error about it must say."""
    if os.path.isabs(path):
        return ""
    return f" (a relative path, read from the current directory {os.getcwd()})"


def read_manifest_file(pack_dir: str) -> ManifestFile:
    """Read and check ``pack_dir/dataset.json``; a directory without one is not a pack."""
    if not os.path.isdir(pack_dir):
        raise PackFormatError(f"{pack_dir}: no such pack directory{read_from(pack_dir)}")

    def identity_and_bytes() -> tuple[FileIdentity, bytes]:
        with open(os.path.join(pack_dir, MANIFEST_NAME), "rb") as fp:
            return FileIdentity.of(os.fstat(fp.fileno())), fp.read()

    return manifest_from(identity_and_bytes, pack_dir, os.path.join(pack_dir, MANIFEST_NAME), read_from(pack_dir))


def manifest_from(identity_and_bytes: Callable[[], tuple[FileIdentity, bytes]], location: str, manifest_path: str,
                  hint: str = "") -> ManifestFile:
    """The manifest that ``identity_and_bytes`` reads (from a directory or through any ``PackFiles``), checked;
    a missing one means ``location`` is not a pack, and every error names where it was read from."""
    try:
        identity, raw = identity_and_bytes()
    except FileNotFoundError:
        raise PackFormatError(f"{location}: not a pack (no {MANIFEST_NAME}; an unfinished build leaves none)"
                              f"{hint}") from None
    except OSError as err:
        raise PackFormatError(f"{manifest_path}: cannot read ({err.strerror or err})") from None
    return ManifestFile(path=manifest_path, manifest=parse_manifest(raw, manifest_path), raw=raw, identity=identity)


def parse_manifest(raw: bytes, manifest_path: str) -> Manifest:
    """Check a manifest's bytes, read from anywhere (an object store too); errors name ``manifest_path``."""
    return Manifest.from_dict(parse_json(raw, manifest_path, error=PackFormatError), manifest_path)


__all__ = ["FileIdentity", "ManifestFile", "manifest_from", "parse_manifest", "read_from", "read_manifest_file"]
