"""Fetching one pack file from the store into the node cache, verified: ``fetch_verified``.

Why whole files are verified, not blocks.  ``dataset.json`` records one sha256 per file, and that is the only hash
a reader can trust: a per-block hash computed when a block is first fetched would only confirm the bytes the store
sent that time, corrupt or not.  So a stream file is fetched in large aligned ranges (``BLOCK_BYTES``; one request
when it is smaller), hashed while the ranges arrive in order, and it becomes a cache entry only when the whole
file's hash is the manifest's: a file is the cache's unit of fetch, verification and eviction (a pack's shards
keep files to a size a node's cache holds many of: ``build --shard-bytes``).  A mismatch is fetched once more (a
corrupted transfer), then it is an error naming the object and both hashes.  Every request is retried with backoff
(``with_retries``).

**Retries.** Throttling (``SlowDown``, 503), timeouts and dropped connections are transient on any object store,
so one failed request must not stop a training run; a failure that outlasts the budget stops it, naming the object
and the store's reason (``ObjectStoreError``), and never skips a sample.

Backoff is exponential with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015): ranks
that failed together do not retry together.  Failures that waiting cannot fix (an absent object, refused
credentials, an absent bucket) are raised at once.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, Callable, Iterable, TypeVar

from speechpack.loader.pack.object_store import ObjectStoreError, ObjectStorePackFiles
from speechpack.schemas.errors import PackFormatError

T = TypeVar("T")

#: First wait and longest single wait between attempts (seconds).
FIRST_DELAY = 0.1
MAX_DELAY = 5.0
#: Reasons that no wait can fix (botocore's error codes and messages): raised at the first attempt.
PERMANENT = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket", "Forbidden",
             "NoCredentials", "Unable to locate credentials", "InvalidBucketName")


def is_permanent(err: BaseException) -> bool:
    """Whether waiting cannot fix ``err``: an absent object, or a reason in ``PERMANENT``."""
    if isinstance(err, FileNotFoundError):
        return True
    reason = str(getattr(err, "strerror", "") or err)
    return any(word in reason for word in PERMANENT)


def with_retries(request: Callable[[], T], budget_seconds: float, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> T:
    """``request()``, retried on ``ObjectStoreError`` (and ``OSError``) until it succeeds or ``budget_seconds``
    have passed since the first attempt; then its last error is raised as it was (it names the object)."""
    start = clock()
    deadline = start + budget_seconds
    delay = FIRST_DELAY
    attempts = 0
    while True:
        attempts += 1
        try:
            return request()
        except (ObjectStoreError, OSError) as err:
            if is_permanent(err):
                raise
            left = deadline - clock()
            if left <= 0:
                if isinstance(err, ObjectStoreError):
                    raise ObjectStoreError(err.filename, err.action, f"{err.strerror}; gave up after {attempts} "
                                           f"attempt{'s' if attempts > 1 else ''} in {clock() - start:.1f} "
                                           f"s") from None
                raise
            sleep(min(left, random.uniform(0, delay)))
            delay = min(MAX_DELAY, delay * 2)


#: Bytes per range request: large enough that a store's per-request latency is small beside the transfer
#: (object stores serve 8-16 MB ranges at full bandwidth), aligned so that ranges never straddle a block.
BLOCK_BYTES = 16 << 20
#: Fetches of a file whose hash does not match before it is an error (the first plus one more).
FETCH_ATTEMPTS = 2


class CacheIntegrityError(PackFormatError):
    """A file's bytes from the store do not match ``dataset.json``, twice."""


def _fetch_once(store: ObjectStorePackFiles, rel: str, size: int, fp: BinaryIO, retry_seconds: float) -> str:
    """Write file ``rel`` to ``fp`` from its start; returns the sha256 of what was written."""
    digest = hashlib.sha256()
    fp.seek(0)
    fp.truncate()
    if size <= BLOCK_BYTES:
        data = with_retries(lambda: store.read_bytes(rel), retry_seconds)
        digest.update(data)
        fp.write(data)
        return digest.hexdigest()
    for start in range(0, size, BLOCK_BYTES):
        stop = min(start + BLOCK_BYTES, size)
        block = with_retries(lambda: store.read_range(rel, start, stop), retry_seconds)
        if len(block) != stop - start:
            raise CacheIntegrityError(f"{store.where(rel)}: the store returned {len(block)} bytes for range "
                                      f"[{start}, {stop}) of a {size}-byte file (the object changed; open the pack "
                                      f"again)")
        digest.update(block)
        fp.write(block)
    return digest.hexdigest()


def fetch_verified(store: ObjectStorePackFiles, rel: str, size: int, sha256: str, fp: BinaryIO,
                   retry_seconds: float) -> None:
    """Write file ``rel`` of ``store`` to ``fp``, its whole-file sha256 checked against ``sha256`` (see the module
    docstring); raises ``ObjectStoreError`` when the store keeps failing and ``CacheIntegrityError`` when the bytes
    never match."""
    got = None
    for _attempt in range(FETCH_ATTEMPTS):
        got = _fetch_once(store, rel, size, fp, retry_seconds)
        if got == sha256 and fp.tell() == size:
            return
    raise CacheIntegrityError(f"{store.where(rel)}: sha256 {got} does not match dataset.json ({sha256}) after "
                              f"{FETCH_ATTEMPTS} fetches: the object is corrupt on the store, or the pack was "
                              f"replaced since it was opened (validate it: speechpack validate {store.location})")


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def fetch_pool(workers: int) -> ThreadPoolExecutor:
    """This process's pool of ``workers`` fetch threads (``cache.fetches``), shared by every pack it opens.

    Why threads: a fetch waits on the store (latency, then the transfer) and hashes with the GIL released, so a
    few threads keep several requests in flight; each fetch still takes its entry's lock and reserves its size
    under the cache's space lock (``loader.cache.node_cache``), so one fetch per file per node and the limit hold
    as for one at a time.  Keyed by process id: a forked DataLoader worker inherits no live thread, and makes its
    own pool."""
    key = (os.getpid(), workers)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="speechpack-fetch")
        return pool


def run_all(pool: ThreadPoolExecutor, calls: Iterable[Callable[[], T]]) -> list[T]:
    """Every call of ``calls`` run on ``pool`` at once; their results in order once all have finished.  The first
    error (in order) is raised after every call has ended, so no fetch is left running behind an error.  Never
    called from a thread of ``pool`` itself (it would wait on its own queue)."""
    futures = [pool.submit(call) for call in calls]
    error: BaseException | None = None
    results = []
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as err:  # noqa: BLE001 - re-raised below, after the other fetches ended
            results.append(None)
            error = error or err
    if error is not None:
        raise error
    return results


__all__ = ["BLOCK_BYTES", "CacheIntegrityError", "fetch_pool", "fetch_verified", "is_permanent", "run_all",
           "with_retries"]
