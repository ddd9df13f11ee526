"""The torch glue: ``build_loader`` wraps the epoch plan (``loader.plan.plan_epoch``) and the task's batch builder
(``loader.tasks.prepare``) in a DataLoader, caching one epoch's plan per process.  Besides this module, only the
ASR modules that compute in torch (``loader/asr/``: ``features`` and ``task``) and TSE's augmentation where training
runs (``loader.tse.batch_augment``) import it; ``schemas/``, ``packer/`` and the rest of ``loader/`` never do
(tests/project/test_layers.py checks it).

How the pieces fit:
- a sampler in the main process yields ``(epoch, start, stop, global_start)`` keys, consecutive batches of the
  epoch starting where a resumed run left off, several per key when workers build them
  (``loader.transport.message_groups``: why and how many); ``global_start`` is the global batch the pass is dealt
  from (0 unless it resumed a resume state saved at another world size: ``loader.resume``);
- DataLoader workers receive the keys round-robin (``batch_size=None``: batch-level fetch) and build the batches
  from the plan, which they recompute from (seed, epoch) on first use: nothing about the epoch lives in worker
  state, so persistent workers follow ``set_epoch`` and any ``num_workers`` gives the same batches;
- ``SpeechLoader`` hands the batches out one by one and counts them, which is the whole resume state
  (``loader.resume``); a speechpack error in a worker reaches the training loop as itself (``WorkerFailure``);
- a worker builds each message's batches into a slot of shared memory it reuses (``loader.transport.batch_ring``; its
  lifetime rule says how long a batch's tensors stay valid: as long as they are referenced), and the training
  process wraps the slot in place: no per-batch shared-memory segment, no copy.
"""

from __future__ import annotations

import gc
import pickle
import warnings
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from speechpack.loader.transport import batch_ring, message_groups
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays
from speechpack.loader.config_checks import MAX_EPOCH, integer
from speechpack.loader.cache import CacheSettings, open_cached_pack
from speechpack.loader.cache.schedule import PlanFeed
from speechpack.loader.cache.segment_schedule import segment_bound, segment_schedule
from speechpack.loader.cache.shard_order import planning_view, shard_windows, with_shard_order_alias
from speechpack.loader.config import LoaderConfig, dataloader_settings, loader_fingerprint
from speechpack.loader.memory_limit import MemoryCeiling, bytes_per_row_sample, check_batch_memory, largest_batch_rows
from speechpack.loader.pack import Pack
from speechpack.loader.plan.no_batch import no_batch_message, no_batch_reason
from speechpack.loader.plan.static_plan import resume_point
from speechpack.loader.plan.epoch_plan import EpochPlan, needs_lengths, plan_epoch
from speechpack.loader.resume import Position, ResumeError, make_state, read_state
from speechpack.loader.tasks import prepare
from speechpack.schemas.errors import SpeechpackError
from speechpack.loader.plan.weighting import PackWeighting

#: Shared-memory slots per worker beyond its prefetch (``loader.transport.batch_ring``; one slot per message): the message
#: whose batches the training loop is handed and the one a pin-memory thread holds, so a loop that keeps only its
#: current batch never runs out of slots.
SLOTS_BEYOND_PREFETCH = 2
#: Batches a loader without workers plans at a time (``_PlannedBatches.arrays``: the TSE builder gathers their
#: table and draws their windows together, then builds each when it is asked for): the fixed per-batch numpy work
#: shared by eight, while the first batch of a pass waits only for eight batches' windows.
IN_PROCESS_BLOCK = 8
#: Without a free slot, arrays at least this large leave a worker as torch's shared-memory tensors and smaller
#: ones as pickled numpy arrays (each such tensor costs a fresh segment: about a millisecond, more per MB).
_SHARED_MIN = 1 << 16


def _as_is(batch: dict) -> dict:
    """The DataLoader's collate_fn: batches are collated already (torch's default would walk every field)."""
    return batch


def _freeze_gc(worker_id: int) -> None:
    """Worker start-up: move everything inherited from the parent out of the garbage collector's reach, so its
    passes do not touch (and copy) the parent's pages."""
    gc.freeze()


@dataclass(frozen=True)
class LoaderReport:
    """What the plan does with the data, per epoch and rank."""

    items: int
    filtered: int
    #: Items each filter removed (``{reason: count}``; the reasons are the task's).
    filter_report: dict
    batches_per_rank: int
    padded_items: int
    dropped_items: int
    #: With weighting (``packs`` entries with weight, hours_beta, repeat or choose): the epoch's selection,
    #: realised per pack, corpus and language (``PackWeighting.report``); None without.
    weighting: dict | None = None
    #: A WeSep recipe's trainer sections (``model``, ``optimizer`` ...): read by the trainer, ignored here.
    ignored: tuple[str, ...] = ()
    #: The DataLoader's ``num_workers`` and ``prefetch_factor`` and where they came from (``dataloader_settings``).
    dataloader: dict | None = None
    #: The WeSep dialect the recipe was read as (``wesep-mainline``: mainline's batch keys; ``wesep-contract``).
    dialect: str | None = None
    #: Why this epoch's plan holds no batch (the counts and the setting: ``loader.plan.no_batch``); None when it
    #: holds some.
    no_batch: str | None = None


class _PlannedBatches(Dataset):
    """Map-style dataset over ``(epoch, start, stop, global_start)`` keys: caches one pass's plan per process
    (``loader.plan.plan_epoch``, recomputed from (seed, epoch, global_start) on first use in each worker) and builds
    the batches ``start`` to ``stop - 1`` it names, as one ``message_groups.BatchGroup``."""

    def __init__(self, builder, seed: int, rank: int, world_size: int, weighting: PackWeighting | None = None,
                 memory_limit: MemoryCeiling | None = None):
        self.builder = builder
        self.weighting = weighting
        self.memory_limit = memory_limit
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self._plan: tuple[tuple[int, int], EpochPlan] | None = None
        self._lengths: np.ndarray | None = None
        #: Set by ``SpeechLoader`` when it has workers: the slots batches travel in (None: torch's transport).
        self.ring: batch_ring.BatchRing | None = None
        #: Set by ``SpeechLoader``: for packs by URL, where this process is in the plan, for the node cache
        #: (``loader.cache.schedule``); the shard-window order when the config asks for it
        #: (``dataset_args.shard_window``: ``loader.cache.shard_order``), wherever the packs lie.
        self.feed: PlanFeed | None = None
        self.shard_order = None

    @property
    def args(self):
        """The planning view ``plan_epoch`` reads: the builder's, with the shard windows when set."""
        return planning_view(self.builder.plan_args, self.shard_order)

    def plan(self, epoch: int, global_start: int = 0) -> EpochPlan:
        """This rank's batches of the pass over ``epoch`` dealt from global batch ``global_start``."""
        if self._plan is None or self._plan[0] != (epoch, global_start):
            self._plan = ((epoch, global_start), self._plan_at(epoch, global_start, self.rank, self.world_size))
        return self._plan[1]

    def plan_of(self, epoch_pass: tuple[int, int], rank: int) -> EpochPlan:
        """Any rank's plan of the pass ``(epoch, global_start)`` (the node cache fetches for every rank of its
        node)."""
        epoch, global_start = epoch_pass
        mine = self.plan(epoch, global_start)  # also this epoch's lengths
        return mine if rank == self.rank else self._plan_at(epoch, global_start, rank, self.world_size)

    def pass_length(self, epoch: int, global_start: int, world_size: int) -> int:
        """Steps of every rank in that pass at ``world_size`` (a saved state's, to check its position)."""
        if world_size == self.world_size:
            return len(self.plan(epoch, global_start))
        return len(self._plan_at(epoch, global_start, 0, world_size))

    def _plan_at(self, epoch: int, global_start: int, rank: int, world_size: int) -> EpochPlan:
        args = self.args
        if needs_lengths(args) and (self._lengths is None or self.builder.units.lengths_by_epoch):
            self._lengths = self.builder.units.lengths(epoch)
        return plan_epoch(args, self.seed, epoch, rank, world_size, num_units=self.builder.units.count,
                          lengths=self._lengths, train_windows=self.builder.units.train_windows, weighting=self.weighting,
                          memory_limit=self.memory_limit, global_start=global_start)

    def __len__(self) -> int:  # the DataLoader never asks: the sampler defines the length
        raise TypeError("indexed by (epoch, start, stop); ask the SpeechLoader for its length")

    def arrays(self, epoch: int, start: int, stop: int, global_start: int = 0,
               out: BatchArrays = NUMPY) -> Iterator[dict]:
        """Batches ``start`` to ``stop - 1`` of the pass over ``epoch`` from ``global_start`` as the builder makes them
        (numpy arrays and lists, the arrays made by ``out``: a worker's slot, or plain numpy), yielded one by one
        (``BatchBuilder.build_block``: TSE plans them together, each built when asked for)."""
        plan = self.plan(epoch, global_start)
        if self.feed is not None:
            self.feed.at((epoch, global_start), start, stop)
        batches = [(*plan.batch(b), epoch, int(plan.global_batch[b])) for b in range(start, stop)]
        return self.builder.build_block(batches, out)

    def __getitem__(self, key: tuple[int, int, int, int]) -> "message_groups.BatchGroup | WorkerFailure":
        try:
            return self._group(key)
        except Exception as err:  # noqa: BLE001 - carried to the training process as itself (WorkerFailure)
            failure = WorkerFailure.of(err)
            if failure is None:
                raise
            return failure

    def _group(self, key: tuple[int, int, int, int]) -> message_groups.BatchGroup:
        epoch, start, stop, global_start = key
        meter = message_groups.Meter()

        def builds(out: BatchArrays) -> list:
            block = self.arrays(epoch, start, stop, global_start, out)
            return [meter.timed(lambda: next(block)) for _ in range(start, stop)]

        worker = get_worker_info()
        slot = self.ring.claim(worker.id) if self.ring is not None and worker is not None else None
        if slot is not None:  # the batches built into the slot's arrays
            return meter.group(epoch, start, self.ring.build_group_in(worker.id, slot, builds))
        # No slot (one process, or every slot still held by the consumer): audio becomes tensors here (a worker
        # sends them through torch's shared memory, cheaper than pickling); small arrays travel pickled as numpy.
        return meter.group(epoch, start, [{
            name: torch.from_numpy(value) if isinstance(value, np.ndarray) and value.nbytes >= _SHARED_MIN else value
            for name, value in build().items()} for build in builds(NUMPY)])



class WorkerFailure:
    """A speechpack error raised in a DataLoader worker, returned as the message instead of raised, so the
    training process raises it as its own type with its own message (``reraise_failures``).

    Why: torch re-raises a worker's error as ``exc_type(message)`` and, where that constructor does not take one
    string (``ObjectStoreError``'s takes three), as ``RuntimeError: Caught ObjectStoreError in DataLoader worker
    process 1``, which code catching ``ObjectStoreError`` or ``SpeechpackError`` misses.  Only speechpack's errors
    and ``OSError`` s (a store's, a disk's) travel so, and only those that pickle back as themselves; any other
    (a bug) keeps torch's report with the worker's traceback."""

    __slots__ = ("pickled", "worker")

    def __init__(self, pickled: bytes, worker: int | None):
        self.pickled = pickled
        self.worker = worker

    @classmethod
    def of(cls, err: BaseException) -> "WorkerFailure | None":
        """The failure carrying ``err`` from this worker; None outside a worker, or for an error torch reports
        better (see the class docstring)."""
        worker = get_worker_info()
        if worker is None or not isinstance(err, (SpeechpackError, OSError)):
            return None
        try:
            pickled = pickle.dumps(err)
            back = pickle.loads(pickled)
        except Exception:  # noqa: BLE001 - an error that does not travel is left to torch
            return None
        if type(back) is not type(err) or str(back) != str(err):
            return None
        return cls(pickled, worker.id)

    def error(self) -> BaseException:
        err = pickle.loads(self.pickled)  # made by this loader's own worker, never read from data
        err.add_note(f"(raised in DataLoader worker process {self.worker})")
        return err


def reraise_failures(groups):
    """The DataLoader's messages, a worker's ``WorkerFailure`` raised here as the worker's error."""
    for group in groups:
        if isinstance(group, WorkerFailure):
            raise group.error() from None
        yield group


def as_tensors(batch) -> dict:
    """A delivered batch as the loader hands it out: numpy fields wrapped as tensors (no copy), after unwrapping a
    batch that came in a worker's shared-memory slot (``loader.transport.batch_ring``).  Shared with torchdata's loader
    (``loader.stateful_loader``)."""
    if isinstance(batch, batch_ring.ReceivedBatch):
        batch = batch.arrays()
    return {name: torch.from_numpy(value) if isinstance(value, np.ndarray) else value for name, value in batch.items()}

class _SlotBatch(batch_ring.ReceivedBatch):
    """A batch that arrived in a slot; ``pin_memory`` is what the DataLoader's pin-memory thread calls: pinned
    copies of its arrays, which frees the slot at once."""

    def pin_memory(self, device=None) -> dict:
        return {name: torch.from_numpy(value).pin_memory() if isinstance(value, np.ndarray) else value
                for name, value in self.arrays().items()}


def _batch_ring(settings: dict) -> batch_ring.BatchRing | None:
    """The slots a loader with workers sends its batches through (``settings``: ``dataloader_settings``)."""
    workers = settings["num_workers"]
    if workers == 0 or not batch_ring.supported():
        return None
    return batch_ring.BatchRing(workers, settings["prefetch_factor"] + SLOTS_BEYOND_PREFETCH, received=_SlotBatch,
                                reserve=message_groups.MESSAGE_BYTES)


class SpeechLoader:
    """Iterable of collated batches with ``len()``, ``set_epoch``, ``state_dict`` and ``load_state_dict``.

    Every rank has the same ``len()``; one pass over the loader is one epoch of this rank's batches.  A state
    saved mid-epoch resumes with exactly the remaining batches, whatever ``num_workers`` and world size are then
    (``loader.resume``).
    """

    def __init__(self, config: LoaderConfig, state: str, packs: list[Pack], *, rank: int, world_size: int,
                 num_workers: int | None, seed: int, pin_memory: bool | None = None,
                 prefetch_factor: int | None = None, batches_per_message: int | None = None):
        # Explicit arguments win over the recipe's dataloader_args, which win over the defaults.
        pin_memory = _first(pin_memory, config.dataloader.pin_memory, torch.cuda.is_available())
        config = with_shard_order_alias(config)  # build_loader resolved it already; a LoaderConfig given here too
        prepared = prepare(config, state, packs, seed)  # checks state and seed
        self.config = config
        self.state = state
        self.rank = rank
        self.world_size = world_size
        self.seed = int(seed)
        self.builder = prepared.builder
        #: The pack of every item the filters kept (items are numbered in this order).
        self.item_pack: np.ndarray = prepared.item_pack
        self.filtered = prepared.filtered
        self.filter_report = dict(prepared.filter_report)
        self.weighting: PackWeighting | None = prepared.weighting
        #: ``memory_limit``, its default read once here: every later plan (epochs, workers, ranks) uses this figure.
        self.memory_ceiling = MemoryCeiling.of(config.memory_limit)
        self.dataset = _PlannedBatches(self.builder, seed, rank, world_size, self.weighting, self.memory_ceiling)
        self.dataset.shard_order = shard_windows(packs, self.builder, config.dataset_args.shard_window,
                                                 self.weighting is not None)
        first = self.dataset.plan(0)  # checks rank/world_size and the plan's memory now, not in a worker
        self.builder.check_plan(first, world_size)  # the task's own refusal of a plan its trainer cannot use
        feed = PlanFeed(packs, self.builder, self.dataset.plan_of, rank, world_size, segment_schedule,
                        segment_bound)
        self.dataset.feed = feed if feed.active else None  # only packs read through the node cache need one
        # ``shard_window`` is a dataset_args key (hashed while set): nothing of where the packs lie or of the cache
        self._fingerprint = loader_fingerprint(config, state, packs)
        if len(first) == 0:  # an empty loader is legal (a tiny dev set), but never silent
            warnings.warn(no_batch_message(state, self._no_batch(first)), stacklevel=4)  # the caller of build_loader
        self._epoch = 0
        #: The pass: the global batch it is dealt from and the batches handed out (``loader.resume.Position``).
        self._global_start = 0
        self._consumed = 0
        #: Whether the next pass continues the loaded state's position rather than starting the epoch.
        self._resuming = False
        #: Whether the DataLoader's (persistent) workers have been started: they fork at the first pass.
        self._workers_started = False
        self.dataloader_settings = dataloader_settings(config, num_workers, prefetch_factor)
        num_workers = self.dataloader_settings["num_workers"]
        rows, samples = largest_batch_rows(first, self.builder.units.lengths(0))
        in_flight = num_workers * (self.dataloader_settings["prefetch_factor"] or 1) if num_workers else 1
        check_batch_memory(rows, samples, bytes_per_row_sample(packs), in_flight, self.memory_ceiling,
                           f"epoch 0, rank {rank}")
        if batches_per_message is not None:
            batches_per_message = integer(batches_per_message, "batches_per_message", 1, message_groups.MAX_EXPLICIT)
        # A cache limit too small for the batches built together is an error now, never a hang.
        feed.check((0, 0), IN_PROCESS_BLOCK if not num_workers else batches_per_message or 1,
                   config.dataset_args.shard_window, builders=max(1, num_workers))
        #: How many batches each DataLoader message carries (``loader.transport.message_groups``; shared with torchdata's).
        self.message_sizes = message_groups.MessageSizes(num_workers, batches_per_message)
        self._sampler = message_groups.EpochKeys(self.message_sizes)
        self.dataset.ring = _batch_ring(self.dataloader_settings)
        self.dataloader = DataLoader(
            self.dataset,
            batch_size=None,
            sampler=self._sampler,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
            prefetch_factor=self.dataloader_settings["prefetch_factor"],
            pin_memory=bool(pin_memory),
            collate_fn=_as_is,
            worker_init_fn=_freeze_gc,
        )

    def __len__(self) -> int:
        return len(self.dataset.plan(self._epoch, self._global_start))

    @property
    def tokenizer(self):
        """The ASR tokenizer the batches' ``target_seqs`` come from (the packs' character vocabulary, or the recipe's
        SentencePiece model): ``len(tokenizer)`` sizes a model's output layer.  None for the other tasks."""
        return self.builder.tokenizer

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches the next pass yields (a new order when ``shuffle``)."""
        epoch = integer(epoch, "epoch", 0, MAX_EPOCH)
        if epoch != self._epoch:
            self._global_start = self._consumed = 0
            self._resuming = False
        self._epoch = epoch

    @property
    def position(self) -> Position:
        """Where the current (or last) pass stands."""
        return Position(self._epoch, self._global_start, self._consumed, self.world_size)

    def _no_batch(self, plan: EpochPlan) -> str | None:
        """Why ``plan`` (a pass of this loader) holds no batch, or None."""
        if len(plan):
            return None
        return no_batch_reason(self.dataset.args, self.builder.units.count, self.world_size, dropped=plan.dropped,
                               unit_name="item" if self.builder.units.train_windows is None else "train-window chunk",
                               filtered=self.filtered, filter_report=self.filter_report,
                               weighted=self.weighting is not None)

    def report(self) -> LoaderReport:
        plan = self.dataset.plan(self._epoch, self._global_start)
        weighting = (None if self.weighting is None
                     else self.weighting.report(self.weighting.items(self.seed, self._epoch)))
        return LoaderReport(items=len(self.item_pack), filtered=self.filtered, filter_report=self.filter_report,
                            batches_per_rank=len(plan),
                            padded_items=plan.padded, dropped_items=plan.dropped, weighting=weighting,
                            ignored=self.config.ignored, dataloader=dict(self.dataloader_settings),
                            dialect=self.config.dialect, no_batch=self._no_batch(plan))

    def __iter__(self) -> Iterator[dict]:
        if not self._resuming:  # a whole epoch
            self._global_start = self._consumed = 0
        self._resuming = False
        self._sampler.epoch, self._sampler.global_start = self._epoch, self._global_start
        self._sampler.count = len(self)
        self._sampler.start = self._consumed
        # Without workers the batches are built right here: the DataLoader would only add its per-batch profiler
        # scope and bookkeeping (about a tenth of a short TSE batch; docs/performance.md), and pin what it pins.
        in_process = self.dataloader_settings["num_workers"] == 0
        if not in_process and not self._workers_started and self.dataset.feed is not None:
            # The pass's file schedule built once, here, before the workers fork: each inherits it instead of
            # building its own (0.3-0.5 s per million items, every worker at once, before the first batch); and the
            # first batch's files fetched here too, while that schedule is built, so no worker's store client
            # stands before it (``PlanFeed.start_pass``).
            self.dataset.feed.start_pass((self._epoch, self._global_start), self._consumed)
        self._workers_started = self._workers_started or not in_process
        pin = in_process and self.dataloader.pin_memory and _pinnable()
        for batch in (self._in_process() if in_process
                      else message_groups.batches_of(reraise_failures(self.dataloader), self.message_sizes)):
            self._consumed += 1
            batch = as_tensors(batch)
            yield {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in batch.items()} if pin else batch

    def _in_process(self) -> Iterator[dict]:
        """This pass's batches built here, ``IN_PROCESS_BLOCK`` planned at a time."""
        sampler = self._sampler
        for first in range(sampler.start, sampler.count, IN_PROCESS_BLOCK):
            yield from self.dataset.arrays(sampler.epoch, first, min(first + IN_PROCESS_BLOCK, sampler.count),
                                           sampler.global_start)

    def augment(self, batch: dict, device: torch.device | str | None = None) -> dict:
        """``batch`` ready for the model: its tensors moved to ``device`` first when one is given, then what the
        task leaves to the training process applied where they are (TSE ``augment_on: batch``: reverberation,
        noise and mixing; ``loader.tasks.BatchBuilder.augment_batch``).  Any other batch comes back as it is, so
        a training loop may call it on every batch: ``batch = loader.augment(batch, device)``."""
        if device is not None:
            batch = {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        return self.builder.augment_batch(batch)

    def state_dict(self) -> dict:
        """A few numbers: enough to resume mid-epoch in O(1), at any world size (``loader.resume``).  After a
        finished pass ``batches_consumed`` equals ``len(self)``: resuming then yields nothing until ``set_epoch``
        moves on."""
        return self.state_for(self.position)

    def state_for(self, position: Position) -> dict:
        """The state of this loader at ``position`` (torchdata's loader saves the batches it handed out)."""
        return make_state(position, seed=self.seed, rank=self.rank, fingerprint=self._fingerprint)

    def load_state_dict(self, state_dict: dict) -> None:
        """Resume: the next pass yields the batches of ``state_dict["epoch"]`` after the global position the state
        saved, dealt over this loader's ranks (``loader.plan.static_plan.resume_point``), whatever the world size and
        ``num_workers`` that saved it.

        The whole state is checked before anything changes: a refused state (``ResumeError``, naming the key)
        leaves the loader exactly as it was.  Counts must be integers; a float is refused, never truncated."""
        saved = read_state(state_dict, seed=self.seed, fingerprint=self._fingerprint)
        batches = self.dataset.pass_length(saved.epoch, saved.global_start, saved.world_size)
        if saved.consumed > batches:
            raise ResumeError(f"batches_consumed {saved.consumed} is outside [0, {batches}] (epoch {saved.epoch}, "
                              f"world_size {saved.world_size})")
        global_start, consumed = resume_point(saved.global_batches, self.world_size)
        # A position inside the epoch's padding (all real batches consumed) leaves nothing in this pass.
        consumed = min(consumed, len(self.dataset.plan(saved.epoch, global_start)))
        self.set_epoch(saved.epoch)
        self._global_start, self._consumed, self._resuming = global_start, consumed, True


def _pinnable() -> bool:
    """Whether pinned memory can be had here, as the DataLoader decides it: an accelerator, and not MPS."""
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return device is not None and device.type != "mps"


def _first(*values):
    """The first value that is not None."""
    return next(value for value in values if value is not None)


def build_loader(config: dict | LoaderConfig, state: str, *, rank: int = 0, world_size: int = 1,
                 num_workers: int | None = None, seed: int = 0, pin_memory: bool | None = None,
                 prefetch_factor: int | None = None, batches_per_message: int | None = None,
                 cache: CacheSettings | dict | None = None) -> SpeechLoader:
    """The training loader: ``config`` is a dict (usually from YAML) with ``packs``, ``dataset_args`` and
    optionally ``task`` (the registry: ``loader.tasks``) and ``weighting``, a WeSep recipe with ``packs`` added
    (``loader.recipe``), or another tool's recipe its task translates (``loader.tasks.FOREIGN_RECIPES``).
    ``num_workers``, ``pin_memory`` and ``prefetch_factor`` default to the recipe's ``dataloader_args``, else to
    the task's (``LoaderTask.dataloader_defaults``), else to 0 workers, pinning when CUDA is available, and ``loader.config.PREFETCH_PER_WORKER`` (``dataloader_settings``).  ``batches_per_message``: how many
    batches a worker builds and sends per DataLoader index; None (the default) sizes messages by what batches
    cost to build (``loader.transport.message_groups``), and 1 is one batch per index as a plain DataLoader does.
    ``cache`` (``loader.cache.CacheSettings`` or its keys) is the node cache packs given by URL are read through,
    over the config's ``cache:`` (docs/integrations.md, "Object storage")."""
    if not isinstance(config, LoaderConfig):
        config = LoaderConfig.from_dict(config, state=state)
    if cache is not None:  # what the task reads too (``config.cache``: an ASR tokenizer's packs, TSE's banks)
        config = replace(config, cache=CacheSettings.from_dict(cache, "cache"))
    config = with_shard_order_alias(config)  # the deprecated cache.shard_order: one plan, one fingerprint
    packs = [open_cached_pack(source.path, config.cache, verify=config.verify_streams) for source in config.packs]
    return SpeechLoader(config, state, packs, rank=rank, world_size=world_size, num_workers=num_workers,
                        seed=seed, pin_memory=pin_memory, prefetch_factor=prefetch_factor,
                        batches_per_message=batches_per_message)


__all__ = ["LoaderReport", "ResumeError", "SpeechLoader", "WorkerFailure", "build_loader", "reraise_failures"]
