"""The benchmarks' scratch directory: created under ``--tmp-dir`` (or the system temp), removed afterwards
unless ``--keep`` asks to look at it; and emptying the page cache of its files for the cold-read measurements."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Callable, Iterator


@contextlib.contextmanager
def bench_workdir(prefix: str, tmp_dir: str | None, keep: bool,
                  log: Callable[[str], None] = print) -> Iterator[str]:
    workdir = tempfile.mkdtemp(prefix=prefix, dir=tmp_dir)
    try:
        yield workdir
    finally:
        if keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def drop_page_cache(paths: list[str]) -> None:
    """Evict every page of ``paths`` from the page cache (written back first; clean, unmapped pages go, so map
    nothing of them yet; no root needed)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
