"""The speechpack loader as a torchdata ``StatefulDataLoader`` (optional extra: ``speechpack[torchdata]``;
docs/integrations.md, "torchdata").

``StatefulDataLoader`` (torchdata 0.8+) is a ``DataLoader`` whose ``state_dict()`` says where an epoch stands, with
workers and prefetching in flight, and whose ``load_state_dict()`` makes the next pass continue there. It asks the
sampler and the sampler's iterator for their state when they have ``state_dict``/``load_state_dict`` (torchdata's
``Stateful`` protocol) and snapshots it as each batch index is sent to a worker, so the state it returns matches the
batches handed to the caller, not the ones prefetched. ``stateful_dataloader`` gives it the loader's own pieces:

- the dataset is ``SpeechLoader.dataset``: keys ``(epoch, start, stop)`` in, groups of whole collated batches out
  (``loader.transport.message_groups``), each batch a pure function of (seed, epoch, batch), so a batch is the same whichever
  worker builds it (nothing to save per worker);
- the sampler is ``EpochBatchSampler``: the epoch's batch numbers for this rank, dealt in groups sized as the
  ``SpeechLoader``'s, its iterator ``Stateful`` with the position (batches sent) in ``SpeechLoader.state_dict()``'s
  format, checked the same way on load (same data, config and seed, or ``loader.resume.ResumeError`` naming the
  key) and resumed the same way at any world size (``loader.resume``).

The loader hands the groups' batches out one by one, so ``len()`` and every position count batches.

The DataLoader's settings (workers, prefetch, pinning, worker start-up) are the ``SpeechLoader``'s, so both loaders
feed the same batches the same way; ``set_epoch`` moves to another epoch as ``SpeechLoader.set_epoch`` does.  From a
store (the node cache), the first pass's file schedule is built before the workers fork, as ``SpeechLoader`` does,
with its first batch's files fetched meanwhile (``loader.cache.schedule.PlanFeed.start_pass``).

Saving is torchdata's own ``state_dict()`` with the exact position added (``POSITION_KEY``: the batches handed out,
which torchdata, counting messages, cannot say in the middle of a group). Loading reads only the position out of it
(``position_state``) and starts the next pass there: torchdata's restore would also bring back worker states and
seeds, which these batches do not depend on, and it refuses a state saved with another ``num_workers``; this one
takes any, as ``SpeechLoader`` does, and any world size.
"""

from __future__ import annotations

import functools
from typing import Iterator

from speechpack.loader.config_checks import MAX_EPOCH, ConfigError, integer
from speechpack.loader.resume import Position, ResumeError
from speechpack.loader.transport.message_groups import unpack
from speechpack.loader.torch import SpeechLoader, as_tensors, build_loader, reraise_failures
from speechpack.schemas.errors import SpeechpackError

#: The ``DataLoader`` settings a ``SpeechLoader`` chose that the ``StatefulDataLoader`` takes over as they are.
_COPIED_SETTINGS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "collate_fn",
                    "worker_init_fn", "multiprocessing_context", "timeout")
#: Key of the exact position (``SpeechLoader.state_dict()``'s format) in the loader's ``state_dict()``.
POSITION_KEY = "speechpack_position"


class _EpochIterator:
    """The batch numbers of one pass from ``position`` on, as ``(epoch, start, stop, global_start)`` keys (the
    pass is dealt from global batch ``global_start``: ``loader.resume``); ``Stateful``."""

    def __init__(self, sampler: "EpochBatchSampler", global_start: int = 0, position: int = 0) -> None:
        self.sampler = sampler
        self.epoch = sampler.epoch
        self.global_start = global_start
        self.count = sampler.pass_length(self.epoch, global_start)  # whatever set_epoch does during the pass
        self.position = position

    def __iter__(self) -> "_EpochIterator":
        return self

    def __next__(self) -> tuple[int, int, int]:
        self.sampler.started()
        if self.position >= self.count:
            raise StopIteration
        start = self.position
        self.position += self.sampler.loader.message_sizes.next(self.count - start, self.count)
        return self.epoch, start, self.position, self.global_start

    def state_dict(self) -> dict:
        """``SpeechLoader.state_dict()``'s keys: the epoch and the batches sent so far, with the loader's identity."""
        loader = self.sampler.loader
        return loader.state_for(Position(self.epoch, self.global_start, self.position, loader.world_size))

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue after the global position of ``state_dict`` (a resume state); checked in full first."""
        self.epoch, self.global_start, self.position = self.sampler.checked(state_dict)
        self.sampler.epoch = self.epoch
        self.count = self.sampler.pass_length(self.epoch, self.global_start)


class EpochBatchSampler:
    """The sampler of a ``StatefulDataLoader`` over ``SpeechLoader.dataset``: one epoch's batches of this rank (a
    sized iterable is all a DataLoader asks of a sampler). ``resume`` makes the next pass start after a position."""

    def __init__(self, loader: SpeechLoader) -> None:
        self.loader = loader
        self.epoch = loader.epoch
        #: Where the next pass starts: ``(global_start, batches already consumed)`` (``loader.resume``).
        self._start = (0, 0)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass yields (a new order when ``shuffle``); another epoch starts at its first batch."""
        epoch = integer(epoch, "epoch", 0, MAX_EPOCH)
        if epoch != self.epoch:
            self._start = (0, 0)
        self.epoch = epoch

    def checked(self, saved: dict) -> tuple[int, int, int]:
        """``(epoch, global_start, batches_consumed)`` where this rank resumes an iterator state, after the
        ``SpeechLoader``'s checks (same data, config and seed; counts in range; any world size): a refused state is a
        ``ResumeError`` naming the key."""
        self.loader.load_state_dict(saved)  # changes nothing when it refuses
        position = self.loader.position
        return position.epoch, position.global_start, position.consumed

    def resume(self, saved: dict) -> None:
        """The next pass continues after the global position the resume state ``saved`` holds."""
        self.epoch, *self._start = self.checked(saved)

    @property
    def next_global_start(self) -> int:
        """The global batch the next pass is dealt from."""
        return self._start[0]

    @property
    def resume_consumed(self) -> int:
        """The batches of its pass the next pass starts after (0 unless resuming)."""
        return self._start[1]

    def started(self) -> None:
        """A pass has begun: the resume position is used. (A DataLoader may make an iterator it never advances,
        so the position is kept until one is advanced.)"""
        self._start = (0, 0)

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        return _EpochIterator(self, *self._start)

    def pass_length(self, epoch: int, global_start: int) -> int:
        """This rank's batches in the pass over ``epoch`` dealt from ``global_start``."""
        return len(self.loader.dataset.plan(epoch, global_start))

    def __len__(self) -> int:
        return self.pass_length(self.epoch, self._start[0])

    def state_dict(self) -> dict:
        return {"epoch": self.epoch}

    def load_state_dict(self, state_dict: dict) -> None:
        if not isinstance(state_dict, dict) or "epoch" not in state_dict:
            raise ResumeError(f"sampler state must be a dict with epoch (EpochBatchSampler.state_dict()), got "
                              f"{state_dict!r:.80}")
        try:
            self.set_epoch(state_dict["epoch"])
        except ConfigError as err:
            raise ResumeError(f"sampler state: {err}") from None


def position_state(loader_state: dict) -> dict:
    """The sampler iterator's state (``_EpochIterator.state_dict``) that a ``StatefulDataLoader`` state holds, at the
    batches handed out: the exact position the loader added (``POSITION_KEY``) when it has one; else (a pass that
    has handed nothing out yet, or a state saved before groups) kept as it is without workers, and with workers
    taken from torchdata's last snapshot plus the messages handed out since. torchdata's own restore needs the same
    worker count as the save; this does not."""
    from torchdata.stateful_dataloader.stateful_dataloader import (
        _SAMPLER_ITER_STATE, _StatefulMultiProcessingDataLoaderIter as Workers)

    if not isinstance(loader_state, dict):
        raise ResumeError(f"loader state must be a dict (StatefulDataLoader.state_dict()), got "
                          f"{type(loader_state).__name__}")
    if isinstance(loader_state.get(POSITION_KEY), dict):
        return loader_state[POSITION_KEY]
    if Workers._SNAPSHOT in loader_state:
        snapshot = loader_state[Workers._SNAPSHOT]
        inner = snapshot.get(Workers._MAIN_SNAPSHOT, {}).get(_SAMPLER_ITER_STATE) if isinstance(snapshot, dict) \
            else None
        since = loader_state.get(Workers._STEPS_SINCE_SNAPSHOT, 0)
    else:
        inner, since = loader_state.get(_SAMPLER_ITER_STATE), 0
    if not isinstance(inner, dict) or "batches_consumed" not in inner:
        raise ResumeError("loader state holds no speechpack position: not a state of stateful_dataloader's loader")
    consumed = inner["batches_consumed"]
    if since and isinstance(consumed, int) and isinstance(since, int) and not isinstance(since, bool):
        inner = {**inner, "batches_consumed": consumed + since}
    return inner


@functools.cache
def stateful_class() -> type:
    """``SpeechStatefulDataLoader``, made on first use (that is when torchdata is imported)."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError as err:
        raise SpeechpackError("stateful_dataloader needs torchdata: pip install 'speechpack[torchdata]'") from err

    class SpeechStatefulDataLoader(StatefulDataLoader):
        """A ``StatefulDataLoader`` over a ``SpeechLoader``'s batches (see the module docstring)."""

        def __init__(self, loader: SpeechLoader, snapshot_every_n_steps: int = 1) -> None:
            settings = {name: getattr(loader.dataloader, name) for name in _COPIED_SETTINGS}
            super().__init__(loader.dataset, batch_size=None, sampler=EpochBatchSampler(loader),
                             snapshot_every_n_steps=snapshot_every_n_steps, **settings)
            self.speech_loader = loader
            #: Where the current pass stands once it has handed out a batch, else None.
            self._handed: Position | None = None
            #: Whether the (persistent) workers have been started: they fork at the first pass.
            self._workers_started = False

        def set_epoch(self, epoch: int) -> None:
            before = self.sampler.epoch
            self.sampler.set_epoch(epoch)
            if self.sampler.epoch != before:
                self._handed = None

        def __iter__(self) -> Iterator[dict]:
            self._handed = None
            global_start, world = self.sampler.next_global_start, self.speech_loader.world_size
            feed = self.speech_loader.dataset.feed
            if self.num_workers and not self._workers_started and feed is not None:
                # as ``SpeechLoader.__iter__``: the pass's file schedule built here, before the workers fork (each
                # inherits it), with its first batch's files fetched meanwhile (``PlanFeed.start_pass``)
                feed.start_pass((self.sampler.epoch, global_start), self.sampler.resume_consumed)
            self._workers_started = self._workers_started or bool(self.num_workers)
            for epoch, number, batch in unpack(reraise_failures(super().__iter__()),
                                               self.speech_loader.message_sizes):
                self._handed = Position(epoch, global_start, number + 1, world)
                yield as_tensors(batch)

        def state_dict(self) -> dict:
            """torchdata's state, plus the exact position once the current pass has handed out a batch."""
            loader_state = super().state_dict()
            if self._handed is not None:
                loader_state[POSITION_KEY] = self.speech_loader.state_for(self._handed)
            return loader_state

        def load_state_dict(self, state_dict: dict) -> None:
            """The next pass continues after the batches ``state_dict`` had handed out, whatever ``num_workers``
            saved it.

            Checked now (a refused state is a ``ResumeError`` and changes nothing). Only the position is restored:
            batches are built from (seed, epoch, batch number), so workers hold nothing a resume needs."""
            if state_dict == {}:  # torchdata's "no state"
                return
            self.sampler.resume(position_state(state_dict))
            self._handed = None
            super().load_state_dict({})  # drops the current pass, as torchdata's own restore does

    SpeechStatefulDataLoader.__module__ = __name__
    SpeechStatefulDataLoader.__qualname__ = "SpeechStatefulDataLoader"
    return SpeechStatefulDataLoader


def stateful_dataloader(config, state: str, *, rank: int = 0, world_size: int = 1, num_workers: int | None = None,
                        seed: int = 0, pin_memory: bool | None = None, prefetch_factor: int | None = None,
                        snapshot_every_n_steps: int = 1, batches_per_message: int | None = None):
    """``build_loader``'s loader as a torchdata ``StatefulDataLoader`` (same arguments, same batches).

    ``snapshot_every_n_steps`` is torchdata's: how often, with workers, it records its own position; the state also
    carries the exact position (``POSITION_KEY``), so it is exact whatever n is.  ``batches_per_message`` is
    ``build_loader``'s."""
    loader = build_loader(config, state, rank=rank, world_size=world_size, num_workers=num_workers, seed=seed,
                          pin_memory=pin_memory, prefetch_factor=prefetch_factor,
                          batches_per_message=batches_per_message)
    return stateful_class()(loader, snapshot_every_n_steps=snapshot_every_n_steps)


def __getattr__(name: str):
    if name == "SpeechStatefulDataLoader":
        return stateful_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EpochBatchSampler", "POSITION_KEY", "SpeechStatefulDataLoader", "position_state", "stateful_class",
           "stateful_dataloader"]
