"""Parallel builds: pack throughput with ``--workers 2`` and with ``--executor ray`` against ``--workers 1``, and
what array jobs (``--shards i/n`` + ``finalize``) and ``--resume`` cost, on one corpus.

    python bench/parallel_build.py [--minutes 30] [--repeats 3] [--workers 2] [--shard-bytes 10MB] [--format flac]

The corpus is ``bench/pack_throughput.py``'s: real recordings from Debian packages (pocketsphinx-testdata,
alsa-utils, codec2-examples) cut, mixed and written as 16-bit WAV at 8, 16 and 48 kHz, so packing to 16 kHz
resamples two thirds of it.  Jobs, each timed ``--repeats`` times, alternating, after one untimed warm-up
(page cache, imports), all building the same pack:

- ``local-1``   ``--workers 1`` (the baseline every ratio is against);
- ``local-N``   ``--workers N`` as it runs by default: with at least two shards per worker to build, whole-shard
                tasks in a pool of N (each worker decodes and writes its own shards; the last shard is streamed
                to the build process, decoded by whichever workers are free);
- ``stream-N``  ``--workers N`` forced to stream samples from N decoding processes to one writer thread (what
                the local executor does with fewer shards);
- ``ray-N``     ``--executor ray`` on a local Ray instance with N CPUs, started once before timing (its start-up is
                printed separately: a cluster pays it once, not per build);
- ``slices-N``  N array jobs ``--shards i/N`` run one after the other, then ``finalize``: the overhead of
                slicing (every job probes every header to plan) and of finalize's verification;
- ``resume``    ``--resume`` of a build killed just before committing: the cost of verifying every shard (hashes)
                instead of decoding it.

``local-*`` and ``stream-*`` runs each run in a fresh Python process, as every ``speechpack build`` does, so that
each pays the worker pool's start-up (workers forked from the build process; a forkserver and its imports where
a fork is not safe) as a user's build does; wall time is measured there around the build, and so is CPU time:
the build process, the forkserver if any and every worker, reaped (the CPU-time ratio says how much extra work a
parallel build does, whatever the machine's load).
``--speed-only`` runs only ``local-1``, ``local-N`` and ``stream-N`` (no slices, Ray or resume).

Every pack is checked to be byte-identical to the baseline's.  Ratios are throughputs (higher is faster); the
absolute times depend on the machine (the figures in docs/ come from a 2-core VM).  The load average before and after
the runs is printed: on a machine whose cores are busy with other work a second worker has no core to run on.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing.forkserver
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pack_throughput import build_corpus, warm_page_cache, read_list  # noqa: E402
from speechpack.packer.build import shards# noqa: E402
from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402
from speechpack.packer.build.run import BuildOptions, finalize_pack  # noqa: E402
from speechpack.packer.build.state import KILL_AT_ENV  # noqa: E402
from speechpack.packer.build.plan import ShardSlice  # noqa: E402
from speechpack.schemas.units import parse_size  # noqa: E402
from workdir import bench_workdir  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pack_bytes(out: str) -> dict[str, bytes]:
    result = {}
    for directory, _, names in os.walk(out):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as fp:
                result[os.path.relpath(path, out)] = fp.read()
    return result


def fresh(out: str) -> str:
    if os.path.exists(out):
        shutil.rmtree(out)
    return out


def build_here(list_path: str, out: str, shard_bytes: int, workers: int, stream: bool) -> dict:
    """One build in this process (a fresh one: ``--one``): its wall time, and the CPU time of this process and
    of every process it started (forked workers are reaped by the pool's shut-down; a forkserver, stopped and
    reaped here, has reaped its own)."""
    if stream:
        shards.SHARD_TASKS_FROM = sys.maxsize  # never whole-shard tasks
    fresh(out)
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    build_wesep(list_path, BuildOptions(out=out, shard_bytes=shard_bytes, workers=workers, progress=False))
    wall = time.perf_counter() - started
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None):
        server._stop()  # private: closes the server and waits for it, so that its CPU (and its workers') is counted
    after, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
           + children.ru_utime + children.ru_stime)
    return {"wall": wall, "cpu": cpu}


def build_in_fresh_process(list_path: str, out: str, shard_bytes: int, workers: int, stream: bool) -> dict:
    args = [sys.executable, os.path.abspath(__file__), "--one", json.dumps([list_path, out, shard_bytes, workers,
                                                                         stream])]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"build failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def job_local(list_path: str, out: str, shard_bytes: int, workers: int) -> dict:
    return build_in_fresh_process(list_path, out, shard_bytes, workers, stream=False)


def job_stream(list_path: str, out: str, shard_bytes: int, workers: int) -> dict:
    return build_in_fresh_process(list_path, out, shard_bytes, workers, stream=True)


def job_ray(list_path: str, out: str, shard_bytes: int, workers: int) -> None:
    build_wesep(list_path, BuildOptions(out=fresh(out), shard_bytes=shard_bytes, executor="ray", progress=False))


def job_slices(list_path: str, out: str, shard_bytes: int, workers: int) -> None:
    fresh(out)
    for index in range(workers):
        build_wesep(list_path, BuildOptions(out=out, shard_bytes=shard_bytes, shards=ShardSlice(index, workers),
                                            progress=False))
    finalize_pack(out)


def prepare_killed_build(list_path: str, out: str, shard_bytes: int) -> None:
    """A ``--resume`` build killed after every shard is in place, before ``dataset.json``."""
    fresh(out)
    env = {**os.environ, KILL_AT_ENV: "columns"}
    subprocess.run([sys.executable, "-m", "speechpack.cli", "build", "wesep", "--list", list_path, "--out", out,
                    "--shard-size", str(shard_bytes), "--no-progress", "--resume"], cwd=REPO, env=env,
                   capture_output=True, check=False)
    if os.path.exists(os.path.join(out, "dataset.json")):
        raise RuntimeError("the killed build committed its pack: the kill point was not reached")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="mixture audio in the list (default 30)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each job, alternating (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="workers, Ray CPUs and array jobs (default 2)")
    parser.add_argument("--shard-bytes", default="10MB",
                        help="shard size (default 10MB: 17 shards, enough for whole-shard tasks with 2 workers)")
    parser.add_argument("--max-piece", type=float, default=10.0, help="longest mixture in seconds (default 10)")
    parser.add_argument("--format", dest="audio_format", choices=("wav", "flac"), default="wav",
                        help="input audio format (flac: decoding costs more than writing)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray job")
    parser.add_argument("--speed-only", action="store_true", help="only local-1, local-N and stream-N")
    parser.add_argument("--tmp-dir", default=None, help="where corpus and packs go (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the corpus and packs")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one build, in a fresh process
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(build_here(*json.loads(args.one))))
        return 0
    shard_bytes = parse_size(args.shard_bytes)
    n = args.workers

    with bench_workdir("speechpack-parallel-", args.tmp_dir, args.keep) as workdir:
        list_path, described = build_corpus(workdir, args.minutes, args.max_piece, seed=0,
                                            audio_format=args.audio_format)
        warm_page_cache(read_list(list_path))
        hours = described["hours"]
        print(f"corpus: {described['lines']} mixtures, {hours * 60:.1f} min of mixture audio, "
              f"{described['wav_bytes'] / 1e6:.0f} MB of {args.audio_format.upper()}; shards of {args.shard_bytes}; "
              f"{os.cpu_count()} CPUs")
        jobs = {"local-1": (job_local, 1), f"local-{n}": (job_local, n), f"stream-{n}": (job_stream, n),
                f"slices-{n}": (job_slices, n)}
        if args.speed_only:
            del jobs[f"slices-{n}"]
        if not args.no_ray and not args.speed_only:
            import ray

            started = time.perf_counter()
            ray.init(num_cpus=n, include_dashboard=False, log_to_driver=False)
            print(f"ray start-up (once, not timed below): {time.perf_counter() - started:.1f} s")
            jobs[f"ray-{n}"] = (job_ray, n)
        times: dict[str, list[float]] = {name: [] for name in jobs}
        cpu: dict[str, list[float]] = {}
        if not args.speed_only:
            times["resume"] = []
        reference = None
        load_before = os.getloadavg()
        for repeat in range(args.repeats + 1):  # the first round is the warm-up
            for name, (job, workers) in jobs.items():
                out = os.path.join(workdir, name)
                started = time.perf_counter()
                measured = job(list_path, out, shard_bytes, workers)
                elapsed = time.perf_counter() - started
                if measured is not None:  # measured in the build's own process
                    elapsed = measured["wall"]
                    if repeat:
                        cpu.setdefault(name, []).append(measured["cpu"])
                files = pack_bytes(out)
                if reference is None:
                    reference = files
                elif files != reference:
                    raise RuntimeError(f"{name}: the pack differs from local-1's")
                if repeat:
                    times[name].append(elapsed)
            if args.speed_only:
                continue
            out = os.path.join(workdir, "resume")
            prepare_killed_build(list_path, out, shard_bytes)
            started = time.perf_counter()
            build_wesep(list_path, BuildOptions(out=out, shard_bytes=shard_bytes, resume=True, progress=False))
            elapsed = time.perf_counter() - started
            if pack_bytes(out) != reference:
                raise RuntimeError("resume: the pack differs from local-1's")
            if repeat:
                times["resume"].append(elapsed)
        load_after = os.getloadavg()
        base = statistics.median(times["local-1"])
        base_cpu = statistics.median(cpu["local-1"])
        print(f"load average before the runs {' '.join(f'{x:.2f}' for x in load_before)}, "
              f"after {' '.join(f'{x:.2f}' for x in load_after)}")
        print(f"{'job':<10} {'median s':>9} {'audio h/s':>10} {'vs local-1':>11} {'runs':>22} "
              f"{'CPU s':>7} {'CPU / local-1':>14}")
        for name, values in times.items():
            median = statistics.median(values)
            runs = ", ".join(f"{v:.2f}" for v in values)
            line = f"{name:<10} {median:9.2f} {hours / median:10.3f} {base / median:10.2f}x {runs:>22}"
            if name in cpu:
                line += f" {statistics.median(cpu[name]):7.2f} {statistics.median(cpu[name]) / base_cpu:13.2f}x"
            print(line)
        print("every pack byte-identical to local-1's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
