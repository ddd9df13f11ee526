"""Where build work runs: an ordered map over items (inline or in a process pool) and a background consumer.

A build decodes in one place and writes in another; both stages release the GIL for most of their work (libsndfile
and soxr decode, numpy arithmetic, hashing and file writes), so a writer thread overlaps with decoding even when
``--workers 1``.  Results always come back in input order, so the pack never depends on how work was spread.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterator, Sequence

from speechpack.packer.build.pool_start import new_pool, started

#: Items in flight per worker: enough to hide decode jitter, few enough to bound memory.
IN_FLIGHT_PER_WORKER = 4
#: Items a background consumer may queue before the producer waits (bounds memory too).
CONSUMER_QUEUE = 8


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """A process pool of ``workers`` for several ``map_in_order`` calls (``None`` when ``workers == 1``).

    Made first thing in a build, its workers are forked from the build process at once, with nothing to import
    (``packer.build.pool_start``: where that is not safe, a forkserver starts them on first use, about 0.4 s of
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
    imports (``pool_start.FORKSERVER_PRELOAD``) and a fork per worker, 0.3-1.5 s depending on the machine's load.  Started
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

    def close(self) -> None:
        """Wait for every submitted item; re-raise the consumer's exception, if any."""
        self._queue.put(_DONE)
        self._thread.join()
        self._raise_if_failed()

    def abandon(self) -> None:
        """Stop after the items already queued, without raising (the producer is failing already)."""
        self._queue.put(_DONE)
        self._thread.join()
