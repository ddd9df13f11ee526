"""Where build work runs: an ordered map over items (inline or in a process pool) and a background consumer.

A build decodes in one place and writes in another; both stages release the GIL for most of their work (libsndfile
and soxr decode, numpy arithmetic, hashing and file writes), so a writer thread overlaps with decoding even when
``--workers 1``.  Results always come back in input order, so the pack never depends on how work was spread.

**How the worker processes start**: forked from the build process itself when that is safe, else from a forkserver.

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

import collections
import contextlib
import ctypes
import gc
import importlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterator, Sequence

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


#: Items in flight per worker: enough to hide decode jitter, few enough to bound memory.
IN_FLIGHT_PER_WORKER = 4
#: Items a background consumer may queue before the producer waits (bounds memory too).
CONSUMER_QUEUE = 8


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """A process pool of ``workers`` for several ``map_in_order`` calls (``None`` when ``workers == 1``).

    Made first thing in a build, its workers are forked from the build process at once, with nothing to import
    (``new_pool``: where that is not safe, a forkserver starts them on first use, about 0.4 s of
    CPU); a build that probes headers, writes shards and loads cues pays the start once.
    """
    if workers == 1:
        yield None
        return
    pool = new_pool(workers)
    try:
        yield pool
    except BaseException as err:
        stop_pool(pool, terminate=isinstance(err, KeyboardInterrupt))
        raise
    pool.shutdown(wait=True)


def stop_pool(pool: ProcessPoolExecutor, terminate: bool) -> None:
    """Stop a pool after a failure, and return only once no task of it runs any more.

    Pending tasks are cancelled (a plain ``shutdown`` would run every queued one first).  Running tasks finish
    (a failed build's other shards are complete, and kept for resume) unless ``terminate``: after Ctrl-C the
    user wants the build to stop now, so the workers are ended and their half-written shards removed by the
    caller, which runs only after this returns (removing them while a worker still wrote would race it).
    """
    if terminate:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            with contextlib.suppress(Exception):
                process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def map_in_order(fn: Callable, items: Sequence, workers: int, chunksize: int = 1,
                 pool: ProcessPoolExecutor | None = None) -> Iterator:
    """Yield ``fn(item)`` for every item, in input order; in ``workers`` processes when ``workers > 1`` (those of
    ``pool`` when given, else a pool made for this call).

    With ``chunksize == 1`` at most ``workers * IN_FLIGHT_PER_WORKER`` results are pending at once (decoded audio
    is large); a larger ``chunksize`` suits cheap calls with small results (header probes).
    """
    if workers == 1:
        yield from (fn(item) for item in items)
        return
    if pool is None:
        with worker_pool(workers) as own:
            yield from _map(own, fn, items, workers, chunksize)
    else:
        yield from _map(pool, fn, items, workers, chunksize)


def start_workers(pool: ProcessPoolExecutor, workers: int) -> threading.Event:
    """Start ``pool``'s ``workers`` processes on a background thread and return an event set once they run.

    Where a pool's workers come from a forkserver, its first task waits for them: the forkserver's start, its
    imports (``FORKSERVER_PRELOAD``) and a fork per worker, 0.3-1.5 s depending on the machine's load.  Started
    here, that happens on another core while the caller does its own work (``map_while_starting``).  Workers
    forked from the build process are up already: the event is set within milliseconds."""
    ready = threading.Event()

    def start() -> None:
        try:
            for future in [pool.submit(started) for _ in range(workers)]:
                future.result()
        except BaseException:  # the pool was shut down or broke: its next real use says so
            pass
        finally:
            ready.set()

    threading.Thread(target=start, name="speechpack-pool-start", daemon=True).start()
    return ready


def map_while_starting(fn: Callable, items: Sequence, workers: int, chunksize: int,
                       pool: ProcessPoolExecutor | None) -> Iterator:
    """``map_in_order`` over a ``pool`` that has not run anything yet: the first items (at least one) run in this
    process while the pool's workers start (``start_workers``), the rest in the pool.  For a build's first
    parallel step, probing headers, which is cheap per item and would otherwise wait for the whole start-up."""
    if pool is None or workers == 1:
        yield from map_in_order(fn, items, workers, chunksize, pool)
        return
    ready = start_workers(pool, workers)
    index = 0
    while index < len(items):  # the first item always here: what the pool runs comes after it in any case
        yield fn(items[index])
        index += 1
        if ready.is_set():
            break
    yield from map_in_order(fn, items[index:], workers, chunksize, pool)


def _map(pool: ProcessPoolExecutor, fn: Callable, items: Sequence, workers: int, chunksize: int) -> Iterator:
    if chunksize > 1:
        yield from pool.map(fn, items, chunksize=chunksize)
        return
    pending: collections.deque = collections.deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:  # abandoned early (an error downstream): a shared pool must not keep working for nobody
        for future in pending:
            future.cancel()


_DONE = object()


class BackgroundConsumer:
    """Runs ``consume(item)`` on a thread, in submission order.  An exception in the thread is raised again by
    the next ``submit`` or by ``close``, so the producer never keeps going after the consumer died."""

    def __init__(self, consume: Callable[[object], None], name: str = "speechpack-writer"):
        self._consume = consume
        self._queue: queue.Queue = queue.Queue(maxsize=CONSUMER_QUEUE)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not _DONE:
            if self._error is None:
                try:
                    self._consume(item)
                except BaseException as err:  # handed to the producer, which re-raises it
                    self._error = err

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, item) -> None:
        self._raise_if_failed()
        self._queue.put(item)

    def backlogged(self) -> bool:
        """Whether the consumer is behind (half its queue or more waiting): the producer has time for work the
        consumer would otherwise do (``packer.build.shards.submit_decoded``).  Half, not full: a producer that
        waits only once the queue is full hands over unfinished work while the consumer catches up."""
        return self._queue.qsize() >= CONSUMER_QUEUE // 2

    def close(self) -> None:
        """Wait for every submitted item; re-raise the consumer's exception, if any."""
        self._queue.put(_DONE)
        self._thread.join()
        self._raise_if_failed()

    def abandon(self) -> None:
        """Stop after the items already queued, without raising (the producer is failing already)."""
        self._queue.put(_DONE)
        self._thread.join()


__all__ = ["FORKSERVER_PRELOAD", "PARENT_POLL_SECONDS", "PR_SET_PDEATHSIG", "die_with_parent", "fork_is_safe", "new_pool",
           "started"]
