"""Failed and interrupted builds, and resumable builds by default: a build that fails (full disk, Ctrl-C, a
directory it cannot write, a second build into the same ``--out``) prints ``error: ...`` or ``Aborted!``, never a
traceback, and leaves only what a resumed build keeps; any build, even one started without ``--resume``, can be
resumed after a kill and keeps every shard it had finished, untouched.

Builds run in subprocesses that inject the fault at a named point (``SPEECHPACK_KILL_AT`` and ``SPEECHPACK_FAULT``,
``packer.build.state``): deterministic, no sleeps.  Real recordings."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from speechpack.cli import main
import factories.paths
from factories import pack_files, source_line
from speechpack.packer.build.state import FAULT_ENV, KILL_AT_ENV, PLAN_FILE, RECEIPTS_DIR

REPO = str(factories.paths.REPO)
#: 48 kB samples (0.5 s, mix + 2 targets at 16 kHz), one per shard: six shards, so that two workers run
#: whole-shard tasks (``packer.build.shards.SHARD_TASKS_FROM``).
ONE_PER_SHARD = "50000"
#: Two samples per shard, three shards.
TWO_PER_SHARD = "100000"


def reference(six_line_corpus, tmp_path, shard_size: str):
    out = tmp_path / f"reference-{shard_size}"
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(six_line_corpus.list_path), "--out", str(out),
                                       "--shard-size", shard_size, "--no-progress"])
    assert result.exit_code == 0, result.output
    return pack_files(out)


def run_build(list_path, out, shard_size, *extra, kill_at=None, fault=None) -> subprocess.CompletedProcess:
    """``speechpack build wesep`` in a fresh process and session (a Ctrl-C it simulates reaches only its own
    process group), with SIGINT's default action as at a terminal: a test run started in the background by a
    shell without job control inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    env = {k: v for k, v in os.environ.items() if k not in (KILL_AT_ENV, FAULT_ENV)}
    if kill_at is not None:
        env[KILL_AT_ENV] = kill_at
    if fault is not None:
        env[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "speechpack.cli", "build", "wesep", "--list", str(list_path), "--out", str(out),
                           "--shard-size", shard_size, "--no-progress", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, start_new_session=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def only_what_resume_keeps(out) -> list[str]:
    """Assert ``out`` holds the plan, receipts and the shards they vouch for, nothing else; return the shards."""
    names = sorted(os.listdir(out))
    shards = [n for n in names if n.startswith("shard-")]
    assert set(names) - set(shards) <= {PLAN_FILE, RECEIPTS_DIR}, names
    receipts = sorted(os.listdir(out / RECEIPTS_DIR)) if (out / RECEIPTS_DIR).exists() else []
    assert receipts == [f"{s}.json" for s in shards], (receipts, shards)
    return shards


# --------------------------------------------------------------------------- failed parallel builds

@pytest.mark.parametrize("workers", ["1", "2"])
def test_full_disk_leaves_only_what_resume_keeps(six_line_corpus, tmp_path, workers):
    out = tmp_path / "pack"
    failed = run_build(six_line_corpus.list_path, out, ONE_PER_SHARD, "--workers", workers, kill_at="sample:utt3",
                       fault="enospc")
    assert failed.returncode == 1, failed.stderr
    assert "error:" in failed.stderr and "No space left on device" in failed.stderr
    assert "Traceback" not in failed.stderr
    shards = only_what_resume_keeps(out)
    assert "shard-000003" not in shards and "shard-000000" in shards
    resumed = run_build(six_line_corpus.list_path, out, ONE_PER_SHARD, "--workers", workers)
    assert resumed.returncode == 0, resumed.stderr
    assert pack_files(out) == reference(six_line_corpus, tmp_path, ONE_PER_SHARD)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("kill_at", [
    "sample:utt3",
    "receipt-temp:2",  # a receipt under its .tmp- name when the worker stops (CI once caught one left behind)
])
def test_ctrl_c_prints_aborted_and_leaves_only_what_resume_keeps(six_line_corpus, tmp_path, workers, kill_at):
    out = tmp_path / "pack"
    interrupted = run_build(six_line_corpus.list_path, out, ONE_PER_SHARD, "--workers", workers, kill_at=kill_at,
                            fault="interrupt")
    assert interrupted.returncode == 1, interrupted.stderr
    assert interrupted.stderr.strip().endswith("Aborted!"), interrupted.stderr
    assert "Traceback" not in interrupted.stderr and "FileNotFoundError" not in interrupted.stderr
    only_what_resume_keeps(out)
    resumed = run_build(six_line_corpus.list_path, out, ONE_PER_SHARD, "--workers", workers, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert pack_files(out) == reference(six_line_corpus, tmp_path, ONE_PER_SHARD)


def test_bad_input_still_leaves_nothing(tmp_path, write_list, real_audio):
    """A build failing on bad lines keeps nothing: once the list is fixed its plan changes, so no shard is of use."""
    good = real_audio("pocketsphinx", 1)[0]
    listed = write_list([source_line("a", "s1", good), source_line("b", "s2", str(tmp_path / "missing.wav"))])
    out = tmp_path / "pack"
    result = run_build(listed, out, TWO_PER_SHARD)
    assert result.returncode == 1 and "missing.wav" in result.stderr
    assert not out.exists()


# --------------------------------------------------------------------- clear errors, checked first

def test_unwritable_out_is_refused_before_any_header_is_read(tmp_path, write_list):
    """sysfs refuses new directories, for root too.  The list names missing audio: had the headers been probed
    first, the error would be about those lines."""
    listed = write_list([source_line(f"k{i}", "s1", str(tmp_path / f"missing{i}.wav")) for i in range(3)])
    result = run_build(listed, "/sys/speechpack-test-out", TWO_PER_SHARD)
    assert result.returncode == 1
    assert result.stderr.startswith("error: /sys/speechpack-test-out: cannot write the pack there"), result.stderr
    assert "missing0.wav" not in result.stderr and "Traceback" not in result.stderr


def test_a_second_build_into_the_same_out_is_refused(six_line_corpus, tmp_path):
    """While another process holds the directory's lock (here: this test, as a running build would), a build
    into it stops at once with a clear message and touches nothing: not even the empty directory it made, which
    the holder may be about to write into (two builds started together both found no directory; the refused one
    removing it failed the other's build)."""
    out = tmp_path / "pack"
    fd = os.open(str(out) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        result = run_build(six_line_corpus.list_path, out, TWO_PER_SHARD)
    finally:
        os.close(fd)
    assert result.returncode == 1
    assert "another speechpack process is writing there" in result.stderr and "Traceback" not in result.stderr
    assert out.is_dir() and not os.listdir(out)
    assert run_build(six_line_corpus.list_path, out, TWO_PER_SHARD).returncode == 0


def test_two_builds_started_together_give_one_pack_and_one_clear_refusal(six_line_corpus, tmp_path):
    out = tmp_path / "pack"
    cmd = [sys.executable, "-m", "speechpack.cli", "build", "wesep", "--list", str(six_line_corpus.list_path), "--out", str(out),
           "--shard-size", TWO_PER_SHARD, "--no-progress"]
    env = {k: v for k, v in os.environ.items() if k not in (KILL_AT_ENV, FAULT_ENV)}
    jobs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [(job.wait(timeout=120), job.stderr.read()) for job in jobs]
    for job in jobs:
        job.stdout.close()
        job.stderr.close()
    for code, stderr in results:
        assert "Traceback" not in stderr
        assert code == 0 or ("error:" in stderr and ("another speechpack process" in stderr
                                                     or "not empty" in stderr)), stderr
    assert 0 in [code for code, _ in results]
    assert pack_files(out) == reference(six_line_corpus, tmp_path, TWO_PER_SHARD)


# ---------------------------------------------------------------------------------- resumable by default

def _identities(out, receipted: bool = True) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every file of every shard (that has a receipt, with ``receipted``)."""
    ids = {}
    for name in os.listdir(out):
        if name.startswith("shard-") and (not receipted or (out / RECEIPTS_DIR / f"{name}.json").exists()):
            for path in (out / name).iterdir():
                stat = path.stat()
                ids[f"{name}/{path.name}"] = (stat.st_ino, stat.st_mtime_ns)
    return ids


@pytest.mark.parametrize("kill_at, kept", [
    ("sample:utt0", 0),
    ("sample:utt3", 1),  # shard 1 half written
    ("shard:1", 1),  # shard 1 renamed into place, its receipt not yet written: built again
    ("receipt:1", 2),
    ("columns", 3),
    ("manifest", 3),
])
def test_resumable_default_plain_build_killed_anywhere_keeps_its_shards_untouched(six_line_corpus, tmp_path, kill_at, kept):
    out = tmp_path / "pack"
    killed = run_build(six_line_corpus.list_path, out, TWO_PER_SHARD, kill_at=kill_at)  # no --resume
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = _identities(out)
    assert len({name.split("/")[0] for name in before}) == kept
    resumed = run_build(six_line_corpus.list_path, out, TWO_PER_SHARD, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    if kept:
        assert f"kept {kept} verified shard(s) of an earlier run" in resumed.stdout
    after = {name: ident for name, ident in _identities(out, receipted=False).items() if name in before}
    assert after == before  # same inode, same mtime: not rewritten
    assert pack_files(out) == reference(six_line_corpus, tmp_path, TWO_PER_SHARD)


def test_resumable_default_a_plain_rerun_resumes_and_says_so(six_line_corpus, tmp_path):
    out = tmp_path / "pack"
    assert run_build(six_line_corpus.list_path, out, TWO_PER_SHARD, kill_at="receipt:1").returncode == -signal.SIGKILL
    rerun = run_build(six_line_corpus.list_path, out, TWO_PER_SHARD)
    assert rerun.returncode == 0, rerun.stderr
    assert "holds an unfinished build of the same input and options: resuming it" in rerun.stderr
    assert "kept 2 verified shard(s)" in rerun.stdout
    assert pack_files(out) == reference(six_line_corpus, tmp_path, TWO_PER_SHARD)


def test_resumable_default_a_rerun_with_other_options_is_refused_then_overwrite_starts_again(six_line_corpus, tmp_path):
    out = tmp_path / "pack"
    assert run_build(six_line_corpus.list_path, out, TWO_PER_SHARD, kill_at="receipt:1").returncode == -signal.SIGKILL
    other = run_build(six_line_corpus.list_path, out, ONE_PER_SHARD)
    assert other.returncode == 1 and "plan differs" in other.stderr and "--overwrite" in other.stderr
    assert (out / "shard-000001").is_dir()
    again = run_build(six_line_corpus.list_path, out, ONE_PER_SHARD, "--overwrite")
    assert again.returncode == 0, again.stderr
    assert pack_files(out) == reference(six_line_corpus, tmp_path, ONE_PER_SHARD)


def test_resumable_default_the_plan_file_is_compact(six_line_corpus, tmp_path):
    """A plain build records the plan's fingerprint and shard cuts, not per-sample rows; an array job (finalize
    verifies against the rows) records the whole plan."""
    out = tmp_path / "pack"
    assert run_build(six_line_corpus.list_path, out, TWO_PER_SHARD, kill_at="columns").returncode == -signal.SIGKILL
    recorded = json.loads((out / PLAN_FILE).read_text())
    assert recorded["compact"]["cuts"] == [2, 2, 2]
    assert "utt3" not in (out / PLAN_FILE).read_text()
    sliced = tmp_path / "sliced"
    assert run_build(six_line_corpus.list_path, sliced, TWO_PER_SHARD, "--shards", "0/2").returncode == 0
    assert "utt3" in (sliced / PLAN_FILE).read_text()


def test_resumable_default_an_unreadable_receipt_means_the_shard_is_built_again(six_line_corpus, tmp_path):
    """A receipt emptied by a power loss (renamed into place, its data never flushed) is no receipt: the shard it
    describes is built again instead of the resumed build stopping."""
    out = tmp_path / "pack"
    assert run_build(six_line_corpus.list_path, out, TWO_PER_SHARD, kill_at="columns").returncode == -signal.SIGKILL
    (out / RECEIPTS_DIR / "shard-000001.json").write_bytes(b"")
    resumed = run_build(six_line_corpus.list_path, out, TWO_PER_SHARD)
    assert resumed.returncode == 0, resumed.stderr
    assert "kept 2 verified shard(s) of an earlier run, built 1" in resumed.stdout
    assert pack_files(out) == reference(six_line_corpus, tmp_path, TWO_PER_SHARD)
