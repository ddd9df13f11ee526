"""Cues read from numeric arrays with numpy: ``npy/spk_embedding`` (audio cue), ``npy/muse_frontend`` (visual cue)
and ``npy/fields`` (spatial cue).  Every value is stored as float32 and refused when empty or not finite.

``npy/spk_embedding``: speaker embeddings, one float32 row ``[D]`` each.  Resource value: a list of ``{"path"}``
(``utt_id`` optional).  WeSep's rule: an ``.npy`` of shape ``[D]``, or ``[1, D]`` squeezed; any other rank is
refused.  All items of a bank share ``D`` (a batch stacks them).

``npy/muse_frontend``: precomputed visual front-end features, WeSep's experimental path.  Resource value: a list
of ``{"utt_id", "path", "duration_sec"}``.  The ``.npy`` is float32 with 2 to 4 axes, the last one time;
``duration_sec`` (the video's length, which the loader aligns the frames to) is part of an item's identity, so one
file listed with two durations is two items.

``npy/fields``: named numeric fields per speaker (azimuth, elevation, a trajectory ...).  Resource value: ONE dict
per key (not a list), ``{"path", "duration_sec"?}``.  The file is an ``.npz`` (read without unpickling), or — what
WeSep's recipes write — a dict saved with ``np.save(path, {"azimuth": ...})``, which is a pickle: it is unpickled
only with ``--allow-pickle`` (unpickling runs code from the file), and its fields are stored as plain float32, so
the pack holds no pickle.  A field is a number (stored as a scalar) or a 1-D series; its name must be a string.
``meta.json["fields"]`` is the union of the items' field names, sorted; ``values.npy`` says, per item and field,
whether the item has it and where its values are.
"""

from __future__ import annotations

import math
import os

import numpy as np
from numpy.lib import format as npy_format

from speechpack.packer.cues.payload import CueWriter, FlatWriter, LoadContext, as_float32, read_npy
from speechpack.packer.cues.resource import (
    CueInputError,
    EntryContext,
    ItemSource,
    entry_duration,
    entry_path,
    entry_utt_id,
)
from speechpack.packer.build.streams import NpyStream
from speechpack.packer.files import save_npy
from speechpack.schemas.cue_banks import DATA_NAME, FIELD_VALUE_DTYPE, VALUES_NAME, representation_spec
from speechpack.schemas.npyfile import read_npy_header

_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_HINT = "a pickled dict; pass --allow-pickle to unpickle it (only for files you trust)"


class SpkEmbeddingWriter(CueWriter):
    """``data.npy`` is ``[items, D]``: created at the first item, which fixes ``D``."""

    representation = "spk_embedding"

    def __init__(self, directory: str, context: LoadContext):
        super().__init__(directory, context)
        self._data: NpyStream | None = None

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> np.ndarray:
        array = read_npy(source.path)
        if array.ndim == 2 and array.shape[0] == 1:
            array = array[0]
        if array.ndim != 1:
            raise CueInputError(f"a speaker embedding must have shape [D] or [1, D], got {list(array.shape)}")
        return as_float32(array, "the embedding", "spk_embedding")

    def add(self, source: ItemSource, loaded: np.ndarray) -> None:
        if self._data is None:
            self._data = NpyStream(os.path.join(self.directory, DATA_NAME), self.row.payload_dtype, None,
                                   loaded.shape)
        elif loaded.shape != self._data.row_shape:
            raise CueInputError(f"embedding of dimension {loaded.shape[0]}, but the bank's first item has "
                                f"{self._data.row_shape[0]}: all embeddings of a cue must share D")
        self.rows.append((self._data.append(loaded),))

    def finish(self) -> dict:
        if self._data is None:  # an empty resource: an empty [0, 0] table
            save_npy(os.path.join(self.directory, DATA_NAME), np.zeros((0, 0), dtype=self.row.payload_dtype))
        else:
            self._data.close()
        return super().finish()

    def abort(self) -> None:
        if self._data is not None:
            self._data.abort()


class MuseFrontendWriter(FlatWriter):
    representation = "muse_frontend"
    #: The ``shape`` field of an item row holds this many axes.
    MAX_NDIM = representation_spec("muse_frontend").item_dtype["shape"].shape[0]
    MIN_NDIM = 2

    @staticmethod
    def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
        source = ItemSource(entry_path(entry, context), duration_sec=entry_duration(entry, required=True))
        return source, entry_utt_id(entry)

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> np.ndarray:
        low, high = MuseFrontendWriter.MIN_NDIM, MuseFrontendWriter.MAX_NDIM
        array = read_npy(source.path)
        if not low <= array.ndim <= high:
            raise CueInputError(f"muse_frontend features need {low} to {high} axes ([..., T]), "
                                f"got shape {list(array.shape)}")
        return as_float32(array, "the features", "muse_frontend")

    def add(self, source: ItemSource, loaded: np.ndarray) -> None:
        offset = self.append(loaded.reshape(-1))
        shape = list(loaded.shape) + [0] * (self.MAX_NDIM - loaded.ndim)
        duration = source.duration_sec if source.duration_sec is not None else math.nan
        self.rows.append((offset, loaded.ndim, shape, duration))


def _file_kind(path: str) -> str:
    """``"npz"``, ``"npy"`` (a plain array), ``"pickled npy"`` (``np.save`` of a dict) or ``"other"`` (perhaps a
    raw pickle), from the first bytes and the ``.npy`` header: nothing is unpickled to find out."""
    with open(path, "rb") as fp:
        magic = fp.read(len(npy_format.MAGIC_PREFIX))
        if magic[:len(_ZIP_MAGIC)] == _ZIP_MAGIC:
            return "npz"
        if magic != npy_format.MAGIC_PREFIX:
            return "other"
    return "pickled npy" if read_npy_header(path).dtype.hasobject else "npy"


def _read_mapping(path: str, allow_pickle: bool) -> dict:
    """The file's fields as ``{name: value}``: an npz's arrays, or an unpickled dict (with ``allow_pickle``)."""
    try:
        kind = _file_kind(path)
        if kind == "npy":
            raise CueInputError("holds a plain array; expected an .npz of fields or a pickled dict")
        if kind != "npz" and not allow_pickle:
            raise CueInputError(f"is {_PICKLE_HINT}" if kind == "pickled npy"
                                else f"is not an .npy or .npz file; if it is {_PICKLE_HINT}")
        loaded = np.load(path, allow_pickle=allow_pickle)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                return {name: loaded[name] for name in loaded.files}
    except CueInputError:
        raise
    except Exception as err:  # noqa: BLE001 - np.load and unpickling raise anything (ValueError, EOFError, ...)
        raise CueInputError(f"cannot read the fields ({type(err).__name__}: {err})") from None
    if isinstance(loaded, np.ndarray) and loaded.dtype.hasobject and loaded.shape == ():
        loaded = loaded.item()  # np.save(path, dict) stores a 0-d object array
    if not isinstance(loaded, dict):
        raise CueInputError(f"expected a dict of fields, the pickle holds {type(loaded).__name__}")
    return loaded


class FieldsWriter(FlatWriter):
    representation = "fields"

    def __init__(self, directory: str, context: LoadContext):
        super().__init__(directory, context)
        self._placed: list[dict[str, tuple[int, int]]] = []  # per item: field -> (offset, length or -1)

    @staticmethod
    def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
        return ItemSource(entry_path(entry, context), duration_sec=entry_duration(entry, required=False)), ""

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> dict[str, np.ndarray]:
        """``{field name: float32 0-d or 1-D array}``."""
        fields = {}
        for name, value in _read_mapping(source.path, context.allow_pickle).items():
            if not isinstance(name, str) or not name:
                raise CueInputError(f"field names must be non-empty strings, got {name!r}")
            try:
                array = np.asarray(value)
            except Exception as err:  # noqa: BLE001 - an unpickled value can be any object
                raise CueInputError(f"field {name!r} is not numeric ({err})") from None
            if array.ndim > 1:
                raise CueInputError(f"field {name!r} must be a number or a 1-D series, got shape {list(array.shape)}")
            fields[name] = as_float32(array, f"field {name!r}", "fields")
        if not fields:
            raise CueInputError("holds no fields")
        return fields

    def add(self, source: ItemSource, loaded: dict[str, np.ndarray]) -> None:
        placed = {}
        for name in sorted(loaded):
            value = loaded[name]
            placed[name] = (self.append(value.reshape(-1)), -1 if value.ndim == 0 else value.shape[0])
        self._placed.append(placed)
        self.rows.append((source.duration_sec if source.duration_sec is not None else math.nan,))

    def finish(self) -> dict:
        super().finish()
        names = sorted({name for placed in self._placed for name in placed})
        values = np.zeros((len(self._placed), len(names)), dtype=FIELD_VALUE_DTYPE)
        for item, placed in enumerate(self._placed):
            for column, name in enumerate(names):
                if name in placed:
                    values[item, column] = (*placed[name], True)
        save_npy(os.path.join(self.directory, VALUES_NAME), values)
        return {"fields": names}


__all__ = ["FieldsWriter", "MuseFrontendWriter", "SpkEmbeddingWriter"]
