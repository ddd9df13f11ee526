"""The per-file work of ``speechpack copy`` into a local destination (``packer.copy.to_directory`` drives it): the source pack
(a directory or an object-store URL) read through its manifest, each file copied through a ``.tmp-`` name while
it is hashed and renamed into place only when it matches, files already present re-hashed, and ``dataset.json``
published last.  The guarantees themselves are listed in ``packer.copy.to_directory``'s docstring.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from dataclasses import dataclass
from typing import BinaryIO

from speechpack.loader.pack import ObjectStorePackFiles, is_remote
from speechpack.loader.pack.object_store import describe_error
from speechpack.loader.pack.object_store import store_errors as remote_errors
from speechpack.packer.copy.report import COPY_BLOCK, CopyReport, ObjectReader, mismatch
from speechpack.packer.files import fsync_dir, read_bytes
from speechpack.packer.ownership import (
    INCOMING_MANIFEST,
    REPLACED_MANIFEST,
    remove_entries,
    retire_manifest,
    survey,
    walk,
)
from speechpack.schemas.constants import MANIFEST_NAME, TEMP_PREFIX
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.format import FileEntry
from speechpack.schemas.manifest_file import read_manifest_file


@dataclass(frozen=True)
class CopySource:
    """The source pack: ``dataset.json``'s exact bytes, parsed, and its file list; ``remote`` when it lies on
    object storage (``loader.pack.ObjectStorePackFiles``), read forward in large requests instead of ``open``."""

    path: str
    manifest_bytes: bytes
    files: dict[str, FileEntry]
    remote: ObjectStorePackFiles | None = None

    def name(self, rel: str) -> str:
        """A source file as messages show it (a path, or an object's URL)."""
        return self.remote.where(rel) if self.remote is not None else os.path.join(self.path, rel)

    def open(self, rel: str) -> BinaryIO | ObjectReader:
        return ObjectReader(self.remote, rel) if self.remote is not None else open(os.path.join(self.path, rel), "rb")

    @property
    def manifest_sha256(self) -> str:
        return hashlib.sha256(self.manifest_bytes).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files.values())


def read_source(src: str, endpoint_url: str | None = None) -> CopySource:
    """The source's manifest through the one checked parser (``schemas.manifest_file``): names that would lead
    outside the pack are refused before any path is built from them.  ``src`` may be an object-store URL."""
    if not is_remote(src):
        manifest_file = read_manifest_file(src)
        return CopySource(path=src, manifest_bytes=manifest_file.raw, files=manifest_file.manifest.file_entries())
    remote = ObjectStorePackFiles(src, endpoint_url)
    manifest_file = remote.read_manifest()  # the one reader: "not a pack" worded as for a directory
    return CopySource(path=remote.location, manifest_bytes=manifest_file.raw,
                      files=manifest_file.manifest.file_entries(), remote=remote)


class Staging:
    """The per-file work of one copy into ``dst`` (run by several threads) and the publication at the end."""

    def __init__(self, source: CopySource, dst: str, report: CopyReport):
        self.source = source
        self.dst = dst
        self.report = report
        self._present: set[str] = set()  # files at dst with their final size: hashed before anything is copied
        self._unpublished = False
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Refuse a destination holding anything no speechpack record lists (``packer.ownership``); finish an
        interrupted removal; retire a different pack (or an interrupted copy of another one) that lives there,
        keeping its files that the source lists with the same path; note which files already have their final
        size.  The source's manifest is recorded (``.tmp-incoming-dataset.json``) before the first change."""
        if os.path.exists(self.dst) and not os.path.isdir(self.dst):
            raise SpeechpackError(f"{self.dst}: exists and is not a directory")
        os.makedirs(self.dst, exist_ok=True)
        found = survey(self.dst)
        found.refuse_foreign("copy a pack into it")
        wanted = set(self.source.files)
        if found.replaced is not None or os.path.exists(os.path.join(self.dst, REPLACED_MANIFEST)):
            keep = set().union(*(m.file_entries() for m in (found.manifest, found.incoming) if m is not None))
            self._removed(retire_manifest(self.dst, REPLACED_MANIFEST, keep, fsync_dir))
        incoming = os.path.join(self.dst, INCOMING_MANIFEST)
        if os.path.exists(incoming) and read_bytes(incoming) != self.source.manifest_bytes:
            keep = set(found.manifest.file_entries()) if found.manifest is not None else set()
            self._removed(retire_manifest(self.dst, INCOMING_MANIFEST, keep, fsync_dir))
        manifest_path = os.path.join(self.dst, MANIFEST_NAME)
        if found.empty:
            pass  # the first write records the incoming manifest (unpublish)
        elif found.manifest is None or read_bytes(manifest_path) != self.source.manifest_bytes:
            self._record_incoming()  # from now on it owns what the copy writes (and what it keeps)
            if found.manifest is not None:  # another pack (or another version of this one): retire it
                self._removed(retire_manifest(self.dst, MANIFEST_NAME, wanted, fsync_dir))
            self._unpublished = True
        for rel in walk(self.dst):  # temporary files of an interrupted copy; anything the source does not list
            name = rel.rsplit("/", 1)[-1]
            path = os.path.join(self.dst, rel)
            if rel in (MANIFEST_NAME, INCOMING_MANIFEST) or rel in wanted or not os.path.lexists(path):
                continue
            if name.startswith(TEMP_PREFIX):
                remove_entries(self.dst, [rel])
            elif not os.path.isdir(path) or not any(w.startswith(rel + "/") for w in wanted):
                self.unpublish()
                remove_entries(self.dst, [rel])
        for rel, entry in self.source.files.items():
            path = os.path.join(self.dst, rel)
            if os.path.isfile(path) and os.path.getsize(path) == entry.size:
                self._present.add(rel)

    def _removed(self, rels: list[str]) -> None:
        self.report.removed += [os.path.join(self.dst, rel) for rel in rels]

    def _record_incoming(self) -> None:
        """Record the source's manifest in the destination: from now on it owns the files the copy writes."""
        path = os.path.join(self.dst, INCOMING_MANIFEST)
        with open(path, "wb") as fp:
            fp.write(self.source.manifest_bytes)
            fp.flush()
            os.fsync(fp.fileno())
        fsync_dir(self.dst)

    def bytes_to_write(self) -> int:
        """What the copy may still write: every file not already present with its final size."""
        return sum(e.size for rel, e in self.source.files.items() if rel not in self._present)

    def bytes_to_read(self) -> int:
        """What the progress bar counts: present files are hashed once, missing ones copied once."""
        return self.source.total_bytes

    def unpublish(self) -> None:
        """Before the first change to the destination's files (once): record the incoming manifest, then remove
        the destination's ``dataset.json``."""
        with self._lock:
            if self._unpublished:
                return
            if not os.path.exists(os.path.join(self.dst, INCOMING_MANIFEST)):
                self._record_incoming()  # owns every file the copy writes, before the first one
            manifest_path = os.path.join(self.dst, MANIFEST_NAME)
            if os.path.exists(manifest_path):
                os.remove(manifest_path)
                fsync_dir(self.dst)
            self._unpublished = True

    def process(self, rel: str, bar) -> str | None:
        """Keep, repair or copy one file; return a problem (naming the file) or None."""
        entry = self.source.files[rel]
        target = os.path.join(self.dst, rel)
        if rel in self._present:
            outcome = hash_existing(target, entry, bar)
            if outcome is None:
                with self._lock:
                    self.report.files_kept += 1
                return None
            self.unpublish()
            os.remove(target)  # bad bytes: never kept, never counted as a copy
            with self._lock:
                self.report.repaired.append(f"{target}: {outcome}; copied again from the source")
            bar.total += entry.size
            bar.refresh()
        self.unpublish()
        problem = copy_verified(self.source, rel, target, entry, bar)
        if problem is None:
            with self._lock:
                self.report.files_copied += 1
                self.report.bytes_copied += entry.size
        return problem

    def publish(self) -> None:
        """Write ``dataset.json`` last (temporary name, fsync, rename), exactly the source's bytes."""
        manifest_path = os.path.join(self.dst, MANIFEST_NAME)
        incoming = os.path.join(self.dst, INCOMING_MANIFEST)
        if os.path.exists(manifest_path):  # nothing changed: the pack was complete and verified
            if os.path.exists(incoming):
                os.remove(incoming)
                fsync_dir(self.dst)
            return
        for directory in sorted({os.path.dirname(os.path.join(self.dst, rel)) for rel in self.source.files}):
            fsync_dir(directory)
        temp = os.path.join(self.dst, TEMP_PREFIX + MANIFEST_NAME)
        with open(temp, "wb") as fp:
            fp.write(self.source.manifest_bytes)
            fp.flush()
            os.fsync(fp.fileno())
        os.replace(temp, manifest_path)
        if os.path.exists(incoming):
            os.remove(incoming)
        fsync_dir(self.dst)


def copy_verified(source: CopySource, rel: str, dst_path: str, entry: FileEntry, bar) -> str | None:
    """Copy one file through a ``.tmp-`` name, hashing what is read; rename it into place only when it matches."""
    src_path = source.name(rel)
    directory, name = os.path.split(dst_path)
    os.makedirs(directory, exist_ok=True)
    temp = os.path.join(directory, TEMP_PREFIX + name)
    digest = hashlib.sha256()
    size = 0
    try:
        with source.open(rel) as reader, open(temp, "wb") as writer:
            while chunk := reader.read(COPY_BLOCK):
                digest.update(chunk)
                writer.write(chunk)
                size += len(chunk)
                bar.update(len(chunk))
            writer.flush()
            os.fsync(writer.fileno())
    except FileNotFoundError:
        _remove_quietly(temp)
        return f"{src_path}: missing (listed in {MANIFEST_NAME}); nothing was copied"
    except remote_errors() as err:
        _remove_quietly(temp)
        where = getattr(err, "filename", None) or (temp if isinstance(err, OSError) and source.remote is None
                                                   else src_path)
        return f"{src_path} -> {dst_path}: cannot copy ({where}: {describe_error(err)})"
    wrong = mismatch(size, digest.hexdigest(), entry)
    if wrong:
        _remove_quietly(temp)
        return f"{src_path}: {wrong}: the source file is corrupt, it was not copied"
    os.replace(temp, dst_path)
    return None


def hash_existing(path: str, entry: FileEntry, bar) -> str | None:
    """Hash a file in place; return what is wrong with it (missing, size, hash) or None when it verifies."""
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(COPY_BLOCK)
    try:
        with open(path, "rb") as reader:
            while count := reader.readinto(buffer):
                digest.update(memoryview(buffer)[:count])
                size += count
                bar.update(count)
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        return f"cannot read ({err.strerror or err})"
    return mismatch(size, digest.hexdigest(), entry)


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
