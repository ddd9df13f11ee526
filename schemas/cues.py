"""Speaker cues: the split's ``cues.yaml`` (WeSep's contract), parsed and checked, and where a pack keeps it.

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

Rules (WeSep's ``cues._cue_common``): only the (type, format) pairs of the representation table, each for the cues
its row names; ``scope`` must be ``speaker``; ``policy.type``, ``policy.key`` and ``policy.resource`` are required;
audio allows ``random`` and ``fixed``, the others ``fixed`` only (textual randomness comes from ``selection``);
``guaranteed`` defaults to true.

Resource paths: ``policy.resource``, ``labels.speaker_label.resource`` and every ``path`` inside a resource are
used as written when absolute; a relative one is resolved against the build's ``--root`` when given, else against
the current directory (the rule for the audio paths of the list).

In a pack, ``PACK/cues/`` holds ``cues.yaml`` verbatim and one directory per cue, its *bank*: the bank's files,
each representation's payload and the invariants are specified in ``schemas/cue_banks.py``, whose
``REPRESENTATION_SPECS`` table (one row per representation) is where the pairs above come from.
``labels.speaker_label`` becomes ``cues/labels/speakers.npy`` (``|S<n>``, sorted) and ``cues/labels/labels.npy``
(``<i8``, row for row).

The manifest lists every file under ``cues/`` (``dataset.json["cues"]``, see ``schemas/format.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from speechpack.schemas.cue_banks import (
    INDEX_DTYPE,
    Issue,
    RepresentationSpec,
    representation_of,
    representation_spec,
    representations_for,
)
from speechpack.schemas.documents import key_list
from speechpack.schemas.errors import ManifestError

CUES_DIR = "cues"
CUES_YAML = "cues.yaml"
#: ``cues/labels/``: speaker ids (sorted) and their labels, row for row (``cues.yaml``'s ``labels.speaker_label``).
LABELS_DIR = "labels"
LABEL_SPEAKERS_NAME = "speakers.npy"
LABEL_VALUES_NAME = "labels.npy"

#: The cues of ``cues.yaml``: the policy types each allows, and WeSep's default representation when an entry omits
#: ``type`` and ``format`` (None: the entry must give them).  Which representations each cue accepts is the
#: ``cues`` column of ``schemas.cue_banks.REPRESENTATION_SPECS``.
POLICY_TYPES = {"audio": ("random", "fixed"), "visual": ("fixed",), "spatial": ("fixed",), "textual": ("fixed",)}
DEFAULT_REPRESENTATIONS = {"audio": "waveform", "visual": "raw_video", "spatial": "fields", "textual": None}
POLICY_KEYS = ("spk_id", "mix_spk_id")
#: The separator of ``mix_spk_id`` lookup keys: ``f"{key}::{speaker}"``.
MIX_SPK_SEPARATOR = "::"


def _take(obj: Any, where: str, required: set[str], optional: set[str]) -> dict:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected a mapping, got {type(obj).__name__}")
    missing = sorted(required - set(obj))
    unknown = set(obj) - required - optional
    if missing:
        raise ManifestError(f"{where}: missing key(s) {', '.join(missing)}")
    if unknown:
        raise ManifestError(f"{where}: unknown key(s) {key_list(unknown)}")
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
        """The representation's name (its ``format``)."""
        return self.format

    @property
    def representation_spec(self) -> RepresentationSpec:
        """The representation's row of ``schemas.cue_banks.REPRESENTATION_SPECS``."""
        return representation_spec(self.format)

    @classmethod
    def from_dict(cls, name: str, obj: Any, where: str) -> "CueSpec":
        if name not in POLICY_TYPES:
            raise ManifestError(f"{where}: unknown cue {name!r} (known: {', '.join(POLICY_TYPES)})")
        _take(obj, where, {"policy"}, {"type", "format", "scope", "guaranteed", "collate", "fields",
                                       "field_defaults", "selection"})
        default = DEFAULT_REPRESENTATIONS[name]
        if ("type" in obj) != ("format" in obj) or (default is None and "type" not in obj):
            raise ManifestError(f"{where}: give both type and format" + ("" if default else f" (cue {name!r} has no "
                                                                                              f"default)"))
        if "type" in obj:
            pair = (obj["type"], obj["format"])
        else:
            pair = (representation_spec(default).type, default)
        if not all(isinstance(part, str) for part in pair):
            raise ManifestError(f"{where}: type and format must be strings, got {pair[0]!r} and {pair[1]!r}")
        row = representation_of(*pair)
        if row is None or name not in row.cues:
            accepted = ", ".join(f"{r.type}/{r.format}" for r in representations_for(name))
            raise ManifestError(f"{where}: unknown (cue, type, format) triple ({name}, {pair[0]}, {pair[1]}); "
                                f"{name} accepts {accepted}")
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


def label_issues(directory: str, speakers: np.ndarray, labels: np.ndarray) -> list[Issue]:
    """The labels' invariants (``speakers.npy`` sorted and unique, ``labels.npy`` row for row), checked by
    ``open_pack`` and ``speechpack validate``."""
    if speakers.dtype.kind != "S" or speakers.ndim != 1 or labels.dtype != INDEX_DTYPE \
            or labels.shape != speakers.shape:
        return [(directory, f"expected |S speakers and {INDEX_DTYPE.str} labels, row for row; got "
                            f"{speakers.dtype} {list(speakers.shape)} and {labels.dtype} {list(labels.shape)}")]
    if len(speakers) > 1 and not (speakers[1:] > speakers[:-1]).all():
        return [(os.path.join(directory, LABEL_SPEAKERS_NAME), "speakers are not sorted and unique")]
    return []
