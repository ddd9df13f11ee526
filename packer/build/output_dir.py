"""The pack directory a build writes into: claimed before any input is read, made ready once the plan is known,
and tidied when the build fails.

``claim_output`` runs first, before hours of header probing could be wasted: it makes sure ``--out`` can be
written, takes the destination's lock (``DST.lock``, the one ``speechpack copy`` takes too: a second build into the
same directory is refused at once), refuses an ``--out`` that holds one of the build's own inputs, and refuses a
directory holding anything that no speechpack record lists (``packer.ownership``): speechpack deletes only what
its own records list, whatever the names look like, even with ``--overwrite``.

``OutputClaim.prepare`` runs once the plan is known.  The directory then holds nothing, a finished pack
(replaced only with ``--overwrite``), or an unfinished build: its recorded plan (``.tmp-plan.json``) is compared with
this one, and when they are equal the build goes on where the other stopped, keeping every shard that verifies
(with or without ``--resume``; a message says so).  Every build records its plan and receipts, so every build
can be resumed.

``OutputClaim.failed`` runs after the worker pool has stopped (``run_build`` stops it first,
``packer.build.executor.stop_pool``; the pool outlives the claim, whose lock its forked workers must not hold): a
build that failed on bad input leaves nothing (its shards are useless once the input is fixed); any other failure
(a full disk, Ctrl-C, a bug) leaves exactly what a resumed build keeps: the plan, the receipts and the shards they
vouch for.
"""

from __future__ import annotations

import contextlib
import os
import sys
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from speechpack.packer.build.plan import BuildPlan
from speechpack.packer.build.state import PLAN_FILE, RECEIPTS_DIR, RecordedPlan, load_recorded_plan, receipt_path, record_plan
from speechpack.packer.ownership import (
    INCOMING_MANIFEST,
    REPLACED_MANIFEST,
    RESERVED_NAMES,
    WRITE_PROBE_PREFIX,
    DestinationLock,
    Survey,
    remove_entries,
    retire_manifest,
    locked,
    survey,
)
from speechpack.packer.files import fsync_dir, make_directory
from speechpack.schemas.constants import MANIFEST_NAME, TEMP_PREFIX, shard_dir_name
from speechpack.schemas.errors import BuildError, SpeechpackError


def _survey(out: str) -> tuple[Survey, RecordedPlan | None]:
    recorded = load_recorded_plan(out) if os.path.isdir(out) else None
    found = survey(out, recorded.ownership() if recorded else None, PLAN_FILE, RECEIPTS_DIR)
    return found, recorded


def check_writable(out: str) -> bool:
    """Create ``out`` if needed and write a file in it; return whether it was created.  Raises a
    ``SpeechpackError`` naming ``out`` and the reason (read-only, permission, full disk)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise SpeechpackError(f"{out}: exists and is not a directory")
    created = False
    try:
        created = make_directory(out)
        probe = os.path.join(out, f"{WRITE_PROBE_PREFIX}{os.getpid()}")
        with open(probe, "wb") as fp:
            fp.write(b"speechpack")
        os.remove(probe)
    except OSError as err:
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(out)  # nothing can be written there: an empty directory this call made goes again
        raise SpeechpackError(f"{out}: cannot write the pack there ({err.strerror or err}); nothing was read or "
                              f"written") from None
    return created


def inputs_inside(out: str, inputs: Iterable[str]) -> list[str]:
    """The inputs (files the build reads) that lie inside ``out``, through symbolic links too.

    Resolving every input path would cost a system call per path component per input (minutes for millions of
    lines); inputs share few directories, so each directory is resolved once.
    """
    root = os.path.realpath(out) + os.sep
    resolved: dict[str, str] = {}
    inside = set()
    for path in inputs:
        directory, name = os.path.split(os.path.abspath(path))
        if directory not in resolved:
            resolved[directory] = os.path.realpath(directory) + os.sep
        if (resolved[directory] + name).startswith(root) or resolved[directory].startswith(root):
            inside.add(path)
    return sorted(inside)


@dataclass
class OutputClaim:
    """The build's hold on ``out``: the lock, and what the directory held when the build started."""

    out: str
    overwrite: bool
    resume: bool
    shared: bool  # one slice of an array build (--shards): other slices write here at the same time
    created: bool
    lock: DestinationLock
    building: list[int] = field(default_factory=list)

    def prepare(self, plan: BuildPlan) -> str:
        """Make ``out`` ready for ``plan`` (see the module docstring) and record the plan; return its
        fingerprint."""
        found, recorded = _survey(self.out)
        found.refuse_foreign("build into it")
        fingerprint = plan.fingerprint()
        if os.path.exists(os.path.join(self.out, REPLACED_MANIFEST)):  # an interrupted --overwrite: finish it
            retire_manifest(self.out, REPLACED_MANIFEST, fsync_dir=fsync_dir)
        if recorded is not None and recorded.fingerprint == fingerprint:
            if not self.resume and not self.shared:
                print(f"{self.out}: holds an unfinished build of the same input and options: resuming it (the "
                      f"shards that verify are kept)", file=sys.stderr)
            if found.manifest is not None:
                os.remove(os.path.join(self.out, MANIFEST_NAME))  # killed after committing: commit again
        elif recorded is not None and self.overwrite:
            self._discard_everything()
        elif recorded is not None:
            record_plan(self.out, plan, hint="pass --overwrite to discard the unfinished build",
                        fingerprint=fingerprint)  # raises: the plans differ
        elif found.manifest is not None or found.incoming is not None:
            if not self.overwrite:
                raise SpeechpackError(f"{self.out}: directory is not empty; pass --overwrite to replace the pack "
                                      f"in it")
            self._discard_everything()
        else:
            remove_entries(self.out, [rel for rel in found.entries if rel in RESERVED_NAMES])
        return record_plan(self.out, plan, full=self.shared, fingerprint=fingerprint)

    def _discard_everything(self) -> None:
        """Remove what the directory's records own: a finished pack first (it stops being one at once), then an
        unfinished build's entries, its plan last; everything else was refused before."""
        for record in (MANIFEST_NAME, INCOMING_MANIFEST):
            if os.path.exists(os.path.join(self.out, record)):
                retire_manifest(self.out, record, fsync_dir=fsync_dir)
        found, recorded = _survey(self.out)
        found.refuse_foreign("delete them")
        top = {rel.split("/")[0] for rel in found.entries} - {PLAN_FILE}
        remove_entries(self.out, top)
        remove_entries(self.out, [PLAN_FILE] if recorded is not None else [])
        fsync_dir(self.out)

    def failed(self, err: BaseException) -> BaseException:
        """Tidy ``out`` after a failed build (the worker pool has stopped); return the exception to raise."""
        if not os.path.isdir(self.out):
            return err
        with contextlib.suppress(SpeechpackError):
            found, recorded = _survey(self.out)
            if recorded is not None and not found.foreign:
                self._tidy(recorded, discard=isinstance(err, BuildError))
        if isinstance(err, BrokenProcessPool):
            return SpeechpackError(f"a worker process of the build died ({err}; killed by the system for lack of "
                                   f"memory?); the shards finished so far are kept: run the same command again "
                                   f"to resume")
        if isinstance(err, OSError):
            where = err.filename or self.out
            return SpeechpackError(f"{where}: {err.strerror or err} (the build stopped; the shards it finished are "
                                   f"kept: run the same command again to resume)")
        return err

    def _tidy(self, recorded: RecordedPlan, discard: bool) -> None:
        """Leave what a resumed build keeps (or, with ``discard`` and no other slice at work, nothing)."""
        if os.path.exists(os.path.join(self.out, MANIFEST_NAME)):
            return  # committed (only the state's removal failed): the pack is whole, a rerun removes the state
        mine = self.building if self.shared else range(recorded.num_shards)
        removable = [TEMP_PREFIX + shard_dir_name(k) for k in mine]
        removable += [shard_dir_name(k) for k in mine if not os.path.exists(receipt_path(self.out, shard_dir_name(k)))]
        # A worker stopped while writing a receipt leaves it under its temporary name (nothing reads it).
        removable += [f"{RECEIPTS_DIR}/{TEMP_PREFIX}{shard_dir_name(k)}.json" for k in mine]
        if not self.shared:
            for rel in _survey(self.out)[0].entries:
                if rel.startswith(RECEIPTS_DIR + "/"):
                    removable += [rel] if os.path.basename(rel).startswith(TEMP_PREFIX) else []
                elif rel.startswith(TEMP_PREFIX) and rel not in (PLAN_FILE, RECEIPTS_DIR):
                    removable.append(rel.split("/")[0])
            removable += ["columns", "skipped.json"]
        remove_entries(self.out, [r for r in removable if os.path.lexists(os.path.join(self.out, r))])
        kept_shards = [k for k in range(recorded.num_shards) if os.path.isdir(os.path.join(self.out, shard_dir_name(k)))]
        if not self.shared and (discard or not kept_shards):
            remove_entries(self.out, [rel for rel in os.listdir(self.out) if rel != PLAN_FILE])
            remove_entries(self.out, [PLAN_FILE])
            if self.created and not os.listdir(self.out):
                os.rmdir(self.out)
        fsync_dir(self.out) if os.path.isdir(self.out) else None


@contextlib.contextmanager
def claim_output(out: str, overwrite: bool, resume: bool, shared: bool = False,
                 inputs: Iterable[str] = ()) -> Iterator[OutputClaim]:
    """Claim ``out`` for a build, before any input is read (see the module docstring).  A directory this build
    created is removed again if the build stops before writing there, but only while the lock is held: a build
    refused because another holds the lock removes nothing (the other is about to write there)."""
    created = check_writable(out)
    with locked(out, exclusive=not shared, log=None, wait=False) as lock:
        try:
            if not shared:
                lock.clear_record()  # the directory is about to change: a copy's verification record no longer holds
            inside = inputs_inside(out, inputs)
            if inside:
                raise SpeechpackError(f"{out}: holds {', '.join(inside[:5])}, an input of this build; refusing to "
                                      f"build there (the build may replace what is in --out): choose another --out")
            found, recorded = _survey(out)
            found.refuse_foreign("build into it")
            if recorded is None and found.manifest is not None:
                if resume:
                    raise SpeechpackError(f"{out}: already holds a finished pack (nothing to resume); pass "
                                          f"--overwrite to rebuild it")
                if not overwrite:
                    raise SpeechpackError(f"{out}: directory is not empty; pass --overwrite to replace the pack "
                                          f"in it")
            yield OutputClaim(out=out, overwrite=overwrite, resume=resume, shared=shared, created=created, lock=lock)
        except BaseException:
            if created and not shared and os.path.isdir(out) and not os.listdir(out):
                os.rmdir(out)
            raise


def item_inputs(input_path: str, items: Iterable, root: str | None = None) -> list[str]:
    """The files a build reads, for ``inputs_inside``: the input file and every path its items name (dataclass
    fields whose name says ``path``; relative ones against ``root``)."""
    found = [input_path] if os.path.exists(input_path) else []
    for item in items:
        for name, value in getattr(item, "__dict__", {}).items():
            if "path" not in name:
                continue
            for path in (value,) if isinstance(value, str) else (value if isinstance(value, (tuple, list)) else ()):
                if isinstance(path, str) and path:
                    found.append(path if os.path.isabs(path) or not root else os.path.join(root, path))
    return found


__all__ = ["OutputClaim", "check_writable", "claim_output", "inputs_inside", "item_inputs"]
