"""Training straight from object storage through the node cache (docs/integrations.md, "Object storage"), against a
real S3-protocol server (moto's server mode) on 127.0.0.1, with a pack of real recordings: batches bit-identical
to the local copy's, every item once across ranks sharing one cache, kill -9 mid-fetch, two jobs on one cache, a
limit too small for a batch, a corrupted object, and the store down for a few seconds mid-epoch.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from factories.batches import assert_batches_equal
from factories.s3 import SECRET, publish, stream_bytes
from factories.store_training import ARGS, config, finish, local_batches, plain, record_schedule_builds, start_rank
from factories.wesep_lists import Mix
from speechpack.loader import build_loader
from speechpack.loader.cache import CacheFullError, NodeCache
from speechpack.loader.cache.cached_files import CacheIntegrityError
from speechpack.loader.pack import ObjectStoreError, ObjectStorePackFiles, open_pack
from speechpack.loader.plan.planning_report import plan_report
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions



@pytest.fixture
def local_pack(tmp_path, wesep_list, real_audio):
    """24 real two-speaker mixtures, one per shard (48 stream files), so a quarter of the pack is a few batches."""
    speech = real_audio("pocketsphinx", 5)
    mixes = [Mix(f"m{i:02d}", (speech[i % 5], speech[(i + 2) % 5]), seconds=0.4 + 0.05 * (i % 4))
             for i in range(24)]
    out = tmp_path / "pack"
    build_wesep(str(wesep_list(mixes).list_path), BuildOptions(out=str(out), shard_bytes=20_000, progress=False))
    assert len(open_pack(out).manifest.shards) >= 12
    return out


def valid_pairs(batches: list[dict]) -> list[tuple[str, str]]:
    return [(k, s) for b in batches for k, s, v in zip(b["key"], b["spk"], b["valid"].tolist()) if v]


def assert_cache_sound(cache_dir: Path) -> None:
    """Every complete entry holds exactly the bytes its key names; nothing else looks complete."""
    objects = cache_dir / "objects"
    for data in objects.glob("*.bin"):
        sha, size = data.name[:-len(".bin")].split("-")
        if (objects / f"{sha}-{size}.owned").exists():
            assert data.stat().st_size == int(size)
            assert hashlib.sha256(data.read_bytes()).hexdigest() == sha, f"{data.name} is not what its key says"


def test_two_ranks_share_a_quarter_cache_and_deal_the_local_copys_batches(s3_store, local_pack, tmp_path):
    url = publish(local_pack, "training/two-ranks/train")
    limit = stream_bytes(local_pack) // 4
    cache = {"dir": str(tmp_path / "cache"), "limit": limit, "ahead": 2, "open_files": 4}
    runs = []
    for rank in range(2):
        spec = {"config": config(url, cache), "rank": rank, "world_size": 2, "num_workers": 2, "seed": 3,
                "batches_per_message": 1}
        runs.append((start_rank(spec, tmp_path / f"rank{rank}.pkl", LOCAL_WORLD_SIZE="2"), tmp_path / f"rank{rank}.pkl"))
    results = [finish(process, out, timeout=120) for process, out in runs]
    for rank, result in enumerate(results):
        assert_batches_equal(result["batches"], local_batches(local_pack, rank, 2))
    pairs = valid_pairs(results[0]["batches"]) + valid_pairs(results[1]["batches"])
    expected = valid_pairs(local_batches(local_pack))
    assert sorted(pairs) == sorted(expected) and len(set(pairs)) == len(pairs), "every item exactly once"
    held = NodeCache(str(tmp_path / "cache")).usage()
    assert 0 < held <= limit
    assert_cache_sound(tmp_path / "cache")


def test_a_rank_killed_mid_fetch_leaves_nothing_that_looks_complete_and_the_rerun_reuses_what_was_verified(
        s3_store, local_pack, tmp_path):
    url = publish(local_pack, "training/killed/train")
    cache = {"dir": str(tmp_path / "cache"), "ahead": 4}
    spec = {"config": config(url, cache), "rank": 0, "world_size": 1, "num_workers": 0, "seed": 3,
            "block_delay": 0.01}
    process = start_rank(spec, tmp_path / "killed.pkl")
    deadline = time.monotonic() + 60
    while len(list((tmp_path / "cache" / "objects").glob("*.owned"))) < 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert not (tmp_path / "killed.pkl").exists()
    assert_cache_sound(tmp_path / "cache")
    complete = len(list((tmp_path / "cache" / "objects").glob("*.owned")))
    assert complete >= 12
    rerun = finish(start_rank({**spec, "block_delay": 0}, tmp_path / "rerun.pkl"), tmp_path / "rerun.pkl")
    assert_batches_equal(rerun["batches"], local_batches(local_pack))
    total = sum(p.stat().st_size for p in local_pack.rglob("*.npy"))
    assert rerun["fetched"] < total, "the rerun fetched everything again instead of reusing verified files"
    assert not list((tmp_path / "cache" / "tmp").glob("*.part")), "a killed fetch's .part outlived the rerun"
    assert_cache_sound(tmp_path / "cache")


def test_two_jobs_on_one_cache_fetch_each_file_once(s3_store, local_pack, tmp_path):
    url = publish(local_pack, "training/two-jobs/train")
    cache = {"dir": str(tmp_path / "cache")}
    jobs = [(start_rank({"config": config(url, cache), "rank": 0, "world_size": 1, "num_workers": 0, "seed": seed},
                        tmp_path / f"job{seed}.pkl"), tmp_path / f"job{seed}.pkl") for seed in (3, 4)]
    results = [finish(process, out) for process, out in jobs]
    assert_batches_equal(results[0]["batches"], local_batches(local_pack, seed=3))
    assert_batches_equal(results[1]["batches"], local_batches(local_pack, seed=4))
    held = NodeCache(str(tmp_path / "cache")).usage()  # no limit: every file either job read, once
    assert results[0]["fetched"] + results[1]["fetched"] == held, "one fetch per file per node"
    assert held > stream_bytes(local_pack) // 2


def test_a_cache_smaller_than_a_batch_needs_is_an_error_at_start(s3_store, local_pack, tmp_path):
    url = publish(local_pack, "training/small/train")
    largest = max(f.size for shard in open_pack(local_pack).manifest.shards for f in shard.files.values())
    started = time.monotonic()
    with pytest.raises(CacheFullError, match="is smaller than 8 batches built together need") as caught:
        build_loader(config(url, {"dir": str(tmp_path / "cache"), "limit": largest + 1024}), "train", seed=3)
    assert time.monotonic() - started < 30
    message = str(caught.value)  # why a pack without block digests needs that much, and the ways out
    assert "a whole stream file at a time" in message and "speechpack convert" in message
    assert "dataset_args.shard_window" in message and "speechpack plan" in message


def test_a_corrupted_object_is_fetched_once_more_then_named(s3_store, local_pack, tmp_path, monkeypatch):
    url = publish(local_pack, "training/corrupt/train")
    pack = open_pack(local_pack)
    first = pack.keys.tolist().index(local_batches(local_pack)[0]["key"][0])
    rel = f"{pack.manifest.shards[int(pack.shard[first])].directory}/{pack.manifest.stream('mix').file}"
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    data = bytearray(fs.cat_file(f"{url}/{rel}"))
    data[-1] ^= 0xFF
    fs.pipe_file(f"{url}/{rel}", bytes(data))
    reads = []
    read_bytes = ObjectStorePackFiles.read_bytes
    monkeypatch.setattr(ObjectStorePackFiles, "read_bytes",
                        lambda self, name: reads.append(name) or read_bytes(self, name))
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache"), "ahead": 0}), "train", seed=3)
    with pytest.raises(CacheIntegrityError, match=rf"{rel}: sha256 .* does not match dataset.json") as caught:
        list(loader)
    assert f"{url}/{rel}" in str(caught.value) and SECRET not in str(caught.value)
    assert reads.count(rel) == 2, "a mismatch is fetched once more, then an error"
    assert_cache_sound(tmp_path / "cache")


def test_a_transfer_corrupted_once_is_fetched_again_and_training_goes_on(s3_store, local_pack, tmp_path, monkeypatch):
    url = publish(local_pack, "training/flaky/train")
    read_bytes = ObjectStorePackFiles.read_bytes
    corrupted = set()

    def once_corrupt(self, name):
        data = read_bytes(self, name)
        if name.endswith("mix.npy") and name not in corrupted:
            corrupted.add(name)
            return data[:-1] + bytes([data[-1] ^ 1])
        return data

    monkeypatch.setattr(ObjectStorePackFiles, "read_bytes", once_corrupt)
    # the cache given as build_loader's argument (the public speechpack.loader.build_loader passes it on)
    batches = [plain(b) for b in build_loader(config(url), "train", seed=3, cache={"dir": str(tmp_path / "cache")})]
    assert len(corrupted) >= 12
    assert_batches_equal(batches, local_batches(local_pack))


def test_the_store_down_for_seconds_mid_epoch_is_retried_and_a_lasting_outage_is_named(s3_store, local_pack,
                                                                                        tmp_path):
    url = publish(local_pack, "training/outage/train")
    cache = {"dir": str(tmp_path / "cache"), "ahead": 0, "retry_seconds": 30}
    loader = build_loader(config(url, cache), "train", seed=3)
    batches = iter(loader)
    got = [plain(next(batches))]
    s3_store.stop()
    restart = threading.Timer(3.0, s3_store.start)
    restart.start()
    try:
        got += [plain(b) for b in batches]
    finally:
        restart.join()
    assert_batches_equal(got, local_batches(local_pack))

    lasting = build_loader(config(url, {"dir": str(tmp_path / "cache2"), "ahead": 0, "retry_seconds": 1.5}),
                           "train", seed=3)
    batches = iter(lasting)
    next(batches)
    s3_store.stop()
    try:
        with pytest.raises(ObjectStoreError) as caught:
            list(batches)
    finally:
        s3_store.start()
    message = str(caught.value)
    assert url in message and "gave up after" in message and SECRET not in message


def test_shard_windows_fetch_each_file_once_per_epoch_and_plan_reports_both_orders(s3_store, local_pack, tmp_path):
    url = publish(local_pack, "training/shard-order/train")
    limit = stream_bytes(local_pack) // 4
    cache = {"dir": str(tmp_path / "plain"), "limit": limit}
    per_target = {"expand_targets": True}  # two items per mixture: a shard is read at two places of the epoch
    windowed = {**per_target, "shard_window": 2}  # 2 of 24 shards: as many of the largest as fit half the limit
    shuffled_report = plan_report(config(url, cache, **per_target), world_size=2)
    ordered_report = plan_report(config(url, cache, **windowed), world_size=2)
    shuffled, ordered = shuffled_report.epochs[0].cache, ordered_report.epochs[0].cache
    assert shuffled.fetched > shuffled.distinct, "a whole-epoch shuffle refetches files at a quarter of the pack"
    assert ordered.fetched == ordered.distinct and ordered.once_limit <= limit
    assert ordered.requests < shuffled.requests, "a file fetched once is one request"
    # each report shows the other order too, at the same limit: the shard windows the limit suggests, or the shuffle
    assert shuffled_report.epochs[0].other_order == "shard_window 2"
    assert shuffled_report.epochs[0].other_cache == ordered
    assert ordered_report.epochs[0].other_order == "default shuffle"
    assert ordered_report.epochs[0].other_cache == shuffled
    text = ordered_report.describe()
    assert "shard_window 2):" in text and "default shuffle, not configured)" in text
    assert f"in {ordered.requests} requests; each byte fetched once from" in text
    # Without workers the loader builds 8 batches at a time (loader.torch.IN_PROCESS_BLOCK): half the pack holds them
    # (a quarter is refused at start, naming the 8 batches).
    with pytest.raises(CacheFullError, match="8 batches built together need"):
        build_loader(config(url, cache, **windowed), "train", seed=3)
    cache = {**cache, "limit": 2 * limit, "ahead": 2}
    loader = build_loader(config(url, cache, **windowed), "train", seed=3)
    batches = [plain(b) for b in loader]
    assert_batches_equal(batches, local_batches(local_pack, **windowed))  # the local copy deals the same batches
    once = plan_report(config(url, cache, **windowed), seed=3).epochs[0].cache
    # The columns are in the cache already (the plan reports fetched them): the epoch fetched stream files only.
    assert loader.dataset.feed.caches[0].fetched_bytes == once.distinct == once.fetched, "each file once per epoch"


def test_shard_windows_deal_the_same_batches_on_the_local_copy_and_the_store_whatever_the_limit(
        s3_store, local_pack, tmp_path):
    """The order is a function of the config and the packs' contents: the limit and the pack's location never enter
    it, nor the resume fingerprint."""
    url = publish(local_pack, "training/shard-window-anywhere/train")
    whole = stream_bytes(local_pack)
    expected_loader = build_loader(config(str(local_pack), shard_window=4), "train", seed=3)
    expected = [plain(b) for b in expected_loader]
    for name, limit in (("three-quarters", 3 * whole // 4), ("twice", 2 * whole), ("none", None)):
        cache = {"dir": str(tmp_path / name), **({"limit": limit} if limit else {})}
        loader = build_loader(config(url, cache, shard_window=4), "train", seed=3)
        assert loader.state_dict()["fingerprint"] == expected_loader.state_dict()["fingerprint"]
        assert_batches_equal([plain(b) for b in loader], expected)
    shuffled = build_loader(config(str(local_pack)), "train", seed=3)
    assert [b["key"] for b in shuffled] != [b["key"] for b in expected], "the windows are an order of their own"


def test_the_deprecated_shard_order_is_shard_window_16_on_every_copy_with_a_warning(s3_store, local_pack, tmp_path):
    url = publish(local_pack, "training/shard-order-alias/train")
    whole = stream_bytes(local_pack)
    key = build_loader(config(str(local_pack), shard_window=16), "train", seed=3)
    expected = [plain(b) for b in key]
    for where, cache in ((str(local_pack), {"dir": str(tmp_path / "local"), "shard_order": True}),
                         (url, {"dir": str(tmp_path / "a"), "limit": 4 * whole, "shard_order": True}),
                         (url, {"dir": str(tmp_path / "b"), "limit": whole, "shard_order": True})):
        with pytest.warns(FutureWarning, match=r"cache.shard_order is deprecated: it stands for "
                                               r"dataset_args.shard_window: 16"):
            alias = build_loader(config(where, cache), "train", seed=3)
        assert alias.dataset.shard_order.window == 16
        assert alias.state_dict()["fingerprint"] == key.state_dict()["fingerprint"]
        assert_batches_equal([plain(b) for b in alias], expected)
    with pytest.warns(FutureWarning, match="cache.shard_order is deprecated"):  # the dry run reads it alike
        report = plan_report(config(url, {"dir": str(tmp_path / "a"), "limit": 4 * whole, "shard_order": True}))
    assert report.epochs[0].order == "shard_window 16"


@pytest.mark.parametrize("order", [{}, {"shard_window": 4}], ids=["default-shuffle", "shard-windows"])
def test_a_state_saved_on_the_local_copy_resumes_from_the_store_and_back_at_other_world_sizes(
        s3_store, local_pack, tmp_path, order):
    """A quarter cache: saved on the local copy at world size 1, resumed by two rank processes reading the store (a
    state saved there), and that state resumed on the local copy at world size 3, in either order."""
    url = publish(local_pack, f"training/resume-anywhere-{len(order)}/train")

    def config(path, cache=None):
        return {"packs": [{"path": path}], "dataset_args": {**ARGS, **order}, **({"cache": cache} if cache else {})}

    local = build_loader(config(str(local_pack)), "train", seed=3)
    batches = iter(local)
    head = [plain(next(batches)) for _ in range(3)]
    saved_locally = local.state_dict()
    cache = {"dir": str(tmp_path / "cache"), "limit": stream_bytes(local_pack) // 4, "ahead": 2, "open_files": 4}
    runs = []
    for rank in range(2):
        spec = {"config": config(url, cache), "rank": rank, "world_size": 2, "num_workers": 2, "seed": 3,
                "batches_per_message": 1, "state": saved_locally, "save_after": 2}
        out = tmp_path / f"resumed{rank}.pkl"
        runs.append((start_rank(spec, out, LOCAL_WORLD_SIZE="2"), out))
    results = [finish(process, out, timeout=120) for process, out in runs]
    for rank, result in enumerate(results):  # what the local copy resumes at world size 2, bit for bit
        there = build_loader(config(str(local_pack)), "train", rank=rank, world_size=2, seed=3)
        there.load_state_dict(saved_locally)
        local_rest = [plain(b) for b in there]
        assert_batches_equal(result["batches"], local_rest)
        there = build_loader(config(str(local_pack)), "train", rank=rank, world_size=2, seed=3)
        there.load_state_dict(saved_locally)
        local_iter = iter(there)
        [next(local_iter) for _ in range(2)]
        assert result["state"] == there.state_dict(), "the store's state is the local copy's at that position"
    # and back: the store's state resumes on the local copy at world size 3; with what was dealt before, every
    # item of the epoch once
    rest = []
    for rank in range(3):
        back = build_loader(config(str(local_pack)), "train", rank=rank, world_size=3, seed=3)
        back.load_state_dict(results[0]["state"])
        rest += [plain(b) for b in back]
    dealt = head + [b for result in results for b in result["batches"][:2]]
    pairs = valid_pairs(dealt) + valid_pairs(rest)
    assert sorted(pairs) == sorted(valid_pairs(local_batches(local_pack, **order))) and len(set(pairs)) == len(pairs)


def test_an_asd_pack_by_url_trains_as_its_local_copy(s3_store, tmp_path):
    from factories.asd_inputs import make_asd_pack

    local = make_asd_pack(tmp_path / "asd")
    url = publish(Path(local), "training/asd/train")
    args = {"train_window": 40, "hist_frames": 10, "frame_budget": 60, "min_batch": 1}

    def asd(path, cache=None):
        return {"task": "asd", "packs": [{"path": str(path)}], "dataset_args": args,
                **({"cache": cache} if cache else {})}

    expected = [plain(b) for b in build_loader(asd(local), "train", seed=2)]
    got = [plain(b) for b in build_loader(asd(url, {"dir": str(tmp_path / "cache")}), "train", seed=2)]
    assert_batches_equal(got, expected)
    assert "cache (no limit; default shuffle)" in plan_report(asd(url, {"dir": str(tmp_path / "cache")})).describe()


def reference_schedule(packs, plans, units):
    """The schedule as it was built before it was vectorised: a Python loop over every item of every batch."""
    from speechpack.loader.cache.cached_files import CachedPackFiles
    from speechpack.schemas.kinds import STREAMS_BY_KIND

    unit_pack, unit_sample = units
    shard_files = {}
    for pid, pack in enumerate(packs):
        if isinstance(pack.files, CachedPackFiles):
            for k, shard in enumerate(pack.manifest.shards):
                keys = [pack.files.key(f"{shard.directory}/{pack.manifest.stream(s).file}")
                        for s in STREAMS_BY_KIND[pack.kind]]
                shard_files[(pid, k)] = [key.name for key in keys if key is not None]
    batches = []
    for b in range(max((len(p) for p in plans), default=0)):
        needed = {}
        for plan in plans:
            if b < len(plan):
                for item in np.asarray(plan.batch(b)[0], dtype=np.int64).tolist():
                    pid, sample = int(unit_pack[item]), int(unit_sample[item])
                    needed.update(dict.fromkeys(shard_files.get((pid, int(packs[pid].shard[sample])), ())))
        batches.append(list(needed))
    return batches


def reference_batch_bytes(batches, sizes, together):
    return max((sum(sizes[n] for n in {n for batch in batches[b:b + together] for n in batch})
                for b in range(max(len(batches) - together + 1, 1))), default=0)


def test_the_vectorised_schedule_is_the_per_item_loops(s3_store, local_pack, tmp_path):
    from speechpack.loader.cache.cached_files import open_cached_pack
    from speechpack.loader.cache.schedule import FileSchedule
    from speechpack.loader.plan.static_plan import EpochPlan, make_epoch_plan

    url = publish(local_pack, "training/vectorised/train")
    packs = [open_cached_pack(url, {"dir": str(tmp_path / "cache")}), open_pack(local_pack)]
    rng = np.random.default_rng(5)
    count = 90
    units = (rng.integers(0, 2, count), rng.integers(0, len(packs[0]), count))  # both packs hold the same samples
    plans = [make_epoch_plan(count, 4, 7, 0, r, 3, True, "pad") for r in range(2)]
    sizes = rng.integers(1, 6, 13)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    ragged = EpochPlan(items=rng.permutation(count)[:offsets[-1]], valid=np.ones(offsets[-1], bool),
                       global_batch=np.arange(13), padded=0, dropped=0, offsets=offsets)
    for chosen in (plans, [ragged, plans[0]], [plans[1]], []):
        got = FileSchedule.of(packs, chosen, units)
        expected = reference_schedule(packs, chosen, units)
        assert got.batches == expected
        again = FileSchedule.from_batches(expected, got.sizes, got.sources)  # built from lists, as a caller may
        for together in (1, 2, 5, 40):
            assert got.batch_bytes(together) == again.batch_bytes(together) == reference_batch_bytes(
                expected, got.sizes, together)
        assert got.uses.keys() == again.uses.keys()
        for name, at in got.uses.items():
            assert at.tolist() == [b for b, batch in enumerate(expected) if name in batch]


@pytest.mark.parametrize("kind", ["build_loader", "stateful_dataloader"])
def test_a_store_failure_in_a_worker_reaches_training_as_its_own_type(s3_store, local_pack, tmp_path, kind):
    """Code that catches ``ObjectStoreError`` (or ``SpeechpackError``) sees the worker's error as itself, with the
    worker's message, not torch's ``RuntimeError: Caught ObjectStoreError in DataLoader worker process 1``."""
    from speechpack.loader.stateful_loader import stateful_dataloader
    from speechpack.schemas.errors import SpeechpackError

    url = publish(local_pack, f"training/worker-error-{kind}/train")
    cfg = config(url, {"dir": str(tmp_path / "cache"), "ahead": 0, "retry_seconds": 1})
    make = build_loader if kind == "build_loader" else stateful_dataloader
    loader = make(cfg, "train", seed=3, num_workers=2, batches_per_message=1)
    s3_store.stop()
    try:
        with pytest.raises(ObjectStoreError) as caught:
            list(loader)
    finally:
        s3_store.start()
    assert isinstance(caught.value, SpeechpackError)
    message = str(caught.value)
    assert url in message and "gave up after" in message and "Caught" not in message and SECRET not in message
    assert any("DataLoader worker process" in note for note in caught.value.__notes__)


def test_the_first_pass_schedule_is_built_once_before_the_workers_and_its_first_batch_fetched_there(
        s3_store, local_pack, tmp_path, monkeypatch):
    """The workers inherit the pass's file schedule (none builds its own) and find the first batch's files in the
    cache: the training process fetched them before they started."""
    url = publish(local_pack, "training/first-pass/train")
    builds = tmp_path / "builds.txt"
    record_schedule_builds(monkeypatch, builds)
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache"), "ahead": 0}), "train", seed=3, num_workers=2,
                          batches_per_message=1)
    loader.set_epoch(1)  # a pass other than the start-up check's (epoch 0)
    cache = loader.dataset.feed.caches[0]
    before = cache.fetched_bytes
    first_files = loader.dataset.feed.schedule((1, 0)).batch(0)
    batches = iter(loader)
    got = [plain(next(batches))]
    assert cache.fetched_bytes - before == sum(loader.dataset.feed.schedule((1, 0)).sizes[n] for n in first_files)
    got += [plain(b) for b in batches]
    expected = build_loader(config(str(local_pack)), "train", seed=3)
    expected.set_epoch(1)
    assert_batches_equal(got, [plain(b) for b in expected])
    assert set(builds.read_text().split()) == {str(os.getpid())}, "a worker built a schedule of its own"
