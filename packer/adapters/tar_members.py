"""Audio files inside tar archives (WeSep shards, Lhotse Shar), read where they lie and never extracted.

**Why not ``offset`` and ``size`` alone.**  A member's data usually lies in one run of ``size`` bytes at
``offset_data``; a GNU sparse member (``tar --sparse``: types ``S`` and the PAX ``GNU.sparse`` forms) does not:
the tar stores only its data regions, one after another from ``offset_data``, and ``size`` is the expanded size, the
holes between the regions reading as zeros.  Reading ``size`` raw bytes there returns the next members' headers and
data as audio.  ``TarMember`` keeps the sparse map ``tarfile`` parsed and reads the member as ``tarfile`` extracts
it (a hole is zeros), checking the map first (regions in order, inside the member).

**Bounded memory and time.**  A member is read through a seekable reader of its bytes (``TarMember.open``), so
probing reads only the header and decoding runs in the decoder's blocks (``media.sound_blocks``), as a file on
disk does.  What a tar claims costs its writer nothing (a sparse member or a gzip stream can declare 100 GiB in a
few bytes), so members larger than ``MAX_MEMBER_BYTES`` are refused by name: a plain tar's such member is a
problem of its sample (it is skipped by seeking); a compressed tar's ends the read of that tar at once (skipping it
would mean decompressing all of it).  A gzip-compressed tar has no offset to seek to: it is read through once and
its members are held in memory until the build ends, ``MAX_HELD_BYTES`` at most over the whole build (decompress
larger ones: a plain tar is read at its offsets).  Small metadata members (speaker ids, Lhotse's ``.json``) are read
whole, ``MAX_SMALL_MEMBER_BYTES`` at most, and a GNU long-name or PAX header ``MAX_HEADER_BYTES`` at most
(``BoundedTarInfo``: ``tarfile`` reads one whole before the member it describes).  A compressed tar's gzip
trailer (CRC and length) is checked once it is read (``compressed_tar``).
"""

from __future__ import annotations

import bisect
import contextlib
import gzip
import io
import os
import tarfile
from dataclasses import dataclass, field

from speechpack.packer.audio import AudioError
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.units import format_bytes

#: Largest tar member read as audio, 1 GB (8.7 hours of 16 kHz 16-bit mono; an utterance or a cut is far less).
MAX_MEMBER_BYTES = 1_000_000_000
#: Largest total of compressed tars' members held in memory over a build, 2 GB (they are held until it ends).
MAX_HELD_BYTES = 2_000_000_000
#: Largest metadata member read whole, 1 MB (a speaker id, a Lhotse recording manifest).
MAX_SMALL_MEMBER_BYTES = 1_000_000
#: Largest GNU long-name or PAX extended header read, 1 MB: it holds a name and a few records (``tarfile`` reads one
#: whole into memory, however large its header says it is).
MAX_HEADER_BYTES = 1_000_000
#: Most decompressed bytes read after a compressed tar's end-of-archive blocks to reach its gzip trailer (``tar``
#: pads an archive to its 10 KB records; a blocking factor of a few MB is the most any writer uses).
MAX_TRAILING_BYTES = 16 << 20
#: Header types whose data ``tarfile`` reads into memory as the header of the next member.
_HEADER_TYPES = {tarfile.GNUTYPE_LONGNAME: "GNU long-name", tarfile.GNUTYPE_LONGLINK: "GNU long-link",
                 tarfile.XHDTYPE: "PAX extended", tarfile.XGLTYPE: "PAX global", tarfile.SOLARIS_XHDTYPE: "PAX"}
#: Read-ahead of the buffered reader ``TarMember.open`` returns (libsndfile asks for a few KiB at a time).
_READ_AHEAD = 1 << 16


def too_large(size: int, bound: int = MAX_MEMBER_BYTES) -> str | None:
    """Why a member of ``size`` bytes is not read, or None."""
    if size <= bound:
        return None
    return f"tar member of {size} bytes ({format_bytes(size)}) is larger than the {format_bytes(bound)} speechpack " \
           f"reads from a tar"


@dataclass(frozen=True)
class TarMember:
    """A file stored in a tar: where its bytes are, so a worker process reopens the tar and reads them (a few dozen
    bytes to pickle, as a path).  ``str()`` is ``tar:member``, the name errors give.

    ``sparse``: for a GNU sparse member, the ``(offset in the member, length)`` of each stored data region (stored
    one after another from ``offset``); ``None`` for a member stored in one run."""

    tar_path: str
    name: str
    offset: int  # of the member's (first) stored byte in the (uncompressed) tar
    size: int  # the member's size, as extracted (a sparse member's expanded size)
    sparse: tuple[tuple[int, int], ...] | None = None

    def __str__(self) -> str:
        return f"{self.tar_path}:{self.name}"

    @property
    def stored(self) -> int:
        """Bytes the tar holds for this member."""
        return self.size if self.sparse is None else sum(length for _, length in self.sparse)

    def problem(self, tar_size: int) -> str | None:
        """Why this member cannot be read from a tar of ``tar_size`` bytes (too large, a bad sparse map, cut
        short), or None; what ``open`` checks first."""
        reason = too_large(self.size)
        if reason is None and self.sparse is not None:
            reason = _map_problem(self.sparse, self.size)
        if reason is None and self.offset + self.stored > tar_size:
            reason = (f"truncated tar member ({max(tar_size - self.offset, 0)} of {self.stored} bytes in the "
                      f"tar)")
        return reason

    def open(self) -> io.BufferedReader:
        """A seekable reader of the member's bytes (holes of a sparse member read as zeros); ``AudioError`` naming
        ``tar:member`` when it cannot be read (``problem``)."""
        try:
            fd = os.open(self.tar_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as err:
            raise AudioError(str(self), f"cannot read the tar member ({err.strerror or err})") from None
        try:
            reason = self.problem(os.fstat(fd).st_size)
            if reason is not None:
                raise AudioError(str(self), reason)
            raw = _MemberReader(fd, _regions(self.offset, self.size, self.sparse), self.size)
        except BaseException:
            os.close(fd)
            raise
        return io.BufferedReader(raw, buffer_size=_READ_AHEAD)

    def read_bytes(self) -> bytes:
        """The member's bytes (at most ``MAX_MEMBER_BYTES``), for readers that take bytes (Lhotse's in-memory
        sources)."""
        with self.open() as fp:
            try:
                data = fp.read()
            except OSError as err:
                raise AudioError(str(self), f"cannot read the tar member ({err.strerror or err})") from None
        if len(data) != self.size:
            raise AudioError(str(self), f"truncated tar member ({len(data)} of {self.size} bytes)")
        return data


@dataclass(frozen=True)
class InMemoryTarMember(TarMember):
    """A tar member with its bytes: a member of a gzip-compressed tar (no offset a worker could seek to, so the tar
    is read through once and its members are held until the build ends), or a small metadata member.  ``offset`` is
    the member's offset in the (decompressed) tar stream."""

    data: bytes = field(default=b"", repr=False, compare=False)

    def problem(self, tar_size: int) -> str | None:
        return None

    def open(self) -> io.BytesIO:
        return io.BytesIO(self.data)

    def read_bytes(self) -> bytes:
        return self.data


class BoundedTarInfo(tarfile.TarInfo):
    """``tarfile``'s header reader, refusing a long-name or PAX header over ``MAX_HEADER_BYTES`` before reading it
    (a ``tarfile.ReadError`` naming its size and offset), and a GNU sparse header cut short (where ``tarfile``
    raises ``IndexError``): pass as ``tarfile.open(..., tarinfo=BoundedTarInfo)``."""

    def _proc_member(self, tar):
        kind = _HEADER_TYPES.get(self.type)
        if kind is not None and self.size > MAX_HEADER_BYTES:
            raise tarfile.ReadError(f"a {kind} header of {self.size} bytes at byte {self.offset} (a header holds a "
                                    f"name and a few records: speechpack reads {format_bytes(MAX_HEADER_BYTES)} "
                                    f"at most)")
        return super()._proc_member(tar)

    def _proc_sparse(self, tar):
        try:
            return super()._proc_sparse(tar)
        except (IndexError, ValueError):  # tarfile indexes a short extension block: the tar ends inside the header
            raise tarfile.ReadError(f"a GNU sparse header at byte {self.offset} whose extension blocks are cut "
                                    f"short (the tar ends inside its header)") from None


@contextlib.contextmanager
def compressed_tar(tar_path: str):
    """A gzip-compressed tar, read through once in stream mode; when the caller has read it without failing, the
    rest of the gzip stream is read and its trailer checked (``tarfile``'s own stream mode never checks the CRC and
    length, so a corrupt ``.tar.gz`` would be packed as it decodes).  A bad trailer raises ``gzip.BadGzipFile`` (an
    ``OSError``), a stream cut short ``EOFError``; more than ``MAX_TRAILING_BYTES`` after the end of the archive a
    ``tarfile.ReadError``."""
    with gzip.open(tar_path, "rb") as stream:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=BoundedTarInfo) as tar:
            yield tar
        trailing = 0
        while chunk := stream.read(1 << 20):
            trailing += len(chunk)
            if trailing > MAX_TRAILING_BYTES:
                raise tarfile.ReadError(f"more than {format_bytes(MAX_TRAILING_BYTES)} of data after the end of the "
                                        f"archive")


def member_of(tar_path: str, info: tarfile.TarInfo) -> TarMember:
    """The ``TarMember`` of a regular file ``info`` of a plain tar (its sparse map kept; nothing read)."""
    sparse = tuple((int(start), int(length)) for start, length in info.sparse) if info.sparse else None
    return TarMember(tar_path, info.name, info.offset_data, info.size, sparse)


def read_small(tar: tarfile.TarFile, info: tarfile.TarInfo, where: str) -> bytes:
    """A metadata member's bytes, read whole (``where`` names it in the error): ``ValueError`` beyond
    ``MAX_SMALL_MEMBER_BYTES``, without reading it."""
    reason = too_large(info.size, MAX_SMALL_MEMBER_BYTES)
    if reason is not None:
        raise ValueError(f"{where}: {reason} for metadata")
    with tar.extractfile(info) as fp:
        return fp.read()


class HeldBytes:
    """What the members of compressed tars hold in memory over one build, against ``MAX_HELD_BYTES``."""

    def __init__(self, bound: int | None = None) -> None:
        self.bound = MAX_HELD_BYTES if bound is None else bound
        self.held = 0

    def take(self, tar: tarfile.TarFile, info: tarfile.TarInfo, tar_path: str) -> InMemoryTarMember:
        """Read a compressed tar's member into memory; ``SpeechpackError`` naming the tar and the member (and
        reading no further) when it is larger than ``MAX_MEMBER_BYTES`` or would take the total past the bound."""
        where = f"{tar_path}:{info.name}"
        reason = too_large(info.size)
        if reason is not None:
            raise SpeechpackError(f"{where}: {reason} (a compressed tar is read through in order: nothing after "
                                  f"this member is read)")
        if self.held + info.size > self.bound:
            raise SpeechpackError(
                f"{where}: the members of compressed tars would hold {format_bytes(self.held + info.size)} in "
                f"memory, more than the {format_bytes(self.bound)} speechpack holds (a compressed tar has no "
                f"offsets to read members at later): decompress the tars (gunzip) and list the plain .tar files")
        with tar.extractfile(info) as fp:
            data = fp.read()
        self.held += len(data)
        return InMemoryTarMember(tar_path, info.name, info.offset_data, info.size, data=data)


def _map_problem(sparse: tuple[tuple[int, int], ...], size: int) -> str | None:
    """Why a sparse map cannot describe a member of ``size`` bytes (regions out of order, overlapping or past its
    end), or None.  Empty regions (GNU tar writes a closing one) are ignored."""
    end = 0
    for start, length in sparse:
        if length == 0:
            continue
        if start < end or length < 0 or start + length > size:
            return f"bad sparse map in the tar header (region {start}+{length} in a member of {size} bytes)"
        end = start + length
    return None


def _regions(offset: int, size: int, sparse) -> list[tuple[int, int, int | None]]:
    """``(start, end, position in the tar or None for a hole)`` covering ``[0, size)`` of the member, in order."""
    if sparse is None:
        return [(0, size, offset)] if size else []
    regions, end, stored = [], 0, offset
    for start, length in sparse:
        if length == 0:
            continue
        if start > end:
            regions.append((end, start, None))
        regions.append((start, start + length, stored))
        stored += length
        end = start + length
    if end < size:
        regions.append((end, size, None))
    return regions


class _MemberReader(io.RawIOBase):
    """The bytes of one member, read with ``pread`` from the tar's descriptor (which it owns and closes)."""

    def __init__(self, fd: int, regions: list[tuple[int, int, int | None]], size: int) -> None:
        super().__init__()
        self._fd, self._regions, self._size, self._pos = fd, regions, size, 0
        self._starts = [start for start, _, _ in regions]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise OSError(22, "negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer) -> int:
        if self._pos >= self._size:
            return 0
        index = bisect.bisect_right(self._starts, self._pos) - 1
        start, end, stored = self._regions[index]
        view = memoryview(buffer).cast("B")
        count = min(len(view), end - self._pos)
        if stored is None:
            view[:count] = bytes(count)
        else:
            data = os.pread(self._fd, count, stored + self._pos - start)
            count = len(data)  # short only if the tar shrank since it was opened
            view[:count] = data
        self._pos += count
        return count

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


__all__ = ["MAX_HEADER_BYTES", "MAX_HELD_BYTES", "MAX_MEMBER_BYTES", "MAX_SMALL_MEMBER_BYTES", "MAX_TRAILING_BYTES",
           "BoundedTarInfo", "HeldBytes", "InMemoryTarMember", "TarMember", "compressed_tar", "member_of", "read_small",
           "too_large"]
