"""A file's SHA-256 computed on a thread of its own, in the order its bytes are written.

On a shard of 16-bit WAV, hashing is a third of the writer thread's work (SHA-256 of every byte, about 0.6 ms per
MiB).  hashlib lets go of the GIL while it hashes a block, so on a thread of its own it runs beside the writer's
statistics and writes (and beside decoding) instead of between them; the writer only hands it each block.
"""

from __future__ import annotations

import collections
import hashlib
from concurrent.futures import Future, ThreadPoolExecutor


class BackgroundDigest:
    """SHA-256 of the bytes given to :meth:`submit` and :meth:`update_now`, in that order."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="speechpack-hash")
        self._pending: collections.deque[Future] = collections.deque()

    def submit(self, data) -> Future:
        """Hash ``data`` on the hashing thread, after everything given before.  ``data`` must not change until
        the returned future is done (the caller reuses a buffer only then)."""
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()
        future = self._executor.submit(self._digest.update, data)
        self._pending.append(future)
        return future

    def update_now(self, data) -> None:
        """Hash ``data`` here, after everything given before (for bytes the caller may change once this returns)."""
        self._wait()
        self._digest.update(data)

    def _wait(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def hexdigest(self) -> str:
        """The digest of everything given; the hashing thread ends."""
        self._wait()
        self._executor.shutdown(wait=True)
        return self._digest.hexdigest()

    def abandon(self) -> None:
        """End the hashing thread without a digest (the file is being thrown away)."""
        self._executor.shutdown(wait=True, cancel_futures=True)


__all__ = ["BackgroundDigest"]
