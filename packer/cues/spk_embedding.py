"""``npy/spk_embedding`` (audio cue): speaker embeddings, one float32 row ``[D]`` each.

Resource value: a list of ``{"path"}`` (``utt_id`` optional).  WeSep's rule: an ``.npy`` of shape ``[D]``, or
``[1, D]`` squeezed; any other rank is refused.  All items of a bank share ``D`` (a batch stacks them).
"""

from __future__ import annotations

import os

import numpy as np

from speechpack.packer.cues.payload import LoadContext, as_float32, file_provenance, read_npy
from speechpack.packer.cues.problem import CueInputError
from speechpack.packer.cues.resource import EntryContext, ItemSource, entry_path, entry_utt_id
from speechpack.packer.build.streams import NpyStream
from speechpack.packer.files import save_npy
from speechpack.schemas.cues import DATA_NAME, ITEM_DTYPES, ITEMS_NAME, PAYLOAD_DTYPES

READS_FILES = True
provenance = file_provenance


def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
    return ItemSource(entry_path(entry, context)), entry_utt_id(entry)


def load(source: ItemSource, context: LoadContext) -> np.ndarray:
    array = read_npy(source.path)
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1:
        raise CueInputError(f"a speaker embedding must have shape [D] or [1, D], got {list(array.shape)}")
    return as_float32(array, "the embedding", "spk_embedding")


class Payload:
    """``data.npy`` is ``[items, D]``: created at the first item, which fixes ``D``."""

    def __init__(self, directory: str, context: LoadContext):
        self.directory = directory
        self.rows: list[tuple] = []
        self._data: NpyStream | None = None

    def add(self, source: ItemSource, loaded: np.ndarray) -> None:
        if self._data is None:
            self._data = NpyStream(os.path.join(self.directory, DATA_NAME), PAYLOAD_DTYPES["spk_embedding"], None,
                                   loaded.shape)
        elif loaded.shape != self._data.row_shape:
            raise CueInputError(f"embedding of dimension {loaded.shape[0]}, but the bank's first item has "
                                f"{self._data.row_shape[0]}: all embeddings of a cue must share D")
        self.rows.append((self._data.append(loaded),))

    def finish(self) -> dict:
        if self._data is None:  # an empty resource: an empty [0, 0] table
            save_npy(os.path.join(self.directory, DATA_NAME), np.zeros((0, 0), dtype=PAYLOAD_DTYPES["spk_embedding"]))
        else:
            self._data.close()
        save_npy(os.path.join(self.directory, ITEMS_NAME), np.array(self.rows, dtype=ITEM_DTYPES["spk_embedding"]))
        return {}

    def abort(self) -> None:
        if self._data is not None:
            self._data.abort()
