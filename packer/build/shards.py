"""Building a pack's shards: one shard's job, and running the jobs of a build where it was asked to run them.

**One shard's job** (``ShardJob``, ``build_shard``): "build shard k of the plan", done entirely where it runs.  A
worker (a Ray task, a process of a pool) decodes the shard's samples and writes the shard directory itself, under
``.tmp-`` and renamed into place, then writes its receipt when the build records its state.  Only small things
travel back to the driver (the shard's manifest entry, its index records and its problems): decoded audio never
crosses a process boundary, which is what makes a cluster build scale with the cluster and not with the driver's
network link.  The shard's bytes are the same as when this process writes it (same ``ShardWriter``, same sample
order), so every executor gives the same pack.

**Running the jobs** (``run_shard_jobs``) on an executor, ``local`` (this machine) or ``ray`` (a cluster); both
return the same ``ShardOutcome`` per job.  ``local`` runs whole-shard tasks in its pool when there are at least
``SHARD_TASKS_FROM`` shards per worker: each worker decodes and writes its shards (writing and hashing run in
parallel too), except the last ``STREAMED_TAIL`` shards, whose samples every worker decodes once it has no whole
shard left, for this process to write in order: with whole shards only, the last one ran alone while the other
workers idled.  With fewer shards it streams every sample that way (``map_in_order`` to one writer thread), which
keeps every worker busy even when the build has fewer shards than workers (a small pack, the last shards of a
slice); on one machine the cost of shipping decoded audio to the writer is a memory copy.

**``--executor ray``** runs one Ray task per planned shard, where the data is: the pack directory must be on a
filesystem every Ray node mounts at the same path (as a cluster's shared storage is); the driver only receives
each shard's manifest entry and index records, and commits the pack once every task is back.  Ray is an optional
dependency (``pip install 'speechpack[ray]'``), imported only when asked for.  The driver connects to ``address``
(``ray.init(address=...)``: ``"auto"`` for the cluster this machine belongs to, ``"ray://host:10001"`` for Ray
Client) or, without one, starts a local Ray instance for the build and stops it afterwards.  If Ray is already
initialised in this process (a notebook, a test fixture), that instance is used and left running.
"""

from __future__ import annotations

import contextlib
import functools
import queue
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from tqdm import tqdm

from speechpack.media.codecs import EncodeError
from speechpack.packer.audio.decode import AudioError
from speechpack.packer.audio.store import StoredAudio, measured
from speechpack.packer.build.state import ShardReceipt, checkpoint, write_receipt
from speechpack.packer.build.executor import BackgroundConsumer, map_in_order, worker_pool
from speechpack.packer.build.encoding import PCM16, EncodedAudio, Encoding, encode_sample
from speechpack.packer.build.plan import PackedSample, SamplePlan
from speechpack.packer.build.read_ahead import ReadAhead
from speechpack.packer.build.writer import PackWriter
from speechpack.schemas.constants import STREAM_TYPES
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.format import ShardEntry
from speechpack.schemas.line_problems import LineProblem


def guarded(fn: Callable, item):
    """Run ``fn`` on one item (in a worker): bad input becomes a ``LineProblem``, anything else propagates."""
    try:
        return fn(item)
    except AudioError as err:
        return LineProblem(item.line, item.key, err.path, err.reason)


def encoded(load: Callable, encoding: Encoding, sample_rate: int, item, measure_later: bool = False):
    """``guarded(load, item)`` with a decoded sample's audio encoded for ``encoding``'s codec
    (``packer.build.encoding.encode_sample``, which measures what a reader will decode).  What a compressed build
    runs where it decodes: the encode scales with ``--workers``, never on the writer thread (``measure_later``, in
    the writer's own process: the blocks' digests and statistics are, ``EncodedAudio``)."""
    return encode_result(encoding, sample_rate, guarded(load, item), measure_later)


def encode_result(encoding: Encoding, sample_rate: int, result, measure_later: bool = False):
    """The second half of ``encoded``: a decoded sample encoded (a ``LineProblem`` passes through, and audio the
    codec cannot store becomes one).  Run apart from the decoding where a reader thread reads ahead
    (``packer.build.read_ahead``)."""
    if not isinstance(result, PackedSample):
        return result
    try:
        return encode_sample(result, encoding, sample_rate, measure_later)
    except EncodeError as err:  # audio the codec cannot store: a problem of the sample's line
        return LineProblem(result.line, result.key, None, str(err))


def decode_measured(load: Callable, item):
    """``guarded(load, item)``, with every audio segment of a decoded sample measured (``measured``) where it was
    decoded: run in the pool's workers when they stream samples to one writer thread, it moves the statistics
    from that thread (the one part of a build that does not scale with ``--workers``) into the workers.  Where
    decoding and writing are two threads of one process, ``submit_decoded`` decides per sample instead."""
    result = guarded(load, item)
    return measured_sample(result) if isinstance(result, PackedSample) else result


def measured_sample(sample: PackedSample) -> PackedSample:
    """``sample`` with every audio segment measured (``measured``; the same values wherever they are computed)."""
    streams = {name: [measured(seg) if isinstance(seg, StoredAudio) else
                      seg.settled() if isinstance(seg, EncodedAudio) else seg for seg in segments]
               for name, segments in sample.streams.items()}
    return replace(sample, streams=streams)


def submit_decoded(consumer: BackgroundConsumer, result) -> None:
    """Hand a decoded sample (or a problem) to the writer thread; when the writer is behind, measure the sample
    here first, in the time this thread would have waited.

    Which thread is longer depends on the corpus: resampling or decoding FLAC makes the decoding thread the longer
    one and the writer measures in its slack; 16-bit WAV at the pack's rate is little more than a read, and then
    the statistics (about a third of the writer's work) belong on the decoding side.  Deciding per sample from the writer's queue balances both, and the pack's bytes are the same
    either way."""
    if isinstance(result, PackedSample) and consumer.backlogged():
        result = measured_sample(result)
    consumer.submit(result)


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
    encoding: Encoding = PCM16


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
    ``--workers 1`` build (``_stream_locally`` with one worker): both release the GIL for most of their work, and
    the disk's waits (the fsyncs that close the shard, writeback under a busy disk) no longer stall decoding.
    With every core busy decoding other shards the thread only fills those waits; with a core to spare it overlaps
    the writing too.  A compressed shard is read a few samples ahead on a third thread (``_decoded``), so that
    this one only encodes."""
    return _stream_locally([job], 1, None, lambda: None)[0]


def shard_jobs(pack_dir: str, kind: str, sample_rate: int, shard_ids: Sequence[int], items_by_shard: Sequence,
               plans_by_shard: Sequence, load: Callable, skip_bad: bool, fingerprint: str | None,
               publish: bool = True, encoding: Encoding = PCM16) -> list[ShardJob]:
    """One job per planned shard in ``shard_ids`` (``items_by_shard[k]``, ``plans_by_shard[k]``: shard k's)."""
    return [ShardJob(pack_dir, kind, sample_rate, k, tuple(items_by_shard[k]), tuple(plans_by_shard[k]), load,
                     skip_bad, fingerprint, publish, encoding) for k in shard_ids]


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
    try:
        with PackWriter(first.pack_dir, first.kind, first.sample_rate, [list(job.plans) for job in jobs],
                        shard_ids=[job.shard_id for job in jobs], on_shard=published,
                        encoding=first.encoding) as writer:
            consumer = BackgroundConsumer(lambda r: writer.add(r) if isinstance(r, PackedSample) else writer.skip(r))
            writing = first.publish
            try:
                with contextlib.ExitStack() as reading:
                    decoded = _decoded(first, items, workers, pool, reading)
                    for plan, result in zip(plans, decoded):
                        result = check_decoded(result, plan)
                        if isinstance(result, LineProblem):
                            problems.append(result)
                            writing = writing and first.skip_bad
                        if writing:
                            submit_decoded(consumer, result)
                        # else: the build will fail; keep decoding only to report every problem in one pass
                        advance()
            except BaseException:
                consumer.abandon()
                raise
            consumer.close()
            if not writing:
                raise _NotWritten  # leaving the block removes the half-written shard
    except _NotWritten:
        pass
    by_line = {(p.line, p.key): p for p in problems}
    result = []
    for job in jobs:
        if job.shard_id in outcomes:
            result.append(outcomes[job.shard_id])
        else:  # not written: hand back the problems of its samples
            mine = [by_line[(p.line, p.key)] for p in job.plans if (p.line, p.key) in by_line]
            result.append(ShardOutcome(job.shard_id, None, [], mine))
    return result


def _decoded(first: ShardJob, items: Sequence, workers: int, pool: ProcessPoolExecutor | None,
             reading: contextlib.ExitStack):
    """The jobs' samples, decoded (and encoded, for a codec) in order, for ``_stream_locally`` to write.

    A compressed build in this process (``workers == 1``: ``--workers 1``, or one shard inside a pool worker or a
    Ray task) reads ahead: a reader thread decodes the next samples while this thread encodes
    (``packer.build.read_ahead``; ``reading`` stops it however the caller's block ends).  In a pool each worker
    decodes and encodes its sample, and a pcm16 build's thread only decodes, so nothing would overlap."""
    if first.encoding.compressed:  # encoded (and measured) where decoded, in every case
        if workers == 1:
            ahead = reading.enter_context(ReadAhead(functools.partial(guarded, first.load), items))
            return (encode_result(first.encoding, first.sample_rate, result, measure_later=True) for result in ahead)
        step = functools.partial(encoded, first.load, first.encoding, first.sample_rate)
    else:  # measured where decoded when workers stream to this writer (see decode_measured)
        step = functools.partial(decode_measured if workers > 1 else guarded, first.load)
    return map_in_order(step, items, workers, pool=pool)


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


__all__ = ["ShardJob", "ShardOutcome", "build_shard", "check_decoded", "decode_measured", "encode_result", "encoded",
           "guarded", "import_ray", "measured_sample", "record_receipt", "run_shard_jobs", "run_shard_jobs_on_ray",
           "shard_jobs", "size_mismatch", "submit_decoded"]
