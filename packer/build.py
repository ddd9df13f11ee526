"""Running a build: decode items in a process pool, append them in input order, commit or leave nothing.

The output is a pure function of the input and the options that shape it: results are consumed in input order
whatever ``workers`` is, so ``--workers 1`` and ``--workers 8`` give byte-identical packs.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tqdm import tqdm

from packer.adapters.audio_bank import (
    SimulationOptions,
    _pyroomacoustics,
    check_bank_kind,
    draw_rooms,
    load_bank_file,
    load_simulated,
    plan_bank_file,
    plan_simulated,
    read_bank_input,
)
from packer.adapters.wesep import load_wesep_sample, plan_wesep_sample, read_wesep_list, speaker_slots
from packer.audio import AudioError
from packer.cues import CueBuild, CueProblem, prepare_cues, write_cues
from packer.executor import BackgroundConsumer, map_in_order
from packer.plan import plan_shards
from packer.sample import PackedSample, SamplePlan
from packer.writer import PackWriter, hash_file
from schemas.constants import (
    DEFAULT_SAMPLE_RATE,
    DEFAULT_SHARD_BYTES,
    KIND_RIR,
    MANIFEST_NAME,
    SHARD_DIR_DIGITS,
    SHARD_DIR_PREFIX,
    SKIPPED_NAME,
    TEMP_PREFIX,
    TOOL_NAME,
    tool_version,
)
from schemas.columns import COLUMNS_DIR
from schemas.cues import CUES_DIR, LABELS_DIR
from schemas.errors import BuildError, SpeechpackError
from schemas.format import Manifest
from schemas.units import format_bytes
from schemas.wesep_list import LineProblem

_PACK_FILES = (MANIFEST_NAME, SKIPPED_NAME, COLUMNS_DIR, CUES_DIR)
_SHARD_NAME = re.compile(re.escape(SHARD_DIR_PREFIX) + r"\d{%d,}" % SHARD_DIR_DIGITS)


@dataclass(frozen=True)
class BuildOptions:
    """Options shared by every ``speechpack build`` command.

    ``workers`` and ``progress`` change how a build runs, never what it writes; everything else is recorded in
    the manifest's provenance.
    """

    out: str
    sample_rate: int = DEFAULT_SAMPLE_RATE
    shard_bytes: int = DEFAULT_SHARD_BYTES
    workers: int = 1
    skip_bad: bool = False
    overwrite: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if self.sample_rate <= 0:
            raise SpeechpackError(f"sample_rate must be a positive number of Hz, got {self.sample_rate}")
        if self.shard_bytes <= 0:
            raise SpeechpackError(f"shard size must be positive, got {self.shard_bytes} bytes")
        if self.workers < 1:
            raise SpeechpackError(f"workers must be at least 1, got {self.workers}")

    def recorded(self) -> dict:
        """The options that shape the bytes of the pack (provenance)."""
        return {"sample_rate": self.sample_rate, "shard_bytes": self.shard_bytes, "skip_bad": self.skip_bad}


@dataclass(frozen=True)
class BuildSummary:
    out: str
    manifest: Manifest
    skipped: list[LineProblem] = field(default_factory=list)
    seconds: float = 0.0

    def describe(self) -> str:
        totals = self.manifest.totals
        text = (f"packed {totals['samples']} samples ({totals['hours']:.3f} h, {totals['speakers']} speakers) into "
                f"{len(self.manifest.shards)} shard(s), {format_bytes(totals['bytes'])}, in {self.seconds:.2f} s "
                f"-> {self.out}")
        banks = sorted({name.split("/")[0] for name in self.manifest.cues if "/" in name} - {LABELS_DIR})
        if self.manifest.cues:
            labelled = any(name.startswith(f"{LABELS_DIR}/") for name in self.manifest.cues)
            labels = " and speaker labels" if labelled else ""
            text += f"\ncues: {', '.join(banks) or 'none'}{labels} in {os.path.join(self.out, CUES_DIR)}"
        if self.skipped:
            text += f"\nskipped {len(self.skipped)} bad line(s); see {os.path.join(self.out, SKIPPED_NAME)}"
        return text


def _wesep_steps(sample_rate: int) -> dict:
    """The plan and load steps of a WeSep sample, whether it comes from a raw list or from tar shards."""
    return {"plan": functools.partial(plan_wesep_sample, sample_rate=sample_rate),
            "load": functools.partial(load_wesep_sample, sample_rate=sample_rate)}


def build_wesep(list_path: str, options: BuildOptions, root: str | None = None, cues: str | None = None,
                allow_pickle: bool = False) -> BuildSummary:
    """``speechpack build wesep``: a WeSep raw list to a ``tse`` or ``sources`` pack.

    ``cues`` is the split's ``cues.yaml``: every resource it points to is packed into ``cues/`` (see
    ``packer.cues``), after checking that each guaranteed cue has a lookup key for every slot of the list.
    ``allow_pickle`` lets spatial resources that are pickled dicts be unpickled (only for files you trust).
    """
    if not os.path.isfile(list_path):
        raise SpeechpackError(f"{list_path}: list file not found")
    wesep_list = read_wesep_list(list_path, root)
    recorded = options.recorded()
    if root:
        recorded["root"] = os.path.abspath(root)
    cue_build = None
    if cues is not None:
        cue_build = prepare_cues(cues, list(speaker_slots(wesep_list.lines)), root, options.sample_rate, allow_pickle)
        recorded.update(cue_build.recorded())
    return run_build(
        cues=cue_build,
        items=wesep_list.lines,
        problems=wesep_list.problems,
        **_wesep_steps(options.sample_rate),
        kind=wesep_list.kind,
        input_path=list_path,
        command="build wesep",
        recorded_options=recorded,
        options=options,
    )


def build_audio_bank(source: str, kind: str, options: BuildOptions) -> BuildSummary:
    """``speechpack build audio-bank``: every audio file of a directory (recursively, sorted) or of a list file
    (one path per line) to a ``noise`` or ``rir`` pack, one sample per file (``packer.adapters.audio_bank``)."""
    check_bank_kind(kind)
    bank = read_bank_input(source)
    recorded = {**options.recorded(), "kind": kind}
    is_dir = os.path.isdir(source)
    return run_build(
        items=bank.items,
        problems=bank.problems,
        plan=functools.partial(plan_bank_file, sample_rate=options.sample_rate),
        load=functools.partial(load_bank_file, sample_rate=options.sample_rate, kind=kind),
        kind=kind,
        input_path=os.path.abspath(source) if is_dir else source,
        command="build audio-bank",
        recorded_options=recorded,
        options=options,
        input_sha256=bank.sha256 if is_dir else None,
    )


def build_simulated_rirs(simulation: SimulationOptions, options: BuildOptions) -> BuildSummary:
    """``speechpack build audio-bank --kind rir --simulate N``: N shoebox-room RIRs simulated with
    pyroomacoustics, drawn deterministically from the seed."""
    _pyroomacoustics()  # fail before planning when the optional dependency is missing
    recorded = {**options.recorded(), "kind": KIND_RIR, "simulate": simulation.recorded()}
    return run_build(
        items=draw_rooms(simulation),
        problems=[],
        plan=functools.partial(plan_simulated, sample_rate=options.sample_rate),
        load=functools.partial(load_simulated, sample_rate=options.sample_rate),
        kind=KIND_RIR,
        input_path=f"<simulate {simulation.count}>",
        command="build audio-bank",
        recorded_options=recorded,
        options=options,
        input_sha256=simulation.sha256(),
    )


def build_wesep_shards(list_path: str, options: BuildOptions) -> BuildSummary:
    """``speechpack build wesep-shards``: WeSep tar shards (``shard.list``, one tar path per line) to the pack
    the same samples give as a raw list (same shard ``.npy`` files and ``columns/``; see ``wesep_shards``)."""
    from packer.adapters.wesep_shards import read_wesep_shards

    if not os.path.isfile(list_path):
        raise SpeechpackError(f"{list_path}: shard list not found")
    shards = read_wesep_shards(list_path)
    return run_build(
        items=shards.lines,
        problems=shards.problems,
        **_wesep_steps(options.sample_rate),
        kind=shards.kind,
        input_path=list_path,
        command="build wesep-shards",
        recorded_options=options.recorded(),
        options=options,
    )


def run_build(*, items: Sequence, problems: Sequence[LineProblem], plan: Callable[[object], SamplePlan],
              load: Callable[[object], PackedSample], kind: str, input_path: str, command: str,
              recorded_options: dict, options: BuildOptions, cues: CueBuild | None = None,
              input_sha256: str | None = None) -> BuildSummary:
    """Check and size every item from headers, plan the shards, decode and write; commit, or raise
    ``BuildError`` and leave no pack behind.

    ``items`` need ``line`` and ``key`` attributes; ``plan`` and ``load`` must be picklable and raise
    ``AudioError`` for bad input.  By default every problem is collected (decoding goes on after the first, to
    find the problems only decoding shows) and nothing is published; with ``skip_bad`` the good items are packed
    and the problems recorded in ``skipped.json``.  ``cues`` are written after the shards, before
    ``dataset.json``; a cue problem always fails the build (``skip_bad`` is about list lines).  ``input_sha256``
    replaces the hash of ``input_path`` in the provenance when the input is not one file (a directory, a
    simulation).
    """
    started = time.monotonic()
    problems = list(problems)
    if not items and not problems:
        raise SpeechpackError(f"{input_path}: the list holds no samples")
    progress = functools.partial(tqdm, unit="sample", disable=not options.progress)
    planned_items, plans = [], []
    probes = map_in_order(functools.partial(_guarded, plan), items, options.workers, chunksize=64)
    for item, result in zip(items, progress(probes, total=len(items), desc=f"{TOOL_NAME} {command}: checking")):
        if isinstance(result, LineProblem):
            problems.append(result)
        else:
            planned_items.append(item)
            plans.append(result)
    shard_plans = [[plans[i] for i in shard] for shard in plan_shards([p.nbytes for p in plans], options.shard_bytes)]
    created = _prepare_output(options.out, options.overwrite)
    try:
        with PackWriter(options.out, kind, options.sample_rate, shard_plans) as writer:
            write = not problems or options.skip_bad
            consumer = BackgroundConsumer(lambda sample: writer.add(sample) if sample is not None else writer.skip())
            try:
                decoded = map_in_order(functools.partial(_guarded, load), planned_items, options.workers)
                for sample_plan, result in zip(plans, progress(decoded, total=len(plans),
                                                               desc=f"{TOOL_NAME} {command}: packing")):
                    if isinstance(result, PackedSample) and result.elements != sample_plan.elements:
                        result = LineProblem(result.line, result.key, None,
                                             f"decoded to {result.num_frames} samples per channel, the file headers "
                                             f"promised {sample_plan.num_frames} (a file changed, or its header lies)")
                    if isinstance(result, LineProblem):
                        problems.append(result)
                        write = write and options.skip_bad
                        if write:
                            consumer.submit(None)
                    elif write:
                        consumer.submit(result)
                    # else: the build will fail; keep decoding only to report every problem in one pass
            except BaseException:
                consumer.abandon()
                raise
            consumer.close()
            problems.sort(key=lambda p: p.line)
            cue_files, cue_problems = {}, []
            if cues is not None:  # decoded even after bad lines, to report every problem in one pass
                cue_files, cue_problems = write_cues(cues, options.out, options.workers, options.progress,
                                                     desc=f"{TOOL_NAME} {command}: cues")
            if cue_problems or (problems and not options.skip_bad):
                raise BuildError(_failure(input_path, problems, cue_problems, options.skip_bad),
                                 problems + cue_problems)
            if writer.num_samples == 0:
                raise BuildError(f"{input_path}: every line was bad; nothing to pack", problems)
            manifest = writer.finish(
                provenance=_provenance(input_path, command, recorded_options, input_sha256),
                skipped=[p.to_dict() for p in problems],
                cues=cue_files,
            )
    except BaseException:
        _discard_output(options.out, created)
        raise
    return BuildSummary(out=options.out, manifest=manifest, skipped=problems, seconds=time.monotonic() - started)


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


def _guarded(fn: Callable, item):
    """Run ``fn`` on one item (in a worker): bad input becomes a ``LineProblem``, anything else propagates."""
    try:
        return fn(item)
    except AudioError as err:
        return LineProblem(item.line, item.key, err.path, err.reason)


def _is_pack_entry(name: str) -> bool:
    """Whether ``name`` is a file a pack writer makes (so ``--overwrite`` may delete it)."""
    return name in _PACK_FILES or _SHARD_NAME.fullmatch(name) is not None or (
        name.startswith(TEMP_PREFIX) and _is_pack_entry(name[len(TEMP_PREFIX):]))


def _prepare_output(out: str, overwrite: bool) -> bool:
    """Make ``out`` an empty directory; return whether it was created.

    A non-empty ``out`` is refused unless ``overwrite``; even then only a pack's own files are removed
    (``dataset.json`` first, so the old pack stops being a pack before its shards go).
    """
    if not os.path.exists(out):
        os.makedirs(out)
        return True
    if not os.path.isdir(out):
        raise SpeechpackError(f"{out}: exists and is not a directory")
    entries = sorted(os.listdir(out))
    if not entries:
        return False
    if not overwrite:
        raise SpeechpackError(f"{out}: directory is not empty; pass --overwrite to replace the pack in it")
    foreign = [name for name in entries if not _is_pack_entry(name)]
    if foreign:
        raise SpeechpackError(f"{out}: holds files that are not part of a pack ({', '.join(foreign[:5])}); "
                              f"refusing to delete them")
    _remove_pack_entries(out)
    return False


def _remove_pack_entries(out: str) -> None:
    manifest = os.path.join(out, MANIFEST_NAME)
    if os.path.exists(manifest):
        os.remove(manifest)
    for name in sorted(os.listdir(out)):
        if _is_pack_entry(name):
            path = os.path.join(out, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)


def _discard_output(out: str, created: bool) -> None:
    """After a failed build: remove what it wrote (the directory too, if the build made it)."""
    if not os.path.isdir(out):
        return
    _remove_pack_entries(out)
    if created and not os.listdir(out):
        os.rmdir(out)


__all__ = ["BuildOptions", "BuildSummary", "build_audio_bank", "build_simulated_rirs", "build_wesep", "run_build"]
