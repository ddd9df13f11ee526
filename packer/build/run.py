"""Running a build: decode items in a process pool, append them in input order, commit or leave nothing; and the
commit itself, which ``speechpack finalize`` also runs alone.

The output is a pure function of the input and the options that shape it: results are consumed in input order
whatever ``workers`` is, so ``--workers 1`` and ``--workers 8`` give byte-identical packs.

**Committing.**  Committing a pack from its shards: the last step of every build, and ``speechpack finalize PACK``
after a cluster array job (``--shards i/n``) has written every slice.

``finalize`` decodes nothing: it reads the plan the jobs recorded (``.tmp-plan.json``), verifies every planned
shard against it and against its receipt (``packer.build.state.verify_shard``: index, ``.npy`` headers, sizes,
hashes), checks ``cues/`` the same way when the plan has cues, and only then writes ``skipped.json``,
``columns/`` and ``dataset.json``, and removes the build state.  Any shard that is missing or does not verify
stops it, with the list of every such shard, so the jobs to rerun are known at once.

What a build did, ``BuildSummary``, is here too: the one summary ``speechpack build ...`` and ``speechpack finalize``
print, made when a pack is committed (``run_build`` returns it).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tqdm import tqdm

from speechpack.media.codecs import DEFAULT_BLOCK_SECONDS
from speechpack.packer.build.encoding import Encoding
from speechpack.packer.build.executor import map_while_starting, stop_pool, worker_pool
from speechpack.packer.build.output_dir import OutputClaim, claim_output, item_inputs
from speechpack.packer.build.plan import BuildPlan, PackedSample, SamplePlan, ShardSlice, plan_shards
from speechpack.packer.build.shards import guarded, import_ray, run_shard_jobs, shard_jobs
from speechpack.packer.build.state import (
    ShardMismatch,
    VerifiedShard,
    check_recorded_file,
    checkpoint,
    clear_state,
    load_plan,
    read_cues_receipt,
    receipt_path,
    verify_shard,
    write_cues_receipt,
)
from speechpack.packer.build.writer import PackTotals, commit_pack
from speechpack.packer.cues import CueBuild, CueProblem, write_cues
from speechpack.packer.files import hash_file
from speechpack.packer.ownership import locked
from speechpack.schemas.constants import (
    CODEC_PCM16,
    DEFAULT_SAMPLE_RATE,
    DEFAULT_SHARD_BYTES,
    MANIFEST_NAME,
    SKIPPED_NAME,
    TOOL_NAME,
    shard_dir_name,
    tool_version,
)
from speechpack.schemas.cues import CUES_DIR, LABELS_DIR
from speechpack.schemas.errors import BuildError, SpeechpackError
from speechpack.schemas.format import FileEntry, Manifest
from speechpack.schemas.units import SAMPLE_RATE, SHARD_BYTES, WORKERS, format_bytes, plural
from speechpack.schemas.line_problems import LineProblem

@dataclass(frozen=True)
class BuildSummary:
    """What a build did.  ``manifest`` is ``None`` after a ``--shards i/n`` job (the pack is not committed yet);
    ``built`` and ``kept`` count the shards this run wrote and the ones it found complete (``--resume``)."""

    out: str
    manifest: Manifest | None
    skipped: list[LineProblem] = field(default_factory=list)
    seconds: float = 0.0
    built: int = 0
    kept: int = 0
    slice: ShardSlice | None = None
    planned: int = 0

    def describe(self) -> str:
        if self.manifest is None:
            return (f"slice {self.slice}: built {self.built} and kept {self.kept} of its {self.planned} planned "
                    f"shard(s) in {self.seconds:.2f} s -> {self.out}\nwhen every slice is done: "
                    f"{TOOL_NAME} finalize {self.out}")
        totals = self.manifest.totals
        text = (f"packed {plural(totals['samples'], 'sample')} ({totals['hours']:.3f} h, {plural(totals['speakers'], 'speaker')}) into "
                f"{len(self.manifest.shards)} shard(s), {format_bytes(totals['bytes'])}, in {self.seconds:.2f} s "
                f"-> {self.out}")
        if self.kept:
            text += f"\nkept {self.kept} verified shard(s) of an earlier run, built {self.built}"
        banks = sorted({name.split("/")[0] for name in self.manifest.cues if "/" in name} - {LABELS_DIR})
        if self.manifest.cues:
            labelled = any(name.startswith(f"{LABELS_DIR}/") for name in self.manifest.cues)
            labels = " and speaker labels" if labelled else ""
            text += f"\ncues: {', '.join(banks) or 'none'}{labels} in {os.path.join(self.out, CUES_DIR)}"
        if self.skipped:
            text += f"\nskipped {len(self.skipped)} bad line(s); see {os.path.join(self.out, SKIPPED_NAME)}"
        return text


#: How many unverified shards a finalize error lists before it says "and N more".
_LISTED = 20
#: Shards ``finalize`` verifies at once: enough to keep a local disk or a network filesystem busy.
DEFAULT_JOBS = 4


def commit_build(pack_dir: str, build_plan: BuildPlan, shards: Sequence[VerifiedShard],
                 problems: Sequence[LineProblem], cue_files: dict[str, FileEntry], stateful: bool) -> Manifest:
    """Write ``columns/``, ``skipped.json`` and ``dataset.json`` for ``shards`` (every shard of the plan, in
    order); then remove the build state if there is one.  Raises ``BuildError`` when every line was bad."""
    if len(shards) != build_plan.num_shards:
        raise SpeechpackError(f"{pack_dir}: committing {len(shards)} of {build_plan.num_shards} planned shards")
    totals = PackTotals(build_plan.kind, build_plan.sample_rate, build_plan.encoding)
    for shard in shards:
        totals.add_shard(pack_dir, shard.entry, shard.records)
    ordered = sorted(problems, key=lambda p: p.line)
    if totals.samples == 0:
        raise BuildError(f"{build_plan.provenance['input']['path']}: every line was bad; nothing to pack", ordered)
    manifest = commit_pack(pack_dir, totals, build_plan.provenance, [p.to_dict() for p in ordered], cue_files)
    checkpoint("manifest")
    if stateful:
        clear_state(pack_dir)
    return manifest


def verify_cues(pack_dir: str, fingerprint: str, check_hashes: bool = True) -> dict[str, FileEntry]:
    """The files of ``cues/`` as its receipt lists them, after checking that they are all there and unchanged."""
    receipt = read_cues_receipt(pack_dir)
    cues_dir = os.path.join(pack_dir, CUES_DIR)
    if receipt is None or not os.path.isdir(cues_dir):
        raise ShardMismatch(f"{cues_dir}: missing or without a receipt (the job of slice 0/N builds the cues; "
                            f"rerun it with --resume)")
    plan_fingerprint, files = receipt
    if plan_fingerprint != fingerprint:
        raise ShardMismatch(f"{cues_dir}: built for another plan ({plan_fingerprint[:12]}...)")
    for name, recorded in files.items():
        check_recorded_file(os.path.join(cues_dir, *name.split("/")), recorded, check_hashes)
    return files


def verify_all(pack_dir: str, build_plan: BuildPlan, fingerprint: str, shard_ids: Sequence[int], check_hashes: bool,
               progress: bool = False, jobs: int = 1) -> tuple[dict[int, VerifiedShard], list[str]]:
    """Verify the given planned shards, ``jobs`` at a time (threads: hashing and reading release the GIL, and
    a shared filesystem serves several readers faster than one); return the ones that verify and a message for
    each that does not, in shard order."""
    def verify(shard_id: int) -> VerifiedShard | str:
        try:
            return verify_shard(pack_dir, shard_id, build_plan, fingerprint, check_hashes)
        except ShardMismatch as err:
            return str(err)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(tqdm(pool.map(verify, shard_ids), total=len(shard_ids), unit="shard",
                            disable=not progress or not shard_ids,  # no bar for nothing (a fresh build)
                            desc=f"{TOOL_NAME}: verifying shards"))
    verified = {k: r for k, r in zip(shard_ids, results) if isinstance(r, VerifiedShard)}
    return verified, [r for r in results if isinstance(r, str)]


def finalize_pack(pack_dir: str, check_hashes: bool = True, progress: bool = False,
                  jobs: int = DEFAULT_JOBS) -> BuildSummary:
    """``speechpack finalize PACK``: verify every planned shard (``jobs`` at a time) and commit the pack (see the
    module docstring)."""
    started = time.monotonic()
    if not os.path.isdir(pack_dir):
        raise SpeechpackError(f"{pack_dir}: not a directory")
    with locked(pack_dir, exclusive=True, log=None, wait=False):  # refused while a slice job still writes there
        return _finalize(pack_dir, check_hashes, progress, jobs, started)


def _finalize(pack_dir: str, check_hashes: bool, progress: bool, jobs: int, started: float) -> BuildSummary:
    build_plan, fingerprint = load_plan(pack_dir)
    verified, failures = verify_all(pack_dir, build_plan, fingerprint, range(build_plan.num_shards), check_hashes,
                                    progress, jobs)
    cue_files: dict[str, FileEntry] = {}
    if build_plan.cues:
        try:
            cue_files = verify_cues(pack_dir, fingerprint, check_hashes)
        except ShardMismatch as err:
            failures.append(str(err))
    if failures:
        listed = failures[:_LISTED] + ([f"... and {len(failures) - _LISTED} more"] if len(failures) > _LISTED else [])
        raise SpeechpackError(f"{pack_dir}: cannot finalize: {len(failures)} problem(s) with the planned "
                              f"{build_plan.num_shards} shard(s); rerun the jobs that build them (they keep what "
                              f"verifies):\n  " + "\n  ".join(listed))
    problems = [LineProblem.from_dict(p) for p in build_plan.problems]
    problems += [LineProblem.from_dict(p) for shard_id in range(build_plan.num_shards)
                 for p in verified[shard_id].problems]
    if problems and not build_plan.skip_bad:
        raise BuildError(f"{pack_dir}: {len(problems)} bad line(s) and the plan does not skip them", problems)
    if os.path.exists(os.path.join(pack_dir, MANIFEST_NAME)):
        os.remove(os.path.join(pack_dir, MANIFEST_NAME))  # a finalize killed after writing it: write it again
    manifest = commit_build(pack_dir, build_plan, [verified[k] for k in range(build_plan.num_shards)], problems,
                            cue_files, stateful=True)
    return BuildSummary(out=pack_dir, manifest=manifest, skipped=sorted(problems, key=lambda p: p.line),
                        seconds=time.monotonic() - started)


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
    ``codec``, ``opus_bitrate``, ``block_seconds`` and ``digests`` choose how the audio is stored (format 1.4,
    ``packer.build.encoding``; ``digests`` None: only with a codec); options that cannot work are an
    ``OptionError`` here, before any input is read.
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
    codec: str = CODEC_PCM16
    opus_bitrate: int | None = None
    block_seconds: float = DEFAULT_BLOCK_SECONDS
    digests: bool | None = None

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
        Encoding.of(self.codec, self.sample_rate, self.block_seconds, self.opus_bitrate, self.digests)  # refuses
        # codec options that cannot work now, before any input is read

    @property
    def encoding(self) -> Encoding:
        """How the build stores its audio (``packer.build.encoding``)."""
        return Encoding.of(self.codec, self.sample_rate, self.block_seconds, self.opus_bitrate, self.digests)

    def recorded(self) -> dict:
        """The options that shape the bytes of the pack (provenance); the codec's only when it is not pcm16 (or
        the pack has digests), so a pcm16 pack's manifest is what it always was."""
        return {"sample_rate": self.sample_rate, "shard_bytes": self.shard_bytes, "skip_bad": self.skip_bad,
                **self.encoding.recorded(self.block_seconds)}


def run_build(*, items: Sequence, problems: Sequence[LineProblem], plan: Callable[[object], SamplePlan],
              load: Callable[[object], PackedSample], kind: str, input_path: str, command: str,
              recorded_options: dict, options: BuildOptions, cues: CueBuild | None = None,
              input_sha256: str | None = None) -> BuildSummary:
    """Check and size every item from headers, plan the shards, decode and write; commit, or raise
    ``BuildError`` and leave no pack behind.

    ``items`` need ``line`` and ``key`` attributes; ``plan`` (an item's ``SamplePlan``, its part of the build plan)
    and ``load`` must be picklable and raise ``AudioError`` for bad input; a plan whose ``prepared`` is set hands that to ``load`` instead of the item.
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
    # the storage choice is recorded whatever the adapter recorded: the plan (and finalize) reads it from there
    recorded_options = {**recorded_options, **options.encoding.recorded(options.block_seconds)}
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
    kept = keep_verified(options.out, build_plan, fingerprint, selected, options.progress, options.workers)
    claim.building = [k for k in selected if k not in kept]
    jobs = shard_jobs(options.out, kind, options.sample_rate, [k for k in selected if k not in kept],
                      [[planned_items[i] for i in shard] for shard in ranges], build_plan.shards, load,
                      options.skip_bad, fingerprint, publish=not problems or options.skip_bad,
                      encoding=build_plan.encoding)
    outcomes = run_shard_jobs(jobs, options.executor, options.workers, options.ray_address, options.progress,
                              desc=f"{TOOL_NAME} {command}: packing", pool=pool)
    problems += [p for outcome in outcomes for p in outcome.problems]
    problems += [LineProblem.from_dict(p) for shard in kept.values() for p in shard.problems]
    problems.sort(key=lambda p: p.line)
    cue_files, cue_problems = {}, []
    if cues is not None and (options.shards is None or options.shards.builds_cues):
        # decoded even after bad lines, to report every problem in one pass
        cue_files, cue_problems = write_cues(cues, options.out, options.workers, options.progress,
                                             desc=f"{TOOL_NAME} {command}: cues", pool=pool,
                                             encoding=build_plan.encoding)
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


def keep_verified(out: str, build_plan: BuildPlan, fingerprint: str, selected: Sequence[int], progress: bool,
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


__all__ = ["DEFAULT_JOBS", "EXECUTORS", "BuildOptions", "BuildSummary", "commit_build", "finalize_pack",
           "keep_verified", "run_build", "verify_all", "verify_cues"]
