"""One unit of distributed build work: "build shard k of the plan", done entirely where it runs.

A worker (a Ray task, a process of a pool) decodes the shard's samples and writes the shard directory itself,
under ``.tmp-`` and renamed into place, then writes its receipt when the build records its state.  Only small
things travel back to the driver (the shard's manifest entry, its index records and its problems): decoded audio
never crosses a process boundary, which is what makes a cluster build scale with the cluster and not with the
driver's network link.  The shard's bytes are the same as when the local executor writes it (same ``ShardWriter``,
same sample order), so every executor gives the same pack.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from speechpack.packer.audio import AudioError, StoredAudio, measured
from speechpack.packer.build.state import ShardReceipt, write_receipt
from speechpack.packer.build.checkpoints import checkpoint
from speechpack.packer.build.executor import BackgroundConsumer
from speechpack.packer.sample import PackedSample, SamplePlan
from speechpack.packer.writer import PackWriter
from speechpack.schemas.constants import STREAM_TYPES
from speechpack.schemas.format import ShardEntry
from speechpack.schemas.wesep_list import LineProblem


def guarded(fn: Callable, item):
    """Run ``fn`` on one item (in a worker): bad input becomes a ``LineProblem``, anything else propagates."""
    try:
        return fn(item)
    except AudioError as err:
        return LineProblem(item.line, item.key, err.path, err.reason)


def decode_measured(load: Callable, item):
    """``guarded(load, item)``, with every audio segment of a decoded sample measured (``measured``) where it was
    decoded: run in the pool's workers when they stream samples to one writer thread, it moves the statistics
    from that thread (the one part of a build that does not scale with ``--workers``) into the workers.  With
    ``--workers 1`` the decoding thread is the longer of the two, so the writer thread measures instead."""
    result = guarded(load, item)
    if not isinstance(result, PackedSample):
        return result
    streams = {name: [measured(seg) if isinstance(seg, StoredAudio) else seg for seg in segments]
               for name, segments in result.streams.items()}
    return replace(result, streams=streams)


def check_decoded(result, plan: SamplePlan):
    """A decoded sample, or a ``LineProblem`` when it is bad or does not have the size its headers promised
    (the shard plan was made from them)."""
    if isinstance(result, PackedSample) and result.elements != plan.elements:
        return LineProblem(result.line, result.key, None, size_mismatch(result, plan))
    return result


def size_mismatch(result: PackedSample, plan: SamplePlan) -> str:
    """What differs between a decoded sample and its plan, in words that name it: the samples per channel when
    those differ, else the stream whose row count does (a channel count, or one array of several shorter)."""
    if result.num_frames != plan.num_frames:
        return (f"decoded to {result.num_frames} samples per channel, the file headers promised {plan.num_frames} "
                f"(a file changed, or its header lies)")
    got, promised = result.elements, plan.elements
    stream = next(s for s in sorted(set(got) | set(promised)) if got.get(s) != promised.get(s))
    detail = ""
    audio = stream in STREAM_TYPES and STREAM_TYPES[stream].audio
    if audio and result.num_frames and promised.get(stream, 0) % result.num_frames == 0 == got.get(stream, 0) % \
            result.num_frames:
        detail = (f": {got.get(stream, 0) // result.num_frames} channel(s) decoded, "
                  f"{promised.get(stream, 0) // result.num_frames} promised")
    return (f"stream {stream!r} decoded to {got.get(stream, 0)} rows, the file headers promised "
            f"{promised.get(stream, 0)}{detail} (a file changed, or its header lies)")


@dataclass(frozen=True)
class ShardJob:
    """Everything a worker needs to write planned shard ``shard_id`` (picklable: the items, their plans and the
    adapter's ``load``).  ``fingerprint`` is the plan's, set when the build records receipts.  With ``publish``
    false nothing is written: the samples are only decoded, to report every problem of a build that fails anyway
    (bad lines without ``--skip-bad``)."""

    pack_dir: str
    kind: str
    sample_rate: int
    shard_id: int
    items: tuple
    plans: tuple[SamplePlan, ...]
    load: Callable
    skip_bad: bool
    fingerprint: str | None = None
    publish: bool = True


@dataclass(frozen=True)
class ShardOutcome:
    """What comes back from a shard job: ``entry`` is ``None`` when the shard was not written (a bad sample
    without ``--skip-bad``: its samples were still all decoded, to report every problem)."""

    shard_id: int
    entry: ShardEntry | None
    records: list
    problems: list[LineProblem]


def record_receipt(pack_dir: str, fingerprint: str | None, shard_id: int, entry: ShardEntry,
                   skipped: Sequence[LineProblem]) -> None:
    """Once a shard is in place: its receipt, when the build records its state (``fingerprint`` set)."""
    if fingerprint is not None:
        write_receipt(pack_dir, ShardReceipt(fingerprint, entry, tuple(p.to_dict() for p in skipped)),
                      before_rename=lambda: checkpoint(f"receipt-temp:{shard_id}"))
        checkpoint(f"receipt:{shard_id}")


class _NotWritten(Exception):
    """A bad sample without ``--skip-bad``: the shard must not be published."""


def build_shard(job: ShardJob) -> ShardOutcome:
    """Decode and write one planned shard; write its receipt when ``job.fingerprint`` is set.

    Decoding runs here and writing (statistics, hashing, writes, the closing fsyncs) on a writer thread, as in a
    ``--workers 1`` build: both release the GIL for most of their work, and the disk's waits (the fsyncs that
    close the shard, writeback under a busy disk) no longer stall decoding.  With every core busy decoding other
    shards the thread only fills those waits; with a core to spare it overlaps the writing too."""
    problems: list[LineProblem] = []
    published: list[tuple[ShardEntry, list]] = []

    def publish(shard_id: int, entry: ShardEntry, records: list, skipped: list) -> None:
        record_receipt(job.pack_dir, job.fingerprint, shard_id, entry, skipped)
        published.append((entry, list(records)))

    try:
        with PackWriter(job.pack_dir, job.kind, job.sample_rate, [list(job.plans)], shard_ids=[job.shard_id],
                        on_shard=publish) as writer:
            consumer = BackgroundConsumer(lambda r: writer.add(r) if isinstance(r, PackedSample) else writer.skip(r))
            writing = job.publish
            try:
                for item, plan in zip(job.items, job.plans):
                    result = check_decoded(guarded(job.load, item), plan)
                    if isinstance(result, LineProblem):
                        problems.append(result)
                        writing = writing and job.skip_bad
                    if writing:
                        consumer.submit(result)
            except BaseException:
                consumer.abandon()
                raise
            consumer.close()
            if not writing:
                raise _NotWritten  # leaving the block removes the half-written shard
    except _NotWritten:
        pass
    if not published:
        return ShardOutcome(job.shard_id, None, [], problems)
    entry, records = published[0]
    return ShardOutcome(job.shard_id, entry, records, problems)


def shard_jobs(pack_dir: str, kind: str, sample_rate: int, shard_ids: Sequence[int], items_by_shard: Sequence,
               plans_by_shard: Sequence, load: Callable, skip_bad: bool, fingerprint: str | None,
               publish: bool = True) -> list[ShardJob]:
    """One job per planned shard in ``shard_ids`` (``items_by_shard[k]``, ``plans_by_shard[k]``: shard k's)."""
    return [ShardJob(pack_dir, kind, sample_rate, k, tuple(items_by_shard[k]), tuple(plans_by_shard[k]), load,
                     skip_bad, fingerprint, publish) for k in shard_ids]


__all__ = ["ShardJob", "ShardOutcome", "build_shard", "check_decoded", "decode_measured", "guarded", "record_receipt",
           "shard_jobs", "size_mismatch"]
