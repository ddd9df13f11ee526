"""The TSE batch as one window table (``loader.tse.table``) and its recycled arrays (``loader.tse.buffers``).

What is pinned:
- on real recordings, the table path gives bit for bit the rows and audio of the item-by-item path (the
  ``Decoder`` and ``collate_rows``, kept for packs resampled at load time), over chunked, fixed-start, ``keep``,
  ``align: min``, whole, ``expand_targets``, ``train_window`` and MuVAP-normalised batches, mono and 2-channel;
- ``Chunking.windows`` draws the windows ``Chunking.window`` draws, one mixture at a time, silence re-draws included;
- every window of a batch (each mixture once, every target) is announced in one read-ahead call, exactly;
- a batch array is never overwritten while any part of it is alive (a kept batch, a torch or numpy view), and a
  dropped one is reused;
- the read-ahead call stops once a batch copied without it finds the pack cached, and resumes on a major fault.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from speechpack import loader
from factories import Mix
from speechpack.loader.rng import batch_rng
from speechpack.loader.transport.batch_arrays import Arena, BatchArrays
from speechpack.loader.pack.readahead import PROBE_EVERY, AdaptiveAdvice
from speechpack.loader.tse import windows as window_reads
from speechpack.loader.tse.buffers import MAX_BUFFERS, BufferPool
from speechpack.loader.tse import table as table_module
from speechpack.loader.tse.windows import ZERO_CHUNK_REDRAWS, Chunking, Segments, sounds
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

RATE = 16000


@pytest.fixture
def real_packs(real_audio, wesep_list, tmp_path):
    """Two packs of real recordings at 16 kHz: ``mono`` (2-3 speakers, 0.8-1.6 s) and ``stereo`` (two-file
    2-channel mixtures), in small shards so a batch spans several stream files."""
    p = real_audio("pocketsphinx", 4)
    mono = wesep_list([Mix("m0", (p[0], p[1]), seconds=1.0), Mix("m1", (p[1], p[2], p[3]), seconds=1.6, start=0.5),
                       Mix("m2", (p[2], p[0]), seconds=0.8, start=0.1), Mix("m3", (p[3], p[1]), seconds=1.3),
                       Mix("m4", (p[0], p[3], p[2]), seconds=1.1, start=0.3)], name="mono.list")
    stereo = wesep_list([Mix("s0", (p[0], p[2]), seconds=1.2, layout="two_files"),
                         Mix("s1", (p[1], p[3]), seconds=0.9, start=0.4, layout="two_files"),
                         Mix("s2", (p[3], p[0], p[1]), seconds=1.4, layout="two_files")], name="stereo.list")
    packs = {}
    for name, case in (("mono", mono), ("stereo", stereo)):
        out = tmp_path / name
        build_wesep(str(case.list_path), BuildOptions(out=str(out), sample_rate=RATE, progress=False,
                                                      shard_bytes=64000))
        packs[name] = str(out)
    return packs


CONFIGS = {
    "random chunks": ("train", dict(batch_size=3, chunk_len=12000)),
    "fixed start": ("train", dict(batch_size=2, chunk_len=9000, chunk_random_start=False)),
    "keep, align min": ("train", dict(batch_size=3, chunk_len=20000, chunk_short_policy="keep",
                                      collate={"wav_mix": {"align": "min"}, "wav_target": {"align": "min"}})),
    "whole": ("val", dict(batch_size=3)),
    "expand targets": ("train", dict(batch_size=4, chunk_len=15000, expand_targets=True)),
    "train window": ("train", dict(train_window=6000, hist_frames=1000, batch_size=3)),
    "muvap": ("train", dict(batch_size=3, chunk_len=10000, normalize="muvap")),
    "muvap whole": ("val", dict(batch_size=2, normalize="muvap", expand_targets=True)),
}


def _both_paths(builder, plan, b: int, epoch: int):
    """One planned batch through the table path and through the item-by-item path, with the batch's draws."""
    items, _valid = plan.batch(b)
    draws = batch_rng(builder.seed, epoch, int(plan.global_batch[b])).random((len(items), ZERO_CHUNK_REDRAWS + 1))
    units = None
    if builder.train_windows is not None:
        units, items = items, builder.train_windows.item[items]
    return (builder.table.rows(items, draws, units)[:3],
            builder.pipeline.stage("decode").item_rows(items, draws, units)[:3])


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("pack", ["mono", "stereo"])
def test_table_path_equals_the_item_by_item_path_on_real_recordings(real_packs, pack, name):
    state, args = CONFIGS[name]
    l = loader.build_loader({"packs": [{"path": real_packs[pack]}], "dataset_args": args}, state, seed=11)
    dataset = l.dataset
    compared = 0
    for epoch in range(2):
        plan = dataset.plan(epoch)
        for b in range(len(plan)):
            (rows, mix, target), (ref_rows, ref_mix, ref_target) = _both_paths(dataset.builder, plan, b, epoch)
            assert [(r.item, r.speaker, r.key, r.num_speaker, r.window, r.pack) for r in rows] == \
                   [(r.item, r.speaker, r.key, r.num_speaker, r.window, r.pack) for r in ref_rows]
            assert mix.dtype == ref_mix.dtype == target.dtype == np.float32
            np.testing.assert_array_equal(mix, ref_mix, err_msg=f"epoch {epoch} batch {b} wav_mix")
            np.testing.assert_array_equal(target, ref_target, err_msg=f"epoch {epoch} batch {b} wav_target")
            assert mix.shape[1] == (2 if pack == "stereo" else 1)
            compared += 1
    assert compared >= 2


def test_batch_windows_equal_one_mixture_at_a_time():
    """``Chunking.windows`` (the batch) against ``Chunking.window`` (one mixture): starts, takes, row lengths,
    including mixtures whose first draws land on silence and are re-drawn."""
    rng = np.random.default_rng(4)
    totals = rng.integers(200, 3000, 64)
    mixes = []
    for i, total in enumerate(totals.tolist()):
        mix = rng.integers(-300, 300, (1 + i % 2, total)).astype(np.int16)
        if i % 3 == 0:
            mix[:, : total * 3 // 4] = 0  # a silent head: most draws are re-drawn
        if i % 11 == 5:
            mix[:] = 0  # silent throughout: every draw fails, the last one is kept
        mixes.append(mix)
    draws = rng.random((len(totals), ZERO_CHUNK_REDRAWS + 1))
    for chunking in (Chunking(True, 1000, True, "pad"), Chunking(True, 1000, True, "keep"),
                     Chunking(True, 700, False, "pad"), Chunking(False, 1000, True, "pad")):
        start, take, length = chunking.windows(
            totals, draws, lambda i, s: sounds(mixes[i][:, s:s + chunking.chunk_len]))
        one = [chunking.window(mix, draws[i]) for i, mix in enumerate(mixes)]
        assert start.tolist() == [w.start for w in one]
        assert take.tolist() == [w.take for w in one]
        assert length.tolist() == [w.length for w in one]
        # the first draws answered together (``loader.tse.table._surely_audible``, over the mixtures laid out as
        # one channel-major stream array, as in a pack shard): the same windows
        flat = np.concatenate([mix.reshape(-1) for mix in mixes])
        offsets = np.cumsum([0] + [mix.size for mix in mixes])[:-1]
        segments = Segments(np.zeros(len(mixes), np.int32), np.zeros(len(mixes), np.int32), offsets.astype(np.int64),
                            np.array([mix.shape[0] for mix in mixes]), totals.astype(np.int64),
                            np.ones(len(mixes), np.float32), None)
        together = chunking.windows(totals, draws, lambda i, s: sounds(mixes[i][:, s:s + chunking.chunk_len]),
                                    table_module._surely_audible([flat] * len(mixes), segments, chunking.chunk_len))
        for got, want in zip(together, (start, take, length)):
            assert got.tolist() == want.tolist()


def test_every_window_is_announced_once_per_batch(real_packs, monkeypatch):
    """One read-ahead call per batch holds, per channel, each mixture's window once and every target's window."""
    calls = []
    monkeypatch.setattr(window_reads, "will_need_ranges", lambda ranges: calls.append(np.array(ranges)))
    pack_path = real_packs["stereo"]
    l = loader.build_loader({"packs": [{"path": pack_path}],
                             "dataset_args": dict(batch_size=3, chunk_len=12000, shuffle=False)}, "train", seed=2)
    [batch] = list(l)
    assert len(calls) == 1
    pack = l.dataset.builder.packs[0]
    expected = set()
    for r, (key, ratio) in enumerate(zip(batch["key"], batch["chunk_ratio"])):
        sample = pack.keys.tolist().index(key)
        start, take = round(ratio["start_ratio"] * ratio["orig_len"]), int(batch["lengths"][r])
        segments = [("target", pack.segments_of("target", sample)[pack.speakers_of(sample).index(batch["spk"][r])])]
        if r == 0 or batch["key"][r - 1] != key:
            segments.append(("mix", pack.segments_of("mix", sample)[0]))
        for stream, segment in segments:
            view = pack.stored_segment(stream, segment)[0][:, start:start + take]
            for channel in view:
                expected.add((channel.__array_interface__["data"][0], channel.nbytes))
    assert {tuple(r) for r in calls[0].tolist()} == expected
    assert len(calls[0]) == len(expected)


def _in_pool(pool: BufferPool, address: int) -> bool:
    return any(b.ctypes.data <= address < b.ctypes.data + b.nbytes for b in pool._buffers)


def test_a_live_batch_is_never_overwritten_and_a_dropped_one_is_reused(real_packs):
    l = loader.build_loader({"packs": [{"path": real_packs["mono"]}],
                             "dataset_args": dict(batch_size=2, chunk_len=8000)}, "train", seed=5)
    kept = next(iter(l))
    kept_copy = {k: v.clone() for k, v in kept.items() if isinstance(v, torch.Tensor)}
    torch_view = kept["wav_target"][1:, :, 100:]
    numpy_view = kept["wav_mix"].numpy()[0]
    view_copies = torch_view.clone(), numpy_view.copy()
    del kept["wav_target"]
    pool = l.dataset.builder.table.buffers
    for epoch in range(3):
        l.set_epoch(epoch)
        for batch in l:
            assert _in_pool(pool, batch["wav_mix"].data_ptr()), "a batch is written into the pool's buffers"
    for name, value in kept_copy.items():
        if name in kept:
            assert torch.equal(kept[name], value), f"{name} of a kept batch changed"
    assert torch.equal(torch_view, view_copies[0]), "a torch view of a dropped field changed"
    np.testing.assert_array_equal(numpy_view, view_copies[1])


def test_pool_reuses_only_free_buffers():
    pool = BufferPool()
    a = pool.empty((4, 1, 1000))
    address = a.__array_interface__["data"][0]
    b = pool.empty((4, 1, 1000))
    assert b.__array_interface__["data"][0] != address, "a buffer in use is not handed out again"
    view = a[1:2]
    del a
    c = pool.empty((4, 1, 1000))
    assert c.__array_interface__["data"][0] != address, "a view keeps its buffer"
    del view, b, c
    d = pool.empty((2, 1, 1000))  # a smaller request fits a free buffer
    assert d.shape == (2, 1, 1000) and d.dtype == np.float32 and d.flags.c_contiguous
    assert any(d.base is buffer for buffer in pool._buffers) and len(pool._buffers) == 3
    e = pool.empty((3, 1, 1300))  # a larger row, up to the power of two a buffer was rounded to (16384 bytes)
    assert e.base is not d.base and any(e.base is buffer for buffer in pool._buffers) and len(pool._buffers) == 3
    del d, e
    held = [pool.empty((3, 500)) for _ in range(MAX_BUFFERS + 2)]  # a full pool hands out plain arrays
    assert len({h.__array_interface__["data"][0] for h in held}) == len(held)
    assert len(pickle.loads(pickle.dumps(pool))._buffers) == 0, "a pickled pool arrives empty"


def test_read_ahead_policy_probes_stops_when_cached_and_resumes_on_a_major_fault():
    policy = AdaptiveAdvice()
    asked = [policy.wanted() for _ in range(PROBE_EVERY)]
    assert asked == [True] * (PROBE_EVERY - 1) + [False], "cold: announce, and leave one batch in PROBE_EVERY out"
    policy.copied(False, 3)  # the probe took major faults: still cold
    assert not policy.cached and policy.wanted()
    for _ in range(PROBE_EVERY - 2):
        policy.copied(True, 0)  # announced batches say nothing about the cache
        assert policy.wanted()
    assert not policy.wanted()
    policy.copied(False, 0)  # a probe found every page cached
    assert policy.cached and not any(policy.wanted() for _ in range(3 * PROBE_EVERY))
    policy.copied(False, 1)  # a page was evicted since: announce again
    assert not policy.cached and policy.wanted()


def test_a_cached_pack_stops_being_announced(real_packs, monkeypatch):
    """On a pack in the page cache (real recordings, just written), the first probe finds no major fault and the
    read-ahead calls stop; the batches are the same with and without them."""
    calls = []
    monkeypatch.setattr(window_reads, "will_need_ranges", lambda ranges: calls.append(len(ranges)))
    config = {"packs": [{"path": real_packs["mono"]}], "dataset_args": dict(batch_size=1, chunk_len=8000)}
    l = loader.build_loader(config, "train", seed=3)
    batches = []
    for epoch in range(2 * PROBE_EVERY // 5 + 2):
        l.set_epoch(epoch)
        batches += [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.items()} for b in l]
    assert len(batches) > PROBE_EVERY + 5
    assert len(calls) == PROBE_EVERY - 1, "announced until the first probe, then no more"
    fresh = loader.build_loader(config, "train", seed=3)
    fresh.dataset.builder.table.advice.cached = False
    monkeypatch.setattr(window_reads, "will_need_ranges", lambda ranges: None)
    again = []
    for epoch in range(2 * PROBE_EVERY // 5 + 2):
        fresh.set_epoch(epoch)
        again += list(fresh)
    for a, b in zip(batches, again):
        assert torch.equal(a["wav_mix"], b["wav_mix"]) and torch.equal(a["wav_target"], b["wav_target"])


def test_in_a_worker_slot_the_batch_audio_is_carved_from_the_slot_not_the_pool():
    """A worker builds into its shared-memory slot (``loader.transport.batch_ring``), so the batch crosses without a copy;
    outside a slot, or when the slot is full, the pool's reused buffers serve."""
    pool = BufferPool()
    arena = Arena(np.zeros(1 << 16, dtype=np.uint8))
    pool.arrays = BatchArrays(arena)  # what the decode stage gives the pool for a block built in a slot
    carved = pool.empty((2, 1, 1000))
    too_big = pool.empty((2, 1, 1 << 16))
    del pool.arrays  # the pool's default again: no slot
    assert arena.offset_of(carved) is not None
    assert arena.offset_of(too_big) is None and too_big.shape == (2, 1, 1 << 16)
    assert arena.offset_of(pool.empty((2, 1, 1000))) is None


def test_stream_arrays_are_kept_between_batches_bounded_and_pickled_empty(real_packs, monkeypatch):
    """Each stream file is looked up in the pack once and kept for the next batches (at most
    ``KEPT_STREAM_ARRAYS``); a pickled ``StreamArrays`` (a worker started by spawn) carries no mapped arrays."""
    pack = loader.open_pack(real_packs["mono"])
    assert pack.manifest.shards and len(pack.manifest.shards) > 1, "small shards: several stream files"
    looked_up = []
    original = type(pack).stream_array
    monkeypatch.setattr(type(pack), "stream_array", lambda self, shard, stream: looked_up.append(shard) or
                        original(self, shard, stream))
    arrays = window_reads.StreamArrays([pack], "mix")
    table = pack.streams["mix"]
    every = np.arange(len(table.shard))
    segments = window_reads.Segments(np.zeros(len(every), dtype=np.int32), table.shard, table.offset,
                                     table.channels, table.length, table.scale.astype(np.float32), None)
    first = arrays.of(segments)
    again = arrays.of(segments)
    assert sorted(looked_up) == sorted(set(table.shard.tolist())), "each stream file looked up once"
    assert all(a is b for a, b in zip(first, again))
    assert all(a is pack.stream_array(int(s), "mix") for a, s in zip(first, table.shard.tolist()))
    monkeypatch.setattr(window_reads, "KEPT_STREAM_ARRAYS", 1)
    bounded = window_reads.StreamArrays([pack], "mix")
    bounded.of(segments)
    assert len(bounded._kept) == 1
    assert pickle.loads(pickle.dumps(arrays))._kept == {}


def test_a_batch_generator_gives_batch_rng_streams_reused_and_pickles_as_its_seed():
    from speechpack.loader.rng import BatchGenerator
    generators = BatchGenerator(7)
    for epoch, batch in [(0, 0), (3, 17), (0, 0), (2, -1), (5, 4)]:
        reused = generators(epoch, batch).random(9)
        np.testing.assert_array_equal(reused, batch_rng(7, epoch, batch).random(9))
    assert generators(1, 1) is generators(2, 2), "one generator object, reset per batch"
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(generators))(4, 4).random(3),
                                  batch_rng(7, 4, 4).random(3))


def test_without_workers_batches_are_built_in_process_and_pin_memory_needs_an_accelerator(real_packs, monkeypatch):
    """``num_workers=0`` builds each batch in the training process without the DataLoader's iterator, with the
    same batches, resume and (where an accelerator exists) pinning; asking to pin on a machine without one pins
    nothing, as the DataLoader does."""
    config = {"packs": [{"path": real_packs["mono"]}], "dataset_args": dict(batch_size=2, chunk_len=8000)}
    l = loader.build_loader(config, "train", seed=3, num_workers=0, pin_memory=True)
    monkeypatch.setattr(type(l.dataloader), "__iter__", lambda self: pytest.fail("went through the DataLoader"))
    batches = list(l)
    reference = loader.build_loader(config, "train", seed=3, num_workers=0, pin_memory=False)
    assert len(batches) == len(reference) > 1
    for a, b in zip(batches, reference):
        assert a.keys() == b.keys()
        assert torch.equal(a["wav_mix"], b["wav_mix"]) and torch.equal(a["wav_target"], b["wav_target"])
        assert a["key"] == b["key"] and not a["wav_mix"].is_pinned()
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("cuda"))
    pinned = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a: pinned.append(self.shape) or self)
    l.load_state_dict({**l.state_dict(), "batches_consumed": 1})
    rest = list(l)
    assert len(rest) == len(batches) - 1 and torch.equal(rest[0]["wav_mix"], batches[1]["wav_mix"])
    assert len(pinned) == len(rest) * sum(isinstance(v, torch.Tensor) for v in rest[0].values())


def test_batches_mixing_packs_keep_each_packs_keys_and_speakers_whole(real_audio, wesep_list, tmp_path):
    """Keys and speakers are byte strings as wide as each pack's longest: a batch (or a block of batches) drawing
    from packs of different widths keeps every value whole."""
    p = real_audio("pocketsphinx", 3)
    short = wesep_list([Mix("a", (p[0], p[1]), seconds=0.6), Mix("b", (p[1], p[2]), seconds=0.7)], name="short.list")
    long = wesep_list([Mix("a-much-longer-key-0", (p[2], p[0]), seconds=0.8),
                       Mix("a-much-longer-key-1", (p[0], p[2]), seconds=0.5)], name="long.list")
    packs = []
    for name, case in (("short", short), ("long", long)):
        build_wesep(str(case.list_path), BuildOptions(out=str(tmp_path / name), sample_rate=RATE, progress=False))
        packs.append(str(tmp_path / name))
    for state, args in (("val", dict(batch_size=4)), ("train", dict(batch_size=3, chunk_len=4000))):
        l = loader.build_loader({"packs": [{"path": x} for x in packs], "dataset_args": args}, state, seed=1)
        keys = {k for batch in l for k in batch["key"]}
        assert keys == {"a", "b", "a-much-longer-key-0", "a-much-longer-key-1"}, state
        speakers = {s for batch in l for s in batch["spk"]}
        assert speakers == {s for x in packs for i in range(len(loader.open_pack(x)))
                            for s in loader.open_pack(x).speakers_of(i)}, state
