"""Planning speed of budget batching, and padding against Lhotse's DynamicBucketingSampler on the same lengths.

    python bench/plan_throughput.py [--items 10000000] [--compare-items 100000] [--budget 8192] [--window 512]

Lengths are AVA-like: lognormal frames (median 64, sigma 1.2, capped at 20,000), 100 frames per second.

- **speed**: ``tile_windows`` (train_window ``--window``) then ``make_budget_plan`` (linear cost, budget
  ``--budget`` padded frames) for one rank of one epoch of ``--items`` items; best of 3;
- **padding**: the same lengths (``--compare-items`` items, whole, no train window) batched by
  (a) speechpack budget batching, (b) Lhotse 1.33 ``DynamicBucketingSampler(max_duration=budget / 100 s,
  num_buckets=30, shuffle=True)`` (its budget is the sum of durations, so its padded size may exceed it),
  (c) naive random batches of the mean batch size of (a).  Reported: batches, mean rows, frame utilisation
  (real / padded frames), the share of batches over the budget and the largest padded batch.  Lhotse is optional
  (``pip install lhotse==1.33.0``, not a dependency); without it (b) is skipped.

Measured figures: ``docs/performance.md``, "Planning (budget batching)".
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from speechpack.loader.plan.batching import BudgetArgs, make_budget_plan, plan_lengths
from speechpack.loader.plan.train_windows import tile_windows

FRAME_RATE = 100


def ava_lengths(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(np.exp(rng.normal(np.log(64), 1.2, n)).astype(np.int64) + 1, 20000)


def stats(name: str, batches: list[np.ndarray], budget: int) -> dict:
    rows = np.asarray([len(b) for b in batches])
    longest = np.asarray([b.max() for b in batches])
    padded = rows * longest
    real = sum(int(b.sum()) for b in batches)
    return {"job": name, "batches": len(batches), "mean_rows": rows.mean(), "utilisation": real / padded.sum(),
            "over_budget": float((padded > budget).mean()), "largest": int(padded.max())}


def speed(items: int, budget: int, window: int) -> None:
    lengths = ava_lengths(items)
    best_tile = best_plan = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        w = tile_windows(lengths, window, 0)
        t1 = time.perf_counter()
        plan = make_budget_plan(w.fed_length, BudgetArgs(budget=budget), 0, 0, 0, 1, True, "pad")
        t2 = time.perf_counter()
        best_tile, best_plan = min(best_tile, t1 - t0), min(best_plan, t2 - t1)
    pl = plan_lengths(w.fed_length, plan)
    print(f"speed: {items:,} items -> {len(w):,} chunks, {len(plan):,} batches; tile {best_tile:.2f} s, "
          f"plan {best_plan:.2f} s, total {best_tile + best_plan:.2f} s; utilisation "
          f"{w.fed_length.sum() / (pl[:, 0] * pl[:, 1]).sum():.5f}")


def compare(items: int, budget: int) -> None:
    lengths = ava_lengths(items, seed=1)
    plan = make_budget_plan(lengths, BudgetArgs(budget=budget), 0, 0, 0, 1, True, "pad")
    ours = [lengths[plan.batch(b)[0]] for b in range(len(plan))]
    rows = [stats("speechpack budget", ours, budget)]
    try:
        from lhotse.cut import CutSet
        from lhotse.dataset import DynamicBucketingSampler
        from lhotse.testing.dummies import dummy_cut
    except ImportError:
        print("lhotse not installed: (b) skipped")
    else:
        cuts = CutSet.from_cuts(dummy_cut(i, duration=float(n) / FRAME_RATE) for i, n in enumerate(lengths))
        sampler = DynamicBucketingSampler(cuts, max_duration=budget / FRAME_RATE, num_buckets=30, shuffle=True,
                                          seed=0)
        t0 = time.perf_counter()
        theirs = [np.asarray([int(round(c.duration * FRAME_RATE)) for c in batch]) for batch in sampler]
        print(f"lhotse: {time.perf_counter() - t0:.1f} s to sample {items:,} cuts")
        rows.append(stats("lhotse 1.33 DynamicBucketingSampler", theirs, budget))
    size = max(int(round(np.mean([len(b) for b in ours]))), 1)
    order = np.random.default_rng(0).permutation(items)
    rows.append(stats("naive random batches", [lengths[order[i:i + size]] for i in range(0, items, size)], budget))
    print("| job | batches | mean rows | utilisation | batches over budget | largest padded batch |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['job']} | {r['batches']:,} | {r['mean_rows']:.1f} | {100 * r['utilisation']:.2f} % | "
              f"{100 * r['over_budget']:.1f} % | {r['largest']:,} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000_000)
    parser.add_argument("--compare-items", type=int, default=100_000)
    parser.add_argument("--budget", type=int, default=8192)
    parser.add_argument("--window", type=int, default=512)
    args = parser.parse_args()
    speed(args.items, args.budget, args.window)
    compare(args.compare_items, args.budget)


if __name__ == "__main__":
    main()
