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
  verification made while we waited is trusted (``packer.ownership``).

There is deliberately no ``--trust-size``: a copy that trusts sizes accepts a flipped byte silently, and the one
case where re-hashing is expensive (N ranks staging the same pack) is covered by the lock file's record.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Callable, Iterator

from speechpack.loader.pack import is_remote
from speechpack.packer.copy.report import DEFAULT_JOBS, CopyError, CopyReport, progress_bar, run_parallel
from speechpack.packer.copy.staging import CopySource, Staging, hash_existing, read_source
from speechpack.packer.ownership import locked, record_matches, walk
from speechpack.schemas.constants import MANIFEST_NAME
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.units import format_bytes


def _local(path: str) -> str:
    return path if is_remote(path) else os.path.abspath(path)


def copy_pack(src: str, dst: str, jobs: int = DEFAULT_JOBS, progress: bool = True,
              log: Callable[[str], None] = print, endpoint_url: str | None = None) -> CopyReport:
    """Copy the pack ``src`` to ``dst`` (created if absent), verifying every file; publish ``dataset.json`` last.
    Either side may be an object-store URL (``s3://bucket/packs/train``); a remote ``dst`` is published by
    ``packer.copy.publish`` with the same guarantees.

    Raises :class:`CopyError` naming every corrupt or unreadable source file; ``dst`` is then not a pack.
    """
    if jobs < 1:
        raise SpeechpackError(f"--jobs must be at least 1, got {jobs}")
    _check_one_remote(src, dst)
    if is_remote(dst):
        from speechpack.packer.copy.publish import publish_pack

        return publish_pack(_local(src), dst, jobs=jobs, progress=progress, log=log, endpoint_url=endpoint_url)
    src, dst = _local(src), os.path.abspath(dst)
    source = read_source(src, endpoint_url)
    if source.remote is None:
        _check_distinct(src, dst)
    with locked(dst, exclusive=True, log=log) as lock:
        started = time.perf_counter()
        if lock.waited and record_matches(lock, source, dst):
            return CopyReport(src=src, dst=dst, files=len(source.files), bytes_total=source.total_bytes,
                              trusted_record=True)
        lock.clear_record()
        report = CopyReport(src=src, dst=dst, files=len(source.files), bytes_total=source.total_bytes)
        stage = Staging(source, dst, report)
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
        from speechpack.packer.copy.publish import verify_published

        return verify_published(_local(src), dst, jobs=jobs, progress=progress, endpoint_url=endpoint_url)
    src, dst = _local(src), os.path.abspath(dst)
    source = read_source(src, endpoint_url)
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
            outcome = hash_existing(path, source.files[rel], bar)
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


def _check_free_space(dst: str, needed: int) -> None:
    free = shutil.disk_usage(dst).free
    if needed > free:
        raise SpeechpackError(f"{dst}: the copy needs {format_bytes(needed)} more, but only {format_bytes(free)} "
                              f"is free there (files already in place with their final size are counted as present)")


def _unlisted_entries(dst: str, source: CopySource) -> list[str]:
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


__all__ = ["CopyError", "CopyReport", "copy_pack", "verify_copy"]
