"""A cold start from the store (docs/performance.md, "first batch from a cold cache"): the column files fetched
together and each verified before the reader sees a byte of it, their bytes handed to the reader from the fetch
(not read back from the cache's copy), one store client, and the first pass's first batch fetched while the pass's
schedule is built, with the batches the local copy deals.  Against the loopback S3 server, real recordings."""

from __future__ import annotations

import os
import threading
import time

import pytest

from factories.batches import assert_batches_equal
from factories.s3 import flip_object_byte, publish
from factories.store_training import config, local_batches, plain, record_schedule_builds
from factories.wesep_lists import Mix
from speechpack.loader import build_loader
from speechpack.loader.cache import CacheSettings, cached_files, schedule
from speechpack.loader.cache.cached_files import CacheIntegrityError, CachedPackFiles
from speechpack.loader.pack import ObjectStorePackFiles, open_pack, reader
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions


@pytest.fixture
def local_pack(tmp_path, wesep_list, real_audio):
    """Twelve real two-speaker mixtures in small shards (24 stream files)."""
    speech = real_audio("pocketsphinx", 5)
    mixes = [Mix(f"c{i:02d}", (speech[i % 5], speech[(i + 2) % 5]), seconds=0.4 + 0.05 * (i % 4))
             for i in range(12)]
    out = tmp_path / "pack"
    build_wesep(str(wesep_list(mixes).list_path), BuildOptions(out=str(out), shard_bytes=20_000, progress=False))
    return out


def test_the_columns_are_fetched_together_each_verified_and_handed_to_the_reader_from_the_fetch(
        s3_store, local_pack, tmp_path, monkeypatch):
    url = publish(local_pack, "cold/columns/train")
    manifest = open_pack(local_pack).manifest
    columns = {f"columns/{name}" for name in manifest.columns}
    in_flight, most = set(), [0]
    lock = threading.Lock()
    verified = []
    fetch_verified = cached_files.fetch_verified

    def counted(store, rel, size, sha256, fp, retry_seconds):
        with lock:
            in_flight.add(rel)
            most[0] = max(most[0], len(in_flight & columns))
        time.sleep(0.3)  # long enough that fetches issued together are seen together, on a loaded machine too
        try:
            fetch_verified(store, rel, size, sha256, fp, retry_seconds)
            verified.append(rel)
        finally:
            with lock:
                in_flight.discard(rel)

    read_back = []
    read_checked = CachedPackFiles._read_checked
    connects = []
    connect = ObjectStorePackFiles._connect
    monkeypatch.setattr(cached_files, "fetch_verified", counted)
    monkeypatch.setattr(CachedPackFiles, "_read_checked", lambda self, rel, read: read_back.append(rel) or
                        read_checked(self, rel, read))
    monkeypatch.setattr(ObjectStorePackFiles, "_connect", lambda self: connects.append(os.getpid()) or connect(self))
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache")}), "train", seed=3)
    got = [plain(b) for b in loader]
    assert most[0] == len(columns) > 1, "the column files are fetched at once"
    assert columns <= set(verified), "every column was checked against its sha256 as it arrived"
    assert not columns & set(read_back), "a fetched column reaches the reader from the fetch, not the cache's copy"
    assert connects == [os.getpid()], "one store client, made once"
    assert_batches_equal(got, local_batches(local_pack))
    # a second open on the warm cache reads the columns from the cache's verified copies
    again = build_loader(config(url, {"dir": str(tmp_path / "cache")}), "train", seed=3)
    assert columns <= set(read_back)
    assert_batches_equal([plain(b) for b in again], got)


def test_a_column_corrupted_on_the_store_is_named_and_never_used(s3_store, local_pack, tmp_path, monkeypatch):
    url = publish(local_pack, "cold/corrupt-column/train")
    flip_object_byte(url, "columns/samples.npy")
    made = []
    init = reader.Pack.__init__
    monkeypatch.setattr(reader.Pack, "__init__", lambda self, *a, **k: made.append(a) or init(self, *a, **k))
    settings = CacheSettings.from_dict({"dir": str(tmp_path / "cache")})
    with pytest.raises(CacheIntegrityError, match=r"columns/samples\.npy: sha256 .* does not match dataset\.json"):
        build_loader(config(url, {"dir": str(tmp_path / "cache")}), "train", seed=3)
    assert made == [], "no pack was made of the columns"
    files = CachedPackFiles(ObjectStorePackFiles(url), settings)
    with pytest.raises(CacheIntegrityError, match=r"columns/samples\.npy"):
        files.read_manifest()
    assert "columns/samples.npy" not in files._arrived, "no byte of the corrupt column is kept for the reader"
    sha = open_pack(local_pack).manifest.columns["samples.npy"].sha256
    assert not list((tmp_path / "cache").rglob(f"{sha}-*.bin")), "nor became a cache entry"


def test_the_first_batch_is_fetched_while_the_pass_schedule_is_built(s3_store, local_pack, tmp_path, monkeypatch):
    """The whole pass's schedule waits (up to 20 s) until a fetch of the first batch's stream files has begun: with
    the fetch started only after the schedule, it would wait in vain."""
    url = publish(local_pack, "cold/first-batch/train")
    started = threading.Event()
    waited = []
    of = schedule.FileSchedule.of.__func__
    fetch_verified = cached_files.fetch_verified

    def watched(store, rel, size, sha256, fp, retry_seconds):
        if not rel.startswith("columns/"):
            started.set()
        return fetch_verified(store, rel, size, sha256, fp, retry_seconds)

    def slow_whole(cls, packs, plans, units):
        if max((len(p) for p in plans), default=0) > 1 and waiting[0]:  # the pass's schedule, not one batch's
            waited.append(started.wait(20))
        return of(cls, packs, plans, units)

    waiting = [False]
    monkeypatch.setattr(cached_files, "fetch_verified", watched)
    monkeypatch.setattr(schedule.FileSchedule, "of", classmethod(slow_whole))
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache"), "ahead": 0}), "train", seed=3, num_workers=2,
                          batches_per_message=1)
    loader.set_epoch(1)  # a pass other than the start-up check's
    waiting[0] = True
    cache = loader.dataset.feed.caches[0]
    before = cache.fetched_bytes
    batches = iter(loader)
    got = [plain(next(batches))]
    whole = loader.dataset.feed.schedule((1, 0))
    assert waited == [True], "the first batch's files were being fetched while the pass's schedule was built"
    assert cache.fetched_bytes - before == sum(whole.sizes[n] for n in whole.batch(0))
    got += [plain(b) for b in batches]
    expected = build_loader(config(str(local_pack)), "train", seed=3)
    expected.set_epoch(1)
    assert_batches_equal(got, [plain(b) for b in expected])


def test_the_torchdata_loader_builds_the_pass_schedule_before_its_workers_and_fetches_its_first_batch_there(
        s3_store, local_pack, tmp_path, monkeypatch):
    """As ``build_loader``'s loader: no worker builds a schedule of its own, and the training process has fetched
    the first batch's files before the workers start."""
    from speechpack.loader.stateful_loader import stateful_dataloader

    url = publish(local_pack, "cold/torchdata/train")
    builds = tmp_path / "builds.txt"
    record_schedule_builds(monkeypatch, builds)
    loader = stateful_dataloader(config(url, {"dir": str(tmp_path / "cache"), "ahead": 0}), "train", seed=3,
                                 num_workers=2, batches_per_message=1)
    feed = loader.speech_loader.dataset.feed
    cache = feed.caches[0]
    before = cache.fetched_bytes
    first_files = feed.schedule((0, 0)).batch(0)
    batches = iter(loader)
    got = [plain(next(batches))]
    assert cache.fetched_bytes - before == sum(feed.schedule((0, 0)).sizes[n] for n in first_files)
    got += [plain(b) for b in batches]
    assert_batches_equal(got, local_batches(local_pack))
    assert set(builds.read_text().split()) == {str(os.getpid())}, "a worker built a schedule of its own"
