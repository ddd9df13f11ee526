"""The loader's configuration: ``packs`` plus WeSep-compatible ``dataset_args``, checked key by key.

A config is a plain dict (usually loaded from YAML).  ``LoaderConfig.from_dict`` turns it into frozen
dataclasses and refuses any key it does not know, naming it, so a typo never silently becomes a default.
Defaults follow WeSep where WeSep has the key (``chunk_len`` = 3 s, ``chunk_short_policy`` = ``pad``,
``filter_len_args`` 1-1000 s), so a WeSep ``dataset_args`` block means the same thing here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loader.collate import ALIGNS as FIELD_ALIGNS
from loader.collate import BASE_FIELDS, CUE_FIELDS, OVERRIDE_KEYS, PAD_MODES
from schemas.errors import SpeechpackError

STATES = ("train", "val", "test")
SHORT_POLICIES = ("pad", "keep")
TAIL_POLICIES = ("pad", "drop")
ALIGNS = ("max", "min")
#: Collated fields whose alignment can be overridden with ``collate.<field>.align``.
ALIGNABLE_FIELDS = ("wav_mix", "wav_target")
#: Keys of ``dataset_args.cues.<cue>`` (WeSep's experiment-side cue selection).
CUE_REQUEST_KEYS = ("use", "required", "default_shape", "fill_value", "emit_present")

#: MuVAP's loudness normalisation (notes-muvap.md section 2): target RMS, gain cap, peak cap.
NORMALIZE_TARGET_RMS_DBFS = -25.0
NORMALIZE_MAX_GAIN_DB = 20.0
NORMALIZE_PEAK_LIMIT = 0.99
NORMALIZE_TYPES = ("muvap",)


class ConfigError(SpeechpackError):
    """A loader config key is unknown, missing or out of range (the message names it)."""


def _take(obj: Any, where: str, known: dict[str, Any]) -> dict:
    """``obj``'s values for the keys of ``known`` (defaults where absent); any other key is an error."""
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return {key: obj.get(key, default) for key, default in known.items()}


def _check_type(value: Any, kinds: type | tuple, where: str) -> Any:
    kinds_t = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool) and bool not in kinds_t:
        raise ConfigError(f"{where}: expected {'/'.join(k.__name__ for k in kinds_t)}, got {value!r}")
    if not isinstance(value, kinds_t):
        raise ConfigError(f"{where}: expected {'/'.join(k.__name__ for k in kinds_t)}, got {value!r}")
    return value


def _choice(value: Any, choices: tuple, where: str) -> str:
    if value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


@dataclass(frozen=True)
class PackSource:
    """One entry of ``packs``."""

    path: str

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> "PackSource":
        values = _take(obj, where, {"path": None})
        if not isinstance(values["path"], str) or not values["path"]:
            raise ConfigError(f"{where}.path: a pack directory is required")
        return cls(path=values["path"])


@dataclass(frozen=True)
class DatasetArgs:
    """``dataset_args``: what is read, how it is cut, normalised, batched and collated.

    ``chunk_len`` is in samples at ``resample_rate`` (WeSep's unit); ``None`` means 3 s.  ``tail`` says what
    happens to the last, incomplete round of batches: ``pad`` fills it with repeats flagged ``valid = False``
    (every sample is seen, training code masks the repeats), ``drop`` leaves the tail out (reported).
    ``cues`` selects speaker cues (WeSep's ``dataset_args.cues``); ``field_collate`` holds the ``collate.<field>``
    overrides of the cue fields and ``speaker_label``.  Checks that need the packs (the cue exists, ``required``
    against ``guaranteed``) happen when the loader is built (``loader.cues.resolve_cues``).
    """

    resample_rate: int | None = None
    whole_utt: bool = False
    chunk_len: int | None = None
    chunk_random_start: bool = True
    chunk_short_policy: str = "pad"
    filter_len: bool = False
    min_num_seconds: float = 1.0
    max_num_seconds: float = 1000.0
    shuffle: bool = True
    batch_size: int = 1
    tail: str = "pad"
    expand_targets: bool = False
    normalize: str | None = None
    align: tuple[tuple[str, str], ...] = (("wav_mix", "max"), ("wav_target", "max"))
    #: ``cues``: every ``dataset_args.cues.<name>`` entry, in config order (used or not).
    cues: tuple["CueRequest", ...] = ()
    #: ``collate.<field>`` overrides of the per-row fields (cue fields, ``speaker_label``):
    #: ``((field, ((key, value), ...)), ...)``.
    field_collate: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    def align_of(self, name: str) -> str:
        return dict(self.align)[name]

    @property
    def used_cues(self) -> tuple["CueRequest", ...]:
        """The cues the experiment consumes (``use: true``), in ``dataset_args.cues`` order."""
        return tuple(cue for cue in self.cues if cue.use)

    def collate_of(self, field_name: str) -> dict[str, Any]:
        """The ``collate.<field>`` keys given for a per-row field (empty when none)."""
        return dict(dict(self.field_collate).get(field_name, ()))

    @classmethod
    def from_dict(cls, obj: Any, where: str = "dataset_args") -> "DatasetArgs":
        v = _take(obj, where, {
            "resample_rate": None, "whole_utt": False, "chunk_len": None, "chunk_random_start": True,
            "chunk_short_policy": "pad", "filter_len": False, "filter_len_args": None, "shuffle": True,
            # Accepted for WeSep configs: the loader shuffles the whole epoch, so the buffer size has no role.
            "shuffle_args": None,
            "batch_size": 1, "tail": "pad", "expand_targets": False, "normalize": None, "collate": None,
            "cues": None,
            # WeSep keys of features that are not built yet: present and false is fine, true is an error.
            "online_mix": False, "cue_processing": None,
        })
        for key in ("whole_utt", "chunk_random_start", "filter_len", "shuffle", "expand_targets", "online_mix"):
            _check_type(v[key], bool, f"{where}.{key}")
        if v["online_mix"]:
            raise ConfigError(f"{where}.online_mix: online mixing is not supported by this version of the loader")
        if v["resample_rate"] is not None and (_check_type(v["resample_rate"], int, f"{where}.resample_rate") <= 0):
            raise ConfigError(f"{where}.resample_rate: must be a positive number of Hz")
        if v["chunk_len"] is not None and _check_type(v["chunk_len"], int, f"{where}.chunk_len") <= 0:
            raise ConfigError(f"{where}.chunk_len: must be a positive number of samples")
        if _check_type(v["batch_size"], int, f"{where}.batch_size") < 1:
            raise ConfigError(f"{where}.batch_size: must be at least 1, got {v['batch_size']}")
        filter_args = _take(v["filter_len_args"], f"{where}.filter_len_args",
                            {"min_num_seconds": 1.0, "max_num_seconds": 1000.0})
        for key, value in filter_args.items():
            _check_type(value, (int, float), f"{where}.filter_len_args.{key}")
        if filter_args["min_num_seconds"] > filter_args["max_num_seconds"]:
            raise ConfigError(f"{where}.filter_len_args: min_num_seconds {filter_args['min_num_seconds']} > "
                              f"max_num_seconds {filter_args['max_num_seconds']}")
        _take(v["shuffle_args"], f"{where}.shuffle_args", {"shuffle_size": None})
        _cue_processing(v["cue_processing"], f"{where}.cue_processing")
        cues = _cues(v["cues"], f"{where}.cues")
        align, field_collate = _collate(v["collate"], f"{where}.collate", cues)
        return cls(
            resample_rate=v["resample_rate"],
            whole_utt=v["whole_utt"],
            chunk_len=v["chunk_len"],
            chunk_random_start=v["chunk_random_start"],
            chunk_short_policy=_choice(v["chunk_short_policy"], SHORT_POLICIES, f"{where}.chunk_short_policy"),
            filter_len=v["filter_len"],
            min_num_seconds=float(filter_args["min_num_seconds"]),
            max_num_seconds=float(filter_args["max_num_seconds"]),
            shuffle=v["shuffle"],
            batch_size=v["batch_size"],
            tail=_choice(v["tail"], TAIL_POLICIES, f"{where}.tail"),
            expand_targets=v["expand_targets"],
            normalize=_normalize(v["normalize"], f"{where}.normalize"),
            align=align,
            cues=cues,
            field_collate=field_collate,
        )


def _normalize(value: Any, where: str) -> str | None:
    """``normalize``: false/null (off), true or ``"muvap"``, or ``{type: muvap}``."""
    if value in (None, False):
        return None
    if value is True:
        return "muvap"
    if isinstance(value, dict):
        value = _take(value, where, {"type": "muvap"})["type"]
    return _choice(value, NORMALIZE_TYPES, where)


@dataclass(frozen=True)
class CueRequest:
    """``dataset_args.cues.<name>``: whether the experiment consumes a cue, and how a missing one is filled.

    ``required`` ``None`` means "as the data promises" (the packs' ``cues.yaml`` ``guaranteed``); the other
    ``None`` values mean "not set here" (the cue's ``cues.yaml`` collate block or WeSep's base table decides).
    """

    name: str
    use: bool = False
    required: bool | None = None
    default_shape: tuple[int, ...] | None = None
    fill_value: float | int | None = None
    emit_present: bool | None = None

    @property
    def field(self) -> str:
        return CUE_FIELDS[self.name]

    def collate_defaults(self) -> dict[str, Any]:
        """The collate keys this entry sets (``default_shape``, ``fill_value``, ``emit_present``)."""
        values = {"default_shape": self.default_shape, "fill_value": self.fill_value,
                  "emit_present": self.emit_present}
        return {key: value for key, value in values.items() if value is not None}


def _shape(value: Any, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                       for d in value):
        raise ConfigError(f"{where}: expected a list of non-negative integers, got {value!r}")
    return tuple(value)


def _fill(value: Any, where: str) -> float | int | None:
    if value is not None:
        _check_type(value, (int, float), where)
    return value


def _cues(obj: Any, where: str) -> tuple[CueRequest, ...]:
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
        v = _take(entry, f"{where}.{name}", {key: None for key in CUE_REQUEST_KEYS})
        use = False if v["use"] is None else _check_type(v["use"], bool, f"{where}.{name}.use")
        for key in ("required", "emit_present"):
            if v[key] is not None:
                _check_type(v[key], bool, f"{where}.{name}.{key}")
        requests.append(CueRequest(name=name, use=use, required=v["required"],
                                   default_shape=_shape(v["default_shape"], f"{where}.{name}.default_shape"),
                                   fill_value=_fill(v["fill_value"], f"{where}.{name}.fill_value"),
                                   emit_present=v["emit_present"]))
    return tuple(requests)


def _cue_processing(obj: Any, where: str) -> None:
    """WeSep's enrollment augmentation: accepted when off (probabilities 0), an error otherwise."""
    audio = _take(obj, where, {"audio": None})["audio"]
    probs = _take(audio, f"{where}.audio", {"reverb_enroll_prob": 0, "noise_enroll_prob": 0})
    for key, value in probs.items():
        if _check_type(value, (int, float), f"{where}.audio.{key}") != 0:
            raise ConfigError(f"{where}.audio.{key}: enrollment augmentation is not supported by this version of "
                              f"the loader (set it to 0)")


def _collate(obj: Any, where: str, cues: tuple[CueRequest, ...]
             ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]]:
    """``collate``: ``align`` of ``wav_mix``/``wav_target``; WeSep's spec keys of the per-row fields.

    A per-row field can be overridden only when it is registered: ``speaker_label`` always, a cue field when its
    cue is used (WeSep's build_collect_keys refuses the rest).
    """
    fields = _take(obj, where, {name: None for name in (*ALIGNABLE_FIELDS, *BASE_FIELDS)})
    aligns = []
    for name in ALIGNABLE_FIELDS:
        spec = _take(fields[name], f"{where}.{name}", {"align": "max"})
        aligns.append((name, _choice(spec["align"], ALIGNS, f"{where}.{name}.align")))
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
        unknown = sorted(set(fields[name]) - set(OVERRIDE_KEYS))
        if unknown:
            raise ConfigError(f"{at}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(OVERRIDE_KEYS))})")
        given = dict(fields[name])
        if "align" in given:
            if given["align"] not in FIELD_ALIGNS:
                raise ConfigError(f"{at}.align: {given['align']!r} is not one of max, min, null")
            if name == "speaker_label" and given["align"] is not None:
                raise ConfigError(f"{at}.align: speaker_label is one number per row; align must be null")
        if "pad_mode" in given:
            _choice(given["pad_mode"], PAD_MODES, f"{at}.pad_mode")
        if "fill_value" in given:
            if given["fill_value"] is None:
                raise ConfigError(f"{at}.fill_value: a number is required")
            _fill(given["fill_value"], f"{at}.fill_value")
        if "default_shape" in given:
            given["default_shape"] = _shape(given["default_shape"], f"{at}.default_shape")
        if "emit_present" in given:
            _check_type(given["emit_present"], bool, f"{at}.emit_present")
        overrides.append((name, tuple((key, given[key]) for key in OVERRIDE_KEYS if key in given)))
    return tuple(aligns), tuple(overrides)


@dataclass(frozen=True)
class LoaderConfig:
    packs: tuple[PackSource, ...]
    dataset_args: DatasetArgs = field(default_factory=DatasetArgs)

    @classmethod
    def from_dict(cls, obj: Any, where: str = "config") -> "LoaderConfig":
        values = _take(obj, where, {"packs": None, "dataset_args": None})
        packs = values["packs"]
        if not isinstance(packs, list) or not packs:
            raise ConfigError(f"{where}.packs: a non-empty list of {{path: ...}} is required")
        return cls(
            packs=tuple(PackSource.from_dict(p, f"{where}.packs[{i}]") for i, p in enumerate(packs)),
            dataset_args=DatasetArgs.from_dict(values["dataset_args"], f"{where}.dataset_args"),
        )
