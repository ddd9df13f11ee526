"""What an export directory holds, and the records that say which of its entries speechpack wrote.

An export is hours of encoding for a large pack, so an interrupted one must be finished by running it again, and
``--overwrite`` must be able to remove a finished one; both delete files, and speechpack deletes only what one of
its own records lists (the rule of ``packer.ownership``, applied here to the export's own layout):

``.tmp-export-plan.json``
    an export in progress: the pack (its path and the SHA-256 of its ``dataset.json``) and its sample count.
    Written before the first audio file, removed after the export is committed.
``speechpack-export.json``
    a finished export: the same fields.  Written (through its ``.tmp-`` name) just before ``cuts.jsonl.gz`` is
    renamed into place, and kept with the export, so that ``--overwrite`` can tell it from a user's files.
``.tmp-replaced-speechpack-export.json``
    a finished export being removed (``--overwrite``): ``speechpack-export.json`` renamed, removed last.

Each record owns, from the sample count alone: ``cuts.jsonl.gz``, ``audio/``, the ``audio/NNNNN/`` directories of
the pack's sample numbers (``FILES_PER_DIR`` to a directory) and ``audio/NNNNN/NNNNNNNN.flac``, ``.wav`` or ``.opus`` for each,
with the ``.tmp-`` names of all of these.  The plan also owns the journal and ``speechpack-export.json``.  A plan
cut short while being written (a kill before any audio) owns nothing and is removed.

**The journal** ``.tmp-export-written.jsonl`` has one line per audio file once it is in place: its path, size and
SHA-256 (of the bytes written, hashed from memory).  A rerun keeps a file only when the journal lists it and the
file still has that size and hash; every other planned name is written again.  So no audio file needs an fsync:
one lost to a crash, or cut short, fails the check and is rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Callable

from speechpack.packer.ownership import refuse_foreign, walk
from speechpack.schemas.constants import TEMP_PREFIX
from speechpack.schemas.documents import parse_json

#: The manifest an export writes in ``DIR`` (written last).
CUTS_FILE = "cuts.jsonl.gz"
#: The directory of the audio files, ``FILES_PER_DIR`` to a subdirectory.
AUDIO_DIR = "audio"
#: Audio files per subdirectory of ``DIR/audio``.
FILES_PER_DIR = 1000
#: Extensions an audio file may have (FLAC at scale 1, float WAV otherwise: ``packer.export.lhotse``).
AUDIO_EXTENSIONS = (".flac", ".wav", ".opus")
#: The record of an export in progress.
PLAN_FILE = f"{TEMP_PREFIX}export-plan.json"
#: The record a finished export keeps.
RECORD_FILE = "speechpack-export.json"
#: A finished export's record while ``--overwrite`` removes what it lists.
REPLACED_FILE = f"{TEMP_PREFIX}replaced-{RECORD_FILE}"
#: One line per audio file in place: path, size, SHA-256.
JOURNAL_FILE = f"{TEMP_PREFIX}export-written.jsonl"
#: What the records say they are, and their version (a record of another version owns nothing).
RECORD_FORMAT = "speechpack-export"
RECORD_VERSION = 1

_AUDIO_SUBDIR = re.compile(r"\d{5}")
_AUDIO_NAME = re.compile(r"(?:%s)?(\d{8})(%s)" % (re.escape(TEMP_PREFIX),
                                                  "|".join(re.escape(e) for e in AUDIO_EXTENSIONS)))


def audio_rel(index: int, extension: str) -> str:
    """The ``/``-separated path of sample ``index``'s audio file in the export directory."""
    return f"{AUDIO_DIR}/{index // FILES_PER_DIR:05d}/{index:08d}{extension}"


def temp_name(path: str) -> str:
    """The ``.tmp-`` name a file is written under before it is renamed into place."""
    directory, name = os.path.split(path)
    return os.path.join(directory, TEMP_PREFIX + name)


@dataclass(frozen=True)
class ExportRecord:
    """Which pack an export is of: the same fields in the plan and in a finished export's record."""

    pack: str
    pack_manifest_sha256: str
    samples: int

    def to_dict(self) -> dict:
        return {"format": RECORD_FORMAT, "version": RECORD_VERSION, "pack": self.pack,
                "pack_manifest_sha256": self.pack_manifest_sha256, "samples": self.samples}

    @classmethod
    def from_dict(cls, obj) -> "ExportRecord":
        """Strict: every key, of its type (``ValueError`` naming the first wrong one)."""
        expected = {"format", "version", "pack", "pack_manifest_sha256", "samples"}
        if not isinstance(obj, dict) or set(obj) != expected:
            raise ValueError(f"keys {sorted(obj) if isinstance(obj, dict) else type(obj).__name__}, expected "
                             f"{sorted(expected)}")
        if obj["format"] != RECORD_FORMAT or obj["version"] != RECORD_VERSION:
            raise ValueError(f"format {obj['format']!r} version {obj['version']!r}")
        if not isinstance(obj["pack"], str) or not isinstance(obj["pack_manifest_sha256"], str):
            raise ValueError("pack and pack_manifest_sha256 must be strings")
        if type(obj["samples"]) is not int or obj["samples"] < 0:
            raise ValueError(f"samples {obj['samples']!r}")
        return cls(pack=obj["pack"], pack_manifest_sha256=obj["pack_manifest_sha256"], samples=obj["samples"])

    def same_pack(self, other: "ExportRecord") -> bool:
        """Whether both describe the same pack content (wherever the pack lies now)."""
        return (self.pack_manifest_sha256, self.samples) == (other.pack_manifest_sha256, other.samples)

    def describe(self) -> str:
        return f"{self.pack} ({self.samples} samples, dataset.json sha256 {self.pack_manifest_sha256[:12]})"


def read_record(path: str) -> ExportRecord | None:
    """The record at ``path`` when speechpack wrote it; ``None`` when absent, cut short or not one of ours."""
    try:
        with open(path, "rb") as fp:
            return ExportRecord.from_dict(parse_json(fp.read(), path, error=ValueError))
    except (OSError, UnicodeDecodeError, ValueError):  # JSONDecodeError is a ValueError
        return None


def write_record(path: str, record: ExportRecord, through_temp: bool) -> None:
    """Write ``record`` to ``path``, fsynced; ``through_temp``: under its ``.tmp-`` name, then renamed."""
    target = temp_name(path) if through_temp else path
    with open(target, "wb") as fp:
        fp.write(json.dumps(record.to_dict(), sort_keys=True, indent=1).encode("utf-8") + b"\n")
        fp.flush()
        os.fsync(fp.fileno())
    if through_temp:
        os.replace(target, path)


def record_owner(record: ExportRecord, plan: bool) -> Callable[[str], bool]:
    """Whether a record owns an entry (``/``-separated, relative to the export directory); ``plan``: the record
    of an export in progress, which also owns the journal and the finished record it writes."""
    top_files = {CUTS_FILE, TEMP_PREFIX + CUTS_FILE, AUDIO_DIR}
    if plan:
        top_files |= {JOURNAL_FILE, RECORD_FILE, TEMP_PREFIX + RECORD_FILE}
    directories = -(-record.samples // FILES_PER_DIR)

    def owns(rel: str) -> bool:
        parts = rel.split("/")
        if len(parts) == 1:
            return parts[0] in top_files
        if parts[0] != AUDIO_DIR or len(parts) > 3 or _AUDIO_SUBDIR.fullmatch(parts[1]) is None:
            return False
        if int(parts[1]) >= directories:
            return False
        if len(parts) == 2:
            return True
        match = _AUDIO_NAME.fullmatch(parts[2])
        return (match is not None and int(match.group(1)) < record.samples
                and int(match.group(1)) // FILES_PER_DIR == int(parts[1]))

    return owns


def read_journal(out: str, owns: Callable[[str], bool]) -> dict[str, tuple[int, str]]:
    """The journal's audio files, ``path -> (size, sha256)`` (the last line for a path wins).  A line that does
    not parse (the last one, cut short by a kill) or names a file the plan does not own vouches for nothing."""
    written: dict[str, tuple[int, str]] = {}
    try:
        fp = open(os.path.join(out, JOURNAL_FILE), "rb")
    except FileNotFoundError:
        return written
    with fp:
        for line in fp:  # a line at a time: about 120 bytes per sample
            try:
                entry = parse_json(line, JOURNAL_FILE, error=ValueError)
                rel, size, digest = entry["file"], entry["size"], entry["sha256"]
            except (UnicodeDecodeError, ValueError, KeyError, TypeError):
                continue
            if isinstance(rel, str) and type(size) is int and isinstance(digest, str) and owns(rel):
                written[rel] = (size, digest)
    return written


def journal_line(rel: str, data: bytes) -> str:
    """The journal's line for an audio file just put in place with the bytes ``data``."""
    return json.dumps({"file": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()},
                      sort_keys=True) + "\n"


def file_matches(path: str, size: int, digest: str) -> bool:
    """Whether the file at ``path`` has this size and SHA-256 (the size first: a short file is not read)."""
    try:
        if os.path.getsize(path) != size:
            return False
        with open(path, "rb") as fp:
            return hashlib.file_digest(fp, "sha256").hexdigest() == digest
    except OSError:
        return False


@dataclass
class ExportSurvey:
    """An export directory's entries, its records, and the entries none of them owns."""

    root: str
    entries: list[str] = field(default_factory=list)
    plan: ExportRecord | None = None
    finished: ExportRecord | None = None
    replaced: ExportRecord | None = None
    foreign: list[str] = field(default_factory=list)

    def refuse_foreign(self) -> None:
        """Raise naming the foreign entries (files, not their directories), if there are any."""
        refuse_foreign(self.root, self.foreign, "speechpack export record", "export into it")


def survey_export(root: str) -> ExportSurvey:
    """Read ``root``'s export records and sort its entries into owned and foreign."""
    result = ExportSurvey(root=root)
    if not os.path.isdir(root):
        return result
    result.entries = walk(root)
    owners = []
    for name, attr, plan in ((PLAN_FILE, "plan", True), (RECORD_FILE, "finished", False),
                             (REPLACED_FILE, "replaced", False)):
        record = read_record(os.path.join(root, name)) if name in result.entries else None
        setattr(result, attr, record)
        if record is not None:
            owners.append(record_owner(record, plan))
    # the plan's name even when cut short (it was written before anything else); the others when they parse
    owned = {PLAN_FILE} | {name for name, record in ((REPLACED_FILE, result.replaced), (RECORD_FILE, result.finished))
                           if record is not None}
    foreign = [rel for rel in result.entries if rel not in owned and not any(owns(rel) for owns in owners)]
    parents = {rel.rsplit("/", 1)[0] for rel in result.entries if "/" in rel}
    result.foreign = [rel for rel in foreign if rel not in parents]
    return result


__all__ = ["AUDIO_DIR", "CUTS_FILE", "ExportRecord", "ExportSurvey", "FILES_PER_DIR", "JOURNAL_FILE", "PLAN_FILE",
           "RECORD_FILE", "REPLACED_FILE", "audio_rel", "file_matches", "journal_line", "read_journal",
           "read_record", "record_owner", "survey_export", "temp_name", "write_record"]
