"""The epoch plan: which units form which batch on which rank, as one pure function of its inputs.

``plan_epoch`` is the whole composition, in this order:

1. weighting (``loader.plan.weighting``): when the packs are weighted, the epoch's selected items (repeats allowed)
   replace the item universe; the plan runs over positions in that selection and maps back to item ids at the end;
2. train windows (``loader.plan.train_windows.TrainWindows``): with ``train_window`` the planning units are chunks
   of items, so selected items become their chunks;
3. the plan itself: static batches of ``batch_size`` (``loader.plan.static_plan.make_epoch_plan``) or, with
   ``batching: budget``, ragged batches of similar-length units (``loader.plan.batching.make_budget_plan``); either
   is a global sequence of batches that does not depend on the world size, dealt round-robin to the ranks from a
   global position (``loader.plan.static_plan``);
4. the plan's rows become unit ids.

Nothing here reads audio or imports torch: the DataLoader glue (``loader.torch``), the dry run (``speechpack plan``,
``loader.plan.planning_report``) and the tests call this same function, so what the dry run reports is what training
gets.  Its random draws come from ``loader.rng.batch_rng``; its error is ``schemas.errors.PlanError``.
"""

from __future__ import annotations

from dataclasses import replace
from numbers import Integral
from typing import TYPE_CHECKING, Any

import numpy as np

from speechpack.loader.memory_limit import (
    BUDGET_PLAN_BYTES_PER_UNIT,
    PLAN_BYTES_PER_UNIT,
    MemoryCeiling,
    check_plan_memory,
)
from speechpack.loader.plan.batching import make_budget_plan
from speechpack.loader.plan.train_windows import TrainWindows
from speechpack.loader.plan.static_plan import EVERY_RANK, EpochPlan, epoch_permutation, make_epoch_plan, pass_end
from speechpack.schemas.errors import PlanError
from speechpack.schemas.units import plural

#: Largest world size a plan is made for.
MAX_WORLD_SIZE = 1 << 20
#: Largest round of the static plan (``batch_size * world_size`` rows): a padded round is allocated whole.
MAX_ROUND_ROWS = 1 << 26

if TYPE_CHECKING:  # annotation only: the plan calls ``weighting.items(seed, epoch)`` and nothing else
    from speechpack.loader.plan.weighting import PackWeighting


def _check_pass_rows(count: int, args: Any, world_size: int, sync: str | None, global_start: int,
                     max_rows: int) -> None:
    """A static pass of every rank holds ``batch_size`` rows per batch dealt: refused before it is made when that
    is more than ``max_rows``."""
    batches = -(-count // args.batch_size) if args.tail == "pad" else count // args.batch_size
    dealt = pass_end(batches, global_start, world_size, args.tail if sync is None else sync) - global_start
    if dealt * args.batch_size > max_rows:
        raise PlanError(f"the pass of all {plural(world_size, 'rank')} deals {dealt * args.batch_size} rows in "
                        f"{plural(dealt, 'batch')} of {args.batch_size}, over the {max_rows} rows memory_limit allows "
                        f"a plan of every rank; plan fewer ranks, or raise memory_limit")


def needs_lengths(args: Any) -> bool:
    """Whether ``plan_epoch`` needs the units' lengths for ``args`` (budget batching does; static does not), so
    a caller computes them only when they are used."""
    return args.batching is not None


def plan_epoch(args: Any, seed: int, epoch: int, rank: int, world_size: int, *, num_units: int,
               lengths: np.ndarray | None = None, train_windows: TrainWindows | None = None,
               weighting: "PackWeighting | None" = None, memory_limit: MemoryCeiling | int | None = None,
               global_start: int = 0) -> EpochPlan:
    """Rank ``rank``'s batches of ``epoch`` (see the module docstring for the steps).

    ``args`` is a task's planning view (``loader.tasks.PlanArgs``: ``batch_size``, ``batching``, ``shuffle``,
    ``tail``, ``shuffle_windows`` and ``sync``; a builder's ``plan_args``).  ``num_units``
    counts the planning units (items, or chunks with ``train_windows``); ``lengths`` are their lengths, required when
    ``needs_lengths(args)``.  The plan's ``items`` are unit ids.  A plan whose making would take more than
    ``memory_limit`` bytes is refused before anything is allocated: the ``MemoryCeiling`` the loader fixed when it
    started, or bytes (None: ``loader.memory_limit``'s default, read at this call).
    ``global_start``: the global batch the pass deals from (``loader.plan.static_plan``): 0 for a whole epoch, where
    the ranks had got to for a resumed pass.
    ``rank`` ``EVERY_RANK``: the pass of every rank at once, in global order (the dry run; ``EpochPlan.rank_view``
    takes one rank's out), refused when its rows would take more than ``memory_limit``.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, Integral) or not 1 <= world_size <= MAX_WORLD_SIZE:
        raise PlanError(f"world_size must be an integer in [1, {MAX_WORLD_SIZE}], got {world_size!r}")
    if rank is not EVERY_RANK and (isinstance(rank, bool) or not isinstance(rank, Integral)
                                   or not 0 <= rank < world_size):
        raise PlanError(f"rank must be in [0, {world_size - 1}] for world_size {world_size}, got {rank!r}")
    if isinstance(global_start, bool) or not isinstance(global_start, Integral) or global_start < 0:
        raise PlanError(f"global_start must be a non-negative integer, got {global_start!r}")
    if args.batching is None and args.batch_size * world_size > MAX_ROUND_ROWS:
        raise PlanError(f"batch_size {args.batch_size} x world_size {world_size} is over {MAX_ROUND_ROWS} rows per "
                        f"round of batches")
    if needs_lengths(args) and lengths is None:
        raise PlanError("budget batching plans by length: pass the units' lengths")
    if weighting is None:
        check_plan_memory(num_units, args.batching is not None, memory_limit, "the packs' items")
    else:
        selected = sum(weighting.counts)
        units = selected if train_windows is None else -(-selected * num_units // max(sum(weighting.sizes), 1))
        check_plan_memory(units, args.batching is not None, memory_limit, "the weighting's items per epoch")
    chosen = None if weighting is None else weighting.items(seed, epoch)
    if chosen is not None and train_windows is not None:
        chosen = train_windows.units_of(chosen)
    shuffle_windows, sync = args.shuffle_windows, args.sync  # fairseq2's shuffles, a rank-evening rule (ASR)
    max_rows = None
    if rank is EVERY_RANK:  # the pass of every rank: its rows are what the memory limit bounds, not the units
        per_row = BUDGET_PLAN_BYTES_PER_UNIT if args.batching is not None else PLAN_BYTES_PER_UNIT
        max_rows = MemoryCeiling.of(memory_limit).limit // per_row
    if args.batching is None:
        count = num_units if chosen is None else len(chosen)
        if max_rows is not None:
            _check_pass_rows(count, args, world_size, sync, global_start, max_rows)
        plan = make_epoch_plan(count, args.batch_size, seed, epoch, rank, world_size, args.shuffle, args.tail,
                               shuffle_windows=shuffle_windows, sync=sync, global_start=global_start)
    else:
        planned = lengths if chosen is None else lengths[chosen]
        plan = make_budget_plan(planned, args.batching, seed, epoch, rank, world_size, args.shuffle, args.tail,
                                shuffle_windows=shuffle_windows, sync=sync, global_start=global_start,
                                max_rows=max_rows)
    if chosen is not None:
        plan = replace(plan, items=chosen[plan.items])
    return plan


__all__ = ["EVERY_RANK", "MAX_ROUND_ROWS", "MAX_WORLD_SIZE", "EpochPlan", "PlanError", "epoch_permutation",
           "make_epoch_plan", "needs_lengths", "plan_epoch"]
