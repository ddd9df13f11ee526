"""Several planned batches per DataLoader message (``loader.transport.message_groups``; docs/loader.md, "Workers").

What is pinned:
- how many batches a message holds: as given, else one until a batch is measured, then enough for
  ``MESSAGE_SECONDS`` within ``MAX_BATCHES_PER_MESSAGE``, ``MESSAGE_BYTES``, the epoch's length and its end; one
  without workers; the keys cover an epoch's batches once, in order, from any start;
- the batch ring side: a message of several batches shares one slot, released only when the last of its batches
  dies, and given back when one of its builds fails;
- on real recordings through 2 workers, grouped (an epoch that is no multiple of the size, automatic sizes): the
  batches equal one process's, streamed or all held; ``len()`` counts batches; a state saved in the middle of a
  group resumes at the very next batch, with the ``SpeechLoader`` and with torchdata's loader; every slot is free
  once the batches are dropped.
"""

from __future__ import annotations

import functools

import gc
import pickle
import weakref

import numpy as np
import pytest
import torch

from factories.batches import assert_batches_equal
from factories.tse import real_mixtures_config
from speechpack.loader import build_loader
from speechpack.loader.transport import batch_ring
from speechpack.loader.transport.message_groups import (MAX_BATCHES_PER_MESSAGE, MESSAGE_BYTES, MESSAGE_SECONDS, MESSAGES_PER_WORKER,
                                   BatchGroup, MessageSizes, group_keys, unpack)

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]
ring_only = pytest.mark.skipif(not batch_ring.supported(), reason="memfd_create is Linux only")


# -- sizes and keys ------------------------------------------------------------------------------------------------

def test_an_explicit_size_is_used_as_given_up_to_the_epochs_end():
    sizes = MessageSizes(workers=2, fixed=3)
    sizes.observe(1.0, 1e9)  # measurements do not matter
    assert [sizes.next(r, 10) for r in (10, 3, 2, 1)] == [3, 3, 2, 1]
    assert [stop - start for _e, start, stop in group_keys(0, 0, 8, sizes)] == [3, 3, 2]


def test_automatic_sizes_follow_the_measured_cost():
    sizes = MessageSizes(workers=2)
    assert sizes.next(1000, 1000) == 1, "nothing measured yet: one batch, so the first arrives as early as ever"
    sizes.observe(MESSAGE_SECONDS / 3, 1 << 20)
    assert sizes.next(1000, 1000) == 3, "enough batches for MESSAGE_SECONDS of building"
    cheap = MessageSizes(workers=2)
    cheap.observe(1e-6, 1 << 10)
    assert cheap.next(1000, 1000) == MAX_BATCHES_PER_MESSAGE
    large = MessageSizes(workers=2)
    large.observe(1e-6, MESSAGE_BYTES / 2.5)
    assert large.next(1000, 1000) == 2, "no more than MESSAGE_BYTES of arrays per message"
    huge = MessageSizes(workers=2)
    huge.observe(1e-6, 2 * MESSAGE_BYTES)
    assert huge.next(1000, 1000) == 1
    slow = MessageSizes(workers=2)
    slow.observe(2 * MESSAGE_SECONDS, 1 << 20)
    assert slow.next(1000, 1000) == 1, "a batch that alone outweighs the fixed cost travels alone"
    assert MessageSizes(workers=0, fixed=None).next(1000, 1000) == 1
    unmeasured = MessageSizes(workers=2)
    unmeasured.observe(None, 0)
    assert unmeasured.next(1000, 1000) == 1


def test_short_epochs_and_the_end_of_an_epoch_get_smaller_messages():
    sizes = MessageSizes(workers=2)
    sizes.observe(1e-6, 1 << 10)
    dealt = [stop - start for _e, start, stop in group_keys(3, 0, 100, sizes)]
    assert dealt[0] == MAX_BATCHES_PER_MESSAGE and sum(dealt) == 100
    assert dealt == sorted(dealt, reverse=True) and dealt[-3:] == [3, 2, 1], "the end is dealt in smaller messages"
    short = 2 * MESSAGES_PER_WORKER * 3  # three batches per message at most, whatever they cost
    assert max(stop - start for _e, start, stop in group_keys(0, 0, short, sizes)) == 3
    assert {stop - start for _e, start, stop in group_keys(0, 0, 2 * MESSAGES_PER_WORKER - 1, sizes)} == {1}
    resumed = [stop - start for _e, start, stop in group_keys(0, 90, 100, sizes)]
    assert sum(resumed) == 10 and resumed[0] == 5, "a resumed pass: what is left bounds the size, not the epoch"


def test_the_estimate_moves_towards_new_measurements():
    sizes = MessageSizes(workers=1)
    sizes.observe(0.004, 100.0)
    sizes.observe(0.008, 200.0)
    assert 0.004 < sizes.seconds < 0.008 and 100 < sizes.nbytes < 200


@pytest.mark.parametrize("start, count", [(0, 17), (5, 17), (16, 17), (17, 17), (0, 1)])
def test_keys_cover_the_batches_once_in_order(start, count):
    sizes = MessageSizes(workers=3)
    sizes.observe(MESSAGE_SECONDS / 4, 1 << 20)
    keys = list(group_keys(7, start, count, sizes))
    assert all(epoch == 7 and first < stop for epoch, first, stop in keys)
    assert [b for _e, first, stop in keys for b in range(first, stop)] == list(range(start, count))


def test_unpack_hands_out_each_batch_once_in_order_and_keeps_none():
    class Batch(dict):
        pass

    groups = [BatchGroup(2, 4, [Batch(n=4), Batch(n=5), Batch(n=6)], 0.001, 10.0), BatchGroup(2, 7, [Batch(n=7)],
                                                                                             0.003, 30.0)]
    sizes = MessageSizes(workers=2)
    handed = unpack(iter(groups), sizes)
    epoch, number, first = next(handed)
    assert (epoch, number, first["n"]) == (2, 4, 4) and sizes.seconds == 0.001
    del groups
    ref = weakref.ref(first)
    del first
    assert ref() is None, "the unpacker still refers to a batch it handed out"
    assert [(e, n, b["n"]) for e, n, b in handed] == [(2, 5, 5), (2, 6, 6), (2, 7, 7)]


def test_a_group_pins_each_of_its_batches():
    class Pinnable:
        def __init__(self, value):
            self.value = value

        def pin_memory(self):
            return ("pinned", self.value)

    group = BatchGroup(0, 3, [{"audio": Pinnable(1), "key": ["a"]}, Pinnable(2)], 0.001, 8.0)
    pinned = group.pin_memory()
    assert (pinned.epoch, pinned.start, pinned.seconds, pinned.nbytes) == (0, 3, 0.001, 8.0)
    assert pinned.batches == [{"audio": ("pinned", 1), "key": ["a"]}, ("pinned", 2)]
    again = pickle.loads(pickle.dumps(pinned))
    assert (again.epoch, again.start, again.batches) == (0, 3, pinned.batches)


# -- the batch ring side -------------------------------------------------------------------------------------------

def _filled(value: float, size: int = 300):
    def build(arrays):
        out = arrays.empty((size,), np.float32)
        out.fill(value)
        return {"audio": out, "lengths": np.arange(3), "key": [f"k{value}"]}
    return build


def _builds(*builds):
    """``build_group_in`` 's ``make_builds``: each build made for the slot's arrays."""
    return lambda arrays: [functools.partial(build, arrays) for build in builds]


@ring_only
def test_a_grouped_message_holds_its_slot_until_its_last_batch_dies():
    ring = batch_ring.BatchRing(1, 2)
    free = ring._free[0]
    slot = ring.claim(0)
    message = ring.build_group_in(0, slot, _builds(_filled(1.0), _filled(2.0, 5000), _filled(3.0)))
    first, second, third = pickle.loads(pickle.dumps(message))
    arrays = [b.arrays() for b in (first, second, third)]
    for value, batch in zip((1.0, 2.0, 3.0), arrays):
        assert batch["key"] == [f"k{value}"] and np.all(batch["audio"] == value)
        np.testing.assert_array_equal(batch["lengths"], np.arange(3))
    kept = torch.from_numpy(arrays[1]["audio"])[10:20]
    del first, second, third, arrays, batch
    gc.collect()
    assert free[slot.index].get_value() == 0, "a view of one batch of the group is alive: the slot stays claimed"
    assert kept.eq(2.0).all()
    del kept
    assert free[slot.index].get_value() == 1


@ring_only
def test_a_failed_build_in_a_group_gives_the_slot_back():
    ring = batch_ring.BatchRing(1, 1)
    slot = ring.claim(0)

    def broken(arrays):
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        ring.build_group_in(0, slot, _builds(_filled(1.0), broken))
    assert ring.claim(0) is slot


@ring_only
def test_a_slot_reserves_room_for_larger_messages():
    """Address space only: a grown slot is at least the reserve, so a later, larger message fits without growing
    again (each growth pays fresh pages and a copy)."""
    ring = batch_ring.BatchRing(1, 1, reserve=8 << 20)
    slot = ring.claim(0)
    pickle.loads(pickle.dumps(ring.build_group_in(0, slot, _builds(_filled(1.0)))))
    generation = slot.generation
    gc.collect()
    slot = ring.claim(0)
    pickle.loads(pickle.dumps(ring.build_group_in(0, slot, _builds(*(_filled(float(v), 200_000) for v in range(6))))))
    assert slot.generation == generation and slot.arena.capacity >= 8 << 20


# -- real recordings through workers -------------------------------------------------------------------------------

@pytest.fixture
def real_pack(real_audio, wesep_list, tmp_path):
    """A tse pack of 16 two-speaker mixtures of real recordings: 8 batches an epoch."""
    return real_mixtures_config(real_audio, wesep_list, tmp_path / "pack", 16, seconds=0.8, seconds_step=0.1,
                                seconds_cycle=3, start_step=0.1, partner=2)


def _copy(batch: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _epochs(loader, epochs, copy=True):
    out = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        out.append([_copy(b) if copy else b for b in loader])
    return out


@ring_only
@pytest.mark.parametrize("batch_size, batches_per_message", [(2, 3), (1, None)])
def test_grouped_batches_equal_one_process(real_pack, batch_size, batches_per_message):
    """8 batches in messages of 3 (3 + 3 + 2), or 16 sized automatically (up to 2 per message: 16 // (4 x 2));
    streamed over several epochs, then held."""
    real_pack = {**real_pack, "dataset_args": {**real_pack["dataset_args"], "batch_size": batch_size}}
    reference = _epochs(build_loader(real_pack, "train", seed=3), range(3))
    loader = build_loader(real_pack, "train", seed=3, num_workers=2, batches_per_message=batches_per_message)
    assert len(loader) == 16 // batch_size
    if batches_per_message is None:
        sizes, asked = loader.message_sizes, []
        next_size = sizes.next
        sizes.next = lambda *args: asked.append(next_size(*args)) or asked[-1]
    for epoch, batches in enumerate(_epochs(loader, range(3))):
        assert_batches_equal(batches, reference[epoch])
    if batches_per_message is None:
        assert max(asked) == 2, f"automatic sizes never grouped: {asked}"
    loader.set_epoch(1)
    held = list(loader)
    assert_batches_equal(held, reference[1])
    del held
    gc.collect()
    assert all(sem.get_value() == 1 for row in loader.dataset.ring._free for sem in row), "every slot is free again"


@ring_only
def test_a_consumer_holding_batches_of_several_groups_keeps_them_intact(real_pack):
    """Every other batch kept to the end, the rest dropped at once: the kept ones' slots are never reused."""
    reference = _epochs(build_loader(real_pack, "train", seed=3), [2])[0]
    loader = build_loader(real_pack, "train", seed=3, num_workers=2, prefetch_factor=1, batches_per_message=2)
    loader.set_epoch(2)
    kept = {}
    for index, batch in enumerate(loader):
        assert_batches_equal([_copy(batch)], [reference[index]])
        if index % 2 == 0:
            kept[index] = batch
        del batch
    assert_batches_equal([kept[i] for i in sorted(kept)], [reference[i] for i in sorted(kept)])


@pytest.mark.parametrize("workers, stop_after", [(2, 4), (2, 1), (0, 4)])
def test_a_state_saved_mid_group_resumes_at_the_next_batch(real_pack, workers, stop_after):
    """Messages of 3: after 4 batches the loader is inside its second message, after 1 inside its first."""
    reference = _epochs(build_loader(real_pack, "train", seed=3), [1])[0]
    loader = build_loader(real_pack, "train", seed=3, num_workers=workers, batches_per_message=3)
    loader.set_epoch(1)
    head = []
    for batch in loader:
        head.append(_copy(batch))
        if len(head) == stop_after:
            break
    state = loader.state_dict()
    assert state["epoch"] == 1 and state["batches_consumed"] == stop_after
    resumed = build_loader(real_pack, "train", seed=3, num_workers=2, batches_per_message=3)
    resumed.load_state_dict(state)
    assert_batches_equal(head + [_copy(b) for b in resumed], reference)


@pytest.mark.parametrize("workers", [2, 0])
def test_torchdatas_loader_resumes_mid_group(real_pack, tmp_path, workers):
    pytest.importorskip("torchdata")
    from speechpack.loader.stateful_loader import POSITION_KEY, stateful_dataloader
    reference = _epochs(build_loader(real_pack, "train", seed=3), [1])[0]
    loader = stateful_dataloader(real_pack, "train", seed=3, num_workers=workers, batches_per_message=3)
    loader.set_epoch(1)
    assert len(loader) == len(reference)
    iterator = iter(loader)
    head = [_copy(next(iterator)) for _ in range(4)]
    torch.save(loader.state_dict(), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    assert state[POSITION_KEY]["batches_consumed"] == 4 and state[POSITION_KEY]["epoch"] == 1
    fresh = stateful_dataloader(real_pack, "train", seed=3, num_workers=2)
    fresh.load_state_dict(state)
    assert_batches_equal(head + [_copy(b) for b in fresh], reference)


def test_batches_per_message_is_checked(real_pack):
    from speechpack.loader.config_checks import ConfigError
    with pytest.raises(ConfigError, match="batches_per_message"):
        build_loader(real_pack, "train", num_workers=2, batches_per_message=0)
