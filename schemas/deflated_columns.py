"""Deflated copies of the column files (format 1.5): ``columns/<name>.zlib``, a zlib stream (RFC 1950) of
``columns/<name>`` byte for byte, listed in ``dataset.json["columns"]["deflated"]`` with its own size and sha256.

Why: a reader of a pack on object storage fetches every column before its first batch (the plan needs every
sample's length, the schedule every segment's place), 122 bytes a sample, 122 MB for a million samples, where the
deflated copies are a fifth to three fifths of that (monotone shards and offsets, constant channels and rates,
keys with long common prefixes; a segment's statistics, random floats, deflate least).  The plain ``.npy``
columns stay what every other reader loads (a local pack reads them without inflating anything) and what the
copies must equal; a pack with digests (the format for stores) gets the copies.

Reading one (``Inflater``): the inflated bytes may never exceed the column's recorded size (a crafted stream that
inflates without end is refused at that size, not held in memory), and are used only once their sha256 equals
the column's, so a copy is trusted exactly as the column it stands for.
"""

from __future__ import annotations

import hashlib
import zlib


#: Suffix of a column's deflated copy in ``columns/``.
DEFLATED_SUFFIX = ".zlib"
#: zlib's level for the copies: 6 (its default) deflates the columns about as small as 9, twice as fast.
DEFLATE_LEVEL = 6


def deflated_name(column: str) -> str:
    """The file name of ``column``'s deflated copy (``samples.npy`` -> ``samples.npy.zlib``)."""
    return column + DEFLATED_SUFFIX


def deflate(data: bytes) -> bytes:
    return zlib.compress(data, DEFLATE_LEVEL)


class Inflater:
    """A deflated copy inflated block by block as it arrives: ``feed`` each block, then ``finish``, which returns
    whether the inflated bytes are exactly ``size`` bytes whose sha256 is ``sha256`` (the column's).  Output
    beyond ``size``, a corrupt stream or a stream that ends early makes ``finish`` False; ``feed`` returns the
    inflated bytes of its block (for the caller to keep or write)."""

    def __init__(self, size: int, sha256: str):
        self.size, self.sha256 = size, sha256
        self._inflate = zlib.decompressobj()
        self._digest = hashlib.sha256()
        self.inflated = 0
        self._bad = False

    def feed(self, block: bytes) -> bytes:
        if self._bad:
            return b""
        try:
            out = self._inflate.decompress(block, self.size + 1 - self.inflated)
        except zlib.error:
            self._bad = True
            return b""
        self.inflated += len(out)
        if self.inflated > self.size or self._inflate.unconsumed_tail:
            self._bad = True  # more bytes than the column has: refused at its size
            return b""
        self._digest.update(out)
        return out

    def finish(self) -> bool:
        if self._bad:
            return False
        try:
            rest = self._inflate.flush()  # all input consumed: what zlib still holds of its window, if anything
        except zlib.error:
            return False
        self.inflated += len(rest)
        self._digest.update(rest)
        return (self._inflate.eof and not self._inflate.unused_data and self.inflated == self.size
                and self._digest.hexdigest() == self.sha256)


__all__ = ["DEFLATED_SUFFIX", "DEFLATE_LEVEL", "Inflater", "deflate", "deflated_name"]
