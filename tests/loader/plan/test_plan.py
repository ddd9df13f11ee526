"""The epoch plan (``loader.plan``), without torch: who gets which item, once, on which rank.

The central property is exactly-once: over all ranks of one epoch, the valid rows are every item exactly once
(``tail="pad"``) or every item at most once, with the rest reported as dropped (``tail="drop"``), and every rank has
the same number of batches so DDP stays in lock-step.  It is checked over a grid and with hypothesis.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speechpack.loader.plan.epoch_plan import EpochPlan, PlanError, epoch_permutation, make_epoch_plan
from speechpack.loader.rng import batch_rng

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

WORLD_SIZES = (1, 2, 3, 8)
# Zero, fewer than one batch, fewer than one round, exact multiples of a round for some grids, uneven.
NUM_ITEMS = (0, 1, 2, 5, 7, 12, 24, 31, 48, 97)
BATCH_SIZES = (1, 2, 3, 4)


def plans(num_items: int, batch_size: int, world_size: int, tail: str, seed: int = 3, epoch: int = 0,
          shuffle: bool = True) -> list[EpochPlan]:
    return [make_epoch_plan(num_items, batch_size, seed, epoch, rank, world_size, shuffle, tail)
            for rank in range(world_size)]


def global_rows(rank_plans: list[EpochPlan]) -> tuple[np.ndarray, np.ndarray]:
    """All ranks' batches put back in global-batch order: (items [G, B], valid [G, B])."""
    batches = {}
    for plan in rank_plans:
        for b in range(len(plan)):
            g = int(plan.global_batch[b])
            assert g not in batches, f"global batch {g} on two ranks"
            batches[g] = (plan.items[b], plan.valid[b])
    assert sorted(batches) == list(range(len(batches))), "global batches are not 0..G-1"
    if not batches:
        return np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0), dtype=bool)
    items, valid = zip(*(batches[g] for g in range(len(batches))))
    return np.stack(items), np.stack(valid)


def check_pad(num_items: int, batch_size: int, world_size: int, seed: int, epoch: int, shuffle: bool) -> None:
    rank_plans = plans(num_items, batch_size, world_size, "pad", seed, epoch, shuffle)
    round_size = batch_size * world_size
    expected_batches = -(-num_items // round_size)
    # Lock-step: every rank the same number of batches, every batch full.
    assert [len(p) for p in rank_plans] == [expected_batches] * world_size
    for plan in rank_plans:
        assert plan.items.shape == (expected_batches, batch_size)
        assert plan.valid.shape == (expected_batches, batch_size)
        assert plan.valid.dtype == bool
        assert plan.dropped == 0
        assert plan.padded == expected_batches * round_size - num_items
    # Round-robin assignment of global batches.
    for rank, plan in enumerate(rank_plans):
        np.testing.assert_array_equal(plan.global_batch, np.arange(rank, expected_batches * world_size, world_size))
    # Exactly once: the valid rows of all ranks are every item once.
    seen = np.concatenate([p.items[p.valid] for p in rank_plans]) if rank_plans else np.zeros(0)
    np.testing.assert_array_equal(np.sort(seen), np.arange(num_items))
    # The repeats are flagged, counted, real item ids, and only at the end of the epoch's global order.
    repeats = np.concatenate([p.items[~p.valid] for p in rank_plans])
    assert len(repeats) == rank_plans[0].padded
    assert ((repeats >= 0) & (repeats < max(num_items, 1))).all()
    items, valid = global_rows(rank_plans)
    flat_valid = valid.reshape(-1)
    np.testing.assert_array_equal(flat_valid, np.arange(flat_valid.size) < num_items)
    # The global order is the epoch's permutation, cycled into the pad (every rank computed it independently).
    order = epoch_permutation(num_items, seed, epoch, shuffle)
    flat = items.reshape(-1)
    np.testing.assert_array_equal(flat[:num_items], order)
    if num_items:
        np.testing.assert_array_equal(flat[num_items:], np.resize(order, flat.size)[num_items:])


def check_drop(num_items: int, batch_size: int, world_size: int, seed: int, epoch: int, shuffle: bool) -> None:
    rank_plans = plans(num_items, batch_size, world_size, "drop", seed, epoch, shuffle)
    round_size = batch_size * world_size
    expected_batches = num_items // round_size
    assert [len(p) for p in rank_plans] == [expected_batches] * world_size
    for plan in rank_plans:
        assert plan.items.shape == (expected_batches, batch_size)
        assert plan.valid.all(), "drop never pads"
        assert plan.padded == 0
        assert plan.dropped == num_items - expected_batches * round_size
        assert 0 <= plan.dropped < round_size
    seen = np.concatenate([p.items.reshape(-1) for p in rank_plans])
    assert len(seen) == len(np.unique(seen)), "an item repeats under tail=drop"
    assert len(seen) + rank_plans[0].dropped == num_items
    assert ((seen >= 0) & (seen < max(num_items, 1))).all()
    # The dropped items are the tail of the epoch's order.
    order = epoch_permutation(num_items, seed, epoch, shuffle)
    items, _ = global_rows(rank_plans)
    np.testing.assert_array_equal(items.reshape(-1), order[:len(seen)])


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("tail", ["pad", "drop"])
def test_exactly_once_grid(world_size, tail):
    check = check_pad if tail == "pad" else check_drop
    for num_items, batch_size, shuffle in itertools.product(NUM_ITEMS, BATCH_SIZES, (True, False)):
        check(num_items, batch_size, world_size, seed=11, epoch=2, shuffle=shuffle)


@settings(max_examples=300, deadline=None)
@given(num_items=st.integers(0, 200), batch_size=st.integers(1, 9), world_size=st.sampled_from(WORLD_SIZES),
       seed=st.integers(0, 2**32 - 1), epoch=st.integers(0, 1000), shuffle=st.booleans(),
       tail=st.sampled_from(["pad", "drop"]))
def test_exactly_once_property(num_items, batch_size, world_size, seed, epoch, shuffle, tail):
    (check_pad if tail == "pad" else check_drop)(num_items, batch_size, world_size, seed, epoch, shuffle)


def test_zero_items_gives_no_batches_on_any_rank():
    for tail in ("pad", "drop"):
        for plan in plans(0, 4, 3, tail):
            assert len(plan) == 0 and plan.padded == 0 and plan.dropped == 0


def test_small_epoch_pads_every_rank_to_one_batch():
    """Fewer items than ranks: every rank still gets one batch (lock-step), the extra rows are repeats."""
    rank_plans = plans(2, 1, 8, "pad", shuffle=False)
    assert [len(p) for p in rank_plans] == [1] * 8
    assert [bool(p.valid[0, 0]) for p in rank_plans] == [True, True] + [False] * 6
    assert rank_plans[0].padded == 6
    # With drop there is not one full round: nothing is planned and everything is reported.
    dropped = plans(2, 1, 8, "drop")
    assert all(len(p) == 0 and p.dropped == 2 for p in dropped)


def test_same_seed_and_epoch_same_plan():
    a = make_epoch_plan(50, 3, 7, 4, 1, 3, True, "pad")
    b = make_epoch_plan(50, 3, 7, 4, 1, 3, True, "pad")
    np.testing.assert_array_equal(a.items, b.items)
    np.testing.assert_array_equal(a.valid, b.valid)
    np.testing.assert_array_equal(a.global_batch, b.global_batch)


def test_new_epoch_or_seed_new_order_when_shuffled():
    base = epoch_permutation(50, 7, 0, True)
    assert not np.array_equal(base, np.arange(50)), "a shuffled epoch is not the identity"
    orders = [tuple(epoch_permutation(50, 7, e, True)) for e in range(6)]
    assert len(set(orders)) == 6, "some epochs repeat an order"
    assert not np.array_equal(epoch_permutation(50, 8, 0, True), base), "a new seed repeats the order"
    # The rank's plan follows the permutation.
    for epoch in (0, 1):
        rank_plans = plans(50, 5, 2, "pad", seed=7, epoch=epoch)
        items, _ = global_rows(rank_plans)
        np.testing.assert_array_equal(items.reshape(-1), epoch_permutation(50, 7, epoch, True))
    assert not np.array_equal(make_epoch_plan(50, 5, 7, 0, 0, 2, True, "pad").items,
                              make_epoch_plan(50, 5, 7, 1, 0, 2, True, "pad").items)


def test_shuffle_false_is_identity_order_in_every_epoch():
    for epoch, seed in ((0, 0), (5, 123)):
        np.testing.assert_array_equal(epoch_permutation(10, seed, epoch, False), np.arange(10))
    rank_plans = plans(10, 2, 2, "pad", seed=9, epoch=3, shuffle=False)
    np.testing.assert_array_equal(rank_plans[0].items, [[0, 1], [4, 5], [8, 9]])
    np.testing.assert_array_equal(rank_plans[1].items, [[2, 3], [6, 7], [0, 1]])
    np.testing.assert_array_equal(rank_plans[1].valid, [[True, True], [True, True], [False, False]])


def test_batch_rng_is_a_pure_function_of_seed_epoch_batch():
    a = batch_rng(5, 2, 17).random(8)
    # Another stream in between (another worker, another batch) changes nothing.
    batch_rng(5, 2, 16).random(1000)
    np.testing.assert_array_equal(batch_rng(5, 2, 17).random(8), a)
    others = [batch_rng(6, 2, 17), batch_rng(5, 3, 17), batch_rng(5, 2, 18), batch_rng(5, 2, -1)]
    for other in others:
        assert not np.array_equal(other.random(8), a)
    # The epoch permutation is the global_batch = -1 stream.
    np.testing.assert_array_equal(epoch_permutation(30, 5, 2, True), batch_rng(5, 2, -1).permutation(30))
    # Large seeds and epochs work (Philox key and counter words).
    assert batch_rng(2**63, 10**6, 10**9).random() != batch_rng(2**63, 10**6, 10**9 + 1).random()


def test_batch_rng_streams_do_not_overlap():
    """Consecutive batches' streams share no values (counters far apart), a cheap overlap check."""
    first = batch_rng(1, 0, 0).random(4096)
    second = batch_rng(1, 0, 1).random(4096)
    assert not np.intersect1d(first, second).size


@pytest.mark.parametrize("rank, world_size", [(-1, 2), (2, 2), (5, 2), (0, 0), (0, -1)])
def test_bad_rank_or_world_size(rank, world_size):
    with pytest.raises(PlanError, match="rank"):
        make_epoch_plan(10, 2, 0, 0, rank, world_size, True, "pad")


def test_bad_batch_size_tail_seed_epoch():
    with pytest.raises(PlanError, match="batch_size"):
        make_epoch_plan(10, 0, 0, 0, 0, 1, True, "pad")
    with pytest.raises(PlanError, match="tail"):
        make_epoch_plan(10, 2, 0, 0, 0, 1, True, "repeat")
    with pytest.raises(PlanError, match="seed"):
        make_epoch_plan(10, 2, -1, 0, 0, 1, True, "pad")
    with pytest.raises(PlanError, match="epoch"):
        make_epoch_plan(10, 2, 0, -1, 0, 1, True, "pad")
    with pytest.raises(PlanError, match="seed"):
        batch_rng(-3, 0, 0)
