"""Speaker cues: the split's ``cues.yaml`` (WeSep's contract) and how a pack stores the resources it points to.

``cues.yaml`` (one per split) names each cue, its representation and where its resource JSON lives::

    cues:
      audio:   {type: wav, format: waveform, scope: speaker, guaranteed: true,
                policy: {type: random|fixed, key: spk_id|mix_spk_id, resource: data/train/cues/audio.json},
                collate: {default_shape: [...], fill_value: 0.0, emit_present: true}}     # collate optional
      spatial: {type: npy, format: fields, fields: [azimuth, elevation], field_defaults: {distance: 1.0},
                policy: {type: fixed, key: mix_spk_id, resource: ...}}
      textual: {type: json, format: dae_keyword_phoneme, policy: {type: fixed, ...},
                selection: {type: random, word_range: [2, 6]} | {type: fixed}}
      visual:  {type: mp4, format: raw_video | type: npy, format: muse_frontend, policy: {type: fixed, ...}}
    labels:
      speaker_label: {resource: spk2label.json}

Rules (WeSep's ``cues._cue_common``): only the six (type, format) pairs of ``REPRESENTATIONS``; ``scope`` must be
``speaker``; ``policy.type``, ``policy.key`` and ``policy.resource`` are required; audio allows ``random`` and
``fixed``, the others ``fixed`` only (textual randomness comes from ``selection``); ``guaranteed`` defaults to true.

Resource paths: ``policy.resource``, ``labels.speaker_label.resource`` and every ``path`` inside a resource are
used as written when absolute; a relative one is resolved against the build's ``--root`` when given, else against
the current directory (the rule for the audio paths of the list).

In a pack, ``PACK/cues/`` holds ``cues.yaml`` verbatim and one directory per cue (a *cue bank*)::

    cues/<cue>/meta.json          {"type", "format", "keys", "entries", "items", "resource": {"path", "sha256"},
                                   "sample_rate"? (waveform), "fields"? (fields: the field names, sorted)}
    cues/<cue>/lookup_keys.npy    |S<n>  the resource's lookup keys, sorted (UTF-8 bytes), unique
    cues/<cue>/lookup_first.npy   <i8    per key: its first row of entries
    cues/<cue>/lookup_count.npy   <i8    per key: its number of entries (1 for dict-valued resources)
    cues/<cue>/entries.npy        <i8    per entry: the bank item it points to, in the resource's list order
    cues/<cue>/entry_utt_ids.npy  |S<n>  per entry: its utt_id ("" when the resource gives none)
    cues/<cue>/items.npy          per bank item, the representation's ITEM_DTYPES row
    cues/<cue>/data.npy           the representation's payload (PAYLOAD_DTYPES)
    cues/<cue>/sources.json       {"items": [{"path": ...}, ...]}: per bank item, the file it was read from (for
                                  dae_keyword_phoneme: the resource JSON, plus the item's "words" and
                                  "normalized_text", which no array keeps)

plus, for ``dae_keyword_phoneme``, ``words.npy`` (per word: ``phn_offset``, ``phn_length`` into ``data.npy``) and
``keywords.npy`` (``<i8`` word indices of ``kw_candidate``, items point into it); for ``fields``, ``values.npy``
(per item and field, ``FIELD_VALUE_DTYPE``: where the field's values are in ``data.npy``).  Items are deduplicated:
a file used by many lookup keys is stored once.  ``labels.speaker_label`` becomes ``cues/labels/speakers.npy``
(``|S<n>``, sorted) and ``cues/labels/labels.npy`` (``<i8``).  Nothing in a pack is pickled: spatial resources
that are pickled dicts are unpickled at build time only with ``--allow-pickle`` and stored as plain arrays.

Bank invariants (a writer MUST produce them, ``speechpack validate`` checks them): lookup keys strictly increase;
the entries of key ``k`` are rows ``lookup_first[k] : lookup_first[k] + lookup_count[k]``, keys' entries stored in
key order (``lookup_first`` is the running sum of ``lookup_count``, every count at least 1); every entry names an
item below ``meta.items``; every item's payload lies inside ``data.npy``.  Items are numbered in the order they are
first reached walking the sorted keys and their entries, so equal resources give byte-identical banks.

Payloads, per representation (item ``i`` is ``items[i]``):

``waveform``             ``data[offset : offset + channels * length]`` as ``[channels, length]`` int16 at the pack's
                         sample rate (``meta.sample_rate``), decoding as ``v / 32768 * scale``; every channel of the
                         file is kept.
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

The manifest lists every file under ``cues/`` (``dataset.json["cues"]``, see ``schemas/format.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from speechpack.schemas.errors import ManifestError

CUES_DIR = "cues"
CUES_YAML = "cues.yaml"
LABELS_DIR = "labels"

#: The files of a cue bank (``cues/<cue>/``); ``BANK_FILES`` are in every bank, ``EXTRA_BANK_FILES`` per representation.
META_NAME = "meta.json"
LOOKUP_KEYS_NAME = "lookup_keys.npy"
LOOKUP_FIRST_NAME = "lookup_first.npy"
LOOKUP_COUNT_NAME = "lookup_count.npy"
ENTRIES_NAME = "entries.npy"
ENTRY_UTT_IDS_NAME = "entry_utt_ids.npy"
ITEMS_NAME = "items.npy"
DATA_NAME = "data.npy"
SOURCES_NAME = "sources.json"
WORDS_NAME = "words.npy"
KEYWORDS_NAME = "keywords.npy"
VALUES_NAME = "values.npy"
BANK_FILES = (META_NAME, LOOKUP_KEYS_NAME, LOOKUP_FIRST_NAME, LOOKUP_COUNT_NAME, ENTRIES_NAME, ENTRY_UTT_IDS_NAME,
              ITEMS_NAME, DATA_NAME, SOURCES_NAME)
EXTRA_BANK_FILES = {"dae_keyword_phoneme": (WORDS_NAME, KEYWORDS_NAME), "fields": (VALUES_NAME,)}
#: ``cues/labels/``: speaker ids (sorted) and their labels, row for row.
LABEL_SPEAKERS_NAME = "speakers.npy"
LABEL_VALUES_NAME = "labels.npy"

#: (type, format) -> representation name, for the six representations WeSep implements.
REPRESENTATIONS = {
    ("wav", "waveform"): "waveform",
    ("npy", "spk_embedding"): "spk_embedding",
    ("mp4", "raw_video"): "raw_video",
    ("npy", "muse_frontend"): "muse_frontend",
    ("npy", "fields"): "fields",
    ("json", "dae_keyword_phoneme"): "dae_keyword_phoneme",
}
#: Which cue may use which representations, and WeSep's default (type, format) when a cue omits them.
CUE_REPRESENTATIONS = {
    "audio": ({"waveform", "spk_embedding"}, ("wav", "waveform")),
    "visual": ({"raw_video", "muse_frontend"}, ("mp4", "raw_video")),
    "spatial": ({"fields"}, ("npy", "fields")),
    "textual": ({"dae_keyword_phoneme"}, None),
}
POLICY_TYPES = {"audio": ("random", "fixed"), "visual": ("fixed",), "spatial": ("fixed",), "textual": ("fixed",)}
POLICY_KEYS = ("spk_id", "mix_spk_id")
#: Representations whose resource maps a lookup key to one dict (WeSep's spatial and textual resources); the
#: others map it to a non-empty list of entries.
DICT_VALUED = frozenset({"fields", "dae_keyword_phoneme"})
#: The separator of ``mix_spk_id`` lookup keys: ``f"{key}::{speaker}"``.
MIX_SPK_SEPARATOR = "::"

ITEM_DTYPES = {
    "waveform": np.dtype([("offset", "<i8"), ("channels", "<i4"), ("length", "<i8"), ("scale", "<f8"),
                          ("orig_sample_rate", "<i4")]),
    "spk_embedding": np.dtype([("row", "<i8")]),
    "raw_video": np.dtype([("offset", "<i8"), ("frames", "<i8"), ("height", "<i4"), ("width", "<i4"),
                           ("channels", "<i4"), ("fps", "<f8")]),
    "muse_frontend": np.dtype([("offset", "<i8"), ("ndim", "<i4"), ("shape", "<i8", (4,)),
                               ("duration_sec", "<f8")]),
    "fields": np.dtype([("duration_sec", "<f8")]),  # NaN when the resource gives none
    "dae_keyword_phoneme": np.dtype([("word_first", "<i8"), ("word_count", "<i8"), ("kw_first", "<i8"),
                                     ("kw_count", "<i8")]),
}
PAYLOAD_DTYPES = {
    "waveform": np.dtype("<i2"),  # flat, channel-major, at the pack's sample rate; decodes as v / 32768 * scale
    "spk_embedding": np.dtype("<f4"),  # [items, D]
    "raw_video": np.dtype("|u1"),  # flat; item i is data[offset : offset + frames*h*w*c] as [frames, h, w, c]
    "muse_frontend": np.dtype("<f4"),  # flat; item i is data[offset : ...].reshape(shape[:ndim])
    "fields": np.dtype("<f4"),
    "dae_keyword_phoneme": np.dtype("<i8"),  # phoneme ids
}
#: Dtype of lookup_first, lookup_count, entries and keywords, and of ``labels.npy``.
INDEX_DTYPE = np.dtype("<i8")
WORD_DTYPE = np.dtype([("phn_offset", "<i8"), ("phn_length", "<i8")])
#: ``length`` -1 marks a scalar field; ``present`` False a field the item's resource lacks.
FIELD_VALUE_DTYPE = np.dtype([("offset", "<i8"), ("length", "<i8"), ("present", "?")])


def _take(obj: Any, where: str, required: set[str], optional: set[str]) -> dict:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected a mapping, got {type(obj).__name__}")
    missing = sorted(required - set(obj))
    unknown = sorted(set(obj) - required - optional)
    if missing:
        raise ManifestError(f"{where}: missing key(s) {', '.join(missing)}")
    if unknown:
        raise ManifestError(f"{where}: unknown key(s) {', '.join(unknown)}")
    return obj


@dataclass(frozen=True)
class CollateDefaults:
    """A cue's optional ``collate`` block: what a missing cue becomes in a batch."""

    default_shape: tuple[int, ...] | None = None
    fill_value: float | int | None = None
    emit_present: bool | None = None

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> "CollateDefaults":
        if obj is None:
            return cls()
        _take(obj, where, set(), {"default_shape", "fill_value", "emit_present"})
        shape = obj.get("default_shape")
        if shape is not None and (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)):
            raise ManifestError(f"{where}.default_shape: expected a list of non-negative integers, got {shape!r}")
        return cls(default_shape=tuple(shape) if shape is not None else None, fill_value=obj.get("fill_value"),
                   emit_present=obj.get("emit_present"))


@dataclass(frozen=True)
class CueSpec:
    """One entry of ``cues.yaml``'s ``cues`` mapping, checked."""

    name: str
    type: str
    format: str
    guaranteed: bool
    policy_type: str
    policy_key: str
    resource: str
    collate: CollateDefaults = field(default_factory=CollateDefaults)
    fields: tuple[str, ...] = ()
    field_defaults: dict = field(default_factory=dict)
    selection: dict | None = None

    @property
    def representation(self) -> str:
        return REPRESENTATIONS[(self.type, self.format)]

    @classmethod
    def from_dict(cls, name: str, obj: Any, where: str) -> "CueSpec":
        if name not in CUE_REPRESENTATIONS:
            raise ManifestError(f"{where}: unknown cue {name!r} (known: {', '.join(CUE_REPRESENTATIONS)})")
        _take(obj, where, {"policy"}, {"type", "format", "scope", "guaranteed", "collate", "fields",
                                       "field_defaults", "selection"})
        allowed, default = CUE_REPRESENTATIONS[name]
        if ("type" in obj) != ("format" in obj) or (default is None and "type" not in obj):
            raise ManifestError(f"{where}: give both type and format" + ("" if default else f" (cue {name!r} has no "
                                                                                              f"default)"))
        pair = (obj["type"], obj["format"]) if "type" in obj else default
        if not all(isinstance(part, str) for part in pair):
            raise ManifestError(f"{where}: type and format must be strings, got {pair[0]!r} and {pair[1]!r}")
        if pair not in REPRESENTATIONS or REPRESENTATIONS[pair] not in allowed:
            raise ManifestError(f"{where}: unknown (cue, type, format) triple ({name}, {pair[0]}, {pair[1]}); "
                                f"{name} accepts " + ", ".join(f"{t}/{f}" for (t, f), r in REPRESENTATIONS.items()
                                                             if r in allowed))
        if obj.get("scope", "speaker") != "speaker":
            raise ManifestError(f"{where}.scope: only 'speaker' is supported, got {obj['scope']!r}")
        guaranteed = obj.get("guaranteed", True)
        if not isinstance(guaranteed, bool):
            raise ManifestError(f"{where}.guaranteed: expected true or false, got {guaranteed!r}")
        policy = _take(obj["policy"], f"{where}.policy", {"type", "key", "resource"}, set())
        if policy["type"] not in POLICY_TYPES[name]:
            raise ManifestError(f"{where}.policy.type: {policy['type']!r} is not one of "
                                f"{', '.join(POLICY_TYPES[name])} for cue {name!r}")
        if policy["key"] not in POLICY_KEYS:
            raise ManifestError(f"{where}.policy.key: {policy['key']!r} is not one of {', '.join(POLICY_KEYS)}")
        if not isinstance(policy["resource"], str) or not policy["resource"]:
            raise ManifestError(f"{where}.policy.resource: a resource JSON path is required")
        fields = obj.get("fields", [])
        if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
            raise ManifestError(f"{where}.fields: expected a list of field names, got {fields!r}")
        defaults = obj.get("field_defaults", {})
        if not isinstance(defaults, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in defaults.values()):
            raise ManifestError(f"{where}.field_defaults: expected a mapping of field name to number, got {defaults!r}")
        selection = obj.get("selection")
        if selection is not None:
            _take(selection, f"{where}.selection", {"type"}, {"word_range"})
            if selection["type"] not in ("random", "fixed"):
                raise ManifestError(f"{where}.selection.type: {selection['type']!r} is not random or fixed")
            word_range = selection.get("word_range")
            if selection["type"] == "random" and not (isinstance(word_range, list) and len(word_range) == 2
                                                      and all(isinstance(v, int) and v >= 1 for v in word_range)
                                                      and word_range[0] <= word_range[1]):
                raise ManifestError(f"{where}.selection.word_range: random selection needs [lo, hi] with "
                                    f"1 <= lo <= hi, got {word_range!r}")
        return cls(name=name, type=pair[0], format=pair[1], guaranteed=guaranteed, policy_type=policy["type"],
                   policy_key=policy["key"], resource=policy["resource"],
                   collate=CollateDefaults.from_dict(obj.get("collate"), f"{where}.collate"),
                   fields=tuple(fields), field_defaults=dict(defaults), selection=selection)


@dataclass(frozen=True)
class CuesConfig:
    """A parsed ``cues.yaml``: the cues in file order, and the optional speaker-label resource."""

    cues: tuple[CueSpec, ...]
    speaker_label_resource: str | None = None

    def cue(self, name: str) -> CueSpec:
        for spec in self.cues:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @classmethod
    def from_dict(cls, obj: Any, where: str = "cues.yaml") -> "CuesConfig":
        _take(obj, where, {"cues"}, {"labels"})
        cues = obj["cues"]
        if not isinstance(cues, dict) or not cues:
            raise ManifestError(f"{where}.cues: expected a non-empty mapping of cue name to its description")
        specs = tuple(CueSpec.from_dict(name, spec, f"{where}.cues.{name}") for name, spec in cues.items())
        label_resource = None
        if obj.get("labels") is not None:
            labels = _take(obj["labels"], f"{where}.labels", set(), {"speaker_label"})
            if "speaker_label" in labels:
                label_resource = _take(labels["speaker_label"], f"{where}.labels.speaker_label", {"resource"},
                                       set())["resource"]
                if not isinstance(label_resource, str) or not label_resource:
                    raise ManifestError(f"{where}.labels.speaker_label.resource: a spk2label JSON path is required")
        return cls(cues=specs, speaker_label_resource=label_resource)


class SpeakerSlot(NamedTuple):
    """One speaker slot of one list line: what a cue lookup key (``schemas.cues.lookup_key``) is made of."""

    line: int
    sample_key: str
    speaker: str


def lookup_key(policy_key: str, sample_key: str, speaker: str, source_key: str | None = None) -> str:
    """The resource key of one slot: the speaker (``spk_id``) or ``f"{key}::{speaker}"`` (``mix_spk_id``; an
    online mixture uses its source utterance's key)."""
    if policy_key == "spk_id":
        return speaker
    return f"{source_key or sample_key}{MIX_SPK_SEPARATOR}{speaker}"
