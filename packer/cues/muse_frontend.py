"""``npy/muse_frontend`` (visual cue): precomputed visual front-end features, WeSep's experimental path.

Resource value: a list of ``{"utt_id", "path", "duration_sec"}``.  The ``.npy`` is float32 with 2 to 4 axes, the
last one time; ``duration_sec`` (the video's length, which the loader aligns the frames to) is part of an item's
identity, so one file listed with two durations is two items.
"""

from __future__ import annotations

import math

import numpy as np

from speechpack.packer.cues.payload import FlatPayload, LoadContext, as_float32, file_provenance, read_npy
from speechpack.packer.cues.problem import CueInputError
from speechpack.packer.cues.resource import EntryContext, ItemSource, entry_duration, entry_path, entry_utt_id
from speechpack.schemas.cues import ITEM_DTYPES

READS_FILES = True
provenance = file_provenance
#: The ``shape`` field of an item row holds this many axes.
MAX_NDIM = ITEM_DTYPES["muse_frontend"]["shape"].shape[0]
MIN_NDIM = 2


def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
    source = ItemSource(entry_path(entry, context), duration_sec=entry_duration(entry, required=True))
    return source, entry_utt_id(entry)


def load(source: ItemSource, context: LoadContext) -> np.ndarray:
    array = read_npy(source.path)
    if not MIN_NDIM <= array.ndim <= MAX_NDIM:
        raise CueInputError(f"muse_frontend features need {MIN_NDIM} to {MAX_NDIM} axes ([..., T]), "
                            f"got shape {list(array.shape)}")
    return as_float32(array, "the features", "muse_frontend")


class Payload(FlatPayload):
    representation = "muse_frontend"

    def add(self, source: ItemSource, loaded: np.ndarray) -> None:
        offset = self.append(loaded.reshape(-1))
        shape = list(loaded.shape) + [0] * (MAX_NDIM - loaded.ndim)
        duration = source.duration_sec if source.duration_sec is not None else math.nan
        self.rows.append((offset, loaded.ndim, shape, duration))
