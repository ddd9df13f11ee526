"""Length-aware (budget) batching, as a pure function of (lengths, seed, epoch, rank, world size).  The lengths
are the planning units' (items, or train-window chunks: ``loader.plan.train_windows``).

Budget batching (``make_budget_plan``), every step drawn from ``loader.rng.batch_rng(seed, epoch, -1)``:

1. shuffle the items (the same permutation ``make_epoch_plan`` uses), cut the order into sort windows
   of ``window_items`` items and sort each window by length, longest first;
2. cut each window greedily: a batch starting at an item of length ``T`` (the batch's longest) takes
   ``budget // cost(T)`` items (``cost`` = ``T`` or ``T**2``), clamped to ``[min_batch, max_batch]`` and
   rounded down to a multiple of ``num_seqs_multiple_of`` (the multiple wins over ``min_batch``).  An item longer than the budget forms a batch alone
   (or with ``num_seqs_multiple_of - 1`` others, the smallest size allowed): the only way the budget is exceeded,
   besides a ``min_batch`` larger than what fits, which wins over the budget.  With ``keep_small`` (fairseq2's
   rule, the ASR task's) a batch of which fewer than ``num_seqs_multiple_of`` rows fit holds only what fits
   (one 60 s utterance under a 60 s budget), and only larger batches are rounded to the multiple (what fits the
   budget decides, not how many items a window has left);
3. a window's last batch may be short; when it is not a multiple of ``num_seqs_multiple_of`` its items are left
   over and cut again, all windows' leftovers together, at the end; the final remainder (fewer than the multiple)
   is padded with repeats of its own items flagged ``valid = False`` (``tail: pad``) or dropped (``tail: drop``);
   with ``keep_small`` (fairseq2's rules), ``tail: pad`` serves it as a short batch of valid rows instead, as
   fairseq2's ``bucket_by_length`` flushes a partly filled bucket;
4. the batches are shuffled (``shuffle_windows``: fairseq2 shuffle windows in steps 1 and 4 instead, see
   ``loader.plan.static_plan``): the epoch's global sequence, the same at every world size.  Their count is
   made a multiple of the world size (rule ``sync``, default ``tail``): ``pad`` appends repeats of the first
   batches, all rows ``valid = False``; ``drop`` leaves the last batches out (their items counted in
   ``dropped``).  Global batch ``g`` goes to rank ``g % world_size`` (``loader.plan.static_plan``, which also deals a
   resumed pass from any global position): every rank has the same number of batches and every item is valid
   exactly once (``pad``).

Planning is vectorised apart from one cheap Python step per batch: a 10M-item epoch plans in about a second
(bench/plan_throughput.py).  Lengths are planning units' padded lengths; with ``cost: quadratic`` a batch
costs ``B * T_max**2``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.loader.plan.static_plan import (
    TAIL_POLICIES,
    EpochPlan,
    ShuffleWindows,
    check_rank,
    dealt_batches as pass_batches,
    pass_end,
    window_order,
)
from speechpack.loader.rng import batch_rng
from speechpack.schemas.errors import PlanError
from speechpack.schemas.units import plural

BATCH_TYPES = ("static", "budget")
COSTS = ("linear", "quadratic")
#: Items sorted together in step 1: large enough that neighbours have similar lengths, small enough that
#: composition changes a lot between epochs.
DEFAULT_WINDOW_ITEMS = 1 << 18


@dataclass(frozen=True)
class BudgetArgs:
    """``dataset_args.batching`` with ``type: budget`` (see the module docstring)."""

    budget: int
    cost: str = "linear"
    min_batch: int = 1
    max_batch: int | None = None
    multiple_of: int = 1
    #: fairseq2's rule (``create_bucket_sizes``): when fewer than ``multiple_of`` rows of a batch's longest unit fit
    #: the budget, the batch holds what fits rather than being rounded up to ``multiple_of`` over the budget; and
    #: with ``tail: pad`` the epoch's remainder is a short batch of valid rows (a flushed bucket), not padded.
    keep_small: bool = False
    window_items: int = DEFAULT_WINDOW_ITEMS


def _cost(lengths: np.ndarray, cost: str) -> np.ndarray:
    lengths = lengths.astype(np.int64)
    return lengths * lengths if cost == "quadratic" else lengths


def _cut(order: np.ndarray, costs: np.ndarray, args: BudgetArgs, sizes: list, leftovers: list) -> int:
    """Greedy cut of one window (``order`` sorted by cost, largest first): batch sizes appended to ``sizes``, a
    last batch that is not a multiple appended to ``leftovers``; returns the items cut into batches."""
    n = len(order)
    budget_fits = np.maximum(args.budget // np.maximum(costs[order], 1), 1)
    cap = n if args.max_batch is None else args.max_batch
    fits = np.clip(budget_fits, args.min_batch, cap)
    m = args.multiple_of
    small = np.zeros(n, dtype=bool)
    if m > 1 and args.keep_small:
        # Small: fewer than the multiple fit the budget.  Fewer left in the window is no reason (the epoch's last
        # few items would pass as a short batch of valid rows): those are left over, then padded or dropped.
        small = np.clip(budget_fits, args.min_batch, args.max_batch) < m
        fits = np.where(small, fits, np.maximum(fits // m * m, m))
    elif m > 1:
        fits = np.maximum(fits // m * m, m)
    fits, small = fits.tolist(), small.tolist()
    i = 0
    while i < n:
        size = fits[i]
        if i + size > n:
            size = n - i
            if size % m and not small[i]:
                leftovers.append(order[i:])
                return i
        sizes.append(size)
        i += size
    return i


def make_budget_plan(lengths: np.ndarray, args: BudgetArgs, seed: int, epoch: int, rank: int | None,
                     world_size: int, shuffle: bool, tail: str, *,
                     shuffle_windows: ShuffleWindows | None = None,
                     sync: str | None = None, global_start: int = 0, max_rows: int | None = None) -> EpochPlan:
    """Rank ``rank``'s ragged batches of ``epoch`` (see the module docstring).  ``shuffle_windows`` replaces the
    whole-epoch shuffles of steps 1 and 4 by fairseq2 shuffle windows (``loader.plan.static_plan``); ``sync`` (``pad`` or
    ``drop``, default: ``tail``) is the rule of step 4 that evens the batch count across ranks.  ``rank``
    ``EVERY_RANK``: every rank's batches at once, in global order; ``max_rows``: a ``PlanError`` before the rows
    are gathered when the batches dealt hold more."""
    check_rank(rank, world_size)
    sync = tail if sync is None else sync
    if tail not in TAIL_POLICIES or sync not in TAIL_POLICIES:
        raise PlanError(f"tail and sync must be 'pad' or 'drop', got {tail!r} and {sync!r}")
    lengths = np.asarray(lengths, dtype=np.int64)
    num_items = len(lengths)
    rng = batch_rng(seed, epoch, -1)
    if not shuffle:
        order = np.arange(num_items, dtype=np.int64)
    elif shuffle_windows is not None:
        order = shuffle_windows.item_order(num_items, rng)
    else:
        order = rng.permutation(num_items).astype(np.int64)
    costs = _cost(lengths, args.cost)
    # Sort within sort windows, longest first: one argsort per window (ties in shuffled order).
    for w0 in range(0, num_items, args.window_items):
        part = order[w0:w0 + args.window_items]
        order[w0:w0 + args.window_items] = part[np.argsort(-costs[part], kind="stable")]
    sizes: list[int] = []
    leftovers: list[np.ndarray] = []
    pieces = []
    for w0 in range(0, num_items, args.window_items):
        chunk = order[w0:w0 + args.window_items]
        pieces.append(chunk[:_cut(chunk, costs, args, sizes, leftovers)])
    valid_flat = [np.ones(sum(len(p) for p in pieces), dtype=bool)]
    if leftovers:
        rest = np.concatenate(leftovers)
        rest = rest[np.argsort(-costs[rest], kind="stable")]
        tail_left: list[np.ndarray] = []
        cut = _cut(rest, costs, args, sizes, tail_left)
        pieces.append(rest[:cut])
        valid_flat.append(np.ones(cut, dtype=bool))
        if tail_left:
            last = tail_left[0]
            # The remainder may hold more than the multiple (``_cut`` leaves over whatever is not a multiple; all
            # of it fits the budget): its whole multiples form one more batch, so the tail is fewer than the
            # multiple and no item is lost.
            whole = len(last) // args.multiple_of * args.multiple_of
            if whole:
                pieces.append(last[:whole])
                valid_flat.append(np.ones(whole, dtype=bool))
                sizes.append(whole)
                last = last[whole:]
            if tail == "pad" and args.keep_small and len(last):
                # fairseq2's bucketing flushes a partly filled bucket as it is: a short batch, every row valid
                pieces.append(last)
                valid_flat.append(np.ones(len(last), dtype=bool))
                sizes.append(len(last))
            elif tail == "pad":  # (with ``drop`` its items are simply in no batch: counted in ``dropped`` below)
                pieces.append(np.resize(last, args.multiple_of))
                valid_flat.append(np.arange(args.multiple_of) < len(last))
                sizes.append(args.multiple_of)
    flat = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
    valid = np.concatenate(valid_flat)
    sizes_a = np.asarray(sizes, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes_a)])
    # Shuffle the batch order, then equalise the count across ranks.
    if not shuffle:
        batch_order = np.arange(len(sizes_a))
    elif shuffle_windows is not None:
        batch_order = window_order(len(sizes_a), shuffle_windows.batch, rng)
    else:
        batch_order = rng.permutation(len(sizes_a))
    # The global sequence (loader.plan.static_plan): the batches in ``batch_order``; a padding batch ``g >= count``
    # repeats batch ``batch_order[g % count]``, every row invalid.
    count = len(sizes_a)
    mine = pass_batches(count, global_start, rank, world_size, sync)
    chosen = batch_order[mine % count].astype(np.int64) if count else mine
    my_sizes = sizes_a[chosen]
    if max_rows is not None and int(my_sizes.sum()) > max_rows:
        raise PlanError(f"the pass of all {plural(world_size, 'rank')} deals {int(my_sizes.sum())} rows in "
                        f"{plural(len(mine), 'batch')}, over the {max_rows} rows memory_limit allows a plan of "
                        f"every rank; plan fewer ranks, or raise memory_limit")
    rows = _rows(offsets, chosen)
    my_valid = valid[rows] & np.repeat(mine < count, my_sizes)
    # Counts of the pass: rows it deals that are not valid, and items no batch up to its end holds valid.
    end = pass_end(count, global_start, world_size, sync)
    dealt = np.arange(global_start, end, dtype=np.int64)
    dealt_batches = batch_order[dealt % count] if count else dealt
    valid_per_batch = np.add.reduceat(valid.astype(np.int64), offsets[:-1]) if count else sizes_a
    padded = int(sizes_a[dealt_batches].sum()) - int(valid_per_batch[dealt_batches[dealt < count]].sum())
    dropped = num_items - int(valid_per_batch[batch_order[:min(end, count)]].sum())
    return EpochPlan(items=flat[rows], valid=my_valid, global_batch=mine, padded=padded, dropped=dropped,
                     offsets=np.concatenate([[0], np.cumsum(my_sizes)]).astype(np.int64))


def _rows(offsets: np.ndarray, batches: np.ndarray) -> np.ndarray:
    """Flat row positions of ``batches`` (in that order)."""
    sizes = offsets[batches + 1] - offsets[batches]
    if not len(sizes):
        return np.zeros(0, np.int64)
    starts = np.repeat(offsets[batches] - (np.cumsum(sizes) - sizes), sizes)
    return starts + np.arange(int(sizes.sum()), dtype=np.int64)


def plan_lengths(lengths: np.ndarray, plan: EpochPlan) -> np.ndarray:
    """Per batch of ``plan``: (rows, padded length = the longest row)."""
    sizes = np.diff(plan.offsets)
    if not len(sizes):
        return np.zeros((0, 2), np.int64)
    longest = np.maximum.reduceat(np.asarray(lengths)[plan.items], plan.offsets[:-1]) if len(plan.items) else sizes
    return np.stack([sizes, longest], axis=1)


__all__ = ["BATCH_TYPES", "COSTS", "BudgetArgs", "make_budget_plan", "plan_lengths"]
