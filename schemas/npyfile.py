"""Reading an ``.npy`` header without reading (or unpickling) the data: the one place that does it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from numpy.lib import format as npy_format


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
    """Parse ``path``'s header.  A corrupt header raises whatever numpy raises (``ValueError``, ``SyntaxError``,
    ``tokenize.TokenError``...): callers that report errors catch ``Exception``."""
    with open(path, "rb") as fp:
        return read_npy_header_from(fp)


def read_npy_header_from(fp: BinaryIO) -> NpyHeader:
    """Parse the header of an open ``.npy`` file (or buffer) at its start, leaving it at the data: for readers
    that must take header, size and data from one descriptor.  Raises as :func:`read_npy_header`."""
    version = npy_format.read_magic(fp)
    read = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
    shape, fortran_order, dtype = read(fp)
    return NpyHeader(tuple(shape), dtype, fortran_order, fp.tell())
