"""``--resume``: a build killed with SIGKILL at any point and resumed gives the pack an uninterrupted build gives,
byte for byte.  The build runs in a subprocess that kills itself at a named point (``SPEECHPACK_KILL_AT``, see
``packer.build.state``), so every run stops at the same byte: no sleeps, no timing.  Real recordings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from speechpack.cli import main
import factories.paths
from factories import pack_files
from speechpack.packer.build.state import KILL_AT_ENV, PLAN_FILE, RECEIPTS_DIR

REPO = str(factories.paths.REPO)
#: 48 kB samples (0.5 s, mix + 2 targets at 16 kHz): two per shard, three shards.
SHARD_BYTES = "100000"


@pytest.fixture
def reference(six_line_corpus, tmp_path):
    """The uninterrupted build."""
    out = tmp_path / "reference"
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(six_line_corpus.list_path), "--out", str(out),
                                       "--shard-size", SHARD_BYTES, "--no-progress"])
    assert result.exit_code == 0, result.output
    return pack_files(out)


def run_build(list_path, out, *extra, kill_at: str | None = None) -> subprocess.CompletedProcess:
    """``speechpack build wesep`` in a fresh process (``kill_at``: the checkpoint where it SIGKILLs itself)."""
    env = dict(os.environ)
    env.pop(KILL_AT_ENV, None)
    if kill_at is not None:
        env[KILL_AT_ENV] = kill_at
    return subprocess.run([sys.executable, "-m", "speechpack.cli", "build", "wesep", "--list", str(list_path), "--out", str(out),
                           "--shard-size", SHARD_BYTES, "--no-progress", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("kill_at, complete_shards", [
    ("sample:utt0", 0),  # the first sample is in a half-written shard
    ("sample:utt2", 1),  # mid-shard: shard 1 half written under .tmp-
    ("shard:1", 2),  # shard 1 renamed into place, its receipt not written: it is built again
    ("receipt-temp:1", 2),  # shard 1's receipt under its .tmp- name: shard 1 is built again
    ("receipt:1", 2),
    ("columns", 3),  # every shard and columns/ in place, no dataset.json
    ("manifest", 3),  # dataset.json written, the build state not yet removed
])
def test_killed_and_resumed_build_is_byte_identical(six_line_corpus, reference, tmp_path, kill_at, complete_shards):
    out = tmp_path / "pack"
    killed = run_build(six_line_corpus.list_path, out, "--resume", kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (out / PLAN_FILE).exists()
    assert len([n for n in os.listdir(out) if n.startswith("shard-")]) == complete_shards
    resumed = run_build(six_line_corpus.list_path, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    kept = {"shard:1": 1, "receipt-temp:1": 1, "receipt:1": 2}.get(kill_at, complete_shards)
    if kept:
        assert f"kept {kept} verified shard(s) of an earlier run" in resumed.stdout
    assert pack_files(out) == reference


def test_plain_build_killed_then_resumed(six_line_corpus, reference, tmp_path):
    """Every build records its plan and receipts (issue 13): one started without --resume is resumed too, keeping
    the shards with a receipt (shard 1 was renamed into place but has none: it is built again)."""
    out = tmp_path / "pack"
    killed = run_build(six_line_corpus.list_path, out, kill_at="shard:1")
    assert killed.returncode == -signal.SIGKILL
    assert (out / PLAN_FILE).exists() and (out / "shard-000001").is_dir()
    resumed = run_build(six_line_corpus.list_path, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "kept 1 verified shard(s) of an earlier run, built 2" in resumed.stdout
    assert pack_files(out) == reference


def test_killed_twice_with_two_workers(six_line_corpus, reference, tmp_path):
    """The pool's workers end soon after the build is killed (``run_build`` waits for their copies of the output
    pipes to close: without that watch it would time out), and the resumed build keeps the shards they finished."""
    out = tmp_path / "pack"
    assert run_build(six_line_corpus.list_path, out, "--resume", "--workers", "2",
                     kill_at="sample:utt1").returncode == -signal.SIGKILL
    assert run_build(six_line_corpus.list_path, out, "--resume", "--workers", "2",
                     kill_at="sample:utt4").returncode == -signal.SIGKILL
    resumed = run_build(six_line_corpus.list_path, out, "--resume", "--workers", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert "kept 2 verified shard(s)" in resumed.stdout
    assert pack_files(out) == reference


def _killed_after_every_shard(six_line_corpus, tmp_path):
    out = tmp_path / "pack"
    assert run_build(six_line_corpus.list_path, out, "--resume", kill_at="columns").returncode == -signal.SIGKILL
    return out


def test_resume_rebuilds_a_corrupted_shard(six_line_corpus, reference, tmp_path):
    out = _killed_after_every_shard(six_line_corpus, tmp_path)
    target = out / "shard-000001" / "target.npy"
    data = bytearray(target.read_bytes())
    data[200] ^= 0xFF
    target.write_bytes(bytes(data))
    resumed = CliRunner().invoke(main, ["build", "wesep", "--list", str(six_line_corpus.list_path), "--out", str(out),
                                        "--shard-size", SHARD_BYTES, "--no-progress", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "kept 2 verified shard(s) of an earlier run, built 1" in resumed.output
    assert pack_files(out) == reference


def test_resume_with_other_options_is_refused(six_line_corpus, tmp_path):
    out = _killed_after_every_shard(six_line_corpus, tmp_path)
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(six_line_corpus.list_path), "--out", str(out),
                                       "--shard-size", "200000", "--no-progress", "--resume"])
    assert result.exit_code == 1
    assert "plan differs" in result.output and '"shard_bytes": 100000' in result.output
    assert (out / RECEIPTS_DIR).is_dir()  # nothing of the earlier run was touched


def test_resume_of_a_finished_pack_is_refused(six_line_corpus, tmp_path):
    out = tmp_path / "pack"
    assert run_build(six_line_corpus.list_path, out, "--resume").returncode == 0
    assert sorted(os.listdir(out)) == ["columns", "dataset.json"] + [f"shard-{k:06d}" for k in range(3)]
    result = run_build(six_line_corpus.list_path, out, "--resume")
    assert result.returncode == 1 and "already holds a finished pack" in result.stderr
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["totals"]["samples"] == 6


def test_resume_refuses_to_build_among_foreign_files(six_line_corpus, tmp_path):
    out = tmp_path / "pack"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = run_build(six_line_corpus.list_path, out, "--resume")
    assert result.returncode == 1 and "notes.txt" in result.stderr


@pytest.mark.parametrize("kill_at", ["columns", "manifest"])
def test_finalize_killed_and_run_again(six_line_corpus, reference, tmp_path, kill_at):
    out = tmp_path / "pack"
    for index in (0, 1):
        assert run_build(six_line_corpus.list_path, out, "--shards", f"{index}/2").returncode == 0
    env = {**os.environ, KILL_AT_ENV: kill_at}
    killed = subprocess.run([sys.executable, "-m", "speechpack.cli", "finalize", str(out), "--no-progress"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    assert (out / PLAN_FILE).exists()
    result = CliRunner().invoke(main, ["finalize", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert pack_files(out) == reference
