"""Store requests retried with backoff: throttling (``SlowDown``, 503), timeouts and dropped connections are
transient on any object store, so one failed request must not stop a training run; a failure that outlasts the
budget stops it, naming the object and the store's reason (``ObjectStoreError``), and never skips a sample.

Backoff is exponential with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015): ranks
that failed together do not retry together.  Failures that waiting cannot fix (an absent object, refused
credentials, an absent bucket) are raised at once.
"""

from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

from speechpack.loader.pack.object_store import ObjectStoreError

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


__all__ = ["is_permanent", "with_retries"]
