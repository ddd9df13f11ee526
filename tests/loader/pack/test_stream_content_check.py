"""A reader that checks what it maps: a same-size in-place edit of a stream file stops reading that file with a
clear error; each file is hashed once per node (records keyed by file identity), off the batch path; the
``verify`` switch chooses off / first-map / every-open (docs/format.md, "What a reader verifies")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from factories import Mix
from speechpack.loader.config import ConfigError
from speechpack.loader.pack import content_check, open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.constants import VERIFIED_DIR
from speechpack.schemas.errors import PackFormatError


@pytest.fixture
def real_pack(tmp_path, wesep_list, real_audio, monkeypatch):
    """A real tse pack of three mixtures over several shards (the user cache pointed into tmp_path)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    librivox = real_audio("pocketsphinx", 4)
    case = wesep_list([Mix("m1", tuple(librivox[:2]), seconds=1.0), Mix("m2", tuple(librivox[1:3]), seconds=1.2),
                       Mix("m3", (librivox[0], librivox[3]), seconds=0.8)])
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=100_000, progress=False))
    return out


def _zero_in_place(path: Path, start: int = 512, count: int = 256) -> None:
    """Overwrite bytes of a stream file's data with zeros, keeping its size and inode (an edit in place)."""
    with open(path, "r+b") as fp:
        fp.seek(start)
        fp.write(b"\0" * count)


def _read_all(pack) -> None:
    for i in range(len(pack)):
        pack.sample(i)


def _hashes(monkeypatch) -> list[int]:
    """Count the files hashed from now on."""
    calls: list[int] = []
    real = content_check.hash_buffer

    def counting(buffer):
        calls.append(len(buffer))
        return real(buffer)

    monkeypatch.setattr(content_check, "hash_buffer", counting)
    return calls


def test_same_size_edit_in_place_stops_reading_the_file(real_pack):
    _zero_in_place(real_pack / "shard-000000" / "mix.npy")
    pack = open_pack(real_pack)  # first-map, the default
    pack.sample(0)  # served while the check runs in the background
    assert pack.checks.wait(30)
    with pytest.raises(PackFormatError, match=r"shard-000000/mix\.npy: sha256 .* does not match dataset\.json .*"
                                              r"changed after the pack was written"):
        pack.sample(0)
    with pytest.raises(PackFormatError, match="stopped reading it"):
        pack.sample(0)  # and stays stopped


def test_every_open_refuses_an_edited_file_before_its_first_read(real_pack):
    _zero_in_place(real_pack / "shard-000000" / "mix.npy")
    pack = open_pack(real_pack, verify="every-open")
    with pytest.raises(PackFormatError, match=r"mix\.npy: sha256 .* does not match"):
        pack.sample(0)


def _cached_records(tmp_path: Path) -> list[Path]:
    """The records in the user cache the ``real_pack`` fixture points ``XDG_CACHE_HOME`` at."""
    return sorted((tmp_path / "cache" / "speechpack" / "verified").glob("*/*.json"))


def test_off_reads_an_edited_file_as_before(real_pack, tmp_path):
    _zero_in_place(real_pack / "shard-000000" / "mix.npy")
    pack = open_pack(real_pack, verify="off")
    _read_all(pack)
    assert not (real_pack / VERIFIED_DIR).exists() and not _cached_records(tmp_path)


def test_unknown_verify_mode_is_refused(real_pack):
    with pytest.raises(ValueError, match="off, first-map, every-open"):
        open_pack(real_pack, verify="sometimes")


def test_each_file_is_hashed_once_then_the_record_is_trusted(real_pack, tmp_path, monkeypatch):
    calls = _hashes(monkeypatch)
    pack = open_pack(real_pack)
    _read_all(pack)
    assert pack.checks.wait(30) and not pack.checks.unsettled
    mapped = len(pack._maps)
    assert len(calls) == mapped > 1
    records = _cached_records(tmp_path)
    assert len(records) == mapped
    record = json.loads(next(r for r in records if r.name == "shard-000000.mix.npy.json").read_text())
    stat = os.stat(real_pack / "shard-000000" / "mix.npy")
    assert (record["inode"], record["size"], record["mtime_ns"]) == (stat.st_ino, stat.st_size, stat.st_mtime_ns)

    again = open_pack(real_pack)
    _read_all(again)
    assert again.checks.wait(30) and not again.checks.unsettled
    assert len(calls) == mapped  # nothing hashed a second time

    every = open_pack(real_pack, verify="every-open")
    _read_all(every)
    assert len(calls) == 2 * mapped  # every-open trusts no record


def test_an_edit_after_the_record_is_hashed_again_and_refused(real_pack):
    pack = open_pack(real_pack)
    _read_all(pack)
    assert pack.checks.wait(30)
    target = real_pack / "shard-000000" / "mix.npy"
    _zero_in_place(target)
    os.utime(target, ns=(0, os.stat(target).st_mtime_ns + 1_000_000_000))  # an edit always moves mtime on
    later = open_pack(real_pack)
    later.sample(0)
    assert later.checks.wait(30)
    with pytest.raises(PackFormatError, match="does not match"):
        later.sample(0)


def test_records_live_in_the_user_cache_never_in_the_pack(real_pack, tmp_path, monkeypatch):
    """A reader writes nothing into the pack it reads: a record landing there after ``build --overwrite`` retired
    the old manifest would be a file no manifest lists, which the build refuses to delete."""
    before = sorted(p.relative_to(real_pack) for p in real_pack.rglob("*"))
    calls = _hashes(monkeypatch)
    pack = open_pack(real_pack)
    _read_all(pack)
    assert pack.checks.wait(30) and not pack.checks.unsettled
    cached = _cached_records(tmp_path)
    assert len(cached) == len(calls) > 1
    assert sorted(p.relative_to(real_pack) for p in real_pack.rglob("*")) == before
    again = open_pack(real_pack)
    _read_all(again)
    assert len(calls) == len(cached)


def test_workers_of_a_node_hash_a_file_once_between_them(real_pack, tmp_path):
    """Four processes map the same files at once: the record lock makes one of them hash each file."""
    script = (
        "import sys, json\n"
        "from speechpack.loader.pack import content_check, open_pack\n"
        "count = []\n"
        "real = content_check.hash_buffer\n"
        "content_check.hash_buffer = lambda b: count.append(1) or real(b)\n"
        "pack = open_pack(sys.argv[1])\n"
        "[pack.sample(i) for i in range(len(pack))]\n"
        "assert pack.checks.wait(60)\n"
        "print(json.dumps({'hashed': len(count), 'mapped': len(pack._maps)}))\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(real_pack)], stdout=subprocess.PIPE,
                              env=os.environ.copy()) for _ in range(4)]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(r["hashed"] for r in results) == results[0]["mapped"]


def test_records_an_earlier_version_wrote_into_a_pack_are_read_and_replaced_with_it(real_pack, tmp_path, wesep_list,
                                                                                    real_audio, monkeypatch):
    """Readers before this version wrote their records into ``PACK/.verified/``: such a pack is still valid, its
    records are trusted, and ``build --overwrite`` removes them with the pack (its manifest owns them)."""
    pack = open_pack(real_pack)
    _read_all(pack)
    assert pack.checks.wait(30)
    (real_pack / VERIFIED_DIR).mkdir()
    for record in _cached_records(tmp_path):
        record.rename(real_pack / VERIFIED_DIR / record.name)  # where an earlier version kept them
    calls = _hashes(monkeypatch)
    again = open_pack(real_pack)
    _read_all(again)
    assert again.checks.wait(30) and not again.checks.unsettled and not calls
    report = validate_pack(str(real_pack))
    assert report.ok, report
    librivox = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("n1", tuple(librivox[:2]), seconds=0.5)], name="other.list")
    build_wesep(str(case.list_path), BuildOptions(out=str(real_pack), shard_bytes=100_000, progress=False,
                                                  overwrite=True))  # the records are the old pack's: removed
    assert not (real_pack / VERIFIED_DIR).exists()
    assert len(open_pack(real_pack)) == 1


def test_a_pickled_pack_checks_again_in_its_new_process(real_pack):
    import pickle

    _zero_in_place(real_pack / "shard-000000" / "mix.npy")
    pack = open_pack(real_pack, verify="every-open")
    clone = pickle.loads(pickle.dumps(pack))
    assert clone.checks.mode == "every-open" and not clone.checks.unsettled
    with pytest.raises(PackFormatError, match="does not match"):
        clone.sample(0)
    np.testing.assert_equal(open_pack(real_pack, verify="off").sample(0).targets.shape[0], 2)


def test_the_training_loader_stops_at_an_edited_file_and_verify_streams_chooses_the_mode(real_pack):
    from speechpack import loader

    _zero_in_place(real_pack / "shard-000000" / "mix.npy")
    cfg = {"packs": [{"path": str(real_pack)}], "dataset_args": {"batch_size": 3, "chunk_len": 4000},
           "verify_streams": "every-open"}
    with pytest.raises(PackFormatError, match=r"mix\.npy: sha256 .* does not match"):
        list(loader.build_loader(cfg, "train", num_workers=0))
    cfg["verify_streams"] = "off"
    assert len(list(loader.build_loader(cfg, "train", num_workers=0))) == 1
    cfg["verify_streams"] = "never"
    with pytest.raises(ConfigError, match="verify_streams: 'never' is not one of off, first-map, every-open"):
        loader.build_loader(cfg, "train")


def test_stream_arrays_kept_between_batches_stop_once_the_check_fails(real_pack):
    """The pre-mixed TSE batch keeps stream arrays between batches; it asks the pack while a check is open."""
    from speechpack.loader.tse.windows import Segments, StreamArrays

    _zero_in_place(real_pack / "shard-000000" / "mix.npy")
    pack = open_pack(real_pack)
    one = np.zeros(1, dtype=np.int64)
    segments = Segments(pack=one, shard=one, offset=one, channels=one + 1, length=one + 10, scale=one + 1.0,
                        shift=None)
    arrays = StreamArrays([pack], "mix")
    arrays.of(segments)  # served while the check runs
    assert pack.checks.wait(30)
    with pytest.raises(PackFormatError, match="does not match"):
        arrays.of(segments)


def test_an_edit_in_place_whose_mtime_is_put_back_is_hashed_again_and_refused(real_pack):
    """``os.utime`` sets mtime back; ctime, part of the record's key, cannot be."""
    pack = open_pack(real_pack)
    _read_all(pack)
    assert pack.checks.wait(30) and not pack.checks.unsettled
    target = real_pack / "shard-000000" / "mix.npy"
    before = os.stat(target)
    _zero_in_place(target)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(target).st_mtime_ns == before.st_mtime_ns
    later = open_pack(real_pack)
    later.sample(0)
    assert later.checks.wait(30)
    with pytest.raises(PackFormatError, match="does not match"):
        later.sample(0)


def test_a_record_without_a_ctime_is_not_trusted_and_is_rewritten(real_pack, tmp_path, monkeypatch):
    pack = open_pack(real_pack)
    _read_all(pack)
    assert pack.checks.wait(30)
    records = _cached_records(tmp_path)
    for path in records:  # as an earlier version wrote them
        record = json.loads(path.read_text())
        del record["ctime_ns"]
        path.write_text(json.dumps(record))
    calls = _hashes(monkeypatch)
    again = open_pack(real_pack)
    _read_all(again)
    assert again.checks.wait(30) and not again.checks.unsettled
    assert len(calls) == len(records)
    assert all("ctime_ns" in json.loads(path.read_text()) for path in records)


def _plant(kind: str, path: Path) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        with open(path, "wb") as fp:
            fp.truncate(2 << 30)  # sparse: 2 GiB claimed, nothing written
    elif kind == "directory":
        path.mkdir()


@pytest.mark.parametrize("kind", ["fifo", "zero", "huge", "directory"])
def test_a_planted_record_is_ignored_never_followed_and_replaced(real_pack, tmp_path, monkeypatch, kind):
    """A FIFO, a link to /dev/zero, a 2 GiB file or a directory at a record's name: read in bounded time and
    memory, not trusted (the file is hashed, an edit still found), and replaced by a real record where it can be."""
    import resource
    import threading

    pack = open_pack(real_pack)
    _read_all(pack)
    assert pack.checks.wait(30)
    record = next(r for r in _cached_records(tmp_path) if r.name == "shard-000000.mix.npy.json")
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _plant(kind, record)
    _zero_in_place(real_pack / "shard-000000" / "mix.npy")
    for mode in ("first-map", "every-open"):
        done = []
        worker = threading.Thread(target=lambda: done.append(_open_and_check(real_pack, mode)), daemon=True)
        worker.start()
        worker.join(30)
        assert done == ["refused"], f"{kind}, {mode}: {done or 'blocked'}"
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown < 1 << 20  # KiB: never read the 2 GiB file (the suite's own peak is not this test's)
    if kind == "directory":
        assert record.is_dir()  # left alone: the file is then hashed without a record
    else:
        assert record.is_file() and not record.is_symlink()
        assert json.loads(record.read_text())["sha256"] != ""


def _open_and_check(pack_dir: Path, mode: str) -> str:
    pack = open_pack(pack_dir, verify=mode)
    try:
        pack.sample(0)
        pack.checks.wait(30)
        pack.sample(0)
    except PackFormatError as err:
        return "refused" if "does not match" in str(err) else str(err)
    return "served"


def test_records_of_packs_that_are_gone_are_pruned_and_nothing_else(real_pack, tmp_path, wesep_list, real_audio):
    import shutil

    root = tmp_path / "cache" / "speechpack" / "verified"
    other = tmp_path / "other"
    build_wesep(str(wesep_list([Mix("o1", tuple(real_audio("pocketsphinx", 2)), seconds=0.5)], name="o.list")
                    .list_path), BuildOptions(out=str(other), shard_bytes=100_000, progress=False))
    for path in (real_pack, other):
        pack = open_pack(path)
        _read_all(pack)
        assert pack.checks.wait(30)
    directories = {(d / content_check.PACK_FILE).read_text(): d for d in root.iterdir() if d.is_dir()}
    assert set(directories) == {os.path.realpath(real_pack), os.path.realpath(other)}
    earlier = root / ("0" * 32)  # an earlier version's directory: no pack named, kept
    earlier.mkdir()
    (earlier / "shard-000000.mix.npy.json").write_text("{}")
    shutil.rmtree(other)
    assert content_check.prune_records(str(root)) == []  # pruned at most once a day: not yet
    assert content_check.prune_records(str(root), every=0) == [str(directories[os.path.realpath(other)])]
    assert directories[os.path.realpath(real_pack)].is_dir() and earlier.is_dir()
    shutil.rmtree(real_pack)
    kept = directories[os.path.realpath(real_pack)] / "notes.txt"
    kept.write_text("a user's file")
    assert content_check.prune_records(str(root), every=0) == []
    assert kept.read_text() == "a user's file" and not list(kept.parent.glob("*.json"))


def test_pruning_never_follows_a_records_directory_swapped_for_a_link(tmp_path, monkeypatch):
    """A records directory replaced by a link to another directory between pruning's check and its removal (a race
    anyone who can write the records root can run) removes nothing there: the directory is opened once, without
    following a link, and its records are removed through that descriptor."""
    root = tmp_path / "verified"
    records = root / ("1" * 32)
    records.mkdir(parents=True)
    (records / content_check.PACK_FILE).write_text(str(tmp_path / "gone"))  # a pack that is gone: pruned
    (records / "shard-000000.mix.npy.json").write_text("{}")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "settings.json").write_text("a user's file")
    (victim / content_check.PACK_FILE).write_text("a user's file")
    read = content_check.read_small_file

    def swap_then_read(path, limit=content_check.MAX_RECORD_BYTES):
        raw = read(path, limit)
        if os.path.dirname(path) == str(records) and records.is_dir() and not records.is_symlink():
            records.rename(root / "moved")
            records.symlink_to(victim, target_is_directory=True)
        return raw

    monkeypatch.setattr(content_check, "read_small_file", swap_then_read)
    assert content_check.prune_records(str(root), every=0) == []
    assert (victim / "settings.json").read_text() == "a user's file"
    assert (victim / content_check.PACK_FILE).read_text() == "a user's file"


def test_checks_run_on_the_thread_they_are_given_and_a_pickled_one_uses_its_process_thread():
    """``StreamChecks`` hands its background checks to the ``CheckingThread`` it holds (this process's by default);
    pickled (a Pack sent to a spawned worker), it holds the receiving process's thread, never a copy of a thread."""
    import hashlib
    import pickle

    submitted = []

    class Counting(content_check.CheckingThread):
        def submit(self, task):
            submitted.append(task)
            super().submit(task)

    data = b"stream bytes"
    checks = content_check.StreamChecks(content_check.VERIFY_FIRST_MAP, None, thread=Counting())
    checks.mapped((0, "mix"), "shard-000000/mix.npy", "mix.npy", hashlib.sha256(data).hexdigest(), data, None)
    assert len(submitted) == 1 and checks.wait(timeout=30) and not checks.unsettled
    assert content_check.StreamChecks(content_check.VERIFY_OFF, None).thread is content_check.CHECKING_THREAD
    assert pickle.loads(pickle.dumps(checks)).thread is content_check.CHECKING_THREAD
