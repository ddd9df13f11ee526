"""A build's pool forks its workers from the build process itself when that is safe (Linux, no other Python thread:
``packer.build.executor``), and leaves starting them to a forkserver otherwise; either way every worker holds
the build's modules and the build goes on as before.  Pool checks run in a fresh interpreter: whether a thread
runs, and which forkserver exists, are properties of the whole process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from speechpack.packer.build import executor

import factories.paths

REPO = str(factories.paths.REPO)

#: Prints, for a pool of 2 made while ``THREAD`` (set by the caller) is or is not running: whether every worker is a
#: child of this process, whether a forkserver was started, whether the workers hold every preloaded module, and
#: whether this process's objects are frozen in them but not here.
_WHERE = """
import gc, os, threading
import multiprocessing.forkserver as forkserver
from speechpack.packer.build.executor import FORKSERVER_PRELOAD, worker_pool
stop = threading.Event()
if THREAD:
    threading.Thread(target=stop.wait, daemon=True).start()
with worker_pool(2) as pool:
    parents = {pool.submit(os.getppid).result() for _ in range(6)}
    held = pool.submit(eval, "all(m in __import__('sys').modules for m in %r)" % (FORKSERVER_PRELOAD,)).result()
    frozen = pool.submit(gc.get_freeze_count).result()
stop.set()
server = getattr(forkserver, "_forkserver", None)
print(parents == {os.getpid()}, bool(server and server._forkserver_pid), held, frozen > 0, gc.get_freeze_count())
"""


def where_workers_start(thread: bool) -> str:
    done = subprocess.run([sys.executable, "-c", f"THREAD = {thread}\n{_WHERE}"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked from the build only on Linux")
def test_workers_fork_from_the_build_process_when_no_thread_runs():
    # children of this process, no forkserver, the modules held; the objects frozen in the workers, not here
    assert where_workers_start(thread=False) == "True False True True 0"


def test_a_running_thread_leaves_the_start_to_a_forkserver():
    """A thread could hold a lock at the fork (tqdm's monitor, a writer): the workers come from a forkserver, whose
    preload gives them the same modules."""
    parents_are_this, server, held, _frozen, here = where_workers_start(thread=True).split()
    assert (parents_are_this, server, held, here) == ("False", "True", "True", "0")


def test_fork_is_safe_only_on_linux_with_one_thread(monkeypatch):
    import threading

    monkeypatch.setattr(executor.sys, "platform", "linux")
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert executor.fork_is_safe()
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    assert not executor.fork_is_safe()
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(executor.sys, "platform", "darwin")  # system libraries break in a forked child
    assert not executor.fork_is_safe()


#: ``speechpack build wesep --workers 2`` run in-process by click (``cli`` imports OpenCV, whose OpenBLAS starts
#: threads Python does not know of): prints whether the pool was forked here and the build's exit status.
_CLI_FORKS = """
import sys
from speechpack.packer.build import executor
forked = []
original = executor._forked_pool
executor._forked_pool = lambda workers: forked.append(workers) or original(workers)
from speechpack.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
    status = 0
except SystemExit as err:
    status = err.code
print(forked, status)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked from the build only on Linux")
def test_speechpack_build_forks_its_workers_and_packs_what_one_worker_packs(six_line_corpus, tmp_path):
    from factories import pack_files

    def build(out, workers):
        done = subprocess.run([sys.executable, "-c", _CLI_FORKS, "build", "wesep", "--list",
                               str(six_line_corpus.list_path), "--out", str(out), "--shard-size", "50000",
                               "--workers", str(workers)], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    # with the progress bar on: its monitor thread starts after the fork
    assert build(tmp_path / "two", 2) == "[2] 0"
    assert build(tmp_path / "one", 1) == "[] 0"
    assert pack_files(tmp_path / "two") == pack_files(tmp_path / "one")

