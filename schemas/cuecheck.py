"""The cue-bank invariants of ``schemas/cue_banks.py``, checked on the files: what ``open_pack`` refuses and
``speechpack validate`` reports (each issue names its file).  numpy only.

The invariants every bank shares are checked here once (:func:`bank_issues`); what differs per representation (its
dtypes, extra files, payload bounds, whether ``meta.json`` records the sample rate) is read from the cue's row of
``schemas.cue_banks.REPRESENTATION_SPECS``.  Every check is vectorised over the bank's index arrays, so opening a
pack with a million cue items stays fast.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from speechpack.schemas.cue_banks import (
    DATA_NAME,
    ENTRIES_NAME,
    ENTRY_UTT_IDS_NAME,
    INDEX_DTYPE,
    ITEMS_NAME,
    LOOKUP_COUNT_NAME,
    LOOKUP_FIRST_NAME,
    LOOKUP_KEYS_NAME,
    META_NAME,
    SOURCES_NAME,
    Issue,
    outside,
)
from speechpack.schemas.cues import LABEL_SPEAKERS_NAME, CueSpec
from speechpack.schemas.documents import read_json
from speechpack.schemas.npyfile import read_npy_header


def _npy_header(path: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, expected file size)`` from an ``.npy`` header, without reading the data."""
    header = read_npy_header(path)
    if header.fortran_order:
        raise ValueError("Fortran-ordered array")
    return header.shape, header.dtype, header.expected_size


@dataclass(frozen=True)
class BankFiles:
    """A bank's small files, loaded, and the header of its ``data.npy``."""

    meta: dict
    arrays: dict[str, np.ndarray]  # file name -> array, for every .npy but data.npy
    data_shape: tuple[int, ...]


def read_bank(directory: str, spec: CueSpec, sample_rate: int) -> tuple[BankFiles | None, list[Issue]]:
    """Load a bank's index files and check them (``bank_issues``); None when a file cannot be read at all."""
    issues: list[Issue] = []
    meta_path = os.path.join(directory, META_NAME)
    try:
        meta = read_json(meta_path, error=ValueError)
        if not isinstance(meta, dict):
            raise ValueError(f"expected an object, got {type(meta).__name__}")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return None, [(meta_path, f"cannot read ({err})")]
    arrays = {}
    data_shape: tuple[int, ...] = ()
    for name in spec.representation_spec.files:
        path = os.path.join(directory, name)
        if name in (META_NAME, SOURCES_NAME):
            continue
        try:
            if name == DATA_NAME:
                data_shape, dtype, size = _npy_header(path)
                expected = spec.representation_spec.payload_dtype
                if dtype != expected:
                    issues.append((path, f"dtype {dtype.str}, expected {expected.str}"))
                elif os.path.getsize(path) != size:
                    issues.append((path, f"header promises {size} bytes, the file has {os.path.getsize(path)}"))
            else:
                arrays[name] = np.load(path, allow_pickle=False)
        except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError, TokenError...
            issues.append((path, f"cannot read .npy ({err})"))
    if issues:
        return None, issues
    files = BankFiles(meta=meta, arrays=arrays, data_shape=tuple(data_shape))
    return files, bank_issues(directory, spec, files, sample_rate)


def _dtype_issues(directory: str, spec: CueSpec, arrays: dict[str, np.ndarray]) -> list[Issue]:
    row = spec.representation_spec
    expected = {name: (INDEX_DTYPE, 1) for name in (LOOKUP_FIRST_NAME, LOOKUP_COUNT_NAME, ENTRIES_NAME)}
    expected[ITEMS_NAME] = (row.item_dtype, 1)
    expected.update({array.name: (array.dtype, array.ndim) for array in row.extra_arrays})
    issues = []
    for name, array in arrays.items():
        if name in (LOOKUP_KEYS_NAME, ENTRY_UTT_IDS_NAME):
            good, ndim = array.dtype.kind == "S", 1
        else:
            dtype, ndim = expected[name]
            good = array.dtype == dtype
        if not good or array.ndim != ndim:
            issues.append((os.path.join(directory, name), f"holds {array.dtype} {list(array.shape)}, not what "
                                                          f"schemas/cue_banks.py specifies"))
    return issues


def bank_issues(directory: str, spec: CueSpec, files: BankFiles, sample_rate: int) -> list[Issue]:
    """The bank invariants of ``schemas/cue_banks.py``: meta, dtypes, sorted unique keys, entry runs, item bounds."""
    row = spec.representation_spec
    meta, arrays = files.meta, files.arrays
    at = {name: os.path.join(directory, name) for name in row.files}
    issues = _dtype_issues(directory, spec, arrays)
    if issues:
        return issues
    expected_meta = {"type": spec.type, "format": spec.format}
    if row.at_pack_rate:
        expected_meta["sample_rate"] = sample_rate
    for key, value in expected_meta.items():
        if meta.get(key) != value:
            issues.append((at[META_NAME], f"{key} is {meta.get(key)!r}, expected {value!r}"))
    keys, first, count = arrays[LOOKUP_KEYS_NAME], arrays[LOOKUP_FIRST_NAME], arrays[LOOKUP_COUNT_NAME]
    entries, items = arrays[ENTRIES_NAME], arrays[ITEMS_NAME]
    for key, actual in (("keys", len(keys)), ("entries", len(entries)), ("items", len(items))):
        if meta.get(key) != actual:
            issues.append((at[META_NAME], f"{key} is {meta.get(key)!r}, the arrays hold {actual}"))
    if len(first) != len(keys) or len(count) != len(keys):
        issues.append((at[LOOKUP_FIRST_NAME], f"{len(first)} firsts and {len(count)} counts for {len(keys)} keys"))
        return issues
    if len(arrays[ENTRY_UTT_IDS_NAME]) != len(entries):
        issues.append((at[ENTRY_UTT_IDS_NAME], f"{len(arrays[ENTRY_UTT_IDS_NAME])} utt ids for {len(entries)} entries"))
    if len(keys) > 1 and not (keys[1:] > keys[:-1]).all():
        issues.append((at[LOOKUP_KEYS_NAME], "lookup keys are not sorted and unique"))
    if (count < 1).any() or (row.dict_valued and (count != 1).any()):
        issues.append((at[LOOKUP_COUNT_NAME], "a key has no entry" if (count < 1).any() else
                       "a dict-valued resource has exactly one entry per key"))
    if outside(first, count, len(entries)).any():
        issues.append((at[LOOKUP_FIRST_NAME], f"a key's entries fall outside the {len(entries)} entries"))
    if len(entries) and ((entries < 0) | (entries >= len(items))).any():
        issues.append((at[ENTRIES_NAME], f"an entry points outside the {len(items)} items"))
    issues += row.payload_check(at, meta, arrays, files.data_shape)
    return issues


def label_issues(directory: str, speakers: np.ndarray, labels: np.ndarray) -> list[Issue]:
    if speakers.dtype.kind != "S" or speakers.ndim != 1 or labels.dtype != INDEX_DTYPE \
            or labels.shape != speakers.shape:
        return [(directory, f"expected |S speakers and {INDEX_DTYPE.str} labels, row for row; got "
                            f"{speakers.dtype} {list(speakers.shape)} and {labels.dtype} {list(labels.shape)}")]
    if len(speakers) > 1 and not (speakers[1:] > speakers[:-1]).all():
        return [(os.path.join(directory, LABEL_SPEAKERS_NAME), "speakers are not sorted and unique")]
    return []


__all__ = ["BankFiles", "bank_issues", "label_issues", "read_bank"]
