"""``speechpack copy``: verified, idempotent, locked node-local staging that never publishes a partial pack."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import namedtuple
from pathlib import Path

import pytest
from click.testing import CliRunner

import speechpack.packer.copy.to_directory as copy_module
import speechpack.packer.copy.staging as staging_module
from speechpack.cli import main
import factories.paths
from factories import Mix
from speechpack.loader.pack import open_pack
from speechpack.packer.adapters.audio_bank import build_audio_bank
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.copy.to_directory import CopyError, copy_pack, verify_copy
from speechpack.packer.ownership import LOCK_SUFFIX, DestinationLock, record_matches
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.errors import PackFormatError, SpeechpackError

REPO = factories.paths.REPO


@pytest.fixture
def tse_pack(tmp_path, wesep_list, real_audio):
    """A real tse pack over several shards, with one skipped line (so skipped.json is part of the copy)."""
    librivox = real_audio("pocketsphinx", 4)
    case = wesep_list([
        Mix("m1", tuple(librivox[:2])),
        Mix("m2", tuple(librivox[1:4]), layout="stereo"),
        Mix("m3", (librivox[0], librivox[3])),
        Mix("m4", (librivox[2], librivox[3]), seconds=2.0),
        '{"key": "broken", "spk": ["a"]',
    ])
    out = tmp_path / "src"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=150_000, skip_bad=True, progress=False))
    return out


def _flip(path: Path, position: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if position is None else position] ^= 0x01
    path.write_bytes(bytes(data))


def _copy(src: Path, dst: Path, *extra: str):
    return CliRunner().invoke(main, ["copy", str(src), str(dst), "--no-progress", *extra])


def test_copy_gives_a_valid_identical_pack_and_a_second_run_copies_nothing(tse_pack, tmp_path):
    dst = tmp_path / "local" / "train"
    first = _copy(tse_pack, dst, "--jobs", "3")
    assert first.exit_code == 0, first.output
    assert "copied" in first.output and "0 already in place" in first.output
    assert validate_pack(str(dst)).ok
    source_files = {p.relative_to(tse_pack): p.read_bytes() for p in tse_pack.rglob("*") if p.is_file()}
    copied_files = {p.relative_to(dst): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    assert copied_files == source_files  # dataset.json, skipped.json, columns, every shard file; nothing else
    assert len([p for p in source_files if p.parts[0].startswith("shard-")]) >= 6
    assert (tmp_path / "local" / "train.lock").exists()

    again = copy_pack(str(tse_pack), str(dst), progress=False)
    assert again.files_copied == 0 and again.files_kept == again.files and again.bytes_copied == 0
    assert not again.trusted_record  # a separate run re-hashes; it does not trust an old record
    verified = _copy(tse_pack, dst, "--verify-only")
    assert verified.exit_code == 0, verified.output
    assert f"{dst}: a verified copy of {tse_pack}" in verified.output


def test_a_flipped_byte_in_the_source_is_reported_and_nothing_is_published(tse_pack, tmp_path):
    corrupt = tse_pack / "shard-000001" / "target.npy"
    _flip(corrupt)
    dst = tmp_path / "dst"
    result = _copy(tse_pack, dst)
    assert result.exit_code == 1
    assert f"{corrupt}: sha256" in result.output and "the source file is corrupt" in result.output
    assert not (dst / "dataset.json").exists()
    assert not (dst / "shard-000001" / "target.npy").exists()
    # only the record of the incoming pack, which owns the verified files for the next run (issue 13)
    assert [p.name for p in dst.rglob(".tmp-*")] == [".tmp-incoming-dataset.json"]
    with pytest.raises(PackFormatError, match="not a pack"):
        open_pack(dst)


def test_a_flipped_byte_in_the_destination_is_reported_then_repaired(tse_pack, tmp_path):
    dst = tmp_path / "dst"
    copy_pack(str(tse_pack), str(dst), progress=False)
    damaged = dst / "shard-000000" / "mix.npy"
    _flip(damaged)
    check = _copy(tse_pack, dst, "--verify-only")
    assert check.exit_code == 1
    assert f"{damaged}: sha256" in check.output
    assert damaged.read_bytes() != (tse_pack / "shard-000000" / "mix.npy").read_bytes()  # verify changed nothing

    repair = _copy(tse_pack, dst)
    assert repair.exit_code == 0, repair.output
    assert f"repaired: {damaged}: sha256" in repair.output
    assert "1 copied" in repair.output
    assert damaged.read_bytes() == (tse_pack / "shard-000000" / "mix.npy").read_bytes()
    assert _copy(tse_pack, dst, "--verify-only").exit_code == 0


def test_verify_only_names_missing_and_extra_files(tse_pack, tmp_path):
    dst = tmp_path / "dst"
    copy_pack(str(tse_pack), str(dst), progress=False)
    (dst / "columns" / "keys.npy").unlink()
    (dst / "shard-000000" / "notes.txt").write_text("stray")
    with pytest.raises(CopyError) as caught:
        verify_copy(str(tse_pack), str(dst), progress=False)
    assert f"{dst / 'columns' / 'keys.npy'}: missing" in caught.value.problems
    assert f"{dst / 'shard-000000' / 'notes.txt'}: not in dataset.json (a leftover)" in caught.value.problems
    with pytest.raises(CopyError, match="no such directory"):
        verify_copy(str(tse_pack), str(tmp_path / "absent"), progress=False)


def _slow_copy(src: Path, dst: Path, go: Path, pause: float) -> subprocess.Popen:
    """A process that prints "ready", waits for ``go`` to exist, then copies ``src`` to ``dst`` pausing ``pause`` s
    before each file (so that runs overlap, or can be killed half-way) and prints its report as JSON."""
    script = textwrap.dedent(f"""
        import json, os, sys, time
        sys.path.insert(0, {str(REPO)!r})
        import speechpack.packer.copy.to_directory as copy_module
        import speechpack.packer.copy.staging as staging_module
        real = staging_module.copy_verified
        def slowed(*args):
            time.sleep({pause})
            return real(*args)
        staging_module.copy_verified = slowed
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        report = copy_module.copy_pack({str(src)!r}, {str(dst)!r}, jobs=2, progress=False)
        print(json.dumps({{"copied": report.files_copied, "kept": report.files_kept,
                           "trusted": report.trusted_record}}))
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=REPO)
    assert process.stdout.readline().strip() == "ready"
    return process


def test_two_concurrent_copies_to_one_destination_make_one_verified_pack(tse_pack, tmp_path):
    """Two processes start copying at the same moment (each copy slowed so that they overlap): one copies, the
    other waits on the lock and then finds the verified pack without copying or re-reading anything."""
    dst = tmp_path / "node" / "pack"
    go = tmp_path / "go"
    ranks = [_slow_copy(tse_pack, dst, go, pause=0.02) for _ in range(2)]
    go.touch()
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    reports = sorted((json.loads(out.strip().splitlines()[-1]) for out, _err in outputs), key=lambda r: r["copied"])
    total_files = len(open_pack(dst).manifest.file_entries())
    assert reports == [{"copied": 0, "kept": 0, "trusted": True},
                       {"copied": total_files, "kept": 0, "trusted": False}], outputs
    assert any("waiting for" in out and "pack.lock" in out for out, _err in outputs)  # log() prints
    assert validate_pack(str(dst)).ok
    assert not list(dst.rglob(".tmp-*"))


def test_a_copy_killed_half_way_leaves_no_pack_and_the_next_run_finishes_it(tse_pack, tmp_path):
    dst = tmp_path / "dst"
    go = tmp_path / "go"
    rank = _slow_copy(tse_pack, dst, go, pause=0.1)
    go.touch()
    total = len(open_pack(tse_pack).manifest.file_entries())
    deadline = time.monotonic() + 60
    while len([p for p in dst.rglob("*.npy") if not p.name.startswith(".tmp-")]) < 3:
        assert time.monotonic() < deadline and rank.poll() is None, "the copy finished before it could be killed"
        time.sleep(0.01)
    rank.send_signal(signal.SIGKILL)
    rank.communicate(timeout=30)
    assert not (dst / "dataset.json").exists()
    with pytest.raises(PackFormatError, match="not a pack"):
        open_pack(dst)
    finished = copy_pack(str(tse_pack), str(dst), progress=False)  # the lock died with the killed process
    assert finished.files_kept >= 3 and finished.files_kept + finished.files_copied == total
    assert validate_pack(str(dst)).ok and not list(dst.rglob(".tmp-*"))


def test_a_rank_that_waited_trusts_the_record_but_not_a_file_changed_since(tse_pack, tmp_path):
    dst = tmp_path / "dst"
    copy_pack(str(tse_pack), str(dst), progress=False)
    source = staging_module.read_source(str(tse_pack))
    fd = os.open(str(dst) + LOCK_SUFFIX, os.O_RDWR)
    try:
        lock = DestinationLock(fd, str(dst) + LOCK_SUFFIX, waited=True)
        assert record_matches(lock, source, str(dst))
        _flip(dst / "columns" / "samples.npy", position=-1)  # rewriting a file changes its mtime
        assert not record_matches(lock, source, str(dst))
    finally:
        os.close(fd)


class _Interrupted(BaseException):
    """Stands for a kill in the middle of a copy (not an Exception, as KeyboardInterrupt is not)."""


def _interrupt_after(monkeypatch, files: int) -> None:
    real = staging_module.copy_verified
    calls = {"n": 0}

    def copy_then_stop(*args):
        calls["n"] += 1
        if calls["n"] > files:
            raise _Interrupted()
        return real(*args)

    monkeypatch.setattr(staging_module, "copy_verified", copy_then_stop)


def test_an_interrupted_copy_never_looks_like_a_pack_even_over_an_older_one(tse_pack, tmp_path, monkeypatch,
                                                                           wesep_list, real_audio):
    dst = tmp_path / "dst"
    librivox = real_audio("pocketsphinx", 2)
    older = tmp_path / "older"
    case = wesep_list([Mix("old", tuple(librivox))], name="old.list")
    build_wesep(str(case.list_path), BuildOptions(out=str(older), progress=False))
    copy_pack(str(older), str(dst), progress=False)
    assert open_pack(dst).keys.tolist() == ["old"]

    _interrupt_after(monkeypatch, 3)
    with pytest.raises(_Interrupted):
        copy_pack(str(tse_pack), str(dst), jobs=1, progress=False)
    assert not (dst / "dataset.json").exists()  # the older pack stopped being a pack before any file changed
    with pytest.raises(PackFormatError, match="not a pack"):
        open_pack(dst)
    monkeypatch.undo()

    resumed = copy_pack(str(tse_pack), str(dst), progress=False)
    assert resumed.files_kept >= 3  # what the interrupted run finished is verified and kept
    assert validate_pack(str(dst)).ok
    assert open_pack(dst).keys.tolist() == ["m1", "m2", "m3", "m4"]
    assert not list(dst.rglob(".tmp-*"))


def test_free_space_is_checked_before_anything_is_written(tse_pack, tmp_path, monkeypatch):
    dst = tmp_path / "dst"
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(copy_module.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 999, 999))
    with pytest.raises(SpeechpackError, match=r"needs .* more, but only 999 B is free"):
        copy_pack(str(tse_pack), str(dst), progress=False)
    assert list(dst.iterdir()) == []


def test_free_space_counts_files_already_in_place(tse_pack, tmp_path, monkeypatch):
    dst = tmp_path / "dst"
    copy_pack(str(tse_pack), str(dst), progress=False)
    (dst / "dataset.json").rename(dst / ".tmp-incoming-dataset.json")  # as a copy killed before publishing leaves
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(copy_module.shutil, "disk_usage", lambda path: usage(10**9, 10**9, 0))
    report = copy_pack(str(tse_pack), str(dst), progress=False)  # nothing left to write: no space needed
    assert report.files_copied == 0 and (dst / "dataset.json").exists()


def test_a_destination_with_foreign_files_is_refused(tse_pack, tmp_path):
    dst = tmp_path / "home"
    dst.mkdir()
    (dst / "thesis.tex").write_text("precious")
    result = _copy(tse_pack, dst)
    assert result.exit_code == 1 and "lists (thesis.tex)" in result.output
    assert (dst / "thesis.tex").read_text() == "precious" and len(list(dst.iterdir())) == 1
    inside = _copy(tse_pack, tse_pack / "copy")
    assert inside.exit_code == 1 and "outside the source pack" in inside.output


def test_a_bank_pack_copies_too(tmp_path, real_audio):
    """The copy knows only the manifest's file lists, so every kind works: here a noise bank of real noise."""
    noise_dir = tmp_path / "noises"
    noise_dir.mkdir()
    for path in real_audio("alsa"):
        shutil.copy(path, noise_dir / os.path.basename(path))
    bank = tmp_path / "bank"
    build_audio_bank(str(noise_dir), "noise", BuildOptions(out=str(bank), shard_bytes=200_000, progress=False))
    dst = tmp_path / "bank-copy"
    report = copy_pack(str(bank), str(dst), progress=False)
    assert report.files_copied == report.files and validate_pack(str(dst)).ok
    assert (dst / "dataset.json").read_bytes() == (bank / "dataset.json").read_bytes()


def test_an_asr_pack_with_text_and_attribute_columns_copies_too(tmp_path, real_audio):
    """Format 1.3 data streams (text) and attribute columns are in the manifest's lists like any other file."""
    from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl

    manifest = tmp_path / "asr.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": path, "text": f"utterance {i}", "language": "en",
                                            "corpus": "librivox"}) + "\n"
                                for i, path in enumerate(real_audio("pocketsphinx", 3))))
    src = tmp_path / "asr"
    build_asr_jsonl(str(manifest), BuildOptions(out=str(src), shard_bytes=100_000, progress=False))
    dst = tmp_path / "asr-copy"
    report = copy_pack(str(src), str(dst), progress=False)
    copied = {str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file()}
    assert "columns/attr_language.npy" in copied and any(name.endswith("text.npy") for name in copied)
    assert report.files_copied == report.files == len(copied) - 1  # everything but dataset.json
    assert validate_pack(str(dst)).ok
    assert open_pack(dst).manifest.hours_by_corpus == open_pack(src).manifest.hours_by_corpus
