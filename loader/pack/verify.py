"""What a pack reader verifies when it opens a pack and whenever it maps a stream file (docs/format.md, "What a
reader verifies"): the column files against ``dataset.json``'s sizes and SHA-256 (read once, hashed while parsed,
never unpickled), and every mapped stream file against the manifest the reader opened, so a pack replaced under a
running job is refused instead of read.  Files are reached through ``PackFiles`` (``loader.pack.files``), so the
same checks hold for a local directory and an object store.  ``loader.pack.reader`` uses it; it is kept apart so
the mapping code and the checks each stay in one place.
"""

from __future__ import annotations

import hashlib
import io
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Hashable

import numpy as np

from speechpack.loader.pack.files import MappedStream, PackFiles
from speechpack.schemas.columns import check_column_types, check_column_values
from speechpack.schemas.constants import COLUMNS_DIR, MANIFEST_NAME
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import FileEntry, Manifest
from speechpack.schemas.npyfile import read_npy_header_from


#: Column files hashed at once at open: hashlib and file reads release the GIL, so threads overlap them.
_HASH_THREADS = 4


@dataclass(frozen=True)
class OpenedPack:
    """What a reader recorded when it opened a pack, and checks whenever it maps a stream file (possibly hours later,
    in a DataLoader worker that received the Pack pickled: this travels with it).

    ``files`` is where the pack's files are read from; ``manifest`` is the identity of ``dataset.json`` when it was
    read (``PackFiles.identity``).  A pack replaced under a reader (``build
    --overwrite``, ``copy`` onto its path) always gets a new ``dataset.json`` (written under a temporary name and
    renamed, so a new inode and mtime), and its old one is removed before any other file changes: if the manifest
    is still the one opened *after* a stream file's descriptor is open, that file belongs to the opened pack.
    ``stream_rows[stream][k]`` is the row count shard ``k``'s stream file must have (from the columns' segments),
    so a mapped file is also checked to be the size ``dataset.json`` records and to hold exactly those rows.
    """

    files: PackFiles
    manifest: Hashable | None
    stream_rows: dict[str, np.ndarray]
    #: sha256 of the manifest's bytes: a ``dataset.json`` with another identity but these bytes (the same pack
    #: staged again by ``copy``, the Pack unpickled on a node with its own verified copy) describes the same files.
    manifest_sha256: str | None = None

    @classmethod
    def of(cls, files: PackFiles, manifest: Manifest, shard: np.ndarray, speaker_first: np.ndarray,
           speaker_count: np.ndarray, num_speakers: int, streams: dict, identity: Hashable | None,
           manifest_sha256: str | None = None, blocks: dict[str, np.ndarray] | None = None) -> "OpenedPack":
        """Check a pack's columns (``schemas.columns``, on the pack's own arrays: ``streams`` maps
        each stream to its segment table, ``blocks`` each compressed stream to its block sizes) and record ``identity``, the manifest's when it was read (None: the pack
        was not read by ``open_pack``)."""
        rows = check_column_values(manifest, shard, speaker_first, speaker_count, num_speakers, streams,
                                   files.where(COLUMNS_DIR), blocks)
        return cls(files=files, manifest=identity, stream_rows=rows, manifest_sha256=manifest_sha256)

    @property
    def manifest_path(self) -> str:
        return self.files.where(MANIFEST_NAME)

    def check_unchanged(self, file_path: str) -> None:
        """Raise ``PackFormatError`` when ``dataset.json`` is no longer the one this pack was opened from."""
        if self.manifest is None:
            return
        now = self.files.identity(MANIFEST_NAME)
        if now != self.manifest and not self._same_bytes():
            state = "is gone" if now is None else "was replaced"
            raise PackFormatError(f"{file_path}: pack changed since it was opened ({self.manifest_path} {state}); "
                                  f"open the pack again")

    def _same_bytes(self) -> bool:
        """Whether ``dataset.json`` now holds the bytes that were opened (read only when its identity changed)."""
        try:
            raw = self.files.read_bytes(MANIFEST_NAME)
        except OSError:
            return False
        return self.manifest_sha256 is not None and hashlib.sha256(raw).hexdigest() == self.manifest_sha256

    def check_mapped(self, manifest: Manifest, shard: int, stream: str, file_path: str, mapped: MappedStream) -> None:
        """The freshly mapped ``file_path`` is the opened pack's shard ``shard`` ``stream`` file, whole."""
        self.check_unchanged(file_path)
        entry: FileEntry = manifest.shards[shard].files[manifest.stream(stream).file]
        if mapped.file_size != entry.size:
            raise PackFormatError(f"{file_path}: {mapped.file_size} bytes, {MANIFEST_NAME} records {entry.size} (the "
                                  f"file changed after the pack was written; validate the pack)")
        rows = int(self.stream_rows[stream][shard])
        if mapped.array.shape[0] != rows:
            raise PackFormatError(f"{file_path}: holds {mapped.array.shape[0]} rows, the pack's {stream} segments "
                                  f"need {rows} (validate the pack)")


def read_columns(files: PackFiles, manifest: Manifest) -> dict[str, np.ndarray]:
    """Load ``columns/*.npy`` (no pickles), each read once and checked against ``dataset.json``'s size and
    sha256 while it is parsed: a column edited after the build is refused at open, naming the file."""
    names = manifest.column_file_names()
    with ThreadPoolExecutor(max_workers=min(_HASH_THREADS, len(names))) as pool:
        arrays = pool.map(lambda name: _read_column(files, f"{COLUMNS_DIR}/{name}", manifest.columns[name]), names)
        columns = dict(zip(names, arrays))
    check_column_types(manifest, columns, files.where(COLUMNS_DIR))
    return columns


def _read_column(files: PackFiles, rel: str, entry: FileEntry) -> np.ndarray:
    file_path = files.where(rel)
    try:
        data = files.read_bytes(rel)
    except OSError as err:
        raise PackFormatError(f"{file_path}: cannot read column ({err.strerror or err})") from None
    if len(data) != entry.size:
        raise PackFormatError(f"{file_path}: {len(data)} bytes, {MANIFEST_NAME} records {entry.size} (validate the "
                              f"pack)")
    digest = entry.sha256 if files.hashes_checked else hashlib.sha256(data).hexdigest()
    if digest != entry.sha256:
        raise PackFormatError(f"{file_path}: sha256 {digest} does not match {MANIFEST_NAME} ({entry.sha256}): the "
                              f"column changed after the pack was written")
    try:
        header = read_npy_header_from(io.BytesIO(data), file_path)
        if header.dtype.hasobject or header.fortran_order or len(header.shape) != 1:
            raise ValueError(f"expected a 1-D array without objects, got {header.dtype.str} {header.shape}")
        return np.frombuffer(data, dtype=header.dtype, count=header.shape[0], offset=header.data_offset)
    except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError, TokenError...
        raise PackFormatError(f"{file_path}: cannot read column ({err})") from None
