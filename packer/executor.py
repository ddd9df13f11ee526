"""Where build work runs: an ordered map over items (inline or in a process pool) and a background consumer.

A build decodes in one place and writes in another; both stages release the GIL for most of their work (libsndfile
and soxr decode, numpy arithmetic, hashing and file writes), so a writer thread overlaps with decoding even when
``--workers 1``.  Results always come back in input order, so the pack never depends on how work was spread.
"""

from __future__ import annotations

import collections
import multiprocessing
import queue
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterable, Iterator, Sequence

#: Items in flight per worker: enough to hide decode jitter, few enough to bound memory.
IN_FLIGHT_PER_WORKER = 4
#: Items a background consumer may queue before the producer waits (bounds memory too).
CONSUMER_QUEUE = 8


def map_in_order(fn: Callable, items: Sequence, workers: int, chunksize: int = 1) -> Iterator:
    """Yield ``fn(item)`` for every item, in input order; in ``workers`` processes when ``workers > 1``.

    With ``chunksize == 1`` at most ``workers * IN_FLIGHT_PER_WORKER`` results are pending at once (decoded audio
    is large); a larger ``chunksize`` suits cheap calls with small results (header probes).
    """
    if workers == 1:
        yield from (fn(item) for item in items)
        return
    # forkserver: the progress bar's monitor thread and the writer thread make plain fork unsafe.
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        if chunksize > 1:
            yield from pool.map(fn, items, chunksize=chunksize)
            return
        pending: collections.deque = collections.deque()
        iterator: Iterable = iter(items)
        for item in iterator:
            pending.append(pool.submit(fn, item))
            if len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


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
