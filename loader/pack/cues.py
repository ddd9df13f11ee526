"""Reading a pack's speaker cues (``PACK/cues/``: ``cues.yaml`` in ``schemas/cues.py``, the banks in
``schemas/cue_banks.py``): one ``CueBank`` per cue, and the speaker labels.  numpy only (and the block
tools of ``loader.pack.blocks`` and ``media.codecs``, which the pack reader holds already): the pack reader opens
the banks with the pack, so nothing here may pull in a task or a heavy library.

A bank's index (lookup keys, entries, item rows, extra arrays) is loaded at open as numpy columns; ``data.npy`` is
mapped read-only on first ``read``, and the mapping is not pickled, so DataLoader workers map it themselves.
Opening checks the structure (``schemas.cue_banks``: sorted keys, entries and payloads in bounds); ``speechpack
validate`` runs the same checks and hashes every file.

A pack that is not a local directory (a URL: the node cache's copies in training, or objects read in place) is read
through its ``PackFiles`` (:class:`StoredCueFiles`), every cue file verified against its sha256 in ``dataset.json``
before any of its bytes are used: the node cache verifies what it fetches (and checks its copies again when read:
``loader.cache.cached_files``), and objects read in place are hashed here.  Opening reads the index files only
(fetched together); a bank's ``data.npy``, the bulk of it, is fetched when the bank is first read, so cues the
experiment does not use are never fetched, and its header and payload bounds are checked then, before the mapping
is handed out.

What an item *is* differs per representation: :data:`READERS` holds one small read function per row of
``schemas.cue_banks.REPRESENTATION_SPECS`` (a new representation adds its function here; docs/extending.md).  What
a training batch makes of an item (cut to the row's chunk, resampled, selected) is the TSE task's
(``loader/tse/cues/values.py``).

A waveform bank stored with a codec (format 1.4, ``schemas/cue_banks.py``, "Compressed enrollment audio") is read
with the pack streams' block tools (``loader.pack.blocks.BlockTable`` for where each block lies,
``media.codecs.decode_run`` for libsndfile, as ``validate`` decodes a segment): ``read`` decodes the item's blocks
where it runs (the DataLoader's workers), each block's bytes checked against its digest first, so a flipped byte
is a ``CorruptBlock`` naming the bank file, item and block, never garbage audio; FLAC gives the pcm16 bank's int16
bit for bit.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable

import numpy as np

from speechpack.loader.pack.blocks import BlockTable, CorruptBlock, check_digest
from speechpack.loader.pack.files import DirectoryPackFiles, PackFiles, stream_from_bytes
from speechpack.media.codecs import decode_run
from speechpack.schemas.constants import AUDIO_FULL_SCALE, CODEC_PCM16, MANIFEST_NAME
from speechpack.schemas.cue_banks import (
    BLOCKS_NAME,
    DATA_NAME,
    DIGESTS_NAME,
    ENTRIES_NAME,
    ENTRY_UTT_IDS_NAME,
    ITEMS_NAME,
    KEYWORDS_NAME,
    LOOKUP_COUNT_NAME,
    LOOKUP_FIRST_NAME,
    LOOKUP_KEYS_NAME,
    SOURCES_NAME,
    VALUES_NAME,
    WORDS_NAME,
    BankFiles,
    Issue,
    bank_codec,
    npy_header_of,
    payload_issues,
    read_bank,
)
from speechpack.schemas.cues import (
    CUES_DIR,
    CUES_YAML,
    LABEL_SPEAKERS_NAME,
    LABEL_VALUES_NAME,
    LABELS_DIR,
    CuesConfig,
    CueSpec,
    label_issues,
)
from speechpack.schemas.errors import InternalError, ManifestError, NpyHeaderError, PackFormatError
from speechpack.schemas.format import FileEntry, Manifest
from speechpack.schemas.npyfile import NpyHeader
from speechpack.schemas.yaml_document import parse_yaml


def _find(sorted_keys: np.ndarray, key: str) -> int:
    """Row of ``key`` in a sorted ``|S`` array, or -1."""
    encoded = key.encode("utf-8")
    row = int(np.searchsorted(sorted_keys, encoded))
    return row if row < len(sorted_keys) and sorted_keys[row] == encoded else -1


class CueBank:
    """One cue's bank: ``find(key)`` gives the entry rows of a lookup key (in the resource's list order),
    ``entry_item(entry)`` the item an entry points to, and ``read(item)`` the item's data.

    ``read`` returns what the representation's read function (:data:`READERS`) makes of the item: ``waveform``
    float32 ``[C, T]`` at ``sample_rate`` (the pack's); ``spk_embedding`` float32 ``[D]``; ``raw_video`` ``(uint8
    [T, H, W, C], fps)``; ``muse_frontend`` ``(float32 array, duration_sec)``; ``fields`` ``({name: float32 0-d or
    1-D array}, duration_sec or None)`` with only the fields the item has; ``dae_keyword_phoneme`` ``([int64
    phoneme ids per word], int64 kw_candidate)``.  Arrays are copies (raw video aside, see ``read``): the mapping
    is never handed out.
    """

    def __init__(self, directory: str, spec: CueSpec, files: BankFiles, sample_rate: int,
                 stored: "StoredCueFiles | None" = None):
        #: Where the bank is, as messages name it (a directory, or the bank's URL prefix on a store).
        self.directory = directory
        self.name = spec.name
        self.spec = spec
        self.representation = spec.representation
        row = spec.representation_spec
        #: Hz of the items of a representation stored at the pack's rate (``at_pack_rate``); None otherwise.
        self.sample_rate = sample_rate if row.at_pack_rate else None
        #: ``meta.json`` as written (what a read function may need besides the arrays).
        self.meta = files.meta
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
        #: The row's extra arrays by file name (``words.npy``, ``keywords.npy``, ``values.npy``...).
        self.extra: dict[str, np.ndarray] = {array.name: arrays[array.name] for array in row.extra_arrays}
        self._data: np.ndarray | None = None
        #: The codec of a compressed waveform bank (``flac``, ``opus``), else ``pcm16``; then ``blocks`` says where
        #: each item's blocks lie in ``data.npy`` and ``digests`` is each block's digest.
        self.codec = bank_codec(files.meta) or CODEC_PCM16
        self.blocks: BlockTable | None = None
        self.digests: np.ndarray | None = None
        if self.codec != CODEC_PCM16:
            self.blocks = BlockTable.of(self.codec, int(files.meta["block_frames"]), self._items["offset"],
                                        self._items["length"], arrays[BLOCKS_NAME],
                                        os.path.join(directory, BLOCKS_NAME))
            self.digests = arrays[DIGESTS_NAME]
        #: A bank not in a local directory: its files, and its index as opened (``data.npy`` is checked against it
        #: when it is mapped).
        self._stored = stored
        self._opened = files if stored is not None else None

    def __repr__(self) -> str:
        return (f"CueBank({self.name!r}, {self.representation}, keys={len(self.keys)}, entries={len(self._entries)}, "
                f"items={self.num_items})")

    def __getstate__(self) -> dict:
        """Pickling (DataLoader workers under spawn) carries the index, never the mapping."""
        return {**self.__dict__, "_data": None}

    @property
    def num_items(self) -> int:
        return len(next(iter(self._items.values())))

    def entries_of(self, lookups: np.ndarray) -> np.ndarray:
        """How many entries each of ``lookups`` (encoded lookup keys, ``|S``) has; 0 for a key the resource lacks
        (``speechpack inspect``'s enrollments per speaker)."""
        lookups = np.asarray(lookups)
        if not len(self.keys) or not len(lookups):
            return np.zeros(len(lookups), dtype=np.int64)
        rows = np.minimum(np.searchsorted(self.keys, lookups), len(self.keys) - 1)
        return np.where(self.keys[rows] == lookups, np.asarray(self._count, dtype=np.int64)[rows], 0)

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
        """``data.npy``, mapped read-only on first use (a plain ndarray view; the mapping stays alive with it).  From a
        store: fetched (verified) first, its header and payload bounds checked (module docstring)."""
        if self._data is None and self._stored is not None:
            self._data = self._stored.payload(self.name, self.spec, self._opened)
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
        return reader(self.representation)(self, item, self.data())

    def field(self, name: str, item: int):
        """Column ``name`` of ``items.npy`` at ``item`` (the read functions read through it)."""
        return self._items[name][item]

    def stored_waveform(self, item: int) -> np.ndarray:
        """Item ``item`` of a waveform bank as its stored int16 ``[C, T]``: a view of the mapping (pcm16), or its
        blocks decoded, each checked against its digest first (compressed; module docstring)."""
        if not 0 <= item < self.num_items:
            raise IndexError(f"cue {self.name!r} has {self.num_items} items; asked for {item}")
        data = self.data()
        offset, channels, length = (int(self.field(n, item)) for n in ("offset", "channels", "length"))
        if self.blocks is None:
            return data[offset:offset + channels * length].reshape(channels, length)
        table, rate = self.blocks, self.sample_rate
        where = f"{os.path.join(self.directory, DATA_NAME)} item {item} (cue {self.name!r})"
        pieces = []
        for index, block in enumerate(range(int(table.first[item]), int(table.first[item + 1]))):
            start, size = int(table.start[block]), int(table.size[block])
            piece = data[start:start + size]
            if not check_digest(piece, self.digests[block]):
                raise CorruptBlock(f"bytes differ from their digest ({DIGESTS_NAME} row {block})", index, where)
            pieces.append(piece)
        try:
            return decode_run(table.codec, pieces, rate, channels, length, table.block_frames)
        except CorruptBlock as err:
            raise err.at(where) from None


# ------------------------------------------------------------------------------------------------ read functions
# One per representation: ``(bank, item, mapped data.npy) -> the item``, in WeSep's resource shape; the layouts are
# specified in schemas/cue_banks.py.

def read_waveform(bank: CueBank, item: int, data: np.ndarray) -> np.ndarray:
    """The item's audio, float32 ``[C, T]`` at the bank's rate (a copy; a compressed bank's blocks decoded)."""
    factor = np.float32(float(bank.field("scale", item)) / AUDIO_FULL_SCALE)
    return bank.stored_waveform(item).astype(np.float32) * factor


def read_spk_embedding(bank: CueBank, item: int, data: np.ndarray) -> np.ndarray:
    """A row of ``data.npy`` ``[items, D]``, copied."""
    return np.array(data[int(bank.field("row", item))])


def read_raw_video(bank: CueBank, item: int, data: np.ndarray) -> tuple[np.ndarray, float]:
    """``(frames [T, H, W, C], fps)``: the frames are a read-only view of the mapped bank."""
    shape = tuple(int(bank.field(n, item)) for n in ("frames", "height", "width", "channels"))
    offset = int(bank.field("offset", item))
    return data[offset:offset + math.prod(shape)].reshape(shape), float(bank.field("fps", item))


def read_muse_frontend(bank: CueBank, item: int, data: np.ndarray) -> tuple[np.ndarray, float]:
    """``(features, duration_sec)`` (a copy)."""
    shape = tuple(int(d) for d in bank.field("shape", item)[:int(bank.field("ndim", item))])
    offset = int(bank.field("offset", item))
    return (np.array(data[offset:offset + math.prod(shape)].reshape(shape)), float(bank.field("duration_sec", item)))


def read_fields(bank: CueBank, item: int, data: np.ndarray) -> tuple[dict[str, np.ndarray], float | None]:
    """``({name: float32 0-d or 1-D array}, duration_sec or None)`` with only the fields the item has."""
    fields = {}
    for name, value in zip(bank.fields, bank.extra[VALUES_NAME][item]):
        if value["present"]:
            offset, length = int(value["offset"]), int(value["length"])
            fields[name] = np.array(data[offset]) if length == -1 else np.array(data[offset:offset + length])
    duration = float(bank.field("duration_sec", item))
    return fields, None if math.isnan(duration) else duration


def read_dae_keyword_phoneme(bank: CueBank, item: int, data: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """``([int64 phoneme ids per word], int64 kw_candidate)`` (copies)."""
    word_first, word_count, kw_first, kw_count = (int(bank.field(n, item)) for n in
                                                  ("word_first", "word_count", "kw_first", "kw_count"))
    words = bank.extra[WORDS_NAME][word_first:word_first + word_count]
    return ([np.array(data[int(w["phn_offset"]):int(w["phn_offset"]) + int(w["phn_length"])]) for w in words],
            np.array(bank.extra[KEYWORDS_NAME][kw_first:kw_first + kw_count]))


#: ``(bank, item, data) -> the item``.
ReadFunction = Callable[[CueBank, int, np.ndarray], Any]
#: The read function of each representation (a name of ``schemas.cue_banks.REPRESENTATION_SPECS``).
READERS: dict[str, ReadFunction] = {
    "waveform": read_waveform,
    "spk_embedding": read_spk_embedding,
    "raw_video": read_raw_video,
    "muse_frontend": read_muse_frontend,
    "fields": read_fields,
    "dae_keyword_phoneme": read_dae_keyword_phoneme,
}


def reader(representation: str) -> ReadFunction:
    """The read function of ``representation``, looked up when a bank is read (so a test may add one)."""
    try:
        return READERS[representation]
    except KeyError:
        raise InternalError(f"no read function for cue representation {representation!r} "
                            f"(loader/pack/cues.py READERS; docs/extending.md)") from None


# ------------------------------------------------------------------------------------------------ labels and opening

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


def read_cues_config(path: str, read: Callable[[], bytes] | None = None) -> CuesConfig:
    """Parse the ``cues.yaml`` a pack keeps: under the pack directory ``path``, or (``read``) the bytes ``read()``
    gives, ``path`` then naming the pack in messages."""
    yaml_path = os.path.join(path, CUES_DIR, CUES_YAML)
    try:
        if read is None:
            with open(yaml_path, "rb") as fp:
                data = fp.read()
        else:
            data = read()
        return CuesConfig.from_dict(parse_yaml(data, yaml_path, error=PackFormatError), where=yaml_path)
    except (OSError, ManifestError) as err:
        raise PackFormatError(f"{yaml_path}: cannot read the pack's cues.yaml ({err})") from None


#: Bytes read for a ``data.npy`` header: numpy refuses headers past 10000 bytes, so this holds any it reads.
NPY_HEAD_BYTES = 16 << 10


class StoredCueFiles:
    """The cue files of a pack that is not a local directory, read through its ``PackFiles`` (module docstring):
    every file verified against its ``dataset.json`` entry before its bytes are used, by the node cache (``files``
    whose ``hashes_checked`` is set) or here.  A ``BankSource`` for one bank (``bank``).  Pickled with the pack (its
    ``PackFiles`` is), holding no bytes."""

    def __init__(self, files: PackFiles, entries: Mapping[str, FileEntry]):
        self.files = files
        self.entries = dict(entries)  # dataset.json's ``cues`` files: name under cues/ -> entry

    def where(self, name: str) -> str:
        return self.files.where(f"{CUES_DIR}/{name}")

    def read(self, name: str) -> bytes:
        """Cue file ``name`` whole, verified; ``PackFormatError`` naming it when it is absent, unlisted (nothing to
        verify it by) or differs."""
        if name not in self.entries:
            raise PackFormatError(f"{self.where(name)}: not listed in {MANIFEST_NAME}, so it cannot be verified")
        try:
            data = self.files.read_bytes(f"{CUES_DIR}/{name}")
        except FileNotFoundError:
            raise PackFormatError(f"{self.where(name)}: missing ({MANIFEST_NAME} lists it)") from None
        if not self.files.hashes_checked:
            self._check(name, data)
        return data

    def _check(self, name: str, data: bytes) -> None:
        entry = self.entries[name]
        if len(data) != entry.size:
            raise PackFormatError(f"{self.where(name)}: {len(data)} bytes, {MANIFEST_NAME} records {entry.size}")
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry.sha256:
            raise PackFormatError(f"{self.where(name)}: sha256 {digest} does not match {MANIFEST_NAME} "
                                  f"({entry.sha256}): the object changed after the pack was written (validate it: "
                                  f"speechpack validate {self.files.location})")

    def bank(self, cue: str, names: tuple[str, ...]) -> "_StoredBank":
        """Bank ``cue``'s files ``names`` (its index: every file but ``data.npy``), read and verified now, so that a
        store's failure is raised as it is, never taken for a bank problem."""
        return _StoredBank({name: self.read(f"{cue}/{name}") for name in names})

    def payload(self, cue: str, spec: CueSpec, opened: BankFiles) -> np.ndarray:
        """Bank ``cue``'s ``data.npy`` as an array: fetched and verified, its header and every item's payload bounds
        checked against the bank ``opened`` (``schemas.cue_banks.payload_issues``), then mapped read-only (the node
        cache's copy, pinned while the array lives) or viewed in the verified bytes."""
        name = f"{cue}/{DATA_NAME}"
        rel, where = f"{CUES_DIR}/{name}", self.where(name)
        size = self.entries[name].size
        data = None
        try:
            if self.files.hashes_checked:  # the cache's verified copy: the header from its first bytes
                head = self.files.read_range(rel, 0, min(size, NPY_HEAD_BYTES))
            else:
                head = data = self.read(name)
            header = npy_header_of(head, where)
        except FileNotFoundError:
            raise PackFormatError(f"{where}: missing ({MANIFEST_NAME} lists it)") from None
        except NpyHeaderError as err:
            raise PackFormatError(f"{where}: cannot read .npy ({err.reason})") from None
        found = payload_issues(self.where(cue), spec, opened, header, size)
        if found:
            _raise(found)
        row_shape = tuple(header.shape[1:])
        dtype = spec.representation_spec.payload_dtype_of(opened.meta).str
        if data is None:
            mapped = self.files.stream(rel, dtype, row_shape)
        else:
            mapped = stream_from_bytes(where, data, dtype, row_shape)
        array = mapped.array
        array.flags.writeable = False
        return array


class _StoredBank:
    """One bank's index files, verified (``StoredCueFiles.bank``), as a ``schemas.cue_banks.BankSource``."""

    def __init__(self, data: dict[str, bytes]):
        self.data = data

    def open(self, name: str) -> BinaryIO:
        if name not in self.data:  # a file the bank's meta.json needs that dataset.json does not list
            raise FileNotFoundError(f"{name}: not listed in {MANIFEST_NAME}")
        return io.BytesIO(self.data[name])

    def npy_header(self, name: str) -> tuple[NpyHeader, int]:
        raise InternalError("a stored bank is opened without its data.npy (StoredCueFiles.payload checks it)")


def _raise(issues: list[Issue]) -> None:
    shown = "; ".join(f"{file}: {message}" for file, message in issues[:5])
    raise PackFormatError(f"{shown}{f' (and {len(issues) - 5} more)' if len(issues) > 5 else ''} "
                          f"(speechpack validate reports everything)")


def open_cues(path: str | PackFiles, manifest: Manifest) -> PackCues:
    """Open ``PACK/cues/`` (nothing when the manifest lists no cues) of the pack directory ``path`` or the pack a
    ``PackFiles`` reaches, checking every file against the manifest (a directory's by size; elsewhere each file as
    it is read, by its sha256: module docstring) and each bank's structure; raise ``PackFormatError`` naming the
    file."""
    if not manifest.cues:
        return PackCues(config=None, banks={}, labels=None)
    if isinstance(path, DirectoryPackFiles):
        path = path.root
    if isinstance(path, PackFiles):
        return _open_stored_cues(path, manifest)
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
        unlisted = [f for f in spec.representation_spec.files if f"{spec.name}/{f}" not in manifest.cues]
        if unlisted:
            _raise([(directory, f"{', '.join(unlisted)} not listed in dataset.json")])
        files, found = read_bank(directory, spec, manifest.sample_rate)
        if found:
            _raise(found)
        _check_listed(directory, spec, files, manifest)
        banks[spec.name] = CueBank(directory, spec, files, manifest.sample_rate)
    labels = None
    if config.speaker_label_resource is not None:
        directory = os.path.join(root, LABELS_DIR)
        labels = _speaker_labels(directory, lambda name: os.path.join(directory, name))
    return PackCues(config=config, banks=banks, labels=labels)


def _check_listed(directory: str, spec: CueSpec, files: BankFiles, manifest: Manifest) -> None:
    """Every file the bank's ``meta.json`` makes part of it (a compressed bank's blocks and digests) is listed."""
    unlisted = [f for f in spec.representation_spec.files_of(files.meta) if f"{spec.name}/{f}" not in manifest.cues]
    if unlisted:
        _raise([(directory, f"{', '.join(unlisted)} not listed in dataset.json")])


def _speaker_labels(directory: str, source: Callable[[str], Any]) -> SpeakerLabels:
    """The speaker labels of ``directory`` (``np.load`` of ``source(name)``: a path, or a file object of bytes
    read from a store), checked."""
    try:
        speakers, values = (np.load(source(name), allow_pickle=False)
                            for name in (LABEL_SPEAKERS_NAME, LABEL_VALUES_NAME))
    except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError...
        raise PackFormatError(f"{directory}: cannot read the speaker labels ({err})") from None
    found = label_issues(directory, speakers, values)
    if found:
        _raise(found)
    return SpeakerLabels(speakers, values)


#: Bank files ``open_cues`` does not read from a store: the payload (fetched when first read) and ``sources.json``
#: (for people and ``inspect``; it can be large).
_NOT_OPENED = (DATA_NAME, SOURCES_NAME)


def _open_stored_cues(files: PackFiles, manifest: Manifest) -> PackCues:
    """``open_cues`` of a pack that is not a local directory: the index files fetched together, each verified as it
    is read; ``data.npy`` left for the first read (``StoredCueFiles.payload``)."""
    stored = StoredCueFiles(files, manifest.cues)
    try:
        files.prefetch([f"{CUES_DIR}/{name}" for name in sorted(manifest.cues)
                        if name.rsplit("/", 1)[-1] not in _NOT_OPENED])
    except FileNotFoundError:
        pass  # an absent object is named by the read below
    config_bytes = stored.read(CUES_YAML)
    config = read_cues_config(files.location, lambda: config_bytes)
    banks = {}
    for spec in config.cues:
        directory = stored.where(spec.name)
        unlisted = [f for f in spec.representation_spec.files if f"{spec.name}/{f}" not in manifest.cues]
        if unlisted:
            _raise([(directory, f"{', '.join(unlisted)} not listed in dataset.json")])
        row = spec.representation_spec
        index = stored.bank(spec.name, tuple(f for f in row.files + tuple(a.name for a in row.codec_arrays)
                                             if f not in _NOT_OPENED and (f in row.files
                                                                          or f"{spec.name}/{f}" in manifest.cues)))
        bank_files, found = read_bank(directory, spec, manifest.sample_rate, index, with_data=False)
        if found:
            _raise(found)
        _check_listed(directory, spec, bank_files, manifest)
        banks[spec.name] = CueBank(directory, spec, bank_files, manifest.sample_rate, stored)
    labels = None
    if config.speaker_label_resource is not None:
        raw = {name: stored.read(f"{LABELS_DIR}/{name}") for name in (LABEL_SPEAKERS_NAME, LABEL_VALUES_NAME)}
        labels = _speaker_labels(stored.where(LABELS_DIR), lambda name: io.BytesIO(raw[name]))
    return PackCues(config=config, banks=banks, labels=labels)


__all__ = ["READERS", "CueBank", "PackCues", "ReadFunction", "SpeakerLabels", "StoredCueFiles", "open_cues",
           "read_cues_config", "reader"]
