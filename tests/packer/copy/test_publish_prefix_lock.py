"""One writer per object-store prefix: two publishes to one ``s3://`` prefix at once never interleave (the second
waits for the first's lock, or is refused), a lock whose lease ran out is taken over, and unfinished multipart
uploads that killed publishes left are aborted by the next publish (``packer/copy/store_prefix.py``).  On the moto S3 server of the object-storage tests, with real speech packs."""

from __future__ import annotations

import json
import threading
import time

import fsspec
import pytest

from factories import Mix
from factories.s3 import BUCKET, s3_url
import speechpack.packer.copy.publish as publish_module
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.copy.store_prefix import LOCK_NAME, PrefixLock, PrefixLockError
from speechpack.packer.copy.publish import RemotePack
from speechpack.packer.copy.to_directory import copy_pack
from speechpack.packer.validate.pack import validate_pack as validate_remote_pack


@pytest.fixture
def other_pack(tmp_path, wesep_list, real_audio):
    """A second real pack, of other mixtures: publishing it over the first replaces every object."""
    librivox = real_audio("pocketsphinx", 5)
    case = wesep_list([Mix("n1", (librivox[3], librivox[4]), seconds=1.5), Mix("n2", (librivox[4], librivox[0]))],
                      name="other.list")
    out = tmp_path / "other"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=120_000, progress=False))
    return out


def _slow_uploads(monkeypatch, seconds: float) -> None:
    """Each object takes a little longer, so two publishes started together would overlap."""
    process = publish_module._Target.process

    def slow(self, rel, bar):
        time.sleep(seconds)
        return process(self, rel, bar)

    monkeypatch.setattr(publish_module._Target, "process", slow)


def test_two_concurrent_publishes_of_different_packs_to_one_prefix_never_interleave(
        s3_server, store_pack, other_pack, monkeypatch):
    url = s3_url("contended/train")
    _slow_uploads(monkeypatch, 0.05)
    monkeypatch.setattr("speechpack.packer.copy.store_prefix.POLL_SECONDS", 0.1)
    logs: dict[str, list[str]] = {"a": [], "b": []}
    errors: list[BaseException] = []

    def publish(name, src):
        try:
            copy_pack(str(src), url, progress=False, log=logs[name].append)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=publish, args=("a", store_pack)),
               threading.Thread(target=publish, args=("b", other_pack))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    waited = [name for name, lines in logs.items() if any("waiting for another publish" in l for l in lines)]
    assert len(waited) == 1, logs  # the second writer waited for the first
    report = validate_remote_pack(url)
    assert report.ok, report
    last = other_pack if waited == ["b"] else store_pack
    assert RemotePack(url).read_bytes("dataset.json") == (last / "dataset.json").read_bytes()
    assert LOCK_NAME not in RemotePack(url).listing()


def test_a_second_writer_that_will_not_wait_is_refused_naming_the_holder(s3_server, store_pack):
    remote = RemotePack(s3_url("held/train"))
    with PrefixLock(remote, "/somewhere/else/pack"):
        with pytest.raises(PrefixLockError, match=r"another publish holds this prefix \(.* pid \d+ .*publishing "
                                                  r"/somewhere/else/pack, lease ends in \d+ s\)"):
            PrefixLock(remote, str(store_pack), wait=0, poll=0.05).acquire()
    with PrefixLock(remote, str(store_pack), wait=0):  # free again once released
        assert LOCK_NAME in remote.listing()
    assert LOCK_NAME not in remote.listing()


def test_a_lock_whose_lease_ran_out_is_taken_over(s3_server, store_pack):
    url = s3_url("stale/train")
    stale = {"writer": {"host": "gone", "pid": 1, "id": "dead"}, "source": "/killed", "lease_until": time.time() - 5}
    RemotePack(url).write_bytes(LOCK_NAME, json.dumps(stale).encode())
    logs: list[str] = []
    copy_pack(str(store_pack), url, progress=False, log=logs.append)
    assert any("took over the publish lock of gone pid 1" in line for line in logs), logs
    assert validate_remote_pack(url).ok


def test_a_writer_whose_lock_was_taken_over_does_not_publish(s3_server, store_pack):
    remote = RemotePack(s3_url("lost/train"))
    lock = PrefixLock(remote, str(store_pack))
    lock.acquire()
    remote.write_bytes(LOCK_NAME, json.dumps({"writer": {"id": "other", "host": "h", "pid": 2}}).encode())
    with pytest.raises(PrefixLockError, match="lost the publish lock to h pid 2"):
        lock.check()
    lock.release()
    assert LOCK_NAME in remote.listing()  # not ours any more: left in place


def _start_upload(key: str) -> str:
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    upload = fs.call_s3("create_multipart_upload", Bucket=BUCKET, Key=key)
    fs.call_s3("upload_part", Bucket=BUCKET, Key=key, UploadId=upload["UploadId"], PartNumber=1,
               Body=b"\0" * (5 << 20))
    return upload["UploadId"]


def _open_uploads(prefix: str) -> set[str]:
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    return {u["Key"] for u in fs.call_s3("list_multipart_uploads", Bucket=BUCKET, Prefix=prefix).get("Uploads", [])}


def test_uploads_a_killed_publish_left_are_aborted_by_the_next_publish(s3_server, store_pack):
    url = s3_url("killed/train")
    mix = next(p for p in sorted(store_pack.glob("shard-*/mix.npy"))).relative_to(store_pack).as_posix()
    for rel in (mix, "columns/samples.npy", "dataset.json", "notes/users-own-upload.bin"):
        _start_upload(f"killed/train/{rel}")
    logs: list[str] = []
    copy_pack(str(store_pack), url, progress=False, log=logs.append)
    assert _open_uploads("killed/train/") == {"killed/train/notes/users-own-upload.bin"}  # a user's: left alone
    assert any("aborted 3 unfinished upload(s)" in line for line in logs), logs
    assert validate_remote_pack(url).ok
