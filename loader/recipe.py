"""A WeSep training config (a "recipe" YAML with ``packs:`` added) read as a loader config, unchanged.

A WeSep recipe holds the data sections a loader reads next to the sections its trainer reads.  This module sorts
them, before ``loader.config.LoaderConfig`` checks the data sections key by key (docs/wesep.md "Bring your recipe"):

- ``dataloader_args`` {batch_size, drop_last, num_workers, pin_memory, prefetch_factor}: ``batch_size`` is the
  mixtures per batch (``dataset_args.batch_size``), ``drop_last: true`` leaves the epoch's incomplete last round
  out (``dataset_args.tail: drop``; ``false`` is ``tail: pad``), and the other three configure the DataLoader that
  ``build_loader`` returns (``DataLoaderArgs``; arguments passed to ``build_loader`` win);
- ``val_dataset_args`` is deep-merged over ``dataset_args`` for ``val`` and ``test``, as WeSep's ``train.py`` does
  (mappings merge key by key, any other value replaces);
- ``dataset_args.sample_num_per_epoch`` (WeSep's epoch size; 0 means the data's size) becomes the loader's
  ``sample_num_per_epoch``: N > 0 makes each epoch N items drawn from the packs in their natural proportions;
- every other top-level key (``model``, ``model_args``, ``loss``, ``optimizer``, ``scheduler``, ``gpus``,
  ``exp_dir``, ``seed`` ...) belongs to the trainer: ignored, and listed once in the loader's report.  A key that
  is a near miss of a loader section (``datset_args``) is an error naming the section, so a typo never silently
  drops data settings.  Unknown keys *inside* the data sections stay errors (their parsers refuse them).

Nothing here reads a pack: the result is a plain dict for ``LoaderConfig`` plus what the loader needs besides.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from typing import Any

from speechpack.loader.config_checks import MAX_EPOCH_ITEMS, ConfigError, check_type, positive_int, take_known
from speechpack.loader.tasks import read_dialect
from speechpack.schemas.documents import MAX_DEPTH

#: Top-level sections the loader reads (``LoaderConfig`` keys, then WeSep's data sections).
CONFIG_KEYS = ("packs", "dataset_args", "weighting", "task", "verify_streams", "memory_limit", "cache")
RECIPE_KEYS = ("dataloader_args", "val_dataset_args")
#: A top-level key at least this similar to a loader section (``difflib`` ratio) is taken for a typo of it.
TYPO_CUTOFF = 0.8
#: States that read ``val_dataset_args`` merged over ``dataset_args`` (WeSep's train.py for validation).
VAL_STATES = ("val", "test")
TRAIN_STATES = ("train",)
#: ``dataloader_args.prefetch_factor`` bound: batches a worker prepares ahead.
MAX_PREFETCH = 1024
#: ``dataloader_args.num_workers`` bound (DataLoader worker processes).
MAX_WORKERS = 1024


@dataclass(frozen=True)
class DataLoaderArgs:
    """``dataloader_args`` of a recipe that configure the DataLoader (``None``: speechpack's default).  Arguments
    given to ``build_loader`` win over these."""

    num_workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None

    def __post_init__(self) -> None:
        _check_dataloader(self.num_workers, self.pin_memory, self.prefetch_factor, "DataLoaderArgs")


def _check_dataloader(num_workers: Any, pin_memory: Any, prefetch_factor: Any, where: str) -> None:
    if num_workers is not None:
        positive_int(num_workers, f"{where}.num_workers", minimum=0, maximum=MAX_WORKERS)
    if pin_memory is not None:
        check_type(pin_memory, bool, f"{where}.pin_memory")
    if prefetch_factor is not None:
        positive_int(prefetch_factor, f"{where}.prefetch_factor", maximum=MAX_PREFETCH)


@dataclass(frozen=True)
class Recipe:
    """A config sorted for one state: ``config`` is what ``LoaderConfig`` parses (``packs``, the state's
    ``dataset_args``, ``weighting``, ``task``), the rest is what the loader needs besides it."""

    config: dict
    dataloader: DataLoaderArgs
    #: 0 or the items of each epoch (``dataset_args.sample_num_per_epoch``).
    sample_num_per_epoch: int
    #: The trainer's top-level sections, in file order: ignored, reported once.
    ignored: tuple[str, ...]
    #: With ``val_dataset_args``: the states this reading serves (``TRAIN_STATES`` or ``VAL_STATES``); else None.
    states: tuple[str, ...] | None = None
    #: Which WeSep dialect the recipe was read as (``loader.tasks.read_dialect``: ``wesep-mainline``, ``wesep-contract``); None for a loader config.
    dialect: str | None = None


def deep_merge(base: Any, over: Any, depth: int = 0) -> Any:
    """``over`` merged into a copy of ``base``: mappings key by key (recursively), any other value replaces.

    Mappings nested deeper than ``schemas.documents.MAX_DEPTH`` are refused: YAML files are bounded when read, and
    a mapping built in code that contains itself would otherwise recurse until ``RecursionError``."""
    if depth > MAX_DEPTH:
        raise ConfigError(f"val_dataset_args: mappings nested more than {MAX_DEPTH} levels deep (one that contains "
                          f"itself?)")
    if not isinstance(base, dict) or not isinstance(over, dict):
        return copy.deepcopy(over)
    merged = copy.deepcopy(base)
    for key, value in over.items():
        merged[key] = deep_merge(merged[key], value, depth + 1) if key in merged else copy.deepcopy(value)
    return merged


def read_recipe(obj: Any, state: str, where: str = "config") -> Recipe:
    """Sort a loader config or a WeSep recipe (``obj``, a dict) for ``state``; errors name the key's path."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping with packs and dataset_args, got {type(obj).__name__}")
    obj, read_as = read_dialect(obj, state, where)  # a task's own recipe dialects (mainline WeSep: translated)
    known = (*CONFIG_KEYS, *RECIPE_KEYS)
    ignored = []
    for key in obj:
        if key in known:
            continue
        near = difflib.get_close_matches(str(key), known, n=1, cutoff=TYPO_CUTOFF)
        if near:
            raise ConfigError(f"{where}: unknown key {key!r} (did you mean {near[0]}?)")
        ignored.append(str(key))
    args = obj.get("dataset_args")
    if args is not None and not isinstance(args, dict):
        raise ConfigError(f"{where}.dataset_args: expected a mapping, got {type(args).__name__}")
    args = dict(args or {})
    val = obj.get("val_dataset_args")
    if val is not None and not isinstance(val, dict):
        raise ConfigError(f"{where}.val_dataset_args: expected a mapping, got {type(val).__name__}")
    if state in VAL_STATES and val:
        args = deep_merge(args, val)
    per_epoch = args.pop("sample_num_per_epoch", 0)
    per_epoch = positive_int(per_epoch if per_epoch is not None else 0, f"{where}.dataset_args.sample_num_per_epoch",
                             minimum=0, maximum=MAX_EPOCH_ITEMS)
    loader_args = take_known(obj.get("dataloader_args"), f"{where}.dataloader_args",
                             {"batch_size": None, "drop_last": None, "num_workers": None, "pin_memory": None,
                              "prefetch_factor": None})
    _fold(args, "batch_size", loader_args["batch_size"], where, lambda v: v)
    if loader_args["drop_last"] is not None:
        check_type(loader_args["drop_last"], bool, f"{where}.dataloader_args.drop_last")
        _fold(args, "tail", loader_args["drop_last"], where, lambda v: "drop" if v else "pad", source="drop_last")
    _check_dataloader(loader_args["num_workers"], loader_args["pin_memory"], loader_args["prefetch_factor"],
                      f"{where}.dataloader_args")
    config = {key: obj[key] for key in CONFIG_KEYS if key in obj}
    config["dataset_args"] = args
    return Recipe(config=config,
                  dataloader=DataLoaderArgs(num_workers=loader_args["num_workers"],
                                            pin_memory=loader_args["pin_memory"],
                                            prefetch_factor=loader_args["prefetch_factor"]),
                  sample_num_per_epoch=per_epoch, ignored=tuple(ignored),
                  states=None if not val else VAL_STATES if state in VAL_STATES else TRAIN_STATES, dialect=read_as)


def ignored_line(keys) -> str:
    """The one line that lists a recipe's trainer sections (``speechpack plan`` and ``peek``)."""
    return f"ignored (trainer sections of the recipe): {', '.join(keys)}"


def check_state(states: tuple[str, ...] | None, state: str) -> None:
    """A config read for some states (``Recipe.states``) is used for one of them, so ``val_dataset_args`` are
    never silently left out (or in)."""
    if states is not None and state not in states:
        raise ConfigError(f"this config was read for {'/'.join(states)} and has val_dataset_args, which apply to "
                          f"val and test only: read it for {state!r} (LoaderConfig.from_dict(obj, state={state!r}), "
                          f"or pass the dict to build_loader)")


def _fold(args: dict, key: str, value: Any, where: str, convert, source: str | None = None) -> None:
    """Put ``dataloader_args.<source>`` (as ``convert(value)``) into ``dataset_args.<key>``; both given and
    different is an error naming both."""
    if value is None:
        return
    source = source or key
    wanted = convert(value)
    if key in args and args[key] != wanted:
        raise ConfigError(f"{where}.dataloader_args.{source}: {value!r} disagrees with dataset_args.{key} "
                          f"{args[key]!r}; set one of them")
    args[key] = wanted


__all__ = ["DataLoaderArgs", "Recipe", "check_state", "deep_merge", "ignored_line", "read_recipe"]
