"""Running the shard jobs of a build on an executor: ``local`` (this machine) or ``ray`` (a cluster).

Both take the same ``ShardJob`` list and return the same ``ShardOutcome`` per job, and both write each shard with
the same ``ShardWriter`` in plan order, so the pack does not depend on the executor.

``local`` streams samples rather than shards: items are decoded in ``workers`` processes (``map_in_order``) and
appended by one writer thread, in order.  That keeps every worker busy even when the build has fewer shards than
workers (a small pack, the last shards of a slice), which one-task-per-shard would not; on one machine the cost
of shipping decoded audio to the writer is a memory copy.  ``ray`` runs one task per shard where the data is
(``packer.build.ray_executor``).
"""

from __future__ import annotations

import functools
from concurrent.futures import ProcessPoolExecutor
from typing import Sequence

from tqdm import tqdm

from packer.build.executor import BackgroundConsumer, map_in_order
from packer.sample import PackedSample
from packer.build.shard_task import (ShardJob, ShardOutcome, build_shard, check_decoded, decode_measured, guarded,
                                     record_receipt)
from packer.writer import PackWriter
from schemas.format import ShardEntry
from schemas.wesep_list import LineProblem

#: With at least this many shards per worker to build, the local executor runs whole-shard tasks in its pool
#: (each worker decodes and writes its shard: no decoded audio crosses processes, and writing and hashing run in
#: parallel too); with fewer, it streams samples to one writer so that no worker idles.
SHARD_TASKS_FROM = 2


def run_shard_jobs(jobs: Sequence[ShardJob], executor: str, workers: int = 1, ray_address: str | None = None,
                   show_progress: bool = False, desc: str = "packing",
                   pool: ProcessPoolExecutor | None = None) -> list[ShardOutcome]:
    """Run the jobs (in order of ``jobs``) and return one outcome per job; locally in ``pool`` when given (a
    ``worker_pool(workers)``), else in a pool made for the call."""
    if not jobs:
        return []
    if executor == "ray":
        from packer.build.ray_executor import run_shard_jobs_on_ray

        return run_shard_jobs_on_ray(jobs, ray_address, progress=show_progress, desc=desc)
    if workers > 1 and len(jobs) >= SHARD_TASKS_FROM * workers:
        outcomes = map_in_order(build_shard, jobs, workers, pool=pool)
        return list(tqdm(outcomes, total=len(jobs), desc=desc, unit="shard", disable=not show_progress))
    return _stream_locally(jobs, workers, show_progress, desc, pool)


def _stream_locally(jobs: Sequence[ShardJob], workers: int, show_progress: bool, desc: str,
                    pool: ProcessPoolExecutor | None) -> list[ShardOutcome]:
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
            progress = tqdm(decoded, total=len(plans), desc=desc, unit="sample", disable=not show_progress)
            for plan, result in zip(plans, progress):
                result = check_decoded(result, plan)
                if isinstance(result, LineProblem):
                    problems.append(result)
                    writing = writing and first.skip_bad
                if writing:
                    consumer.submit(result)
                # else: the build will fail; keep decoding only to report every problem in one pass
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
