"""The files of a pack as ``validate`` reads them, through ``loader.pack.PackFiles``: each file checked against its
``dataset.json`` entry (present, of the recorded size and, unless ``--no-hash``, of the recorded SHA-256) before
its content is used, and every problem put into the ``PackReport`` under the file's path or URL.

The checks of a pack (``packer.validate.pack``) are written once over :class:`CheckedFiles`; only how a file's bytes
arrive differs, and that is all the two classes here hold:

- :class:`DirectoryFiles`, a pack in a directory: files are hashed from disk in blocks (``packer.files.hash_file``)
  and stream files mapped, so memory stays flat however large a shard is.  A directory has directories, so it also
  has their problems: a listed shard directory missing, a file or shard directory nobody listed.
- :class:`StoreFiles`, a pack on object storage: nothing is copied to disk.  Each object is fetched once, hashed
  and size-checked as it arrives, and kept in memory as the array a map would give while its shard is checked
  (memory: about one shard's stream files, ``--shard-size``).  Objects under the prefix that ``dataset.json`` does
  not list are errors, as files are in a directory; leftovers of an interrupted upload (``.tmp-`` names) warnings.
"""

from __future__ import annotations

import hashlib
import os
import contextlib
import io
import shutil
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ContextManager, Iterator

import numpy as np

from speechpack.loader.pack import DirectoryPackFiles, PackFiles
from speechpack.loader.pack.object_store import describe_error, store_errors
from speechpack.packer.files import hash_file
from speechpack.packer.validate.report import PackReport
from speechpack.schemas.constants import COLUMNS_DIR, MANIFEST_NAME, SHARD_DIR_PREFIX, TEMP_PREFIX
from speechpack.schemas.cues import CUES_DIR
from speechpack.schemas.errors import NpyHeaderError
from speechpack.schemas.format import FileEntry, Manifest, StreamSpec
from speechpack.schemas.npyfile import NpyHeader, read_npy_header, read_npy_header_from


def check_file(file_path: str, expected: FileEntry, report: PackReport, check_hashes: bool) -> None:
    """One listed file on disk: missing, a different size, or (with ``check_hashes``) a different SHA-256 is an
    error."""
    if not os.path.isfile(file_path):
        report.error(file_path, "file missing")
        return
    size = os.path.getsize(file_path)
    if size != expected.size:
        report.error(file_path, f"size {size} bytes, {MANIFEST_NAME} records {expected.size}")
    elif check_hashes:
        _check_hash(file_path, hash_file(file_path).sha256, expected, "file", report)


def _check_hash(where: str, actual: str, expected: FileEntry, holder: str, report: PackReport) -> None:
    if actual != expected.sha256:
        report.error(where, f"sha256 {actual} does not match {MANIFEST_NAME} ({expected.sha256}): the {holder} "
                            f"changed after the pack was written")


def stream_header_problem(header: NpyHeader, spec: StreamSpec, size: int, holder: str = "file") -> str | None:
    """What is wrong with a shard stream's ``.npy`` header, read from a file (or an object, ``holder``) of ``size``
    bytes: a dtype, order or row shape other than the stream catalogue's, or a size other than the header
    promises; None when it fits."""
    shape, dtype, fortran = header.shape, header.dtype, header.fortran_order
    if dtype.str != spec.dtype or fortran or len(shape) != 1 + len(spec.row_shape) \
            or tuple(shape[1:]) != spec.row_shape:
        return (f"header says {dtype.str} {shape} (fortran={fortran}); the catalogue says {spec.dtype} rows of "
                f"{list(spec.row_shape)}")
    if size != header.expected_size:
        return (f"header promises {header.expected_size} bytes, {holder} has {size} "
                f"({'truncated' if size < header.expected_size else 'trailing bytes'})")
    return None


@dataclass
class StagedCues:
    """Where the cue checks read a pack's banks (``root``, holding ``cues/``), the report their problems go to, and
    whether they still hash each file."""

    root: str
    report: PackReport
    check_hashes: bool


class CheckedFiles(ABC):
    """A pack's files (``PackFiles``) read for ``validate``, each checked against ``manifest`` as it is read.

    ``read`` and ``stream`` return None for a file that cannot be used, the reason already in ``report``.
    """

    #: How messages call a file: "the file changed", "file has N bytes".
    holder = "file"
    size_holder = "file"

    def __init__(self, files: PackFiles, manifest: Manifest, report: PackReport, check_hashes: bool):
        self.files = files
        self.manifest = manifest
        self.report = report
        self.check_hashes = check_hashes
        self.entries = manifest.file_entries()

    def where(self, rel: str) -> str:
        return self.files.where(rel)

    @abstractmethod
    def check_layout(self) -> None:
        """Entries no record lists (errors) and leftovers of an interrupted write (warnings)."""

    @abstractmethod
    def check_shard(self, directory: str) -> bool:
        """Start a shard: False when it is missing as a whole (reported); files of it nobody listed are errors."""

    @abstractmethod
    def check(self, rel: str) -> None:
        """A listed file whose content no check reads: present, of its size and hash."""

    @abstractmethod
    def read(self, rel: str) -> bytes | None:
        """A small listed file's bytes (``index.json``, a column)."""

    @abstractmethod
    def npy_header(self, rel: str) -> tuple[NpyHeader, int] | None:
        """A listed ``.npy`` file's header and size (``unreadable .npy header`` reported when it has none)."""

    @abstractmethod
    def array(self, rel: str, header: NpyHeader):
        """The array of a ``.npy`` file whose header passed: mapped, or over the fetched bytes."""

    def stream(self, rel: str, spec: StreamSpec):
        """A shard's stream file as an array, its header checked against the catalogue and its size."""
        found = self.npy_header(rel)
        if found is None:
            return None
        header, size = found
        problem = stream_header_problem(header, spec, size, holder=self.size_holder)
        if problem is not None:
            self.report.error(self.where(rel), problem)
            return None
        return self.array(rel, header)

    def done_with_shard(self) -> None:
        """The shard's checks are over: what was kept for them may go."""

    @abstractmethod
    def check_columns(self) -> bool:
        """The listed column files checked (and nobody else's there); False when there are none to compare."""

    @abstractmethod
    def load_column(self, rel: str):
        """A column's array (raises when it cannot be read; None: not fetched, the reason already reported)."""

    @abstractmethod
    def cue_directory(self) -> ContextManager[StagedCues | None]:
        """A directory holding the pack's ``cues/`` for the bank checks (``packer.validate.pack.check_cues``), or
        None when the manifest lists no cues and there is nothing more to check."""


class DirectoryFiles(CheckedFiles):
    """A pack in a local directory (see the module docstring)."""

    def __init__(self, files: DirectoryPackFiles, manifest: Manifest, report: PackReport, check_hashes: bool):
        super().__init__(files, manifest, report, check_hashes)
        self.root = files.root
        self._shard_files = {shard.directory: shard.files for shard in manifest.shards}

    def check_layout(self) -> None:
        listed = {shard.directory for shard in self.manifest.shards}
        for name in sorted(os.listdir(self.root)):
            full = os.path.join(self.root, name)
            if name.startswith(TEMP_PREFIX):
                self.report.warn(full, "leftover of an interrupted write (safe to delete)")
            elif name.startswith(SHARD_DIR_PREFIX) and name not in listed:
                self.report.error(full, f"shard directory not listed in {MANIFEST_NAME}")

    def check_shard(self, directory: str) -> bool:
        shard_dir = self.where(directory)
        if not os.path.isdir(shard_dir):
            self.report.error(shard_dir, "shard directory missing")
            return False
        listed = self._shard_files[directory]
        for name in sorted(set(os.listdir(shard_dir)) - set(listed)):
            self.report.error(os.path.join(shard_dir, name), f"file not listed in {MANIFEST_NAME}")
        for name in sorted(listed):
            self.check(f"{directory}/{name}")
        return True

    def check(self, rel: str) -> None:
        check_file(self.where(rel), self.entries[rel], self.report, self.check_hashes)

    def read(self, rel: str) -> bytes:
        """The file's bytes; an ``OSError`` (a missing ``index.json``) is the caller's to word."""
        with open(self.where(rel), "rb") as fp:
            return fp.read()

    def npy_header(self, rel: str) -> tuple[NpyHeader, int] | None:
        path = self.where(rel)
        try:
            header = read_npy_header(path)
        except NpyHeaderError as err:
            self.report.error(path, f"unreadable .npy header ({err.reason})")
            return None
        return header, os.path.getsize(path)

    def array(self, rel: str, header: NpyHeader):
        return np.load(self.where(rel), mmap_mode="r", allow_pickle=False)

    def check_columns(self) -> bool:
        directory = self.where(COLUMNS_DIR)
        if not os.path.isdir(directory):
            self.report.error(directory, "columns directory missing")
            return False
        for name in sorted(set(os.listdir(directory)) - set(self.manifest.columns)):
            self.report.error(os.path.join(directory, name), f"file not listed in {MANIFEST_NAME}")
        for name in sorted(self.manifest.columns):
            self.check(f"{COLUMNS_DIR}/{name}")
        return True

    def load_column(self, rel: str):
        return np.load(self.where(rel), allow_pickle=False)

    @contextlib.contextmanager
    def cue_directory(self) -> Iterator[StagedCues]:
        yield StagedCues(self.root, self.report, self.check_hashes)


class StoreFiles(CheckedFiles):
    """A pack on object storage (see the module docstring)."""

    holder = "object"
    size_holder = "the object"

    def __init__(self, files: PackFiles, manifest: Manifest, report: PackReport, check_hashes: bool,
                 listing: dict[str, int]):
        super().__init__(files, manifest, report, check_hashes)
        self.listing = listing
        self._kept: dict[str, bytes] = {}  # the current shard's stream objects, while their arrays are checked
        self._columns: dict[str, bytes | None] = {}

    def check_layout(self) -> None:
        for rel in sorted(self.listing):
            if rel == MANIFEST_NAME or rel in self.entries:
                continue
            if any(part.startswith(TEMP_PREFIX) for part in rel.split("/")):
                self.report.warn(self.where(rel), "leftover of an interrupted upload (safe to delete)")
            else:
                self.report.error(self.where(rel), f"object not listed in {MANIFEST_NAME}")

    def check_shard(self, directory: str) -> bool:
        return True  # a prefix has no directories; each object is checked when fetched

    def _fetch(self, rel: str) -> bytes | None:
        """The object's bytes, checked against its entry; None when it is missing or unreadable (reported)."""
        where = self.where(rel)
        if rel not in self.listing:
            self.report.error(where, "object missing")
            return None
        try:
            data = self.files.read_bytes(rel)
        except store_errors() as err:
            self.report.error(where, f"cannot read ({describe_error(err)})")
            return None
        expected = self.entries[rel]
        if len(data) != expected.size:
            self.report.error(where, f"size {len(data)} bytes, {MANIFEST_NAME} records {expected.size}")
        elif self.check_hashes:
            _check_hash(where, hashlib.sha256(data).hexdigest(), expected, self.holder, self.report)
        return data

    def check(self, rel: str) -> None:
        self._fetch(rel)

    def read(self, rel: str) -> bytes | None:
        return self._fetch(rel)

    def npy_header(self, rel: str) -> tuple[NpyHeader, int] | None:
        data = self._fetch(rel)
        if data is None:
            return None
        try:
            header = read_npy_header_from(io.BytesIO(data), self.where(rel))
        except NpyHeaderError as err:
            self.report.error(self.where(rel), f"unreadable .npy header ({err.reason})")
            return None
        self._kept[rel] = data
        return header, len(data)

    def array(self, rel: str, header: NpyHeader):
        data = self._kept[rel]
        array = np.frombuffer(data, dtype=header.dtype, offset=header.data_offset).reshape(header.shape)
        array.flags.writeable = False
        return array

    def done_with_shard(self) -> None:
        self._kept.clear()

    def check_columns(self) -> bool:
        self._columns = {f"{COLUMNS_DIR}/{name}": self._fetch(f"{COLUMNS_DIR}/{name}")
                         for name in sorted(self.manifest.columns)}
        return True

    def load_column(self, rel: str):
        data = self._columns.get(rel)
        return None if data is None else np.load(io.BytesIO(data), allow_pickle=False)

    @contextlib.contextmanager
    def cue_directory(self) -> Iterator[StagedCues | None]:
        """The cue objects, each hashed and size-checked as it is fetched, written to a temporary directory for the
        time of the bank checks (``schemas.cue_banks`` reads a bank directory; cue banks are small next to the
        audio); their messages are given back under the objects' URLs."""
        if not self.manifest.cues:
            yield None
            return
        staging = tempfile.mkdtemp(prefix="speechpack-cues-")
        try:
            for name in sorted(self.manifest.cues):
                data = self._fetch(f"{CUES_DIR}/{name}")
                if data is None:
                    continue
                path = os.path.join(staging, CUES_DIR, *name.split("/"))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as fp:
                    fp.write(data)
            staged = StagedCues(staging, PackReport(staging), check_hashes=False)  # hashed above, as fetched
            yield staged
            for issue in staged.report.errors:
                self.report.error(issue.file.replace(staging, self.files.location, 1), issue.message)
            for issue in staged.report.warnings:
                self.report.warn(issue.file.replace(staging, self.files.location, 1), issue.message)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def checked_files(files: PackFiles, manifest: Manifest, report: PackReport, check_hashes: bool,
                  listing: dict[str, int] | None = None) -> CheckedFiles:
    """The checked reader for ``files``: a directory's, or an object store's (whose ``listing`` was read)."""
    if isinstance(files, DirectoryPackFiles):
        return DirectoryFiles(files, manifest, report, check_hashes)
    return StoreFiles(files, manifest, report, check_hashes, listing if listing is not None else files.listing())


__all__ = ["CheckedFiles", "DirectoryFiles", "StagedCues", "StoreFiles", "check_file", "checked_files",
           "stream_header_problem"]
