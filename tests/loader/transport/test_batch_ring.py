"""Batches from DataLoader workers through reused shared-memory slots (``loader.transport.batch_ring``, ``loader.transport.batch_arrays``).

What is pinned (docs/loader.md, "Workers"; docs/performance.md, "Scaling with workers"):
- arrays carved from an arena equal numpy's ``empty``/``zeros``/``full`` and fall back to numpy when full;
- a message's arrays equal what the worker built, whether built in the slot or copied in, across slot growth;
- the lifetime rule: a slot is released only when the last array, tensor or view of its batch dies, in the
  training process (never in a process forked from it), and a worker whose slots are all held sends the ordinary
  way instead of waiting or overwriting;
- on real recordings, batches through 2 workers equal one process's, streamed (every batch through a slot) or
  all held at once (the ring exhausted, the rest through torch's transport), and every slot is free afterwards.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle

import numpy as np
import pytest
import torch

from factories import Mix
from factories.asr import librivox_span_pack
from factories.batches import assert_batches_equal
from speechpack.loader import build_loader
from speechpack.loader.transport import batch_ring
from speechpack.loader.transport.batch_arrays import ALIGN, NUMPY, Arena, BatchArrays
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.skipif(not batch_ring.supported(), reason="memfd_create is Linux only")]


def test_arena_arrays_equal_numpys_and_fall_back_when_full():
    arena = Arena(np.zeros(4096, dtype=np.uint8))
    arrays = BatchArrays(arena)
    empty = arrays.empty((3, 5), np.float32)
    zeros = arrays.zeros((7,), bool)
    full = arrays.full((2, 3), -100, np.int64)
    big = arrays.zeros((4096,), np.uint8)  # does not fit: plain numpy
    with pytest.raises(OverflowError):
        arrays.full((2,), 300, np.uint8)  # what np.full raises
    for array in (empty, zeros, full):
        assert arena.offset_of(array) is not None and arena.offset_of(array) % ALIGN == 0
        assert array.flags.c_contiguous
    assert empty.shape == (3, 5) and empty.dtype == np.float32
    np.testing.assert_array_equal(zeros, np.zeros(7, bool))
    np.testing.assert_array_equal(full, np.full((2, 3), -100, np.int64))
    assert arena.offset_of(big) is None and not big.any()
    assert NUMPY.empty((2,), np.float32).base is None  # without an arena: numpy's own
    assert NUMPY.full((2,), 3, np.int8).tolist() == [3, 3] and not NUMPY.zeros((2,), bool).any()


def test_numpy_arrays_hold_no_arena_and_pickle_as_themselves():
    with pytest.raises(AttributeError):
        NUMPY.arena = Arena(np.zeros(64, dtype=np.uint8))
    assert pickle.loads(pickle.dumps(NUMPY)) is NUMPY and NUMPY.take((2,), np.float32) is None


def test_a_slot_hands_builds_its_current_arena_as_it_grows():
    ring = batch_ring.BatchRing(1, 1)
    slot = ring.claim(0)
    arrays = slot.arrays
    slot.grow(1 << 20)
    assert arrays.arena is slot.arena and arrays.arena.capacity >= 1 << 20
    assert slot.arena.offset_of(arrays.empty((10,), np.float32)) is not None


def _round_trip(ring, slot, batch):
    """What the training process receives for ``batch`` (pickled as the DataLoader's queue does)."""
    return pickle.loads(pickle.dumps(ring.pack(0, slot, batch)))


def test_slot_is_released_when_the_last_view_dies():
    ring = batch_ring.BatchRing(1, 2)
    free = ring._free[0]
    slot = ring.claim(0)
    audio = slot.arrays.empty((4, 1, 300), np.float32)
    audio[...] = np.arange(1200, dtype=np.float32).reshape(4, 1, 300)
    outside = np.arange(10, dtype=np.int64)  # built without the arena: copied in
    received = _round_trip(ring, slot, {"audio": audio, "key": ["a", "b"], "lengths": outside})
    arrays = received.arrays()
    assert list(arrays) == ["audio", "key", "lengths"] and arrays["key"] == ["a", "b"]
    np.testing.assert_array_equal(arrays["audio"], audio)
    np.testing.assert_array_equal(arrays["lengths"], outside)
    view = torch.from_numpy(arrays["audio"])[2:, 0, 5:]
    assert ring.claim(0) is not None and ring.claim(0) is None  # both slots claimed: the worker would fall back
    del received, arrays
    gc.collect()
    assert free[slot.index].get_value() == 0, "a view of the batch is alive: the slot stays claimed"
    assert view[0, 0].item() == 605.0
    del view
    assert free[slot.index].get_value() == 1


def test_a_forked_child_never_releases_a_slot_of_the_training_process():
    """A process forked from the training process (a DataLoader worker started later, any multiprocessing child)
    inherits its batches.  A dropped batch still waiting for the garbage collector (in a reference cycle) at the
    fork, collected in the child, must not release the slot there: the training process releases it again when it
    collects its own copy, by then under the next batch of that slot, which the worker would then overwrite."""
    context = multiprocessing.get_context("fork")
    ring = batch_ring.BatchRing(1, 1, context=context)
    free = ring._free[0][0]
    dropped = _round_trip(ring, ring.claim(0), {"x": np.zeros(8, np.float32)}).arrays()
    cycle = [dropped]
    cycle.append(cycle)
    collecting = gc.isenabled()
    gc.disable()
    try:
        del dropped, cycle  # garbage, not collected yet
        child = context.Process(target=gc.collect)
        child.start()
        child.join()
        assert child.exitcode == 0
        assert free.get_value() == 0, "a forked child released the training process's slot"
    finally:
        if collecting:
            gc.enable()
    gc.collect()
    assert free.get_value() == 1
    held = _round_trip(ring, ring.claim(0), {"x": np.full(8, 2.0, np.float32)}).arrays()
    assert free.get_value() == 0 and ring.claim(0) is None, "the slot of a held batch is free"
    np.testing.assert_array_equal(held["x"], np.full(8, 2.0, np.float32))


def test_slot_grows_and_keeps_its_bytes():
    ring = batch_ring.BatchRing(1, 1)
    slot = ring.claim(0)
    small = np.arange(100, dtype=np.float32)
    first = _round_trip(ring, slot, {"x": small})
    generation, capacity = slot.generation, slot.arena.capacity
    np.testing.assert_array_equal(first.arrays()["x"], small)
    del first
    gc.collect()
    slot = ring.claim(0)  # the same slot again: no memory crosses this time
    inside = slot.arrays.full((50,), 7, np.int16)
    big = np.random.default_rng(0).standard_normal(capacity // 4 + 10).astype(np.float32)  # does not fit
    message = ring.pack(0, slot, {"inside": inside, "big": big})
    assert slot.generation == generation + 1 and slot.arena.capacity >= big.nbytes
    arrays = pickle.loads(pickle.dumps(message)).arrays()
    np.testing.assert_array_equal(arrays["inside"], np.full(50, 7, np.int16))
    np.testing.assert_array_equal(arrays["big"], big)


@pytest.fixture
def real_pack(real_audio, wesep_list, tmp_path):
    """A tse pack of 16 two-speaker mixtures cut from real recordings."""
    p = real_audio("pocketsphinx", 4)
    mixes = [Mix(f"m{i:02d}", (p[i % 4], p[(i + 1) % 4]), seconds=1.0 + 0.1 * (i % 3), start=0.1 * i)
             for i in range(16)]
    case = wesep_list(mixes)
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), sample_rate=16000, progress=False))
    return {"packs": [{"path": str(out)}], "dataset_args": {"batch_size": 2, "chunk_len": 12000, "shuffle": True}}


def test_real_batches_through_two_workers_equal_one_process(real_pack):
    reference = list(build_loader(real_pack, "train", seed=3))
    assert len(reference) == 8
    loader = build_loader(real_pack, "train", seed=3, num_workers=2, prefetch_factor=1)
    ring = loader.dataset.ring
    assert ring is not None and ring.slots == 3
    # Streamed, one batch alive at a time: every batch arrives in a slot (not torch's shared memory).
    streamed = []
    for batch in loader:
        assert not batch["wav_mix"].is_shared() and not batch["wav_target"].is_shared()
        streamed.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
    assert_batches_equal(streamed, reference)
    # Held all at once (8 batches, 6 slots): no batch is overwritten; what found no slot came the ordinary way.
    held = list(loader)
    assert_batches_equal(held, reference)
    assert any(b["wav_mix"].is_shared() for b in held) and not all(b["wav_mix"].is_shared() for b in held)
    del held, batch
    gc.collect()
    assert all(sem.get_value() == 1 for row in ring._free for sem in row), "every slot is free again"


def test_a_loader_with_workers_sends_through_torch_when_the_ring_is_off(real_pack):
    reference = list(build_loader(real_pack, "train", seed=3))
    loader = build_loader(real_pack, "train", seed=3, num_workers=2)
    loader.dataset.ring = None  # before the workers start
    batches = list(loader)
    assert_batches_equal(batches, reference)
    assert all(b["wav_mix"].is_shared() for b in batches)


def test_pinning_copies_the_batch_and_frees_its_slot(monkeypatch):
    """What the DataLoader's pin-memory thread calls on a slot batch (``pin_memory=True``)."""
    from speechpack.loader.torch import _SlotBatch
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self.clone())  # CPU-only torch
    ring = batch_ring.BatchRing(1, 1, received=_SlotBatch)
    slot = ring.claim(0)
    received = _round_trip(ring, slot, {"audio": np.arange(6, dtype=np.float32), "key": ["x"]})
    pinned = received.pin_memory()
    del received
    gc.collect()
    assert ring._free[0][slot.index].get_value() == 1
    assert pinned["audio"].tolist() == [0, 1, 2, 3, 4, 5] and pinned["key"] == ["x"]


def test_a_failed_build_gives_its_slot_back():
    ring = batch_ring.BatchRing(1, 1)
    slot = ring.claim(0)

    def broken(arrays):
        arrays.empty((4,), np.float32)
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        ring.build_group_in(0, slot, lambda arrays: [lambda: broken(arrays)])
    assert ring.claim(0) is slot


def test_a_ring_copied_outside_a_worker_start_is_off():
    """Semaphores cross only to processes being started; a copy made otherwise (pickle, deepcopy) sends batches
    the ordinary way instead of failing."""
    copy = pickle.loads(pickle.dumps(batch_ring.BatchRing(2, 3)))
    assert not copy.enabled and copy.claim(0) is None


@pytest.fixture(scope="module")
def asr_spans(tmp_path_factory):
    """24 spans (0.5-2.5 s) of the real librivox clips: batches of different widths, so slots grow."""
    return librivox_span_pack(tmp_path_factory.mktemp("ring-asr"), 24, seed=11, seconds=(0.5, 2.5), words=1,
                              key="s{}")


@pytest.mark.parametrize("normalize_audio", [False, True])
def test_real_asr_batches_through_two_workers_equal_one_process(asr_spans, normalize_audio):
    """ASR waveforms go into the slot as built (raw) or as ``normalize_rows`` writes them (``out=``)."""
    config = {"task": "asr", "packs": [{"path": asr_spans}],
              "dataset_args": {"batching_strategy": "STATIC", "batch_size": 4, "normalize_audio": normalize_audio}}
    reference = list(build_loader(config, "train", seed=2))
    loader = build_loader(config, "train", seed=2, num_workers=2)
    streamed = []
    for batch in loader:
        assert not batch["source_seqs"].is_shared()  # it came in a slot
        streamed.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
    assert_batches_equal(streamed, reference)
    widths = {b["source_seqs"].shape[1] for b in reference}
    assert len(widths) > 1


def test_a_message_finds_its_ring_by_token_and_one_for_a_ring_gone_says_so():
    """Messages are rebuilt by pickle in the training process and find their ring through ``RINGS`` by the token
    they carry; the directory holds rings weakly, so a ring dropped is gone and its late message is refused."""
    ring = batch_ring.BatchRing(1, 2)
    assert batch_ring.RINGS.find(ring.token) is ring and ring.token.startswith(f"{os.getpid()}:")
    assert batch_ring.BatchRing(1, 1).token != ring.token
    message = pickle.dumps(ring.pack(0, ring.claim(0), {"lengths": np.arange(3, dtype=np.int64)}))
    token = ring.token
    del ring
    gc.collect()
    with pytest.raises(RuntimeError, match="no longer exists in this process"):
        batch_ring.RINGS.find(token)
    with pytest.raises(RuntimeError, match="no longer exists in this process"):
        pickle.loads(message)
