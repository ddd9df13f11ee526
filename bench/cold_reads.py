"""Cold random reads: bytes fetched from disk per useful byte, and time, for plain mmap against speechpack's path.

    python bench/cold_reads.py [--lines 320] [--reads 400] [--batch 16] [--repeats 3] [--tmp-dir DIR] [--keep]

A training epoch reads short windows (4 s, 128 KB of int16) at random places of a pack.  When the pack is not in
the page cache, how the file is mapped decides how many bytes the disk delivers.  Every run drops the pack's
pages first with ``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root needed; pages still mapped by a process stay, so
every method unmaps before the next drop), checks with ``mincore`` that nothing of the pack is left in the page
cache, then reads ``--reads`` random 4 s windows of the ``mix`` and ``target`` streams (the same windows for every
method), copying each into a float32 row as the loader does.

Measured per method: **amplification** = bytes fetched / bytes the windows hold, from ``/proc/self/io``
``read_bytes`` (what this process made the block layer read) and, as a cross-check that needs no accounting,
from the pages ``mincore`` finds resident afterwards; and the **time** of the reads (best and median of
``--repeats``).  Methods:

- ``mmap``: ``np.load(mmap_mode="r")``, default kernel readahead (what speechpack did before);
- ``mmap + MADV_RANDOM``: readahead off, each fault reads its own page;
- ``mmap + WILLNEED``: default readahead, but ``MADV_WILLNEED`` on the window's pages before copying;
- ``pread``: ``os.preadv`` of exactly the window's bytes into a buffer (no mapping);
- ``speechpack``: ``Pack.read_segment(stream, segment, start, stop)`` (``MADV_WILLNEED`` on the window, then
  the copy);
- ``speechpack, batch prefetch``: ``Pack.will_need`` for a whole batch of ``--batch`` windows first, then
  ``Pack.stored_segment`` copies: the disk gets a batch of requests at once, as a builder that prefetches would;
- ``speechpack, will_need_view per batch``: the same through ``loader.pack.will_need_view`` on the windows of the
  stored views, which is what the TSE batch builder does (offline and online mixing) before it copies a batch.

Then the same reads on a warm cache (everything resident), in microseconds per window: the price of the advice
when there is nothing to fetch.  The throughput benchmark (``bench/loader_throughput.py``) is the warm-path check
of the loader as a whole.  Figures and their reading: ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import glob
import mmap
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loader_throughput import CHUNK_LEN, _log, build_corpus  # noqa: E402
from workdir import bench_workdir, drop_page_cache  # noqa: E402
from speechpack.loader.pack import open_pack, will_need_view  # noqa: E402
from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402
from speechpack.schemas.npyfile import read_npy_header  # noqa: E402

STREAMS = ("mix", "target")
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


# ------------------------------------------------------------------------------------------------ the page cache


def resident_bytes(paths: list[str]) -> int:
    """Bytes of ``paths`` in the page cache, counted with ``mincore`` on a fresh mapping (touches nothing)."""
    page = mmap.PAGESIZE
    total = 0
    for path in paths:
        size = os.path.getsize(path)
        if size == 0:
            continue
        with open(path, "rb") as fp:
            mapping = mmap.mmap(fp.fileno(), 0, access=mmap.ACCESS_READ)
        view = np.frombuffer(mapping, dtype=np.uint8)
        pages = -(-size // page)
        vec = (ctypes.c_ubyte * pages)()
        if _LIBC.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vec) != 0:
            raise OSError(ctypes.get_errno(), f"mincore failed on {path}")
        total += int(np.count_nonzero(np.frombuffer(vec, dtype=np.uint8) & 1)) * page
        del view
        mapping.close()
    return total


def io_read_bytes() -> int | None:
    """``read_bytes`` of ``/proc/self/io`` (None where the kernel does not account it)."""
    try:
        with open("/proc/self/io", encoding="ascii") as fp:
            for line in fp:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# ----------------------------------------------------------------------------------------------------- windows

def choose_windows(pack, count: int, seed: int) -> list[tuple[str, int, int]]:
    """``count`` random (stream, segment, start) 4 s windows, spread over both streams and the whole pack."""
    rng = np.random.default_rng(seed)
    windows = []
    for _ in range(count):
        stream = STREAMS[int(rng.integers(len(STREAMS)))]
        table = pack.streams[stream]
        segment = int(rng.integers(len(table.offset)))
        length = int(table.length[segment])
        start = int(rng.integers(0, max(length - CHUNK_LEN, 0) + 1))
        windows.append((stream, segment, start))
    return windows


class Reader:
    """The windows as byte ranges of the stream files (first channel of each segment: every window is mono)."""

    def __init__(self, pack, windows):
        self.pack = pack
        self.windows = windows
        self.paths = {}
        self.ranges = []  # (path, element offset, elements, factor)
        for stream, segment, start in windows:
            table = pack.streams[stream]
            shard = int(table.shard[segment])
            path = os.path.join(pack.path, pack.manifest.shards[shard].directory, f"{stream}.npy")
            self.paths[path] = read_npy_header(path).data_offset
            count = min(CHUNK_LEN, int(table.length[segment]) - start)
            self.ranges.append((path, int(table.offset[segment]) + start, count,
                                float(table.scale[segment]) / 32768.0))
        self.useful = sum(count * 2 for _p, _o, count, _f in self.ranges)
        self.out = np.empty((len(windows), CHUNK_LEN), dtype=np.float32)

    def _copy(self, i: int, view: np.ndarray, factor: float) -> None:
        np.multiply(view, np.float32(factor), out=self.out[i, :len(view)], casting="unsafe")

    # Each method maps what it needs (not timed) and returns the reads (timed).

    def mmap_plain(self):
        arrays = {p: np.load(p, mmap_mode="r").view(np.ndarray) for p in self.paths}

        def run():
            for i, (path, offset, count, factor) in enumerate(self.ranges):
                self._copy(i, arrays[path][offset:offset + count], factor)
        return run

    def _advised(self, advice: int | None):
        maps = {}
        for path, data_offset in self.paths.items():
            with open(path, "rb") as fp:
                mapping = mmap.mmap(fp.fileno(), 0, access=mmap.ACCESS_READ)
            if advice is not None:
                mapping.madvise(advice)
            maps[path] = (mapping, np.frombuffer(mapping, dtype="<i2", offset=data_offset), data_offset)
        return maps

    def mmap_random(self):
        maps = self._advised(mmap.MADV_RANDOM)

        def run():
            for i, (path, offset, count, factor) in enumerate(self.ranges):
                self._copy(i, maps[path][1][offset:offset + count], factor)
        return run

    def mmap_willneed(self):
        maps = self._advised(None)

        def run():
            for i, (path, offset, count, factor) in enumerate(self.ranges):
                mapping, array, data_offset = maps[path]
                start = data_offset + offset * 2
                aligned = start - start % mmap.PAGESIZE
                mapping.madvise(mmap.MADV_WILLNEED, aligned, start + count * 2 - aligned)
                self._copy(i, array[offset:offset + count], factor)
        return run

    def pread(self):
        buffer = np.empty(CHUNK_LEN, dtype="<i2")

        def run():
            fds = {p: os.open(p, os.O_RDONLY) for p in self.paths}
            try:
                for i, (path, offset, count, factor) in enumerate(self.ranges):
                    view = buffer[:count]
                    got = os.preadv(fds[path], [memoryview(view).cast("B")], self.paths[path] + offset * 2)
                    if got != count * 2:
                        raise OSError(f"{path}: short read ({got} of {count * 2} bytes)")
                    self._copy(i, view, factor)
            finally:
                for fd in fds.values():
                    os.close(fd)
        return run

    def _mapped_pack(self):
        """A fresh Pack with every stream file this run reads already mapped (mapping is not what we time)."""
        pack = open_pack(self.pack.path)
        for stream, segment, _start in self.windows:
            pack.stream_array(int(pack.streams[stream].shard[segment]), stream)
        return pack

    def speechpack(self):
        pack = self._mapped_pack()

        def run():
            for i, (stream, segment, start) in enumerate(self.windows):
                count = min(CHUNK_LEN, int(pack.streams[stream].length[segment]) - start)
                self.out[i, :count] = pack.read_segment(stream, segment, start, start + count)[0]
        return run

    def speechpack_batched(self, batch: int):
        pack = self._mapped_pack()

        def run():
            for first in range(0, len(self.windows), batch):
                chunk = self.windows[first:first + batch]
                for stream, segment, start in chunk:
                    pack.will_need(stream, segment, start, start + CHUNK_LEN)
                for i, (stream, segment, start) in enumerate(chunk, start=first):
                    stored, factor = pack.stored_segment(stream, segment)
                    self._copy(i, stored[0, start:start + CHUNK_LEN], factor)
        return run


    def speechpack_views(self, batch: int):
        pack = self._mapped_pack()

        def run():
            for first in range(0, len(self.windows), batch):
                chunk = [(i, *pack.stored_segment(stream, segment), start)
                         for i, (stream, segment, start) in enumerate(self.windows[first:first + batch], start=first)]
                for _i, stored, _factor, start in chunk:
                    will_need_view(stored[0, start:start + CHUNK_LEN])
                for i, stored, factor, start in chunk:
                    self._copy(i, stored[0, start:start + CHUNK_LEN], factor)
        return run


# -------------------------------------------------------------------------------------------------------- main

def measure(reader: Reader, name: str, prepare, cold: bool) -> dict:
    """Drop the cache (``cold``), map (``prepare``), then time the reads; every mapping is gone on return."""
    paths = list(reader.paths)
    run = prepare()
    if cold:
        drop_page_cache(paths)
        left = resident_bytes(paths)
        if left > 0.01 * reader.useful:
            raise SystemExit(f"cannot drop the page cache here ({left} bytes of the pack stay resident after "
                             f"POSIX_FADV_DONTNEED): cold reads cannot be measured on this filesystem")
    before = io_read_bytes()
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    after = io_read_bytes()
    del run  # unmaps: the next drop must be able to evict every page
    fetched = None if before is None or after is None else after - before
    return {"name": name, "seconds": seconds, "fetched": fetched,
            "resident": resident_bytes(paths) if cold else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=320, help="mixture lines of the pack (default 320: 300 MB)")
    parser.add_argument("--reads", type=int, default=400, help="random 4 s windows per run (default 400)")
    parser.add_argument("--batch", type=int, default=16, help="windows per prefetched batch (default 16)")
    parser.add_argument("--repeats", type=int, default=3, help="cold runs per method (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pack", default=None, help="use this pack instead of building one")
    parser.add_argument("--tmp-dir", default=None, help="where corpus and pack go (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    if min(args.lines, args.reads, args.batch, args.repeats) < 1:
        parser.error("--lines, --reads, --batch and --repeats must be at least 1")
    with bench_workdir("speechpack-cold-bench-", args.tmp_dir, args.keep, _log) as workdir:
        pack_path = args.pack
        if pack_path is None:
            list_path, corpus = build_corpus(workdir, args.lines, args.seed)
            pack_path = os.path.join(workdir, "pack")
            build_wesep(list_path, BuildOptions(out=pack_path, workers=2, progress=False))
        pack = open_pack(pack_path)
        size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(pack_path, "shard-*", "*.npy")))
        reader = Reader(pack, choose_windows(pack, args.reads, args.seed))
        _log(f"pack: {len(pack)} samples, {size / 1e6:.0f} MB of streams in {len(pack.manifest.shards)} shard(s); "
             f"{args.reads} random 4 s windows = {reader.useful / 1e6:.1f} MB useful per run; "
             f"page size {mmap.PAGESIZE}; /proc/self/io read_bytes "
             f"{'available' if io_read_bytes() is not None else 'unavailable'}")
        methods = [("mmap (readahead)", reader.mmap_plain), ("mmap + MADV_RANDOM", reader.mmap_random),
                   ("mmap + WILLNEED per window", reader.mmap_willneed), ("pread per window", reader.pread),
                   ("speechpack read_segment", reader.speechpack),
                   (f"speechpack, will_need per batch of {args.batch}",
                    lambda: reader.speechpack_batched(args.batch)),
                   (f"speechpack, will_need_view per batch of {args.batch}",
                    lambda: reader.speechpack_views(args.batch))]
        cold = {name: [] for name, _ in methods}
        for _ in range(args.repeats):
            for name, run in methods:  # alternating, so drift in the machine hits every method alike
                cold[name].append(measure(reader, name, run, cold=True))
        warm = {name: [] for name, _ in methods}
        for _ in range(5):
            for name, run in methods:
                warm[name].append(measure(reader, name, run, cold=False))
        report(cold, warm, reader, args.reads)
    return 0


def report(cold: dict, warm: dict, reader: Reader, reads: int) -> None:
    base = "mmap (readahead)"
    base_best = min(r["seconds"] for r in cold[base])
    _log("\ncold page cache (dropped before every run):")
    _log(f"  {'method':<40} {'read_bytes / useful':>20} {'resident / useful':>18} {'best s':>8} {'median s':>9} "
         f"{'vs mmap':>8} {'warm us/window':>15}")
    for name, runs in cold.items():
        fetched = [r["fetched"] for r in runs if r["fetched"] is not None]
        amp = f"{statistics.median(fetched) / reader.useful:.2f}x" if fetched else "n/a"
        resident = f"{statistics.median(r['resident'] for r in runs) / reader.useful:.2f}x"
        best = min(r["seconds"] for r in runs)
        median = statistics.median(r["seconds"] for r in runs)
        warm_us = min(r["seconds"] for r in warm[name]) / reads * 1e6
        _log(f"  {name:<40} {amp:>20} {resident:>18} {best:8.3f} {median:9.3f} {base_best / best:7.2f}x "
             f"{warm_us:15.1f}")
    _log("\n('vs mmap': how many times faster than plain mmap, best against best; warm: best of 5 runs of the same "
         "windows with everything resident; mapping is never timed)")


if __name__ == "__main__":
    sys.exit(main())
