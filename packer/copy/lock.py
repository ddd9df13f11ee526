"""One copy per node: ``DST.lock`` beside the destination, and the record of the last verified copy in it.

On a node where every rank runs ``speechpack copy`` to the same destination, the first to take the (exclusive)
``flock`` copies and the others wait.  The copy that finishes writes what it verified into the lock file: the
manifest's hash and each file's size, mtime and inode.  A rank that *waited* trusts that record when nothing changed
since (``record_matches``), instead of reading the whole pack again; a later, separate run re-hashes, since only a
verification made while it waited is trusted.  ``source`` arguments are ``packer.copy.to_directory``'s source description
(``manifest_sha256``, ``manifest_bytes``, ``files``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from typing import Callable, Iterator

from speechpack.packer.files import read_bytes
from speechpack.schemas.constants import MANIFEST_NAME
from speechpack.schemas.errors import SpeechpackError

#: Suffix of the lock file that sits beside the destination directory (``/local/packs/train.lock``).
LOCK_SUFFIX = ".lock"
#: Version of the verification record kept in the lock file.
RECORD_VERSION = 1


class DestinationLock:
    """An ``flock`` on ``DST.lock``, whose content records the last verified copy into ``DST``."""

    def __init__(self, fd: int, path: str, waited: bool):
        self.fd = fd
        self.path = path
        self.waited = waited

    def read_record(self) -> dict | None:
        os.lseek(self.fd, 0, os.SEEK_SET)
        raw = b""
        while chunk := os.read(self.fd, 1 << 20):
            raw += chunk
        try:
            record = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        return record if isinstance(record, dict) and record.get("version") == RECORD_VERSION else None

    def clear_record(self) -> None:
        os.ftruncate(self.fd, 0)

    def write_record(self, source, dst: str) -> None:
        record = {"version": RECORD_VERSION, "manifest_sha256": source.manifest_sha256,
                  "files": {rel: file_identity(os.path.join(dst, rel)) for rel in sorted(source.files)}}
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, json.dumps(record, sort_keys=True).encode("utf-8"))
        os.fsync(self.fd)


def file_identity(path: str) -> list[int]:
    """Size, mtime and inode: what changes when a file is rewritten or replaced after it was verified."""
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


def record_matches(lock: DestinationLock, source, dst: str) -> bool:
    """Whether the copy that held the lock verified exactly this source into ``dst``, untouched since."""
    record = lock.read_record()
    if record is None or record.get("manifest_sha256") != source.manifest_sha256:
        return False
    manifest_path = os.path.join(dst, MANIFEST_NAME)
    if not os.path.isfile(manifest_path) or read_bytes(manifest_path) != source.manifest_bytes:
        return False
    files = record.get("files", {})
    if set(files) != set(source.files):
        return False
    try:
        return all(files[rel] == file_identity(os.path.join(dst, rel)) for rel in source.files)
    except OSError:
        return False


@contextlib.contextmanager
def locked(dst: str, exclusive: bool, log: Callable[[str], None] | None,
           wait: bool = True) -> Iterator[DestinationLock]:
    """Hold ``DST.lock`` (exclusive to copy or build, shared to verify or to run one slice of an array build),
    saying so when another process holds it; with ``wait`` false, refuse instead of waiting.

    One lock file per destination, taken by every speechpack command that writes there (``copy``, ``build``,
    ``finalize``), so a copy never runs into a build of the same directory, nor two builds into each other.
    """
    path = dst.rstrip(os.sep) + LOCK_SUFFIX
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise SpeechpackError(f"{path}: cannot open the copy lock ({err.strerror or err})") from None
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    waited = False
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise SpeechpackError(f"{dst}: another speechpack process is writing there (it holds {path}): "
                                      f"wait for it to finish, or choose another directory") from None
            waited = True
            if log is not None:
                log(f"waiting for {path}: another process is copying or verifying {dst}")
            fcntl.flock(fd, mode)
        yield DestinationLock(fd, path, waited)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


__all__ = ["LOCK_SUFFIX", "DestinationLock", "locked", "record_matches"]
