"""The static epoch plan and what every plan returns, ``EpochPlan`` (its draws: ``loader.rng.batch_rng``; its
error: ``schemas.errors.PlanError``).

``loader.plan.plan_epoch`` composes a whole epoch (weighting, train windows, then this plan or the budget plan of
``loader.plan.batching``); both planners build on this module, which is why it sits below them and imports neither.

``make_epoch_plan(num_items, batch_size, seed, epoch, rank, world_size, shuffle, tail)`` returns the rank's
batches as small integer arrays.  Nothing here reads audio or holds per-sample Python objects, and nothing uses
global random state, so every rank computes its share independently and a resumed run recomputes the same plan.

Exactly-once: the epoch's permutation of the items is cut into batches of ``batch_size``, the epoch's global
sequence, whatever the world size; global batch ``g`` goes to rank ``g % world_size`` (``loader.plan.dealing``, which
also deals a resumed pass from any global position).  The last, incomplete batch and round are either padded with
repeats of the permutation's first items, flagged ``valid = False`` (``tail="pad"``: every item is seen once, every
rank gets the same number of batches), or left out (``tail="drop"``: counted in ``dropped``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.loader.plan.dealing import pass_end, rank_batches
from speechpack.loader.plan.shuffle_window import window_order
from speechpack.loader.rng import batch_rng
from speechpack.schemas.errors import PlanError


#: ``tail`` values: what happens to the last, incomplete round of batches (module docstring).
TAIL_POLICIES = ("pad", "drop")


@dataclass(frozen=True)
class EpochPlan:
    """One rank's batches for one epoch.

    ``items[b]`` are indices into the item universe, ``valid[b]`` flags real rows (False for tail repeats), and
    ``global_batch[b]`` is the batch's number across all ranks: the key of its random draws.  Over all ranks,
    ``padded`` counts the rows of the pass's batches flagged invalid, and ``dropped`` the epoch's items that no
    batch up to the pass's end holds as valid (a resumed pass counts the batches before its start as dealt).

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
                    shuffle: bool, tail: str, *, windows=None, sync: str | None = None,
                    global_start: int = 0) -> EpochPlan:
    """Rank ``rank``'s batches of ``epoch`` (see the module docstring for the rules).

    ``windows`` (a ``loader.plan.shuffle_window.ShuffleWindows``) replaces the whole-epoch permutation by fairseq2
    shuffle windows over the items and then over the batches.  ``sync`` (default: ``tail``) evens the batch count
    across ranks on its own: ``pad`` adds batches of repeats (rows invalid), ``drop`` leaves the surplus batches
    out, while ``tail`` then only decides the last, incomplete batch (padded, or dropped).  ``global_start``: the
    global batch the pass deals from (``loader.plan.dealing``; a resumed pass)."""
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
    # The global sequence (loader.plan.dealing): ``count`` real batches cut from the order, the last one completed
    # with repeats (``tail: pad``); row ``j`` of real batch ``k`` is position ``k * batch_size + j`` of the order
    # repeated cyclically, and a padding batch ``g >= count`` is positions ``g * batch_size + j``: repeats of the
    # epoch's first items, invalid.  With windows the real batches are shuffled among themselves.
    count = -(-num_items // batch_size) if tail == "pad" else num_items // batch_size
    real = min(num_items, count * batch_size)
    source = np.arange(max(count, 1), dtype=np.int64)  # global batch -> the real batch it is (cut order)
    if windows is not None and shuffle and count:
        source = window_order(count, windows.batch, rng)
    mine = rank_batches(count, global_start, rank, world_size, sync)
    rows = _source_of(mine, source, count)[:, None] * batch_size + np.arange(batch_size, dtype=np.int64)
    items = order[rows % real] if real else np.zeros((0, batch_size), np.int64)
    end = pass_end(count, global_start, world_size, sync)
    valid_rows = np.clip(real - _source_of(np.arange(end, dtype=np.int64), source, count) * batch_size, 0,
                         batch_size)
    valid_rows[count:] = 0
    padded = (end - global_start) * batch_size - int(valid_rows[global_start:].sum())
    dropped = num_items - int(valid_rows.sum())
    return EpochPlan(items=items, valid=rows < real, global_batch=mine, padded=padded, dropped=dropped)


def _source_of(batches: np.ndarray, source: np.ndarray, count: int) -> np.ndarray:
    """The cut-order batch each global batch holds: ``source[g]`` for a real batch, ``g`` itself for padding."""
    return np.where(batches < count, source[np.minimum(batches, max(count - 1, 0))], batches)
