"""Sample-granular, verified reads of a pack with digests on object storage (``loader.cache.ranges``), against a
real S3-protocol server on 127.0.0.1 with real recordings: the default whole-epoch shuffle at a quarter-pack cache
deals the local copy's batches bit for bit while fetching each segment once, ``limit: 0`` reads through, a kill -9
mid-range-fetch leaves nothing that looks complete, and a segment corrupted on the store is fetched once more then
named.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from factories.batches import assert_batches_equal
from factories.s3 import SECRET, publish, stream_bytes
from factories.wesep_lists import Mix, Source
from factories.store_training import config, finish, local_batches, plain, start_rank
from speechpack.loader import build_loader
from speechpack.loader.cache import CacheFullError, NodeCache
from speechpack.loader.cache.cached_files import CacheIntegrityError
from speechpack.loader.pack import ObjectStorePackFiles, open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.loader.cache.ranges import segment_key
from speechpack.loader.torch import IN_PROCESS_BLOCK

pytestmark = pytest.mark.real_data


@pytest.fixture
def digest_pack(tmp_path, wesep_list, real_audio):
    """24 real two-speaker mixtures in shards of about three mixtures, given digests: neighbouring segments to
    coalesce, and a shuffled batch that touches a file per sample."""
    speech = real_audio("pocketsphinx", 5)
    mixes = [Mix(f"m{i:02d}", (speech[i % 5], speech[(i + 2) % 5]), seconds=0.4 + 0.05 * (i % 4))
             for i in range(24)]
    out = tmp_path / "pack"
    build_wesep(str(wesep_list(mixes).list_path), BuildOptions(out=str(out), shard_bytes=150_000, progress=False,
                                                               digests=True))
    return out


@pytest.fixture
def flac_pack(tmp_path, wesep_list, real_audio):
    """The same kind of pack in FLAC blocks of 0.1 s (its digests are per block)."""
    speech = real_audio("pocketsphinx", 5)
    mixes = [Mix(f"m{i:02d}", (speech[i % 5], speech[(i + 2) % 5]), seconds=0.4 + 0.05 * (i % 4))
             for i in range(24)]
    out = tmp_path / "flac"
    build_wesep(str(wesep_list(mixes).list_path), BuildOptions(out=str(out), shard_bytes=60_000, progress=False,
                                                               codec="flac", block_seconds=0.1))
    return out


def audio_bytes(local: Path) -> int:
    """Bytes of the pack's audio segments (what range reads fetch of it in an epoch that reads every sample)."""
    pack = open_pack(local)
    return sum(int((np.asarray(t.channels, np.int64) * np.asarray(t.length, np.int64)).sum()) * 2
               for t in pack.streams.values())


def test_the_default_shuffle_at_a_quarter_cache_deals_the_local_batches_fetching_about_each_segment_once(
        s3_store, digest_pack, tmp_path):
    """At most 1.05x the distinct bytes (the issue's bound), not exactly once: when a batch's own claims find the
    cache full of segments fetched ahead for the next batches, they evict one as a last resort (so that a batch
    never waits for room), and that one is fetched again; how often depends on the threads' timing."""
    url = publish(digest_pack, "ranges/quarter/train")
    limit = stream_bytes(digest_pack) // 4
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache"), "limit": limit}), "train", seed=3)
    batches = [plain(b) for b in loader]
    assert_batches_equal(batches, local_batches(digest_pack))
    files = loader.dataset.feed.packs[0].files
    assert files.range_reads is not None
    manifest = open_pack(digest_pack).manifest
    whole = sum(f.size for f in manifest.columns.values()) + sum(s.files["digests.npy"].size for s in manifest.shards)
    assert files.node_cache.fetched_bytes <= 1.05 * audio_bytes(digest_pack) + whole, "segments fetched again"
    assert files.range_reads.request_bytes <= 1.05 * audio_bytes(digest_pack)
    cache = NodeCache(str(tmp_path / "cache"))
    assert 0 < cache.usage() <= limit



def test_a_later_epoch_from_the_store_is_scheduled_by_segments_as_the_first_is(s3_store, digest_pack, tmp_path):
    """The pass the loader starts before its workers fork (``PlanFeed.start_pass``) is scheduled by the loader's own
    schedule builder: a pack read by ranges gets segment entries in every epoch, not only in the one the start-up
    check built."""
    url = publish(digest_pack, "ranges/later-epoch/train")
    limit = stream_bytes(digest_pack) // 4
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache"), "limit": limit}), "train", seed=3,
                          num_workers=2)  # with workers: the pass's schedule is built before they fork
    loader.set_epoch(1)
    batches = [plain(b) for b in loader]
    expected = build_loader(config(str(digest_pack)), "train", seed=3)
    expected.set_epoch(1)
    assert_batches_equal(batches, [plain(b) for b in expected])
    feed = loader.dataset.feed
    assert feed.schedule((1, 0)).ranged, "epoch 1 was scheduled by whole files"
    manifest = open_pack(digest_pack).manifest
    whole = sum(f.size for f in manifest.columns.values()) + sum(s.files["digests.npy"].size for s in manifest.shards)
    assert feed.caches[0].fetched_bytes <= 1.05 * audio_bytes(digest_pack) + whole


def test_a_pack_read_by_ranges_starts_from_a_window_of_its_schedule_and_each_worker_completes_it(
        s3_store, digest_pack, tmp_path, monkeypatch):
    """Every entry a segment: the start-up check needs no schedule (its bound fits the limit), the training process
    schedules only a window of the pass (its first batch fetched from it before the workers fork), and each worker's
    fetch-ahead thread builds the whole pass's schedule; the batches are the local copy's.  A limit the bound does
    not fit is checked against the schedule: one batch less a byte is refused, one batch exactly starts."""
    import threading

    from speechpack.loader import torch as loader_torch
    from speechpack.loader.cache.schedule import _PlanWindow

    url = publish(digest_pack, "ranges/window/train")
    builds = tmp_path / "builds.txt"
    of = loader_torch.segment_schedule

    def recorded(packs, plans, units):
        kind = "window" if plans and isinstance(plans[0], _PlanWindow) else "pass"
        with open(builds, "a") as fp:
            fp.write(f"{os.getpid()} {threading.current_thread().name} {kind}\n")
        return of(packs, plans, units)

    monkeypatch.setattr(loader_torch, "segment_schedule", recorded)
    limit = stream_bytes(digest_pack) // 4
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache"), "limit": limit}), "train", seed=3,
                          num_workers=2, batches_per_message=1)
    assert loader.dataset.feed.windowed
    assert not builds.exists(), "the start-up check built a schedule"
    batches = [plain(b) for b in loader]
    assert_batches_equal(batches, local_batches(digest_pack))
    deadline = time.monotonic() + 30  # the workers' threads build it once the window's batches are fetched, which
    while True:  # may be after this short epoch ended (the workers persist)
        rows = [line.split() for line in builds.read_text().splitlines()]
        workers = {(pid, thread) for pid, thread, kind in rows if pid != str(os.getpid()) and kind == "pass"}
        if len({pid for pid, _ in workers}) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    here = {kind for pid, _thread, kind in rows if pid == str(os.getpid())}
    assert here == {"window"}, "the training process scheduled more than the window of its first batch"
    assert len({pid for pid, _ in workers}) == 2 and {thread for _, thread in workers} == {"speechpack-cache-ahead"}
    assert 0 < NodeCache(str(tmp_path / "cache")).usage() <= limit

    feed = loader.dataset.feed
    whole = of(feed.packs, [feed.plan_of((0, 0), 0)], feed.units)
    need = whole.batch_bytes(1)
    assert need < feed.bound_of(feed.packs, [feed.plan_of((0, 0), 0)], feed.units) < limit
    builds.unlink()
    with pytest.raises(CacheFullError, match="smaller than one batch needs"):  # over the bound: the exact check
        build_loader(config(url, {"dir": str(tmp_path / "small"), "limit": need - 1}), "train", seed=3)
    assert "pass" in builds.read_text(), "a bound over the limit was not checked against the schedule"
    tight = build_loader(config(url, {"dir": str(tmp_path / "tight"), "limit": need}), "train", seed=3)
    assert_batches_equal([plain(b) for b in tight], local_batches(digest_pack))


def test_a_flac_pack_at_a_quarter_cache_deals_its_local_batches_reading_blocks_verified(s3_store, flac_pack,
                                                                                        tmp_path):
    url = publish(flac_pack, "ranges/flac/train")
    limit = stream_bytes(flac_pack) // 4
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache"), "limit": limit}), "train", seed=3)
    batches = [plain(b) for b in loader]
    assert_batches_equal(batches, local_batches(flac_pack))
    files = loader.dataset.feed.packs[0].files
    assert files.range_reads.requests > 0
    assert files.range_reads.request_bytes <= sum(stream_sizes for stream_sizes in (
        s.files[f].size for s in open_pack(flac_pack).manifest.shards for f in ("mix.npy", "target.npy")))
    assert 0 < NodeCache(str(tmp_path / "cache")).usage() <= limit


def segment_entry_names(local: Path) -> dict[tuple[str, int], str]:
    """Every audio segment of the local pack, ``(stream, segment)``, by its range entry's name (``<key>-<size>``),
    computed from the columns and the file sizes alone (pcm16: 2 bytes a sample)."""
    pack = open_pack(local)
    names = {}
    for k, shard in enumerate(pack.manifest.shards):
        for spec in pack.manifest.streams:
            table = pack.streams[spec.name]
            entry = shard.files[spec.file]
            mine = np.flatnonzero(np.asarray(table.shard) == k)
            data_offset = entry.size - int((np.asarray(table.channels)[mine] * np.asarray(table.length)[mine]).sum()) * 2
            for segment in mine.tolist():
                size = int(table.channels[segment]) * int(table.length[segment]) * 2
                names[spec.name, segment] = segment_key(entry.sha256, data_offset + int(table.offset[segment]) * 2,
                                                        size).name
    return names


def range_entries(local: Path) -> dict[str, bytes]:
    """Every audio segment of the local pack by its range entry's name: what a sound cache may hold of it."""
    pack = open_pack(local)
    entries = {}
    for (stream, segment), name in segment_entry_names(local).items():
        stored, _ = pack.stored_segment(stream, segment)
        data = np.ascontiguousarray(stored).tobytes()
        assert name.endswith(f"-{len(data)}")
        entries[name] = data
    return entries


def assert_range_cache_sound(cache_dir: Path, local: Path) -> int:
    """Every complete range entry holds exactly its segment's bytes; returns how many there are."""
    expected = range_entries(local)
    complete = 0
    for ledger in (cache_dir / "objects").glob("*.owned"):
        name = ledger.name[:-len(".owned")]
        if len(name.partition("-")[0]) != 32:
            continue  # a whole file (columns, digests.npy): sha256-named, checked by its own tests
        assert (cache_dir / "objects" / f"{name}.bin").read_bytes() == expected[name], f"{name} is not its segment"
        complete += 1
    return complete


def test_limit_zero_reads_through_and_writes_nothing_to_the_cache(s3_store, digest_pack, tmp_path):
    url = publish(digest_pack, "ranges/through/train")
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache"), "limit": 0}), "train", seed=3)
    batches = [plain(b) for b in loader]
    assert_batches_equal(batches, local_batches(digest_pack))
    files = loader.dataset.feed.packs[0].files
    assert files.range_reads.requests > 0 and files.node_cache.fetched_bytes == 0
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and not p.name.endswith(".lock")]


def test_a_segment_corrupted_on_the_store_is_fetched_once_more_then_named(s3_store, digest_pack, tmp_path,
                                                                          monkeypatch):
    url = publish(digest_pack, "ranges/corrupt/train")
    pack = open_pack(digest_pack)
    first = pack.keys.tolist().index(local_batches(digest_pack)[0]["key"][0])
    segment = int(pack.streams["mix"].first[first])
    shard = pack.manifest.shards[int(pack.shard[first])]
    rel = f"{shard.directory}/{pack.manifest.stream('mix').file}"
    size = shard.files["mix.npy"].size
    data_bytes = int(sum(np.asarray(pack.streams["mix"].length)[np.asarray(pack.streams["mix"].shard) ==
                                                                  int(pack.shard[first])])) * 2
    byte = size - data_bytes + int(pack.streams["mix"].offset[segment]) * 2 + 7  # inside the segment
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    data = bytearray(fs.cat_file(f"{url}/{rel}"))
    data[byte] ^= 0xFF
    fs.pipe_file(f"{url}/{rel}", bytes(data))
    covering = []
    read_range = ObjectStorePackFiles.read_range

    def counted(self, name, start, stop):
        if name == rel and start <= byte < stop:
            covering.append((start, stop))
        return read_range(self, name, start, stop)

    monkeypatch.setattr(ObjectStorePackFiles, "read_range", counted)
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache")}), "train", seed=3)
    with pytest.raises(CacheIntegrityError) as caught:
        list(loader)
    message = str(caught.value)
    assert url in message and shard.directory in message and "'mix'" in message and f"segment {segment} " in message
    assert SECRET not in message
    assert len(covering) == 2, "a mismatch is fetched once more, then an error"
    assert assert_range_cache_sound(tmp_path / "cache", digest_pack) >= 0


def test_a_rank_killed_mid_range_fetch_leaves_nothing_that_looks_complete_and_the_rerun_deals_the_local_batches(
        s3_store, digest_pack, tmp_path):
    url = publish(digest_pack, "ranges/killed/train")
    cache = {"dir": str(tmp_path / "cache"), "limit": stream_bytes(digest_pack) // 4}
    spec = {"config": config(url, cache), "rank": 0, "world_size": 1, "num_workers": 0, "seed": 3,
            "block_delay": 0.2}
    process = start_rank(spec, tmp_path / "killed.pkl")
    objects = tmp_path / "cache" / "objects"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len([p for p in objects.glob("*.owned") if len(p.name) < 60]) < 4:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert not (tmp_path / "killed.pkl").exists()
    assert assert_range_cache_sound(tmp_path / "cache", digest_pack) >= 4
    rerun = finish(start_rank({**spec, "block_delay": 0}, tmp_path / "rerun.pkl"), tmp_path / "rerun.pkl")
    assert_batches_equal(rerun["batches"], local_batches(digest_pack))
    assert not list((tmp_path / "cache" / "tmp").glob("*.part")), "a killed fetch's .part outlived the rerun"
    assert_range_cache_sound(tmp_path / "cache", digest_pack)


def test_the_segment_schedule_fetches_each_segment_once_at_a_quarter_cache_and_fetches_ahead_into_the_cache(
        s3_store, digest_pack, tmp_path):
    from speechpack.loader.cache.schedule import simulate
    from speechpack.loader.cache.segment_schedule import segment_schedule

    url = publish(digest_pack, "ranges/schedule/train")
    limit = stream_bytes(digest_pack) // 4
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache"), "limit": limit}), "train", seed=3)
    feed = loader.dataset.feed
    plans = [feed.plan_of((0, 0), 0)]
    schedule = segment_schedule(feed.packs, plans, feed.units)
    assert all(len(n.partition("-")[0]) == 32 for batch in schedule.batches for n in batch)
    result = simulate(schedule, limit)
    assert result.fetched == result.distinct, "the default shuffle reads each segment once per epoch"
    assert schedule.batch_bytes(1) < limit < stream_bytes(digest_pack)
    files = feed.packs[0].files
    name = schedule.batches[0][0]
    source, where = schedule.sources[name]
    path = source.local_path(where, wait=False)  # the fetch-ahead's call
    assert path is not None and Path(path).name == f"{name}.bin"
    before = files.range_reads.requests
    batches = [plain(b) for b in loader]
    assert_batches_equal(batches, local_batches(digest_pack))
    assert files.range_reads.requests < before + result.accesses, "the fetched-ahead segment was fetched again"


def test_two_rank_processes_with_workers_share_a_quarter_cache_and_deal_the_local_batches(s3_store, digest_pack,
                                                                                         tmp_path):
    url = publish(digest_pack, "ranges/two-ranks/train")
    limit = stream_bytes(digest_pack) // 4
    cache = {"dir": str(tmp_path / "cache"), "limit": limit}
    runs = []
    for rank in range(2):
        spec = {"config": config(url, cache), "rank": rank, "world_size": 2, "num_workers": 2, "seed": 3,
                "batches_per_message": 1}
        out = tmp_path / f"rank{rank}.pkl"
        runs.append((start_rank(spec, out, LOCAL_WORLD_SIZE="2"), out))
    results = [finish(process, out, timeout=180) for process, out in runs]
    for rank, result in enumerate(results):
        assert_batches_equal(result["batches"], local_batches(digest_pack, rank, 2))
    assert 0 < NodeCache(str(tmp_path / "cache")).usage() <= limit
    assert assert_range_cache_sound(tmp_path / "cache", digest_pack) > 0


class _NoWait:
    """Stands for ``time`` in ``loader.cache.node_cache``: an admission that has to wait for room is a failure."""

    monotonic = staticmethod(time.monotonic)
    time_ns = staticmethod(time.time_ns)
    time = staticmethod(time.time)

    @staticmethod
    def sleep(_seconds):
        raise AssertionError("a batch's claim waited for room the fetch-ahead took")


def test_the_fetch_ahead_fetches_the_segments_of_the_batches_after_those_being_built(s3_store, digest_pack,
                                                                                     tmp_path):
    from speechpack.loader.cache.segment_schedule import segment_schedule

    url = publish(digest_pack, "ranges/ahead/train")
    cache_dir = tmp_path / "cache"
    loader = build_loader(config(url, {"dir": str(cache_dir), "ahead": 4}), "train", seed=3)
    feed = loader.dataset.feed
    schedule = segment_schedule(feed.packs, [feed.plan_of((0, 0), 0)], feed.units)
    # without workers a block of IN_PROCESS_BLOCK batches is read together: the fetch-ahead is what reaches beyond
    assert len(schedule) > IN_PROCESS_BLOCK
    later = {n for b in range(IN_PROCESS_BLOCK, min(IN_PROCESS_BLOCK + 4, len(schedule))) for n in schedule.batch(b)}
    batches = iter(loader)
    got = [plain(next(batches))]
    deadline = time.monotonic() + 30
    held = set()
    while time.monotonic() < deadline and held != later:
        held = {p.name[:-len(".owned")] for p in (cache_dir / "objects").glob("*.owned")} & later
        time.sleep(0.05)
    assert held == later, "the segments of the batches after the block were not fetched before they were built"
    got += [plain(b) for b in batches]
    assert_batches_equal(got, local_batches(digest_pack))


@pytest.mark.parametrize("fraction", [4, 10])
def test_the_fetch_ahead_never_makes_a_batch_wait_for_room_and_an_epoch_fetches_each_segment_once(
        s3_store, digest_pack, tmp_path, monkeypatch, fraction):
    from speechpack.loader.cache import node_cache
    from speechpack.loader.cache.schedule import simulate
    from speechpack.loader.cache.segment_schedule import segment_schedule

    monkeypatch.setattr(node_cache, "time", _NoWait)
    url = publish(digest_pack, f"ranges/ahead-{fraction}/train")
    limit = stream_bytes(digest_pack) // fraction
    cache_dir = tmp_path / "cache"
    loader = build_loader(config(url, {"dir": str(cache_dir), "limit": limit, "ahead": 4}), "train", seed=3)
    feed = loader.dataset.feed
    schedule = segment_schedule(feed.packs, [feed.plan_of((0, 0), 0)], feed.units)
    distinct = simulate(schedule, limit).distinct
    files = feed.packs[0].files
    got = []
    for batch in loader:
        got.append(plain(batch))
        time.sleep(0.01)  # a training step: the fetch-ahead works meanwhile
    assert_batches_equal(got, local_batches(digest_pack))
    assert files.range_reads.request_bytes <= 1.05 * distinct, "an epoch fetched a segment twice"
    assert 0 < NodeCache(str(cache_dir)).usage() <= limit
    assert assert_range_cache_sound(cache_dir, digest_pack) > 0
    loader.set_epoch(1)
    before = files.range_reads.request_bytes
    second = [plain(b) for b in loader]
    local = build_loader(config(str(digest_pack)), "train", seed=3)
    local.set_epoch(1)
    assert_batches_equal(second, [plain(b) for b in local])
    assert files.range_reads.request_bytes - before <= 1.05 * distinct


def reference_segment_batches(packs, local: Path, plans, units) -> list[list[str]]:
    """Each position's range entries by the per-row loop: the rows of each pack read by ranges, stream by stream,
    their segments in row order, each name once per position (``segment_entry_names`` gives the names)."""
    from speechpack.loader.cache.schedule import _plan_rows

    names = segment_entry_names(local)
    position, unit = _plan_rows(plans)
    count = max((len(p) for p in plans), default=0)
    batches = []
    for b in range(count):
        rows = unit[position == b].tolist()
        batch = []
        for pid, candidate in enumerate(packs):
            if candidate.files.range_reads is None:
                continue
            for spec in candidate.manifest.streams:
                table = candidate.streams[spec.name]
                for u in (u for u in rows if int(units[0][u]) == pid):
                    sample = int(units[1][u])
                    first = int(table.first[sample])
                    batch += [names[spec.name, s] for s in range(first, first + int(table.count[sample]))]
        batches.append(list(dict.fromkeys(batch)))
    return batches


def _sources_pack(tmp_path, wesep_list, real_audio, name: str, start) -> Path:
    """20 real single-speaker utterances (a ``sources`` pack: one audio stream) in shards of about four, with
    digests; utterance ``i`` is cropped from ``start(i)`` seconds."""
    speech = real_audio("pocketsphinx", 5)
    lines = [Source(f"s{i:02d}", speech[i % 5], seconds=0.3 + 0.05 * (i % 3), start=start(i)) for i in range(20)]
    out = tmp_path / name
    build_wesep(str(wesep_list(lines, f"{name}.list").list_path),
                BuildOptions(out=str(out), shard_bytes=40_000, progress=False, digests=True))
    return out


@pytest.fixture
def sources_digest_pack(tmp_path, wesep_list, real_audio):
    """Every utterance a crop of its own (no two shards alike)."""
    return _sources_pack(tmp_path, wesep_list, real_audio, "sources", lambda i: 0.1 + 0.01 * i)


@pytest.fixture
def repeating_sources_pack(tmp_path, wesep_list, real_audio):
    """The same crops every 15 utterances, so that some shards' stream files are byte-identical (one version of a
    file in two shards: their segments are one cache entry each)."""
    return _sources_pack(tmp_path, wesep_list, real_audio, "repeating", lambda i: 0.25)


@pytest.mark.parametrize("which", ["digest_pack", "sources_digest_pack", "repeating_sources_pack"])
def test_the_segment_schedule_is_the_per_row_loop_and_finds_its_entries_by_name(s3_store, which, request, tmp_path,
                                                                                 monkeypatch):
    """A million segments are scheduled in arrays and named only when asked for: the batches, sizes, sources and
    uses by name are those of the per-row loop, and a pack given twice (one version of its files) is one entry per
    segment.  One pack alone takes the schedule's short paths (no merge of packs; an epoch reading each segment
    once places its uses rather than sorting them; a pack of one audio stream, the sources pack, keeps its rows'
    order without a sort by position), with the same answers.  The start-up check's bound (``segment_bound``) is
    at least the schedule's one-batch bytes, and a window's schedule (``PlanFeed.windowed``) is the whole one's
    within the window."""
    digest_pack = request.getfixturevalue(which)
    from speechpack.loader.cache.cached_files import open_cached_pack
    from speechpack.loader.cache.schedule import FileSchedule, simulate
    from speechpack.loader.cache.schedule import _PlanWindow
    from speechpack.loader.cache import segment_schedule as segment_schedule_module
    from speechpack.loader.cache.segment_schedule import segment_bound, segment_schedule
    from speechpack.loader.plan.static_plan import EpochPlan, make_epoch_plan

    url = publish(digest_pack, f"ranges/vectorised/{which}")
    packs = [open_cached_pack(url, {"dir": str(tmp_path / "cache")}), open_pack(digest_pack),
             open_cached_pack(url, {"dir": str(tmp_path / "cache")})]
    assert packs[0].files.range_reads is not None
    assert len(packs[0].manifest.streams) == (2 if which == "digest_pack" else 1)
    shard_files = [entry.files[packs[0].manifest.streams[0].file].sha256 for entry in packs[0].manifest.shards]
    assert (len(set(shard_files)) < len(shard_files)) == (which == "repeating_sources_pack")
    rng = np.random.default_rng(11)
    count = 60
    units = (rng.integers(0, 3, count), rng.integers(0, len(packs[0]), count))
    plans = [make_epoch_plan(count, 4, 7, 0, r, 2, True, "pad") for r in range(2)]
    sizes = rng.integers(1, 30, 6)  # up to 29 rows at one position: the sort, not the neighbour comparisons
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    ragged = EpochPlan(items=rng.integers(0, count, offsets[-1]), valid=np.ones(offsets[-1], bool),
                       global_batch=np.arange(6), padded=0, dropped=0, offsets=offsets)
    one = [packs[0]]
    alone = (np.zeros(count, np.int64), units[1])
    every = (np.zeros(len(packs[0]), np.int64), np.arange(len(packs[0])))  # each sample once in the epoch
    once = [make_epoch_plan(len(packs[0]), 4, 7, 0, 0, 1, True, "drop")]
    cases = [(packs, chosen, units) for chosen in (plans, [ragged, plans[0]], [plans[1]], [])]
    cases += [(one, plans, alone), (one, [ragged], alone), (one, once, every)]
    for chosen_packs, chosen, chosen_units in cases:
        got = segment_schedule(chosen_packs, chosen, chosen_units)
        expected = reference_segment_batches(chosen_packs, digest_pack, chosen, chosen_units)
        if chosen is once and which != "repeating_sources_pack":
            assert len({name for batch in expected for name in batch}) == sum(map(len, expected))
        assert got.batches == expected
        assert got.ranged == any(expected)
        again = FileSchedule.from_batches(expected, got.sizes, got.sources)
        assert got.uses.keys() == again.uses.keys()
        for name, at in got.uses.items():
            assert at.tolist() == [b for b, batch in enumerate(expected) if name in batch]
            source, (shard, stream, local) = got.sources[name]
            owner = next(pack for pack in chosen_packs if pack.files is source.files)  # either copy: the same bytes
            layout = source.files.range_reads.layout(owner, shard, stream)
            assert segment_key(layout.file_sha256, int(layout.start[local]), int(layout.size[local])).name == name
            assert got.sizes[name] == int(layout.size[local])
            assert got.next_use(name, 0) == at[0] and got.next_use(name, int(at[-1]) + 1) == float("inf")
        for together in (1, 3, 50):
            assert got.batch_bytes(together) == again.batch_bytes(together)
        for limit in (None, got.batch_bytes(1)):
            ours, theirs = simulate(got, limit), simulate(again, limit)
            assert (ours.distinct, ours.once_limit, ours.accesses) == (theirs.distinct, theirs.once_limit,
                                                                       theirs.accesses)
        assert simulate(got, None).fetched == simulate(again, None).fetched == simulate(got, None).distinct
        bound = segment_bound(chosen_packs, chosen, chosen_units)  # the start-up check's, without a schedule
        assert bound >= got.batch_bytes(1)
        windows = [(first, length) for first, length in ((0, 1), (2, 3), (len(got) - 1, 5)) if 0 <= first < len(got)]
        for (first, length), few in itertools.product(windows, (1, 10 ** 9)):  # a window's schedule, in place
            monkeypatch.setattr(segment_schedule_module, "_FEW", few)  # its segments by a pass, then by a sort
            window = segment_schedule(chosen_packs, [_PlanWindow(p, first, length) for p in chosen],
                                      chosen_units).shifted(first)
            reach = min(first + length, len(got))
            assert window.count == reach and window.ranged == any(expected[first:reach])
            assert [window.batch(b) for b in range(window.count)] == [[]] * first + expected[first:reach]
            for name in window.uses:
                assert window.uses[name].tolist() == [b for b in got.uses[name].tolist() if first <= b < reach]
        if expected and expected[0]:
            name = expected[0][0]
            for wrong in (name[:-1] + "x", name.replace("-", "+"), name[:31] + "-1", "0" * 64 + "-5", name + "0"):
                assert got.next_use(wrong, 0) == float("inf")
                with pytest.raises(KeyError):
                    got.sizes[wrong]
