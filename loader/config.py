"""The loader's configuration: ``packs``, ``weighting``, ``task`` and the task's ``dataset_args``, checked key by key.

A config is a plain dict (usually loaded from YAML).  ``LoaderConfig.from_dict`` turns it into frozen
dataclasses and refuses any key it does not know, naming it, so a typo never silently becomes a default.
``dataset_args`` is parsed by the task's module (``loader.tse.args`` for ``tse``, see ``loader.tasks``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.errors import SpeechpackError

STATES = ("train", "val", "test")
TAIL_POLICIES = ("pad", "drop")

#: MuVAP's loudness normalisation (notes-muvap.md section 2): target RMS, gain cap, peak cap.
NORMALIZE_TARGET_RMS_DBFS = -25.0
NORMALIZE_MAX_GAIN_DB = 20.0
NORMALIZE_PEAK_LIMIT = 0.99


class ConfigError(SpeechpackError):
    """A loader config key is unknown, missing or out of range (the message names it)."""


# The checks below are shared by every task's ``dataset_args`` parser (loader/asd/args.py, loader/asr/args.py), so
# a bad value reads the same whatever the task: the message names the key's full path (``where``).


def take_known(obj: Any, where: str, known: dict[str, Any]) -> dict:
    """``obj``'s values for the keys of ``known`` (defaults where absent); any other key is an error."""
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return {key: obj.get(key, default) for key, default in known.items()}


def check_type(value: Any, kinds: type | tuple, where: str) -> Any:
    """``value`` if it is one of ``kinds`` (``True`` is not an int here), else a ``ConfigError`` naming ``where``."""
    kinds_t = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool) and bool not in kinds_t:
        raise ConfigError(f"{where}: expected {'/'.join(k.__name__ for k in kinds_t)}, got {value!r}")
    if not isinstance(value, kinds_t):
        raise ConfigError(f"{where}: expected {'/'.join(k.__name__ for k in kinds_t)}, got {value!r}")
    return value


def check_choice(value: Any, choices: tuple, where: str) -> str:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


#: Keys of a ``packs`` entry that set its count per epoch (at most one each; see loader.weighting).
WEIGHT_KEYS = ("weight", "hours_beta", "repeat", "choose")


@dataclass(frozen=True)
class PackSource:
    """One entry of ``packs``: its path and, optionally, how many items it gives each epoch.

    At most one of ``weight`` (relative share of the epoch), ``hours_beta: true`` (share by Omnilingual's
    hours ** beta rule, betas in the top-level ``weighting``), ``repeat`` (multiplier of the pack's items) or
    ``choose`` (items per epoch).  ``corpus`` and ``language`` group packs for ``hours_beta`` and the report;
    both default to the path.
    """

    path: str
    weight: float | None = None
    hours_beta: bool = False
    repeat: float | None = None
    choose: int | None = None
    corpus: str | None = None
    language: str | None = None

    @property
    def weighted(self) -> bool:
        """Whether the entry sets any weighting key."""
        return (self.weight is not None or self.hours_beta or self.repeat is not None or self.choose is not None)

    @property
    def corpus_name(self) -> str:
        return self.corpus if self.corpus is not None else self.path

    @property
    def language_name(self) -> str:
        return self.language if self.language is not None else self.path

    @classmethod
    def from_dict(cls, obj: Any, where: str, weighting: bool = False) -> "PackSource":
        """``weighting`` False (banks: rir_banks, noise_banks) accepts ``path`` only."""
        known = {"path": None}
        if weighting:
            known.update({"weight": None, "hours_beta": False, "repeat": None, "choose": None, "corpus": None,
                          "language": None})
        values = take_known(obj, where, known)
        if not isinstance(values["path"], str) or not values["path"]:
            raise ConfigError(f"{where}.path: a pack directory is required")
        if not weighting:
            return cls(path=values["path"])
        given = [key for key in WEIGHT_KEYS if values[key] is not None and values[key] is not False]
        if len(given) > 1:
            raise ConfigError(f"{where}: {' and '.join(given)} together; set at most one of "
                              f"{', '.join(WEIGHT_KEYS)}")
        for key in ("weight", "repeat"):
            if values[key] is not None and check_type(values[key], (int, float), f"{where}.{key}") < 0:
                raise ConfigError(f"{where}.{key}: must be non-negative, got {values[key]}")
        if values["choose"] is not None and check_type(values["choose"], int, f"{where}.choose") < 0:
            raise ConfigError(f"{where}.choose: must be a non-negative number of items, got {values['choose']}")
        check_type(values["hours_beta"], bool, f"{where}.hours_beta")
        for key in ("corpus", "language"):
            if values[key] is not None and (not isinstance(values[key], str) or not values[key]):
                raise ConfigError(f"{where}.{key}: expected a non-empty string, got {values[key]!r}")
        return cls(path=values["path"],
                   weight=None if values["weight"] is None else float(values["weight"]),
                   hours_beta=values["hours_beta"],
                   repeat=None if values["repeat"] is None else float(values["repeat"]),
                   choose=values["choose"], corpus=values["corpus"], language=values["language"])


@dataclass(frozen=True)
class Weighting:
    """Top-level ``weighting``: the betas of ``hours_beta`` (Omnilingual recipes use 0.5) and ``epoch_items``,
    the epoch size of proportional weighting (default: the sum of the packs' sizes)."""

    beta_corpus: float = 0.5
    beta_language: float = 0.5
    epoch_items: int | None = None

    @classmethod
    def from_dict(cls, obj: Any, where: str, packs: tuple[PackSource, ...], packs_where: str) -> "Weighting":
        v = take_known(obj, where, {"beta_corpus": 0.5, "beta_language": 0.5, "epoch_items": None})
        for key in ("beta_corpus", "beta_language"):
            if check_type(v[key], (int, float), f"{where}.{key}") < 0:
                raise ConfigError(f"{where}.{key}: must be non-negative, got {v[key]}")
        if v["epoch_items"] is not None and check_type(v["epoch_items"], int, f"{where}.epoch_items") < 1:
            raise ConfigError(f"{where}.epoch_items: must be at least 1, got {v['epoch_items']}")
        modes = {"weight" if p.weight is not None else "hours_beta" if p.hours_beta
                 else "repeat/choose/none" for p in packs}
        if len(modes) > 1 and modes & {"weight", "hours_beta"}:
            raise ConfigError(f"{packs_where}: proportions are all or none: every entry sets weight, or every "
                              f"entry sets hours_beta: true, or none does (got {', '.join(sorted(modes))})")
        proportional = bool(modes & {"weight", "hours_beta"})
        if proportional and sum(p.weight or 0.0 for p in packs) <= 0 and "weight" in modes:
            raise ConfigError(f"{packs_where}: the weights sum to 0")
        if v["epoch_items"] is not None and not proportional:
            raise ConfigError(f"{where}.epoch_items: only with weight or hours_beta entries (with repeat/choose "
                              f"the epoch size is the sum of the packs' counts)")
        return cls(beta_corpus=float(v["beta_corpus"]), beta_language=float(v["beta_language"]),
                   epoch_items=v["epoch_items"])


def positive_int(value: Any, where: str, minimum: int = 1) -> int:
    if check_type(value, int, where) < minimum:
        raise ConfigError(f"{where}: must be at least {minimum}, got {value}")
    return value


def value_range(value: Any, where: str, lo: float | None = None, hi: float | None = None) -> tuple[float, float]:
    """A ``[lo, hi]`` pair of numbers, ``lo <= hi``, optionally within ``[lo, hi]`` bounds."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"{where}: expected [low, high], got {value!r}")
    for x in value:
        check_type(x, (int, float), where)
    a, b = float(value[0]), float(value[1])
    if a > b:
        raise ConfigError(f"{where}: low {a} > high {b}")
    if (lo is not None and a < lo) or (hi is not None and b > hi):
        raise ConfigError(f"{where}: must lie within [{lo}, {hi}], got {value!r}")
    return a, b


def probability(value: Any, where: str) -> float:
    if not 0 <= check_type(value, (int, float), where) <= 1:
        raise ConfigError(f"{where}: must be in [0, 1], got {value}")
    return float(value)


@dataclass(frozen=True)
class LoaderConfig:
    packs: tuple[PackSource, ...]
    #: The task's ``dataset_args`` dataclass (``DatasetArgs`` for ``tse``; see ``loader.tasks``).
    dataset_args: Any = field(default_factory=lambda: _default_dataset_args())
    #: ``weighting``: betas and epoch size of the packs' weighting (docs/loader.md "Weighting").
    weighting: Weighting = field(default_factory=Weighting)
    #: ``task``: ``tse`` (default), ``asd`` or ``asr`` (``loader.tasks``).
    task: str = "tse"

    @property
    def weighted(self) -> bool:
        """Whether any ``packs`` entry sets a weighting key (else every item once per epoch, as before)."""
        return any(p.weighted for p in self.packs)

    @classmethod
    def from_dict(cls, obj: Any, where: str = "config") -> "LoaderConfig":
        from loader.tasks import DEFAULT_TASK, task_module  # the task modules import this one

        values = take_known(obj, where, {"packs": None, "dataset_args": None, "weighting": None, "task": DEFAULT_TASK})
        task = check_type(values["task"], str, f"{where}.task")
        module = task_module(task, f"{where}.task")
        packs = values["packs"]
        if not isinstance(packs, list) or not packs:
            raise ConfigError(f"{where}.packs: a non-empty list of {{path: ...}} is required")
        sources = tuple(PackSource.from_dict(p, f"{where}.packs[{i}]", weighting=True) for i, p in enumerate(packs))
        return cls(
            packs=sources,
            dataset_args=module.parse_dataset_args(values["dataset_args"], f"{where}.dataset_args"),
            weighting=Weighting.from_dict(values["weighting"], f"{where}.weighting", sources, f"{where}.packs"),
            task=task,
        )


def _default_dataset_args() -> Any:
    """The default task's ``dataset_args`` with every default (the task modules import this one: a late import)."""
    from loader.tasks import DEFAULT_TASK, task_module
    return task_module(DEFAULT_TASK).parse_dataset_args(None, "dataset_args")
