"""Loader tasks: what a pack kind needs between the epoch plan and a collated batch.

A loader config names its task (``task: tse|asd|asr``, default ``tse``).  The task's module parses
``dataset_args`` and turns the opened packs into a batch builder; ``loader.torch.SpeechLoader`` does everything
else the same way for every task (planning, dealing batches to ranks and workers, resume state, weighting).

A task module provides:

``parse_dataset_args(obj, where)``
    ``dataset_args`` (a dict or None) -> a frozen dataclass; unknown keys raise ``ConfigError`` naming the key.
``prepare(config, state, packs, seed) -> Prepared``
    the builder for ``state`` and what the filters removed.

``loader.tasks.prepare`` calls the task's ``prepare`` and adds the packs' weighting when the task has none of its
own: what the training loader (``loader.torch``) and the dry run (``loader.plan.planning_report``) both start from,
without torch.

A builder provides ``args`` (with ``batch_size``, ``batching``, ``shuffle``, ``tail``), ``windows`` (a
``loader.plan.train_windows.Windows`` or None), ``num_units()``, ``unit_lengths()`` and ``build(items, valid, epoch,
global_batch) -> dict`` (numpy arrays and lists; randomness only from the counter-based generators of
``loader.plan`` / ``loader.tse.mixing``, so a batch is the same whichever worker builds it).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

import numpy as np

from speechpack.loader.config_checks import MAX_SEED, ConfigError, integer
from speechpack.loader.plan.weighting import PackWeighting

#: What a loader is built for (``build_loader(config, state)``).
STATES = ("train", "val", "test")

#: Task name -> the module that implements it.
TASK_MODULES = {
    "tse": "speechpack.loader.tse.task",
    "asd": "speechpack.loader.asd.task",
    "asr": "speechpack.loader.asr.task",
}
DEFAULT_TASK = "tse"


@dataclass(frozen=True)
class Prepared:
    """What a task hands to the loader: the batch builder, the pack of every item (for weighting), how many items
    the filters removed, per reason (reported, never silently lost), and the task's own weighting when it weighs
    something other than packs (ASR: (corpus, language) groups inside the packs); None lets the loader weigh
    packs as the config's ``packs`` entries say."""

    builder: Any
    item_pack: np.ndarray
    filtered: int = 0
    filter_report: dict[str, int] = field(default_factory=dict)
    weighting: Any = None


def task_module(name: str, where: str = "config.task") -> ModuleType:
    """The module of task ``name``."""
    if name not in TASK_MODULES:
        raise ConfigError(f"{where}: {name!r} is not one of {', '.join(TASK_MODULES)}")
    return importlib.import_module(TASK_MODULES[name])


def prepare(config, state: str, packs: list, seed: int) -> Prepared:
    """The task's ``Prepared`` for ``state`` with its ``weighting`` resolved: the task's own, else the packs' as
    the config's ``packs`` entries say (None when no entry weighs)."""
    if state not in STATES:
        raise ConfigError(f"state must be one of {', '.join(STATES)}, got {state!r}")
    seed = integer(seed, "seed", 0, MAX_SEED)
    config.check_state(state)
    prepared = task_module(config.task).prepare(config, state, packs, seed)
    if prepared.weighting is None and config.weighted:
        sizes = np.bincount(prepared.item_pack, minlength=len(packs))
        hours = [float(p.manifest.totals["hours"]) for p in packs]
        prepared = replace(prepared, weighting=PackWeighting.resolve(config, sizes, hours))
    return prepared
