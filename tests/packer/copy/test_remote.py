"""Packs on object storage: ``copy`` to and from ``s3://`` and ``validate s3://``, against a real S3-protocol
server (moto's server mode, ``factories.s3``) started on 127.0.0.1; never the network."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

import speechpack.packer.copy.publish as publish_module
from speechpack.cli import main
from factories import Mix
from factories.s3 import SECRET, publish, s3_url
from speechpack.loader.pack import open_pack
from speechpack.packer.adapters.audio_bank import build_audio_bank
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.copy.publish import RemotePack
from speechpack.packer.copy.report import CopyError
from speechpack.packer.copy.to_directory import copy_pack, verify_copy
from speechpack.packer.validate.pack import validate_pack



def _objects(url: str) -> dict[str, int]:
    return RemotePack(url).listing()


def _flip_object(url: str, rel: str) -> None:
    remote = RemotePack(url)
    data = bytearray(remote.read_bytes(rel))
    data[len(data) // 2] ^= 0x01
    remote.write_bytes(rel, bytes(data))


def _run(*args: str):
    return CliRunner().invoke(main, [*args], catch_exceptions=False)


def test_publish_validate_and_stage_back_a_real_pack(s3_server, store_pack, tmp_path):
    url = s3_url("round-trip/train")
    published = _run("copy", str(store_pack), url, "--no-progress")
    assert published.exit_code == 0, published.output
    local_files = {str(p.relative_to(store_pack)) for p in store_pack.rglob("*") if p.is_file()}
    assert set(_objects(url)) == local_files  # every file, nothing else (no temporary names, no lock)

    again = copy_pack(str(store_pack), url, progress=False)  # idempotent: streamed back, re-hashed, nothing uploaded
    assert again.files_copied == 0 and again.files_kept == again.files
    assert _run("copy", str(store_pack), url, "--verify-only", "--no-progress").exit_code == 0

    checked = _run("validate", url)
    assert checked.exit_code == 0, checked.output
    assert f"OK   {url}" in checked.output and "all packs valid" in checked.output

    dst = tmp_path / "scratch" / "train"
    staged = _run("copy", url, str(dst), "--no-progress", "--endpoint-url", s3_server)
    assert staged.exit_code == 0, staged.output
    assert (dst / "dataset.json").read_bytes() == (store_pack / "dataset.json").read_bytes()
    assert validate_pack(str(dst)).ok and open_pack(dst).keys.tolist() == ["m1", "m2", "m3"]
    second = copy_pack(url, str(dst), progress=False)
    assert second.files_copied == 0 and second.files_kept == second.files
    assert verify_copy(url, str(dst), progress=False).verify_only


def test_a_corrupt_object_is_named_by_copy_and_validate_and_publishing_repairs_it(s3_server, store_pack, tmp_path):
    url = publish(store_pack, "corrupt/train")
    _flip_object(url, "shard-000000/mix.npy")

    dst = tmp_path / "dst"
    with pytest.raises(CopyError, match=f"{url}/shard-000000/mix.npy: sha256 .* the source file is corrupt"):
        copy_pack(url, str(dst), progress=False)
    assert not (dst / "dataset.json").exists()

    report = validate_pack(url)
    assert not report.ok
    named = {issue.file for issue in report.errors}
    assert f"{url}/shard-000000/mix.npy" in named
    # the statistics are recomputed from the streamed bytes: the flipped sample changes one segment's figures
    assert any("recomputed" in issue.message for issue in report.errors), report.describe()
    assert validate_pack(url, check_hashes=False).errors  # the content checks alone see it too

    repaired = copy_pack(str(store_pack), url, progress=False)
    assert repaired.files_copied == 1 and any("shard-000000/mix.npy" in r for r in repaired.repaired)
    assert validate_pack(url).ok
    assert copy_pack(url, str(dst), progress=False).files_kept > 0  # the staged files that verified were kept
    assert validate_pack(str(dst)).ok


def test_a_corrupt_local_file_is_never_uploaded(s3_server, store_pack):
    url = s3_url("bad-source/train")
    target = store_pack / "shard-000000" / "target.npy"
    data = bytearray(target.read_bytes())
    data[-3] ^= 0x01
    target.write_bytes(bytes(data))
    result = _run("copy", str(store_pack), url, "--no-progress")
    assert result.exit_code == 1 and f"{target}: sha256" in result.output and "not uploaded" in result.output
    objects = _objects(url)
    assert "dataset.json" not in objects and "shard-000000/target.npy" not in objects


def test_an_interrupted_publish_is_never_a_pack_and_resumes_with_dataset_json_last(s3_server, store_pack, monkeypatch):
    url = s3_url("interrupted/train")
    written: list[str] = []
    real_upload, real_write = publish_module._Target._upload, RemotePack.write_bytes

    class Killed(Exception):
        pass

    def upload(self, rel, entry, bar):
        if len(written) >= 3:
            raise Killed()
        written.append(rel)
        return real_upload(self, rel, entry, bar)

    monkeypatch.setattr(publish_module._Target, "_upload", upload)
    with pytest.raises(Killed):
        copy_pack(str(store_pack), url, jobs=1, progress=False)
    objects = _objects(url)
    assert "dataset.json" not in objects and ".tmp-incoming-dataset.json" in objects
    assert "not a pack" in validate_pack(url).errors[0].message

    monkeypatch.setattr(publish_module._Target, "_upload", real_upload)
    order: list[str] = []
    monkeypatch.setattr(publish_module._Target, "_upload",
                        lambda self, rel, entry, bar: order.append(rel) or real_upload(self, rel, entry, bar))
    monkeypatch.setattr(RemotePack, "write_bytes", lambda self, rel, data: order.append(rel) or real_write(self, rel, data))
    resumed = copy_pack(str(store_pack), url, progress=False)
    assert resumed.files_kept == 3 and resumed.files_copied == resumed.files - 3
    assert order[-1] == "dataset.json"  # after every object it lists
    assert set(_objects(url)) == {str(p.relative_to(store_pack)) for p in store_pack.rglob("*") if p.is_file()}
    assert validate_pack(url).ok


def test_objects_no_record_lists_are_refused_and_an_older_pack_is_replaced(s3_server, store_pack, tmp_path, real_audio):
    url = s3_url("shared/train")
    RemotePack(url).write_bytes("notes/thesis.tex", b"precious")
    refused = _run("copy", str(store_pack), url, "--no-progress")
    assert refused.exit_code == 1 and "notes/thesis.tex" in refused.output
    assert set(_objects(url)) == {"notes/thesis.tex"}
    RemotePack(url).remove(["notes/thesis.tex"])
    RemotePack(url).write_bytes("shard-000000/index.json", b"mine")  # a pack's name, but no record lists it
    assert "shard-000000/index.json" in _run("copy", str(store_pack), url, "--no-progress").output
    assert RemotePack(url).read_bytes("shard-000000/index.json") == b"mine"
    RemotePack(url).remove(["shard-000000/index.json"])

    noise_dir = tmp_path / "noises"
    noise_dir.mkdir()
    for path in real_audio("alsa")[:3]:
        shutil.copy(path, noise_dir / os.path.basename(path))
    bank = tmp_path / "bank"
    build_audio_bank(str(noise_dir), "noise", BuildOptions(out=str(bank), progress=False))
    copy_pack(str(bank), url, progress=False)
    assert validate_pack(url).ok and validate_pack(url).summary["kind"] == "noise"
    replaced = copy_pack(str(store_pack), url, progress=False)  # a tse pack over the noise bank: the old objects go
    assert replaced.removed and set(_objects(url)) == {str(p.relative_to(store_pack)) for p in store_pack.rglob("*")
                                                        if p.is_file()}
    assert validate_pack(url).summary["kind"] == "tse"


def test_failures_name_the_object_and_never_print_the_secret(s3_server, store_pack, tmp_path):
    missing = "s3://no-such-bucket-speechpack/packs/train"
    staged = CliRunner().invoke(main, ["copy", missing, str(tmp_path / "dst"), "--no-progress"])
    assert staged.exit_code == 1 and missing in staged.output
    checked = CliRunner().invoke(main, ["validate", missing])
    assert checked.exit_code == 1 and missing in checked.output
    url = publish(store_pack, "secret/train")
    _flip_object(url, "columns/samples.npy")
    corrupt = CliRunner().invoke(main, ["copy", url, str(tmp_path / "dst2"), "--no-progress"])
    assert corrupt.exit_code == 1 and f"{url}/columns/samples.npy" in corrupt.output
    for result in (staged, checked, corrupt):
        assert SECRET not in result.output
    for path in (tmp_path / "dst2").rglob("*"):
        assert not path.is_file() or SECRET.encode() not in path.read_bytes()
    assert SECRET not in json.dumps(validate_pack(url).to_dict())


def test_one_publish_per_node_the_second_waits_on_the_source_lock(s3_server, store_pack):
    """Ranks on one node that all publish the same pack: one holds ``SRC.lock``, the other waits, then streams
    back what the first uploaded and changes nothing."""
    import threading

    from speechpack.packer.ownership import locked

    url = s3_url("ranks/train")
    said: list[str] = []
    done: dict = {}
    with locked(str(store_pack), exclusive=True, log=None):
        rank = threading.Thread(target=lambda: done.update(report=copy_pack(str(store_pack), url, progress=False,
                                                                            log=said.append)))
        rank.start()
        rank.join(timeout=2)
        assert rank.is_alive() and any("waiting for" in line and "src.lock" in line for line in said)
        assert _objects(url) == {}  # nothing written while the other rank holds the lock
    rank.join(timeout=60)
    assert done["report"].files_copied == done["report"].files
    again = copy_pack(str(store_pack), url, progress=False)
    assert again.files_copied == 0 and validate_pack(url).ok


def test_validate_streams_asd_labels_and_faces(s3_server, tmp_path):
    """An asd pack (real faces, audio, measured labels): the asd checks run on the streamed label rows."""
    import io

    import numpy as np

    from factories.asd_inputs import make_asd_pack

    local = make_asd_pack(tmp_path / "a")
    url = s3_url("asd/train")
    copy_pack(local, url, progress=False)
    good = validate_pack(url)
    assert good.ok, good.describe()
    assert good.summary["kind"] == "asd" and good.summary["samples"] == validate_pack(local).summary["samples"]
    labels = np.load(io.BytesIO(RemotePack(url).read_bytes("shard-000000/labels.npy")))
    labels[0] = 2
    buffer = io.BytesIO()
    np.save(buffer, labels)
    RemotePack(url).write_bytes("shard-000000/labels.npy", buffer.getvalue())
    result = CliRunner().invoke(main, ["validate", url, "--no-hash"])
    assert result.exit_code == 1
    assert f"{url}/shard-000000/labels.npy key" in result.output
    assert "label(s) not 0 or 1 (first: 2 at frame 0)" in result.output


def test_validate_checks_cue_banks_on_the_streamed_objects(s3_server, tse_split, tmp_path):
    """A pack with every cue representation: banks hashed while streamed and checked as a local validate does."""
    from factories.cue_split import build_split_pack

    local = tmp_path / "pack"
    build_split_pack(tse_split, local)
    url = publish(local, "cues/train")
    result = _run("validate", url)
    assert result.exit_code == 0, result.output
    assert "cue visual: raw_video, 4 keys, 4 entries, 2 items" in result.output
    _flip_object(url, "cues/audio/data.npy")
    errors = [str(e) for e in validate_pack(url).errors]
    assert any(e.startswith(f"{url}/cues/audio/data.npy: sha256") for e in errors), errors
    staged = tmp_path / "staged"
    copy_pack(str(local), url, progress=False)  # repaired
    copy_pack(url, str(staged), progress=False)
    assert validate_pack(str(staged)).ok and open_pack(staged).manifest.cues == open_pack(local).manifest.cues
