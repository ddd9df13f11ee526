"""What making every build resumable costs: the build state's bytes and the time spent writing it.

    python bench/resume_state_cost.py [--minutes 30] [--repeats 3] [--shard-bytes 10MB]

Every build records its plan (``.tmp-plan.json``) and a receipt per shard (``.tmp-receipts/``), and removes them
once ``dataset.json`` is written (``packer.build.state``).  On ``bench/pack_throughput.py``'s corpus (real
recordings, mixed, packed to 16 kHz) this times plain ``--workers 1`` builds with the state's steps timed
separately (the plan's fingerprint, writing the plan, every receipt, removing the state), and prints the state's
size: the compact plan a plain build writes, the whole plan an array job (``--shards``) writes, and the receipts,
per sample.  Medians of ``--repeats`` runs after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pack_throughput import build_corpus, read_list, warm_page_cache  # noqa: E402
from speechpack.packer.build import output_dir, plan as plan_module, run as run_module, shards, state  # noqa: E402
from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402
from speechpack.schemas.units import parse_size  # noqa: E402
from workdir import bench_workdir  # noqa: E402


class StateTimer:
    """Wraps the build state's steps where the build calls them, summing their wall time."""

    def __init__(self):
        self.seconds = 0.0
        self.sizes: dict[str, int] = {}
        self._depth = 0  # a timed step inside another is counted once

    def wrap(self, module, name: str, measure=None) -> None:
        original = getattr(module, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1
                if not self._depth:
                    self.seconds += time.perf_counter() - started
                if measure is not None:
                    measure(*args)

        setattr(module, name, timed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shard-bytes", default="10MB")
    parser.add_argument("--tmp-dir", default=None)
    args = parser.parse_args(argv)
    shard_bytes = parse_size(args.shard_bytes)
    timer = StateTimer()
    receipts: list[int] = []

    def plan_sizes(pack_dir, plan, *args, **kwargs):
        recorded = state.RecordedPlan.of(plan, "0" * 64)
        timer.sizes["compact"] = len(json.dumps(recorded.to_dict(False), sort_keys=True))
        timer.sizes["full"] = len(json.dumps(recorded.to_dict(True), sort_keys=True))
        timer.sizes["samples"] = sum(recorded.cuts)

    def receipt_size(pack_dir, receipt):
        receipts.append(os.path.getsize(state.receipt_path(pack_dir, receipt.shard.directory)))

    timer.wrap(output_dir, "record_plan", plan_sizes)
    timer.wrap(shards, "write_receipt", receipt_size)
    timer.wrap(run_module, "clear_state")
    timer.wrap(plan_module.BuildPlan, "fingerprint")
    with bench_workdir("speechpack-state-", args.tmp_dir, keep=False) as workdir:
        list_path, _ = build_corpus(workdir, args.minutes, 10.0, 0)
        warm_page_cache(read_list(list_path))
        totals, states = [], []
        for run in range(args.repeats + 1):
            out = os.path.join(workdir, "pack")
            shutil.rmtree(out, ignore_errors=True)
            timer.seconds = 0.0
            receipts.clear()
            started = time.perf_counter()
            build_wesep(list_path, BuildOptions(out=out, shard_bytes=shard_bytes, progress=False))
            if run:  # the first is a warm-up
                totals.append(time.perf_counter() - started)
                states.append(timer.seconds)
        samples = timer.sizes["samples"]
        print(f"corpus: {samples} samples, {len(receipts)} shards of at most {args.shard_bytes}; medians of "
              f"{args.repeats} plain builds (--workers 1)")
        print(f"build: {statistics.median(totals):.3f} s; build state (fingerprint, plan, receipts, removal): "
              f"{statistics.median(states) * 1000:.1f} ms = {statistics.median(states) / statistics.median(totals):.2%}")
        print(f"compact plan: {timer.sizes['compact']} B ({timer.sizes['compact'] / samples:.1f} B/sample); whole "
              f"plan (--shards): {timer.sizes['full']} B ({timer.sizes['full'] / samples:.1f} B/sample); receipts: "
              f"{sum(receipts)} B ({sum(receipts) / samples:.1f} B/sample, {sum(receipts) / len(receipts):.0f} "
              f"B/shard)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
