"""The task registry: the one place the generic loader names its tasks (task name -> the module implementing it).

A loader config names its task (``task: tse|asd|asr``, default ``tse``).  The task's module holds ``TASK``, a
``loader.tasks.LoaderTask`` that parses ``dataset_args`` and turns the opened packs into a batch builder (a
``loader.tasks.BatchBuilder``); ``loader.torch.SpeechLoader`` does everything else the same way for every task
(planning, dealing batches to ranks and workers, resume state, weighting).  Task modules are imported when a config
names them (``importlib``), so the generic loader imports no task package.

``prepare`` calls the task's ``prepare`` and adds the packs' weighting when the task has none of its own: what the
training loader (``loader.torch``) and the dry run (``loader.plan.planning_report``) both start from, without
torch.  A new task is registered with ``register_task`` (docs/extending.md, "A loader task").

The two contracts between the generic loader and a task: ``BatchBuilder`` (what the loader calls on a task's
batch builder: what a plan needs, ``plan_args``, ``units`` (``PlanUnits``), ``check_plan``, ``dry_run``
(``DryRunView``); what a batch needs, ``build``/``build_block``, ``augment_batch``, ``sample_rate``, ``tokenizer``) and
``LoaderTask`` (what it calls on the task itself), each hook with its default, documented here once
(docs/extending.md, "A loader task").

In the spirit of Grain's ``Map``/``RandomMap`` transforms (one base class, one required method, the rest optional
with a stated default): a task subclasses both, overrides what it needs, and the generic modules
(``loader.torch``, ``loader.plan``, ``loader.peek``, ``loader.config``, ``loader.config.loader_fingerprint``) call the hooks
directly, never ``getattr(builder, name, default)``.  Which tasks exist is the registry above (task name -> module
path); the generic loader names no task anywhere else.

Randomness: a builder draws only from the counter-based generators of ``loader.rng``, keyed by (seed, epoch,
global batch[, position]), so a batch is the same whichever worker builds it, with any ``num_workers`` and after a
resume.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any, Callable, Iterator

import numpy as np

from speechpack.loader.config_checks import MAX_SEED, ConfigError, integer
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays
from speechpack.loader.plan.weighting import PackWeighting

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
FOREIGN_RECIPES = {"dataset": "asr"}
#: Task -> the module that recognises the dialects of its tool's training recipes, read before a config of that
#: task is parsed: ``read_dialect(obj, state, where) -> (obj as the loader reads it, dialect or None)``.  Imported
#: when a recipe is read, so it is kept light (no audio, no torch): mainline WeSep recipes for ``tse``.
DIALECT_READERS = {"tse": "speechpack.loader.tse.mainline"}


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


def read_dialect(obj: Any, state: str, where: str = "config") -> tuple[Any, str | None]:
    """``obj`` as the loader reads it for ``state``, and the recipe dialect that the reader of the config's task
    (its ``task:``, else ``DEFAULT_TASK``; ``DIALECT_READERS``) recognised in it (None: a plain loader config).
    Only that task's reader looks: an ``asd`` config is never read as a WeSep recipe."""
    name = obj.get("task", DEFAULT_TASK) if isinstance(obj, dict) else DEFAULT_TASK
    module = DIALECT_READERS.get(name) if isinstance(name, str) else None  # a bad task is refused when parsed
    if module is None:
        return obj, None
    return importlib.import_module(module).read_dialect(obj, state, where)


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
    loader_task = config.loader_task
    prepared = loader_task.prepare(config, state, packs, seed)
    if prepared.weighting is None and config.weighted:
        sizes = np.bincount(prepared.item_pack, minlength=len(packs))
        hours = [float(p.manifest.totals["hours"]) for p in packs]
        prepared = replace(prepared, weighting=PackWeighting.resolve(config, sizes, hours))
    return prepared


@dataclass(frozen=True)
class PlanArgs:
    """A task's planning view (``BatchBuilder.plan_args``), what ``loader.plan.plan_epoch`` reads.

    ``batching``: None (static batches of ``batch_size``) or a ``loader.plan.batching.BudgetArgs``;
    ``shuffle_windows``: None (the items and the batches shuffled whole) or fairseq2 windows
    (``loader.plan.static_plan.ShuffleWindows``); ``sync``: None (as ``tail``) or ``pad``/``drop``, how the
    batch count is evened across ranks on its own."""

    batch_size: int
    batching: Any
    shuffle: bool
    tail: str
    shuffle_windows: Any = None
    sync: str | None = None


def _no_samples() -> None:
    """``PlanUnits.samples`` of a task that does not say which pack samples its units read."""
    return None


@dataclass(frozen=True)
class PlanUnits:
    """What an epoch plan deals (``BatchBuilder.units``), known before any audio is read.

    ``count``: the units (items, or train-window chunks); ``lengths(epoch)``: per unit, the row length its batch will
    have (budget batching plans with it; the dry run reports it), the same every epoch unless ``lengths_by_epoch``
    (ASD chunks with MuVAP's ``jitter``: the loader then asks each epoch instead of keeping the first answer);
    ``train_windows``: the chunks (``loader.plan.train_windows.TrainWindows``) when the units are chunks of items,
    else None; ``samples()``: ``(pack id, sample)`` of every unit, so the node cache (``loader.cache.schedule``)
    knows the files each planned batch needs before the epoch starts (None: it fetches on demand and evicts the
    oldest entries first; a task with an item index gives ``index_samples(index.pack, index.sample,
    train_windows)``)."""

    count: int
    lengths: Callable[[int], np.ndarray]
    lengths_by_epoch: bool = False
    train_windows: Any = None
    samples: Callable[[], tuple[np.ndarray, np.ndarray] | None] = _no_samples


@dataclass(frozen=True)
class DryRunView:
    """What the dry run (``speechpack plan``, ``loader.plan.planning_report``) reads of a task beyond its plan
    (``BatchBuilder.dry_run``): ``rows``, per unit the rows the loader yields for it (None: one row per unit; TSE: a
    mixture gives one row per target speaker); ``crops_to_shortest``, whether a batch crops its rows to the shortest
    (ASD training) rather than padding them to the longest, so utilisation counts the frames kept; ``batch_check``,
    a check of each planned batch before any audio is read, so ``speechpack plan`` fails where training would:
    called as ``check(units, epoch=, rank=, batch=, batches=)``, it raises a ``SpeechpackError`` naming the batch
    (None: every planned batch can be built; TSE: mixtures of different channel counts)."""

    rows: np.ndarray | None = None
    crops_to_shortest: bool = False
    batch_check: Callable[..., None] | None = None


class BatchBuilder:
    """What the generic loader calls on a task's batch builder: what a plan needs and what a batch needs.

    What a plan needs (the epoch plan, the dry run, the node cache's schedule; no audio read): ``plan_args`` (the
    planning view), ``units`` (a ``PlanUnits``: required), ``check_plan`` and ``dry_run`` (a ``DryRunView``).
    What a batch needs (the workers, the training process): ``build_block`` or ``build`` (required: each defaults
    to the other), ``augment_batch``, ``sample_rate`` and ``tokenizer``.  Every hook but the required ones has the
    default written here; ``plan_args`` 's reads the builder's ``args`` (the task's ``dataset_args`` for the state,
    with ``batch_size``, ``batching``, ``shuffle`` and ``tail``) and ``sample_rate`` 's its ``packs``.

    A builder is pickled to each DataLoader worker: keep what it holds picklable (open packs are), and let reused
    scratch memory pickle empty.
    """

    #: The tokenizer batches' token ids come from (``SpeechLoader.tokenizer``); None for tasks without text.
    tokenizer: Any = None

    @property
    def units(self) -> PlanUnits:
        """Required: what the plan deals (``PlanUnits``)."""
        raise NotImplementedError(f"{type(self).__name__} does not say what its plan deals (units)")

    def build(self, items: np.ndarray, valid: np.ndarray, epoch: int, global_batch: int,
              arrays: BatchArrays = NUMPY) -> dict:
        """Required unless ``build_block`` is given (then: its one batch): one collated batch (numpy arrays and
        lists) of the units ``items``; ``valid`` flags real rows (False: a tail repeat); ``global_batch`` keys the
        batch's random streams.  The arrays the batch returns are made by ``arrays``
        (``loader.transport.batch_arrays.BatchArrays``: a DataLoader worker's shared-memory slot, the batch then
        travels without a copy; ``NUMPY`` in one process)."""
        if type(self).build_block is BatchBuilder.build_block:
            raise NotImplementedError(f"{type(self).__name__} defines neither build nor build_block")
        (batch,) = self.build_block([(items, valid, epoch, global_batch)], arrays)
        return batch

    def build_block(self, batches: list[tuple[np.ndarray, np.ndarray, int, int]],
                    arrays: BatchArrays = NUMPY) -> Iterator[dict]:
        """Several consecutive batches (``build``'s first arguments each), their arrays made by ``arrays``, yielded
        one by one as they are asked for.  Default: ``build`` each.  A task that can share work across batches
        gives this instead of ``build`` (TSE gathers their window table together); the batches must be the same as
        built one at a time."""
        return (self.build(*batch, arrays) for batch in batches)

    @property
    def plan_args(self) -> PlanArgs:
        """The planning view of ``args``.  Default: static or budget batches, whole-epoch shuffles, ranks evened
        as ``tail`` says; a task with its own shuffles or rank rule overrides it (ASR)."""
        args = self.args
        return PlanArgs(batch_size=args.batch_size, batching=args.batching, shuffle=args.shuffle, tail=args.tail)

    def check_plan(self, plan, world_size: int) -> None:
        """A check of the first epoch's plan (``loader.plan.EpochPlan`` of this rank) when a loader starts: raise a
        ``SpeechpackError`` for a plan the task's trainer cannot use, so it fails at start, not after an epoch.
        Default: none.  (A mainline WeSep recipe: a val plan without a full batch.)"""

    def dry_run(self) -> DryRunView:
        """What the dry run reads beyond the plan (``DryRunView``).  Default: one row per unit, padded batches,
        every planned batch buildable."""
        return DryRunView()

    @property
    def sample_rate(self) -> int:
        """The rate of the batches' audio (``speechpack peek --save-wavs``).  Default: the first pack's."""
        return int(self.packs[0].sample_rate)

    def augment_batch(self, batch: dict) -> dict:
        """What the training process applies to a delivered batch, on whatever device it has moved it to
        (``SpeechLoader.augment``).  Default: the batch as it is.  (TSE with ``augment_on: batch``: online
        mixtures reverberated, noised and mixed in torch.)"""
        return batch


def index_samples(pack: np.ndarray, sample: np.ndarray, train_windows: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``PlanUnits.samples`` of an item index (per item: its pack and sample), through train-window chunks (each
    chunk reads its item) when the plan deals chunks."""
    pack, sample = np.asarray(pack, dtype=np.int64), np.asarray(sample, dtype=np.int64)
    if train_windows is not None:
        pack, sample = pack[train_windows.item], sample[train_windows.item]
    return pack, sample


@dataclass(frozen=True)
class Prepared:
    """What a task hands to the loader: the batch builder, the pack of every item (for weighting), how many items
    the filters removed, per reason (reported, never silently lost), and the task's own weighting when it weighs
    something other than packs (ASR: (corpus, language) groups inside the packs); None lets the loader weigh
    packs as the config's ``packs`` entries say."""

    builder: BatchBuilder
    item_pack: np.ndarray
    filtered: int = 0
    filter_report: dict[str, int] = field(default_factory=dict)
    weighting: Any = None


class LoaderTask:
    """What the generic loader calls on a task (the object ``TASK`` of the module ``loader.tasks`` registers).
    Required: ``name``, ``parse_dataset_args`` and ``prepare``; every other hook has the default written here."""

    #: Required: the name a config's ``task:`` gives.
    name: str = ""
    #: Whether the resume fingerprint hashes the task's name (``loader.config``).  The first task (tse) was
    #: hashed without it, and its states still resume.
    fingerprint_names_task: bool = True

    def parse_dataset_args(self, obj: Any, where: str) -> Any:
        """Required: ``dataset_args`` (a dict or None) -> a frozen dataclass; unknown keys raise ``ConfigError``
        naming the key."""
        raise NotImplementedError

    def prepare(self, config, state: str, packs: list, seed: int) -> Prepared:
        """Required: the builder for ``state`` over ``packs`` and what the filters removed."""
        raise NotImplementedError

    def translate_config(self, obj: dict, where: str) -> dict:
        """Another tool's recipe (``loader.tasks.FOREIGN_RECIPES`` says which top-level key marks it) -> a loader
        config dict of this task.  Default: the config as it is."""
        return obj

    def fingerprint_args(self, args: dict) -> dict:
        """``dataset_args`` (as a dict) as the resume fingerprint hashes them.  Default: every key.  A task whose
        keys are declared returns its table's ``fingerprint(args)`` (``loader.config_keys``: keys added later hashed
        while set, fetch-only keys never, older spellings kept), as TSE, ASD and ASR do."""
        return args

    def dataloader_defaults(self, args: Any) -> tuple[tuple[int | None, str], tuple[int | None, str]]:
        """``((workers, key), (batches prefetched in total, key))`` that a task's ``dataset_args`` ask for when
        neither the caller nor a recipe's ``dataloader_args`` do, each with the key it came from (reported in
        ``LoaderReport.dataloader``).  Default: neither (0 workers, ``PREFETCH_PER_WORKER``)."""
        return (None, ""), (None, "")


__all__ = ["BatchBuilder", "DEFAULT_TASK", "DryRunView", "LoaderTask", "PlanArgs", "PlanUnits", "Prepared", "DIALECT_READERS", "FOREIGN_RECIPES",
           "STATES", "TASK_MODULES", "index_samples", "prepare", "read_dialect", "register_task", "task",
           "task_module"]
