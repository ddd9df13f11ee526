"""A build's pool workers die with the build: a real ``speechpack build wesep --workers 2`` killed with SIGKILL
leaves no worker running (the kernel's parent-death signal, ``prctl(PR_SET_PDEATHSIG)``, with a thread polling the
build as the fallback: ``packer.build.executor``), both for workers forked from the build and for those a
forkserver starts.  Run in fresh interpreters and sessions: the test runner's own processes are not involved."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from speechpack.packer.build.state import FAULT_ENV, KILL_AT_ENV

import factories.paths

REPO = str(factories.paths.REPO)
#: How long the killed build's workers may take to go: the kernel's signal is immediate; the fallback polls every
#: ``PARENT_POLL_SECONDS`` (0.5 s); a loaded 2-core machine gets the rest.
SURVIVAL_BOUND_SECONDS = 5.0


def _session_members(session: int) -> list[int]:
    """The processes of ``session`` still running (zombies, dead but not reaped, excluded)."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fp:
                fields = fp.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != b"Z":  # after "(comm)": state, ppid, pgrp, session
            members.append(int(name))
    return members


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killed_build_leaves_no_pool_worker_running(six_line_corpus, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in (KILL_AT_ENV, FAULT_ENV)}
    env[KILL_AT_ENV] = "columns"  # every shard written, the workers idle and waiting for a task: then SIGKILL
    with open(tmp_path / "stdout", "wb") as out, open(tmp_path / "stderr", "wb") as err:
        build = subprocess.Popen([sys.executable, "-m", "speechpack.cli", "build", "wesep", "--list",
                                  str(six_line_corpus.list_path), "--out", str(tmp_path / "pack"), "--shard-size",
                                  "50000", "--workers", "2", "--no-progress"],
                                 cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True)
        assert build.wait(timeout=120) == -signal.SIGKILL, (tmp_path / "stderr").read_text()
    deadline = time.monotonic() + SURVIVAL_BOUND_SECONDS
    survivors = _session_members(build.pid)
    while survivors and time.monotonic() < deadline:
        time.sleep(0.05)
        survivors = _session_members(build.pid)
    for pid in survivors:  # leave nothing behind even when the assertion fails
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


_PDEATHSIG = """
import ctypes, os, signal, sys
from speechpack.packer.build.executor import worker_pool
from speechpack.packer.build.executor import fork_is_safe

if sys.argv[1] == "forkserver":
    import threading
    threading.Thread(target=lambda: None).start()  # a thread ever started: fork_is_safe() goes on being False
with worker_pool(2) as pool:
    # PR_GET_PDEATHSIG (2) in each worker, through eval (pickled by reference)
    code = ("(lambda c, v: (c.CDLL(None).prctl(2, c.byref(v), 0, 0, 0), v.value)[1])"
            "(__import__('ctypes'), __import__('ctypes').c_int())")
    print(sorted({pool.submit(eval, code).result() for _ in range(4)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
@pytest.mark.parametrize("start", ["fork", "forkserver"])
def test_pool_workers_ask_the_kernel_to_kill_them_with_their_parent(start):
    done = subprocess.run([sys.executable, "-c", _PDEATHSIG, start], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"[{int(signal.SIGKILL)}]"
