"""Reading a build's input on a thread of its own, a few samples ahead of the thread that encodes them.

A compressed build in one process (``--workers 1``, and inside every worker of ``--workers N``, which builds its
shards the same way) spent its main thread reading and decoding each sample's input and then encoding its blocks,
one after the other: on 16-bit WAV the reading was about a fifth of the encode's time, all of it on the encoding
core.  libsndfile's decoding (and the reads of a pack a ``convert`` hashes and maps) lets go of the GIL, so a
reader thread decoding the next samples runs on another core while the main thread encodes this one.

``ReadAhead`` runs ``fn(item)`` for the items in order on one thread and hands the results back in the same order,
so what is written never depends on the threads' timing.  What it may hold is bounded by a count and a byte
budget (``READ_AHEAD_ITEMS``, ``READ_AHEAD_BYTES``), never by what an input claims: it reads the next sample only
while fewer than that wait (one sample larger than the budget is still read once the queue is empty, as the build
would hold it anyway).  An exception of ``fn`` is raised by the iterator at that item's place, the same object
with its own message (a sample's ``LineProblem`` is a result, as it was).  Closing (leaving the ``with`` block,
however) stops the thread after the item it is reading and waits for it, so a build that fails leaves no thread
behind; the thread only reads, so nothing it does touches what a killed build leaves on disk.
"""

from __future__ import annotations

import collections
import threading
from typing import Callable, Iterable, Iterator

#: Results the reader may hold ahead of the consumer: enough to hide the jitter of one slow read, few enough that
#: memory does not follow the corpus.
READ_AHEAD_ITEMS = 4
#: Bytes of decoded audio the reader may hold ahead (besides the one it is reading): 32 MiB is 17 min of 16 kHz
#: int16 mono, far more than a few utterances need.
READ_AHEAD_BYTES = 32 << 20


class _Raised:
    """The exception ``fn`` raised for an item, raised again by the iterator at that item's place."""

    def __init__(self, error: BaseException):
        self.error = error


_END = object()


def result_bytes(result) -> int:
    """What a result holds in memory, for the byte budget: a decoded sample's arrays (``nbytes``), else nothing."""
    return int(getattr(result, "nbytes", 0) or 0)


class ReadAhead:
    """``fn(item)`` for every item, computed on a thread named ``name`` up to ``items_ahead`` results (and
    ``bytes_ahead`` bytes, ``size(result)``; defaults ``READ_AHEAD_ITEMS``, ``READ_AHEAD_BYTES``) ahead of whoever
    iterates; iterate once, in a ``with`` block."""

    def __init__(self, fn: Callable, items: Iterable, items_ahead: int | None = None,
                 bytes_ahead: int | None = None, size: Callable[[object], int] = result_bytes,
                 name: str = "speechpack-reader"):
        self._items_ahead = READ_AHEAD_ITEMS if items_ahead is None else items_ahead
        self._bytes_ahead = READ_AHEAD_BYTES if bytes_ahead is None else bytes_ahead
        if self._items_ahead < 1:
            raise ValueError(f"items_ahead must be at least 1, got {self._items_ahead}")
        self._fn = fn
        self._items = items
        self._size = size
        self._lock = threading.Condition()
        self._ready: collections.deque = collections.deque()  # (result, bytes), in item order; _END last
        self._held = 0  # bytes of the results in _ready
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _room(self) -> bool:
        return not self._ready or (len(self._ready) < self._items_ahead and self._held < self._bytes_ahead)

    def _put(self, result, nbytes: int) -> None:
        with self._lock:
            if not self._stopped:
                self._ready.append((result, nbytes))
                self._held += nbytes
            self._lock.notify_all()

    def _run(self) -> None:
        try:
            for item in self._items:
                with self._lock:
                    while not self._stopped and not self._room():
                        self._lock.wait()
                    if self._stopped:
                        return
                result = self._fn(item)  # outside the lock: the consumer takes results meanwhile
                self._put(result, self._size(result))
        except BaseException as err:  # raised again by the consumer, at this item's place
            self._put(_Raised(err), 0)
            return
        self._put(_END, 0)

    def __iter__(self) -> Iterator:
        while True:
            with self._lock:
                while not self._ready:
                    self._lock.wait()
                result, nbytes = self._ready.popleft()
                self._held -= nbytes
                self._lock.notify_all()
            if result is _END:
                return
            if isinstance(result, _Raised):
                error, result.error = result.error, None
                raise error
            yield result

    def close(self) -> None:
        """Stop reading (after the item being read) and wait until the thread has ended; drop what it held."""
        with self._lock:
            self._stopped = True
            self._ready.clear()
            self._held = 0
            self._lock.notify_all()
        self._thread.join()

    @property
    def alive(self) -> bool:
        """Whether the reader thread still runs."""
        return self._thread.is_alive()

    def __enter__(self) -> "ReadAhead":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


__all__ = ["READ_AHEAD_BYTES", "READ_AHEAD_ITEMS", "ReadAhead", "result_bytes"]
