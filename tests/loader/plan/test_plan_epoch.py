"""``loader.plan.plan_epoch``: the whole epoch plan (weighting -> train-window units -> static or budget plan ->
unit ids) as one pure function, without torch, and the same one the loader and ``speechpack plan`` run."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from speechpack.loader.plan.batching import BudgetArgs, make_budget_plan
from speechpack.loader.plan.train_windows import tile_windows
from speechpack.loader.plan.epoch_plan import (
    EVERY_RANK,
    MAX_WORLD_SIZE,
    PlanError,
    make_epoch_plan,
    needs_lengths,
    plan_epoch,
)
from speechpack.loader.plan.weighting import PackWeighting

import factories.paths

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

REPO = factories.paths.REPO


@dataclass(frozen=True)
class Args:
    """A task's planning view (what ``plan_epoch`` reads of ``builder.args``)."""

    batch_size: int = 3
    batching: BudgetArgs | None = None
    shuffle: bool = True
    tail: str = "pad"
    shuffle_windows: None = None
    sync: None = None


LENGTHS = np.random.default_rng(0).integers(100, 3000, 41)


def weighting(sizes=(30, 11), counts=(12, 20)) -> PackWeighting:
    return PackWeighting(sizes=sizes, counts=counts, targets=(0.4, 0.6), paths=("a", "b"), corpora=("a", "b"),
                         languages=("a", "b"), shuffle=True)


def valid_units(plans) -> np.ndarray:
    return np.sort(np.concatenate([p.items[p.valid] for p in plans]))


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_static_plan_is_make_epoch_plan(world_size):
    for rank in range(world_size):
        got = plan_epoch(Args(), 7, 2, rank, world_size, num_units=41)
        want = make_epoch_plan(41, 3, 7, 2, rank, world_size, True, "pad")
        np.testing.assert_array_equal(got.items, want.items)
        np.testing.assert_array_equal(got.valid, want.valid)


def test_budget_plan_is_make_budget_plan_and_needs_lengths():
    args = Args(batch_size=1, batching=BudgetArgs(budget=5000, multiple_of=2))
    assert needs_lengths(args) and not needs_lengths(Args())
    got = plan_epoch(args, 7, 1, 0, 2, num_units=41, lengths=LENGTHS)
    want = make_budget_plan(LENGTHS, args.batching, 7, 1, 0, 2, True, "pad")
    np.testing.assert_array_equal(got.items, want.items)
    np.testing.assert_array_equal(got.offsets, want.offsets)
    with pytest.raises(PlanError, match="lengths"):
        plan_epoch(args, 7, 1, 0, 2, num_units=41)


@pytest.mark.parametrize("batching", [None, BudgetArgs(budget=4000)])
def test_weighted_plan_covers_the_selection_once(batching):
    """Over all ranks, the valid rows are exactly the weighting's selection (repeats included), as unit ids."""
    w = weighting()
    args = Args(batch_size=1 if batching else 3, batching=batching)
    plans = [plan_epoch(args, 5, 3, r, 2, num_units=41, lengths=LENGTHS, weighting=w) for r in range(2)]
    np.testing.assert_array_equal(valid_units(plans), np.sort(w.items(5, 3)))


def test_weighted_windows_plan_the_selected_items_chunks():
    windows = tile_windows(LENGTHS, 700, 50)
    w = weighting()
    args = Args(batch_size=1, batching=BudgetArgs(budget=3000))
    plans = [plan_epoch(args, 5, 0, r, 3, num_units=len(windows), lengths=windows.fed_length, train_windows=windows,
                        weighting=w) for r in range(3)]
    np.testing.assert_array_equal(valid_units(plans), np.sort(windows.units_of(w.items(5, 0))))


def test_world_size_is_bounded():
    with pytest.raises(PlanError, match="world_size"):
        plan_epoch(Args(), 0, 0, 0, MAX_WORLD_SIZE + 1, num_units=10)
    with pytest.raises(PlanError, match="world_size"):
        plan_epoch(Args(), 0, 0, 0, 0, num_units=10)
    with pytest.raises(PlanError, match="world_size"):
        plan_epoch(Args(), 0, 0, 0, 2.0, num_units=10)
    with pytest.raises(PlanError, match="rank"):
        plan_epoch(Args(), 0, 0, 0.5, 2, num_units=10)


def test_plan_and_planning_report_import_no_torch():
    code = ("import sys, speechpack.loader.plan, speechpack.loader.plan.planning_report, speechpack.loader.config, "
            "speechpack.loader.tasks; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def _same_plan(a, b) -> None:
    assert len(a) == len(b) and (a.padded, a.dropped) == (b.padded, b.dropped)
    np.testing.assert_array_equal(a.global_batch, b.global_batch)
    for i in range(len(a)):
        for x, y in zip(a.batch(i), b.batch(i)):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("batching", [None, BudgetArgs(budget=6000, multiple_of=2)])
@pytest.mark.parametrize("tail", ["pad", "drop"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 7, 50])
def test_every_rank_plan_is_each_ranks_plan_in_global_order(batching, tail, world_size):
    """``EVERY_RANK`` plans the pass once; rank ``r``'s view of it is the plan rank ``r`` makes on its own."""
    args = Args(batching=batching, tail=tail)
    for chosen in (None, weighting()):
        every = plan_epoch(args, 3, 1, EVERY_RANK, world_size, num_units=41, lengths=LENGTHS, weighting=chosen)
        np.testing.assert_array_equal(every.global_batch, np.arange(len(every)))
        assert len(every) % world_size == 0
        for rank in range(world_size):
            alone = plan_epoch(args, 3, 1, rank, world_size, num_units=41, lengths=LENGTHS, weighting=chosen)
            _same_plan(every.rank_view(rank, world_size), alone)


@pytest.mark.parametrize("batching", [None, BudgetArgs(budget=6000)])
def test_every_rank_plan_refuses_a_pass_over_the_memory_limit_before_making_it(batching):
    """A million ranks, each dealt at least one batch (padding): millions of rows for the dry run, refused under a
    64 MB limit."""
    args = Args(batch_size=64, batching=batching)
    with pytest.raises(PlanError, match=r"the pass of all 1048576 ranks deals .* rows .*memory_limit"):
        plan_epoch(args, 0, 0, EVERY_RANK, MAX_WORLD_SIZE, num_units=41, lengths=LENGTHS, memory_limit=1 << 26)


@pytest.mark.parametrize("batching", [None, BudgetArgs(budget=6000)])
def test_the_dry_run_checks_each_distinct_batch_once_earliest_first(batching):
    """``speechpack plan`` applies a task's batch check to every batch of every rank; a batch whose units repeat
    an earlier one (padding, at a large world size) is checked once, at its first global position."""
    from speechpack.loader.plan.planning_report import _check_batches

    plan = plan_epoch(Args(batching=batching), 3, 0, EVERY_RANK, 64, num_units=41, lengths=LENGTHS)
    seen = []
    _check_batches(plan, lambda units, **where: seen.append((tuple(units.tolist()), where)), 0, 64)
    batches = [tuple(plan.batch(g)[0].tolist()) for g in range(len(plan))]
    assert [units for units, _ in seen] == list(dict.fromkeys(batches))  # each distinct batch, in global order
    for units, where in seen:
        g = batches.index(units)
        assert where == {"epoch": 0, "rank": g % 64, "batch": g // 64, "batches": len(plan) // 64}
    assert len(seen) < len(batches)
