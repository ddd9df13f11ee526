"""Deflated copies of the column files (format 1.5, ``schemas.deflated_columns``): a pack built with digests has
one per column, each inflating to exactly its column; a reader from a store fetches the copies, inflates them as
they arrive and trusts nothing that is not the column byte for byte (a stream that inflates beyond the column's
size is refused there, not held); ``validate`` names a copy that is not its column, locally and on the store.
Real recordings, the loopback S3 server."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zlib

import fsspec
import pytest
from click.testing import CliRunner

from factories.batches import assert_batches_equal
from factories.s3 import publish
from factories.store_training import config, local_batches, plain
from factories.wesep_lists import Mix
from speechpack.cli import main
from speechpack.loader import build_loader
from speechpack.loader.cache.cached_files import CacheIntegrityError
from speechpack.loader.pack import ObjectStorePackFiles, open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.constants import MINOR_DEFLATED_COLUMNS
from speechpack.schemas.deflated_columns import Inflater, deflate, deflated_name
from speechpack.schemas.format import lowest_minor

pytestmark = pytest.mark.real_data


@pytest.fixture
def digest_pack(tmp_path, wesep_list, real_audio):
    speech = real_audio("pocketsphinx", 5)
    mixes = [Mix(f"m{i:02d}", (speech[i % 5], speech[(i + 2) % 5]), seconds=0.4 + 0.05 * (i % 4)) for i in range(12)]
    out = tmp_path / "pack"
    build_wesep(str(wesep_list(mixes).list_path), BuildOptions(out=str(out), shard_bytes=150_000, progress=False,
                                                               digests=True))
    return out


def _inflates(data: bytes, column: bytes, step: int = 1000) -> bool:
    inflater = Inflater(len(column), hashlib.sha256(column).hexdigest())
    out = b"".join(inflater.feed(data[i:i + step]) for i in range(0, len(data), step))
    return inflater.finish() and out == column


def test_a_copy_is_trusted_only_as_exactly_its_column():
    column = os.urandom(3000) + bytes(200_000)
    copy = deflate(column)
    assert _inflates(copy, column) and len(copy) < len(column) // 10
    assert not _inflates(copy[:-3], column), "a stream that ends early"
    assert not _inflates(copy + b"\0", column), "bytes after the stream"
    assert not _inflates(b"not zlib at all", column)
    assert not _inflates(deflate(column[:-1] + b"x"), column), "another column of the same size"
    bomb = zlib.compress(bytes(50_000_000))  # 50 MB of zeros in 50 kB: refused at the column's size
    inflater = Inflater(len(column), hashlib.sha256(column).hexdigest())
    fed = [len(inflater.feed(bomb[i:i + 4096])) for i in range(0, len(bomb), 4096)]
    assert sum(fed) <= len(column) + 1 and not inflater.finish()
    assert lowest_minor("tse", False, True, True) == MINOR_DEFLATED_COLUMNS == 5


def test_a_pack_with_digests_has_a_deflated_copy_of_every_column(digest_pack):
    manifest = open_pack(digest_pack).manifest
    assert manifest.format_minor == MINOR_DEFLATED_COLUMNS
    assert set(manifest.deflated_columns) == set(manifest.columns)
    for name, entry in manifest.deflated_columns.items():
        data = (digest_pack / "columns" / deflated_name(name)).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry.size, entry.sha256)
        assert _inflates(data, (digest_pack / "columns" / name).read_bytes())
    assert CliRunner().invoke(main, ["validate", str(digest_pack)]).exit_code == 0


def test_the_store_reader_fetches_the_deflated_copies_and_deals_the_local_batches(s3_store, digest_pack, tmp_path,
                                                                                monkeypatch):
    url = publish(digest_pack, "deflated/read/train")
    manifest = open_pack(digest_pack).manifest
    asked = []
    read_bytes = ObjectStorePackFiles.read_bytes

    def counted(self, rel):
        asked.append(rel)
        return read_bytes(self, rel)

    monkeypatch.setattr(ObjectStorePackFiles, "read_bytes", counted)
    loader = build_loader(config(url, {"dir": str(tmp_path / "cache")}), "train", seed=3)
    assert_batches_equal([plain(b) for b in loader], local_batches(digest_pack))
    columns = {f"columns/{name}" for name in manifest.columns}
    assert {f"columns/{deflated_name(name)}" for name in manifest.columns} <= set(asked)
    assert not columns & set(asked), "a column was fetched whole beside its deflated copy"
    # the cache holds the inflated column under the column's own entry: a second open reads it from there
    asked.clear()
    again = build_loader(config(url, {"dir": str(tmp_path / "cache")}), "train", seed=3)
    assert not [rel for rel in asked if rel.startswith("columns/")]
    assert_batches_equal([plain(b) for b in again], local_batches(digest_pack))


def test_a_copy_corrupted_on_the_store_is_fetched_once_more_then_named_and_validate_names_it(
        s3_store, digest_pack, tmp_path, monkeypatch):
    url = publish(digest_pack, "deflated/corrupt/train")
    rel = f"columns/{deflated_name('samples.npy')}"
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    data = bytearray(fs.cat_file(f"{url}/{rel}"))
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file(f"{url}/{rel}", bytes(data))
    fetched = []
    read_bytes = ObjectStorePackFiles.read_bytes
    monkeypatch.setattr(ObjectStorePackFiles, "read_bytes",
                        lambda self, name: fetched.append(name) or read_bytes(self, name))
    with pytest.raises(CacheIntegrityError) as caught:
        build_loader(config(url, {"dir": str(tmp_path / "cache")}), "train", seed=3)
    assert f"{url}/{rel}" in str(caught.value) and "does not inflate" in str(caught.value)
    assert fetched.count(rel) == 2, "a copy that does not inflate to its column is fetched once more, then named"
    assert not list((tmp_path / "cache").rglob("*.part"))
    result = CliRunner().invoke(main, ["validate", url])
    assert result.exit_code != 0 and rel in result.output and "does not inflate" in result.output

    # a local copy whose manifest lists a deflated copy that is another column's: named by validate
    local = tmp_path / "swapped"
    shutil.copytree(digest_pack, local)
    manifest = json.loads((local / "dataset.json").read_text())
    swapped = (local / "columns" / deflated_name("keys.npy")).read_bytes()
    (local / "columns" / deflated_name("speakers.npy")).write_bytes(swapped)
    manifest["columns"]["deflated"]["speakers.npy"] = {"size": len(swapped),
                                                       "sha256": hashlib.sha256(swapped).hexdigest()}
    (local / "dataset.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    result = CliRunner().invoke(main, ["validate", str(local)])
    assert result.exit_code != 0
    assert deflated_name("speakers.npy") in result.output and "does not inflate" in result.output
