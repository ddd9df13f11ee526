"""Per-piece digests (format 1.4): ``shard-k/digests.npy``, what a verified range read compares a piece with.

A *piece* is what a reader fetches and checks at once: a block of a compressed audio segment, or a whole segment
of any other stream.  A shard's pieces are listed stream by stream in catalogue order, each stream's segments in
storage order (``schemas.columns.digest_piece_counts`` counts them); row ``i`` of the file is
``hashlib.blake2b(piece_i, digest_size=16).digest()``.  Pure ``hashlib`` and numpy, so that any reader can check.
"""

from __future__ import annotations

import hashlib

import numpy as np

from speechpack.schemas.constants import DIGEST_SIZE
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.npyfile import NpyHeader

#: ``digests.npy`` is a ``[pieces, DIGEST_SIZE]`` array of these.
DIGESTS_DTYPE = np.dtype("|u1")


def piece_digest(piece: bytes | memoryview | np.ndarray) -> bytes:
    """The 16-byte digest of one piece (its bytes exactly as stored; an array must be C-contiguous)."""
    return hashlib.blake2b(piece, digest_size=DIGEST_SIZE).digest()


def digests_array(digests: list[bytes]) -> np.ndarray:
    """The ``digests.npy`` array of a shard's pieces' digests, in piece order."""
    if not digests:
        return np.zeros((0, DIGEST_SIZE), dtype=DIGESTS_DTYPE)
    return np.frombuffer(b"".join(digests), dtype=DIGESTS_DTYPE).reshape(len(digests), DIGEST_SIZE)


def check_digests_header(header: NpyHeader, pieces: int, where: str) -> None:
    """A ``digests.npy`` header describes ``pieces`` rows of ``DIGEST_SIZE`` bytes, C order."""
    if header.dtype != DIGESTS_DTYPE or header.fortran_order or header.shape != (pieces, DIGEST_SIZE):
        raise PackFormatError(f"{where}: expected a {DIGESTS_DTYPE.str} array of shape [{pieces}, {DIGEST_SIZE}] "
                              f"(one digest per piece of the shard), got {header.dtype.str} {list(header.shape)}"
                              f"{' in Fortran order' if header.fortran_order else ''}")


__all__ = ["DIGESTS_DTYPE", "check_digests_header", "digests_array", "piece_digest"]
