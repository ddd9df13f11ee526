"""loader.plan.static_plan's shuffle windows and the plans that use it: fairseq2's window semantics (0 whole, 1 none,
n sliding), deterministic per (seed, epoch), every item exactly once; ``sync`` evens ranks on its own."""

from __future__ import annotations

import numpy as np
import pytest

from speechpack.loader.plan.batching import BudgetArgs, make_budget_plan
from speechpack.loader.plan.static_plan import ShuffleWindows, make_epoch_plan, window_order
from speechpack.loader.rng import batch_rng

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")


@pytest.mark.parametrize("count", [0, 1, 7, 500])
@pytest.mark.parametrize("window", [0, 1, 2, 10, 1000])
def test_every_window_gives_a_permutation(count, window):
    order = window_order(count, window, np.random.default_rng(3))
    assert sorted(order.tolist()) == list(range(count))


def test_window_one_keeps_the_order_and_zero_shuffles_whole():
    assert window_order(50, 1, np.random.default_rng(0)).tolist() == list(range(50))
    assert window_order(50, 0, np.random.default_rng(0)).tolist() == np.random.default_rng(0).permutation(50).tolist()


def test_a_sliding_window_moves_items_at_most_window_minus_one_places_forward():
    window = 8
    order = window_order(2000, window, np.random.default_rng(1))
    position = np.argsort(order)
    assert (position >= np.arange(2000) - (window - 1)).all()  # never emitted before it entered the buffer
    assert (position > np.arange(2000) + 50).any()  # but it may wait in the buffer long after
    again = window_order(2000, window, np.random.default_rng(1))
    assert np.array_equal(order, again)


def test_the_buffer_emits_as_fairseq2_describes():
    # window 2 over [0, 1, 2]: buffer {0, 1}; draw slot s, emit it, put 2 there; then the rest in random order
    rng = np.random.default_rng(7)
    expected_rng = np.random.default_rng(7)
    slot = int(expected_rng.integers(0, 2, size=1)[0])
    buffer = [0, 1]
    first = buffer[slot]
    buffer[slot] = 2
    tail = np.asarray(buffer)[expected_rng.permutation(2)].tolist()
    assert window_order(3, 2, rng).tolist() == [first, *tail]


@pytest.mark.parametrize("windows", [ShuffleWindows(1, 1, 1), ShuffleWindows(0, 5, 3), ShuffleWindows(4, 0, 0)])
def test_plans_with_windows_serve_each_item_once_and_are_deterministic(windows):
    lengths = np.random.default_rng(2).integers(1000, 9000, size=103)
    args = BudgetArgs(budget=40_000, multiple_of=4)
    for world in (1, 3):
        served = []
        for rank in range(world):
            plan = make_budget_plan(lengths, args, 0, 1, rank, world, True, "pad", shuffle_windows=windows)
            again = make_budget_plan(lengths, args, 0, 1, rank, world, True, "pad", shuffle_windows=windows)
            assert np.array_equal(plan.items, again.items)
            served += plan.items[plan.valid].tolist()
        assert sorted(served) == list(range(103))
        static = [make_epoch_plan(103, 8, 0, 1, r, world, True, "pad", shuffle_windows=windows) for r in range(world)]
        assert sorted(i for p in static for i in p.items[p.valid].tolist()) == list(range(103))


def test_no_shuffle_windows_read_in_storage_order():
    plan = make_epoch_plan(20, 4, 0, 0, 0, 1, True, "pad", shuffle_windows=ShuffleWindows(1, 1, 1))
    assert plan.items.reshape(-1).tolist() == list(range(20))


def test_sync_evens_ranks_apart_from_the_tail():
    # 7 batches of 4 over 3 ranks: UNTIL_FIRST (drop) keeps 6 batches, UNTIL_LAST (pad) makes 9; the last,
    # incomplete batch is kept (tail pad) either way
    plans = {sync: [make_epoch_plan(26, 4, 0, 0, r, 3, True, "pad", sync=sync) for r in range(3)]
             for sync in ("drop", "pad")}
    assert [len(p) for p in plans["drop"]] == [2, 2, 2] and [len(p) for p in plans["pad"]] == [3, 3, 3]
    assert sum(int(p.valid.sum()) for p in plans["pad"]) == 26
    assert plans["drop"][0].dropped == 2 and sum(int(p.valid.sum()) for p in plans["drop"]) == 24
    lengths = np.full(26, 1000)
    budget = [make_budget_plan(lengths, BudgetArgs(budget=4000), 0, 0, r, 3, True, "pad", sync="drop")
              for r in range(3)]
    assert [len(p) for p in budget] == [2, 2, 2]
    assert budget[0].dropped == 26 - sum(int(p.valid.sum()) for p in budget) > 0


def test_batch_rng_is_the_plans_only_source():
    a = window_order(100, 10, batch_rng(4, 2, -1))
    b = window_order(100, 10, batch_rng(4, 2, -1))
    c = window_order(100, 10, batch_rng(4, 3, -1))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
