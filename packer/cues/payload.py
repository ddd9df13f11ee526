"""What the representation modules share: the load context, reading ``.npy`` inputs safely, and a bank payload
that streams ``data.npy`` to disk (a bank of enrollment audio can be as large as the corpus) and keeps only the
small ``items`` rows in memory.

A representation module (``packer/cues/<representation>.py``) provides:

- ``READS_FILES``: whether its entries point to files (checked for existence before anything is decoded);
- ``parse_entry(entry, context) -> (ItemSource, utt_id)``: check one resource entry, without reading its file;
- ``load(source, context)``: read one item (runs in a worker process; raise ``CueInputError`` for bad input);
- ``Payload(directory, context)``: ``add(source, loaded)`` per item in bank order, ``finish() -> dict`` (extra
  ``meta.json`` keys) or ``abort()``;
- ``provenance(source) -> dict``: the item's ``sources.json`` record.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from speechpack.packer.cues.problem import CueInputError
from speechpack.packer.cues.resource import ItemSource
from speechpack.packer.build.streams import NpyStream
from speechpack.packer.files import save_npy
from speechpack.schemas.cues import DATA_NAME, ITEM_DTYPES, ITEMS_NAME, PAYLOAD_DTYPES


@dataclass(frozen=True)
class LoadContext:
    """Build options a loader needs (picklable: it travels to worker processes)."""

    sample_rate: int  # Hz of stored waveforms: the pack's rate
    allow_pickle: bool  # unpickle spatial resources that are pickled dicts (--allow-pickle)


def file_provenance(source: ItemSource) -> dict:
    return {"path": source.path}


def read_npy(path: str) -> np.ndarray:
    """``np.load`` of a plain numeric ``.npy`` (never unpickles); raise ``CueInputError`` with the reason."""
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise CueInputError(f"cannot read .npy ({err})") from None
    if not isinstance(array, np.ndarray):
        raise CueInputError("expected an .npy array, got an .npz archive")
    return array


def as_float32(array: np.ndarray, what: str, representation: str) -> np.ndarray:
    """A numeric array as the representation's (float32) payload dtype, contiguous; refuse non-numeric, empty and
    non-finite values (a NaN in a cue would surface as a NaN loss, far from its cause)."""
    if array.dtype.kind not in "iuf":
        raise CueInputError(f"{what} must be numeric, got dtype {array.dtype}")
    if array.size == 0:
        raise CueInputError(f"{what} is empty (shape {list(array.shape)})")
    result = np.array(array, dtype=PAYLOAD_DTYPES[representation], order="C")  # not ascontiguousarray: keeps 0-d
    if not np.isfinite(result).all():
        raise CueInputError(f"{what} holds NaN or Inf values")
    return result


class FlatPayload:
    """``items.npy`` rows in memory, ``data.npy`` streamed: flat, or rows of ``row_shape``."""

    representation = ""

    def __init__(self, directory: str, context: LoadContext, row_shape: tuple[int, ...] = ()):
        self.directory = directory
        self.context = context
        self.rows: list[tuple] = []
        self._data = NpyStream(os.path.join(directory, DATA_NAME), PAYLOAD_DTYPES[self.representation], None,
                               row_shape)

    def append(self, array: np.ndarray) -> int:
        """Append to ``data.npy``; return the offset (in elements, or rows) where ``array`` starts."""
        return self._data.append(np.ascontiguousarray(array, dtype=self._data.dtype))

    def finish(self) -> dict:
        self._data.close()
        save_npy(os.path.join(self.directory, ITEMS_NAME), np.array(self.rows, dtype=ITEM_DTYPES[self.representation]))
        return {}

    def abort(self) -> None:
        self._data.abort()
