"""What every epoch plan is built from: ``EpochPlan`` (what a planner returns), the epoch's order (a permutation,
or fairseq2's shuffle windows), the static plan (batches of ``batch_size``) and the dealing of the epoch's global
sequence of batches to ranks.  Its draws: ``loader.rng.batch_rng``; its error: ``schemas.errors.PlanError``.

``loader.plan.plan_epoch`` composes a whole epoch (weighting, train windows, then this plan or the budget plan of
``loader.plan.batching``); both planners build on this module, which is why it sits below them and imports neither.
Nothing here reads audio or holds per-sample Python objects, and nothing uses global random state, so every rank
computes its share independently and a resumed run recomputes the same plan.

**The static plan.**  ``make_epoch_plan(num_items, batch_size, seed, epoch, rank, world_size, shuffle, tail)``
returns the rank's batches as small integer arrays.  Exactly-once: the epoch's permutation of the items is cut into
batches of ``batch_size``, the epoch's global sequence, whatever the world size.  The last, incomplete batch and
round are either padded with repeats of the permutation's first items, flagged ``valid = False`` (``tail="pad"``:
every item is seen once, every rank gets the same number of batches), or left out (``tail="drop"``: counted in
``dropped``).

**Shuffle windows** (``window_order``, ``ShuffleWindows``).  fairseq2's pipelines (and so Omnilingual's recipes)
shuffle a stream through a buffer of ``window`` elements: ``0`` shuffles the whole stream, ``1`` leaves it as it
is, ``n > 1`` is a sliding window: the first ``n`` elements fill the buffer; each next element replaces one drawn
uniformly from the buffer, which is emitted; when the stream ends the buffer is emitted in a random order.  An
element can therefore move at most ``n - 1`` places towards the front, and any distance towards the back
(fairseq2's ``DataPipelineBuilder.shuffle``, https://facebookresearch.github.io/fairseq2/ ,
"shuffle(shuffle_window)").  speechpack computes the same process on indices, in the plan: a permutation drawn only
from the generator it is given, so the order is the same on every rank and worker and after a resume.
``window_order`` costs one Python step per element for ``n > 1`` (a few tenths of a second per million), which the
plan pays once per epoch and process.

**Dealing** (``pass_end``, ``rank_batches``, ``resume_point``): what lets a resume state saved at one world size
resume at another (docs/loader.md, "Resume").  Every planner first makes the epoch's *global* sequence: ``count`` real
batches, numbered ``0 .. count - 1``, a pure function of (units, config, seed, epoch) that does not depend on the
world size.  Beyond ``count`` the sequence goes on with padding batches (repeats, every row ``valid = False``), each
also a function of its number alone.  The world size only decides how that sequence is dealt and where it stops:

- a pass deals global batches from ``global_start`` on (0 for a fresh epoch; a resumed pass starts where the saved
  ranks had got to): batch ``g`` goes to rank ``(g - global_start) % world_size``;
- every rank takes the same number of steps: the remaining real batches rounded up to a multiple of the world size
  with padding batches (``sync = "pad"``), or down, leaving the last ones out (``sync = "drop"``).

After ``k`` steps on every rank, the global batches ``global_start .. global_start + k * world_size - 1`` are
consumed, whatever the world size: that number, the global position, is what a resume state carries.  A pass at
the same world size that starts at a multiple of it deals exactly the batches the uninterrupted pass would have
dealt from there, so resuming without a change of world size changes nothing.  A batch's random draws are keyed by
its global number (``loader.rng``), so a global batch is the same batch, bit for bit, at any world size and with
any ``num_workers``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.loader.rng import batch_rng
from speechpack.schemas.errors import PlanError


#: The shuffle window that shuffles the whole stream (fairseq2's 0).
WHOLE = 0
#: The shuffle window that leaves the order as it is.
NO_SHUFFLE = 1


def window_order(count: int, window: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation of ``range(count)``: the order a ``window``-element shuffle buffer emits (module docstring)."""
    if window < 0:
        raise ValueError(f"shuffle window must be >= 0, got {window}")
    if window == NO_SHUFFLE or count <= 1:
        return np.arange(count, dtype=np.int64)
    if window == WHOLE or window >= count:
        # A buffer that holds everything emits a uniform permutation: the whole-stream shuffle.
        return rng.permutation(count).astype(np.int64)
    draws = rng.integers(0, window, size=count - window).tolist()
    buffer = list(range(window))
    emitted = []
    for step, slot in enumerate(draws, start=window):
        emitted.append(buffer[slot])
        buffer[slot] = step
    tail = np.asarray(buffer, dtype=np.int64)[rng.permutation(window)]
    return np.concatenate([np.asarray(emitted, dtype=np.int64), tail])


@dataclass(frozen=True)
class ShuffleWindows:
    """The three shuffles of an epoch plan, each a fairseq2 window (``0`` whole, ``1`` none, ``n`` sliding):
    ``source`` reorders the items as read (Omnilingual's fragment shuffle), ``example`` reorders them before
    batching, ``batch`` reorders the batches.  A task whose planning view has no ``shuffle_windows`` shuffles
    the items and the batches whole, as speechpack always did."""

    source: int = WHOLE
    example: int = WHOLE
    batch: int = WHOLE

    def item_order(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """The items' order before batching: the source shuffle, then the example shuffle."""
        order = window_order(count, self.source, rng)
        return order[window_order(count, self.example, rng)]


#: How the steps of a pass are evened across ranks (``sync``; ``TAIL_POLICIES``).
SYNC_PAD, SYNC_DROP = "pad", "drop"


def pass_steps(count: int, global_start: int, world_size: int, sync: str) -> int:
    """The steps every rank takes in a pass over ``count`` real batches dealt from ``global_start`` on: the
    remaining batches over the ranks, rounded up (``pad``: the short ranks get padding batches) or down
    (``drop``: the surplus is left out)."""
    remaining = max(count - global_start, 0)
    return -(-remaining // world_size) if sync == SYNC_PAD else remaining // world_size


def pass_end(count: int, global_start: int, world_size: int, sync: str) -> int:
    """The global batch after the pass's last one (the pass deals ``[global_start, pass_end)``)."""
    return global_start + world_size * pass_steps(count, global_start, world_size, sync)


def rank_batches(count: int, global_start: int, rank: int, world_size: int, sync: str) -> np.ndarray:
    """The global numbers of rank ``rank``'s batches in the pass, in order: ``global_start + rank``, then every
    ``world_size``-th.  Numbers from ``count`` on are padding batches."""
    steps = pass_steps(count, global_start, world_size, sync)
    return global_start + rank + world_size * np.arange(steps, dtype=np.int64)


#: ``rank`` of a planner that plans every rank at once: the whole pass, its batches in global order (the dry run,
#: ``loader.plan.planning_report``, which would otherwise plan the same epoch once per rank).
EVERY_RANK = None


def dealt_batches(count: int, global_start: int, rank: int | None, world_size: int, sync: str) -> np.ndarray:
    """``rank_batches`` of one rank, or with ``rank`` ``EVERY_RANK`` every batch of the pass in global order:
    ``global_start .. pass_end - 1``, where rank ``r`` has those at offsets ``r, r + world_size, ...``."""
    if rank is EVERY_RANK:
        return np.arange(global_start, pass_end(count, global_start, world_size, sync), dtype=np.int64)
    return rank_batches(count, global_start, rank, world_size, sync)


def check_rank(rank: int | None, world_size: int) -> None:
    if world_size < 1 or (rank is not EVERY_RANK and not 0 <= rank < world_size):
        raise PlanError(f"rank must be in [0, {world_size - 1}] for world_size {world_size}, got {rank}")


def resume_point(position: int, world_size: int) -> tuple[int, int]:
    """Where a pass at ``world_size`` resumes the global position ``position``: ``(global_start, steps done)``.

    The pass deals from ``position % world_size`` (so it is the uninterrupted pass when ``position`` is a multiple
    of the world size), and its first ``position // world_size`` steps, the batches before ``position``, count as
    done."""
    return position % world_size, position // world_size


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

    def sizes(self) -> np.ndarray:
        """Rows of each batch."""
        if self.offsets is None:
            return np.full(len(self), self.items.shape[1] if self.items.ndim == 2 else 0, dtype=np.int64)
        return np.diff(self.offsets).astype(np.int64)

    def rank_view(self, rank: int, world_size: int) -> "EpochPlan":
        """Of a plan of every rank (``EVERY_RANK``: the pass in global order), the plan rank ``rank`` has: its
        batches are those at offsets ``rank, rank + world_size, ...``; ``padded`` and ``dropped`` are the pass's."""
        if self.offsets is None:
            return EpochPlan(items=self.items[rank::world_size], valid=self.valid[rank::world_size],
                             global_batch=self.global_batch[rank::world_size], padded=self.padded,
                             dropped=self.dropped)
        mine = np.arange(rank, len(self), world_size, dtype=np.int64)
        sizes = self.sizes()[mine]
        starts = np.repeat(self.offsets[mine] - (np.cumsum(sizes) - sizes), sizes)
        rows = starts + np.arange(int(sizes.sum()), dtype=np.int64)
        return EpochPlan(items=self.items[rows], valid=self.valid[rows], global_batch=self.global_batch[mine],
                         padded=self.padded, dropped=self.dropped,
                         offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))


def epoch_permutation(num_items: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    """The epoch's order of ``range(num_items)``: a fresh permutation per (seed, epoch), or the identity."""
    if not shuffle:
        return np.arange(num_items, dtype=np.int64)
    return batch_rng(seed, epoch, -1).permutation(num_items).astype(np.int64)


def make_epoch_plan(num_items: int, batch_size: int, seed: int, epoch: int, rank: int | None, world_size: int,
                    shuffle: bool, tail: str, *, shuffle_windows=None, sync: str | None = None,
                    global_start: int = 0) -> EpochPlan:
    """Rank ``rank``'s batches of ``epoch`` (see the module docstring for the rules).

    ``shuffle_windows`` (a ``ShuffleWindows``) replaces the whole-epoch permutation by fairseq2
    shuffle windows over the items and then over the batches.  ``sync`` (default: ``tail``) evens the batch count
    across ranks on its own: ``pad`` adds batches of repeats (rows invalid), ``drop`` leaves the surplus batches
    out, while ``tail`` then only decides the last, incomplete batch (padded, or dropped).  ``global_start``: the
    global batch the pass deals from (module docstring, "Dealing"; a resumed pass).  ``rank`` ``EVERY_RANK``: every
    rank's batches at once, in global order (``EpochPlan.rank_view`` takes one rank's out)."""
    check_rank(rank, world_size)
    if batch_size < 1:
        raise PlanError(f"batch_size must be at least 1, got {batch_size}")
    sync = tail if sync is None else sync
    if tail not in TAIL_POLICIES or sync not in TAIL_POLICIES:
        raise PlanError(f"tail and sync must be 'pad' or 'drop', got {tail!r} and {sync!r}")
    rng = batch_rng(seed, epoch, -1)  # with shuffle windows, the item order and then the batch order are drawn from it
    if shuffle_windows is not None and shuffle:
        order = shuffle_windows.item_order(num_items, rng)
    else:
        order = epoch_permutation(num_items, seed, epoch, shuffle)
    # The global sequence (module docstring, "Dealing"): ``count`` real batches cut from the order, the last one
    # completed with repeats (``tail: pad``); row ``j`` of real batch ``k`` is position ``k * batch_size + j`` of the
    # order repeated cyclically, and a padding batch ``g >= count`` is positions ``g * batch_size + j``: repeats of
    # the epoch's first items, invalid.  With shuffle windows the real batches are shuffled among themselves.
    count = -(-num_items // batch_size) if tail == "pad" else num_items // batch_size
    real = min(num_items, count * batch_size)
    source = np.arange(max(count, 1), dtype=np.int64)  # global batch -> the real batch it is (cut order)
    if shuffle_windows is not None and shuffle and count:
        source = window_order(count, shuffle_windows.batch, rng)
    mine = dealt_batches(count, global_start, rank, world_size, sync)
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


__all__ = ["EVERY_RANK", "EpochPlan", "NO_SHUFFLE", "SYNC_DROP", "SYNC_PAD", "ShuffleWindows", "TAIL_POLICIES",
           "WHOLE", "check_rank", "dealt_batches", "epoch_permutation", "make_epoch_plan", "pass_end", "pass_steps",
           "rank_batches", "resume_point", "window_order"]
