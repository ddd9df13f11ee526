"""The loader's configuration: ``packs``, ``weighting``, ``task`` and the task's ``dataset_args``, checked key by key.

A config is a plain dict (usually loaded from YAML).  ``LoaderConfig.from_dict`` turns it into frozen
dataclasses and refuses any key it does not know, naming it, so a typo never silently becomes a default.  A config
of another tool (``loader.tasks.FOREIGN_RECIPES``) is first translated into this shape by its task.
``dataset_args`` is parsed by the task (``LoaderTask.parse_dataset_args``, see ``loader.tasks``); the value
checks every parser shares are in ``loader.config_checks``.  Objects built directly are checked too
(``__post_init__``), their keys named by field.

Which loader a resume state belongs to: ``loader_fingerprint`` hashes what decides the batches (the packs'
manifests, ``dataset_args``, the state, the task and the weighting), so ``SpeechLoader.load_state_dict`` refuses a
state saved by a loader that would deal other batches.  What only changes how batches are fetched (workers,
prefetch) and where the packs lie is left out, so a state still resumes on another node or with other workers.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# ConfigError (loader.config_checks) and STATES (loader.tasks) are re-exported: callers that read configs import
# them from here with LoaderConfig.
from speechpack.loader.config_checks import (
    MAX_EPOCH_ITEMS,
    ConfigError,
    check_choice,
    check_type,
    integer,
    number,
    positive_int,
    take_known,
)
from speechpack.loader.memory_limit import MemoryLimitError, memory_limit_bytes
from speechpack.loader.cache.settings import CacheSettings
from speechpack.loader.pack import Pack
from speechpack.loader.pack.files import url_scheme
from speechpack.loader.pack.content_check import DEFAULT_VERIFY, VERIFY_MODES, VERIFY_OFF
from speechpack.loader.recipe import MAX_PREFETCH, MAX_WORKERS, DataLoaderArgs, check_state, read_recipe
from speechpack.loader.tasks import DEFAULT_TASK, FOREIGN_RECIPES, STATES
from speechpack.loader.tasks import task as task_of

#: Keys of a ``packs`` entry that set its count per epoch (at most one each; see loader.plan.weighting).
WEIGHT_KEYS = ("weight", "hours_beta", "repeat", "choose")
#: Largest ``weighting.beta_corpus``/``beta_language``: hours ** beta stays finite for any corpus size (Omnilingual
#: uses 0.5; 0 is uniform, 1 proportional to hours).
MAX_BETA = 10.0


def _values(obj: Any) -> dict[str, Any]:
    """A dataclass's field values by name (what ``__post_init__`` checks)."""
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


def _held(cls: type, **values: Any) -> Any:
    """An instance of the frozen dataclass ``cls`` holding ``values`` (one per field) that ``from_dict`` has
    checked already, naming the config's paths: built without ``__post_init__``, so a config is checked once."""
    names = {f.name for f in fields(cls)}
    if set(values) != names:
        raise ValueError(f"{cls.__name__}: values for {sorted(values)}, fields {sorted(names)}")
    obj = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


def _check_pack_entry(v: dict[str, Any], where: str) -> None:
    """The rules of one ``packs`` entry (``v`` holds every PackSource field)."""
    if not isinstance(v["path"], str) or not v["path"]:
        raise ConfigError(f"{where}.path: a pack directory or URL is required")
    given = [key for key in WEIGHT_KEYS if v[key] is not None and v[key] is not False]
    if len(given) > 1:
        raise ConfigError(f"{where}: {' and '.join(given)} together; set at most one of {', '.join(WEIGHT_KEYS)}")
    for key in ("weight", "repeat"):
        if v[key] is not None:
            if check_type(v[key], (int, float), f"{where}.{key}") < 0:
                raise ConfigError(f"{where}.{key}: must be non-negative, got {v[key]}")
            number(v[key], f"{where}.{key}", 0, MAX_EPOCH_ITEMS)
    if v["choose"] is not None:
        if check_type(v["choose"], int, f"{where}.choose") < 0:
            raise ConfigError(f"{where}.choose: must be a non-negative number of items, got {v['choose']}")
        positive_int(v["choose"], f"{where}.choose", minimum=0, maximum=MAX_EPOCH_ITEMS)
    check_type(v["hours_beta"], bool, f"{where}.hours_beta")
    for key in ("corpus", "language", "split"):
        if v[key] is not None and (not isinstance(v[key], str) or not v[key]):
            raise ConfigError(f"{where}.{key}: expected a non-empty string, got {v[key]!r}")


@dataclass(frozen=True)
class PackSource:
    """One entry of ``packs``: its path and, optionally, how many items it gives each epoch.

    At most one of ``weight`` (relative share of the epoch), ``hours_beta: true`` (share by Omnilingual's
    hours ** beta rule, betas in the top-level ``weighting``), ``repeat`` (multiplier of the pack's items) or
    ``choose`` (items per epoch).  ``corpus`` and ``language`` group packs for ``hours_beta`` and the report;
    both default to the path.  ``split`` names the split the pack holds when it does not record one (an asr pack
    built with ``--split`` does): the ASR task's ``train_split``/``valid_split`` choose packs by it.  Checked on
    construction, whether from a config or built directly.
    """

    path: str
    weight: float | None = None
    hours_beta: bool = False
    repeat: float | None = None
    choose: int | None = None
    corpus: str | None = None
    language: str | None = None
    split: str | None = None

    def __post_init__(self) -> None:
        _check_pack_entry(_values(self), "PackSource")

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
        defaults = {"path": None, "weight": None, "hours_beta": False, "repeat": None, "choose": None,
                    "corpus": None, "language": None, "split": None}
        values = {**defaults, **take_known(obj, where, defaults if weighting else {"path": None})}
        _check_pack_entry(values, where)  # once, naming the config path
        return _held(cls, path=values["path"],
                   weight=None if values["weight"] is None else float(values["weight"]),
                   hours_beta=values["hours_beta"],
                   repeat=None if values["repeat"] is None else float(values["repeat"]),
                   choose=values["choose"], corpus=values["corpus"], language=values["language"],
                   split=values["split"])


def _check_weighting(v: dict[str, Any], where: str) -> None:
    for key in ("beta_corpus", "beta_language"):
        if check_type(v[key], (int, float), f"{where}.{key}") < 0:
            raise ConfigError(f"{where}.{key}: must be non-negative, got {v[key]}")
        number(v[key], f"{where}.{key}", 0, MAX_BETA)
    if v["epoch_items"] is not None:
        if check_type(v["epoch_items"], int, f"{where}.epoch_items") < 1:
            raise ConfigError(f"{where}.epoch_items: must be at least 1, got {v['epoch_items']}")
        positive_int(v["epoch_items"], f"{where}.epoch_items", maximum=MAX_EPOCH_ITEMS)


@dataclass(frozen=True)
class Weighting:
    """Top-level ``weighting``: the betas of ``hours_beta`` (Omnilingual recipes use 0.5) and ``epoch_items``,
    the epoch size of proportional weighting (default: the sum of the packs' sizes).  How it fits the ``packs``
    entries is checked by ``LoaderConfig``."""

    beta_corpus: float = 0.5
    beta_language: float = 0.5
    epoch_items: int | None = None

    def __post_init__(self) -> None:
        _check_weighting(_values(self), "Weighting")

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> "Weighting":
        v = take_known(obj, where, {"beta_corpus": 0.5, "beta_language": 0.5, "epoch_items": None})
        _check_weighting(v, where)
        return _held(cls, beta_corpus=float(v["beta_corpus"]), beta_language=float(v["beta_language"]),
                   epoch_items=v["epoch_items"])


def pack_identity(path: str) -> tuple:
    """What names a pack whatever its spelling: a local directory's (device, inode), so a trailing slash, ``..``
    or a symlink is the same pack; a URL's scheme and normalised path (``s3://b/p/`` is ``s3://b/p``).  A local
    path that cannot be stat'ed is compared by its real path (opening it later says what is wrong)."""
    scheme = url_scheme(path)
    if scheme not in (None, "file"):
        rest = path.split("://", 1)[1]
        return ("url", scheme, posixpath.normpath("/" + rest))
    local = path.split("://", 1)[1] if scheme == "file" else path
    try:
        info = os.stat(local)
    except (OSError, ValueError):  # absent, unreadable, or a name no file can have (a NUL byte)
        try:
            return ("path", os.path.realpath(local))
        except (OSError, ValueError):
            return ("path", local)
    return ("inode", info.st_dev, info.st_ino)


def _refuse_repeated_packs(packs: tuple, where: str) -> None:
    """The same pack in two ``packs`` entries would give each of its items twice an epoch while every report
    counted it once: refused, naming both entries, with the key that asks for it (``repeat: 2``)."""
    seen: dict[tuple, int] = {}
    for i, source in enumerate(packs):
        first = seen.setdefault(pack_identity(source.path), i)
        if first != i:
            spelled = (f"{packs[first].path!r}" if packs[first].path == source.path
                       else f"{packs[first].path!r} and {source.path!r}")
            raise ConfigError(f"{where}.packs[{first}] and {where}.packs[{i}] are the same pack ({spelled}): "
                              f"listed twice, each of its items would come twice an epoch; list it once, with "
                              f"repeat: 2 to read it twice an epoch")


def _check_packs_weighting(packs: Any, weighting: Weighting, where: str) -> None:
    """``packs`` is a non-empty sequence of ``PackSource`` whose weighting modes agree with ``weighting``."""
    if not isinstance(packs, tuple) or not packs or not all(isinstance(p, PackSource) for p in packs):
        raise ConfigError(f"{where}.packs: a non-empty list of {{path: ...}} is required")
    _refuse_repeated_packs(packs, where)
    if not isinstance(weighting, Weighting):
        raise ConfigError(f"{where}.weighting: expected a Weighting, got {type(weighting).__name__}")
    modes = {"weight" if p.weight is not None else "hours_beta" if p.hours_beta
             else "repeat/choose/none" for p in packs}
    if len(modes) > 1 and modes & {"weight", "hours_beta"}:
        raise ConfigError(f"{where}.packs: proportions are all or none: every entry sets weight, or every "
                          f"entry sets hours_beta: true, or none does (got {', '.join(sorted(modes))})")
    proportional = bool(modes & {"weight", "hours_beta"})
    if proportional and sum(p.weight or 0.0 for p in packs) <= 0 and "weight" in modes:
        raise ConfigError(f"{where}.packs: the weights sum to 0")
    if weighting.epoch_items is not None and not proportional:
        raise ConfigError(f"{where}.weighting.epoch_items: only with weight or hours_beta entries (with "
                          f"repeat/choose the epoch size is the sum of the packs' counts)")


@dataclass(frozen=True)
class LoaderConfig:
    """A checked loader config: ``packs``, the task's ``dataset_args``, ``weighting`` and ``task``.

    ``from_dict`` parses a config dict, or a WeSep recipe with ``packs`` added (``loader.recipe``: its
    ``dataloader_args``, ``val_dataset_args`` and ``sample_num_per_epoch``; trainer sections ignored and listed in
    ``ignored``), for one state, and names the key of any error by its path (``config.packs[1].weight``); an
    object built directly is checked on construction too, its keys named by field.
    """

    packs: tuple[PackSource, ...]
    #: The task's ``dataset_args`` dataclass (``DatasetArgs`` for ``tse``; see ``loader.tasks``).
    dataset_args: Any = field(default_factory=lambda: _default_dataset_args())
    #: ``weighting``: betas and epoch size of the packs' weighting (docs/loader.md "Weighting").
    weighting: Weighting = field(default_factory=Weighting)
    #: ``task``: ``tse`` (default), ``asd`` or ``asr`` (``loader.tasks``).
    task: str = DEFAULT_TASK
    #: ``dataloader_args``' DataLoader settings (``num_workers``, ``pin_memory``, ``prefetch_factor``).
    dataloader: DataLoaderArgs = field(default_factory=DataLoaderArgs)
    #: WeSep's ``sample_num_per_epoch``: 0, or the items of each epoch, drawn from the packs in their natural
    #: proportions (``loader.plan.weighting``: a small pack cycles, a large one is covered over several epochs).
    sample_num_per_epoch: int = 0
    #: Top-level sections of a recipe that belong to the trainer (ignored; listed in the loader's report).
    ignored: tuple[str, ...] = ()
    #: With ``val_dataset_args``, the states this config was read for (``loader.recipe.check_state``); else None.
    states: tuple[str, ...] | None = None
    #: The WeSep dialect a recipe was read as (``wesep-mainline``, ``wesep-contract``); None for a loader config.
    dialect: str | None = None
    #: ``verify_streams``: how the packs' stream files are checked against their sha256 when mapped
    #: (``loader.pack.content_check``: ``first-map``, ``every-open`` or ``off``; in a config also YAML's booleans,
    #: ``off``/``false`` for ``off`` and ``on``/``true`` for the default: ``verify_mode``).
    verify_streams: str = DEFAULT_VERIFY
    #: ``memory_limit``: the most bytes an epoch plan, or the batches in flight, may take (``loader.memory_limit``);
    #: None: half of the memory available when the loader starts.
    memory_limit: int | None = None
    #: ``cache``: the node cache URL packs are read through (``loader.cache.settings``); None: the defaults.
    cache: CacheSettings | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_task", task_of(check_type(self.task, str, "LoaderConfig.task"),
                                                  "LoaderConfig.task"))
        _check_packs_weighting(self.packs, self.weighting, "LoaderConfig")
        positive_int(self.sample_num_per_epoch, "LoaderConfig.sample_num_per_epoch", minimum=0,
                     maximum=MAX_EPOCH_ITEMS)
        _check_per_epoch(self.packs, self.sample_num_per_epoch, "LoaderConfig")
        check_choice(self.verify_streams, VERIFY_MODES, "LoaderConfig.verify_streams")
        if self.memory_limit is not None:
            positive_int(self.memory_limit, "LoaderConfig.memory_limit", maximum=1 << 62)

    @property
    def loader_task(self):
        """The task's ``LoaderTask`` (``loader.tasks``), looked up once, when the config was made."""
        return self._task

    def check_state(self, state: str) -> None:
        """``state`` is one this config was read for (its ``val_dataset_args`` merged or not as ``state`` needs)."""
        check_state(self.states, state)

    @property
    def weighted(self) -> bool:
        """Whether the epoch is weighted: a ``packs`` entry sets a weighting key, or ``sample_num_per_epoch`` sets
        its size (else every item once per epoch, as before)."""
        return self.sample_num_per_epoch > 0 or any(p.weighted for p in self.packs)

    @classmethod
    def from_dict(cls, obj: Any, where: str = "config", state: str = "train") -> "LoaderConfig":
        """``obj`` read for ``state`` (``val_dataset_args`` applies to ``val`` and ``test``).  Another tool's
        recipe (a top-level key of ``loader.tasks.FOREIGN_RECIPES``: Omnilingual's ``dataset:`` block) is translated
        key by key first, by its task (``LoaderTask.translate_config``).  Every key is checked once, here (the
        config is built without checking it again); the task is looked up once."""
        translator = None
        if isinstance(obj, dict):
            for key, name in FOREIGN_RECIPES.items():
                if key in obj:
                    translator = task_of(name)
                    obj = translator.translate_config(obj, where)
                    break
        recipe = read_recipe(obj, state, where)
        values = take_known(recipe.config, where, {"packs": None, "dataset_args": None, "weighting": None,
                                                   "task": DEFAULT_TASK, "verify_streams": DEFAULT_VERIFY,
                                                   "memory_limit": None, "cache": None})
        task_name = check_type(values["task"], str, f"{where}.task")
        loader_task = (translator if translator is not None and translator.name == task_name
                       else task_of(task_name, f"{where}.task"))
        packs = values["packs"]
        if not isinstance(packs, list) or not packs:
            raise ConfigError(f"{where}.packs: a non-empty list of {{path: ...}} is required")
        sources = tuple(PackSource.from_dict(p, f"{where}.packs[{i}]", weighting=True) for i, p in enumerate(packs))
        dataset_args = loader_task.parse_dataset_args(values["dataset_args"], f"{where}.dataset_args")
        weighting = Weighting.from_dict(values["weighting"], f"{where}.weighting")
        _check_packs_weighting(sources, weighting, where)
        _check_per_epoch(sources, recipe.sample_num_per_epoch, f"{where}.dataset_args")
        config = _held(cls, packs=sources, dataset_args=dataset_args, weighting=weighting, task=task_name,
                       dataloader=recipe.dataloader, sample_num_per_epoch=recipe.sample_num_per_epoch,
                       ignored=recipe.ignored, states=recipe.states, dialect=recipe.dialect,
                       verify_streams=verify_mode(values["verify_streams"], f"{where}.verify_streams"),
                       memory_limit=_memory_limit(values["memory_limit"], f"{where}.memory_limit"),
                       cache=(None if values["cache"] is None
                              else CacheSettings.from_dict(values["cache"], f"{where}.cache")))
        object.__setattr__(config, "_task", loader_task)
        return config


def _check_per_epoch(packs: tuple[PackSource, ...], per_epoch: int, where: str) -> None:
    """``sample_num_per_epoch`` sizes an unweighted epoch; with weighted ``packs`` entries, their own rules do."""
    if per_epoch and any(p.weighted for p in packs):
        raise ConfigError(f"{where}.sample_num_per_epoch: {per_epoch} with weighted packs entries; set the epoch "
                          f"size with weighting.epoch_items (weight/hours_beta) or choose/repeat instead")


#: ``verify_streams`` written as a YAML boolean: YAML 1.1 (PyYAML) reads ``off``/``no``/``false`` as False and
#: ``on``/``yes``/``true`` as True, so the unquoted ``off`` of docs/loader.md arrives as False.  True turns the
#: check on as the default does.
VERIFY_BOOLEANS = {False: VERIFY_OFF, True: DEFAULT_VERIFY}


def verify_mode(value: Any, where: str) -> str:
    """``verify_streams`` as one of ``VERIFY_MODES``: a mode's name, or a YAML boolean (``VERIFY_BOOLEANS``)."""
    if isinstance(value, bool):
        return VERIFY_BOOLEANS[value]
    return check_choice(value, VERIFY_MODES, where)


def _memory_limit(value: Any, where: str) -> int | None:
    """``memory_limit`` as bytes: an int, or a size such as ``48GiB`` (``schemas.units.parse_size``)."""
    try:
        return memory_limit_bytes(value, where)
    except MemoryLimitError as err:
        raise ConfigError(str(err)) from None


def _default_dataset_args() -> Any:
    """The default task's ``dataset_args`` with every default."""
    return task_of(DEFAULT_TASK).parse_dataset_args(None, "dataset_args")


def loader_fingerprint(config: LoaderConfig, state: str, packs: list[Pack], order: dict | None = None) -> str:
    """Hash of the packs' manifests and ``dataset_args``: a state only resumes the loader it came from.

    Pack paths are left out on purpose, so a state still resumes after the packs are copied to node-local disk
    (or read from a store).  ``order`` is what a plan option outside ``dataset_args`` would change (none does
    now: the shard-window order is ``dataset_args.shard_window``); empty or None leaves the hash as before.
    """
    digest = hashlib.sha256()
    loader_task = config.loader_task
    args = loader_task.fingerprint_args(asdict(config.dataset_args))  # keys added later left out while unset
    identity = {"dataset_args": args, "state": state}
    if loader_task.fingerprint_names_task:
        identity["task"] = config.task
    identity.update(order or {})
    digest.update(json.dumps(identity, sort_keys=True, default=str).encode())
    if config.weighted:  # hashed only when set, so older states still resume; paths left out as below
        weights = [{k: v for k, v in asdict(p).items() if k != "path" and not (k == "split" and v is None)}
                   for p in config.packs]
        weighted = {"packs": weights, "weighting": asdict(config.weighting)}
        if config.sample_num_per_epoch:
            weighted["sample_num_per_epoch"] = config.sample_num_per_epoch
        digest.update(json.dumps(weighted, sort_keys=True).encode())
    for pack in packs:  # the manifest the pack was opened from (a directory's or a store's: no path is read)
        digest.update(bytes.fromhex(pack.opened.manifest_sha256))
    return digest.hexdigest()[:16]


#: Messages (of one or more batches: ``loader.transport.message_groups``) each worker prepares ahead of the training loop.
PREFETCH_PER_WORKER = 2


def dataloader_settings(config: LoaderConfig, num_workers: int | None = None,
                        prefetch_factor: int | None = None) -> dict:
    """The DataLoader's workers and per-worker prefetch, and where each came from.  Explicit arguments win; then a
    WeSep recipe's ``dataloader_args``; then the task's own keys (``LoaderTask.dataloader_defaults``: workers, and
    batches waiting in total, so ``ceil(total / workers)`` per worker); else 0 workers and
    ``PREFETCH_PER_WORKER``.  Without workers nothing is prefetched: batches are built in the training process."""
    loader_args = config.dataloader
    (task_workers, workers_key), (task_prefetch, prefetch_key) = config.loader_task.dataloader_defaults(
        config.dataset_args)
    if num_workers is not None:
        workers, source = num_workers, "num_workers"
    elif loader_args.num_workers is not None:
        workers, source = loader_args.num_workers, "dataloader_args.num_workers"
    elif task_workers is not None:
        workers, source = task_workers, workers_key
    else:
        workers, source = 0, "default"
    workers = integer(workers, "num_workers", 0, MAX_WORKERS)
    if workers == 0:
        prefetch, prefetch_source = None, "none without workers"
    elif prefetch_factor is not None:
        prefetch, prefetch_source = prefetch_factor, "prefetch_factor"
    elif loader_args.prefetch_factor is not None:
        prefetch, prefetch_source = loader_args.prefetch_factor, "dataloader_args.prefetch_factor"
    elif task_prefetch is not None:
        prefetch, prefetch_source = max(1, -(-task_prefetch // workers)), prefetch_key
    else:
        prefetch, prefetch_source = PREFETCH_PER_WORKER, "default"
    if prefetch is not None:
        prefetch = integer(prefetch, "prefetch_factor", 1, MAX_PREFETCH)
    return {"num_workers": workers, "workers_from": source, "prefetch_factor": prefetch,
            "prefetch_from": prefetch_source}


__all__ = ["MAX_BETA", "PREFETCH_PER_WORKER", "STATES", "VERIFY_BOOLEANS", "WEIGHT_KEYS", "ConfigError",
           "LoaderConfig", "PackSource", "Weighting", "dataloader_settings", "loader_fingerprint", "pack_identity",
           "verify_mode"]
