"""The loader's configuration: ``packs`` plus WeSep-compatible ``dataset_args``, checked key by key.

A config is a plain dict (usually loaded from YAML).  ``LoaderConfig.from_dict`` turns it into frozen
dataclasses and refuses any key it does not know, naming it, so a typo never silently becomes a default.
Defaults follow WeSep where WeSep has the key (``chunk_len`` = 3 s, ``chunk_short_policy`` = ``pad``,
``filter_len_args`` 1-1000 s), so a WeSep ``dataset_args`` block means the same thing here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.errors import SpeechpackError

STATES = ("train", "val", "test")
SHORT_POLICIES = ("pad", "keep")
TAIL_POLICIES = ("pad", "drop")
ALIGNS = ("max", "min")
#: Collated fields whose alignment can be overridden with ``collate.<field>.align``.
ALIGNABLE_FIELDS = ("wav_mix", "wav_target")

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

    def align_of(self, name: str) -> str:
        return dict(self.align)[name]

    @classmethod
    def from_dict(cls, obj: Any, where: str = "dataset_args") -> "DatasetArgs":
        v = _take(obj, where, {
            "resample_rate": None, "whole_utt": False, "chunk_len": None, "chunk_random_start": True,
            "chunk_short_policy": "pad", "filter_len": False, "filter_len_args": None, "shuffle": True,
            # Accepted for WeSep configs: the loader shuffles the whole epoch, so the buffer size has no role.
            "shuffle_args": None,
            "batch_size": 1, "tail": "pad", "expand_targets": False, "normalize": None, "collate": None,
            # WeSep keys of features that are not built yet: present and false is fine, true is an error.
            "online_mix": False,
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
            align=_collate(v["collate"], f"{where}.collate"),
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


def _collate(obj: Any, where: str) -> tuple[tuple[str, str], ...]:
    fields = _take(obj, where, {name: None for name in ALIGNABLE_FIELDS})
    aligns = []
    for name in ALIGNABLE_FIELDS:
        spec = _take(fields[name], f"{where}.{name}", {"align": "max"})
        aligns.append((name, _choice(spec["align"], ALIGNS, f"{where}.{name}.align")))
    return tuple(aligns)


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
