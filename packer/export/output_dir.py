"""The directory an export writes into: claimed before any audio is encoded, committed at the end, and tidied when
the export fails, so that running the same export again always finishes it (the records: ``packer.export.record``).

``claim_export_dir`` takes the directory's lock (``DIR.lock``, the one ``build`` and ``copy`` take: a second export
into the same directory is refused at once), refuses a directory holding anything no export record lists (naming
it; nothing is deleted, even with ``--overwrite``), and then, by what the records say:

- nothing (absent or empty directory): a new export;
- an unfinished export of the same pack (the plan's ``dataset.json`` hash and sample count are this pack's): it
  is finished; the audio files the journal vouches for and that still verify are kept, every other entry the plan
  owns is removed and written again;
- an unfinished export of another pack: refused, unless ``--overwrite``, which removes what its plan owns;
- a finished export (``speechpack-export.json``): refused, unless ``--overwrite``, which renames the record to
  ``.tmp-replaced-speechpack-export.json``, removes ``cuts.jsonl.gz`` and then the audio files it owns, then the
  record (killed meanwhile, the next export into the directory finishes that removal first).

On failure (a full disk, an unreadable pack, Ctrl-C, a bug) the directory is left holding only what a rerun uses:
the plan, the journal and the audio files the journal lists; no ``.tmp-`` file, no ``cuts.jsonl.gz``.  With no
such audio file nothing of the export is left (nor the directory, when this export created it).  An ``OSError``
becomes a ``SpeechpackError`` naming the file; Ctrl-C stays ``KeyboardInterrupt`` (click prints ``Aborted!``).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, TextIO

from speechpack.packer.build.state import checkpoint
from speechpack.packer.export.record import (
    CUTS_FILE,
    JOURNAL_FILE,
    PLAN_FILE,
    RECORD_FILE,
    REPLACED_FILE,
    ExportRecord,
    ExportSurvey,
    file_matches,
    journal_line,
    read_journal,
    record_owner,
    survey_export,
    temp_name,
    write_record,
)
from speechpack.packer.ownership import locked, walk
from speechpack.packer.files import fsync_dir, make_directory
from speechpack.schemas.errors import SpeechpackError


def _remove_owned(out: str, owns: Callable[[str], bool], keep: Iterable[str] = ()) -> None:
    """Remove the entries ``owns`` accepts, except ``keep``: ``cuts.jsonl.gz`` first (the export stops being one),
    then files deepest first, then directories left empty."""
    keep = set(keep)
    owned = [rel for rel in walk(out) if owns(rel) and rel not in keep]
    for rel in sorted(owned, key=lambda r: (r != CUTS_FILE, -r.count("/"), r)):
        path = os.path.join(out, *rel.split("/"))
        if os.path.isdir(path) and not os.path.islink(path):
            if not os.listdir(path):
                os.rmdir(path)
        elif os.path.lexists(path):
            os.remove(path)


def _remove_record(out: str, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(out, name))
    fsync_dir(out)


def _retire_finished(out: str, finished: ExportRecord | None) -> None:
    """Remove a finished export (its record renamed to ``REPLACED_FILE`` already, or now): what it owns, then the
    record."""
    if finished is not None:
        os.replace(os.path.join(out, RECORD_FILE), os.path.join(out, REPLACED_FILE))
        fsync_dir(out)
    replaced = survey_export(out).replaced
    if replaced is not None:
        _remove_owned(out, record_owner(replaced, plan=False))
    _remove_record(out, REPLACED_FILE)


def _keep_journaled(out: str, plan: ExportRecord) -> dict[str, tuple[int, str]]:
    """Leave the plan, the journal and the audio files the journal lists (not verified here); return those."""
    owns = record_owner(plan, plan=True)
    journaled = read_journal(out, owns)
    present = {rel: entry for rel, entry in journaled.items() if os.path.isfile(os.path.join(out, *rel.split("/")))}
    _remove_owned(out, owns, keep={JOURNAL_FILE, *present})  # their directories are not empty: they stay
    return present


def _prepare(out: str, found: ExportSurvey, record: ExportRecord, overwrite: bool,
             log: Callable[[str], None]) -> dict[str, tuple[int, str]]:
    """Make ``out`` ready for ``record``'s export (see the module docstring); return the journal's audio files
    of an earlier run of it."""
    if found.replaced is not None:  # an interrupted --overwrite: finish it
        _retire_finished(out, None)
    if found.plan is not None and found.plan.same_pack(record):
        log(f"{out}: holds an unfinished export of the same pack: finishing it (the audio files that verify are "
            f"kept)")
        return _keep_journaled(out, found.plan)
    if found.plan is not None:
        if not overwrite:
            raise SpeechpackError(f"{out}: holds an unfinished export of another pack, {found.plan.describe()}; "
                                  f"pass --overwrite to discard it, or choose another directory")
        _remove_owned(out, record_owner(found.plan, plan=True))
        _remove_record(out, PLAN_FILE)
    elif found.finished is not None:
        if not overwrite:
            raise SpeechpackError(f"{out}: holds a finished export of {found.finished.describe()}; pass "
                                  f"--overwrite to replace it")
        _retire_finished(out, found.finished)
    elif PLAN_FILE in found.entries:  # cut short while being written, before any audio: owns nothing
        _remove_record(out, PLAN_FILE)
    write_record(os.path.join(out, PLAN_FILE), record, through_temp=False)
    fsync_dir(out)
    return {}


@dataclass
class ExportClaim:
    """The export's hold on ``out``: the plan recorded, the journal open for appending, and what an earlier run of
    the same export left that may be kept."""

    out: str
    record: ExportRecord
    journal: TextIO
    earlier: dict[str, tuple[int, str]] = field(default_factory=dict)
    kept: int = 0
    written: int = 0
    audio: list[str] = field(default_factory=list)  # every audio file of the export, kept or written (for commit)

    def path(self, rel: str) -> str:
        return os.path.join(self.out, *rel.split("/"))

    def reuse(self, rel: str) -> bool:
        """Whether an earlier run's audio file at ``rel`` is in the journal and still verifies (size, SHA-256)."""
        entry = self.earlier.get(rel)
        if entry is None or not file_matches(self.path(rel), *entry):
            return False
        self.kept += 1
        self.audio.append(rel)
        return True

    def write_audio(self, index: int, rel: str, data: bytes) -> None:
        """Put sample ``index``'s encoded audio at ``rel`` (through its ``.tmp-`` name), then journal it."""
        path = self.path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = temp_name(path)
        with open(temp, "wb") as fp:
            fp.write(data)
        os.replace(temp, path)
        checkpoint(f"export-audio:{index}")
        self.journal.write(journal_line(rel, data))  # line-buffered: in the file before the next sample starts
        self.written += 1
        self.audio.append(rel)

    def commit(self) -> None:
        """Make the export finished: its record, then ``cuts.jsonl.gz`` (written under its ``.tmp-`` name), then
        the plan and journal removed."""
        checkpoint("export-cuts")
        self._sync_audio()
        write_record(self.path(RECORD_FILE), self.record, through_temp=True)
        os.replace(temp_name(self.path(CUTS_FILE)), self.path(CUTS_FILE))
        fsync_dir(self.out)
        checkpoint("export-commit")
        self.journal.close()
        _remove_record(self.out, JOURNAL_FILE)
        _remove_record(self.out, PLAN_FILE)

    def _sync_audio(self) -> None:
        """Make every audio file and its directory entry durable before anything commits to them.  Not done as
        each is written (a crash then is caught by the journal's hashes on rerun); here most pages are already
        written back, so each ``fsync`` is short, and only this export's files are flushed (not the machine's, as
        ``os.sync`` would)."""
        for rel in self.audio:
            fd = os.open(self.path(rel), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for directory in sorted({os.path.dirname(self.path(rel)) for rel in self.audio}):
            fsync_dir(directory)

    def failed(self, err: BaseException) -> BaseException:
        """Tidy ``out`` after a failure (module docstring); return the exception to raise."""
        self.journal.close()
        kept = 0
        with contextlib.suppress(OSError):
            if not os.path.exists(self.path(CUTS_FILE)):  # committed: whole, only the plan's removal failed
                kept = len(_keep_journaled(self.out, self.record))
                if not kept:
                    _remove_owned(self.out, record_owner(self.record, plan=True))
                    _remove_record(self.out, PLAN_FILE)
        if isinstance(err, OSError):
            where = err.filename or self.out
            left = (f"the {kept} audio file(s) it finished are kept: run the same command again to finish it"
                    if kept else "nothing of it was kept")
            return SpeechpackError(f"{where}: {err.strerror or err} (the export stopped; {left})")
        return err


def _open_journal(out: str) -> TextIO:
    """The journal, opened for appending line by line; a last line cut short by a kill is ended first, so that it
    spoils no later line."""
    path = os.path.join(out, JOURNAL_FILE)
    journal = open(path, "a", encoding="utf-8", buffering=1)
    if journal.tell() > 0:
        with open(path, "rb") as fp:
            fp.seek(-1, os.SEEK_END)
            if fp.read(1) != b"\n":
                journal.write("\n")
    return journal


@contextlib.contextmanager
def claim_export_dir(out: str, record: ExportRecord, overwrite: bool,
                     log: Callable[[str], None]) -> Iterator[ExportClaim]:
    """Claim ``out`` for ``record``'s export (see the module docstring); tidy it if the body fails.  A directory
    this export created is removed again when it stays empty, but only while the lock is held: an export refused
    because another holds the lock removes nothing (``packer.files.make_directory``)."""
    try:
        created = make_directory(out)
    except OSError as err:
        raise SpeechpackError(f"{out}: cannot create the export directory ({err.strerror or err})") from None
    with locked(out, exclusive=True, log=None, wait=False):
        try:
            found = survey_export(out)
            found.refuse_foreign()
            try:
                earlier = _prepare(out, found, record, overwrite, log)
                journal = _open_journal(out)
            except OSError as err:
                raise SpeechpackError(f"{err.filename or out}: {err.strerror or err} (the export did not start)") \
                    from None
            with journal:
                claim = ExportClaim(out=out, record=record, journal=journal, earlier=earlier)
                try:
                    yield claim
                except BaseException as err:
                    raised = claim.failed(err)
                    if raised is err:
                        raise
                    raise raised from None
        except BaseException:
            if created and os.path.isdir(out) and not os.listdir(out):
                os.rmdir(out)
            raise


__all__ = ["ExportClaim", "claim_export_dir"]
