"""The benchmarks' scratch directory: created under ``--tmp-dir`` (or the system temp), removed afterwards
unless ``--keep`` asks to look at it."""

from __future__ import annotations

import contextlib
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
