"""Running a build: decode items in a process pool, append them in input order, commit or leave nothing.

The output is a pure function of the input and the options that shape it: results are consumed in input order
whatever ``workers`` is, so ``--workers 1`` and ``--workers 8`` give byte-identical packs.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from tqdm import tqdm

from speechpack.packer.build.executor import map_while_starting, stop_pool, worker_pool
from speechpack.packer.build.finalize import BuildSummary, commit_build, line_problem, verify_all
from speechpack.packer.build.output_dir import OutputClaim, claim_output, item_inputs
from speechpack.packer.build.plan import BuildPlan, ShardSlice, plan_shards
from speechpack.packer.build.shards import guarded, import_ray, run_shard_jobs, shard_jobs
from speechpack.packer.build.state import VerifiedShard, receipt_path, write_cues_receipt
from speechpack.packer.cues import CueBuild, CueProblem, write_cues
from speechpack.packer.build.sample import PackedSample, SamplePlan
from speechpack.packer.files import hash_file
from speechpack.schemas.constants import DEFAULT_SAMPLE_RATE, DEFAULT_SHARD_BYTES, TOOL_NAME, shard_dir_name, tool_version
from speechpack.schemas.errors import BuildError, SpeechpackError
from speechpack.schemas.limits import SAMPLE_RATE, SHARD_BYTES, WORKERS
from speechpack.schemas.wesep_list import LineProblem

#: Values of ``--executor``.
EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class BuildOptions:
    """Options shared by every ``speechpack build`` command.

    ``workers``, ``executor``, ``ray_address``, ``shards``, ``resume`` and ``progress`` change how a build runs,
    never what it writes; everything else is recorded in the manifest's provenance.  ``shards`` (``--shards i/n``)
    builds one slice of the plan for a cluster array job and leaves the commit to ``speechpack finalize``;
    ``resume`` requires the directory to hold an unfinished build (or nothing).  Every build records its state
    (plan, receipts) while it is unfinished, so that a rerun keeps the shards that verify (``docs/building.md``).
    """

    out: str
    sample_rate: int = DEFAULT_SAMPLE_RATE
    shard_bytes: int = DEFAULT_SHARD_BYTES
    workers: int = 1
    skip_bad: bool = False
    overwrite: bool = False
    progress: bool = True
    executor: str = "local"
    ray_address: str | None = None
    shards: ShardSlice | None = None
    resume: bool = False

    def __post_init__(self) -> None:
        for limit, value in ((SAMPLE_RATE, self.sample_rate), (SHARD_BYTES, self.shard_bytes), (WORKERS, self.workers)):
            limit.check(value)
        if self.executor not in EXECUTORS:
            raise SpeechpackError(f"executor must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.ray_address is not None and self.executor != "ray":
            raise SpeechpackError("--ray-address only applies with --executor ray")
        if self.shards is not None and self.overwrite:
            raise SpeechpackError("--overwrite cannot be combined with --shards: each array job would delete the "
                                  "others' shards; empty the directory before starting the jobs")

    def recorded(self) -> dict:
        """The options that shape the bytes of the pack (provenance)."""
        return {"sample_rate": self.sample_rate, "shard_bytes": self.shard_bytes, "skip_bad": self.skip_bad}


def run_build(*, items: Sequence, problems: Sequence[LineProblem], plan: Callable[[object], SamplePlan],
              load: Callable[[object], PackedSample], kind: str, input_path: str, command: str,
              recorded_options: dict, options: BuildOptions, cues: CueBuild | None = None,
              input_sha256: str | None = None) -> BuildSummary:
    """Check and size every item from headers, plan the shards, decode and write; commit, or raise
    ``BuildError`` and leave no pack behind.

    ``items`` need ``line`` and ``key`` attributes; ``plan`` and ``load`` must be picklable and raise
    ``AudioError`` for bad input; a plan whose ``prepared`` is set hands that to ``load`` instead of the item.
    By default every problem is collected (decoding goes on after the first, to find the problems only decoding
    shows) and nothing is published; with ``skip_bad`` the good items are packed and the problems recorded in
    ``skipped.json``.  ``cues`` are written after the shards, before
    ``dataset.json``; a cue problem always fails the build (``skip_bad`` is about list lines).  ``input_sha256``
    replaces the hash of ``input_path`` in the provenance when the input is not one file (a directory, a
    simulation).

    ``options.executor``, ``options.shards`` and ``options.resume`` choose where the shards are written and which
    of them (see ``BuildOptions``); a ``--resume`` or ``--shards`` build that fails keeps its finished shards for
    the next run, any other failed build leaves nothing.
    """
    started = time.monotonic()
    problems = list(problems)
    if not items and not problems:
        raise SpeechpackError(f"{input_path}: the list holds no samples")
    if options.executor == "ray":
        import_ray()  # a missing optional dependency is known before hours of header probing
    cue_inputs = (cues, *cues.resources.values()) if cues is not None else ()
    inputs = item_inputs(input_path, [*items, *cue_inputs], recorded_options.get("root"))
    # The pool first: its workers fork from this process before any thread of the build exists and before the
    # claim's lock is taken, so that no worker holds the lock (packer.build.executor.new_pool).
    with worker_pool(options.workers) as pool, \
            claim_output(options.out, options.overwrite, options.resume, shared=options.shards is not None,
                         inputs=inputs) as claim:
        try:
            return _plan_and_build(items, problems, plan, load, kind, input_path, command, recorded_options,
                                   options, cues, input_sha256, pool, started, claim)
        except BaseException as err:
            if pool is not None:  # stopped first: nothing writes into out any more
                stop_pool(pool, terminate=isinstance(err, KeyboardInterrupt))
            failure = claim.failed(err)
            if failure is err:
                raise
            raise failure from err


def _plan_and_build(items: Sequence, problems: list, plan: Callable, load: Callable, kind: str, input_path: str,
                    command: str, recorded_options: dict, options: BuildOptions, cues: CueBuild | None,
                    input_sha256: str | None, pool, started: float, claim: OutputClaim) -> BuildSummary:
    """``run_build`` with one worker pool for the probing and the writing."""
    planned_items, plans = _probe(items, plan, problems, options, f"{TOOL_NAME} {command}: checking", pool)
    ranges = plan_shards([p.nbytes for p in plans], options.shard_bytes)
    build_plan = BuildPlan(kind=kind, sample_rate=options.sample_rate,
                           shards=tuple(tuple(plans[i] for i in shard) for shard in ranges),
                           provenance=_provenance(input_path, command, recorded_options, input_sha256),
                           problems=tuple(p.to_dict() for p in problems), skip_bad=options.skip_bad,
                           cues=cues is not None)
    selected = options.shards.select(build_plan.num_shards) if options.shards else range(build_plan.num_shards)
    # every build records its plan and receipts, so that any build can be resumed
    fingerprint = claim.prepare(build_plan)
    kept = _keep_verified(options.out, build_plan, fingerprint, selected, options.progress, options.workers)
    claim.building = [k for k in selected if k not in kept]
    jobs = shard_jobs(options.out, kind, options.sample_rate, [k for k in selected if k not in kept],
                      [[planned_items[i] for i in shard] for shard in ranges], build_plan.shards, load,
                      options.skip_bad, fingerprint, publish=not problems or options.skip_bad)
    outcomes = run_shard_jobs(jobs, options.executor, options.workers, options.ray_address, options.progress,
                              desc=f"{TOOL_NAME} {command}: packing", pool=pool)
    problems += [p for outcome in outcomes for p in outcome.problems]
    problems += [line_problem(p) for shard in kept.values() for p in shard.problems]
    problems.sort(key=lambda p: p.line)
    cue_files, cue_problems = {}, []
    if cues is not None and (options.shards is None or options.shards.builds_cues):
        # decoded even after bad lines, to report every problem in one pass
        cue_files, cue_problems = write_cues(cues, options.out, options.workers, options.progress,
                                             desc=f"{TOOL_NAME} {command}: cues", pool=pool)
        if fingerprint is not None and not cue_problems:
            write_cues_receipt(options.out, fingerprint, cue_files)
    if cue_problems or (problems and not options.skip_bad):
        raise BuildError(_failure(input_path, problems, cue_problems, options.skip_bad), problems + cue_problems)
    if options.shards is not None:
        return BuildSummary(out=options.out, manifest=None, skipped=problems, built=len(outcomes),
                            kept=len(kept), slice=options.shards, planned=len(selected),
                            seconds=time.monotonic() - started)
    shards = dict(kept)
    shards.update((o.shard_id, VerifiedShard(o.entry, o.records, ())) for o in outcomes)
    manifest = commit_build(options.out, build_plan, [shards[k] for k in range(build_plan.num_shards)],
                            problems, cue_files, stateful=True)
    return BuildSummary(out=options.out, manifest=manifest, skipped=problems, seconds=time.monotonic() - started,
                        built=len(outcomes), kept=len(kept), planned=build_plan.num_shards)


def _probe(items: Sequence, plan: Callable, problems: list, options: BuildOptions, desc: str,
           pool=None) -> tuple[list, list]:
    """Size every item from its headers (in ``workers`` processes, this one while they start): the items that can
    be planned (or what their plan prepared for ``load``) and their plans; the others' problems are appended to
    ``problems``."""
    planned_items, plans = [], []
    probes = map_while_starting(functools.partial(guarded, plan), items, options.workers, 64, pool)
    # The bar counts each result as it arrives: a bar wrapped around ``probes`` inside ``zip`` is never resumed
    # after the last one, and a log file (where tqdm writes only the final state) would end at n - 1 of n.
    with tqdm(total=len(items), desc=desc, unit="sample", disable=not options.progress) as bar:
        for item, result in zip(items, probes):
            bar.update(1)
            if isinstance(result, LineProblem):
                problems.append(result)
            elif result.prepared is not None:  # sizing did load's work: load gets its result, the plan keeps none
                planned_items.append(result.prepared)
                plans.append(dataclasses.replace(result, prepared=None))
            else:
                planned_items.append(item)
                plans.append(result)
    return planned_items, plans


def _keep_verified(out: str, build_plan: BuildPlan, fingerprint: str, selected: Sequence[int], progress: bool,
                   jobs: int) -> dict[int, VerifiedShard]:
    """The selected shards already in ``out`` that verify against the plan (``jobs`` at a time); the others are
    removed (with their receipts) so they are built again."""
    present = [k for k in selected if os.path.isdir(os.path.join(out, shard_dir_name(k)))]
    kept, _ = verify_all(out, build_plan, fingerprint, present, check_hashes=True, progress=progress, jobs=jobs)
    for k in present:
        if k not in kept:
            shutil.rmtree(os.path.join(out, shard_dir_name(k)))
            receipt = receipt_path(out, shard_dir_name(k))
            if os.path.exists(receipt):
                os.remove(receipt)
    return kept


def _failure(input_path: str, problems: list[LineProblem], cue_problems: list[CueProblem], skip_bad: bool) -> str:
    """The one-line summary of a failed build (the problems themselves travel in the ``BuildError``)."""
    if not cue_problems:
        return (f"{input_path}: {len(problems)} bad line(s); nothing was packed "
                f"(fix them, or pass --skip-bad to pack the rest)")
    counts = [f"{len(problems)} bad line(s)"] if problems and not skip_bad else []
    counts.append(f"{len(cue_problems)} cue problem(s)")
    return f"{input_path}: {' and '.join(counts)}; nothing was packed"


def _provenance(input_path: str, command: str, recorded_options: dict, input_sha256: str | None = None) -> dict:
    return {
        "input": {"path": os.path.abspath(input_path) if input_sha256 is None else input_path,
                  "sha256": input_sha256 or hash_file(input_path).sha256},
        "tool": TOOL_NAME,
        "tool_version": tool_version(),
        "command": command,
        "options": recorded_options,
    }


__all__ = ["EXECUTORS", "BuildOptions", "BuildSummary", "run_build"]
