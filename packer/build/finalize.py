"""Committing a pack from its shards: the last step of every build, and ``speechpack finalize PACK`` after a
cluster array job (``--shards i/n``) has written every slice.

``finalize`` decodes nothing: it reads the plan the jobs recorded (``.tmp-plan.json``), verifies every planned
shard against it and against its receipt (``packer.build.state.verify_shard``: index, ``.npy`` headers, sizes,
hashes), checks ``cues/`` the same way when the plan has cues, and only then writes ``skipped.json``,
``columns/`` and ``dataset.json``, and removes the build state.  Any shard that is missing or does not verify
stops it, with the list of every such shard, so the jobs to rerun are known at once.

What a build did, ``BuildSummary``, is here too: the one summary ``speechpack build ...`` and ``speechpack finalize``
print, made when a pack is committed (``packer.build.run`` returns the one this module makes).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

from tqdm import tqdm

from speechpack.packer.build.checkpoints import checkpoint
from speechpack.packer.build.plan import BuildPlan, ShardSlice
from speechpack.packer.build.state import (
    ShardMismatch,
    VerifiedShard,
    clear_state,
    load_plan,
    read_cues_receipt,
    verify_shard,
)
from speechpack.packer.build.writer import PackTotals, commit_pack
from speechpack.packer.files import hash_file
from speechpack.packer.ownership import locked
from speechpack.schemas.constants import MANIFEST_NAME, SKIPPED_NAME, TOOL_NAME
from speechpack.schemas.cues import CUES_DIR, LABELS_DIR
from speechpack.schemas.errors import BuildError, SpeechpackError
from speechpack.schemas.format import FileEntry, Manifest
from speechpack.schemas.units import format_bytes, plural
from speechpack.schemas.wesep_list import LineProblem


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


def line_problem(obj: dict) -> LineProblem:
    """A ``LineProblem`` back from its ``to_dict()`` form (plans and receipts store them as JSON)."""
    return LineProblem(line=obj["line"], key=obj["key"], path=obj["path"], reason=obj["reason"])


def commit_build(pack_dir: str, plan: BuildPlan, shards: Sequence[VerifiedShard], problems: Sequence[LineProblem],
                 cue_files: dict[str, FileEntry], stateful: bool) -> Manifest:
    """Write ``columns/``, ``skipped.json`` and ``dataset.json`` for ``shards`` (every shard of the plan, in
    order); then remove the build state if there is one.  Raises ``BuildError`` when every line was bad."""
    if len(shards) != plan.num_shards:
        raise SpeechpackError(f"{pack_dir}: committing {len(shards)} of {plan.num_shards} planned shards")
    totals = PackTotals(plan.kind, plan.sample_rate)
    for shard in shards:
        totals.add_shard(pack_dir, shard.entry, shard.records)
    ordered = sorted(problems, key=lambda p: p.line)
    if totals.samples == 0:
        raise BuildError(f"{plan.provenance['input']['path']}: every line was bad; nothing to pack", ordered)
    manifest = commit_pack(pack_dir, totals, plan.provenance, [p.to_dict() for p in ordered], cue_files)
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
        path = os.path.join(cues_dir, *name.split("/"))
        if not os.path.isfile(path) or os.path.getsize(path) != recorded.size:
            raise ShardMismatch(f"{path}: missing or not {recorded.size} bytes as its receipt says")
        if check_hashes and hash_file(path).sha256 != recorded.sha256:
            raise ShardMismatch(f"{path}: sha256 differs from its receipt (changed or corrupted)")
    return files


def verify_all(pack_dir: str, plan: BuildPlan, fingerprint: str, shard_ids: Sequence[int], check_hashes: bool,
               progress: bool = False, jobs: int = 1) -> tuple[dict[int, VerifiedShard], list[str]]:
    """Verify the given planned shards, ``jobs`` at a time (threads: hashing and reading release the GIL, and
    a shared filesystem serves several readers faster than one); return the ones that verify and a message for
    each that does not, in shard order."""
    def verify(shard_id: int) -> VerifiedShard | str:
        try:
            return verify_shard(pack_dir, shard_id, plan, fingerprint, check_hashes)
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
    plan, fingerprint = load_plan(pack_dir)
    verified, failures = verify_all(pack_dir, plan, fingerprint, range(plan.num_shards), check_hashes, progress,
                                    jobs)
    cue_files: dict[str, FileEntry] = {}
    if plan.cues:
        try:
            cue_files = verify_cues(pack_dir, fingerprint, check_hashes)
        except ShardMismatch as err:
            failures.append(str(err))
    if failures:
        listed = failures[:_LISTED] + ([f"... and {len(failures) - _LISTED} more"] if len(failures) > _LISTED else [])
        raise SpeechpackError(f"{pack_dir}: cannot finalize: {len(failures)} problem(s) with the planned "
                              f"{plan.num_shards} shard(s); rerun the jobs that build them (they keep what "
                              f"verifies):\n  " + "\n  ".join(listed))
    problems = [line_problem(p) for p in plan.problems]
    problems += [line_problem(p) for shard_id in range(plan.num_shards) for p in verified[shard_id].problems]
    if problems and not plan.skip_bad:
        raise BuildError(f"{pack_dir}: {len(problems)} bad line(s) and the plan does not skip them", problems)
    if os.path.exists(os.path.join(pack_dir, MANIFEST_NAME)):
        os.remove(os.path.join(pack_dir, MANIFEST_NAME))  # a finalize killed after writing it: write it again
    manifest = commit_build(pack_dir, plan, [verified[k] for k in range(plan.num_shards)], problems, cue_files,
                            stateful=True)
    return BuildSummary(out=pack_dir, manifest=manifest, skipped=sorted(problems, key=lambda p: p.line),
                        seconds=time.monotonic() - started)


__all__ = ["BuildSummary", "DEFAULT_JOBS", "commit_build", "finalize_pack", "line_problem", "verify_all", "verify_cues"]
