"""The on-disk state of a pack that is still being built: the plan it follows and a receipt per finished shard;
and the named points where a test kills a build to prove that a rerun recovers.

Written by every build, so that any build can be continued after a kill (``docs/building.md``)::

    PACK/.tmp-plan.json                    the plan's fingerprint and shard cuts (compact: a rerun probes the input
                                           again and compares fingerprints); for ``--shards i/n`` the whole
                                           BuildPlan (packer.build.plan), which ``finalize`` verifies shards against
    PACK/.tmp-receipts/shard-000003.json   {plan fingerprint, the shard's ShardEntry (file sizes and hashes),
                                            the lines it skipped}
    PACK/.tmp-receipts/cues.json           {plan fingerprint, the files of cues/}

Everything starts with ``.tmp-`` so a reader ignores it (``schemas.format``), and ``finalize`` removes it after
``dataset.json`` is in place.  A shard directory is renamed into place complete (``ShardWriter.finish``), then
its receipt is written: a shard without a receipt is one whose job died in between, and is rebuilt (resume) or
reported (finalize).  ``verify_shard`` is the one check both use: the index matches the plan, the files match the
index, and their hashes match the receipt; no audio is decoded.

**Kill points.**  Named points of a build (or an export) where a test can kill it, to prove that a rerun recovers
from any of them.

``SPEECHPACK_KILL_AT=<point>`` makes the build process SIGKILL itself when it reaches ``<point>``: no clean-up
handler runs, exactly as when a cluster scheduler kills a job.  Points (``K`` a planned shard number):

``sample:<key>``   the sample was appended to its shard (the shard is half written, under ``.tmp-``)
``shard:<K>``      shard K was renamed into place, before its receipt was written
``receipt-temp:<K>``  shard K's receipt is written under its ``.tmp-`` name, not yet renamed
``receipt:<K>``    shard K's receipt was written
``columns``        ``columns/`` (and ``skipped.json``) are in place, ``dataset.json`` is not
``manifest``       ``dataset.json`` is in place, the build state (``.tmp-plan.json``, receipts) is not yet removed

and of ``speechpack export lhotse`` (``packer.export.output_dir``; ``I`` a sample number):

``export-audio:<I>``  sample I's audio file was renamed into place, its journal line is not yet written
``export-cuts``    every audio file is journaled and ``.tmp-cuts.jsonl.gz`` written, nothing committed yet
``export-commit``  ``cuts.jsonl.gz`` and ``speechpack-export.json`` are in place, the plan and journal not yet removed

``SPEECHPACK_FAULT`` chooses what happens there instead of SIGKILL (tests/packer/build/test_failed_builds.py):

``interrupt``  SIGINT to the whole process group, as Ctrl-C at a terminal sends it (run the build in its own
               session so that the test runner is not part of the group)
``enospc``     ``OSError(ENOSPC)`` raised at the point, as a full disk raises it in the writer

Deterministic where sleeps and timers are not: the kill happens at the same byte of the pack in every run.
Unset (the normal case) this costs one dictionary lookup per point.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from typing import Callable

from speechpack.packer.build.encoding import Encoding
from speechpack.packer.build.plan import PLAN_VERSION, BuildPlan
from speechpack.packer.files import fsync_dir, hash_file, write_json_atomic
from speechpack.packer.ownership import PlanOwnership
from speechpack.schemas.constants import (
    DIGESTS_NAME,
    SHARD_INDEX_NAME,
    STREAM_TYPES,
    TEMP_PREFIX,
    shard_dir_name,
    stream_file_name,
)
from speechpack.schemas.digests import check_digests_header
from speechpack.schemas.documents import read_json
from speechpack.schemas.errors import NpyHeaderError, PackFormatError, SpeechpackError
from speechpack.schemas.format import FileEntry, ShardEntry, check_shard_index
from speechpack.schemas.kinds import STREAMS_BY_KIND
from speechpack.schemas.npyfile import read_npy_header

PLAN_FILE = f"{TEMP_PREFIX}plan.json"
RECEIPTS_DIR = f"{TEMP_PREFIX}receipts"
CUES_RECEIPT = "cues.json"


# ------------------------------------------------------------------------------------------------------- plan

def describe_plan(kind: str, samples: int, num_shards: int, provenance: dict) -> str:
    """A short description for mismatch messages: the fields a person would compare."""
    options = provenance.get("options", {})
    digest = provenance.get("input", {}).get("sha256", "?")[:12]
    return (f"{kind} pack, {samples} samples in {num_shards} shard(s), input sha256 {digest}..., options "
            f"{json.dumps(options, sort_keys=True)}, tool {provenance.get('tool_version')}")


@dataclass(frozen=True)
class RecordedPlan:
    """What ``.tmp-plan.json`` says: enough to compare a rerun's plan with (the fingerprint), to describe it, and
    to know what the build may have written (``ownership``).  ``full`` is the whole plan, recorded only for
    ``--shards`` builds: ``finalize`` verifies every shard against it without the input at hand."""

    fingerprint: str
    kind: str
    cuts: tuple[int, ...]
    cues: bool
    provenance: dict
    full: BuildPlan | None = None

    @classmethod
    def of(cls, plan: BuildPlan, fingerprint: str | None = None) -> "RecordedPlan":
        return cls(fingerprint=fingerprint or plan.fingerprint(), kind=plan.kind,
                   cuts=tuple(len(shard) for shard in plan.shards), cues=plan.cues, provenance=plan.provenance,
                   full=plan)

    @property
    def num_shards(self) -> int:
        return len(self.cuts)

    def describe(self) -> str:
        return describe_plan(self.kind, sum(self.cuts), self.num_shards, self.provenance)

    def ownership(self) -> PlanOwnership:
        return PlanOwnership(kind=self.kind, num_shards=self.num_shards, cues=self.cues,
                             digests=Encoding.from_options(self.provenance.get("options", {})).digests)

    def to_dict(self, full: bool) -> dict:
        """The file's content: the whole plan (``full``) or its fingerprint, cuts and description."""
        if full:
            return {"fingerprint": self.fingerprint, "plan": self.full.to_dict()}
        return {"fingerprint": self.fingerprint, "compact": {"plan_version": PLAN_VERSION, "kind": self.kind,
                                                             "cuts": list(self.cuts), "cues": self.cues,
                                                             "provenance": self.provenance}}


def record_plan(pack_dir: str, plan: BuildPlan, full: bool = False, hint: str = "start again with --overwrite",
                fingerprint: str | None = None) -> str:
    """Write ``plan`` as the pack's plan, or check it equals the one already there; return its fingerprint.

    ``full`` records every sample's row (``--shards``: ``finalize`` needs them); otherwise only the fingerprint and
    the shard cuts (a few bytes per shard, where the rows cost about 80 bytes per sample).  The file is created
    with ``os.link`` (fails if it exists), so of several array jobs starting at once exactly one writes it and the
    others compare against it.  ``fingerprint``: the plan's, when the caller has it already.
    """
    this = RecordedPlan.of(plan, fingerprint)
    path = os.path.join(pack_dir, PLAN_FILE)
    if not os.path.exists(path):
        temp = f"{path}.{os.getpid()}"
        with open(temp, "w", encoding="utf-8") as fp:
            json.dump(this.to_dict(full), fp, sort_keys=True)
            fp.flush()
            os.fsync(fp.fileno())
        try:
            os.link(temp, path)
            fsync_dir(pack_dir)
        except FileExistsError:
            pass  # another job was first: compare below
        finally:
            os.remove(temp)
    recorded = load_recorded_plan(pack_dir)
    if recorded is None or recorded.fingerprint != this.fingerprint:
        raise SpeechpackError(
            f"{path}: this build's plan differs from the one the pack is being built with (different input or "
            f"options?)\n  recorded: {recorded.describe() if recorded else '?'}\n  this run: {this.describe()}\n"
            f"use the same input and options, or {hint}")
    return this.fingerprint


def load_recorded_plan(pack_dir: str) -> RecordedPlan | None:
    """The recorded plan (``None`` when there is none).  A whole plan's fingerprint is recomputed (a hand-edited
    plan does not keep its old one); a compact one's is taken as written (a rerun compares it with its own)."""
    path = os.path.join(pack_dir, PLAN_FILE)
    if not os.path.isfile(path):
        return None
    try:
        obj = read_json(path, error=ValueError)
    except ValueError as err:
        raise SpeechpackError(f"{path}: not JSON ({err}); remove the directory's build state, or start again "
                              f"with --overwrite") from None
    if isinstance(obj, dict) and isinstance(obj.get("plan"), dict):
        plan = BuildPlan.from_dict(obj["plan"], path)
        return RecordedPlan.of(plan)
    compact = obj.get("compact") if isinstance(obj, dict) else None
    try:
        if compact.get("plan_version") != PLAN_VERSION:
            raise SpeechpackError(f"{path}: plan_version {compact.get('plan_version')!r}, this speechpack reads "
                                  f"{PLAN_VERSION}")
        return RecordedPlan(fingerprint=str(obj["fingerprint"]), kind=str(compact["kind"]),
                            cuts=tuple(int(c) for c in compact["cuts"]), cues=bool(compact["cues"]),
                            provenance=dict(compact["provenance"]))
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise SpeechpackError(f"{path}: not a build plan (missing or bad field {err})") from None


def load_plan(pack_dir: str) -> tuple[BuildPlan, str]:
    """The whole recorded plan and its fingerprint, for ``finalize``."""
    recorded = load_recorded_plan(pack_dir)
    if recorded is None:
        raise SpeechpackError(f"{pack_dir}: no {PLAN_FILE}: not a build in progress")
    if recorded.full is None:
        raise SpeechpackError(f"{pack_dir}: a build that was not split with --shards i/n (its plan holds no "
                              f"per-sample rows to verify against): run its build command again to finish it; it "
                              f"keeps every shard that verifies")
    return recorded.full, recorded.fingerprint


def clear_state(pack_dir: str) -> None:
    """Remove the plan and the receipts (after ``dataset.json`` is in place, or before a fresh build)."""
    receipts = os.path.join(pack_dir, RECEIPTS_DIR)
    if os.path.isdir(receipts):
        shutil.rmtree(receipts)
    plan = os.path.join(pack_dir, PLAN_FILE)
    if os.path.exists(plan):
        os.remove(plan)
    fsync_dir(pack_dir)


# --------------------------------------------------------------------------------------------------- receipts

@dataclass(frozen=True)
class ShardReceipt:
    """What the job that wrote a shard knew when it finished: what to verify it against, and what it skipped."""

    plan: str
    shard: ShardEntry
    problems: tuple[dict, ...] = ()

    def to_dict(self) -> dict:
        return {"plan": self.plan, "shard": self.shard.to_dict(), "problems": list(self.problems)}

    @classmethod
    def from_dict(cls, obj, where: str) -> "ShardReceipt":
        if not isinstance(obj, dict) or set(obj) != {"plan", "shard", "problems"}:
            raise PackFormatError(f"{where}: not a shard receipt")
        return cls(plan=obj["plan"], shard=ShardEntry.from_dict(obj["shard"], f"{where}.shard"),
                   problems=tuple(obj["problems"]))


def receipt_path(pack_dir: str, name: str) -> str:
    return os.path.join(pack_dir, RECEIPTS_DIR, f"{name}.json" if not name.endswith(".json") else name)


def write_receipt(pack_dir: str, receipt: ShardReceipt, before_rename: Callable[[], None] | None = None) -> None:
    """Write the receipt under its ``.tmp-`` name, then rename it (see ``write_json_atomic``)."""
    os.makedirs(os.path.join(pack_dir, RECEIPTS_DIR), exist_ok=True)
    write_json_atomic(receipt_path(pack_dir, receipt.shard.directory), receipt.to_dict(), before_rename)


def read_receipt(pack_dir: str, shard_name: str) -> ShardReceipt | None:
    """The shard's receipt, or ``None`` when there is none (its job died before writing it)."""
    path = receipt_path(pack_dir, shard_name)
    if not os.path.isfile(path):
        return None
    try:
        return ShardReceipt.from_dict(read_json(path, error=ValueError), path)
    except (ValueError, KeyError, TypeError) as err:
        raise PackFormatError(f"{path}: not a shard receipt ({err})") from None


def write_cues_receipt(pack_dir: str, fingerprint: str, files: dict[str, FileEntry]) -> None:
    os.makedirs(os.path.join(pack_dir, RECEIPTS_DIR), exist_ok=True)
    write_json_atomic(receipt_path(pack_dir, CUES_RECEIPT),
                      {"plan": fingerprint, "files": {name: entry.to_dict() for name, entry in files.items()}})


def read_cues_receipt(pack_dir: str) -> tuple[str, dict[str, FileEntry]] | None:
    path = receipt_path(pack_dir, CUES_RECEIPT)
    if not os.path.isfile(path):
        return None
    obj = read_json(path, error=PackFormatError)
    files = {name: FileEntry.from_dict(entry, f"{path}.files[{name!r}]") for name, entry in obj["files"].items()}
    return obj["plan"], files


# ------------------------------------------------------------------------------------------------ verification

@dataclass(frozen=True)
class VerifiedShard:
    """A finished shard that matches the plan: its manifest entry, its index records and the lines it skipped."""

    entry: ShardEntry
    records: list[dict]
    problems: tuple[dict, ...]


class ShardMismatch(SpeechpackError):
    """A shard on disk is incomplete or does not match the plan (the message says which file and why)."""


def segment_elements(stream: str, segment: dict) -> int:
    """Elements a segment record holds, as its plan counts them: ``channels * length`` for audio, rows for data."""
    if STREAM_TYPES[stream].audio:
        return segment["channels"] * segment["length"]
    return segment["length"]


def segment_rows(stream: str, segment: dict) -> int:
    """Rows a segment record occupies in its stream file: its bytes for a compressed segment (format 1.4: the sum
    of its blocks), else ``segment_elements``."""
    if "blocks" in segment:
        return sum(segment["blocks"])
    return segment_elements(stream, segment)


def check_recorded_file(path: str, recorded: FileEntry, check_hashes: bool = True) -> FileEntry:
    """``path``'s entry, checked against what a receipt recorded of it (a shard's file, a file of ``cues/``): its
    size, then its SHA-256 unless ``check_hashes`` is false (then the receipt's entry is taken as it is)."""
    size = os.path.getsize(path) if os.path.isfile(path) else None
    if size != recorded.size:
        raise ShardMismatch(f"{path}: {'missing' if size is None else f'{size} bytes'}, its receipt says "
                            f"{recorded.size} bytes")
    found = hash_file(path) if check_hashes else recorded
    if found.sha256 != recorded.sha256:
        raise ShardMismatch(f"{path}: sha256 differs from its receipt ({found.sha256[:12]}..., the receipt says "
                            f"{recorded.sha256[:12]}...): changed or corrupted since it was written")
    return found


def verify_shard(pack_dir: str, shard_id: int, plan: BuildPlan, fingerprint: str,
                 check_hashes: bool = True) -> VerifiedShard:
    """Check shard ``shard_id`` against the plan and its receipt; raise ``ShardMismatch`` naming the first
    difference.

    The index must list the planned samples in order (all of them, or, under ``--skip-bad``, all but the ones its
    receipt says were skipped), each with the planned elements per stream; every stream file's ``.npy`` header
    must hold exactly the index's elements; sizes and (unless ``check_hashes`` is false) SHA-256 must equal the
    receipt's.
    """
    name = shard_dir_name(shard_id)
    shard_dir = os.path.join(pack_dir, name)
    if not os.path.isdir(shard_dir):
        raise ShardMismatch(f"{shard_dir}: missing")
    try:
        receipt = read_receipt(pack_dir, name)
    except (PackFormatError, ShardMismatch) as err:  # e.g. emptied by a power loss: the shard is built again
        raise ShardMismatch(f"{receipt_path(pack_dir, name)}: unreadable receipt ({err})") from None
    if receipt is None:
        raise ShardMismatch(f"{shard_dir}: no receipt in {RECEIPTS_DIR}/ (its job stopped before finishing it)")
    if receipt.plan != fingerprint:
        raise ShardMismatch(f"{receipt_path(pack_dir, name)}: written for another plan ({receipt.plan[:12]}..., "
                            f"the pack's is {fingerprint[:12]}...): a job ran with other input or options")
    streams = STREAMS_BY_KIND[plan.kind]
    encoding = plan.encoding
    expected_files = {stream_file_name(s) for s in streams} | {SHARD_INDEX_NAME}
    if encoding.digests:
        expected_files.add(DIGESTS_NAME)
    present = set(os.listdir(shard_dir))
    if present != expected_files or set(receipt.shard.files) != expected_files:
        raise ShardMismatch(f"{shard_dir}: holds {sorted(present)}, expected {sorted(expected_files)}")
    index_path = os.path.join(shard_dir, SHARD_INDEX_NAME)
    block_frames = {s: encoding.block_frames for s in encoding.compressed_streams(streams)}
    records = _read_index(index_path, plan.kind, block_frames)
    _match_plan(index_path, records, plan.shards[shard_id], receipt, plan.skip_bad)
    for stream in streams:
        path = os.path.join(shard_dir, stream_file_name(stream))
        rows = sum(segment_rows(stream, seg) for record in records for seg in record["streams"][stream])
        header = read_npy_header(path)
        if header.shape[0] != rows:
            raise ShardMismatch(f"{path}: holds {header.shape[0]} rows, its index says {rows}")
    if encoding.digests:
        path = os.path.join(shard_dir, DIGESTS_NAME)
        pieces = sum(len(seg["blocks"]) if "blocks" in seg else 1
                     for stream in streams for record in records for seg in record["streams"][stream])
        try:
            check_digests_header(read_npy_header(path), pieces, path)
        except (PackFormatError, NpyHeaderError) as err:
            raise ShardMismatch(str(err)) from None
    files = {file_name: check_recorded_file(os.path.join(shard_dir, file_name), recorded, check_hashes)
             for file_name, recorded in receipt.shard.files.items()}
    if receipt.shard.samples != len(records) or receipt.shard.directory != name:
        raise ShardMismatch(f"{receipt_path(pack_dir, name)}: describes {receipt.shard.directory} with "
                            f"{receipt.shard.samples} samples; {index_path} holds {len(records)}")
    return VerifiedShard(entry=ShardEntry(directory=name, samples=len(records), files=dict(sorted(files.items()))),
                         records=records, problems=receipt.problems)


def _read_index(index_path: str, kind: str, block_frames: dict[str, int]) -> list[dict]:
    try:
        obj = read_json(index_path, error=ValueError)
    except ValueError as err:
        raise ShardMismatch(f"{index_path}: not JSON ({err})") from None
    try:
        return check_shard_index(obj, kind, index_path, block_frames)
    except PackFormatError as err:
        raise ShardMismatch(str(err)) from None


def _match_plan(index_path: str, records: list[dict], planned, receipt: ShardReceipt, skip_bad: bool) -> None:
    skipped = {(p["line"], p["key"]) for p in receipt.problems}
    expected = [p for p in planned if (p.line, p.key) not in skipped]
    if skipped and not skip_bad:
        raise ShardMismatch(f"{receipt_path(os.path.dirname(os.path.dirname(index_path)), receipt.shard.directory)}"
                            f": lists skipped lines, but the plan does not skip bad lines")
    if len(records) != len(expected):
        raise ShardMismatch(f"{index_path}: holds {len(records)} samples, the plan {len(expected)}")
    for position, (record, sample) in enumerate(zip(records, expected)):
        if (record["line"], record["key"], record["num_frames"]) != (sample.line, sample.key, sample.num_frames):
            raise ShardMismatch(f"{index_path}: sample {position} is line {record['line']} key {record['key']!r} "
                                f"({record['num_frames']} frames); the plan has line {sample.line} key "
                                f"{sample.key!r} ({sample.num_frames} frames)")
        elements = {stream: sum(segment_elements(stream, seg) for seg in segs)
                    for stream, segs in record["streams"].items()}
        if elements != dict(sample.elements):
            raise ShardMismatch(f"{index_path}: sample {record['key']!r} has {elements} elements, the plan "
                                f"{dict(sample.elements)}")


#: The environment variable that names the kill point.
KILL_AT_ENV = "SPEECHPACK_KILL_AT"
#: The environment variable that names the fault to inject there (default: SIGKILL).
FAULT_ENV = "SPEECHPACK_FAULT"
#: How long an interrupted process waits for its SIGINT to arrive (it is delivered asynchronously).
_INTERRUPT_GRACE_SECONDS = 5.0


def checkpoint(point: str) -> None:
    """Kill this process with SIGKILL (or inject ``SPEECHPACK_FAULT``) if ``point`` is the one
    ``SPEECHPACK_KILL_AT`` names."""
    if os.environ.get(KILL_AT_ENV) != point:
        return
    fault = os.environ.get(FAULT_ENV, "kill")
    if fault == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"<injected at {point}>")
    if fault == "interrupt":
        os.killpg(0, signal.SIGINT)
        time.sleep(_INTERRUPT_GRACE_SECONDS)  # the build process gets it now; a worker ignores it and goes on
        return
    os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["PLAN_FILE", "RECEIPTS_DIR", "RecordedPlan", "ShardMismatch", "ShardReceipt", "VerifiedShard",
           "check_recorded_file", "clear_state", "describe_plan", "load_plan", "load_recorded_plan",
           "read_cues_receipt", "read_receipt", "record_plan", "verify_shard", "write_cues_receipt", "write_receipt"]
