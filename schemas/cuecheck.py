"""The cue-bank invariants of ``schemas/cues.py``, checked on the files: what ``open_pack`` refuses and
``speechpack validate`` reports (each issue names its file).  numpy only.

The invariants every bank shares are checked once (:func:`bank_issues`); what differs per representation is one row
of :data:`BANK_CHECKS` (its payload bounds, whether ``meta.json`` records the sample rate, and, read from
``schemas/cues.py``'s tables, its dtypes and extra files), the way ``schemas/kinds.py``'s ``KIND_SPECS`` holds one
row per pack kind: a new representation is one row here (see docs/extending.md).

Every check is vectorised over the bank's index arrays, so opening a pack with a million cue items stays fast.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

import numpy as np

from speechpack.schemas.cues import (
    BANK_FILES,
    DATA_NAME,
    DICT_VALUED,
    ENTRIES_NAME,
    ENTRY_UTT_IDS_NAME,
    EXTRA_BANK_FILES,
    FIELD_VALUE_DTYPE,
    INDEX_DTYPE,
    ITEM_DTYPES,
    ITEMS_NAME,
    KEYWORDS_NAME,
    LABEL_SPEAKERS_NAME,
    LOOKUP_COUNT_NAME,
    LOOKUP_FIRST_NAME,
    LOOKUP_KEYS_NAME,
    META_NAME,
    PAYLOAD_DTYPES,
    REPRESENTATIONS,
    SOURCES_NAME,
    VALUES_NAME,
    WORD_DTYPE,
    WORDS_NAME,
    CueSpec,
)
from speechpack.schemas.documents import read_json
from speechpack.schemas.npyfile import read_npy_header

#: One problem found in a cue file: ``(file path, message)``.
Issue = tuple[str, str]


def bank_files(representation: str) -> tuple[str, ...]:
    """Every file of a bank of ``representation``."""
    return BANK_FILES + EXTRA_BANK_FILES.get(representation, ())


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
    for name in bank_files(spec.representation):
        path = os.path.join(directory, name)
        if name in (META_NAME, SOURCES_NAME):
            continue
        try:
            if name == DATA_NAME:
                data_shape, dtype, size = _npy_header(path)
                expected = BANK_CHECKS[spec.representation].payload_dtype
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


def _dtype_issues(directory: str, representation: str, arrays: dict[str, np.ndarray]) -> list[Issue]:
    expected = {LOOKUP_FIRST_NAME: INDEX_DTYPE, LOOKUP_COUNT_NAME: INDEX_DTYPE, ENTRIES_NAME: INDEX_DTYPE,
                ITEMS_NAME: BANK_CHECKS[representation].item_dtype, WORDS_NAME: WORD_DTYPE, KEYWORDS_NAME: INDEX_DTYPE,
                VALUES_NAME: FIELD_VALUE_DTYPE}
    issues = []
    for name, array in arrays.items():
        ndim = 2 if name == VALUES_NAME else 1
        if name in (LOOKUP_KEYS_NAME, ENTRY_UTT_IDS_NAME):
            good = array.dtype.kind == "S"
        else:
            good = array.dtype == expected[name]
        if not good or array.ndim != ndim:
            issues.append((os.path.join(directory, name), f"holds {array.dtype} {list(array.shape)}, not what "
                                                          f"schemas/cues.py specifies"))
    return issues


def _outside(first: np.ndarray, count: np.ndarray, size: int) -> np.ndarray:
    """Rows whose span ``[first, first + count)`` is not inside ``[0, size)`` (float64: no int64 overflow on a
    corrupt value; exact for any real size)."""
    first, count = first.astype(np.float64), count.astype(np.float64)
    return (first < 0) | (count < 0) | (first + count > size)


def bank_issues(directory: str, spec: CueSpec, files: BankFiles, sample_rate: int) -> list[Issue]:
    """The bank invariants of ``schemas/cues.py``: meta, dtypes, sorted unique keys, entry runs, item bounds."""
    representation = spec.representation
    check = BANK_CHECKS[representation]
    meta, arrays = files.meta, files.arrays
    at = {name: os.path.join(directory, name) for name in bank_files(representation)}
    issues = _dtype_issues(directory, representation, arrays)
    if issues:
        return issues
    expected_meta = {"type": spec.type, "format": spec.format}
    if check.meta_sample_rate:
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
    if (count < 1).any() or (check.dict_valued and (count != 1).any()):
        issues.append((at[LOOKUP_COUNT_NAME], "a key has no entry" if (count < 1).any() else
                       "a dict-valued resource has exactly one entry per key"))
    if _outside(first, count, len(entries)).any():
        issues.append((at[LOOKUP_FIRST_NAME], f"a key's entries fall outside the {len(entries)} entries"))
    if len(entries) and ((entries < 0) | (entries >= len(items))).any():
        issues.append((at[ENTRIES_NAME], f"an entry points outside the {len(items)} items"))
    issues += check.payload(at, meta, arrays, files.data_shape)
    return issues


def _flat_size(data_shape: tuple[int, ...]) -> int:
    return math.prod(data_shape)


def _check_waveform(at, meta, arrays, data_shape) -> list[Issue]:
    items = arrays[ITEMS_NAME]
    bad = ((items["channels"] < 1) | (items["length"] < 1) | ~(items["scale"] > 0) | ~np.isfinite(items["scale"])
           | _outside(items["offset"], items["channels"].astype(np.float64) * items["length"], _flat_size(data_shape)))
    return [(at[ITEMS_NAME], f"{int(bad.sum())} item(s) with a bad shape or scale, or outside data.npy")] if bad.any() \
        else []


def _check_spk_embedding(at, meta, arrays, data_shape) -> list[Issue]:
    rows = arrays[ITEMS_NAME]["row"]
    if len(data_shape) != 2:
        return [(at[DATA_NAME], f"expected a [items, D] table, got shape {list(data_shape)}")]
    if ((rows < 0) | (rows >= data_shape[0])).any():
        return [(at[ITEMS_NAME], f"an item's row is outside the {data_shape[0]} rows of data.npy")]
    return []


def _check_raw_video(at, meta, arrays, data_shape) -> list[Issue]:
    items = arrays[ITEMS_NAME]
    dims = [items[name].astype(np.float64) for name in ("frames", "height", "width", "channels")]
    bad = ~(items["fps"] > 0) | ~np.isfinite(items["fps"])
    for dim in dims:
        bad |= dim < 1
    bad |= _outside(items["offset"], np.prod(dims, axis=0), _flat_size(data_shape))
    return [(at[ITEMS_NAME], f"{int(bad.sum())} video(s) with a bad shape or frame rate, or outside data.npy")] \
        if bad.any() else []


def _check_muse_frontend(at, meta, arrays, data_shape) -> list[Issue]:
    items = arrays[ITEMS_NAME]
    ndim, shape, duration = items["ndim"], items["shape"], items["duration_sec"]
    used = np.arange(shape.shape[1])[None, :] < ndim[:, None]
    bad = ((ndim < 2) | (ndim > shape.shape[1]) | (used & (shape < 1)).any(axis=1) | (~used & (shape != 0)).any(axis=1)
           | ~(duration > 0) | ~np.isfinite(duration)
           | _outside(items["offset"], np.where(used, shape, 1).astype(np.float64).prod(axis=1),
                      _flat_size(data_shape)))
    return [(at[ITEMS_NAME], f"{int(bad.sum())} item(s) with a bad shape or duration, or outside data.npy")] \
        if bad.any() else []


def _check_fields(at, meta, arrays, data_shape) -> list[Issue]:
    names = meta.get("fields")
    values = arrays[VALUES_NAME]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or names != sorted(set(names)):
        return [(at[META_NAME], f"fields must be the sorted, unique field names, got {names!r}")]
    if values.shape != (len(arrays[ITEMS_NAME]), len(names)):
        return [(at[VALUES_NAME], f"shape {list(values.shape)}, expected [items, fields] = "
                                  f"[{len(arrays[ITEMS_NAME])}, {len(names)}]")]
    present = values[values["present"]]
    length = np.where(present["length"] == -1, 1, present["length"])
    if ((present["length"] < -1) | (present["length"] == 0)).any() \
            or _outside(present["offset"], length, _flat_size(data_shape)).any():
        return [(at[VALUES_NAME], "a field's values fall outside data.npy")]
    return []


def _check_dae_keyword_phoneme(at, meta, arrays, data_shape) -> list[Issue]:
    items, words, keywords = arrays[ITEMS_NAME], arrays[WORDS_NAME], arrays[KEYWORDS_NAME]
    issues = []
    if _outside(items["word_first"], items["word_count"], len(words)).any():
        issues.append((at[ITEMS_NAME], f"an item's words fall outside the {len(words)} of words.npy"))
    if _outside(items["kw_first"], items["kw_count"], len(keywords)).any():
        issues.append((at[ITEMS_NAME], f"an item's keywords fall outside the {len(keywords)} of keywords.npy"))
    if _outside(words["phn_offset"], words["phn_length"], _flat_size(data_shape)).any():
        issues.append((at[WORDS_NAME], "a word's phonemes fall outside data.npy"))
    if issues:
        return issues
    # every keyword candidate indexes a word of its own item
    owner_count = np.repeat(items["word_count"], items["kw_count"])
    starts = np.repeat(items["kw_first"], items["kw_count"])
    run_starts = np.cumsum(items["kw_count"]) - items["kw_count"]
    within = np.arange(len(owner_count)) - np.repeat(run_starts, items["kw_count"])
    candidates = keywords[starts + within]
    if ((candidates < 0) | (candidates >= owner_count)).any():
        issues.append((at[KEYWORDS_NAME], "a keyword candidate is not a word index of its item"))
    return issues


#: ``(paths by bank file name, meta.json, the loaded .npy arrays, data.npy's shape) -> issues``.
PayloadCheck = Callable[[dict[str, str], dict, dict[str, np.ndarray], tuple[int, ...]], list[Issue]]


@dataclass(frozen=True)
class BankCheck:
    """How a bank of one cue representation is checked, beyond the invariants every bank shares.

    ``payload``           the bounds of its items (and of its extra files) inside ``data.npy``.
    ``meta_sample_rate``  ``meta.json`` records the pack's sample rate (a waveform bank is stored at it).

    The layout facts are ``schemas/cues.py``'s (``ITEM_DTYPES``, ``PAYLOAD_DTYPES``, ``EXTRA_BANK_FILES``,
    ``DICT_VALUED``), where the writer reads them too; the row reads them from there rather than restating them.
    """

    name: str
    payload: PayloadCheck
    meta_sample_rate: bool = False

    @property
    def files(self) -> tuple[str, ...]:
        return bank_files(self.name)

    @property
    def item_dtype(self) -> np.dtype:
        return ITEM_DTYPES[self.name]

    @property
    def payload_dtype(self) -> np.dtype:
        return PAYLOAD_DTYPES[self.name]

    @property
    def dict_valued(self) -> bool:
        """One entry per key (the resource maps a key to one dict, not to a list of entries)."""
        return self.name in DICT_VALUED


_CHECKS = (
    BankCheck("waveform", _check_waveform, meta_sample_rate=True),
    BankCheck("spk_embedding", _check_spk_embedding),
    BankCheck("raw_video", _check_raw_video),
    BankCheck("muse_frontend", _check_muse_frontend),
    BankCheck("fields", _check_fields),
    BankCheck("dae_keyword_phoneme", _check_dae_keyword_phoneme),
)
#: The table: representation -> its row (the contract side of the cue registries; see docs/extending.md).
BANK_CHECKS: Mapping[str, BankCheck] = MappingProxyType({check.name: check for check in _CHECKS})
if set(BANK_CHECKS) != set(REPRESENTATIONS.values()):  # pragma: no cover - a representation added in one place only
    raise ImportError(f"BANK_CHECKS {sorted(BANK_CHECKS)} and REPRESENTATIONS {sorted(REPRESENTATIONS.values())} "
                      f"differ")
#: A view of the table: representation -> its payload check.
PAYLOAD_CHECKS: Mapping[str, PayloadCheck] = MappingProxyType({name: c.payload for name, c in BANK_CHECKS.items()})


def label_issues(directory: str, speakers: np.ndarray, labels: np.ndarray) -> list[Issue]:
    if speakers.dtype.kind != "S" or speakers.ndim != 1 or labels.dtype != INDEX_DTYPE \
            or labels.shape != speakers.shape:
        return [(directory, f"expected |S speakers and {INDEX_DTYPE.str} labels, row for row; got "
                            f"{speakers.dtype} {list(speakers.shape)} and {labels.dtype} {list(labels.shape)}")]
    if len(speakers) > 1 and not (speakers[1:] > speakers[:-1]).all():
        return [(os.path.join(directory, LABEL_SPEAKERS_NAME), "speakers are not sorted and unique")]
    return []


__all__ = ["BANK_CHECKS", "BankCheck", "BankFiles", "Issue", "PAYLOAD_CHECKS", "PayloadCheck", "bank_files",
           "bank_issues", "label_issues", "read_bank"]
