"""``dataset_args.cues`` and ``dataset_args.collate``: which speaker cues the experiment consumes, and how the
per-row fields are collated (WeSep's experiment-side cue selection and ``build_collect_keys`` overrides).

Checks that need the packs (the cue exists, ``required`` against ``guaranteed``) happen when the loader is built
(``loader.tse.cues.resolve.resolve_cues``); the ones here need the config only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from speechpack.loader.config_checks import MAX_SAMPLES, ConfigError, check_choice, check_type, take_known
from speechpack.loader.tse.decode import ALIGNS as FIELD_ALIGNS
from speechpack.loader.tse.decode import BASE_FIELDS, CUE_FIELDS, OVERRIDE_KEYS, PAD_MODES
from speechpack.schemas.documents import key_list

#: ``collate.<field>.align`` of ``wav_mix`` and ``wav_target``.
ALIGNS = ("max", "min")
#: Collated fields whose alignment can be overridden with ``collate.<field>.align``.
ALIGNABLE_FIELDS = ("wav_mix", "wav_target")
#: Keys of ``dataset_args.cues.<cue>`` (WeSep's experiment-side cue selection).
CUE_REQUEST_KEYS = ("use", "required", "default_shape", "fill_value", "emit_present")


@dataclass(frozen=True)
class CueRequest:
    """``dataset_args.cues.<name>``: whether the experiment consumes a cue, and how a missing one is filled.

    ``required`` ``None`` means "as the data promises" (the packs' ``cues.yaml`` ``guaranteed``); the other
    ``None`` values mean "not set here" (the cue's ``cues.yaml`` collate block or WeSep's base table decides).
    Built in code it checks itself, naming its keys under ``dataset_args`` (``parse_cues`` checks a config's,
    naming them under the config's path, before it builds one).
    """

    name: str
    use: bool = False
    required: bool | None = None
    default_shape: tuple[int, ...] | None = None
    fill_value: float | int | None = None
    emit_present: bool | None = None

    def __post_init__(self) -> None:
        if self.default_shape is not None:
            check_shape(self.default_shape, f"dataset_args.cues.{self.name}.default_shape")

    @property
    def field(self) -> str:
        return CUE_FIELDS[self.name]

    def collate_defaults(self) -> dict[str, Any]:
        """The collate keys this entry sets (``default_shape``, ``fill_value``, ``emit_present``)."""
        values = {"default_shape": self.default_shape, "fill_value": self.fill_value,
                  "emit_present": self.emit_present}
        return {key: value for key, value in values.items() if value is not None}


def check_shape(shape: tuple[int, ...], where: str) -> tuple[int, ...]:
    """A ``default_shape`` fills a missing row: at most ``MAX_SAMPLES`` elements, so a typo cannot allocate
    terabytes at collation."""
    if math.prod(shape) > MAX_SAMPLES:
        raise ConfigError(f"{where}: {list(shape)} has {math.prod(shape)} elements, more than {MAX_SAMPLES}")
    return shape


def _shape(value: Any, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                       for d in value):
        raise ConfigError(f"{where}: expected a list of non-negative integers, got {value!r}")
    return check_shape(tuple(value), where)


def _fill(value: Any, where: str) -> float | int | None:
    if value is not None:
        check_type(value, (int, float), where)
    return value


def parse_cues(obj: Any, where: str) -> tuple[CueRequest, ...]:
    """``dataset_args.cues``: ``{audio|spatial|visual|textual: {use, required, default_shape, fill_value,
    emit_present}}``, checked key by key; order kept (it is the order of the cue fields in a batch)."""
    if obj is None:
        return ()
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping of cue name to {{use: ...}}, got {type(obj).__name__}")
    requests = []
    for name, entry in obj.items():
        if name not in CUE_FIELDS:
            raise ConfigError(f"{where}: unknown cue {name!r} (known: {', '.join(CUE_FIELDS)})")
        v = take_known(entry, f"{where}.{name}", {key: None for key in CUE_REQUEST_KEYS})
        use = False if v["use"] is None else check_type(v["use"], bool, f"{where}.{name}.use")
        for key in ("required", "emit_present"):
            if v[key] is not None:
                check_type(v[key], bool, f"{where}.{name}.{key}")
        requests.append(CueRequest(name=name, use=use, required=v["required"],
                                   default_shape=_shape(v["default_shape"], f"{where}.{name}.default_shape"),
                                   fill_value=_fill(v["fill_value"], f"{where}.{name}.fill_value"),
                                   emit_present=v["emit_present"]))
    return tuple(requests)


def parse_collate(obj: Any, where: str, cues: tuple[CueRequest, ...]
             ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]]:
    """``collate``: ``align`` of ``wav_mix``/``wav_target``; WeSep's spec keys of the per-row fields.

    A per-row field can be overridden only when it is registered: ``speaker_label`` always, a cue field when its
    cue is used (WeSep's build_collect_keys refuses the rest).
    """
    fields = take_known(obj, where, {name: None for name in (*ALIGNABLE_FIELDS, *BASE_FIELDS)})
    aligns = []
    for name in ALIGNABLE_FIELDS:
        spec = take_known(fields[name], f"{where}.{name}", {"align": "max"})
        aligns.append((name, check_choice(spec["align"], ALIGNS, f"{where}.{name}.align")))
    used = {cue.field: cue.name for cue in cues if cue.use}
    overrides = []
    for name in BASE_FIELDS:
        if fields[name] is None:
            continue
        at = f"{where}.{name}"
        if name != "speaker_label" and name not in used:
            cue = next(c for c, f in CUE_FIELDS.items() if f == name)
            raise ConfigError(f"{at}: cannot override unregistered field {name} (cue {cue!r} is not used: set "
                              f"dataset_args.cues.{cue}.use: true)")
        if not isinstance(fields[name], dict):
            raise ConfigError(f"{at}: expected a mapping, got {type(fields[name]).__name__}")
        unknown = set(fields[name]) - set(OVERRIDE_KEYS)
        if unknown:
            raise ConfigError(f"{at}: unknown key(s) {key_list(unknown)} (known: {', '.join(sorted(OVERRIDE_KEYS))})")
        given = dict(fields[name])
        if "align" in given:
            if given["align"] not in FIELD_ALIGNS:
                raise ConfigError(f"{at}.align: {given['align']!r} is not one of max, min, null")
            if name == "speaker_label" and given["align"] is not None:
                raise ConfigError(f"{at}.align: speaker_label is one number per row; align must be null")
        if "pad_mode" in given:
            check_choice(given["pad_mode"], PAD_MODES, f"{at}.pad_mode")
        if "fill_value" in given:
            if given["fill_value"] is None:
                raise ConfigError(f"{at}.fill_value: a number is required")
            _fill(given["fill_value"], f"{at}.fill_value")
        if "default_shape" in given:
            given["default_shape"] = _shape(given["default_shape"], f"{at}.default_shape")
        if "emit_present" in given:
            check_type(given["emit_present"], bool, f"{at}.emit_present")
        overrides.append((name, tuple((key, given[key]) for key in OVERRIDE_KEYS if key in given)))
    return tuple(aligns), tuple(overrides)


__all__ = ["ALIGNABLE_FIELDS", "ALIGNS", "CUE_REQUEST_KEYS", "CueRequest", "parse_collate",
           "parse_cues"]
