"""A build's process pool starts its workers with what a build task needs already imported
(``packer.build.executor.FORKSERVER_PRELOAD``): forked from the build process itself where that is safe, else
from a forkserver that imported them (test_pool_fork.py tests which one is chosen), so no worker pays the
imports again; while a forkserver starts, the build process probes headers itself (``map_while_starting``).  Run
in a fresh interpreter: a forkserver is started once per process, with the preload list it had then."""

from __future__ import annotations

import subprocess
import sys

import pytest

import factories.paths

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

REPO = str(factories.paths.REPO)

_CHECK = """
import os
from speechpack.packer.build.executor import FORKSERVER_PRELOAD, worker_pool
with worker_pool(2) as pool:
    # eval is pickled by reference: running it imports nothing, so it sees what the worker held when it forked
    held = [pool.submit(eval, "[m for m in %r if m in __import__('sys').modules]" % (FORKSERVER_PRELOAD,))
            for _ in range(4)]
    pids = {pool.submit(os.getpid).result() for _ in range(4)}
    print(sorted({tuple(f.result()) for f in held}) == [tuple(FORKSERVER_PRELOAD)], len(pids - {os.getpid()}) > 0)
"""


def test_pool_workers_start_with_the_build_modules_imported():
    done = subprocess.run([sys.executable, "-c", _CHECK], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True True", done.stdout  # every worker held every preloaded module


_WHILE_STARTING = """
import os
from speechpack.packer.build.executor import map_while_starting, worker_pool
with worker_pool(2) as pool:
    # eval is pickled by reference: each item reports the process it ran in, and its number
    items = ["(__import__('os').getpid(), %d)" % i for i in range(300)]
    results = list(map_while_starting(eval, items, 2, 16, pool))
    later = {pool.submit(os.getpid).result() for _ in range(4)}
    print([n for _, n in results] == list(range(300)), results[0][0] == os.getpid(), os.getpid() not in later)
"""


def test_probing_starts_in_the_build_process_while_the_pool_starts():
    """``map_while_starting`` gives every result in order, the first ones from the build process (the pool's
    workers are not up yet), and the pool's own tasks run in its workers."""
    done = subprocess.run([sys.executable, "-c", _WHILE_STARTING], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True True True", done.stdout
