"""How the loader scales with DataLoader workers: ``num_workers=2`` against one process, for TSE, ASD and ASR.

    python bench/worker_scaling.py [--tasks tse asd asr] [--workers 2] [--repeats 5] [--warmup 2] [--scale K]
                                   [--batches-per-message N] [--torch-transport] [--tmp-dir DIR] [--keep]

Target (docs/performance.md): with 2 workers on 2 cores, at least 1.7x (TSE) and 1.8x (ASD, ASR) the
batches per second of one process.

**Packs** (all from real recordings; each built by the task's own benchmark): **tse** ``build_corpus`` of
``bench/loader_throughput.py`` (2-speaker 8-12 s mixtures, 4 s chunks, batches of 16 mixtures); **asd** the
``asd`` pack of ``bench/asd_loader_throughput.py`` (faces from the real talking-face video where installed,
MuVAP's settings); **asr** the parquet corpus of ``bench/asr_loader_throughput.py`` built with ``build_parquet``,
waveform batches of 16.  ``--scale K`` makes every corpus K times larger (epochs of K times as many batches, so
that an epoch's start and end, when the workers' prefetch fills and drains, weigh less: at ``--scale 1`` an ASR
epoch lasts about 60 ms).

**Jobs**, per task, all in the same run: ``num_workers=0`` (the baseline) and ``num_workers=N`` of the same config
(persistent workers, as ``build_loader`` makes them; messages sized automatically unless ``--batches-per-message``
fixes them); with ``--torch-transport`` also ``num_workers=N`` with the batch ring switched off (every batch through
torch's per-tensor shared memory, the transport before ``loader.transport.batch_ring``); and the **ceiling**: a plain
``torch.utils.data.DataLoader`` with N workers whose dataset returns the same-sized tensors (the task's first batch),
preallocated once per worker, so its epoch costs only torch's transport.

**Method.** ``torch.set_num_threads(1)`` in this process (a worker's default), ``--warmup`` untimed epochs of each
job (default 2: the loader sizes its messages by what the first batches cost, ``loader.transport.message_groups``, and the
second epoch touches the slots' pages at that size; both are one-time costs that a real epoch of thousands of
batches does not notice, but these epochs are 40-75 batches), then ``--repeats`` epochs of each, the jobs' order
alternating per repeat; the ratio is the median of the per-repeat
ratios.  Both loaders deliver the same batches (the loader's determinism guarantee; checked on the first batch),
so batches per second compare directly.  Besides wall time, each epoch's **CPU time per batch** is measured in the
training process (``time.process_time``) and in the workers (the run time of every thread of each worker,
``/proc/PID/task/*/schedstat``).  On a machine shared with other jobs wall-clock scaling reflects the load more
than the loader, so the script also prints what a quiet machine with N free cores would give, bound by CPU:
``N * one-process CPU per batch / (worker CPU + training-process CPU per batch)``, capped at N.  For the loaders
with workers it also prints the batches per DataLoader message over the timed epochs.
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
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from speechpack.loader import build_loader  # noqa: E402
from speechpack.loader.config import PREFETCH_PER_WORKER  # noqa: E402
from workdir import bench_workdir  # noqa: E402

#: ``num_workers=2`` against one process, per task (docs/performance.md's summary).
TARGETS = {"tse": 1.7, "asd": 1.8, "asr": 1.8}


def tse_config(workdir: str, seed: int, scale: int = 1) -> dict:
    from loader_throughput import CHUNK_LEN, build_corpus
    from speechpack.packer.adapters.wesep import build_wesep
    from speechpack.packer.build.run import BuildOptions
    list_path, _ = build_corpus(workdir, 640 * scale, seed)
    pack = os.path.join(workdir, "tse-pack")
    build_wesep(list_path, BuildOptions(out=pack, workers=1, progress=False))
    return {"packs": [{"path": pack}], "dataset_args": {"chunk_len": CHUNK_LEN, "batch_size": 16, "shuffle": True}}


def asd_config(workdir: str, seed: int, scale: int = 1) -> dict:
    import asd_loader_throughput as asd
    pack = os.path.join(workdir, "asd-pack")
    asd.write_corpus(pack, 192 * scale, seed)
    return {"task": "asd", "packs": [{"path": pack}], "dataset_args": {
        "train_window": asd.TRAIN_WINDOW, "hist_frames": asd.HIST_FRAMES, "frame_budget": asd.FRAME_BUDGET,
        "min_batch": asd.MIN_BATCH, "max_batch": asd.MAX_BATCH, "audio_mix_prob": asd.MIX_PROB,
        "audio_mix_snr": list(asd.MIX_SNR)}}


def asr_config(workdir: str, seed: int, scale: int = 1) -> dict:
    import asr_loader_throughput as asr
    from speechpack.packer.adapters.asr_parquet import build_parquet
    from speechpack.packer.build.run import BuildOptions
    data = asr.make_corpus(workdir, 1200 * scale, seed)
    pack = build_parquet(data, BuildOptions(out=os.path.join(workdir, "asr-pack"), progress=False)).out
    return {"task": "asr", "packs": [{"path": pack}],
            "dataset_args": {"batching_strategy": "STATIC", "batch_size": 16}}


CONFIGS = {"tse": tse_config, "asd": asd_config, "asr": asr_config}


def epoch(loader, number: int) -> int:
    loader.set_epoch(number)
    return sum(1 for _ in loader)


def first_values(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}


def thread_seconds(pid: int) -> float:
    """CPU seconds run so far by every thread of process ``pid`` (nanosecond schedstat; clock ticks without)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as fp:
                total += int(fp.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as fp:
            fields = fp.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_pids(dataloader) -> list[int]:
    """The pids of a DataLoader's persistent workers (none before its first epoch or without workers)."""
    iterator = getattr(dataloader, "_iterator", None)
    return [w.pid for w in getattr(iterator, "_workers", [])]


class Ceiling(Dataset):
    """The transport's ceiling: returns the same preallocated tensors (the task's first batch) for every index."""

    def __init__(self, template: dict, batches: int):
        self.template = template
        self.batches = batches
        self.tensors: dict | None = None

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> dict:
        if self.tensors is None:  # once per worker
            self.tensors = {k: v.clone() for k, v in self.template.items()}
        return self.tensors


class Job:
    """One way of delivering a task's batches: ``run`` times an epoch and measures CPU in both processes."""

    def __init__(self, name: str, iterate, dataloader, sizes=None):
        self.name = name
        self.iterate = iterate
        self.dataloader = dataloader
        self.seconds: list[float] = []
        self.main_cpu: list[float] = []
        self.worker_cpu: list[float] = []
        self.batches = 0
        self.messages = 0
        if sizes is not None:  # count the messages: one size asked per DataLoader key
            asked = sizes.next

            def counted(*args) -> int:
                self.messages += 1
                return asked(*args)
            sizes.next = counted

    def clear(self) -> None:
        self.seconds.clear(), self.main_cpu.clear(), self.worker_cpu.clear()
        self.batches = self.messages = 0

    def run(self, number: int) -> int:
        pids = worker_pids(self.dataloader)
        before = [thread_seconds(p) for p in pids]
        cpu, started = time.process_time(), time.perf_counter()
        count = self.iterate(number)
        self.seconds.append(time.perf_counter() - started)
        self.main_cpu.append((time.process_time() - cpu) / count)
        self.worker_cpu.append(sum(thread_seconds(p) - b for p, b in zip(pids, before)) / count)
        self.batches += count
        return count


def ceiling_job(template: dict, batches: int, workers: int) -> Job:
    dataloader = DataLoader(Ceiling(template, batches), batch_size=None, num_workers=workers,
                            persistent_workers=True, prefetch_factor=PREFETCH_PER_WORKER, collate_fn=lambda b: b)
    return Job("ceiling", lambda number: sum(1 for _ in dataloader), dataloader)


def measure(task: str, config: dict, args) -> dict:
    """Every job of ``task``, warmed up then timed ``--repeats`` times in alternating order; medians."""
    n = args.workers
    grouped = {} if args.batches_per_message is None else {"batches_per_message": args.batches_per_message}
    loaders = {"1 process": build_loader(config, "train", num_workers=0, seed=args.seed),
               f"{n} workers": build_loader(config, "train", num_workers=n, seed=args.seed, **grouped)}
    if args.torch_transport:
        loader = build_loader(config, "train", num_workers=n, seed=args.seed, **grouped)
        loader.dataset.ring = None  # before its workers start: torch's transport for every batch
        loaders[f"{n} workers, torch transport"] = loader
    first = {name: first_values(next(iter(loader))) for name, loader in loaders.items()}
    one = first["1 process"]
    for name, values in first.items():
        if values.keys() != one.keys() or any(not torch.equal(one[k], values[k]) for k in one):
            raise SystemExit(f"{task}: the first batch differs between 1 process and {name}")
    jobs = [Job(name, lambda number, loader=loader: epoch(loader, number), loader.dataloader,
                getattr(loader, "message_sizes", None) if loader.dataloader.num_workers else None)
            for name, loader in loaders.items()]
    batches = {job.name: job.run(0) for job in jobs}  # warm-up: page cache, workers, slots, message sizes
    jobs.append(ceiling_job(one, batches["1 process"], n))
    for warmup in range(args.warmup):
        for job in jobs[-1:] if warmup == 0 else jobs:
            job.run(0)
    for job in jobs:  # the warm-up is not measured
        job.clear()
    for repeat in range(args.repeats):
        for job in (jobs if repeat % 2 == 0 else jobs[::-1]):
            if job.run(repeat + 1) != batches.get(job.name, batches["1 process"]):
                raise SystemExit(f"{task}: an epoch changed its number of batches ({job.name})")
    base = jobs[0]
    result = {"task": task, "batches": batches["1 process"], "load": os.getloadavg()[0], "jobs": {}}
    for job in jobs:
        ratios = [a / b for a, b in zip(base.seconds, job.seconds)]
        cpu = statistics.median(m + w for m, w in zip(job.main_cpu, job.worker_cpu))
        result["jobs"][job.name] = {
            "seconds": statistics.median(job.seconds), "ratio": statistics.median(ratios), "ratios": ratios,
            "main_ms": 1e3 * statistics.median(job.main_cpu), "worker_ms": 1e3 * statistics.median(job.worker_cpu),
            "quiet": min(float(n), n * statistics.median(base.main_cpu) / cpu) if job is not base else 1.0,
            "per_message": job.batches / job.messages if job.messages else None}
    return result


def report(rows: list[dict], workers: int) -> None:
    print(f"\n| task | job | s/epoch (median) | vs 1 process (median of repeats) | training-process CPU ms/batch "
          f"| worker CPU ms/batch | quiet {workers}-core estimate | batches/message | target | load avg |\n"
          f"|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        for name, job in row["jobs"].items():
            target = TARGETS[row["task"]]
            verdict = ("–" if name in ("1 process", "ceiling") or "torch" in name
                       else f"{'pass' if job['ratio'] >= target else 'below'} (≥ {target}x)")
            per_message = "–" if job["per_message"] is None else f"{job['per_message']:.1f}"
            print(f"| {row['task']} | {name} | {job['seconds']:.3f} | {job['ratio']:.2f}x | {job['main_ms']:.2f} | "
                  f"{job['worker_ms']:.2f} | {job['quiet']:.2f}x | {per_message} | {verdict} | {row['load']:.1f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(CONFIGS), default=["tse", "asd", "asr"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="untimed epochs of each job before the timed ones")
    parser.add_argument("--batches-per-message", type=int,
                        help="batches per DataLoader message of the loaders with workers (default: automatic)")
    parser.add_argument("--torch-transport", action="store_true",
                        help="also time the workers with the batch ring off (torch's shared memory per batch)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir")
    parser.add_argument("--scale", type=int, default=1, help="corpora (and epochs) this many times larger")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start", flush=True)
    rows = []
    with bench_workdir("worker-scaling-", args.tmp_dir, args.keep, print) as workdir:
        for task in args.tasks:
            row = measure(task, CONFIGS[task](workdir, args.seed, args.scale), args)
            rows.append(row)
            for name, job in row["jobs"].items():
                print(f"{task} {name}: {job['seconds']:.3f} s/epoch, {job['ratio']:.2f}x (per repeat: "
                      f"{', '.join(f'{r:.2f}' for r in job['ratios'])}); CPU per batch: training process "
                      f"{job['main_ms']:.2f} ms, workers {job['worker_ms']:.2f} ms; quiet-machine estimate "
                      f"{job['quiet']:.2f}x; batches per message "
                      f"{'–' if job['per_message'] is None else format(job['per_message'], '.1f')}; "
                      f"load average {row['load']:.1f}", flush=True)
    report(rows, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
