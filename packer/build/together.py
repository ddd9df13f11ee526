"""Calls that mostly wait for the disk, run at the same time: the files a step fsyncs before it renames them.

Closing a shard fsyncs its stream files and its ``index.json``; committing a pack fsyncs each file of
``columns/``.  One after the other, each fsync waits for its own journal commit and disk flush (3-5 ms each on
the virtual disks builds run on, longer than writing the small files); started together, the file system commits
them at once and the waits overlap.  Each file is still fsynced before anything renames or names it, so the
guarantees of docs/building.md ("Durability") are unchanged.
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence


def run_together(calls: Sequence[Callable[[], object]]) -> list:
    """Run every call, each on its own thread but the last (on this one), and return their results in order.

    Every call runs to its end even when another fails (nothing is left half done behind the caller's back); then
    the first failure, in the order of ``calls``, is raised."""
    if len(calls) <= 1:
        return [call() for call in calls]
    results: list = [None] * len(calls)
    errors: list = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as err:  # raised below, in the caller's thread
            errors[index] = err

    threads = [threading.Thread(target=run, args=(index,), name="speechpack-fsync", daemon=True)
               for index in range(len(calls) - 1)]
    for thread in threads:
        thread.start()
    run(len(calls) - 1)
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results


__all__ = ["run_together"]
