"""Batches from DataLoader workers to the training process through a ring of reused shared-memory slots.

Why: torch's own transport moves every tensor of every batch into a fresh shared-memory segment (create,
``fallocate``, map, fault in and zero every page, copy), then passes its file descriptor over a socket that the
training process connects to once per tensor.  On the VMs measured, that cost a worker 2-3 ms per MB, several
times what building the batch costs, so two workers delivered less than one process (docs/performance.md,
"Scaling with workers").  Here each worker keeps a few slots of shared memory for its whole life and builds its
batches straight into them (``loader.transport.batch_arrays``); a batch crosses as a small message (per array its offset,
dtype, shape and strides), and the training process wraps the slot's memory in place: no copy on either side,
no page faults after the first use of a slot.

How:

- The training process creates the ring before the workers start: per worker, one semaphore per slot, 1 while
  the slot is free.
- A worker claims a free slot without waiting, builds into it, and sends the message.  A slot's memory (a
  memfd) crosses once, with the first message after it was made (its file descriptor, by multiprocessing's fd
  passing); later messages name it by (worker, slot, generation), and the training process keeps it mapped.
- Arrays built outside the slot (by code that does not use ``loader.transport.batch_arrays``) are copied in when the
  message is made; a batch larger than its slot replaces the slot by one ``GROWTH`` times the batch.
- Slots are mapped at 2 MB-aligned addresses in both processes, and what a worker has written into a slot is
  moved into huge pages once (``loader.transport.huge_pages``: on 4 KB pages a 16 MB batch costs a fifth more to
  write, TLB misses).
- A message may carry several consecutive batches, built one after another into the same slot
  (``build_group_in``; ``loader.transport.message_groups`` says why and how many): they arrive as a list sharing one hold
  on the slot, so the slot is released when the last of them dies.

**Lifetime rule.** A slot is claimed from the moment its worker starts building into it until the training
process has dropped every array, tensor and view of that batch (or the message itself, when the DataLoader
discards it); only then is its semaphore released and the slot overwritten.  Only the training process
releases: a process forked from it inherits its batches, and what that copy drops releases nothing.  A consumer
may therefore keep a batch's tensors as long as it likes.  A worker that finds none of its slots free (a consumer
holding many batches at once) builds in private memory and sends the batch the ordinary way, slower but the same
values: it never waits and never overwrites a batch in use.  With ``prefetch_factor + 2`` slots per worker (one
per message in flight), a training loop holding the current message's batches while a pin-memory thread holds the
next message never runs out.

Linux only (``os.memfd_create``): elsewhere ``supported()`` is False and the loader keeps torch's transport.
"""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.context
import os
import weakref
from multiprocessing.reduction import DupFd
from typing import Callable

import numpy as np

from speechpack.loader.transport import huge_pages
from speechpack.loader.transport.batch_arrays import Arena, BatchArrays, aligned

#: A slot that must grow becomes this many times the batch that did not fit (batches vary a little in size).
GROWTH = 1.25
#: Slots are whole multiples of this (a huge page), and no slot is smaller: a tiny slot would grow at once.
MIN_SLOT_BYTES = 2 << 20
#: Array kinds that travel in the slot (bool, ints, floats, complex); others (strings, objects) are pickled.
_NUMERIC_KINDS = "biufc"



def supported() -> bool:
    """Whether this platform has anonymous shared memory files (``memfd_create``, Linux)."""
    return hasattr(os, "memfd_create")


def _map(fd: int, capacity: int) -> huge_pages.SharedMapping:
    """Map a slot at a 2 MB-aligned address, so that its memory can be huge pages (``loader.transport.huge_pages``:
    a batch of 16 MB spans 4,096 small pages, and every page's TLB miss shows in what a worker spends per batch)."""
    return huge_pages.map_shared(fd, capacity)


class _Slot:
    """Worker side: one slot's memory, its arena, and which generation the training process has seen."""

    def __init__(self, index: int, reserve: int = 0):
        self.index = index
        self.reserve = reserve
        self.generation = 0
        self.sent = 0
        self.fd: int | None = None
        self.mapping: huge_pages.SharedMapping | None = None
        #: Bytes from the slot's start that were asked into huge pages (``huge_pages.collapse``), this generation.
        self.huge_upto = 0
        #: Where the slot's batches are built: its current arena (``grow`` replaces it), handed to each build.
        self.arrays = BatchArrays(Arena(np.empty(0, dtype=np.uint8)))

    @property
    def arena(self) -> Arena:
        return self.arrays.arena

    @arena.setter
    def arena(self, arena: Arena) -> None:
        self.arrays.arena = arena

    def grow(self, nbytes: int) -> None:
        """Replace the memory by a bigger one, keeping the bytes carved so far (their offsets stay valid)."""
        capacity = -(-int(max(nbytes, self.reserve) * GROWTH) // MIN_SLOT_BYTES) * MIN_SLOT_BYTES or MIN_SLOT_BYTES
        fd = os.memfd_create("speechpack-batch", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, capacity)
            mapped = _map(fd, capacity)
        except BaseException:
            os.close(fd)
            raise
        buffer = np.asarray(mapped)
        used = self.arena.used
        buffer[:used] = self.arena.buffer[:used]
        if self.fd is not None:
            os.close(self.fd)  # the old mapping lives on while arrays of the batch being packed still use it
        self.fd = fd
        self.mapping = mapped
        self.huge_upto = 0
        self.arena = Arena(buffer)
        self.arena.used = used
        self.generation += 1

    def harden(self) -> None:
        """Have what the slot's batches were written into so far backed by huge pages, once: the next batches
        written there, and the training process reading them, then miss the TLB 512 times less often."""
        if self.arena.used > self.huge_upto and self.mapping is not None:
            self.huge_upto = huge_pages.collapse(self.mapping, self.huge_upto, self.arena.used)


class RingDirectory:
    """The batch rings of this process by token: how an arriving message finds its ring.

    Why process-wide, not owned by a loader: a worker's message is rebuilt by pickle inside the DataLoader's result
    queue (torch's code, in the training process), which calls ``_arrive`` with the pickled fields and nothing
    else; no object a caller owns reaches that call, so the ring (its semaphores and the slots it keeps mapped,
    which stay in the training process) is looked up by the token the message carries.  A token names the process
    that made the ring (pid and a counter), so a ring's copy in a worker or a forked child never answers for
    another.

    Lifetime: a ring is listed from its creation until it is garbage collected (weak references: the directory
    never keeps a ring, nor its shared memory, alive); a message for a ring already gone is an error saying so."""

    def __init__(self):
        self._rings: "weakref.WeakValueDictionary[str, BatchRing]" = weakref.WeakValueDictionary()
        self._tokens = itertools.count()

    def add(self, ring: "BatchRing") -> str:
        """List ``ring``; its token (what its messages carry)."""
        token = f"{os.getpid()}:{next(self._tokens)}"
        self._rings[token] = ring
        return token

    def find(self, token: str) -> "BatchRing":
        """The ring of ``token``; ``RuntimeError`` when it is gone from this process."""
        ring = self._rings.get(token)
        if ring is None:
            raise RuntimeError("a batch arrived for a loader that no longer exists in this process")
        return ring


#: This process's rings (``RingDirectory``: why one per process, and how long a ring stays listed).
RINGS = RingDirectory()


class BatchRing:
    """Per DataLoader: ``slots`` shared-memory slots per worker and their free/claimed semaphores (module
    docstring).  Created in the training process before the workers start; each worker uses its own row."""

    def __init__(self, num_workers: int, slots: int, received: type | None = None, context=None, reserve: int = 0):
        context = context or multiprocessing.get_context()
        self.slots = slots
        #: A slot that grows is made at least this large (``GROWTH`` times): address space only, since a memfd's
        #: pages are allocated when first written.  Messages of several batches (``loader.transport.message_groups``) vary
        #: in size; without it a slot grew again each time a message was bigger than before, and every growth
        #: pays the fresh pages' faults (2-3 ms per MB here) and a copy of what the slot held.
        self.reserve = reserve
        #: ``[worker][slot]``: 1 while the slot is free (released by the training process, claimed by the worker).
        self._free = [[context.BoundedSemaphore(1) for _ in range(slots)] for _ in range(num_workers)]
        #: What arriving messages become in the training process (``ReceivedBatch`` or a subclass).
        self.received = received or ReceivedBatch
        #: Training process: by (pid, slot), the slot's (pid, generation, mapping, address).
        self._maps: dict[tuple[int, int], tuple[int, int, huge_pages.SharedMapping, int]] = {}
        self._owner: int | None = None  # worker side: the process the slots below belong to
        self._mine: list[_Slot] = []
        #: What this ring's messages carry to find it in the training process (``RINGS``).
        self.token = RINGS.add(self)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__, _maps={}, _owner=None, _mine=[])
        if multiprocessing.context.get_spawning_popen() is None:
            state["_free"] = None  # semaphores cross only to processes being started: elsewhere the ring is off
        return state

    @property
    def enabled(self) -> bool:
        return self._free is not None

    # -- worker side -----------------------------------------------------------------------------------------

    def claim(self, worker: int) -> _Slot | None:
        """A free slot of ``worker`` (its arena emptied), or None when all are in use: never waits."""
        if self._free is None:
            return None
        if self._owner != os.getpid():
            self._owner, self._mine = os.getpid(), [_Slot(k, self.reserve) for k in range(self.slots)]
        # Lowest free slot first: a steady loop then cycles through as few slots as it needs, which keeps more of
        # them in the CPU caches than a round robin over all of them (in one process: 2.35 ms per TSE batch with
        # one slot reused, 2.9 ms with 4 in turn).
        for slot, free in zip(self._mine, self._free[worker]):
            if free.acquire(block=False):
                slot.arena.reset()
                return slot
        return None

    def abandon(self, worker: int, slot: _Slot) -> None:
        """Give a claimed slot back unsent (its build failed)."""
        self._free[worker][slot.index].release()

    def build_group_in(self, worker: int, slot: _Slot, make_builds: Callable[[BatchArrays], list[Callable[[], dict]]]
                       ) -> "_Message":
        """Several batches built one after another into one slot: ``make_builds(slot.arrays)`` gives the builds,
        whose arrays are carved in turn from the slot's arena (it passes them to the builder), in one message that
        arrives as a list of batches sharing the slot: it is released when the last of them dies
        (``loader.transport.message_groups``).  The slot is given back if any build fails."""
        try:
            parts = [self._place(slot, build()) for build in make_builds(slot.arrays)]
            return self._message(worker, slot, parts, single=False)
        except BaseException:
            self.abandon(worker, slot)
            raise

    def pack(self, worker: int, slot: _Slot, batch: dict) -> "_Message":
        """The message for ``batch`` built (partly) in ``slot``: numeric arrays placed in the slot (copied in when
        built elsewhere), everything else kept for pickling."""
        return self._message(worker, slot, [self._place(slot, batch)], single=True)

    def _place(self, slot: _Slot, batch: dict) -> tuple[dict, dict, list]:
        """``batch``'s numeric arrays located in ``slot`` (those built elsewhere copied in after what the slot holds
        so far, growing it when they do not fit), as ``(placed, rest, order)``: per array its offset, dtype, shape
        and strides; the other values as they are; the field order."""
        arena = slot.arena
        placed: dict[str, tuple] = {}
        outside: list[str] = []
        rest: dict = {}
        for name, value in batch.items():
            if not isinstance(value, np.ndarray) or value.dtype.kind not in _NUMERIC_KINDS:
                rest[name] = value
                continue
            offset = arena.offset_of(value) if min(value.strides, default=0) >= 0 else None
            if offset is None:
                outside.append(name)
            else:
                placed[name] = (offset, value.dtype.str, value.shape, value.strides)
        need = arena.used + sum(aligned(batch[name].nbytes) for name in outside)
        if need > arena.capacity or slot.fd is None:
            slot.grow(need)
            arena = slot.arena
        for name in outside:
            value = batch[name]
            offset = arena.used
            dest = arena.take(value.shape, value.dtype)
            dest[...] = value
            placed[name] = (offset, value.dtype.str, value.shape, dest.strides)
        return placed, rest, list(batch)

    def _message(self, worker: int, slot: _Slot, parts: list, single: bool) -> "_Message":
        """The message naming ``slot`` in its current generation (its memory attached when the training process has
        not seen this generation yet) and the batches ``parts`` placed in it."""
        slot.harden()  # before the training process can see the slot: nobody else touches it meanwhile
        handle = None
        if slot.sent != slot.generation:
            handle, slot.sent = DupFd(slot.fd), slot.generation
        return _Message(self.token, worker, slot.index, os.getpid(), slot.generation, slot.arena.capacity, handle,
                        parts, single)

    # -- training process side -------------------------------------------------------------------------------

    def receive(self, worker: int, index: int, pid: int, generation: int, capacity: int, handle, parts: list,
                single: bool) -> "ReceivedBatch | list[ReceivedBatch]":
        """An arriving message as a ``received`` batch whose arrays view the slot (mapped once per generation), or
        for a message of several batches (``build_group_in``) a list of them holding the slot together."""
        key = (pid, index)  # by process: two DataLoaders over one dataset (torchdata's) have workers numbered alike
        if handle is not None:
            fd = handle.detach()
            try:
                mapped = _map(fd, capacity)
            finally:
                os.close(fd)
            self._maps[key] = (pid, generation, mapped, mapped.address)
        known = self._maps.get(key)
        if known is None or known[:2] != (pid, generation):
            raise RuntimeError(f"batch slot {index} of worker {worker} (pid {pid}, generation {generation}) arrived "
                               f"before its memory: the ring's messages were reordered")
        lease = _Lease(known[2], known[3], capacity, self._free[worker][index])
        if single:
            return self.received(lease, *parts[0])
        return [self.received(lease, *part) for part in parts]


class _Lease:
    """One delivered batch's hold on its slot: the base of every array of the batch (``__array_interface__``), so
    it lives exactly as long as any of them; when it dies in the process that received the batch, the slot is
    released to its worker (``_release``)."""

    __slots__ = ("__array_interface__", "_mapped", "__weakref__")

    def __init__(self, mapped: huge_pages.SharedMapping, address: int, capacity: int, free):
        self._mapped = mapped  # keeps the mapping alive under the arrays
        self.__array_interface__ = {"shape": (capacity,), "typestr": "|u1", "data": (address, False), "version": 3}
        weakref.finalize(self, _release, free, os.getpid())


def _release(free, receiver: int) -> None:
    """A dead lease's slot back to its worker, only in the process that received the batch.

    Why: a process forked from the training process (a DataLoader worker started later, any multiprocessing
    child) inherits its leases and their finalizers, and the slot's semaphore is the same one there.  Were the
    child to release the slot when its copy of a lease dies (garbage not yet collected at the fork, collected in
    the child), the training process would release it a second time when its own copy dies; if the worker has
    claimed the slot again in between, that second release frees it under a batch the training loop still holds,
    and the worker's next batch overwrites it (tests/loader/transport/test_batch_ring.py, the forked-child test)."""
    if os.getpid() == receiver:
        free.release()


class _Message:
    """What a worker sends: small, pickled; it becomes a ``ReceivedBatch`` (or a list of them) as it is unpickled
    in the training process (so a message the DataLoader drops unread still releases its slot)."""

    def __init__(self, token: str, *fields):
        self.token = token
        self.fields = fields

    def __reduce__(self):
        return _arrive, (self.token, *self.fields)


def _arrive(token: str, *fields) -> "ReceivedBatch | list[ReceivedBatch]":
    return RINGS.find(token).receive(*fields)


class ReceivedBatch:
    """A batch as it arrives in the training process; ``arrays()`` gives the batch dict, its arrays viewing the
    slot (valid for as long as they, or anything made from them without a copy, are alive)."""

    def __init__(self, lease: _Lease, placed: dict, rest: dict, order: list):
        self._lease = lease
        self._placed = placed
        self._rest = rest
        self._order = order

    def arrays(self) -> dict:
        buffer = np.asarray(self._lease)
        out = {}
        for name in self._order:
            if name in self._placed:
                offset, dtype, shape, strides = self._placed[name]
                out[name] = np.ndarray(shape, dtype=dtype, buffer=buffer, offset=offset, strides=strides)
            else:
                out[name] = self._rest[name]
        return out


__all__ = ["BatchRing", "GROWTH", "MIN_SLOT_BYTES", "RINGS", "ReceivedBatch", "RingDirectory", "supported"]
