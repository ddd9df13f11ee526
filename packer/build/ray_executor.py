"""``--executor ray``: the planned shards as Ray tasks, one task per shard (``packer.build.shard_task.build_shard``).

Each task decodes its shard's samples and writes the shard directory where it runs, so the pack directory must be
on a filesystem every Ray node mounts at the same path (as a cluster's shared storage is).  The driver only
receives each shard's manifest entry and index records, and commits the pack once every task is back.  Ray is an
optional dependency (``pip install 'speechpack[ray]'``), imported only here and only when asked for.

The driver connects to ``address`` (``ray.init(address=...)``: ``"auto"`` for the cluster this machine belongs
to, ``"ray://host:10001"`` for Ray Client) or, without one, starts a local Ray instance for the build and stops it
afterwards.  If Ray is already initialised in this process (a notebook, a test fixture), that instance is used and
left running.
"""

from __future__ import annotations

from typing import Sequence

from tqdm import tqdm

from speechpack.packer.build.shard_task import ShardJob, ShardOutcome, build_shard
from speechpack.schemas.errors import SpeechpackError


def import_ray():
    """The ``ray`` module, or a ``SpeechpackError`` that says how to install it."""
    try:
        import ray
    except ImportError:
        raise SpeechpackError("--executor ray needs Ray, an optional dependency: "
                              "pip install 'speechpack[ray]' (or pip install 'ray>=2.9')") from None
    return ray


#: How long a failed build waits for its cancelled Ray tasks to end before cleaning up anyway.
STOP_TIMEOUT_SECONDS = 60.0


def run_shard_jobs_on_ray(jobs: Sequence[ShardJob], address: str | None = None, progress: bool = False,
                          desc: str = "shards") -> list[ShardOutcome]:
    """Run every job as a Ray task; return their outcomes in job order.  The first failing task's exception is
    raised (the others are cancelled); bad input is not an exception (it comes back in ``outcome.problems``)."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        # a local instance for this build needs no dashboard; a cluster is used as its owners configured it
        local = {} if address else {"include_dashboard": False, "log_to_driver": False}
        try:
            ray.init(address=address, **local)
        except ConnectionError as err:
            raise SpeechpackError(f"--ray-address {address}: cannot connect to a Ray cluster ({err})") from None
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(build_shard)
        pending = [task.remote(job) for job in jobs]
        by_ref = {ref: position for position, ref in enumerate(pending)}
        outcomes: list[ShardOutcome | None] = [None] * len(jobs)
        with tqdm(total=len(jobs), desc=desc, unit="shard", disable=not progress) as bar:
            try:
                while pending:
                    done, pending = ray.wait(pending, num_returns=1)
                    for ref in done:
                        try:
                            outcomes[by_ref[ref]] = ray.get(ref)
                        except ray.exceptions.RayTaskError as err:
                            raise (err.cause if err.cause is not None else err) from None  # the task's own error
                        bar.update(1)
            except BaseException:
                _stop(ray, pending)
                raise
        return outcomes  # type: ignore[return-value]
    finally:
        if started_here:
            ray.shutdown()


def _stop(ray, pending: list) -> None:
    """Cancel the tasks still running and wait until they have ended: the build's clean-up removes their
    half-written shards only after this returns (docs/building.md, "When a build fails")."""
    for ref in pending:
        ray.cancel(ref, force=True)
    if pending:
        ray.wait(pending, num_returns=len(pending), timeout=STOP_TIMEOUT_SECONDS)


__all__ = ["import_ray", "run_shard_jobs_on_ray"]
