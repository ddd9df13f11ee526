"""What a representation's writer is: :class:`CueWriter`, the base every writer subclasses, with the defaults most
of them keep, and what the writers share (the load context, reading ``.npy`` inputs safely, a payload that streams
``data.npy`` to disk: a bank of enrollment audio can be as large as the corpus, so only the small ``items`` rows
stay in memory).

A writer (one subclass per representation, registered in ``packer.cues.banks.WRITERS``) provides:

- ``representation``: its row's name in ``schemas.cue_banks.REPRESENTATION_SPECS`` (dtypes come from the row);
- ``parse_entry(entry, context) -> (ItemSource, utt_id)``: check one resource entry, without reading its file
  (default: a ``path`` and an optional ``utt_id``); an inline item (its value is in the resource, not in a file)
  sets ``ItemSource.content``;
- ``load(source, context)``: read one item (runs in a worker process; raise ``CueInputError`` for bad input);
- an instance per bank being written, ``Writer(directory, context)``: ``add(source, loaded)`` per item in bank
  order, then ``finish() -> dict`` (extra ``meta.json`` keys) or ``abort()``; :class:`FlatWriter` streams a flat
  ``data.npy`` and writes ``items.npy`` from ``rows`` (``data.npy`` of the row's payload dtype, or the one it is given: a compressed
  waveform bank's bytes);
- ``provenance(source) -> dict``: the item's ``sources.json`` record (default: its path).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from speechpack.packer.cues.resource import CueInputError, EntryContext, ItemSource, entry_path, entry_utt_id
from speechpack.packer.build.encoding import PCM16, Encoding
from speechpack.packer.build.streams import NpyStream
from speechpack.packer.files import save_npy
from speechpack.schemas.cue_banks import DATA_NAME, ITEMS_NAME, RepresentationSpec, representation_spec


@dataclass(frozen=True)
class LoadContext:
    """Build options a loader needs (picklable: it travels to worker processes)."""

    sample_rate: int  # Hz of stored waveforms: the pack's rate
    allow_pickle: bool  # unpickle spatial resources that are pickled dicts (--allow-pickle)
    #: How enrollment audio is stored: the build's ``--codec`` (``packer.build.encoding``; set by ``write_cues``).
    encoding: Encoding = PCM16


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
    result = np.array(array, dtype=representation_spec(representation).payload_dtype, order="C")  # keeps 0-d
    if not np.isfinite(result).all():
        raise CueInputError(f"{what} holds NaN or Inf values")
    return result


class CueWriter:
    """The build-time side of one representation (see the module docstring); an instance writes one bank."""

    representation = ""

    def __init__(self, directory: str, context: LoadContext):
        self.directory = directory
        self.context = context
        self.rows: list[tuple] = []

    @property
    def row(self) -> RepresentationSpec:
        return representation_spec(self.representation)

    @staticmethod
    def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
        return ItemSource(entry_path(entry, context)), entry_utt_id(entry)

    @staticmethod
    def load(source: ItemSource, context: LoadContext):
        raise NotImplementedError

    @staticmethod
    def provenance(source: ItemSource) -> dict:
        return {"path": source.path}

    def add(self, source: ItemSource, loaded) -> None:
        raise NotImplementedError

    def finish(self) -> dict:
        """Write ``items.npy`` from ``rows``; return the extra ``meta.json`` keys."""
        save_npy(os.path.join(self.directory, ITEMS_NAME), np.array(self.rows, dtype=self.row.item_dtype))
        return {}

    def abort(self) -> None:
        pass


class FlatWriter(CueWriter):
    """``items.npy`` rows in memory, ``data.npy`` streamed: flat, or rows of ``row_shape``."""

    def __init__(self, directory: str, context: LoadContext, row_shape: tuple[int, ...] = (),
                 dtype: np.dtype | None = None):
        super().__init__(directory, context)
        self._data = NpyStream(os.path.join(directory, DATA_NAME), self.row.payload_dtype if dtype is None else dtype,
                               None, row_shape)

    def append(self, array: np.ndarray) -> int:
        """Append to ``data.npy``; return the offset (in elements, or rows) where ``array`` starts."""
        return self._data.append(np.ascontiguousarray(array, dtype=self._data.dtype))

    def finish(self) -> dict:
        self._data.close()
        return super().finish()

    def abort(self) -> None:
        self._data.abort()


__all__ = ["CueWriter", "FlatWriter", "LoadContext", "as_float32", "read_npy"]
