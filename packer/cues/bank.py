"""Writing one cue bank (``cues/<cue>/``): the lookup arrays, the items as their representation stores them,
``sources.json`` and ``meta.json``.  The layout is specified in ``schemas/cues.py``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from speechpack.packer.cues.payload import LoadContext
from speechpack.packer.cues.problem import CueInputError, CueProblem
from speechpack.packer.cues.representations import MODULES
from speechpack.packer.cues.resource import ItemSource, Resource, utf8
from speechpack.packer.files import save_npy, write_json_atomic
from speechpack.schemas.cues import (
    ENTRIES_NAME,
    ENTRY_UTT_IDS_NAME,
    INDEX_DTYPE,
    LOOKUP_COUNT_NAME,
    LOOKUP_FIRST_NAME,
    LOOKUP_KEYS_NAME,
    META_NAME,
    SOURCES_NAME,
    CueSpec,
)


@dataclass(frozen=True)
class LoadFailure:
    """An item that could not be read (returned by a worker instead of raising, so every problem is found)."""

    reason: str


def load_item(job: tuple[str, ItemSource], context: LoadContext):
    """Read one item in a worker: ``job`` is ``(representation, source)``."""
    representation, source = job
    try:
        return MODULES[representation].load(source, context)
    except CueInputError as err:
        return LoadFailure(str(err))


def loadable_items(resource: Resource) -> list[int]:
    """The items to read: all but those whose file is missing."""
    return [i for i in range(len(resource.items)) if i not in resource.missing_items]


def bytes_array(values: list[bytes]) -> np.ndarray:
    """UTF-8 strings as one ``|S<n>`` array (``n`` at least 1: numpy has no ``|S0``)."""
    return np.array(values, dtype=f"|S{max((len(v) for v in values), default=1) or 1}")


def write_bank(directory: str, spec: CueSpec, resource: Resource, loaded: Iterable,
               context: LoadContext) -> list[CueProblem]:
    """Write the bank of ``spec`` into ``directory`` from ``loaded``: the ``load_item`` results of the items
    that exist (``loadable_items``), in item order.

    Items go on being added after a failure, so each bad item is reported (a dimension that differs from the
    first embedding's, too); a bank with a bad or missing item is left unfinished (the build fails and removes it).
    """
    module = MODULES[spec.representation]
    os.makedirs(directory)
    payload = module.Payload(directory, context)
    problems = []
    failed = bool(resource.missing_items)  # reported when the resource was read
    loaded = iter(loaded)
    for index in loadable_items(resource):
        source, result = resource.items[index], next(loaded)
        if isinstance(result, LoadFailure):
            reason = result.reason
        else:
            try:
                payload.add(source, result)
                continue
            except CueInputError as err:
                reason = str(err)
        failed = True
        problems.append(CueProblem(spec.name, resource.item_keys[index], source.path, reason))
    if failed:
        payload.abort()
        return problems
    meta = payload.finish()
    counts = np.array(resource.counts, dtype=INDEX_DTYPE)
    arrays = {
        LOOKUP_KEYS_NAME: bytes_array([utf8(k) for k in resource.keys]),
        LOOKUP_FIRST_NAME: np.cumsum(counts, dtype=INDEX_DTYPE) - counts,  # keys' entries stored in key order
        LOOKUP_COUNT_NAME: counts,
        ENTRIES_NAME: np.array(resource.entry_items, dtype=INDEX_DTYPE),
        ENTRY_UTT_IDS_NAME: bytes_array([utf8(u) for u in resource.entry_utt_ids]),
    }
    for name, array in arrays.items():
        save_npy(os.path.join(directory, name), array)
    write_json_atomic(os.path.join(directory, SOURCES_NAME), {"items": [module.provenance(s) for s in resource.items]})
    meta.update({"type": spec.type, "format": spec.format, "keys": len(resource.keys),
                 "entries": len(resource.entry_items), "items": len(resource.items),
                 "resource": {"path": spec.resource, "sha256": resource.sha256}})
    write_json_atomic(os.path.join(directory, META_NAME), meta)
    return []


__all__ = ["LoadFailure", "bytes_array", "load_item", "loadable_items", "write_bank"]
