"""Running a convert: the source pack's samples through the build's executor and shard writer into ``--out``.

The pieces are the build's own (``packer.build``): ``claim_output`` takes ``--out`` (its lock; a directory holding
anything no speechpack record lists is refused; a finished pack is replaced only with ``--overwrite``), the
``BuildPlan`` is recorded before the first shard (so a rerun after a kill resumes, keeping every shard that
verifies against its receipt), ``run_shard_jobs`` writes the shards in the same order whatever ``--workers`` is,
and ``commit_build`` writes ``columns/`` and ``dataset.json`` last.  What differs from a build: the plan is read
from the source's index records instead of probed from headers, the shard cuts are the source's (so sample ``i``
stays in the shard it was in), and ``cues/`` is the source's, copied file by file and checked against the hashes
its ``dataset.json`` lists, its enrollment audio stored again with the convert's codec (``packer.convert.cues``),
with a receipt like a build's cue banks.  Provenance names the source pack (path and
the sha256 of its ``dataset.json``), the convert's options and the source's own provenance.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

from speechpack.packer.build.encoding import Encoding
from speechpack.packer.build.executor import stop_pool, worker_pool
from speechpack.packer.build.output_dir import claim_output
from speechpack.packer.build.plan import BuildPlan
from speechpack.packer.build.run import BuildSummary, keep_verified, commit_build, verify_cues
from speechpack.packer.build.shards import run_shard_jobs, shard_jobs
from speechpack.packer.build.state import ShardMismatch, VerifiedShard, write_cues_receipt
from speechpack.packer.convert.cues import convert_cues
from speechpack.packer.convert.source import load_item, open_source, pack_items, plan_item
from speechpack.media.codecs import DEFAULT_BLOCK_SECONDS, codec
from speechpack.schemas import units
from speechpack.schemas.constants import CODEC_OPUS, CODEC_PCM16, TOOL_NAME, tool_version
from speechpack.schemas.errors import BuildError, InternalError, OptionError, SpeechpackError
from speechpack.schemas.format import FileEntry
from speechpack.schemas.line_problems import LineProblem

#: What ``dataset.json``'s provenance says ran.
COMMAND = "convert"


@dataclass(frozen=True)
class ConvertOptions:
    """``speechpack convert``'s options.  ``codec``, ``opus_bitrate``, ``block_seconds`` and ``digests`` shape the
    bytes (recorded in provenance); ``workers``, ``overwrite`` and ``progress`` only how it runs."""

    out: str
    codec: str = CODEC_PCM16
    opus_bitrate: int | None = None
    block_seconds: float = DEFAULT_BLOCK_SECONDS
    digests: bool = True
    workers: int = 1
    overwrite: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        units.WORKERS.check(self.workers)
        codec(self.codec)  # an unknown name is an OptionError naming the codecs
        if self.codec != CODEC_OPUS and self.opus_bitrate is not None:
            raise OptionError("--opus-bitrate only applies with --codec opus")

    def encoding(self, sample_rate: int) -> Encoding:
        """How the converted pack stores its audio at the source's rate (``packer.build.encoding``); options that
        cannot work there (Opus's rates, a bit rate out of range, ``--no-digests`` with a codec) are
        ``OptionError`` s, raised before anything is written."""
        return Encoding.of(self.codec, sample_rate, self.block_seconds, self.opus_bitrate, self.digests)

    def recorded(self, sample_rate: int) -> dict:
        """The options that shape the converted pack's bytes (the build's own record of its encoding)."""
        return {"codec": self.codec, "digests": self.encoding(sample_rate).digests,
                **self.encoding(sample_rate).recorded(self.block_seconds)}


def check_apart(source: str, out: str) -> None:
    """``--out`` must be neither the source pack nor inside it, nor hold it: a convert replaces what is in
    ``--out`` and must never touch its input."""
    if "://" in source:
        return
    src, dst = os.path.realpath(source), os.path.realpath(out)
    if src == dst:
        where = "is the source pack"
    elif dst.startswith(src + os.sep):
        where = "is inside the source pack"
    elif src.startswith(dst + os.sep):
        where = "holds the source pack"
    else:
        return
    raise SpeechpackError(f"{out}: {where} {source}; choose another --out (a convert never writes into its input)")


def convert_pack(source: str, options: ConvertOptions) -> BuildSummary:
    """Write the pack ``source`` into ``options.out`` with ``options.codec`` (see the module docstring); commit, or
    raise and leave what a rerun resumes from."""
    started = time.monotonic()
    check_apart(source, options.out)
    pack = open_source(source)
    encoding = options.encoding(pack.sample_rate)  # options the source's rate cannot take: refused before writing
    by_shard = pack_items(pack)
    plans = [[plan_item(item) for item in items] for items in by_shard]
    provenance = {
        "input": {"path": by_shard[0][0].source if by_shard and by_shard[0] else os.path.abspath(source),
                  "sha256": pack.opened.manifest_sha256},
        "tool": TOOL_NAME,
        "tool_version": tool_version(),
        "command": COMMAND,
        "options": {**options.recorded(pack.sample_rate), "source_format_minor": pack.manifest.format_minor,
                    "source_provenance": pack.manifest.provenance},
    }
    build_plan = BuildPlan(kind=pack.kind, sample_rate=pack.sample_rate,
                           shards=tuple(tuple(shard) for shard in plans), provenance=provenance,
                           cues=bool(pack.manifest.cues))
    if build_plan.encoding != encoding:  # the writer reads the encoding back from the recorded options
        raise InternalError(f"convert recorded {build_plan.encoding}, asked for {encoding}")
    load = functools.partial(load_item, keep_statistics=codec(options.codec).lossless)
    # the pool first, as a build makes it: its workers fork before any thread exists and before the lock is taken
    with worker_pool(options.workers) as pool, \
            claim_output(options.out, options.overwrite, resume=False) as claim:
        try:
            return _convert(pack, build_plan, by_shard, load, options, claim, pool, started)
        except BaseException as err:
            if pool is not None:
                stop_pool(pool, terminate=isinstance(err, KeyboardInterrupt))
            failure = claim.failed(err)
            if failure is err:
                raise
            raise failure from err


def _convert(pack, build_plan: BuildPlan, by_shard, load, options: ConvertOptions, claim, pool,
             started: float) -> BuildSummary:
    fingerprint = claim.prepare(build_plan)
    every = range(build_plan.num_shards)
    kept = keep_verified(options.out, build_plan, fingerprint, every, options.progress, options.workers)
    building = [k for k in every if k not in kept]
    claim.building = building
    jobs = shard_jobs(options.out, build_plan.kind, build_plan.sample_rate, building, by_shard, build_plan.shards,
                      load, False, fingerprint, encoding=build_plan.encoding)
    outcomes = run_shard_jobs(jobs, "local", options.workers, None, options.progress,
                              desc=f"{TOOL_NAME} {COMMAND}: packing", pool=pool)
    problems: list[LineProblem] = sorted((p for o in outcomes for p in o.problems), key=lambda p: p.line)
    if problems:
        raise BuildError(f"{pack.path}: {len(problems)} sample(s) could not be read; nothing was converted",
                         problems)
    cue_files: dict[str, FileEntry] = {}
    if build_plan.cues:
        try:
            cue_files = verify_cues(options.out, fingerprint)
        except ShardMismatch:
            cue_files = convert_cues(pack, options.out, build_plan.encoding)
            write_cues_receipt(options.out, fingerprint, cue_files)
    shards = dict(kept)
    shards.update((o.shard_id, VerifiedShard(o.entry, o.records, ())) for o in outcomes)
    manifest = commit_build(options.out, build_plan, [shards[k] for k in every], [], cue_files, stateful=True)
    return BuildSummary(out=options.out, manifest=manifest, seconds=time.monotonic() - started,
                        built=len(outcomes), kept=len(kept), planned=build_plan.num_shards)


__all__ = ["ConvertOptions", "check_apart", "convert_pack"]
