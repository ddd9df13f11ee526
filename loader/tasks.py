"""The task registry: the one place the generic loader names its tasks (task name -> the module implementing it).

A loader config names its task (``task: tse|asd|asr``, default ``tse``).  The task's module holds ``TASK``, a
``loader.task.LoaderTask`` that parses ``dataset_args`` and turns the opened packs into a batch builder (a
``loader.task.BatchBuilder``); ``loader.torch.SpeechLoader`` does everything else the same way for every task
(planning, dealing batches to ranks and workers, resume state, weighting).  Task modules are imported when a config
names them (``importlib``), so the generic loader imports no task package.

``prepare`` calls the task's ``prepare`` and adds the packs' weighting when the task has none of its own: what the
training loader (``loader.torch``) and the dry run (``loader.plan.planning_report``) both start from, without
torch.  A new task is registered with ``register_task`` (docs/extending.md, "A loader task").
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from types import ModuleType

import numpy as np

from speechpack.loader.config_checks import MAX_SEED, ConfigError, integer
from speechpack.loader.plan.weighting import PackWeighting
from speechpack.loader.task import LoaderTask, Prepared

#: What a loader is built for (``build_loader(config, state)``).
STATES = ("train", "val", "test")

#: Task name -> the module that implements it (its ``TASK``).
TASK_MODULES = {
    "tse": "speechpack.loader.tse.task",
    "asd": "speechpack.loader.asd.task",
    "asr": "speechpack.loader.asr.task",
}
DEFAULT_TASK = "tse"
#: A top-level key that marks another tool's recipe -> the task that translates it into a loader config
#: (``LoaderTask.translate_config``): Omnilingual ASR's ``dataset:`` block.
RECIPE_KEYS = {"dataset": "asr"}


def register_task(name: str, module: str) -> None:
    """Make ``task: name`` build loaders with the ``TASK`` of ``module`` (a dotted module path, imported when a
    config first names the task)."""
    if not isinstance(name, str) or not name or not isinstance(module, str) or not module:
        raise ValueError(f"register_task: a task name and a module path are required, got {name!r}, {module!r}")
    if name in TASK_MODULES and TASK_MODULES[name] != module:
        raise ValueError(f"register_task: task {name!r} is {TASK_MODULES[name]} already")
    TASK_MODULES[name] = module


def task_module(name: str, where: str = "config.task") -> ModuleType:
    """The module of task ``name``."""
    if name not in TASK_MODULES:
        raise ConfigError(f"{where}: {name!r} is not one of {', '.join(TASK_MODULES)}")
    return importlib.import_module(TASK_MODULES[name])


def task(name: str, where: str = "config.task") -> LoaderTask:
    """The ``LoaderTask`` of task ``name``."""
    return task_module(name, where).TASK


def prepare(config, state: str, packs: list, seed: int) -> Prepared:
    """The task's ``Prepared`` for ``state`` with its ``weighting`` resolved: the task's own, else the packs' as
    the config's ``packs`` entries say (None when no entry weighs)."""
    if state not in STATES:
        raise ConfigError(f"state must be one of {', '.join(STATES)}, got {state!r}")
    seed = integer(seed, "seed", 0, MAX_SEED)
    config.check_state(state)
    loader_task = task(config.task)
    prepared = loader_task.prepare(config, state, packs, seed)
    if prepared.weighting is None and config.weighted:
        loader_task.check_weighting(config)
        sizes = np.bincount(prepared.item_pack, minlength=len(packs))
        hours = [float(p.manifest.totals["hours"]) for p in packs]
        prepared = replace(prepared, weighting=PackWeighting.resolve(config, sizes, hours))
    return prepared


__all__ = ["DEFAULT_TASK", "RECIPE_KEYS", "STATES", "TASK_MODULES", "prepare", "register_task", "task",
           "task_module"]
