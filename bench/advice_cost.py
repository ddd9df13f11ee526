"""What announcing a batch's windows costs, warm and cold: per-window ``madvise(MADV_WILLNEED)``, one
``process_madvise`` for the batch (``loader.pack.readahead``), and per-window ``MADV_POPULATE_READ``.

    python bench/advice_cost.py [--lines 960] [--batches 60] [--repeats 5] [--tmp-dir DIR] [--keep]

**Pack.** ``build_corpus`` of ``bench/loader_throughput.py`` with 2-5 s lines (real recordings), packed by
``build_wesep``; the reads are the ``mix`` and ``target`` streams' windows of 2 s (64 KB of int16), three per
mixture (the mixture and two targets), in batches of 8 mixtures, the same windows for every method.

**Methods** (each then copies every window into a float32 row, as the TSE builder does):

- ``none``: no advice (kernel readahead on faults);
- ``madvise each``: ``MADV_WILLNEED`` on each window, one system call each (the loader before this change);
- ``process_madvise batch``: the batch's windows in one ``process_madvise`` call (the loader now);
- ``POPULATE_READ each``: ``MADV_POPULATE_READ`` (Linux 5.14+) on each window: synchronous, so the pages are
  read and mapped before the copy, one window after another.

**Warm**: the pack in the page cache and already mapped by the process (as in a training epoch after the first);
``--repeats`` passes, best and median per window.  **Cold**: before each pass the pack is unmapped and evicted with
``posix_fadvise(POSIX_FADV_DONTNEED)``, then mapped again.  Figures: ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import mmap
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from speechpack.loader.pack.readahead import will_need_ranges  # noqa: E402
from workdir import bench_workdir, drop_page_cache  # noqa: E402

CHUNK = 32000
BATCH = 8
WINDOWS_PER_MIXTURE = 3
MADV_POPULATE_READ = 22  # linux/mman.h (Python's mmap module does not name it)
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def _aligned(address: int, length: int) -> tuple[int, int]:
    start = address - address % mmap.PAGESIZE
    return start, address + length - start


def _map(paths: list[str]) -> list[tuple[mmap.mmap, np.ndarray]]:
    maps = []
    for path in paths:
        with open(path, "rb") as fp:
            mapping = mmap.mmap(fp.fileno(), 0, access=mmap.ACCESS_READ)
        array = np.load(path, mmap_mode="r")
        maps.append((mapping, np.frombuffer(mapping, dtype=np.int16, count=array.size, offset=array.offset)))
        del array
    return maps


def run_pass(method: str, arrays: list[np.ndarray], windows: np.ndarray, out: np.ndarray) -> float:
    """Every batch: advise by ``method``, then copy its windows; returns seconds."""
    scale = np.float32(1 / 32768)
    started = time.perf_counter()
    per_batch = BATCH * WINDOWS_PER_MIXTURE
    for first in range(0, len(windows), per_batch):
        batch = windows[first:first + per_batch].tolist()
        views = [arrays[a][s:s + CHUNK] for a, s in batch]
        if method == "madvise each":
            for view in views:
                _LIBC.madvise(*_aligned(view.__array_interface__["data"][0], view.nbytes), mmap.MADV_WILLNEED)
        elif method == "process_madvise batch":
            will_need_ranges([(view.__array_interface__["data"][0], view.nbytes) for view in views])
        elif method == "POPULATE_READ each":
            for view in views:
                _LIBC.madvise(*_aligned(view.__array_interface__["data"][0], view.nbytes), MADV_POPULATE_READ)
        for r, view in enumerate(views):
            row = out[r]
            row[...] = view
            row *= scale
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=960)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    from loader_throughput import build_corpus
    from speechpack.packer.adapters.wesep import build_wesep
    from speechpack.packer.build.run import BuildOptions
    methods = ("none", "madvise each", "process_madvise batch", "POPULATE_READ each")
    with bench_workdir("advice-", args.tmp_dir, args.keep, print) as workdir:
        list_path, _ = build_corpus(workdir, args.lines, args.seed, (2.0, 5.0))
        build_wesep(list_path, BuildOptions(out=os.path.join(workdir, "pack"), workers=1, progress=False))
        paths = sorted(glob.glob(os.path.join(workdir, "pack", "**", "*.npy"), recursive=True))
        paths = [p for p in paths if os.path.basename(p) in ("mix.npy", "target.npy")]
        paths = [p for p in paths if np.load(p, mmap_mode="r").size > 4 * CHUNK]
        sizes = [np.load(p, mmap_mode="r").size for p in paths]
        rng = np.random.default_rng(args.seed)
        count = args.batches * BATCH * WINDOWS_PER_MIXTURE
        which = rng.integers(0, len(paths), count)
        starts = np.array([rng.integers(0, sizes[a] - CHUNK) for a in which])
        windows = np.stack([which, starts], axis=1)
        out = np.empty((BATCH * WINDOWS_PER_MIXTURE, CHUNK), dtype=np.float32)
        print(f"pack: {sum(os.path.getsize(p) for p in paths) / 1e6:.0f} MB of mix/target; {count} windows of "
              f"{CHUNK * 2 // 1024} KB in {args.batches} batches; load average {os.getloadavg()[0]:.1f}")
        results = {("warm", m): [] for m in methods} | {("cold", m): [] for m in methods}
        for path in paths:
            with open(path, "rb") as fp:
                while fp.read(1 << 22):
                    pass
        maps = _map(paths)
        arrays = [a for _, a in maps]
        for method in methods:
            run_pass(method, arrays, windows, out)  # fault every page in once
        for repeat in range(args.repeats):
            for method in (methods if repeat % 2 == 0 else methods[::-1]):
                results[("warm", method)].append(run_pass(method, arrays, windows, out))
        del arrays
        maps = None  # unmapped: mapped pages cannot be evicted
        for repeat in range(args.repeats):
            for method in (methods if repeat % 2 == 0 else methods[::-1]):
                drop_page_cache(paths)
                fresh = _map(paths)
                results[("cold", method)].append(run_pass(method, [a for _, a in fresh], windows, out))
                fresh = None
        print("\n| cache | method | best µs per window | median µs per window |\n|---|---|---|---|")
        for (mode, method), seconds in results.items():
            print(f"| {mode} | {method} | {min(seconds) / count * 1e6:.1f} | "
                  f"{statistics.median(seconds) / count * 1e6:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
