"""Reading an ``.npy`` header without reading (or unpickling) the data: the one place that does it."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format

from speechpack.schemas.errors import NpyHeaderError

#: numpy parses a header with ``ast.literal_eval``; on some CPython 3.11 releases (3.11.7 here) two threads parsing at once can
#: fail with "AST constructor recursion depth mismatch" (CPython gh-106905), and the pack reader hashes and parses
#: its columns in a thread pool.  A header is a few hundred bytes, so parsing them one at a time costs nothing.
_PARSE_LOCK = threading.Lock()


@dataclass(frozen=True)
class NpyHeader:
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int

    @property
    def expected_size(self) -> int:
        """The file size the header promises: header plus ``prod(shape) * itemsize`` bytes of data."""
        return self.data_offset + math.prod(self.shape) * self.dtype.itemsize


def read_npy_header(path: str) -> NpyHeader:
    """Parse ``path``'s header; raise :class:`NpyHeaderError` (naming the file, with numpy's reason) when the file
    cannot be opened or its header is not a valid ``.npy`` header."""
    try:
        with open(path, "rb") as fp:
            return read_npy_header_from(fp, path)
    except OSError as err:
        raise NpyHeaderError(path, str(err)) from err


def read_npy_header_from(fp: BinaryIO, name: str) -> NpyHeader:
    """Parse the header of an open ``.npy`` file (or buffer) at its start, leaving it at the data: for readers
    that must take header, size and data from one descriptor.  Raises :class:`NpyHeaderError` naming ``name``."""
    try:
        version = npy_format.read_magic(fp)
        read = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
        with _PARSE_LOCK:
            shape, fortran_order, dtype = read(fp)
    except Exception as err:  # noqa: BLE001 - numpy's header parser raises ValueError, SyntaxError, TokenError...,
        # an undocumented set: this is the one place that knows it, so callers catch one named error
        raise NpyHeaderError(name, str(err)) from err
    if any(n < 0 for n in shape):  # numpy's parser accepts them; every later ``np.load``/``memmap`` would fail
        raise NpyHeaderError(name, f"the header's shape {list(shape)} has a negative dimension")
    return NpyHeader(tuple(shape), dtype, fortran_order, fp.tell())
