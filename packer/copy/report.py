"""What ``copy`` (to a directory, ``packer.copy.to_directory``) and ``publish`` (to object storage,
``packer.copy.publish``) share: the report, the error naming every offending file, the size-and-hash comparison,
reading an object forward in large requests, the worker threads and the progress bar.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from typing import Callable

from speechpack.loader.pack import PackFiles

from tqdm import tqdm

from speechpack.packer.ownership import LOCK_SUFFIX
from speechpack.schemas.constants import MANIFEST_NAME
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.format import FileEntry
from speechpack.schemas.units import format_bytes, plural

#: Bytes read and written per step; large enough that hashing and I/O release the GIL for most of the time.
COPY_BLOCK = 4 << 20
#: Bytes asked of an object store per request when an object is read forward (a copy from the store, a publish
#: verified by streaming its objects back): few requests, and memory bounded by a few blocks per thread.
STREAM_BLOCK = 8 << 20
#: Default number of copy threads: enough to keep a network filesystem and a local NVMe busy at once.
DEFAULT_JOBS = 4


class ObjectReader:
    """File ``rel`` of a pack on a store, read forward (``read(n)``, as a file is) in ``STREAM_BLOCK`` ranges of
    ``PackFiles.read_range``; an absent object raises ``FileNotFoundError`` at the first read."""

    def __init__(self, files: PackFiles, rel: str, block: int = STREAM_BLOCK):
        self.files, self.rel, self.block = files, rel, block
        self._buffer = b""
        self._offset = 0  # of the first byte after the buffer
        self._ended = False

    def read(self, size: int) -> bytes:
        while len(self._buffer) < size and not self._ended:
            chunk = self.files.read_range(self.rel, self._offset, self._offset + max(self.block, size))
            self._offset += len(chunk)
            self._ended = len(chunk) < max(self.block, size)
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def __enter__(self) -> "ObjectReader":
        return self

    def __exit__(self, *exc) -> None:
        self._buffer = b""


class CopyError(SpeechpackError):
    """The copy could not produce a verified pack; ``problems`` names every offending file."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message + "".join(f"\n  {p}" for p in problems or []))
        self.problems = list(problems or [])


@dataclass
class CopyReport:
    """What a copy (or a verification) did, file by file."""

    src: str
    dst: str
    files: int = 0
    bytes_total: int = 0
    files_copied: int = 0
    bytes_copied: int = 0
    files_kept: int = 0
    repaired: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    trusted_record: bool = False
    verify_only: bool = False
    seconds: float = 0.0

    def describe(self) -> str:
        if self.verify_only:
            return (f"{self.dst}: a verified copy of {self.src} ({plural(self.files, 'file')}, {format_bytes(self.bytes_total)} "
                    f"re-hashed in {self.seconds:.1f} s)")
        if self.trusted_record:
            head = (f"{self.dst}: verified pack ({plural(self.files, 'file')}, {format_bytes(self.bytes_total)}), copied by "
                    f"the process that held {self.dst}{LOCK_SUFFIX} while this one waited")
        else:
            copied = f"{self.files_copied} copied"
            if self.bytes_copied and self.seconds > 0:
                copied += f" ({format_bytes(self.bytes_copied)}, {self.bytes_copied / self.seconds / 1e6:.0f} MB/s)"
            head = (f"{self.dst}: verified pack ({plural(self.files, 'file')}, {format_bytes(self.bytes_total)}): {copied}, "
                    f"{self.files_kept} already in place and verified, {self.seconds:.1f} s")
        lines = [head]
        lines += [f"  repaired: {item}" for item in self.repaired]
        lines += [f"  removed (not in {MANIFEST_NAME}): {item}" for item in self.removed]
        return "\n".join(lines)


def mismatch(size: int, sha256: str, entry: FileEntry) -> str | None:
    if size != entry.size:
        return f"{size} bytes, {MANIFEST_NAME} records {entry.size}"
    if sha256 != entry.sha256:
        return f"sha256 {sha256} does not match {MANIFEST_NAME} ({entry.sha256})"
    return None


def run_parallel(work: Callable[[str, object], str | None], items: list[str], jobs: int, bar) -> list[str]:
    """Run ``work(item, bar)`` on ``jobs`` threads; return every problem, in the order of ``items``."""
    with bar, concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda item: work(item, bar), items))
    return [problem for problem in results if problem is not None]


def progress_bar(total: int, enabled: bool, label: str):
    """A bar counting bytes in decimal units (kB, MB, GB), the units of the summary (``format_bytes``)."""
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1000, desc=label, disable=not enabled,
                leave=False)


__all__ = ["COPY_BLOCK", "DEFAULT_JOBS", "STREAM_BLOCK", "CopyError", "CopyReport", "ObjectReader", "mismatch",
           "progress_bar", "run_parallel"]
