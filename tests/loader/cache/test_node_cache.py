"""The node cache's own files as untrusted ground (docs/loader.md, "Node cache (packs by URL)"): a copy edited on
disk after its fetch is never served (found by its recorded identity, ctime included, re-fetched once, then
named), a directory that cannot hold the cache is one line naming it, foreign and malformed names in it are
ignored and never deleted, and an unlocked ``.part`` is not a live fetch.  Real recordings on the loopback S3
server (``s3_store``)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import warnings
from pathlib import Path

import pytest

from factories.batches import assert_batches_equal
from factories.s3 import SECRET, publish
from factories.wesep_lists import Mix
from speechpack.loader import build_loader
from speechpack.loader.cache import CacheSettings, NodeCache
from speechpack.loader.cache import cached_files
from speechpack.loader.cache.cached_files import CacheIntegrityError
from speechpack.loader.cache.node_cache import EntryKey
from speechpack.loader.config import ConfigError
from speechpack.loader.pack import open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

ARGS = {"batch_size": 2, "chunk_len": 1000}


@pytest.fixture
def local_pack(tmp_path, wesep_list, real_audio):
    """Ten real two-speaker mixtures, one per shard (20 stream files)."""
    speech = real_audio("pocketsphinx", 5)
    mixes = [Mix(f"m{i:02d}", (speech[i % 5], speech[(i + 2) % 5]), seconds=0.4 + 0.05 * (i % 4))
             for i in range(10)]
    out = tmp_path / "pack"
    build_wesep(str(wesep_list(mixes).list_path), BuildOptions(out=str(out), shard_bytes=20_000, progress=False))
    assert len(open_pack(out).manifest.shards) >= 5
    return out


def config(path: str, cache: dict | None = None, **top) -> dict:
    return {"packs": [{"path": path}], "dataset_args": dict(ARGS), **({"cache": cache} if cache else {}), **top}


def batches(cfg: dict, **kwargs) -> list[dict]:
    return [{name: value.numpy().copy() if hasattr(value, "numpy") else value for name, value in batch.items()}
            for batch in build_loader(cfg, "train", seed=3, **kwargs)]


def cached_data(cache_dir: Path) -> list[Path]:
    return sorted((cache_dir / "objects").glob("*.bin"))


def zero_in_place(path: Path, start: int = 200, count: int = 4000) -> None:
    """Zero ``count`` bytes of a file in place, then put its mtime back (``os.utime``)."""
    before = os.stat(path)
    with open(path, "r+b") as fp:
        fp.seek(start)
        fp.write(b"\0" * min(count, before.st_size - start))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def assert_cache_sound(cache_dir: Path) -> None:
    for data in cached_data(cache_dir):
        if data.with_suffix(".owned").exists():
            assert hashlib.sha256(data.read_bytes()).hexdigest() == data.name.split("-")[0], data.name


@pytest.mark.parametrize("mode", ["first-map", "every-open"])
def test_a_cached_copy_edited_on_disk_is_fetched_again_never_served(s3_store, local_pack, tmp_path, mode):
    url = publish(local_pack, f"node-cache/edited-{mode}/train")
    cache = {"dir": str(tmp_path / "cache")}
    expected = batches(config(str(local_pack)))
    assert_batches_equal(batches(config(url, cache, verify_streams=mode)), expected)  # fills the cache
    edited = [p for p in cached_data(tmp_path / "cache") if p.stat().st_size > 400]
    assert len(edited) > 10
    for path in edited:
        zero_in_place(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = batches(config(url, cache, verify_streams=mode))
    assert_batches_equal(got, expected)
    said = [str(w.message) for w in caught if "changed on disk after it was fetched" in str(w.message)]
    assert len(said) == len(edited), said
    assert all(url in m and "fetching it again" in m and SECRET not in m for m in said)
    assert_cache_sound(tmp_path / "cache")


def test_the_steady_state_hashes_no_cached_copy_and_every_open_hashes_each(s3_store, local_pack, tmp_path,
                                                                           monkeypatch):
    url = publish(local_pack, "node-cache/steady/train")
    cache = {"dir": str(tmp_path / "cache")}
    first = batches(config(url, cache))  # fetched (and so verified) by this process
    hashed: list[int] = []
    real_buffer, real_file = cached_files.hash_buffer, cached_files._hash_open_file
    monkeypatch.setattr(cached_files, "hash_buffer", lambda b: hashed.append(len(b)) or real_buffer(b))
    monkeypatch.setattr(cached_files, "_hash_open_file", lambda fp: hashed.append(-1) or real_file(fp))
    assert_batches_equal(batches(config(url, cache)), first)
    assert hashed == [], "a copy whose identity is the recorded one is not hashed again"
    assert_batches_equal(batches(config(url, cache, verify_streams="every-open")), first)
    streams = sum(1 for s in open_pack(local_pack).manifest.shards for name in s.files if name.endswith(".npy"))
    assert len([h for h in hashed if h >= 0]) == streams  # each mix.npy and target.npy once


def test_a_copy_that_changes_again_after_its_second_fetch_is_named(s3_store, local_pack, tmp_path, monkeypatch):
    url = publish(local_pack, "node-cache/failing-disk/train")
    cache_dir = tmp_path / "cache"
    batches(config(url, {"dir": str(cache_dir)}))
    for path in cached_data(cache_dir):
        zero_in_place(path)
    write_ledger = NodeCache._write_ledger

    def failing_disk(self, key, source, identity):  # the disk changes every file right after its fetch
        write_ledger(self, key, source, identity)
        zero_in_place(Path(self._path(key, ".bin")))

    monkeypatch.setattr(NodeCache, "_write_ledger", failing_disk)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CacheIntegrityError, match=r"again after it was fetched once more: something under "
                                                      r"cache\.dir") as caught:
            batches(config(url, {"dir": str(cache_dir)}))
    assert str(cache_dir) in str(caught.value) and url in str(caught.value)


# --- the cache directory itself -------------------------------------------------------------------------------


def peek(cfg: dict, tmp_path: Path):
    """``speechpack peek`` of ``cfg`` (written as YAML)."""
    import yaml
    from click.testing import CliRunner

    from speechpack.cli import main

    path = tmp_path / "peek.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return CliRunner().invoke(main, ["peek", str(path)])


def one_line(result) -> str:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output and "OSError" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("place", ["dev-null", "objects-a-file", "proc-self"])
def test_a_cache_dir_that_cannot_be_a_directory_is_one_line_naming_it(s3_store, local_pack, tmp_path, place):
    url = publish(local_pack, f"node-cache/dir-{place}/train")
    if place == "dev-null":
        directory = "/dev/null"
    elif place == "proc-self":
        directory = "/proc/self"
    else:
        directory = str(tmp_path / "cache")
        os.makedirs(directory)
        Path(directory, "objects").write_text("a user's file\n")
    line = one_line(peek(config(url, {"dir": directory}), tmp_path))
    assert directory in line and "cache.dir" in line, line
    with pytest.raises(Exception) as caught:
        build_loader(config(url, {"dir": directory}), "train")
    assert type(caught.value).__name__ == "CacheDirError" and directory in str(caught.value)
    if place == "objects-a-file":
        assert Path(directory, "objects").read_text() == "a user's file\n"  # never removed


def _failing(monkeypatch, number: int, when) -> None:
    """``os`` calls of the node cache raise ``OSError(number)`` where ``when(name, args)`` says (a full or read-only
    disk, a tmp/ on another file system: simulated where no tmpfs mount is available)."""
    from speechpack.loader.cache import node_cache

    real_open, real_replace = open, os.replace

    def opening(path, *args, **kwargs):
        if when("open", path):
            raise OSError(number, os.strerror(number), str(path))
        return real_open(path, *args, **kwargs)

    def replacing(src, dst):
        if when("replace", src):
            raise OSError(number, os.strerror(number), str(src), None, str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(node_cache, "open", opening, raising=False)
    monkeypatch.setattr(node_cache.os, "replace", replacing)


def test_a_full_disk_during_a_fetch_says_how_much_space_the_limit_needs(s3_store, local_pack, tmp_path, monkeypatch):
    url = publish(local_pack, "node-cache/full/train")
    from speechpack.loader.cache import cached_files as cf

    fetch_once = cf._fetch_once

    def full_disk(store, rel, size, fp, retry):
        if rel.endswith("mix.npy"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return fetch_once(store, rel, size, fp, retry)

    monkeypatch.setattr(cf, "_fetch_once", full_disk)
    cache = {"dir": str(tmp_path / "cache"), "limit": "50MB"}
    line = one_line(peek(config(url, cache), tmp_path))
    assert str(tmp_path / "cache") in line and "the disk is full" in line and "cache.limit 50.00 MB" in line, line
    assert "free space on that disk" in line
    assert not list((tmp_path / "cache" / "tmp").glob("*.part")), "the failed fetch's .part is removed"


@pytest.mark.parametrize("number, said", [(errno.EROFS, "read-only file system"),
                                          (errno.EACCES, "may not write there"),
                                          (errno.EXDEV, "different file systems")])
def test_a_read_only_or_split_cache_dir_is_one_line_naming_it(s3_store, local_pack, tmp_path, monkeypatch, number,
                                                              said):
    url = publish(local_pack, f"node-cache/fault-{number}/train")
    if number == errno.EXDEV:
        _failing(monkeypatch, number, lambda call, path: call == "replace" and str(path).endswith(".part"))
    else:
        _failing(monkeypatch, number, lambda call, path: call == "open" and str(path).endswith(".part"))
    cache_dir = tmp_path / "cache"
    line = one_line(peek(config(url, {"dir": str(cache_dir)}), tmp_path))
    assert str(cache_dir) in line and said in line and "cache.dir" in line, line
    assert not list((cache_dir / "tmp").glob("*.part"))


def test_an_absent_object_is_still_the_stores_error_not_the_directorys(s3_store, local_pack, tmp_path):
    import fsspec

    url = publish(local_pack, "node-cache/absent/train")
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    for path in fs.glob(f"{url}/shard-*/mix.npy"):
        fs.rm(path)
    with pytest.raises(Exception) as caught:
        batches(config(url, {"dir": str(tmp_path / "cache")}))
    assert type(caught.value).__name__ != "CacheDirError", caught.value


# --- what the cache directory holds ---------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [[], {"a": 1}, 1.5, "1.5", True, "12 parsecs"])
def test_a_cache_limit_that_is_not_a_size_is_a_named_config_error(limit):
    with pytest.raises(ConfigError, match=r"^cache\.limit: "):
        CacheSettings.from_dict({"limit": limit})


def test_a_cache_limit_is_exact_and_bounded():
    assert CacheSettings.from_dict({"limit": 10**15 + 1}).limit == 10**15 + 1
    assert CacheSettings.from_dict({"limit": "1.5GiB"}).limit == 3 << 29
    with pytest.raises(ConfigError, match="more than the largest allowed"):
        CacheSettings.from_dict({"limit": 99999999999999999999999})


def test_a_cache_limit_of_any_length_is_refused_in_a_bounded_message():
    """An integer limit thousands of digits long (one Python code can pass) is named in a few words: its digits are
    never printed (``str`` of an int past 4,300 digits fails)."""
    for limit in (10**400, 10**5000):
        with pytest.raises(ConfigError) as err:
            CacheSettings.from_dict({"limit": limit})
        assert "more than the largest allowed" in str(err.value) and len(str(err.value)) < 300, str(err.value)[:300]


@pytest.mark.parametrize("name", ["-\u00b2.owned", "-\u00b2.bin", "-12.owned.bak", "-0x10.owned", "- 12.owned"])
def test_foreign_names_in_objects_are_ignored_and_never_deleted(tmp_path, name):
    sha = "ab" * 32
    cache = NodeCache(str(tmp_path / "cache"), limit=1000)
    planted = tmp_path / "cache" / "objects" / (sha + name)
    planted.write_text("not the cache's\n")
    assert cache.entries() == {}
    cache.ensure(EntryKey("cd" * 32, 10), lambda fp: fp.write(b"0123456789"), "test")
    assert planted.read_text() == "not the cache's\n"


def test_an_unlocked_part_is_not_a_live_fetch_and_a_foreign_part_is_left_alone(tmp_path):
    sha = "ab" * 32
    cache = NodeCache(str(tmp_path / "cache"), limit=3_500_000)
    tmp = tmp_path / "cache" / "tmp"
    planted = [tmp / f"{sha}-99999999999.1.part", tmp / f"{sha}-\u00b2.1.part", tmp / f"{sha}-5.x.part"]
    for path in planted:
        path.write_bytes(b"")
    data = bytes(range(256)) * 2
    key = EntryKey(hashlib.sha256(data).hexdigest(), len(data))
    path = cache.ensure(key, lambda fp: fp.write(data), "test")  # was: "cache limit 3.50 MB cannot take 512 B more"
    assert Path(path).read_bytes() == data
    assert cache.free_bytes() == 3_500_000 - len(data)
    assert all(p.exists() for p in planted), "a file the cache did not make is never deleted"


def test_a_stale_part_of_a_killed_fetch_is_still_removed(tmp_path):
    cache = NodeCache(str(tmp_path / "cache"), limit=1000)
    key = EntryKey("ef" * 32, 10)
    Path(cache._path(key, ".lock")).write_bytes(b"")  # the fetcher made its lock, then was killed
    stale = tmp_path / "cache" / "tmp" / f"{key.name}.4242.part"
    stale.write_bytes(b"01234")
    assert cache.free_bytes() == 1000 and not stale.exists()


def test_a_url_without_a_manifest_is_not_a_pack_in_the_same_words_for_the_cache_and_copy(s3_store, tmp_path):
    import fsspec

    from factories.s3 import s3_url
    from speechpack.loader.cache import open_cached_pack
    from speechpack.packer.copy.staging import read_source
    from speechpack.schemas.errors import PackFormatError

    url = s3_url("node-cache/not-a-pack/train")
    fsspec.filesystem("s3", skip_instance_cache=True).pipe_file(f"{url}/columns/samples.npy", b"x")
    said = []
    for read in (lambda: open_cached_pack(url, {"dir": str(tmp_path / "cache")}), lambda: read_source(url)):
        with pytest.raises(PackFormatError) as caught:
            read()
        said.append(str(caught.value))
    assert said[0] == said[1] == f"{url}: not a pack (no dataset.json; an unfinished build leaves none)"


def test_a_planted_ledger_entry_without_data_claims_nothing_against_the_limit(tmp_path):
    cache = NodeCache(str(tmp_path / "cache"), limit=1000)
    planted = tmp_path / "cache" / "objects" / f"{'ab' * 32}-99999999999.owned"
    planted.write_text("s3://somewhere\n")
    (tmp_path / "cache" / "objects" / f"{'cd' * 32}-5.owned").symlink_to("/dev/zero")
    assert cache.usage() == 0 and cache.free_bytes() == 1000
    cache.ensure(EntryKey("ef" * 32, 10), lambda fp: fp.write(b"0123456789"), "test")
    assert cache.usage() == 10 and planted.exists()


def test_an_entry_whose_ledger_is_a_link_is_not_the_caches_and_its_data_is_never_deleted(tmp_path):
    """A ledger entry that is a symbolic link was not written by the cache (it writes regular files, renamed into
    place), as ``entries`` already says: the entry is not complete, its data is moved aside rather than deleted,
    and the fetch replaces the link, never writing where it points."""
    data = bytes(range(200))
    key = EntryKey(hashlib.sha256(data).hexdigest(), len(data))
    cache = NodeCache(str(tmp_path / "cache"), limit=10_000)
    elsewhere = tmp_path / "someones.owned"
    elsewhere.write_text("someone's file\n")
    Path(cache._path(key, ".owned")).symlink_to(elsewhere)
    planted = Path(cache._path(key, ".bin"))
    planted.write_bytes(b"x" * len(data))
    assert cache.lookup(key) is None and cache.pin(key) is None
    cache.discard(key)
    assert planted.read_bytes() == b"x" * len(data)
    path = cache.ensure(key, lambda fp: fp.write(data), "test")
    assert Path(path).read_bytes() == data and elsewhere.read_text() == "someone's file\n"
    assert not Path(cache._path(key, ".owned")).is_symlink()
    assert [p.read_bytes() for p in planted.parent.glob(f"{key.name}.bin.unverified-*")] == [b"x" * len(data)]


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_data_that_is_not_a_regular_file_is_never_an_entry_and_is_moved_aside(tmp_path, kind):
    """Something planted at an entry's data name that is not a regular file (a directory of the entry's size, a
    FIFO for an empty file), even beside a ledger entry: never served nor hashed (a FIFO would block), moved aside
    as unverified data is, and the file is fetched."""
    cache = NodeCache(str(tmp_path / "cache"), limit=100_000)
    planted = tmp_path / "cache" / "objects" / "planted"
    if kind == "directory":
        planted.mkdir()
        data = bytes(os.stat(planted).st_size)
    else:
        os.mkfifo(planted)
        data = b""
    key = EntryKey(hashlib.sha256(data).hexdigest(), len(data))
    planted.rename(cache._path(key, ".bin"))
    Path(cache._path(key, ".owned")).write_text("s3://somewhere\n")
    assert cache.lookup(key) is None and cache.pin(key) is None
    Path(cache._path(key, ".owned")).unlink()
    path = cache.ensure(key, lambda fp: fp.write(data), "test")
    assert Path(path).is_file() and Path(path).read_bytes() == data
    [aside] = Path(cache.objects).glob(f"{key.name}.bin.unverified-*")
    assert aside.is_dir() if kind == "directory" else aside.is_fifo()


def test_a_fetch_is_counted_before_any_thread_can_see_its_entry_complete(tmp_path, monkeypatch):
    """A reader that finds an entry complete (``lookup`` takes no lock) may end the epoch and report at once, while
    the thread that fetched it is still in the ``fsync`` after its ledger entry (slow on a loaded machine): the
    bytes must already be counted in ``fetched_bytes`` by then, or a job's report misses a file it fetched."""
    import threading

    from speechpack.loader.cache import node_cache

    data = bytes(range(256)) * 3
    key = EntryKey(hashlib.sha256(data).hexdigest(), len(data))
    cache = NodeCache(str(tmp_path / "cache"))
    visible, release = threading.Event(), threading.Event()
    fsync_dir = node_cache._fsync_dir

    def slow_fsync_dir(path):
        fsync_dir(path)
        if os.path.exists(cache._path(key, ".owned")):  # the ledger is in place: the entry is complete
            visible.set()
            assert release.wait(30)

    monkeypatch.setattr(node_cache, "_fsync_dir", slow_fsync_dir)
    fetcher = threading.Thread(target=cache.ensure, args=(key, lambda fp: fp.write(data), "test"))
    fetcher.start()
    try:
        assert visible.wait(30)

        def fetch_again(fp):
            raise AssertionError("the complete entry was fetched a second time")

        path = cache.ensure(key, fetch_again, "test")
        assert Path(path).read_bytes() == data
        assert cache.fetched_bytes == len(data), "an entry was complete before its fetch was counted"
    finally:
        release.set()
        fetcher.join(30)
    assert cache.fetched_bytes == len(data) == cache.usage()
