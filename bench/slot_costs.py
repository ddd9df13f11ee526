"""What a TSE batch costs to build, by where its memory is: the diagnosis behind "Scaling with workers".

    python bench/slot_costs.py [--batches 120] [--repeats 3] [--tmp-dir DIR] [--keep]

One process, no DataLoader, the TSE pack of ``bench/worker_scaling.py`` (16 mixtures of 4 s per batch, 16 MB of
output).  Interleaved per repeat, CPU time per batch (``time.process_time``) of ``TseBatchBuilder.build``:

- **heap, dropped**: numpy arrays freed before the next batch (the heap hands the same block back, still cached);
- **heap, 4 alive** with numpy's huge-page advice on and off: fresh arrays every batch, as when a consumer holds
  batches (page faults; 2 MB pages against 4 KB ones);
- **slots 1 / 4**: built into ``loader.transport.batch_ring`` slots (``build_group_in``), one slot reused or four in
  turn, as a DataLoader worker does; and four in turn left on 4 KB pages (``loader.transport.huge_pages`` not asked to
  collapse them), the slots before huge pages.

Medians over the repeats; prints the load average, which moves every figure.

``--cycled-mb 8 16 32 64 128``: instead, how much writing costs by how much memory a writer cycles through (the
question behind a worker's slots: a prefetching worker writes each batch into memory it last wrote one or more
messages ago).  Rows of 4 s are cast-copied from an int16 array (19 MB, random values) and scaled in place, as the
TSE builder decodes, into buffers of each size on huge pages, round and round; CPU microseconds per MB written,
median of ``--repeats``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from speechpack.loader import build_loader  # noqa: E402
from speechpack.loader.transport import batch_ring, huge_pages  # noqa: E402
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays  # noqa: E402
from workdir import bench_workdir  # noqa: E402
from worker_scaling import tse_config  # noqa: E402

try:  # numpy 2 keeps it in numpy._core, numpy 1 in numpy.core
    from numpy._core import multiarray as _multiarray
except ImportError:  # pragma: no cover
    from numpy.core import multiarray as _multiarray


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tmp-dir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--cycled-mb", type=int, nargs="*", default=[],
                        help="measure writes by the memory cycled through instead (MB per size)")
    args = parser.parse_args(argv)
    if args.cycled_mb:
        cycled(args.cycled_mb, args.repeats)
        return 0
    with bench_workdir("slot-costs-", args.tmp_dir, args.keep, print) as workdir:
        dataset = build_loader(tse_config(workdir, 0), "train", num_workers=0, seed=0).dataset
        plan = dataset.plan(0)
        builder = dataset.builder

        def build(i: int, arrays: BatchArrays = NUMPY) -> dict:
            b = i % len(plan)
            items, valid = plan.batch(b)
            return builder.build(items, valid, 0, int(plan.global_batch[b]), arrays)

        def heap_dropped() -> None:
            for i in range(args.batches):
                build(i)

        def heap_alive(huge: bool):
            def run() -> None:
                before = _multiarray._get_madvise_hugepage()
                _multiarray._set_madvise_hugepage(huge)
                alive = []
                for i in range(args.batches):
                    alive = [*alive[-3:], build(i)]
                _multiarray._set_madvise_hugepage(before)
            return run

        def slots(count: int, huge: bool = True):
            ring = batch_ring.BatchRing(1, count)

            def run() -> None:  # the last count - 1 slots stay held, so claims cycle through all count slots
                before, huge_pages._collapse_works = huge_pages._collapse_works, huge and huge_pages._collapse_works
                held = []
                for i in range(args.batches):
                    slot = ring.claim(0)
                    ring.build_group_in(0, slot, lambda arrays: [lambda: build(i, arrays)])
                    held.append(slot)
                    if len(held) == count:
                        ring.abandon(0, held.pop(0))
                for slot in held:
                    ring.abandon(0, slot)
                huge_pages._collapse_works = before
            return run

        jobs = {"heap, dropped": heap_dropped, "heap, 4 alive, huge pages": heap_alive(True),
                "heap, 4 alive, 4 KB pages": heap_alive(False), "slots: 1 reused": slots(1),
                "slots: 4 in turn": slots(4), "slots: 4 in turn, 4 KB pages": slots(4, huge=False)}
        for job in jobs.values():  # warm-up: page cache, slots
            job()
        times: dict[str, list[float]] = {name: [] for name in jobs}
        for repeat in range(args.repeats):
            for name, job in (jobs.items() if repeat % 2 == 0 else list(jobs.items())[::-1]):
                started = time.process_time()
                job()
                times[name].append((time.process_time() - started) / args.batches * 1e3)
        print(f"load average {os.getloadavg()[0]:.1f}\n\n| build into | CPU ms per batch (median) | runs |\n|---|---|---|")
        for name, values in times.items():
            print(f"| {name} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
    return 0


def cycled(sizes_mb: list[int], repeats: int) -> None:
    """CPU microseconds per MB written when the writes go round buffers of each size (module docstring)."""
    source = (np.random.default_rng(0).standard_normal(16000 * 600) * 3000).astype(np.int16)
    row = 64000  # samples: a 4 s row at 16 kHz, 256 kB of float32
    print(f"load average {os.getloadavg()[0]:.1f}\n\n| MB cycled through | CPU us per MB written (median) | runs |\n"
          f"|---|---|---|")
    for size in sizes_mb:
        rows = max(1, (size << 20) // (row * 4))
        buffer = np.zeros((rows, row), dtype=np.float32)  # numpy advises huge pages for arrays this large
        rounds = max(1, 512 // size)
        runs = []
        for _ in range(repeats):
            started = time.process_time()
            for turn in range(rounds):
                for r in range(rows):
                    begin = (r * 7919 + turn * 104729) % (len(source) - row)
                    out = buffer[r]
                    out[...] = source[begin:begin + row]
                    out *= np.float32(1 / 32768)
            runs.append((time.process_time() - started) * 1e6 / (rounds * rows * row * 4 / (1 << 20)))
        print(f"| {size} | {statistics.median(runs):.0f} | {', '.join(f'{v:.0f}' for v in runs)} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
