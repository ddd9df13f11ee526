"""How a pack stores one speaker cue (a *cue bank*), and the cue representations, one row each.

A cue's representation (``cues.yaml``'s ``type``/``format`` pair, ``schemas/cues.py``) fixes what its bank holds
beyond the lookup structure every bank shares.  :data:`REPRESENTATION_SPECS` has one :class:`RepresentationSpec`
row per representation, as ``schemas/kinds.py``'s ``KIND_SPECS`` has one per pack kind: the (type, format) pair,
the cues that may use it, the dtypes of ``items.npy`` and ``data.npy``, its extra files, whether its resource is
dict-valued, and the check of its payload bounds.  ``cues.yaml`` parsing, the writer (``packer/cues/``), the bank
checks (below) and the reader (``loader/pack/cues.py``) read the row instead of branching on the representation,
so a new representation is a row here, a writer and a read function (docs/extending.md, "Adding a cue
representation").

A bank is one directory ``PACK/cues/<cue>/``::

    meta.json          {"type", "format", "keys", "entries", "items", "resource": {"path", "sha256"},
                        "sample_rate"? (at_pack_rate rows), "fields"? (fields: the field names, sorted),
                        "codec"?, "block_frames"?, "digests"? (compressed waveform banks, below)}
    lookup_keys.npy    |S<n>  the resource's lookup keys, sorted (UTF-8 bytes), unique
    lookup_first.npy   <i8    per key: its first row of entries
    lookup_count.npy   <i8    per key: its number of entries (1 for dict-valued resources)
    entries.npy        <i8    per entry: the bank item it points to, in the resource's list order
    entry_utt_ids.npy  |S<n>  per entry: its utt_id ("" when the resource gives none)
    items.npy          per bank item, the row's ``item_dtype``
    data.npy           the payload, of the row's ``payload_dtype``
    sources.json       {"items": [{"path": ...}, ...]}: per bank item, the file it was read from (for
                       dae_keyword_phoneme: the resource JSON, plus the item's "words" and "normalized_text",
                       which no array keeps)

plus the row's ``extra_arrays``: for ``dae_keyword_phoneme``, ``words.npy`` (per word: ``phn_offset``,
``phn_length`` into ``data.npy``) and ``keywords.npy`` (``<i8`` word indices of ``kw_candidate``, items point into
it); for ``fields``, ``values.npy`` (per item and field, ``FIELD_VALUE_DTYPE``: where the field's values are in
``data.npy``).  Items are deduplicated: a file used by many lookup keys is stored once.  Nothing in a pack is
pickled: spatial resources that are pickled dicts are unpickled at build time only with ``--allow-pickle`` and
stored as plain arrays.

Bank invariants (a writer MUST produce them, ``speechpack validate`` checks them): lookup keys strictly increase;
the entries of key ``k`` are rows ``lookup_first[k] : lookup_first[k] + lookup_count[k]``, keys' entries stored in
key order (``lookup_first`` is the running sum of ``lookup_count``, every count at least 1); every entry names an
item below ``meta.items``; every item's payload lies inside ``data.npy``.  Items are numbered in the order they are
first reached walking the sorted keys and their entries, so equal resources give byte-identical banks.

**Compressed enrollment audio (format 1.4).**  A ``waveform`` bank (the only row whose ``compressible`` is set)
may store its audio as blocks, exactly as docs/format.md's "Compressed audio streams" stores a pack's audio
stream.  Then ``meta.json`` carries three more keys (all three or none; none = pcm16, every older bank):
``"codec"`` (``"flac"`` or ``"opus"``), ``"block_frames"`` (int > 0, frames per channel in each block) and
``"digests"`` (``"blake2b-128"``); ``data.npy`` is 1-D ``|u1``, the items' blocks back to back in item order; an
item's ``offset`` is the **byte** offset of its first block; and the bank has two more files::

    blocks.npy         <i8    every block's byte size, items in item order: item i owns the next
                              ceil(length_i / block_frames) rows (block b of an item holds its frames
                              [b * block_frames, min((b + 1) * block_frames, length)) of every channel)
    digests.npy        |u1    [blocks, 16]: hashlib.blake2b(block, digest_size=16).digest() of each block, in the
                              order of blocks.npy

Each block is one complete, independently decodable file (a FLAC stream, 16-bit, or an Ogg Opus stream: the
format's "Blocks"), of ``channels`` channels at ``meta.sample_rate``, decoding to exactly its frame count.  Items
are contiguous: item 0 starts at byte 0, item ``i + 1`` where item ``i``'s blocks end, and ``data.npy`` holds
exactly the sum of ``blocks.npy``.  The stored samples of a compressed item are its decoded int16 values (for
flac those of the pcm16 bank, bit for bit), decoding as ``v / 32768 * scale`` as before.  A reader checks a
block's digest before it decodes it.  A bank is compressed when its build or convert chose ``--codec flac|opus``
(the pack is then format 1.4); its ``data.npy`` is still verified whole by its sha256 in ``dataset.json``.

Payloads, per representation (item ``i`` is ``items[i]``):

``waveform``             ``data[offset : offset + channels * length]`` as ``[channels, length]`` int16 at the pack's
                         sample rate (``meta.sample_rate``), decoding as ``v / 32768 * scale``; every channel of the
                         file is kept.  Compressed (``meta.codec``): the item's blocks, decoded (above).
``spk_embedding``        ``data[row]``: float32 ``[D]`` (``data`` is ``[items, D]``; ``[1, D]`` inputs are squeezed).
``raw_video``            uint8 RGB ``[frames, height, width, 3]`` (decoded with PyAV at build time) and its average
                         frame rate ``fps``.
``muse_frontend``        float32 of shape ``shape[:ndim]`` (2 <= ndim <= 4) and the resource's ``duration_sec``.
``fields``               per field ``f`` (``meta.fields[f]``) with ``values[i, f].present``: float32
                         ``data[offset : offset + length]``, or the scalar ``data[offset]`` when ``length`` is -1;
                         ``duration_sec`` is NaN when the resource gives none.
``dae_keyword_phoneme``  the item's words ``words[word_first : word_first + word_count]``, each the phoneme ids
                         ``data[phn_offset : phn_offset + phn_length]`` (int64); its keyword candidates
                         ``keywords[kw_first : kw_first + kw_count]`` (indices into the item's words).

**Checks** (what ``open_pack`` refuses and ``speechpack validate`` reports; each issue names its file): what every
bank shares, once (:func:`bank_issues`); what differs per representation (dtypes, extra files, payload bounds, the
sample rate in ``meta.json``), read from its row.  Vectorised, so a million cue items open fast.  numpy only.
The checks read a bank through a :class:`BankSource` (a directory, or the verified bytes of objects on a store), so
a bank on object storage is checked where it lies; a bank opened without its ``data.npy`` (a store's: the payload
is fetched when first used) has its payload checked when it is mapped (:func:`payload_issues`).
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from typing import BinaryIO, Callable, Protocol

import numpy as np

from speechpack.schemas.constants import COMPRESSED_CODECS, COMPRESSED_DTYPE, DIGEST_ALGORITHM, DIGEST_SIZE
from speechpack.schemas.documents import parse_json
from speechpack.schemas.npyfile import NpyHeader, read_npy_header, read_npy_header_from

#: The files every bank has (``cues/<cue>/``); a row's ``extra_arrays`` add to them.
META_NAME = "meta.json"
LOOKUP_KEYS_NAME = "lookup_keys.npy"
LOOKUP_FIRST_NAME = "lookup_first.npy"
LOOKUP_COUNT_NAME = "lookup_count.npy"
ENTRIES_NAME = "entries.npy"
ENTRY_UTT_IDS_NAME = "entry_utt_ids.npy"
ITEMS_NAME = "items.npy"
DATA_NAME = "data.npy"
SOURCES_NAME = "sources.json"
BANK_FILES = (META_NAME, LOOKUP_KEYS_NAME, LOOKUP_FIRST_NAME, LOOKUP_COUNT_NAME, ENTRIES_NAME, ENTRY_UTT_IDS_NAME,
              ITEMS_NAME, DATA_NAME, SOURCES_NAME)
#: Extra files of two representations (their rows' ``extra_arrays``).
WORDS_NAME = "words.npy"
KEYWORDS_NAME = "keywords.npy"
VALUES_NAME = "values.npy"
#: The files a compressed waveform bank adds (``meta.json`` ``codec``): block sizes and block digests.
BLOCKS_NAME = "blocks.npy"
DIGESTS_NAME = "digests.npy"
#: ``meta.json`` keys of a compressed bank: all of them or none.
CODEC_META_KEYS = ("codec", "block_frames", "digests")

#: Dtype of lookup_first, lookup_count, entries and keywords, and of ``cues/labels/labels.npy``.
INDEX_DTYPE = np.dtype("<i8")
WORD_DTYPE = np.dtype([("phn_offset", "<i8"), ("phn_length", "<i8")])
#: ``length`` -1 marks a scalar field; ``present`` False a field the item's resource lacks.
FIELD_VALUE_DTYPE = np.dtype([("offset", "<i8"), ("length", "<i8"), ("present", "?")])

#: One problem found in a cue file: ``(file path, message)``.
Issue = tuple[str, str]
#: ``(paths by bank file name, meta.json, the loaded .npy arrays, data.npy's shape) -> issues``.
PayloadCheck = Callable[[dict[str, str], dict, dict[str, np.ndarray], tuple[int, ...]], list[Issue]]


def outside(first: np.ndarray, count: np.ndarray, size: int) -> np.ndarray:
    """Rows whose span ``[first, first + count)`` is not inside ``[0, size)`` (float64: no int64 overflow on a
    corrupt value; exact for any real size)."""
    first, count = first.astype(np.float64), count.astype(np.float64)
    return (first < 0) | (count < 0) | (first + count > size)


def flat_size(data_shape: tuple[int, ...]) -> int:
    """Elements of ``data.npy``, whatever its shape."""
    return math.prod(data_shape)


def _check_waveform(at, meta, arrays, data_shape) -> list[Issue]:
    items = arrays[ITEMS_NAME]
    if bank_codec(meta) is not None:
        return _check_blocks(at, meta, arrays, data_shape)
    bad = ((items["channels"] < 1) | (items["length"] < 1) | ~(items["scale"] > 0) | ~np.isfinite(items["scale"])
           | outside(items["offset"], items["channels"].astype(np.float64) * items["length"], flat_size(data_shape)))
    return [(at[ITEMS_NAME], f"{int(bad.sum())} item(s) with a bad shape or scale, or outside data.npy")] if bad.any() \
        else []


def _check_blocks(at, meta, arrays, data_shape) -> list[Issue]:
    """A compressed waveform bank: item shapes, the blocks each item's length needs, their sizes summing to
    ``data.npy``, items contiguous in item order, a digest per block (float64 sums: no overflow on corrupt
    values)."""
    items, sizes, digests = arrays[ITEMS_NAME], arrays[BLOCKS_NAME], arrays[DIGESTS_NAME]
    bad = (items["channels"] < 1) | (items["length"] < 1) | ~(items["scale"] > 0) | ~np.isfinite(items["scale"])
    if bad.any():
        return [(at[ITEMS_NAME], f"{int(bad.sum())} item(s) with a bad shape or scale")]
    counts = np.ceil(items["length"].astype(np.float64) / meta["block_frames"])
    needed = float(counts.sum())
    if needed != len(sizes):
        return [(at[BLOCKS_NAME], f"{len(sizes)} block sizes, the items' lengths need {needed:.0f} "
                                  f"(ceil(length / {meta['block_frames']}) each)")]
    if len(sizes) and int(sizes.min()) <= 0:
        row = int(np.flatnonzero(sizes <= 0)[0])
        return [(at[BLOCKS_NAME], f"row {row}: block of {int(sizes[row])} bytes (a block is a whole encoded file)")]
    total = float(sizes.astype(np.float64).sum())
    if total != flat_size(data_shape):
        return [(at[BLOCKS_NAME], f"the block sizes sum to {total:.0f} bytes, data.npy holds "
                                  f"{flat_size(data_shape)}")]
    before = np.zeros(len(sizes) + 1, dtype=np.float64)
    np.cumsum(sizes.astype(np.float64), out=before[1:])
    first = np.zeros(len(items), dtype=np.int64)
    np.cumsum(counts[:-1].astype(np.int64), out=first[1:])
    wrong = np.flatnonzero(items["offset"].astype(np.float64) != before[first])
    if len(wrong):
        return [(at[ITEMS_NAME], f"item {int(wrong[0])}: offset {int(items['offset'][wrong[0]])}, its blocks start "
                                 f"at byte {before[first[wrong[0]]]:.0f} (items are stored contiguously, in order)")]
    if digests.shape != (len(sizes), DIGEST_SIZE):
        return [(at[DIGESTS_NAME], f"shape {list(digests.shape)}, expected [{len(sizes)}, {DIGEST_SIZE}] (one "
                                   f"digest per block)")]
    return []


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
    bad |= outside(items["offset"], np.prod(dims, axis=0), flat_size(data_shape))
    return [(at[ITEMS_NAME], f"{int(bad.sum())} video(s) with a bad shape or frame rate, or outside data.npy")] \
        if bad.any() else []


def _check_muse_frontend(at, meta, arrays, data_shape) -> list[Issue]:
    items = arrays[ITEMS_NAME]
    ndim, shape, duration = items["ndim"], items["shape"], items["duration_sec"]
    used = np.arange(shape.shape[1])[None, :] < ndim[:, None]
    bad = ((ndim < 2) | (ndim > shape.shape[1]) | (used & (shape < 1)).any(axis=1) | (~used & (shape != 0)).any(axis=1)
           | ~(duration > 0) | ~np.isfinite(duration)
           | outside(items["offset"], np.where(used, shape, 1).astype(np.float64).prod(axis=1),
                     flat_size(data_shape)))
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
            or outside(present["offset"], length, flat_size(data_shape)).any():
        return [(at[VALUES_NAME], "a field's values fall outside data.npy")]
    return []


def _check_dae_keyword_phoneme(at, meta, arrays, data_shape) -> list[Issue]:
    items, words, keywords = arrays[ITEMS_NAME], arrays[WORDS_NAME], arrays[KEYWORDS_NAME]
    issues = []
    if outside(items["word_first"], items["word_count"], len(words)).any():
        issues.append((at[ITEMS_NAME], f"an item's words fall outside the {len(words)} of words.npy"))
    if outside(items["kw_first"], items["kw_count"], len(keywords)).any():
        issues.append((at[ITEMS_NAME], f"an item's keywords fall outside the {len(keywords)} of keywords.npy"))
    if outside(words["phn_offset"], words["phn_length"], flat_size(data_shape)).any():
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


@dataclass(frozen=True)
class BankArray:
    """An extra ``.npy`` file of a bank: its name, its dtype and its number of axes."""

    name: str
    dtype: np.dtype
    ndim: int = 1


@dataclass(frozen=True)
class RepresentationSpec:
    """One cue representation.

    ``type``, ``format``  the pair ``cues.yaml`` names it by (``format`` is its name everywhere else).
    ``cues``              the cues of ``cues.yaml`` that may use it (``audio``, ``visual``, ``spatial``, ``textual``).
    ``item_dtype``        the row of ``items.npy``: one per bank item, where its payload is.
    ``payload_dtype``     the dtype of ``data.npy``.
    ``payload_check``     the bounds of its items (and of its extra arrays) inside ``data.npy``.
    ``extra_arrays``      its files beyond ``BANK_FILES``.
    ``dict_valued``       its resource maps a lookup key to one dict (one entry per key), not to a non-empty list.
    ``at_pack_rate``      its payload is audio stored at the pack's sample rate, which ``meta.json`` records.
    ``codec_arrays``      the files a compressed bank adds (``meta.json`` ``codec``); empty: never compressed.
    """

    type: str
    format: str
    cues: tuple[str, ...]
    item_dtype: np.dtype
    payload_dtype: np.dtype
    payload_check: PayloadCheck
    extra_arrays: tuple[BankArray, ...] = ()
    dict_valued: bool = False
    at_pack_rate: bool = False
    codec_arrays: tuple[BankArray, ...] = ()

    @property
    def name(self) -> str:
        return self.format

    @property
    def files(self) -> tuple[str, ...]:
        """Every file of a pcm16 bank of this representation."""
        return BANK_FILES + tuple(array.name for array in self.extra_arrays)

    def files_of(self, meta: dict | None) -> tuple[str, ...]:
        """Every file of the bank whose ``meta.json`` is ``meta``: a compressed bank's codec arrays too."""
        return self.files + tuple(a.name for a in self.codec_arrays) if is_compressed(meta) else self.files

    def payload_dtype_of(self, meta: dict | None) -> np.dtype:
        """``data.npy``'s dtype in the bank whose ``meta.json`` is ``meta``."""
        return COMPRESSED_DTYPE if is_compressed(meta) else self.payload_dtype


_ROWS = (
    RepresentationSpec(
        "wav", "waveform", cues=("audio",), payload_check=_check_waveform, at_pack_rate=True,
        codec_arrays=(BankArray(BLOCKS_NAME, INDEX_DTYPE), BankArray(DIGESTS_NAME, COMPRESSED_DTYPE, ndim=2)),
        item_dtype=np.dtype([("offset", "<i8"), ("channels", "<i4"), ("length", "<i8"), ("scale", "<f8"),
                             ("orig_sample_rate", "<i4")]),
        payload_dtype=np.dtype("<i2")),  # flat, channel-major; decodes as v / 32768 * scale
    RepresentationSpec(
        "npy", "spk_embedding", cues=("audio",), payload_check=_check_spk_embedding,
        item_dtype=np.dtype([("row", "<i8")]), payload_dtype=np.dtype("<f4")),  # data is [items, D]
    RepresentationSpec(
        "mp4", "raw_video", cues=("visual",), payload_check=_check_raw_video,
        item_dtype=np.dtype([("offset", "<i8"), ("frames", "<i8"), ("height", "<i4"), ("width", "<i4"),
                             ("channels", "<i4"), ("fps", "<f8")]),
        payload_dtype=np.dtype("|u1")),  # flat; item i is data[offset : offset + frames*h*w*c] as [frames, h, w, c]
    RepresentationSpec(
        "npy", "muse_frontend", cues=("visual",), payload_check=_check_muse_frontend,
        item_dtype=np.dtype([("offset", "<i8"), ("ndim", "<i4"), ("shape", "<i8", (4,)), ("duration_sec", "<f8")]),
        payload_dtype=np.dtype("<f4")),  # flat; item i is data[offset : ...].reshape(shape[:ndim])
    RepresentationSpec(
        "npy", "fields", cues=("spatial",), payload_check=_check_fields, dict_valued=True,
        item_dtype=np.dtype([("duration_sec", "<f8")]),  # NaN when the resource gives none
        payload_dtype=np.dtype("<f4"), extra_arrays=(BankArray(VALUES_NAME, FIELD_VALUE_DTYPE, ndim=2),)),
    RepresentationSpec(
        "json", "dae_keyword_phoneme", cues=("textual",), payload_check=_check_dae_keyword_phoneme, dict_valued=True,
        item_dtype=np.dtype([("word_first", "<i8"), ("word_count", "<i8"), ("kw_first", "<i8"), ("kw_count", "<i8")]),
        payload_dtype=INDEX_DTYPE,  # phoneme ids
        extra_arrays=(BankArray(WORDS_NAME, WORD_DTYPE), BankArray(KEYWORDS_NAME, INDEX_DTYPE))),
)
#: The table: representation name (its format) -> its row, in the order messages list them.  Everything reads it
#: when it runs (no copies made at import), so a test can add a toy row (tests/packer/cues/test_extending_cue.py).
REPRESENTATION_SPECS: dict[str, RepresentationSpec] = {row.name: row for row in _ROWS}


def representation_spec(name: str) -> RepresentationSpec:
    """The row of representation ``name``; a ``KeyError`` naming the known ones otherwise."""
    try:
        return REPRESENTATION_SPECS[name]
    except KeyError:
        raise KeyError(f"unknown cue representation {name!r} (known: {', '.join(REPRESENTATION_SPECS)})") from None


def representation_of(type_: str, format_: str) -> RepresentationSpec | None:
    """The row ``cues.yaml``'s ``type``/``format`` pair names, or None."""
    row = REPRESENTATION_SPECS.get(format_)
    return row if row is not None and row.type == type_ else None


def representations_for(cue: str) -> list[RepresentationSpec]:
    """The rows cue ``cue`` may use, in table order."""
    return [row for row in REPRESENTATION_SPECS.values() if cue in row.cues]


def is_compressed(meta: dict | None) -> bool:
    """Whether ``meta.json`` declares compressed audio (any codec key present, checked by :func:`codec_issues`)."""
    return isinstance(meta, dict) and any(key in meta for key in CODEC_META_KEYS)


def bank_codec(meta: dict | None) -> str | None:
    """The codec of a bank's audio (``flac``, ``opus``), or None for pcm16 (and for a bank without audio)."""
    return meta.get("codec") if is_compressed(meta) else None


def codec_issues(path: str, row: "RepresentationSpec", meta: dict) -> list[Issue]:
    """``meta.json``'s codec keys (``path``: its file): all three or none, on a row that can be compressed, of
    the values the format allows."""
    if not is_compressed(meta):
        return []
    if not row.codec_arrays:
        return [(path, f"a {row.name} bank has no codec (only waveform banks store compressed audio), got "
                       f"{', '.join(k for k in CODEC_META_KEYS if k in meta)}")]
    missing = [key for key in CODEC_META_KEYS if key not in meta]
    if missing:
        return [(path, f"a compressed bank declares codec, block_frames and digests; {', '.join(missing)} missing")]
    issues = []
    if meta["codec"] not in COMPRESSED_CODECS:
        issues.append((path, f"codec is {meta['codec']!r}, expected one of {', '.join(COMPRESSED_CODECS)} (absent: "
                             f"pcm16)"))
    frames = meta["block_frames"]
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        issues.append((path, f"block_frames is {frames!r}, expected an integer > 0"))
    if meta["digests"] != DIGEST_ALGORITHM:
        issues.append((path, f"digests is {meta['digests']!r}, expected {DIGEST_ALGORITHM!r}"))
    return issues


class BankedCue(Protocol):
    """What the bank checks read of a cue: its ``cues.yaml`` pair and its row (``schemas.cues.CueSpec`` is one;
    naming the protocol here keeps this module below ``schemas.cues``, which reads the table above)."""

    type: str
    format: str

    @property
    def representation_spec(self) -> RepresentationSpec: ...


@dataclass(frozen=True)
class BankFiles:
    """A bank's small files, loaded, and the header of its ``data.npy`` (``data_shape`` None: not read yet, the
    payload is checked when it is mapped, ``payload_issues``)."""

    meta: dict
    arrays: dict[str, np.ndarray]  # file name -> array, for every .npy but data.npy
    data_shape: tuple[int, ...] | None


class BankSource(Protocol):
    """Where a bank's files are read from, by their names in the bank (``meta.json``, ``data.npy``): a directory
    (:class:`BankDirectory`), or the verified bytes of a pack's objects (the loader's and ``validate``'s readers of a
    store).  Failures are ``OSError`` (or, for a header, ``NpyHeaderError``)."""

    def open(self, name: str) -> BinaryIO:
        """The whole file, open for reading."""

    def npy_header(self, name: str) -> tuple[NpyHeader, int]:
        """A ``.npy`` file's header and the file's size (``data.npy``, whose payload is not read here)."""


class BankDirectory:
    """A bank in a local directory: the files under ``directory``."""

    def __init__(self, directory: str):
        self.directory = directory

    def open(self, name: str) -> BinaryIO:
        return open(os.path.join(self.directory, name), "rb")

    def npy_header(self, name: str) -> tuple[NpyHeader, int]:
        path = os.path.join(self.directory, name)
        return read_npy_header(path), os.path.getsize(path)


def data_header_issues(path: str, spec: BankedCue, header: NpyHeader, size: int,
                       meta: dict | None = None) -> list[Issue]:
    """``data.npy``'s header (of a file of ``size`` bytes) against the payload dtype of the representation (of a
    compressed bank, whose ``meta.json`` is ``meta``: ``|u1``, 1-D)."""
    expected = spec.representation_spec.payload_dtype_of(meta)
    if is_compressed(meta) and len(header.shape) != 1:
        return [(path, f"shape {list(header.shape)}, a compressed bank's data.npy is 1-D (its blocks' bytes)")]
    if header.fortran_order:
        return [(path, "cannot read .npy (Fortran-ordered array)")]
    if header.dtype != expected:
        return [(path, f"dtype {header.dtype.str}, expected {expected.str}")]
    if size != header.expected_size:
        return [(path, f"header promises {header.expected_size} bytes, the file has {size}")]
    return []


def read_bank(directory: str, spec: BankedCue, sample_rate: int, source: BankSource | None = None,
              with_data: bool = True) -> tuple[BankFiles | None, list[Issue]]:
    """Load a bank's index files and check them (``bank_issues``); None when a file cannot be read at all.
    ``directory`` is where messages say the bank is (a path or a URL); ``source`` reads its files (default: the
    directory's).  ``with_data`` False: ``data.npy`` is not read (a pack on a store fetches it when first used), so
    its header and the payload bounds are left to :func:`payload_issues`."""
    source = source if source is not None else BankDirectory(directory)
    issues: list[Issue] = []
    meta_path = os.path.join(directory, META_NAME)
    try:
        with source.open(META_NAME) as fp:
            meta = parse_json(fp.read(), meta_path, error=ValueError)
        if not isinstance(meta, dict):
            raise ValueError(f"expected an object, got {type(meta).__name__}")
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return None, [(meta_path, f"cannot read ({err})")]
    issues += codec_issues(meta_path, spec.representation_spec, meta)
    if issues:
        return None, issues
    arrays = {}
    data_shape: tuple[int, ...] | None = None
    for name in spec.representation_spec.files_of(meta):
        path = os.path.join(directory, name)
        if name in (META_NAME, SOURCES_NAME) or name == DATA_NAME and not with_data:
            continue
        try:
            if name == DATA_NAME:  # its header only: the payload is mapped when read
                header, size = source.npy_header(name)
                data_shape = tuple(header.shape)
                issues += data_header_issues(path, spec, header, size, meta)
            else:
                with source.open(name) as fp:
                    arrays[name] = np.load(fp, allow_pickle=False)
        except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError, TokenError...
            issues.append((path, f"cannot read .npy ({err})"))
    if issues:
        return None, issues
    files = BankFiles(meta=meta, arrays=arrays, data_shape=data_shape)
    return files, bank_issues(directory, spec, files, sample_rate)


def payload_issues(directory: str, spec: BankedCue, files: BankFiles, header: NpyHeader, size: int) -> list[Issue]:
    """What :func:`read_bank` checks of ``data.npy`` when it reads it: its header (of a file of ``size`` bytes) and
    every item's payload inside it; for a bank opened without it (``with_data`` False), run when it is mapped."""
    found = data_header_issues(os.path.join(directory, DATA_NAME), spec, header, size, files.meta)
    if found:
        return found
    at = {name: os.path.join(directory, name) for name in spec.representation_spec.files_of(files.meta)}
    return spec.representation_spec.payload_check(at, files.meta, files.arrays, tuple(header.shape))


def npy_header_of(data: bytes, where: str) -> NpyHeader:
    """The header of the ``.npy`` file whose first bytes are ``data`` (``NpyHeaderError`` naming ``where``)."""
    return read_npy_header_from(io.BytesIO(data), where)


def _dtype_issues(directory: str, spec: BankedCue, arrays: dict[str, np.ndarray]) -> list[Issue]:
    row = spec.representation_spec
    expected = {name: (INDEX_DTYPE, 1) for name in (LOOKUP_FIRST_NAME, LOOKUP_COUNT_NAME, ENTRIES_NAME)}
    expected[ITEMS_NAME] = (row.item_dtype, 1)
    expected.update({array.name: (array.dtype, array.ndim) for array in row.extra_arrays + row.codec_arrays})
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


def bank_issues(directory: str, spec: BankedCue, files: BankFiles, sample_rate: int) -> list[Issue]:
    """The bank invariants of ``schemas/cue_banks.py``: meta, dtypes, sorted unique keys, entry runs, item bounds."""
    row = spec.representation_spec
    meta, arrays = files.meta, files.arrays
    at = {name: os.path.join(directory, name) for name in row.files_of(meta)}
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
    if files.data_shape is not None:
        issues += row.payload_check(at, meta, arrays, files.data_shape)
    return issues


__all__ = ["BLOCKS_NAME", "CODEC_META_KEYS", "DIGESTS_NAME", "FIELD_VALUE_DTYPE", "INDEX_DTYPE", "REPRESENTATION_SPECS",
           "WORD_DTYPE", "BankDirectory", "BankFiles", "BankSource", "Issue", "RepresentationSpec", "bank_codec",
           "codec_issues", "data_header_issues", "is_compressed", "npy_header_of", "outside", "payload_issues",
           "read_bank", "representation_of", "representation_spec", "representations_for"]
