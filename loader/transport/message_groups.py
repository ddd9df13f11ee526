"""Several planned batches per DataLoader message: why, how many, and how they are handed out again one by one.

Why: torch's DataLoader does a fixed amount of work for every index it hands a worker, whatever the batch costs:
the index queue and the result queue (each with a feeder thread), pickling both ways, its bookkeeping.  That is
about 0.3 ms of CPU in the training process and as much in the worker (docs/performance.md, "Scaling with
workers").  A TSE or ASR batch takes 1-3 ms to build, so the fixed cost was a fifth to a half of the work, and two
workers on two cores delivered only 1.1-1.3x one process.  Asking for several consecutive batches per index
shares that cost among them.

How:

- the sampler deals keys ``(epoch, start, stop)``: consecutive batch numbers of the epoch, in order
  (``group_keys``), so the batches and their order are exactly one process's, whatever the group sizes (the
  loader's sampler adds the global batch its pass is dealt from, ``EpochKeys.global_start``);
- a worker builds a group's batches one after another, into one slot of the batch ring when it has a free one
  (``loader.transport.batch_ring.BatchRing.build_group_in``), and returns a ``BatchGroup``;
- the training process hands the group's batches out one by one (``unpack``), letting go of each as it is
  handed out, so a slot is released as soon as the consumer has dropped the last batch of its group (the batch
  ring's lifetime rule, unchanged).  The loader counts batches, not messages: a state saved in the middle of a
  group resumes at the very next batch, and the next pass simply starts its groups there.

How many (``MessageSizes``): where the user gives ``batches_per_message``, that many (the last message of an
epoch takes what is left).  Otherwise the loader measures: each group carries the CPU time and the bytes its
worker spent per batch, and the next messages hold enough batches for ``MESSAGE_SECONDS`` of building (so the
fixed cost is at most a few per cent), but

- one batch per message until a batch has been measured, so the first batch arrives as early as before;
- at most ``MAX_BATCHES_PER_MESSAGE``, and no more than ``MESSAGE_BYTES`` of arrays per message: a slot holds a
  whole message, so this bounds the shared memory (``prefetch_factor + 2`` slots per worker, as before);
- at most ``batches // (MESSAGES_PER_WORKER * workers)`` for an epoch of ``batches``: each worker gets several
  messages per epoch, so the start of a pass (its first message arrives after a whole message is built) and its
  end stay short next to the epoch; short epochs (a validation set) keep one batch per message;
- at most the remaining batches over the workers (rounded up): the end of an epoch is dealt in smaller messages,
  so no worker is left building a long last message while the others wait, and an epoch whose length is no
  multiple of the size simply ends with smaller messages;
- one per message without workers: nothing is shared there (no queues, no pickling).
"""

from __future__ import annotations

import math
import time
from typing import Callable, Iterable, Iterator

import numpy as np

#: Building time a message should carry.  The DataLoader's fixed cost per message, measured on 2 cores
#: (docs/performance.md, "Scaling with workers"), is about 1 ms of CPU in both processes together (queues, feeder
#: threads, pickling, and the worker's sleep and wake-up between messages), so it is then at most about 5 %.
MESSAGE_SECONDS = 0.020
#: The most batches one automatically sized message holds: beyond it the fixed cost is already negligible, while
#: each extra batch makes the slot (and the wait for a message) bigger.
MAX_BATCHES_PER_MESSAGE = 8
#: The most bytes of arrays one automatically sized message holds (a slot holds a whole message, and a worker
#: keeps ``prefetch_factor + 2`` slots): batches larger than this travel one per message.
MESSAGE_BYTES = 64 << 20
#: Messages each worker gets at least per epoch: a message holds at most ``batches // (this * workers)``.
MESSAGES_PER_WORKER = 4
#: Bound on an explicit ``batches_per_message``.
MAX_EXPLICIT = 1024
#: Weight of the newest measurement in the running estimate (steady against one slow batch, quick to follow
#: a lasting change such as longer utterances or a busier machine).
NEWEST_WEIGHT = 0.25


class MessageSizes:
    """How many batches the next message holds (module docstring): ``fixed`` when given, else measured."""

    def __init__(self, workers: int, fixed: int | None = None):
        self.workers = workers
        self.fixed = fixed
        #: Running estimates of a batch's building CPU seconds and array bytes; None until a batch is measured.
        self.seconds: float | None = None
        self.nbytes: float = 0.0

    def observe(self, seconds: float | None, nbytes: float) -> None:
        """Fold in one arriving group's measurements (per batch; ``seconds`` None: not measured)."""
        if seconds is None:
            return
        if self.seconds is None:
            self.seconds, self.nbytes = seconds, nbytes
        else:
            self.seconds += NEWEST_WEIGHT * (seconds - self.seconds)
            self.nbytes += NEWEST_WEIGHT * (nbytes - self.nbytes)

    def next(self, remaining: int, batches: int) -> int:
        """The size of the next message when ``remaining`` of the epoch's ``batches`` are left to deal (at least
        1)."""
        if self.fixed is not None:
            return max(1, min(self.fixed, remaining))
        if self.workers == 0 or self.seconds is None:
            return 1
        by_time = math.ceil(MESSAGE_SECONDS / max(self.seconds, 1e-6))
        by_bytes = int(MESSAGE_BYTES // self.nbytes) if self.nbytes > 0 else MAX_BATCHES_PER_MESSAGE
        by_epoch = batches // (MESSAGES_PER_WORKER * self.workers)
        by_end = -(-remaining // self.workers)
        return max(1, min(MAX_BATCHES_PER_MESSAGE, by_time, by_bytes, by_epoch, by_end))


def group_keys(epoch: int, start: int, count: int, sizes: MessageSizes) -> Iterator[tuple[int, int, int]]:
    """``(epoch, first, stop)`` for consecutive groups covering batches ``[start, count)``; each size is asked of
    ``sizes`` when the DataLoader asks for the key, so it follows the latest measurements."""
    batch = start
    while batch < count:
        stop = batch + sizes.next(count - batch, count)
        yield epoch, batch, stop
        batch = stop


class EpochKeys:
    """The ``SpeechLoader``'s sampler: iterating yields the ``group_keys`` of batches ``[start, count)`` of
    ``epoch``, each with ``global_start`` appended (the global batch the pass is dealt from: ``loader.resume``; all
    set by the loader before each pass); its length is in batches, not keys."""

    def __init__(self, sizes: MessageSizes) -> None:
        self.sizes = sizes
        self.epoch = 0
        self.global_start = 0
        self.start = 0
        self.count = 0

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        global_start = self.global_start
        return ((*key, global_start) for key in group_keys(self.epoch, self.start, self.count, self.sizes))

    def __len__(self) -> int:
        return self.count - self.start


class BatchGroup:
    """What a worker returns for a key: the batches ``start, start + 1, ...`` of ``epoch`` (a list, or a batch
    ring message that arrives as one), and what one of them cost to build (CPU seconds, bytes of arrays)."""

    __slots__ = ("epoch", "start", "batches", "seconds", "nbytes")

    def __init__(self, epoch: int, start: int, batches, seconds: float | None, nbytes: float):
        self.epoch = epoch
        self.start = start
        self.batches = batches
        self.seconds = seconds
        self.nbytes = nbytes

    def __getstate__(self):
        return self.epoch, self.start, self.batches, self.seconds, self.nbytes

    def __setstate__(self, state) -> None:
        self.epoch, self.start, self.batches, self.seconds, self.nbytes = state

    def pin_memory(self, device=None) -> "BatchGroup":
        """What the DataLoader's pin-memory thread calls: the group with each batch's tensors in pinned memory (a
        slot batch's own ``pin_memory``, which also frees its slot; else each value that has one)."""
        return BatchGroup(self.epoch, self.start, [_pinned(batch) for batch in self.batches], self.seconds,
                          self.nbytes)


def _pinned(batch):
    if hasattr(batch, "pin_memory"):
        return batch.pin_memory()
    return {name: value.pin_memory() if hasattr(value, "pin_memory") else value for name, value in batch.items()}


class Meter:
    """Worker side: times the builds of one group (CPU time of the building thread) and counts their bytes."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.nbytes = 0
        self.batches = 0

    def timed(self, build: Callable[[], dict]) -> Callable[[], dict]:
        def run() -> dict:
            started = time.thread_time()
            batch = build()
            self.seconds += time.thread_time() - started
            self.nbytes += sum(value.nbytes for value in batch.values() if isinstance(value, np.ndarray))
            self.batches += 1
            return batch
        return run

    def group(self, epoch: int, start: int, batches) -> BatchGroup:
        """The ``BatchGroup`` holding ``batches``, with the measurements per batch."""
        count = max(self.batches, 1)
        return BatchGroup(epoch, start, batches, self.seconds / count, self.nbytes / count)


def unpack(groups: Iterable[BatchGroup], sizes: MessageSizes) -> Iterator[tuple[int, int, object]]:
    """``(epoch, batch number, batch)`` for every batch of every group, in order; each group's measurements are
    folded into ``sizes`` as it arrives, and nothing here keeps a batch once it is handed out."""
    for group in groups:
        sizes.observe(group.seconds, group.nbytes)
        epoch, number, batches = group.epoch, group.start, list(group.batches)
        group.batches = ()  # whoever else still holds the group (a pin-memory queue) no longer holds its batches
        del group
        batches.reverse()
        while batches:
            yield epoch, number, batches.pop()
            number += 1


def batches_of(groups: Iterable[BatchGroup], sizes: MessageSizes) -> Iterator[object]:
    """The batches alone of ``unpack(groups, sizes)``."""
    for _epoch, _number, batch in unpack(groups, sizes):
        yield batch


__all__ = ["BatchGroup", "EpochKeys", "MAX_BATCHES_PER_MESSAGE", "MAX_EXPLICIT", "MESSAGES_PER_WORKER",
           "MESSAGE_BYTES", "MESSAGE_SECONDS", "MessageSizes", "Meter", "batches_of", "group_keys", "unpack"]
