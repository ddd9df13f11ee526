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
