"""Where a pack's bytes come from: ``PackFiles``, the storage interface the pack reader reads through.

Why it exists.  A pack is the same format wherever it lives; only the way its files are reached differs (a local
directory: ``open`` and ``mmap``; an object store: requests).  The reader (``open_pack``, the column checks, the
stream mappings) asks a ``PackFiles`` for a file by its ``/``-separated name inside the pack, exactly as
``dataset.json`` names it, so one reader serves local and remote packs and the batch code never learns where a pack
lives.  A node cache in front of a store (docs/integrations.md, "Object storage") is one more implementation.

What an implementation gives: the pack's files with their sizes (``listing``), a file's bytes, whole or a byte range
(``read_bytes``, ``read_range``), the array of a stream ``.npy`` checked against the catalogue (``stream``: mapped
read-only from a directory, read into memory from a store), and an identity that changes when a file is replaced
(``identity``: ``schemas.manifest_file.FileIdentity`` for a directory), which is how a reader notices a pack
replaced under it (docs/format.md, "What a reader verifies").  Every name is checked by ``schemas.names`` before
any path is built from it, so no name, crafted or mistaken, reads outside the pack.  Absent files raise
``FileNotFoundError``; other failures an ``OSError`` whose ``strerror`` is the reason (callers name the file).

This module holds the interface, the local directory and the stream array shared by both; the object store is
``loader.pack.object_store`` (its client is an optional extra).
"""

from __future__ import annotations

import io
import math
import mmap
import os
import re
from abc import ABC, abstractmethod
from typing import Hashable

import numpy as np

from speechpack.loader.pack.content_check import ContentIdentity
from speechpack.schemas.constants import MANIFEST_NAME
from speechpack.schemas.errors import NpyHeaderError, PackFormatError
from speechpack.schemas.manifest_file import FileIdentity, ManifestFile, manifest_from, read_manifest_file
from speechpack.schemas.names import check_relative_path
from speechpack.schemas.npyfile import NpyHeader, read_npy_header_from

#: ``scheme://`` at the start of a location: an fsspec URL rather than a local path (``file://`` is local).
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def url_scheme(location: str) -> str | None:
    """The lower-case scheme of a URL location (``s3``), None for a plain path."""
    match = _URL.match(str(location))
    return None if match is None else match.group(1).lower()


def is_remote(location: str | os.PathLike) -> bool:
    """True for a URL other than ``file://`` (``s3://bucket/key``): a pack reached through an object store."""
    return url_scheme(os.fspath(location)) not in (None, "file")


class MappedStream:
    """One stream file's array: ``array`` is a plain ndarray (np.memmap runs Python code on every slice, which
    costs more than the copy of a short chunk) viewing ``mapping``, the read-only ``mmap`` of the file, or viewing
    bytes held in memory (``mapping`` None: a file read from a store; read-ahead advice is then moot).  ``source``
    is the whole file's bytes (the mapping or the bytes read) and ``identity`` the mapped file's
    ``ContentIdentity`` (device, inode, size, mtime, ctime; None from a store): what ``loader.pack.content_check``
    hashes and keys its record by."""

    __slots__ = ("array", "mapping", "data_offset", "row_bytes", "file_size", "source", "identity")

    def __init__(self, array: np.ndarray, mapping: mmap.mmap | None, data_offset: int, row_bytes: int,
                 file_size: int, source=None, identity: ContentIdentity | None = None):
        self.array = array
        self.mapping = mapping
        self.data_offset = data_offset
        self.row_bytes = row_bytes
        self.file_size = file_size  # of the file the array was made from (fstat of its descriptor, or bytes read)
        self.source = source
        self.identity = identity

    def will_need(self, first_row: int, rows: int) -> None:
        """Ask the kernel to read rows ``[first_row, first_row + rows)`` now (asynchronously), whole pages only."""
        if rows <= 0 or self.mapping is None:
            return
        start = self.data_offset + first_row * self.row_bytes
        aligned = start - start % mmap.PAGESIZE
        self.mapping.madvise(mmap.MADV_WILLNEED, aligned, start + rows * self.row_bytes - aligned)


def _checked_header(where: str, header: NpyHeader, size: int, dtype: str, row_shape: tuple[int, ...]) -> None:
    """A stream file's header must be the catalogue's dtype and row shape, and its data all present."""
    if (header.dtype.str != dtype or tuple(header.shape[1:]) != tuple(row_shape)
            or len(header.shape) != 1 + len(row_shape) or header.fortran_order):
        raise PackFormatError(f"{where}: holds {header.dtype.str} {header.shape}, the catalogue says {dtype} rows "
                              f"of {list(row_shape)}")
    if size < header.expected_size:
        raise PackFormatError(f"{where}: cannot map stream file ({size} bytes, its header promises "
                              f"{header.expected_size}: the file is truncated)")


def _stream_over(buffer, header: NpyHeader, row_shape: tuple[int, ...], mapping: mmap.mmap | None,
                 size: int, identity: ContentIdentity | None = None) -> MappedStream:
    array = np.frombuffer(buffer, dtype=header.dtype, count=math.prod(header.shape), offset=header.data_offset)
    row_bytes = math.prod(row_shape) * header.dtype.itemsize
    return MappedStream(array.reshape(header.shape), mapping, header.data_offset, row_bytes, size, buffer, identity)


def map_stream(path: str, dtype: str, row_shape: tuple[int, ...]) -> MappedStream:
    """Map a stream ``.npy`` read-only, checking its header against the catalogue entry.  Header, size and mapping
    come from one descriptor, so they describe one file even if the path is replaced meanwhile."""
    try:
        fp = open(path, "rb")
    except OSError as err:
        raise PackFormatError(f"{path}: cannot map stream file ({err.strerror or err})") from None
    with fp:
        try:
            header = read_npy_header_from(fp, path)
        except NpyHeaderError as err:
            raise PackFormatError(f"{path}: cannot map stream file ({err.reason})") from None
        stat = os.fstat(fp.fileno())
        size = stat.st_size
        _checked_header(path, header, size, dtype, row_shape)
        mapping = mmap.mmap(fp.fileno(), 0, access=mmap.ACCESS_READ)  # the mapping outlives the descriptor
    return _stream_over(mapping, header, row_shape, mapping, size, ContentIdentity.of(stat))


def stream_from_bytes(where: str, data: bytes, dtype: str, row_shape: tuple[int, ...]) -> MappedStream:
    """The array of a stream ``.npy`` held in memory (read from a store), checked as :func:`map_stream` checks a
    mapped one; the array views ``data`` (read-only)."""
    try:
        header = read_npy_header_from(io.BytesIO(data), where)
    except NpyHeaderError as err:
        raise PackFormatError(f"{where}: cannot map stream file ({err.reason})") from None
    _checked_header(where, header, len(data), dtype, row_shape)
    return _stream_over(data, header, row_shape, None, len(data))


class PackFiles(ABC):
    """The files of one pack, named as ``dataset.json`` names them (``columns/samples.npy``,
    ``shard-000000/mix.npy``): see the module docstring.  Instances are pickled with a ``Pack`` (DataLoader workers
    under spawn), so they hold where the pack is, never open handles."""

    #: The pack's location as messages show it (a directory as given, or a URL).
    location: str
    #: True when a file ``dataset.json`` lists is read (``read_bytes``) and mapped (``stream``) from bytes already
    #: checked against its sha256 (the node cache verifies every file as it arrives): the reader then hashes neither
    #: a column nor a stream file a second time (``verify_streams`` does not apply).
    hashes_checked: bool = False
    #: The most stream files one process may keep mapped from this pack (``Pack``'s mapping LRU keeps
    #: ``min(max_open_files, max_open_streams)``); None: no bound of the storage's own.  The node cache sets it: each
    #: mapping pins its cache entry against eviction (``loader.cache.cached_files``).
    max_open_streams: int | None = None
    #: The node cache the files are read through (``loader.cache.node_cache.NodeCache``), None when there is none:
    #: the planner and the cache's fetch schedule read its limit and replay its load (``loader.cache.schedule``).
    node_cache = None
    #: What reads the pack's audio streams a segment at a time (``loader.cache.ranges.RangeReads``: a pack with
    #: digests on a store), None when stream files are read whole: ``Pack.need`` asks it for a batch's segments.
    range_reads = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    def check_name(self, rel: str) -> str:
        """``rel`` if it names a file inside the pack, else a ``PackFormatError`` (``schemas.names``)."""
        return check_relative_path(rel, self.location)

    @abstractmethod
    def where(self, rel: str) -> str:
        """The path or URL of file ``rel``, as messages name it."""

    @abstractmethod
    def listing(self) -> dict[str, int]:
        """Every file of the pack: relative name -> size in bytes (empty when there is nothing)."""

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes:
        """File ``rel`` whole."""

    @abstractmethod
    def read_range(self, rel: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of file ``rel`` (fewer when the file ends first)."""

    @abstractmethod
    def stream(self, rel: str, dtype: str, row_shape: tuple[int, ...]) -> MappedStream:
        """Stream file ``rel`` as an array of ``dtype`` rows of ``row_shape``, its header checked against them;
        ``PackFormatError`` naming the file when it cannot be read or does not match."""

    @abstractmethod
    def identity(self, rel: str) -> Hashable | None:
        """A value that changes when file ``rel`` is replaced or rewritten; None when the file is gone."""

    def prefetch(self, rels: list[str]) -> None:
        """Files ``rels`` are about to be read, one after another: a storage that can fetch them together does it
        now (the node cache, ``fetches`` at once); nothing by default."""

    def read_manifest(self) -> ManifestFile:
        """``dataset.json`` read and checked (``schemas.manifest_file``), with its identity taken *before* its
        bytes, so a manifest replaced in between is seen as changed later, never as the one read."""
        return manifest_from(lambda: (self.identity(MANIFEST_NAME), self.read_bytes(MANIFEST_NAME)), self.location,
                             self.where(MANIFEST_NAME))


class DirectoryPackFiles(PackFiles):
    """A pack in a local directory: files are read with ``open`` and stream files mapped read-only."""

    def __init__(self, root: str | os.PathLike):
        self.location = self.root = os.fspath(root)

    def where(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def _path(self, rel: str) -> str:
        return self.where(self.check_name(rel))

    def listing(self) -> dict[str, int]:
        found = {}
        for directory, _dirs, files in os.walk(self.root):
            prefix = os.path.relpath(directory, self.root).replace(os.sep, "/")
            for name in files:
                rel = name if prefix == "." else f"{prefix}/{name}"
                try:
                    found[rel] = os.path.getsize(os.path.join(directory, name))
                except FileNotFoundError:
                    continue  # removed while listing
        return found

    def read_bytes(self, rel: str) -> bytes:
        with open(self._path(rel), "rb") as fp:
            return fp.read()

    def read_range(self, rel: str, start: int, stop: int) -> bytes:
        with open(self._path(rel), "rb") as fp:
            fp.seek(start)
            return fp.read(max(stop - start, 0))

    def stream(self, rel: str, dtype: str, row_shape: tuple[int, ...]) -> MappedStream:
        return map_stream(self._path(rel), dtype, row_shape)

    def identity(self, rel: str) -> FileIdentity | None:
        return FileIdentity.of_path(self._path(rel))

    def read_manifest(self) -> ManifestFile:
        """As :meth:`PackFiles.read_manifest`, with identity and bytes from one descriptor."""
        return read_manifest_file(self.root)


__all__ = ["DirectoryPackFiles", "MappedStream", "PackFiles", "is_remote", "map_stream", "stream_from_bytes",
           "url_scheme"]
