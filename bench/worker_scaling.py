"""How the loader scales with DataLoader workers: ``num_workers=2`` against one process, for TSE, ASD and ASR.

    python bench/worker_scaling.py [--tasks tse asd asr] [--workers 2] [--repeats 3] [--tmp-dir DIR] [--keep]

Target (docs/performance.md): with 2 workers on 2 cores, at least 1.8x the batches per second of one process.

**Packs** (all from real recordings; each built by the task's own benchmark): **tse** ``build_corpus`` of
``bench/loader_throughput.py`` (2-speaker 8-12 s mixtures, 4 s chunks, batches of 16 mixtures); **asd** the
``asd`` pack of ``bench/asd_loader_throughput.py`` (faces from the real talking-face video where installed,
MuVAP's settings); **asr** the parquet corpus of ``bench/asr_loader_throughput.py`` built with ``build_parquet``,
waveform batches of 16.

**Method.** For each task two loaders of the same config: ``num_workers=0`` and ``num_workers=N`` (persistent
workers, as ``build_loader`` makes them).  ``torch.set_num_threads(1)`` in this process (a worker's default),
one untimed epoch of each, then ``--repeats`` epochs of each, alternating; the ratio is the median of the
per-repeat ratios.  Both loaders deliver the same batches (the loader's determinism guarantee; checked on the
first batch), so batches per second compare directly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from loader import build_loader  # noqa: E402
from workdir import bench_workdir  # noqa: E402

TARGET = 1.8


def tse_config(workdir: str, seed: int) -> dict:
    from loader_throughput import CHUNK_LEN, build_corpus
    from packer.adapters.wesep import build_wesep
    from packer.build.run import BuildOptions
    list_path, _ = build_corpus(workdir, 640, seed)
    pack = os.path.join(workdir, "tse-pack")
    build_wesep(list_path, BuildOptions(out=pack, workers=1, progress=False))
    return {"packs": [{"path": pack}], "dataset_args": {"chunk_len": CHUNK_LEN, "batch_size": 16, "shuffle": True}}


def asd_config(workdir: str, seed: int) -> dict:
    import asd_loader_throughput as asd
    pack = os.path.join(workdir, "asd-pack")
    asd.write_corpus(pack, 192, seed)
    return {"task": "asd", "packs": [{"path": pack}], "dataset_args": {
        "train_window": asd.TRAIN_WINDOW, "hist_frames": asd.HIST_FRAMES, "frame_budget": asd.FRAME_BUDGET,
        "min_batch": asd.MIN_BATCH, "max_batch": asd.MAX_BATCH, "audio_mix_prob": asd.MIX_PROB,
        "audio_mix_snr": list(asd.MIX_SNR)}}


def asr_config(workdir: str, seed: int) -> dict:
    import asr_loader_throughput as asr
    from packer.adapters.asr_parquet import build_parquet
    from packer.build.run import BuildOptions
    data = asr.make_corpus(workdir, 1200, seed)
    pack = build_parquet(data, BuildOptions(out=os.path.join(workdir, "asr-pack"), progress=False)).out
    return {"task": "asr", "packs": [{"path": pack}],
            "dataset_args": {"batching_strategy": "STATIC", "batch_size": 16}}


CONFIGS = {"tse": tse_config, "asd": asd_config, "asr": asr_config}


def epoch(loader, number: int) -> int:
    loader.set_epoch(number)
    return sum(1 for _ in loader)


def first_values(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(CONFIGS), default=["tse", "asd", "asr"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start", flush=True)
    rows = []
    with bench_workdir("worker-scaling-", args.tmp_dir, args.keep, print) as workdir:
        for task in args.tasks:
            config = CONFIGS[task](workdir, args.seed)
            loaders = {w: build_loader(config, "train", num_workers=w, seed=args.seed) for w in (0, args.workers)}
            one, many = (first_values(next(iter(loaders[w]))) for w in (0, args.workers))
            if one.keys() != many.keys() or any(not torch.equal(one[k], many[k]) for k in one):
                raise SystemExit(f"{task}: the first batch differs between 0 and {args.workers} workers")
            batches = {w: epoch(loader, 0) for w, loader in loaders.items()}  # warm-up: page cache, workers
            seconds = {w: [] for w in loaders}
            for repeat in range(args.repeats):
                for w in (loaders if repeat % 2 == 0 else list(loaders)[::-1]):
                    started = time.perf_counter()
                    if epoch(loaders[w], repeat + 1) != batches[w]:
                        raise SystemExit(f"{task}: an epoch changed its number of batches")
                    seconds[w].append(time.perf_counter() - started)
            ratios = [a / b for a, b in zip(seconds[0], seconds[args.workers])]
            load = os.getloadavg()[0]
            rows.append((task, batches[0], seconds, statistics.median(ratios), load))
            print(f"{task}: {batches[0]} batches/epoch; 1 process {statistics.median(seconds[0]):.3f} s, "
                  f"{args.workers} workers {statistics.median(seconds[args.workers]):.3f} s per epoch (medians); "
                  f"ratio {statistics.median(ratios):.2f}x (per repeat: "
                  f"{', '.join(f'{r:.2f}' for r in ratios)}); load average {load:.1f}", flush=True)
            for loader in loaders.values():
                del loader
    print(f"\n| task | batches/epoch | 1 process s/epoch | {args.workers} workers s/epoch | ratio | target "
          f"| load avg |\n|---|---|---|---|---|---|---|")
    for task, count, seconds, ratio, load in rows:
        print(f"| {task} | {count} | {statistics.median(seconds[0]):.3f} | "
              f"{statistics.median(seconds[args.workers]):.3f} | {ratio:.2f}x | "
              f"{'pass' if ratio >= TARGET else 'below'} (≥ {TARGET}x) | {load:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
