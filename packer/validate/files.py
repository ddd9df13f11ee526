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

The cue checks read ``cues/`` through :class:`CueFiles` the same way (``CheckedFiles.cue_files``): from a directory
as files; from a store as objects, the banks' index files kept in memory and each ``data.npy`` streamed in ranges
(hashed, its header kept, a float payload scanned for NaN/Inf as it passes), so memory stays about one range
whatever a bank's size, and nothing is written to disk.
"""

from __future__ import annotations

import errno
import hashlib
import os
import io
from abc import ABC, abstractmethod
from typing import BinaryIO

import numpy as np

from speechpack.loader.pack import DirectoryPackFiles, PackFiles
from speechpack.loader.pack.cues import read_cues_config
from speechpack.loader.pack.object_store import describe_error, store_errors
from speechpack.packer.files import hash_file
from speechpack.packer.validate.report import PackReport
from speechpack.schemas.constants import COLUMNS_DIR, MANIFEST_NAME, SHARD_DIR_PREFIX, TEMP_PREFIX
from speechpack.schemas.cue_banks import DATA_NAME, BankDirectory, BankSource, npy_header_of
from speechpack.schemas.cues import CUES_DIR, CUES_YAML, CuesConfig
from speechpack.schemas.deflated_columns import Inflater, deflated_name
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

    def check_deflated(self, name: str, data: bytes) -> None:
        """Column ``name``'s deflated copy (format 1.5; ``data``, its bytes) inflates to exactly the column."""
        column = self.manifest.columns[name]
        inflater = Inflater(column.size, column.sha256)
        inflater.feed(data)
        if not inflater.finish():
            self.report.error(self.where(f"{COLUMNS_DIR}/{deflated_name(name)}"),
                              f"does not inflate to {COLUMNS_DIR}/{name} ({column.size} bytes, sha256 "
                              f"{column.sha256}): a reader from a store would refuse the pack")

    @abstractmethod
    def load_column(self, rel: str):
        """A column's array (raises when it cannot be read; None: not fetched, the reason already reported)."""

    @abstractmethod
    def cue_files(self) -> "CueFiles":
        """The pack's ``cues/`` as the cue checks read it (``packer.validate.pack.check_cues``)."""


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
        copies = {deflated_name(name) for name in self.manifest.deflated_columns}
        for name in sorted(set(os.listdir(directory)) - set(self.manifest.columns) - copies):
            self.report.error(os.path.join(directory, name), f"file not listed in {MANIFEST_NAME}")
        for name in sorted(self.manifest.columns):
            self.check(f"{COLUMNS_DIR}/{name}")
        for name in sorted(self.manifest.deflated_columns):
            rel = f"{COLUMNS_DIR}/{deflated_name(name)}"
            self.check(rel)
            try:
                data = self.read(rel)
            except OSError:
                continue  # missing or unreadable: reported by ``check``
            self.check_deflated(name, data)
        return True

    def load_column(self, rel: str):
        return np.load(self.where(rel), allow_pickle=False)

    def cue_files(self) -> "DirectoryCueFiles":
        return DirectoryCueFiles(self)


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
        self.check_bytes(rel, len(data), hashlib.sha256(data).hexdigest() if self.check_hashes else None)
        return data

    def check_bytes(self, rel: str, size: int, sha256: str | None) -> None:
        """Report what an object of ``size`` bytes whose content hashed to ``sha256`` (None: not hashed) breaks of
        its entry."""
        where, expected = self.where(rel), self.entries[rel]
        if size != expected.size:
            self.report.error(where, f"size {size} bytes, {MANIFEST_NAME} records {expected.size}")
        elif sha256 is not None:
            _check_hash(where, sha256, expected, self.holder, self.report)

    def fetch(self, rel: str) -> bytes | None:
        """Listed object ``rel`` whole, checked against its entry (problems reported); None when it is missing or
        unreadable."""
        return self._fetch(rel)

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
        for name in sorted(self.manifest.deflated_columns):
            data = self._fetch(f"{COLUMNS_DIR}/{deflated_name(name)}")
            if data is not None:
                self.check_deflated(name, data)
        return True

    def load_column(self, rel: str):
        data = self._columns.get(rel)
        return None if data is None else np.load(io.BytesIO(data), allow_pickle=False)

    def cue_files(self) -> "StoreCueFiles":
        return StoreCueFiles(self)


class CueFiles(ABC):
    """A pack's ``cues/`` as the cue checks read it (module docstring), each problem reported under the file's path
    or URL; ``where(name)`` names a file by its name under ``cues/`` (``audio/data.npy``)."""

    def __init__(self, checked: CheckedFiles):
        self.checked = checked
        self.report = checked.report
        self.directory = checked.where(CUES_DIR)

    def where(self, name: str) -> str:
        return os.path.join(self.directory, *name.split("/"))

    @abstractmethod
    def check_layout(self, manifest: Manifest) -> bool:
        """What the listing says about ``cues/`` as a whole (reported); False when there are no banks to check."""

    @abstractmethod
    def check(self, name: str) -> None:
        """Listed cue file ``name``: present, of its size and (unless ``--no-hash``) hash."""

    @abstractmethod
    def config(self) -> CuesConfig:
        """The pack's ``cues.yaml``, parsed (``PackFormatError`` when it cannot be)."""

    @abstractmethod
    def bank(self, cue: str) -> BankSource:
        """The files of bank ``cue`` for ``schemas.cue_banks.read_bank``."""

    @abstractmethod
    def open(self, name: str) -> BinaryIO:
        """A (small) cue file whole, open for reading (the speaker labels)."""

    @abstractmethod
    def nonfinite(self, name: str) -> int:
        """NaN and Inf values in the float payload of ``data.npy`` ``name`` (whose header passed the bank checks)."""

    @abstractmethod
    def payload_bytes(self, name: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of the data of ``data.npy`` ``name`` (after its header, which passed the bank
        checks): a compressed bank's items, read one at a time to be decoded."""


#: Elements per chunk when scanning a float payload for NaN/Inf (bounds the temporary mask).
SCAN_CHUNK = 1 << 24


def count_nonfinite(values: np.ndarray) -> int:
    """NaN and Inf values of a flat float array, scanned in chunks."""
    chunks = (values[start:start + SCAN_CHUNK] for start in range(0, len(values), SCAN_CHUNK))
    return sum(int(len(chunk) - np.count_nonzero(np.isfinite(chunk))) for chunk in chunks)


class DirectoryCueFiles(CueFiles):
    """``cues/`` of a pack in a directory: its files on disk, payloads mapped."""

    def check_layout(self, manifest: Manifest) -> bool:
        directory = self.directory
        if not manifest.cues:
            if os.path.exists(directory):
                self.report.error(directory, f"cues directory present, but {MANIFEST_NAME} lists no cues")
            return False
        if not os.path.isdir(directory):
            self.report.error(directory, "cues directory missing")
            return False
        on_disk = {os.path.relpath(os.path.join(root, name), directory).replace(os.sep, "/")
                   for root, _dirs, names in os.walk(directory) for name in names}
        for name in sorted(on_disk - set(manifest.cues)):
            self.report.error(self.where(name), f"file not listed in {MANIFEST_NAME}")
        return True

    def check(self, name: str) -> None:
        check_file(self.where(name), self.checked.manifest.cues[name], self.report, self.checked.check_hashes)

    def config(self) -> CuesConfig:
        return read_cues_config(self.checked.files.location)

    def bank(self, cue: str) -> BankSource:
        return BankDirectory(self.where(cue))

    def open(self, name: str) -> BinaryIO:
        return open(self.where(name), "rb")

    def nonfinite(self, name: str) -> int:
        return count_nonfinite(np.load(self.where(name), mmap_mode="r", allow_pickle=False).reshape(-1))

    def payload_bytes(self, name: str, start: int, stop: int) -> bytes:
        path = self.where(name)
        with open(path, "rb") as fp:
            fp.seek(read_npy_header(path).data_offset + start)
            return fp.read(stop - start)


#: Bytes per range request when a cue payload is streamed from a store.
PAYLOAD_RANGE_BYTES = 8 << 20


class StoreCueFiles(CueFiles):
    """``cues/`` of a pack on object storage (module docstring): index files kept in memory, each ``data.npy``
    streamed once in ranges; objects nobody listed are the pack's ``check_layout``'s."""

    def __init__(self, checked: "StoreFiles"):
        super().__init__(checked)
        self.store: StoreFiles = checked
        self.kept: dict[str, bytes] = {}  # index files, as fetched (checked against their entries, reported)
        #: Per payload: its header (or why it has none) and size, and the NaN/Inf count of a float payload.
        self.payloads: dict[str, tuple[NpyHeader | NpyHeaderError, int, int]] = {}

    def where(self, name: str) -> str:
        return self.checked.where(f"{CUES_DIR}/{name}")

    def check_layout(self, manifest: Manifest) -> bool:
        return bool(manifest.cues)  # an object under cues/ that no record lists: StoreFiles.check_layout

    def check(self, name: str) -> None:
        if name.rsplit("/", 1)[-1] == DATA_NAME:
            self._stream_payload(name)
            return
        data = self.store.fetch(f"{CUES_DIR}/{name}")
        if data is not None:
            self.kept[name] = data

    def _stream_payload(self, name: str) -> None:
        """Fetch ``data.npy`` ``name`` range by range: size-checked and hashed as any object is, its header read
        as the first ranges arrive, a float payload's NaN/Inf counted as the ranges pass (never all in memory)."""
        rel, where = f"{CUES_DIR}/{name}", self.where(name)
        if rel not in self.store.listing:
            self.report.error(where, "object missing")
            return
        size = self.store.listing[rel]
        digest = hashlib.sha256() if self.checked.check_hashes else None
        header: NpyHeader | NpyHeaderError | None = None
        head, carry, nonfinite, position = b"", b"", 0, 0
        try:
            while position < size:
                block = self.store.files.read_range(rel, position, min(position + PAYLOAD_RANGE_BYTES, size))
                if not block:
                    break
                position += len(block)
                if digest is not None:
                    digest.update(block)
                if header is None:  # the bytes before the payload, until the whole header is in
                    head += block
                    need = _header_bytes(head)
                    if (need is None or len(head) < need) and position < size:
                        continue
                    header = _header_or_error(head, where)
                    block = head[header.data_offset:] if isinstance(header, NpyHeader) else b""
                    head = b""
                if isinstance(header, NpyHeader) and header.dtype.kind == "f" and not header.fortran_order:
                    data = carry + block
                    whole = len(data) - len(data) % header.dtype.itemsize
                    nonfinite += count_nonfinite(np.frombuffer(data[:whole], dtype=header.dtype))
                    carry = data[whole:]
        except store_errors() as err:
            self.report.error(where, f"cannot read ({describe_error(err)})")
            return
        self.store.check_bytes(rel, position, None if digest is None else digest.hexdigest())
        self.payloads[name] = (header if header is not None else _header_or_error(head, where), position, nonfinite)

    def _bytes(self, name: str) -> bytes:
        if name not in self.kept:
            raise FileNotFoundError(errno.ENOENT, "not read from the store (reported above)", self.where(name))
        return self.kept[name]

    def config(self) -> CuesConfig:
        return read_cues_config(self.checked.files.location, lambda: self._bytes(CUES_YAML))

    def bank(self, cue: str) -> BankSource:
        return _StoreBank(self, cue)

    def open(self, name: str) -> BinaryIO:
        return io.BytesIO(self._bytes(name))

    def nonfinite(self, name: str) -> int:
        return self.payloads[name][2]

    def payload_bytes(self, name: str, start: int, stop: int) -> bytes:
        offset = self.payloads[name][0].data_offset
        return self.store.files.read_range(f"{CUES_DIR}/{name}", offset + start, offset + stop)


#: The longest ``.npy`` header waited for while a payload streams in (numpy reads none past 10000 bytes).
NPY_HEAD_BYTES = 16 << 10


def _header_bytes(head: bytes) -> int | None:
    """Bytes of the ``.npy`` header that ``head`` starts (magic, version, length, text), at most
    ``NPY_HEAD_BYTES``; None until its length field is in."""
    if len(head) < 12:
        return None
    length = int.from_bytes(head[8:10], "little") + 10 if head[6] == 1 else int.from_bytes(head[8:12], "little") + 12
    return min(length, NPY_HEAD_BYTES)


def _header_or_error(data: bytes, where: str) -> NpyHeader | NpyHeaderError:
    try:
        return npy_header_of(data, where)
    except NpyHeaderError as err:
        return err


class _StoreBank:
    """One bank of :class:`StoreCueFiles` as a ``schemas.cue_banks.BankSource``."""

    def __init__(self, cues: StoreCueFiles, cue: str):
        self.cues, self.cue = cues, cue

    def open(self, name: str) -> BinaryIO:
        return self.cues.open(f"{self.cue}/{name}")

    def npy_header(self, name: str) -> tuple[NpyHeader, int]:
        found = self.cues.payloads.get(f"{self.cue}/{name}")
        if found is None:
            raise FileNotFoundError(errno.ENOENT, "not read from the store (reported above)",
                                    self.cues.where(f"{self.cue}/{name}"))
        header, size, _nonfinite = found
        if isinstance(header, NpyHeaderError):
            raise header
        return header, size


def checked_files(files: PackFiles, manifest: Manifest, report: PackReport, check_hashes: bool,
                  listing: dict[str, int] | None = None) -> CheckedFiles:
    """The checked reader for ``files``: a directory's, or an object store's (whose ``listing`` was read)."""
    if isinstance(files, DirectoryPackFiles):
        return DirectoryFiles(files, manifest, report, check_hashes)
    return StoreFiles(files, manifest, report, check_hashes, listing if listing is not None else files.listing())


__all__ = ["CheckedFiles", "CueFiles", "DirectoryCueFiles", "DirectoryFiles", "StoreCueFiles", "StoreFiles",
           "check_file", "checked_files", "count_nonfinite", "stream_header_problem"]
