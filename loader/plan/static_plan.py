"""The static epoch plan and the pieces every plan shares: ``EpochPlan``, ``PlanError``, ``batch_rng`` (and its
reused form for batch builders, ``BatchGenerator``).

``loader.plan.plan_epoch`` composes a whole epoch (weighting, train windows, then this plan or the budget plan of
``loader.plan.batching``); both planners build on this module, which is why it sits below them and imports neither.

``make_epoch_plan(num_items, batch_size, seed, epoch, rank, world_size, shuffle, tail)`` returns the rank's
batches as small integer arrays.  Nothing here reads audio or holds per-sample Python objects, and nothing uses
global random state, so every rank computes its share independently and a resumed run recomputes the same plan.

Exactly-once: the epoch's permutation of the items is cut into rounds of ``batch_size * world_size``; global
batch ``g`` goes to rank ``g % world_size``.  The last, incomplete round is either padded with repeats of the
permutation's first items, flagged ``valid = False`` (``tail="pad"``: every item is seen once, every rank gets the
same number of batches), or left out (``tail="drop"``: counted in ``dropped``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.loader.plan.shuffle_window import window_order
from speechpack.schemas.errors import SpeechpackError


#: ``tail`` values: what happens to the last, incomplete round of batches (module docstring).
TAIL_POLICIES = ("pad", "drop")


class PlanError(SpeechpackError):
    """The plan cannot be made as asked (bad rank, world size, epoch or seed)."""


@dataclass(frozen=True)
class EpochPlan:
    """One rank's batches for one epoch.

    ``items[b]`` are indices into the item universe, ``valid[b]`` flags real rows (False for tail repeats), and
    ``global_batch[b]`` is the batch's number across all ranks: the key of its random draws.

    Ragged plans (``loader.plan.batching``, batches of different sizes) set ``offsets``: ``items`` and ``valid`` are
    then flat, and batch ``b`` is ``items[offsets[b]:offsets[b + 1]]``.  ``batch(b)`` reads either form.
    """

    items: np.ndarray
    valid: np.ndarray
    global_batch: np.ndarray
    padded: int
    dropped: int
    offsets: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.items) if self.offsets is None else len(self.offsets) - 1

    def batch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch ``b``'s (items, valid)."""
        if self.offsets is None:
            return self.items[b], self.valid[b]
        lo, hi = int(self.offsets[b]), int(self.offsets[b + 1])
        return self.items[lo:hi], self.valid[lo:hi]


def epoch_permutation(num_items: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The epoch's order of ``range(num_items)``: a fresh permutation per (seed, epoch), or the identity."""
    if not shuffle:
        return np.arange(num_items, dtype=np.int64)
    return batch_rng(seed, epoch, -1).permutation(num_items).astype(np.int64)


def make_epoch_plan(num_items: int, batch_size: int, seed: int, epoch: int, rank: int, world_size: int,
                    shuffle: bool, tail: str, *, windows=None, sync: str | None = None) -> EpochPlan:
    """Rank ``rank``'s batches of ``epoch`` (see the module docstring for the rules).

    ``windows`` (a ``loader.plan.shuffle_window.ShuffleWindows``) replaces the whole-epoch permutation by fairseq2
    shuffle windows over the items and then over the batches.  ``sync`` (default: ``tail``) evens the batch count
    across ranks on its own: ``pad`` adds batches of repeats (rows invalid), ``drop`` leaves the surplus batches
    out, while ``tail`` then only decides the last, incomplete batch (padded, or dropped)."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise PlanError(f"rank must be in [0, {world_size - 1}] for world_size {world_size}, got {rank}")
    if batch_size < 1:
        raise PlanError(f"batch_size must be at least 1, got {batch_size}")
    sync = tail if sync is None else sync
    if tail not in TAIL_POLICIES or sync not in TAIL_POLICIES:
        raise PlanError(f"tail and sync must be 'pad' or 'drop', got {tail!r} and {sync!r}")
    rng = batch_rng(seed, epoch, -1)  # with windows, the item order and then the batch order are drawn from it
    if windows is not None and shuffle:
        order = windows.item_order(num_items, rng)
    else:
        order = epoch_permutation(num_items, seed, epoch, shuffle)
    full_batches = -(-num_items // batch_size) if tail == "pad" else num_items // batch_size
    real = min(num_items, full_batches * batch_size)
    batches_total = (-(-full_batches // world_size) if sync == "pad" else full_batches // world_size) * world_size
    total = batches_total * batch_size
    kept = min(real, total)
    padded, dropped = total - kept, num_items - kept
    # Repeats cycle through the epoch's real items (the first of the order), flagged invalid.
    order = np.resize(order[:real], total) if real else order[:0]
    valid = np.arange(total) < kept
    batches = order.reshape(-1, batch_size)
    valid = valid.reshape(-1, batch_size)
    if windows is not None and shuffle and len(batches):
        batch_order = window_order(len(batches), windows.batch, rng)
        batches, valid = batches[batch_order], valid[batch_order]
    mine = np.arange(rank, len(batches), world_size, dtype=np.int64)
    return EpochPlan(items=batches[mine], valid=valid[mine], global_batch=mine, padded=padded, dropped=dropped)


def batch_rng(seed: int, epoch: int, global_batch: int) -> np.random.Generator:
    """A counter-based generator keyed by (seed, epoch, batch): the same draws whichever worker asks.

    Philox's key is the seed; the counter's upper words hold the epoch and the batch, so streams of different
    batches never overlap (each would need 2**128 draws to reach the next).  ``global_batch = -1`` is the
    epoch's permutation.
    """
    if seed < 0 or epoch < 0:
        raise PlanError(f"seed and epoch must be non-negative, got seed={seed}, epoch={epoch}")
    counter = np.array([0, 0, global_batch + 1, epoch], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=seed, counter=counter))


def at_counter(generator: np.random.Generator, fresh: dict, counter: list[int]) -> np.random.Generator:
    """``generator`` (Philox) set to the start of the stream at ``counter``, as a new ``Philox(key, counter)``
    would begin: ``fresh`` is the state of a freshly built one with the same key (empty buffer)."""
    generator.bit_generator.state = {**fresh, "buffer": fresh["buffer"].copy(),
                                     "state": {"counter": np.array(counter, dtype=np.uint64),
                                               "key": fresh["state"]["key"]}}
    return generator


class BatchGenerator:
    """``batch_rng(seed, epoch, batch)`` for one batch after another, from one generator object reused: the same
    stream, bit for bit.  Building a ``Philox`` draws OS entropy for a seed sequence that the explicit key then
    overrides (about 12 µs, a few percent of a short TSE batch); setting a kept one's counter costs about 4 µs.
    The generator one call returns is valid until the next call.  Pickles as its seed (a worker makes its own)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._generator = batch_rng(seed, 0, 0)  # checks the seed
        self._fresh = self._generator.bit_generator.state  # a fresh generator's state, keyed by seed

    def __call__(self, epoch: int, global_batch: int) -> np.random.Generator:
        if epoch < 0:
            raise PlanError(f"epoch must be non-negative, got {epoch}")
        return at_counter(self._generator, self._fresh, [0, 0, global_batch + 1, epoch])

    def __getstate__(self) -> dict:
        return {"seed": self.seed}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["seed"])
