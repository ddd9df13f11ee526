"""Files written in pieces and hashed as they go: the ``.npy`` stream files of a shard (and of cue banks).

A shard's stream files are the bulk of every pack; writing each one once, front to back, with its final header
first and its SHA-256 computed from the bytes on their way out, is what keeps packing close to decoding speed.
One concept, four parts:

- **Blocks** (``NpyStream``): appended rows are gathered into blocks (``BLOCK_BYTES``) that go out in one write
  each.
- **The hash on a thread of its own** (``BackgroundDigest``): on a shard of 16-bit WAV, hashing is a third of the
  writer thread's work (SHA-256 of every byte, about 0.6 ms per MiB).  hashlib lets go of the GIL while it hashes
  a block, so on a thread of its own it runs beside the writer's statistics and writes (and beside decoding)
  instead of between them; the writer only hands it each block, in order.
- **Writeback started, not waited for** (``start_writeback``): each file gets exactly one ``fsync``, in
  ``close``, before its shard is renamed into place.  Waiting for the disk every few megabytes on the way made the
  writer thread stall while it still had bytes to hash and write.  Instead every ``WRITEBACK_EVERY`` bytes the
  kernel is asked to *start* writing the range out: Linux's ``sync_file_range(SYNC_FILE_RANGE_WRITE)``, called
  through ``ctypes`` because Python's ``os`` has no binding for it (ctypes lets go of the GIL for the call, which
  returns once the kernel has queued the range).  The disk works while the writer goes on, dirty pages do not pile
  up, and the closing ``fsync`` has little left to wait for.  The call is advice: where it is missing (not Linux,
  no libc symbol) or fails, nothing happens and the closing fsync writes everything.
- **Fsyncs run together** (``run_together``): closing a shard fsyncs its stream files and its ``index.json``;
  committing a pack fsyncs each file of ``columns/``.  One after the other, each fsync waits for its own journal
  commit and disk flush (3-5 ms each on the virtual disks builds run on, longer than writing the small files);
  started together, the file system commits them at once and the waits overlap.

Durability never depends on the advice: every file is fsynced before anything renames or names it, and a crash
before ``close`` loses only a half-written file that was never renamed into place (docs/building.md,
"Durability").
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import io
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO, Callable, Sequence

import numpy as np
from numpy.lib import format as npy_format

from speechpack.packer.files import hash_file
from speechpack.schemas.errors import InternalError
from speechpack.schemas.format import FileEntry

#: ``SYNC_FILE_RANGE_WRITE`` in Linux's ``<fcntl.h>``: start writeback of the range's dirty pages, do not wait.
SYNC_FILE_RANGE_WRITE = 2


def _libc_sync_file_range():
    """libc's ``sync_file_range`` with its argument types, or ``None`` where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


_SYNC_FILE_RANGE = _libc_sync_file_range()


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing ``nbytes`` of ``fd`` from ``offset`` to disk, without waiting for it (a
    no-op where the platform cannot; a failure is ignored: the closing fsync writes what is left)."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)


def can_start_writeback() -> bool:
    """Whether :func:`start_writeback` does anything on this machine."""
    return _SYNC_FILE_RANGE is not None


class BackgroundDigest:
    """SHA-256 of the bytes given to :meth:`submit` and :meth:`update_now`, in that order."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speechpack-hash")
        self._pending: collections.deque[Future] = collections.deque()

    def submit(self, data) -> Future:
        """Hash ``data`` on the hashing thread, after everything given before.  ``data`` must not change until
        the returned future is done (the caller reuses a buffer only then)."""
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()
        future = self._executor.submit(self._digest.update, data)
        self._pending.append(future)
        return future

    def update_now(self, data) -> None:
        """Hash ``data`` here, after everything given before (for bytes the caller may change once this returns)."""
        self._wait()
        self._digest.update(data)

    def _wait(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def hexdigest(self) -> str:
        """The digest of everything given; the hashing thread ends."""
        self._wait()
        self._executor.shutdown(wait=True)
        return self._digest.hexdigest()

    def abandon(self) -> None:
        """End the hashing thread without a digest (the file is being thrown away)."""
        self._executor.shutdown(wait=True, cancel_futures=True)


def run_together(calls: Sequence[Callable[[], object]]) -> list:
    """Run every call, each on its own thread but the last (on this one), and return their results in order.

    Every call runs to its end even when another fails (nothing is left half done behind the caller's back); then
    the first failure, in the order of ``calls``, is raised."""
    if len(calls) <= 1:
        return [call() for call in calls]
    results: list = [None] * len(calls)
    errors: list = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as err:  # raised below, in the caller's thread
            errors[index] = err

    threads = [threading.Thread(target=run, args=(index,), name="speechpack-fsync", daemon=True)
               for index in range(len(calls) - 1)]
    for thread in threads:
        thread.start()
    run(len(calls) - 1)
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results


#: Bytes written to a stream file between requests to start writing them back (see the module docstring): what the
#: closing fsync may find still dirty.  2 MiB: on a 16 kHz WAV corpus (a 116 MB shard) the two stream files'
#: closing fsyncs waited about 17 ms with 8 MiB, 14 ms with 2 MiB, and 67 ms with no writeback started at all.
WRITEBACK_EVERY = 2 << 20
#: Bytes of appended rows gathered before they go out in one write and one hash request.  A shard of short clips
#: is thousands of small appends; each write and each hash lets go of the GIL and must take it back from the
#: decoding thread, which costs more than the copy into a block (1 MiB: the copy and the hash of a block stay in
#: the CPU's cache).  Never more than ``WRITEBACK_EVERY``, so that writeback starts as often as it did.
BLOCK_BYTES = 1 << 20
#: Blocks per stream file: one being filled, the others written and waiting for (or under) their hash on the
#: hashing thread (``BackgroundDigest``).
BLOCKS_IN_FLIGHT = 3


class NpyStream:
    """A ``.npy`` file written in pieces (rows along axis 0) and hashed as it goes.

    The header is written first for the planned number of rows (``planned=None``: unknown, the header says 0).
    If another number arrives (a sample failed to decode under ``--skip-bad``, or the length was not known),
    ``close`` rewrites the header with the real count (numpy pads version-1.0 headers so axis 0 can grow to 21
    digits without moving the data; checked anyway) and hashes the file again.
    """

    def __init__(self, path: str, dtype: np.dtype, planned: int | None, row_shape: tuple[int, ...] = ()):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.planned = planned
        self.count = 0
        self._row_size = int(np.prod(self.row_shape, dtype=np.int64))
        self._fp: BinaryIO = open(path, "wb")
        self._digest = BackgroundDigest()
        # blocks in turn: one is filled while the hashing thread still reads the others (see BLOCKS_IN_FLIGHT)
        self._blocks = [bytearray(min(BLOCK_BYTES, WRITEBACK_EVERY)) for _ in range(BLOCKS_IN_FLIGHT)]
        self._hashed: list = [None] * BLOCKS_IN_FLIGHT  # the future of each block's hash, once handed over
        self._turn = 0
        self._block = self._blocks[0]
        self._filled = 0  # bytes of _block waiting to go out
        self._written = 0  # bytes of the file handed to the kernel
        self._written_back = 0  # bytes of the file whose writeback was started
        header = self._header(planned or 0)
        self._header_size = len(header)
        self._write(header, owned=True)  # bytes: never changed

    def _header(self, count: int) -> bytes:
        buffer = io.BytesIO()
        npy_format.write_array_header_1_0(
            buffer, {"descr": npy_format.dtype_to_descr(self.dtype), "fortran_order": False,
                     "shape": (count, *self.row_shape)}
        )
        return buffer.getvalue()

    def _write(self, data, owned: bool = False) -> None:
        """Write ``data`` now (after whatever the block holds) and hash it, and start writeback every
        ``WRITEBACK_EVERY`` bytes.  ``owned``: ``data`` is a block (or bytes) that nobody changes before its hash
        is done, so the hashing thread may take it; anything else is hashed before this returns."""
        self._flush_block()
        self._fp.write(data)
        if owned:
            self._hashed[self._turn] = self._digest.submit(data)
        else:
            self._digest.update_now(data)
        self._written += len(data)
        if self._written - self._written_back >= WRITEBACK_EVERY:
            self._fp.flush()
            start_writeback(self._fp.fileno(), self._written_back, self._written - self._written_back)
            self._written_back = self._written

    def _flush_block(self) -> None:
        if self._filled:
            filled, self._filled = self._filled, 0
            self._write(memoryview(self._block)[:filled], owned=True)
            self._turn = (self._turn + 1) % BLOCKS_IN_FLIGHT
            self._block = self._blocks[self._turn]
            if self._hashed[self._turn] is not None:  # the hashing thread may still read it
                self._hashed[self._turn].result()
                self._hashed[self._turn] = None

    def _gather(self, data: memoryview) -> None:
        """Append ``data`` to the block, writing the block out when it is full; rows larger than the block go
        straight out."""
        size = len(data)
        if self._filled + size > len(self._block):
            self._flush_block()
        if size >= len(self._block):
            self._write(data)
        else:
            self._block[self._filled:self._filled + size] = data
            self._filled += size

    def append(self, array: np.ndarray) -> int:
        """Append ``array`` (C-contiguous, this file's dtype; flat, or rows of ``row_shape``); return the row
        offset it starts at (the element offset of a 1-D file)."""
        if array.dtype != self.dtype or not array.flags.c_contiguous:
            raise InternalError(f"{self.path}: appending {array.dtype} (contiguous={array.flags.c_contiguous})")
        if self.row_shape and array.shape[-len(self.row_shape):] != self.row_shape:
            raise InternalError(f"{self.path}: appending shape {array.shape} to rows of {self.row_shape}")
        rows = array.size // self._row_size if self._row_size else 0
        if self.planned is not None and self.count + rows > self.planned:
            raise InternalError(f"{self.path}: more elements than planned ({self.count + rows} > {self.planned})")
        offset = self.count
        self._gather(memoryview(array).cast("B"))
        self.count += rows
        return offset

    def close(self) -> FileEntry:
        """Flush, fsync (the file's one fsync) and return the file's size and hash."""
        self._flush_block()
        size = self._header_size + self.count * self._row_size * self.dtype.itemsize
        rewrite = self.count != (self.planned or 0)
        if rewrite:
            header = self._header(self.count)
            if len(header) != self._header_size:
                raise InternalError(f"{self.path}: .npy header changed size when rewritten")
            self._fp.seek(0)
            self._fp.write(header)
            self._fp.truncate(size)
        self._fp.flush()
        os.fsync(self._fp.fileno())
        self._fp.close()
        digest = self._digest.hexdigest()
        if rewrite:
            return hash_file(self.path)
        return FileEntry(size=size, sha256=digest)

    def abort(self) -> None:
        self._digest.abandon()
        self._fp.close()


__all__ = ["BackgroundDigest", "NpyStream", "SYNC_FILE_RANGE_WRITE", "can_start_writeback", "run_together",
           "start_writeback"]
