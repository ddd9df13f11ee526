"""``PackFiles``, the storage interface the pack reader reads through: a local directory and an object store (a real
S3-protocol server on loopback, ``test_remote.py``'s fixture) give the same files, the same bytes and the
same stream arrays; names that leave the pack are refused before any path or request is made; and ``open_pack``
reads a pack by URL with every check it makes on a directory.
"""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

from speechpack.loader.pack import (
    DirectoryPackFiles,
    ObjectStoreError,
    ObjectStorePackFiles,
    PackFiles,
    is_remote,
    open_pack,
    pack_files,
)
from speechpack.loader.pack.reader import MAX_OPEN_STREAM_FILES
from speechpack.packer.copy.to_directory import copy_pack
from speechpack.schemas.errors import PackFormatError, SpeechpackError
from speechpack.schemas.manifest_file import FileIdentity
from factories.s3 import BUCKET, SECRET, publish, s3_url

#: Names that leave the pack, or are no file name a pack may use.
ESCAPING = ["../dataset.json", "shard-000000/../../x", "/etc/passwd", "", "columns//samples.npy", ".hidden",
            "columns/..", "a\\b"]


def _local_listing(root) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def _same_files(files: PackFiles, root) -> None:
    """``files`` holds exactly the files under ``root``, with their bytes, ranges and stream arrays."""
    assert files.listing() == _local_listing(root)
    manifest = files.read_manifest().manifest
    assert files.read_bytes("dataset.json") == (root / "dataset.json").read_bytes()
    data = (root / "columns" / "samples.npy").read_bytes()
    assert files.read_range("columns/samples.npy", 10, 90) == data[10:90]
    assert files.read_range("columns/samples.npy", len(data) - 4, len(data) + 100) == data[-4:]
    spec = manifest.stream("mix")
    rel = f"{manifest.shards[0].directory}/{spec.file}"
    stream = files.stream(rel, spec.dtype, spec.row_shape)
    np.testing.assert_array_equal(stream.array, np.load(root / rel))
    assert not stream.array.flags.writeable
    with pytest.raises(FileNotFoundError):
        files.read_bytes("columns/no-such-file.npy")
    with pytest.raises(PackFormatError, match="holds <i2 .* the catalogue says \\|u1 rows of \\[112, 112\\]"):
        files.stream(rel, "|u1", (112, 112))
    for name in ESCAPING:
        for call in (files.read_bytes, files.identity, lambda n: files.read_range(n, 0, 1),
                     lambda n: files.stream(n, "<i2", ())):
            with pytest.raises(PackFormatError, match="is not a relative path inside"):
                call(name)


def test_a_directory_gives_the_packs_files_and_refuses_names_that_leave_it(store_pack):
    files = pack_files(store_pack)
    assert isinstance(files, DirectoryPackFiles) and not is_remote(str(store_pack))
    _same_files(files, store_pack)
    assert files.identity("dataset.json") == FileIdentity.of_path(str(store_pack / "dataset.json"))
    assert files.identity("columns/no-such-file.npy") is None
    assert isinstance(pack_files(f"file://{store_pack}"), DirectoryPackFiles)
    (store_pack.parent / "outside.txt").write_text("not the pack's")
    with pytest.raises(PackFormatError, match="'../outside.txt' is not a relative path inside"):
        files.read_bytes("../outside.txt")


def test_an_object_store_gives_the_same_files_bytes_and_arrays(s3_server, store_pack):
    url = publish(store_pack, "files/train")
    files = pack_files(url)
    assert isinstance(files, ObjectStorePackFiles) and is_remote(url)
    _same_files(files, store_pack)
    before = files.identity("dataset.json")
    assert before is not None and before.size == (store_pack / "dataset.json").stat().st_size
    assert files.identity("columns/no-such-file.npy") is None
    files.fs.pipe_file(f"{BUCKET}/files/train/dataset.json", (store_pack / "dataset.json").read_bytes() + b" ")
    assert files.identity("dataset.json") != before  # rewritten: a new ETag and size
    worker = pickle.loads(pickle.dumps(files))  # as a DataLoader worker receives it: no client, made again
    assert worker.read_bytes("columns/samples.npy") == (store_pack / "columns" / "samples.npy").read_bytes()
    assert ObjectStorePackFiles(url, endpoint_url=s3_server).listing() == files.listing()
    assert pack_files(s3_url("files/nothing-here")).listing() == {}


def test_a_pack_opened_by_url_reads_what_the_directory_reads(s3_server, store_pack):
    url = publish(store_pack, "open/train")
    local, remote = open_pack(store_pack), open_pack(url)
    assert remote.path == url and isinstance(remote.files, ObjectStorePackFiles)
    assert remote.keys.tolist() == local.keys.tolist() == ["m1", "m2", "m3"]
    assert remote.opened.manifest_sha256 == local.opened.manifest_sha256
    for index in range(len(local)):
        expected, got = local.sample(index), remote.sample(index)
        np.testing.assert_array_equal(got.mix, expected.mix)
        np.testing.assert_array_equal(got.targets, expected.targets)
    worker = pickle.loads(pickle.dumps(remote))
    np.testing.assert_array_equal(worker.sample(2).targets, local.sample(2).targets)
    remote.will_need("mix", 0)  # in memory: nothing to announce, and no error


def test_a_pack_by_url_is_checked_as_a_directory_is(s3_server, store_pack):
    url = publish(store_pack, "checked/train")
    remote = open_pack(url)
    files = remote.files
    samples = bytearray(files.read_bytes("columns/samples.npy"))
    samples[-1] ^= 0x01
    files.fs.pipe_file(f"{BUCKET}/checked/train/columns/samples.npy", bytes(samples))
    with pytest.raises(PackFormatError, match=f"{url}/columns/samples.npy: sha256 .* does not match dataset.json"):
        open_pack(url)
    raw = files.read_bytes("dataset.json")
    files.fs.pipe_file(f"{BUCKET}/checked/train/dataset.json", raw.replace(b'"shards"', b' "shards"', 1))
    with pytest.raises(PackFormatError, match=rf"{url}/shard-00000\d/mix\.npy: pack changed since it was opened "
                                              rf"\({url}/dataset\.json was replaced\)"):
        remote.sample(0)
    files.fs.rm_file(f"{BUCKET}/checked/train/dataset.json")
    with pytest.raises(PackFormatError, match=f"{url}: not a pack \\(no dataset.json"):
        open_pack(url)


def test_an_asd_pack_by_url_reads_its_data_streams(s3_server, tmp_path):
    from factories.asd_inputs import make_asd_pack

    local = open_pack(make_asd_pack(tmp_path / "a"))
    url = s3_url("asd-open/train")
    copy_pack(local.path, url, progress=False)
    remote = open_pack(url)
    for index in range(len(local)):
        expected, got = local.sample(index), remote.sample(index)
        np.testing.assert_array_equal(got.targets, expected.targets)
        assert set(got.data) == set(expected.data)
        for name in expected.data:
            np.testing.assert_array_equal(got.data[name], expected.data[name])
    assert remote.attrs.keys() == local.attrs.keys()


def test_store_failures_name_the_object_and_never_the_secret(s3_server):
    missing = "s3://no-such-bucket-speechpack/packs/train"
    with pytest.raises(PackFormatError, match=f"{missing}") as failed:
        open_pack(missing)
    assert SECRET not in str(failed.value)
    with pytest.raises(SpeechpackError, match="name a prefix inside the bucket"):
        pack_files(f"s3://{BUCKET}")
    with pytest.raises(SpeechpackError, match="applies to s3:// URLs only"):
        ObjectStorePackFiles("memory://packs/train", endpoint_url="http://127.0.0.1:1")
    error = ObjectStoreError(f"{missing}/dataset.json", "read", "AccessDenied")
    assert isinstance(error, OSError) and str(error) == f"{missing}/dataset.json: cannot read (AccessDenied)"
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_without_the_s3_extra_a_url_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(SpeechpackError, match=r"s3://bucket/packs/train: object storage needs fsspec: pip install "
                                              r"'speechpack\[s3\]'"):
        open_pack("s3://bucket/packs/train")


def test_cue_banks_are_read_in_place_from_a_store_each_file_hashed_before_use(s3_server, tse_split, tmp_path,
                                                                               monkeypatch):
    """``open_pack(url)`` of a pack with every cue kind: the banks read as the local copy's, item for item; only the
    index files are read at open (each payload when its bank is first read); a corrupted cue object is named with
    both hashes, an index file at open, a payload when its bank is read."""
    from factories.cue_split import assert_same_cues, build_split_pack
    from factories.s3 import flip_object_byte

    local = tmp_path / "pack"
    build_split_pack(tse_split, local)
    url = publish(local, "cues-open/train")
    reads = []
    read_bytes = ObjectStorePackFiles.read_bytes
    monkeypatch.setattr(ObjectStorePackFiles, "read_bytes", lambda self, rel: reads.append(rel) or read_bytes(self, rel))
    remote = open_pack(url)
    assert not [rel for rel in reads if rel.endswith("/data.npy") or rel.endswith("/sources.json")], reads
    assert {rel for rel in reads if rel.startswith("cues/")} == {
        f"cues/{name}" for name in remote.manifest.cues if name.rsplit("/", 1)[-1] not in ("data.npy", "sources.json")}
    assert_same_cues(open_pack(local), remote)
    assert pickle.loads(pickle.dumps(remote)).cues["audio"].read(0).shape == remote.cues["audio"].read(0).shape

    flip_object_byte(url, "cues/audio/data.npy")
    opened = open_pack(url)  # the index is intact: the payload is hashed when the bank is first read
    with pytest.raises(PackFormatError, match=rf"{url}/cues/audio/data.npy: sha256 [0-9a-f]{{64}} does not match "
                                              rf"dataset.json \([0-9a-f]{{64}}\)"):
        opened.cues["audio"].read(0)
    flip_object_byte(url, "cues/visual/lookup_keys.npy")
    with pytest.raises(PackFormatError, match=rf"{url}/cues/visual/lookup_keys.npy: sha256 .* does not match"):
        open_pack(url)


def test_every_storage_declares_its_node_cache_and_its_bound_on_mappings(store_pack):
    """The reader and the planner call the hooks ``PackFiles`` declares (never ``getattr``/``hasattr``): a directory
    has no node cache and no bound of its own; a storage that sets ``max_open_streams`` caps ``Pack``'s mapping LRU."""
    files = pack_files(store_pack)
    assert files.node_cache is None and files.max_open_streams is None
    assert open_pack(files)._max_open == MAX_OPEN_STREAM_FILES

    class OneMapping(DirectoryPackFiles):
        max_open_streams = 1

    pack = open_pack(OneMapping(store_pack))
    streams = list(pack.streams)
    assert len(streams) >= 2
    for name in streams:
        pack.stream_array(0, name)
    assert len(pack._maps) == 1
