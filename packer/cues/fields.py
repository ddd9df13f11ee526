"""``npy/fields`` (spatial cue): named numeric fields per speaker (azimuth, elevation, a trajectory ...).

Resource value: ONE dict per key (not a list), ``{"path", "duration_sec"?}``.  The file is an ``.npz`` (read
without unpickling), or — what WeSep's recipes write — a dict saved with ``np.save(path, {"azimuth": ...})``,
which is a pickle: it is unpickled only with ``--allow-pickle`` (unpickling runs code from the file), and its
fields are stored as plain float32, so the pack holds no pickle.  A field is a number (stored as a scalar) or a
1-D series; its name must be a string.  ``meta.json["fields"]`` is the union of the items' field names, sorted;
``values.npy`` says, per item and field, whether the item has it and where its values are.
"""

from __future__ import annotations

import math
import os

import numpy as np
from numpy.lib import format as npy_format

from speechpack.packer.cues.payload import FlatPayload, LoadContext, as_float32, file_provenance
from speechpack.packer.cues.problem import CueInputError
from speechpack.packer.cues.resource import EntryContext, ItemSource, entry_duration, entry_path
from speechpack.packer.files import save_npy
from speechpack.schemas.cues import FIELD_VALUE_DTYPE, VALUES_NAME
from speechpack.schemas.npyfile import read_npy_header

READS_FILES = True
provenance = file_provenance
_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_HINT = "a pickled dict; pass --allow-pickle to unpickle it (only for files you trust)"


def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
    return ItemSource(entry_path(entry, context), duration_sec=entry_duration(entry, required=False)), ""


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


class Payload(FlatPayload):
    representation = "fields"

    def __init__(self, directory: str, context: LoadContext):
        super().__init__(directory, context)
        self._placed: list[dict[str, tuple[int, int]]] = []  # per item: field -> (offset, length or -1)

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
