"""How a build's worker processes start: forked from the build process itself when that is safe, else from a
forkserver.

A forkserver is a fresh interpreter that imports what a build task needs (``FORKSERVER_PRELOAD``) and forks every
worker from itself: 0.4 s of CPU and up to a second of wall time per build on a loaded 2-core machine, about
what a short build gains from its second worker.  The build process has imported all of it already, so workers forked
from it start in milliseconds with nothing to import again.

Why a plain ``fork`` is safe here, and only here: a child of ``fork`` holds one thread, a copy of the caller, and
every lock another thread held at that moment stays locked in it forever.  A build's own threads (the writer,
the hashing and fsync threads, the thread that starts a pool) and tqdm's monitor thread (which lives on once a
progress bar was shown, and takes tqdm's lock) hold such locks.  So the workers are forked only where
``fork_is_safe``: on Linux, with the calling thread the only Python thread, which ``run_build`` arranges by
making its pool first, before the claim of ``--out`` and before any thread of the build starts.  The
threads a build process holds then that Python does not know about are OpenBLAS's (numpy's copy, and OpenCV's
once ``cli`` imported ``cv2``): OpenBLAS stops its threads in a ``pthread_atfork`` handler before every fork
and starts them again on its next call (the process goes from 3 threads to 1 across a fork, as the forkserver,
which imports numpy before it forks each worker, always relied on), and the workers' decoding calls no BLAS.
Anywhere else (macOS, where system libraries break in a forked child; a second build in a process whose
progress bar left tqdm's thread running; a caller's own threads) the forkserver starts them, as before.

What else a forked worker inherits: the build's open files (the pool is made before ``--out``'s lock is taken,
so no worker keeps the lock after a killed build; like the forkserver's workers they hold stdout and stderr, and
end within ``PARENT_POLL_SECONDS`` of the build's death), and the build's Python objects, shared copy-on-write:
the fork is done with the objects frozen (``gc.freeze``), so a worker's garbage collector never walks, and so
never copies, the pages of the build's item list.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

#: How often a pool worker checks that the build process is still alive, in seconds.
PARENT_POLL_SECONDS = 0.5
#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1
#: Modules a worker holds imported when it starts: everything a build task needs (the adapters' ``plan``/``load``
#: steps, ``build_shard``, numpy, soundfile, soxr).  A forkserver imports them once, before it forks any worker;
#: a build process forking its workers itself imports any it lacks first.  Without them every worker imports
#: them itself (about 0.3 s of CPU each, and again for the module a ``python -m cli`` build runs as
#: ``__main__``), which on a 2-core machine cost more than a short build gained from its second worker.
#: ``packer.build.run`` no longer imports any adapter (each adapter imports it), so the audio families' adapters are
#: named here.
FORKSERVER_PRELOAD = ("speechpack.packer.build.run", "speechpack.packer.adapters.wesep", "speechpack.packer.adapters.audio_bank")


def fork_is_safe() -> bool:
    """Whether workers may be forked from this process now (see the module docstring): Linux, and the calling
    thread is the only thread the ``threading`` module knows of."""
    return (sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
            and threading.current_thread() is threading.main_thread() and threading.active_count() == 1)


def started() -> None:
    """A task that does nothing: submitting one makes a pool start its processes."""


def new_pool(workers: int) -> ProcessPoolExecutor:
    """A process pool of ``workers``, its workers already forked from this process when ``fork_is_safe``, else to be
    started by a forkserver on first use."""
    if sys.platform.startswith("linux"):
        for name in FORKSERVER_PRELOAD:  # before the check: an import could start a thread
            importlib.import_module(name)
    if fork_is_safe():
        return _forked_pool(workers)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(FORKSERVER_PRELOAD))  # takes effect when the forkserver starts
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_exit_with,
                               initargs=(os.getpid(),))


def _forked_pool(workers: int) -> ProcessPoolExecutor:
    """A pool whose ``workers`` are forked now, by this thread, before the pool's own thread exists: a pool with the
    ``fork`` context forks all of its workers in its first ``submit``, and only then starts the thread that feeds
    them (``concurrent.futures.process``; it never forks again: a worker that dies breaks the pool)."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=_exit_with, initargs=(os.getpid(),))
    gc.freeze()  # the children keep this process's objects frozen: their collector never touches those pages
    try:
        with warnings.catch_warnings():  # this thread is the only Python thread: nothing else sees the filter
            # Python 3.12+ warns about a fork of any process with several OS threads; the only others here are
            # OpenBLAS's, which its own fork handler stops (module docstring).
            warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded",
                                    category=DeprecationWarning)
            pool.submit(started)
    finally:
        gc.unfreeze()  # here they are collected as before
    return pool


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fp:
            return fp.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): existence only
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``); whether it
    was set.  The signal is tied to the parent *thread* that forked this process: pool workers are forked by the
    build's main thread (``_forked_pool``) or by the single-threaded forkserver, which live as long as their
    process does."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _exit_with(build_pid: int) -> None:
    """Pool initializer: end this worker soon after the build process dies, and leave Ctrl-C to the build.

    A Ctrl-C at a terminal reaches every process of the foreground group.  Only the build process handles it:
    it cancels the pending tasks, stops the running ones and then removes their half-written shards
    (``worker_pool``); a worker that raised ``KeyboardInterrupt`` itself would print its own traceback.

    A build killed with SIGKILL (a scheduler's time limit, the OOM killer) runs no clean-up, and a
    ``ProcessPoolExecutor`` worker waiting for its next task never sees end-of-file: it holds both ends of the task
    pipe itself.  Without this watch its workers (and the forkserver) would outlive the build, and whoever waits
    for the build's output pipes (a job script, a resumed build's test) would wait forever.

    A worker therefore dies with its parent twice over.  On Linux the kernel kills it the moment its parent (the
    build process, or the forkserver, which exits as soon as the build is gone) dies: ``prctl(PR_SET_PDEATHSIG,
    SIGKILL)`` (prctl(2)), set through ``ctypes``.  Everywhere, a thread polls the build process every
    ``PARENT_POLL_SECONDS``, the fallback where ``prctl`` is missing, and the catch for a build that died before
    the signal was set.
    """

    def watch() -> None:
        while _alive(build_pid):
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    threading.Thread(target=watch, name="speechpack-parent-watch", daemon=True).start()


__all__ = ["FORKSERVER_PRELOAD", "PARENT_POLL_SECONDS", "die_with_parent", "fork_is_safe", "new_pool", "started"]
