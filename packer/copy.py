"""``speechpack copy SRC DST``: stage a pack on node-local disk, verified byte for byte against its manifest.

Clusters read packs from shared filesystems, where random reads are slow; training wants them on the node's own
disk.  A plain ``cp``/``rsync`` trusts every byte it reads and leaves a half-copied directory that looks like a
pack when it is interrupted.  This copy is driven only by ``dataset.json``'s file lists (shards, columns, cues,
``skipped.json``), so it works for every pack kind, and it keeps the format's one promise: a directory with
``dataset.json`` is a complete pack.

- Every file is hashed while it is copied (the bytes read are the bytes written) and compared with the manifest;
  it is written under a ``.tmp-`` name and renamed into place only when complete, fsynced and verified.
- ``dataset.json`` is written last; before the first byte of an existing destination changes, its
  ``dataset.json`` is removed, so an interrupted copy never leaves a complete-looking pack.
- Idempotent: a file already at the destination with the right size is re-hashed and kept when it verifies; one
  that does not is reported and replaced from the (verified) source.  A corrupt source file is reported by name
  and the destination is not published.
- The free space is checked before anything is written, counting files already present with their final size.
- ``DST.lock`` (``fcntl.flock``, beside the destination) serialises copies: on a node where every rank runs the
  same command, one copies while the others wait.  The copy that finishes records what it verified (manifest
  hash, and each file's size, mtime and inode) in the lock file; a rank that *waited* trusts that record when
  nothing changed since, instead of reading the whole pack again.  A later, separate run re-hashes: only a
  verification made while we waited is trusted (``packer.copy_lock``).

There is deliberately no ``--trust-size``: a copy that trusts sizes accepts a flipped byte silently, and the one
case where re-hashing is expensive (N ranks staging the same pack) is covered by the lock file's record.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator

from packer.copy_lock import locked, read_bytes, record_matches
from packer.ownership import (
    INCOMING_MANIFEST,
    REPLACED_MANIFEST,
    pack_file_entries,
    remove_entries,
    retire_manifest,
    survey,
    walk,
)
from packer.remote import RemotePack, describe_error, is_remote, remote_errors
from packer.transfer import COPY_BLOCK, DEFAULT_JOBS, CopyError, CopyReport, mismatch, progress_bar, run_parallel
from packer.writer import fsync_dir
from schemas.constants import (
    HASH_NAME,
    MANIFEST_NAME,
    TEMP_PREFIX,
)
from schemas.errors import PackFormatError, SpeechpackError
from schemas.format import FileEntry
from schemas.manifest_file import parse_manifest, read_manifest_file
from schemas.units import format_bytes


@dataclass(frozen=True)
class _Source:
    """The source pack: ``dataset.json``'s exact bytes, parsed, and its file list; ``remote`` when it lies on
    object storage (``packer.remote``), read through its streams instead of ``open``."""

    path: str
    manifest_bytes: bytes
    files: dict[str, FileEntry]
    remote: RemotePack | None = None

    def name(self, rel: str) -> str:
        """A source file as messages show it (a path, or an object's URL)."""
        return self.remote.name(rel) if self.remote is not None else os.path.join(self.path, rel)

    def open(self, rel: str) -> BinaryIO:
        return self.remote.open_read(rel) if self.remote is not None else open(os.path.join(self.path, rel), "rb")

    @property
    def manifest_sha256(self) -> str:
        return hashlib.sha256(self.manifest_bytes).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files.values())


def _read_source(src: str, endpoint_url: str | None = None) -> _Source:
    """The source's manifest through the one checked parser (``schemas.manifest_file``): names that would lead
    outside the pack are refused before any path is built from them.  ``src`` may be an object-store URL."""
    if not is_remote(src):
        manifest_file = read_manifest_file(src)
        return _Source(path=src, manifest_bytes=manifest_file.raw, files=pack_file_entries(manifest_file.manifest))
    remote = RemotePack(src, endpoint_url)
    try:
        raw = remote.read_bytes(MANIFEST_NAME)
    except FileNotFoundError:
        raise PackFormatError(f"{src}: not a pack (no {MANIFEST_NAME}; an unfinished upload leaves none)") from None
    manifest = parse_manifest(raw, remote.name(MANIFEST_NAME))
    return _Source(path=remote.url, manifest_bytes=raw, files=pack_file_entries(manifest), remote=remote)


def _local(path: str) -> str:
    return path if is_remote(path) else os.path.abspath(path)


def copy_pack(src: str, dst: str, jobs: int = DEFAULT_JOBS, progress: bool = True,
              log: Callable[[str], None] = print, endpoint_url: str | None = None) -> CopyReport:
    """Copy the pack ``src`` to ``dst`` (created if absent), verifying every file; publish ``dataset.json`` last.
    Either side may be an object-store URL (``s3://bucket/packs/train``); a remote ``dst`` is published by
    ``packer.publish`` with the same guarantees.

    Raises :class:`CopyError` naming every corrupt or unreadable source file; ``dst`` is then not a pack.
    """
    if jobs < 1:
        raise SpeechpackError(f"--jobs must be at least 1, got {jobs}")
    _check_one_remote(src, dst)
    if is_remote(dst):
        from packer.publish import publish_pack

        return publish_pack(_local(src), dst, jobs=jobs, progress=progress, log=log, endpoint_url=endpoint_url)
    src, dst = _local(src), os.path.abspath(dst)
    source = _read_source(src, endpoint_url)
    if source.remote is None:
        _check_distinct(src, dst)
    with locked(dst, exclusive=True, log=log) as lock:
        started = time.perf_counter()
        if lock.waited and record_matches(lock, source, dst):
            return CopyReport(src=src, dst=dst, files=len(source.files), bytes_total=source.total_bytes,
                              trusted_record=True)
        lock.clear_record()
        report = CopyReport(src=src, dst=dst, files=len(source.files), bytes_total=source.total_bytes)
        stage = _Staging(source, dst, report)
        stage.prepare()
        _check_free_space(dst, stage.bytes_to_write())
        problems = run_parallel(stage.process, sorted(source.files, key=lambda r: -source.files[r].size), jobs,
                                 progress_bar(stage.bytes_to_read(), progress, f"copy {os.path.basename(dst)}"))
        if problems:
            raise CopyError(f"{dst}: not published ({len(problems)} problem(s); {MANIFEST_NAME} was not written, "
                            f"so the destination is not a pack)", problems)
        stage.publish()
        report.seconds = time.perf_counter() - started
        lock.write_record(source, dst)
        return report


def verify_copy(src: str, dst: str, jobs: int = DEFAULT_JOBS, progress: bool = True,
                log: Callable[[str], None] = print, endpoint_url: str | None = None) -> CopyReport:
    """Check that ``dst`` is a complete, byte-exact copy of ``src`` (every file re-hashed); change nothing.
    Either side may be an object-store URL.

    Raises :class:`CopyError` naming every missing, extra or corrupt destination file.
    """
    if jobs < 1:
        raise SpeechpackError(f"--jobs must be at least 1, got {jobs}")
    _check_one_remote(src, dst)
    if is_remote(dst):
        from packer.publish import verify_published

        return verify_published(_local(src), dst, jobs=jobs, progress=progress, endpoint_url=endpoint_url)
    src, dst = _local(src), os.path.abspath(dst)
    source = _read_source(src, endpoint_url)
    if not os.path.isdir(dst):
        raise CopyError(f"{dst}: not a verified copy of {src}", [f"{dst}: no such directory"])
    with locked(dst, exclusive=False, log=log):
        started = time.perf_counter()
        problems = []
        manifest_path = os.path.join(dst, MANIFEST_NAME)
        try:
            with open(manifest_path, "rb") as fp:
                if fp.read() != source.manifest_bytes:
                    problems.append(f"{manifest_path}: differs from {source.name(MANIFEST_NAME)}")
        except FileNotFoundError:
            problems.append(f"{manifest_path}: missing (the destination is not a complete pack)")
        problems += [f"{os.path.join(dst, rel)}: not in {MANIFEST_NAME} (a leftover)"
                     for rel in _unlisted_entries(dst, source)]

        def check(rel: str, bar) -> str | None:
            path = os.path.join(dst, rel)
            outcome = _hash_existing(path, source.files[rel], bar)
            return None if outcome is None else f"{path}: {outcome}"

        bar = progress_bar(source.total_bytes, progress, f"verify {os.path.basename(dst)}")
        problems += run_parallel(check, sorted(source.files), jobs, bar)
        if problems:
            raise CopyError(f"{dst}: not a verified copy of {src}", problems)
        return CopyReport(src=src, dst=dst, files=len(source.files), bytes_total=source.total_bytes,
                          files_kept=len(source.files), verify_only=True, seconds=time.perf_counter() - started)


def _check_one_remote(src: str, dst: str) -> None:
    """A copy stages a remote pack on disk or publishes a local one; from one store to another it would stream
    every byte through this machine, which the store's own tools (or two copies) do better."""
    if is_remote(src) and is_remote(dst):
        raise SpeechpackError(f"{src} -> {dst}: both are object-store URLs; copy one way through a directory "
                              f"(speechpack copy SRC_URL DIR, then speechpack copy DIR DST_URL)")


def _check_distinct(src: str, dst: str) -> None:
    real_src, real_dst = os.path.realpath(src), os.path.realpath(dst)
    if real_dst == real_src or real_dst.startswith(real_src + os.sep) or real_src.startswith(real_dst + os.sep):
        raise SpeechpackError(f"{dst}: the destination must lie outside the source pack {src} (and not contain it)")


class _Staging:
    """The per-file work of one copy into ``dst`` (run by several threads) and the publication at the end."""

    def __init__(self, source: _Source, dst: str, report: CopyReport):
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
            keep = set().union(*(pack_file_entries(m) for m in (found.manifest, found.incoming) if m is not None))
            self._removed(retire_manifest(self.dst, REPLACED_MANIFEST, keep, fsync_dir))
        incoming = os.path.join(self.dst, INCOMING_MANIFEST)
        if os.path.exists(incoming) and read_bytes(incoming) != self.source.manifest_bytes:
            keep = set(pack_file_entries(found.manifest)) if found.manifest is not None else set()
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
            outcome = _hash_existing(target, entry, bar)
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
        problem = _copy_verified(self.source, rel, target, entry, bar)
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


def _copy_verified(source: _Source, rel: str, dst_path: str, entry: FileEntry, bar) -> str | None:
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


def _hash_existing(path: str, entry: FileEntry, bar) -> str | None:
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


def _check_free_space(dst: str, needed: int) -> None:
    free = shutil.disk_usage(dst).free
    if needed > free:
        raise SpeechpackError(f"{dst}: the copy needs {format_bytes(needed)} more, but only {format_bytes(free)} "
                              f"is free there (files already in place with their final size are counted as present)")


def _unlisted_entries(dst: str, source: _Source) -> list[str]:
    """Relative paths under ``dst`` that the source does not list (leftovers, stray files), outermost first;
    ``dataset.json`` itself is not included."""
    if not os.path.isdir(dst):
        return []
    listed_dirs = {parent for rel in source.files for parent in _parents(rel)}
    unlisted: list[str] = []
    for rel in walk(dst):
        if rel == MANIFEST_NAME or rel in source.files or rel in listed_dirs:
            continue
        if not any(rel.startswith(outer + "/") for outer in unlisted):
            unlisted.append(rel)
    return unlisted


def _parents(rel: str) -> Iterator[str]:
    while "/" in rel:
        rel = rel.rsplit("/", 1)[0]
        yield rel


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


__all__ = ["CopyError", "CopyReport", "copy_pack", "pack_file_entries", "verify_copy"]
