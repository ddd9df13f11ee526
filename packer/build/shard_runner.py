"""Running the shard jobs of a build on an executor: ``local`` (this machine) or ``ray`` (a cluster).

Both take the same ``ShardJob`` list and return the same ``ShardOutcome`` per job, and both write each shard with
the same ``ShardWriter`` in plan order, so the pack does not depend on the executor.

``local`` runs whole-shard tasks in its pool when there are at least ``SHARD_TASKS_FROM`` shards per worker: each
worker decodes and writes its shards (no decoded audio crosses processes; writing and hashing run in parallel too),
except the last ``STREAMED_TAIL`` shards, whose samples every worker decodes once it has no whole shard left, for
this process to write in order: with whole shards only, the last one ran alone while the other workers idled.
With fewer shards it streams every sample that way (``map_in_order`` to one writer thread), which keeps every
worker busy even when the build has fewer shards than workers (a small pack, the last shards of a slice); on one
machine the cost of shipping decoded audio to the writer is a memory copy.  ``ray`` runs one task per shard where
the data is (``packer.build.ray_executor``).
"""

from __future__ import annotations

import contextlib
import functools
import queue
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Sequence

from tqdm import tqdm

from speechpack.packer.build.executor import BackgroundConsumer, map_in_order, worker_pool
from speechpack.packer.build.sample import PackedSample
from speechpack.packer.build.shard_task import (ShardJob, ShardOutcome, build_shard, check_decoded, decode_measured, guarded,
                                     record_receipt)
from speechpack.packer.build.writer import PackWriter
from speechpack.schemas.format import ShardEntry
from speechpack.schemas.wesep_list import LineProblem

#: With at least this many shards per worker to build, the local executor runs whole-shard tasks in its pool
#: (each worker decodes and writes its shard: no decoded audio crosses processes, and writing and hashing run in
#: parallel too); with fewer, it streams samples to one writer so that no worker idles.
SHARD_TASKS_FROM = 2
#: Shards at the end of a whole-shard build that are streamed instead, sample by sample, to this process's writer:
#: when the workers run out of whole shards at different moments, the ones done first decode these while the
#: others finish theirs, and all end within a sample of each other.  One shard lasts about as long as the others'
#: unfinished ones (fewer than one whole shard each, on average half) and costs little to ship; more would cost
#: more shipping than they save.
STREAMED_TAIL = 1


def run_shard_jobs(jobs: Sequence[ShardJob], executor: str, workers: int = 1, ray_address: str | None = None,
                   show_progress: bool = False, desc: str = "packing",
                   pool: ProcessPoolExecutor | None = None) -> list[ShardOutcome]:
    """Run the jobs (in order of ``jobs``) and return one outcome per job; locally in ``pool`` when given (a
    ``worker_pool(workers)``), else in a pool made for the call."""
    if not jobs:
        return []
    if executor == "ray":
        from speechpack.packer.build.ray_executor import run_shard_jobs_on_ray

        return run_shard_jobs_on_ray(jobs, ray_address, progress=show_progress, desc=desc)
    with tqdm(total=sum(len(job.items) for job in jobs), desc=desc, unit="sample",
              disable=not show_progress) as progress:
        if workers > 1 and len(jobs) >= SHARD_TASKS_FROM * workers:
            with contextlib.nullcontext(pool) if pool is not None else worker_pool(workers) as own:
                return _shards_then_stream(jobs, workers, own, progress)
        return _stream_locally(jobs, workers, pool, lambda: progress.update(1))


def _shards_then_stream(jobs: Sequence[ShardJob], workers: int, pool: ProcessPoolExecutor,
                        progress: tqdm) -> list[ShardOutcome]:
    """Whole-shard tasks for all but the last ``STREAMED_TAIL`` jobs, then those streamed (``_stream_locally``).

    Every whole-shard task is queued first (their outcomes are small; the pool hands them out in order), so the
    streamed samples are decoded only by workers that have no whole shard left.  A whole shard's failure is raised
    as soon as this process hears of it, between two streamed samples."""
    whole, streamed = jobs[:-STREAMED_TAIL], jobs[-STREAMED_TAIL:]
    finished: queue.SimpleQueue = queue.SimpleQueue()  # whole-shard futures as they end (put by the pool's thread)
    futures = []
    for job in whole:
        future = pool.submit(build_shard, job)
        future.add_done_callback(finished.put)
        futures.append(future)
    samples = {future: len(job.items) for future, job in zip(futures, whole)}

    def advance() -> None:  # in this thread, after every streamed sample
        while not finished.empty():
            future = finished.get()
            future.result()  # a failed shard fails the build now
            progress.update(samples[future])
        progress.update(1)

    try:
        outcomes = _stream_locally(streamed, workers, pool, advance)
        outcomes = [future.result() for future in futures] + outcomes
    finally:  # abandoned early (a failure): nothing left queued works for nobody
        for future in futures:
            future.cancel()
    while not finished.empty():
        progress.update(samples[finished.get()])
    return outcomes


def _stream_locally(jobs: Sequence[ShardJob], workers: int, pool: ProcessPoolExecutor | None,
                    advance: Callable[[], None]) -> list[ShardOutcome]:
    """Decode the jobs' samples (in ``workers`` processes when ``workers > 1``) and write them here, in order, on a
    writer thread; ``advance()`` runs after each sample."""
    first = jobs[0]
    outcomes: dict[int, ShardOutcome] = {}
    problems: list[LineProblem] = []

    def published(shard_id: int, entry: ShardEntry, records: list, skipped: list) -> None:
        record_receipt(first.pack_dir, first.fingerprint, shard_id, entry, skipped)
        outcomes[shard_id] = ShardOutcome(shard_id, entry, list(records), list(skipped))

    items = [item for job in jobs for item in job.items]
    plans = [plan for job in jobs for plan in job.plans]
    with PackWriter(first.pack_dir, first.kind, first.sample_rate, [list(job.plans) for job in jobs],
                    shard_ids=[job.shard_id for job in jobs], on_shard=published) as writer:
        consumer = BackgroundConsumer(lambda r: writer.add(r) if isinstance(r, PackedSample) else writer.skip(r))
        writing = first.publish
        try:
            step = decode_measured if workers > 1 else guarded  # see decode_measured
            decoded = map_in_order(functools.partial(step, first.load), items, workers, pool=pool)
            for plan, result in zip(plans, decoded):
                result = check_decoded(result, plan)
                if isinstance(result, LineProblem):
                    problems.append(result)
                    writing = writing and first.skip_bad
                if writing:
                    consumer.submit(result)
                # else: the build will fail; keep decoding only to report every problem in one pass
                advance()
        except BaseException:
            consumer.abandon()
            raise
        consumer.close()
    by_line = {(p.line, p.key): p for p in problems}
    result = []
    for job in jobs:
        if job.shard_id in outcomes:
            result.append(outcomes[job.shard_id])
        else:  # not written: hand back the problems of its samples
            mine = [by_line[(p.line, p.key)] for p in job.plans if (p.line, p.key) in by_line]
            result.append(ShardOutcome(job.shard_id, None, [], mine))
    return result


__all__ = ["run_shard_jobs"]
