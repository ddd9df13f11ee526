"""Reading a pack's speaker cues (``PACK/cues/``, specified in ``schemas/cues.py``): one ``CueBank`` per cue,
and the speaker labels.  numpy only.

A bank's index (lookup keys, entries, item rows) is loaded at open as numpy columns; ``data.npy`` is mapped
read-only on first ``read``, and the mapping is not pickled, so DataLoader workers map it themselves.  Opening
checks the structure (``schemas.cuecheck``: sorted keys, entries and payloads in bounds); ``speechpack validate``
runs the same checks and hashes every file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from speechpack.loader.tse.cues.representations import MODULES
from speechpack.schemas.cuecheck import BankFiles, Issue, bank_files, label_issues, read_bank
from speechpack.schemas.cues import (
    CUES_DIR,
    CUES_YAML,
    DATA_NAME,
    ENTRIES_NAME,
    ENTRY_UTT_IDS_NAME,
    ITEMS_NAME,
    KEYWORDS_NAME,
    LABEL_SPEAKERS_NAME,
    LABEL_VALUES_NAME,
    LABELS_DIR,
    LOOKUP_COUNT_NAME,
    LOOKUP_FIRST_NAME,
    LOOKUP_KEYS_NAME,
    VALUES_NAME,
    WORDS_NAME,
    CuesConfig,
    CueSpec,
)
from speechpack.schemas.errors import ManifestError, PackFormatError
from speechpack.schemas.format import Manifest
from speechpack.schemas.yaml_document import parse_yaml


def _find(sorted_keys: np.ndarray, key: str) -> int:
    """Row of ``key`` in a sorted ``|S`` array, or -1."""
    encoded = key.encode("utf-8")
    row = int(np.searchsorted(sorted_keys, encoded))
    return row if row < len(sorted_keys) and sorted_keys[row] == encoded else -1


class CueBank:
    """One cue's bank: ``find(key)`` gives the entry rows of a lookup key (in the resource's list order),
    ``entry_item(entry)`` the item an entry points to, and ``read(item)`` the item's data.

    ``read`` returns, per ``representation`` (its module in ``loader.tse.cues.representations`` reads it):
    ``waveform`` float32 ``[C, T]`` at ``sample_rate`` (the pack's);
    ``spk_embedding`` float32 ``[D]``; ``raw_video`` ``(uint8 [T, H, W, C], fps)``; ``muse_frontend``
    ``(float32 array, duration_sec)``; ``fields`` ``({name: float32 0-d or 1-D array}, duration_sec or None)``
    with only the fields the item has; ``dae_keyword_phoneme`` ``([int64 phoneme ids per word], int64
    kw_candidate)``.  Arrays are copies: the mapping is never handed out.
    """

    def __init__(self, directory: str, spec: CueSpec, files: BankFiles, sample_rate: int):
        self.directory = directory
        self.name = spec.name
        self.spec = spec
        self.representation = spec.representation
        #: Hz of ``waveform`` items (the pack's rate); None for the other representations.
        self.sample_rate = sample_rate if self.representation == "waveform" else None
        #: The field names of a ``fields`` bank (sorted); empty otherwise.
        self.fields: tuple[str, ...] = tuple(files.meta.get("fields", ()))
        arrays = files.arrays
        self.keys = arrays[LOOKUP_KEYS_NAME]
        self._first = arrays[LOOKUP_FIRST_NAME]
        self._count = arrays[LOOKUP_COUNT_NAME]
        self._entries = arrays[ENTRIES_NAME]
        self._utt_ids = arrays[ENTRY_UTT_IDS_NAME]
        items = arrays[ITEMS_NAME]
        self._items = {name: np.ascontiguousarray(items[name]) for name in items.dtype.names}
        #: ``words.npy``, ``keywords.npy`` (dae_keyword_phoneme) and ``values.npy`` (fields); None otherwise.
        self.words = arrays.get(WORDS_NAME)
        self.keywords = arrays.get(KEYWORDS_NAME)
        self.values = arrays.get(VALUES_NAME)
        self._data: np.ndarray | None = None

    def __repr__(self) -> str:
        return (f"CueBank({self.name!r}, {self.representation}, keys={len(self.keys)}, entries={len(self._entries)}, "
                f"items={self.num_items})")

    def __getstate__(self) -> dict:
        """Pickling (DataLoader workers under spawn) carries the index, never the mapping."""
        return {**self.__dict__, "_data": None}

    @property
    def num_items(self) -> int:
        return len(next(iter(self._items.values())))

    def find(self, key: str) -> range:
        """The entry rows of lookup ``key``; empty when the resource has no such key."""
        row = _find(self.keys, key)
        if row < 0:
            return range(0)
        first = int(self._first[row])
        return range(first, first + int(self._count[row]))

    def entry_item(self, entry: int) -> int:
        return int(self._entries[entry])

    def entry_utt_id(self, entry: int) -> str:
        return self._utt_ids[entry].decode("utf-8")

    def data(self) -> np.ndarray:
        """``data.npy``, mapped read-only on first use (a plain ndarray view; the mapping stays alive with it)."""
        if self._data is None:
            path = os.path.join(self.directory, DATA_NAME)
            try:
                self._data = np.load(path, mmap_mode="r", allow_pickle=False).view(np.ndarray)
            except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError...
                raise PackFormatError(f"{path}: cannot map cue data ({err})") from None
        return self._data

    def read(self, item: int):
        """Item ``item`` in WeSep's resource shape (see the module docstring).  A copy, except raw video: its frames
        are a read-only view of the mapped bank, because a clip is large and a training chunk needs a few frames
        of it (copying whole clips was a quarter of a video batch's time); copy what you keep."""
        if not 0 <= item < self.num_items:
            raise IndexError(f"cue {self.name!r} has {self.num_items} items; asked for {item}")
        return MODULES[self.representation].read(self, item, self.data())

    def field(self, name: str, item: int):
        """Column ``name`` of ``items.npy`` at ``item`` (the representation modules read through it)."""
        return self._items[name][item]


class SpeakerLabels(Mapping):
    """``labels.speaker_label`` of a pack: speaker id -> class index, held as two numpy arrays."""

    def __init__(self, speakers: np.ndarray, labels: np.ndarray):
        self._speakers = speakers
        self._labels = labels

    def __getitem__(self, speaker: str) -> int:
        row = _find(self._speakers, speaker)
        if row < 0:
            raise KeyError(f"speaker {speaker!r} has no speaker label in this pack")
        return int(self._labels[row])

    def __len__(self) -> int:
        return len(self._speakers)

    def __iter__(self):
        return (s.decode("utf-8") for s in self._speakers)


@dataclass(frozen=True)
class PackCues:
    """What ``open_cues`` finds: the parsed cues.yaml, a bank per cue, and the speaker labels."""

    config: CuesConfig | None
    banks: dict[str, CueBank]
    labels: SpeakerLabels | None


def read_cues_config(path: str) -> CuesConfig:
    """Parse the ``cues.yaml`` a pack keeps."""
    yaml_path = os.path.join(path, CUES_DIR, CUES_YAML)
    try:
        with open(yaml_path, "rb") as fp:
            return CuesConfig.from_dict(parse_yaml(fp.read(), yaml_path, error=PackFormatError), where=yaml_path)
    except (OSError, ManifestError) as err:
        raise PackFormatError(f"{yaml_path}: cannot read the pack's cues.yaml ({err})") from None


def _raise(issues: list[Issue]) -> None:
    shown = "; ".join(f"{file}: {message}" for file, message in issues[:5])
    raise PackFormatError(f"{shown}{f' (and {len(issues) - 5} more)' if len(issues) > 5 else ''} "
                          f"(speechpack validate reports everything)")


def open_cues(path: str, manifest: Manifest) -> PackCues:
    """Open ``PACK/cues/`` (nothing when the manifest lists no cues), checking every file's size against the
    manifest and each bank's structure; raise ``PackFormatError`` naming the file."""
    if not manifest.cues:
        return PackCues(config=None, banks={}, labels=None)
    root = os.path.join(path, CUES_DIR)
    issues = []
    for name, entry in sorted(manifest.cues.items()):
        file_path = os.path.join(root, *name.split("/"))
        if not os.path.isfile(file_path) or os.path.getsize(file_path) != entry.size:
            issues.append((file_path, "missing, or its size differs from dataset.json"))
    if issues:
        _raise(issues)
    config = read_cues_config(path)
    banks = {}
    for spec in config.cues:
        directory = os.path.join(root, spec.name)
        unlisted = [f for f in bank_files(spec.representation) if f"{spec.name}/{f}" not in manifest.cues]
        if unlisted:
            _raise([(directory, f"{', '.join(unlisted)} not listed in dataset.json")])
        files, found = read_bank(directory, spec, manifest.sample_rate)
        if found:
            _raise(found)
        banks[spec.name] = CueBank(directory, spec, files, manifest.sample_rate)
    labels = None
    if config.speaker_label_resource is not None:
        directory = os.path.join(root, LABELS_DIR)
        try:
            speakers, values = (np.load(os.path.join(directory, name), allow_pickle=False)
                                for name in (LABEL_SPEAKERS_NAME, LABEL_VALUES_NAME))
        except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError...
            raise PackFormatError(f"{directory}: cannot read the speaker labels ({err})") from None
        found = label_issues(directory, speakers, values)
        if found:
            _raise(found)
        labels = SpeakerLabels(speakers, values)
    return PackCues(config=config, banks=banks, labels=labels)


__all__ = ["CueBank", "PackCues", "SpeakerLabels", "open_cues", "read_cues_config"]
