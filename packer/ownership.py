"""A destination directory that speechpack writes: one writer at a time (the lock), and what it may delete there
(only what one of its own records lists).

**The lock** (``locked``): ``DST.lock`` beside the destination, taken by every speechpack command that writes there
(``copy``, ``build``, ``finalize``, ``export``), and the record of the last verified copy in it.  On a node where
every rank runs ``speechpack copy`` to the same destination, the first to take the (exclusive)
``flock`` copies and the others wait.  The copy that finishes writes what it verified into the lock file: the
manifest's hash and each file's size, mtime and inode.  A rank that *waited* trusts that record when nothing changed
since (``record_matches``), instead of reading the whole pack again; a later, separate run re-hashes, since only a
verification made while it waited is trusted.  ``source`` arguments are ``packer.copy.staging.CopySource``
(``manifest_sha256``, ``manifest_bytes``, ``files``).

**What may be deleted.**  A data tool that deletes a user's files loses their trust for good, so deletion is never decided by a *name* that
looks like a pack entry (``cues/``, ``columns/``, ``shard-000007/``): a user's directory may hold those too.  A
directory's entries are speechpack's only when a record in it says so:

- ``dataset.json`` that parses as a pack manifest (``schemas.format.Manifest``, the strict reader): it lists every
  file of the pack, with its directory;
- ``.tmp-incoming-dataset.json``: the manifest of a pack being copied in (``speechpack copy`` writes it before its
  first change to the destination, and removes it once ``dataset.json`` is in place);
- ``.tmp-replaced-dataset.json``: the manifest of a pack being removed (``--overwrite``, or a copy of another
  pack): renamed from ``dataset.json`` so that the old pack stops being a pack at once, and removed when the
  last file it lists is gone;
- ``.tmp-plan.json``: the plan of a build in progress (``packer.build.state``), which owns that build's planned
  shard directories, receipts, ``columns/``, ``cues/`` and temporary names.

A record owns its files, their directories, and the ``.tmp-`` names speechpack writes them under; a manifest also
owns ``.verified/``, where readers of earlier versions recorded the sha256 of the stream files they checked.  Everything
else is *foreign*: a directory holding anything foreign is refused by every command that would write to it, with
the foreign entries named; nothing is deleted.  Every record is written before the first file it owns and removed
after the last, so a process killed at any point leaves a directory whose every entry is still owned.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

from speechpack.packer.files import read_bytes
from speechpack.schemas.constants import (
    COLUMNS_DIR,
    DIGESTS_NAME,
    MANIFEST_NAME,
    SHARD_DIR_DIGITS,
    SHARD_DIR_PREFIX,
    SHARD_INDEX_NAME,
    SKIPPED_NAME,
    TEMP_PREFIX,
    VERIFIED_DIR,
    shard_dir_name,
    stream_file_name,
)
from speechpack.schemas.cues import CUES_DIR
from speechpack.schemas.deflated_columns import DEFLATED_SUFFIX
from speechpack.schemas.documents import parse_json
from speechpack.schemas.errors import PackFormatError, SpeechpackError
from speechpack.schemas.format import Manifest
from speechpack.schemas.kinds import STREAMS_BY_KIND

#: The manifest of a pack being copied into a directory (written before the copy's first change there).
INCOMING_MANIFEST = f"{TEMP_PREFIX}incoming-{MANIFEST_NAME}"
#: The manifest of a pack being removed (renamed from ``dataset.json``, removed after its last file).
REPLACED_MANIFEST = f"{TEMP_PREFIX}replaced-{MANIFEST_NAME}"
#: Names speechpack writes its records under (owned even when a kill left one half-written).
RESERVED_NAMES = (INCOMING_MANIFEST, REPLACED_MANIFEST, TEMP_PREFIX + MANIFEST_NAME)
#: How many foreign entries a refusal names before it says "and N more".
LISTED_FOREIGN = 8

_SHARD_NAME = re.compile(re.escape(SHARD_DIR_PREFIX) + r"(\d{%d,})" % SHARD_DIR_DIGITS)
_TEMP_SUFFIX = re.compile(r"\.\d+")  # ``.tmp-plan.json.<pid>``: a job's plan before it is linked into place
#: ``.tmp-write-check-<pid>``: the file a starting build writes (and removes at once) to learn whether ``--out`` is
#: writable; an array job starting at the same moment must not take another's probe for foreign data.
WRITE_PROBE_PREFIX = TEMP_PREFIX + "write-check-"
_WRITE_PROBE = re.compile(re.escape(WRITE_PROBE_PREFIX) + r"\d+")


def _safe(rel: str) -> bool:
    """A relative path that stays inside the directory (no absolute path, no ``..``, no empty component)."""
    parts = rel.split("/")
    return not os.path.isabs(rel) and all(p not in ("", ".", "..") and os.sep not in p for p in parts)


def read_manifest_record(path: str) -> Manifest | None:
    """The manifest at ``path`` when it is one speechpack wrote (parses with the strict reader, and names only
    paths inside its directory); ``None`` otherwise (absent, foreign or damaged: then it owns nothing)."""
    try:
        with open(path, "rb") as fp:
            obj = parse_json(fp.read(), path, error=ValueError)
        manifest = Manifest.from_dict(obj, path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, PackFormatError, KeyError, TypeError, ValueError):
        return None
    if not all(_safe(rel) for rel in manifest.file_entries()):
        return None
    return manifest


@dataclass(frozen=True)
class PlanOwnership:
    """What a build in progress may have written, from its plan: kind, planned shard count, cues or not."""

    kind: str
    num_shards: int
    cues: bool
    #: The shards hold ``digests.npy`` (format 1.4).
    digests: bool = False


def _manifest_owner(record_name: str, manifest: Manifest) -> Callable[[str], bool]:
    files = set(manifest.file_entries())
    dirs = {rel.rsplit("/", 1)[0] for rel in files if "/" in rel}
    for rel in list(dirs):
        while "/" in rel:
            rel = rel.rsplit("/", 1)[0]
            dirs.add(rel)

    def owns(rel: str) -> bool:
        if rel in (record_name, TEMP_PREFIX + MANIFEST_NAME) or rel in files or rel in dirs:
            return True
        if rel == VERIFIED_DIR or rel.startswith(VERIFIED_DIR + "/"):
            return True  # what readers recorded of the pack's stream files (loader.pack.content_check)
        head, _, name = rel.rpartition("/")
        return name.startswith(TEMP_PREFIX) and f"{head}/{name[len(TEMP_PREFIX):]}".lstrip("/") in files

    return owns


def _plan_owner(plan: PlanOwnership, plan_file: str, receipts_dir: str) -> Callable[[str], bool]:
    shard_files = {stream_file_name(s) for s in STREAMS_BY_KIND.get(plan.kind, ())} | {SHARD_INDEX_NAME}
    if plan.digests:
        shard_files.add(DIGESTS_NAME)
    receipt = re.compile(r"(%s)?(shard-\d{%d,}|cues)\.json" % (re.escape(TEMP_PREFIX), SHARD_DIR_DIGITS))
    top_files = {plan_file, MANIFEST_NAME, SKIPPED_NAME}

    def owns(rel: str) -> bool:
        parts = rel.split("/")
        top = parts[0]
        bare = top[len(TEMP_PREFIX):] if top.startswith(TEMP_PREFIX) else top
        if len(parts) == 1 and (bare in top_files or top in top_files
                                or (top.startswith(plan_file) and _TEMP_SUFFIX.fullmatch(top[len(plan_file):]))):
            return True
        if top == receipts_dir:
            return len(parts) == 1 or (len(parts) == 2 and receipt.fullmatch(parts[1]) is not None)
        if bare == COLUMNS_DIR:  # the columns, and with digests their deflated copies (format 1.5)
            return len(parts) == 1 or (len(parts) == 2 and (parts[1].endswith(".npy") or (
                plan.digests and parts[1].endswith(".npy" + DEFLATED_SUFFIX))))
        if bare == CUES_DIR:
            return plan.cues
        match = _SHARD_NAME.fullmatch(bare)
        if match is None or int(match.group(1)) >= plan.num_shards or bare != shard_dir_name(int(match.group(1))):
            return False
        return len(parts) == 1 or (len(parts) == 2 and parts[1] in shard_files)

    return owns


@dataclass
class Survey:
    """A directory's entries, the records found in it, and the entries none of them owns."""

    root: str
    manifest: Manifest | None = None
    incoming: Manifest | None = None
    replaced: Manifest | None = None
    plan: PlanOwnership | None = None
    entries: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.entries

    def refuse_foreign(self, action: str) -> None:
        """Raise naming the foreign entries, if there are any (``action``: what was refused)."""
        refuse_foreign(self.root, self.foreign, "speechpack manifest or build in progress", action)


def refuse_foreign(root: str, foreign: Sequence[str], records: str, action: str, entries: str = "files",
                   place: str = "directory") -> None:
    """Raise naming the ``foreign`` entries of ``root`` (the first ``LISTED_FOREIGN``), if there are any;
    ``records`` names what would have listed them, ``action`` what is refused (``entries`` and ``place``: the
    words for them, "objects" under a "prefix" on object storage)."""
    if not foreign:
        return
    shown = foreign[:LISTED_FOREIGN]
    more = f" and {len(foreign) - len(shown)} more" if len(foreign) > len(shown) else ""
    raise SpeechpackError(
        f"{root}: holds {entries} that no {records} lists ({', '.join(shown)}{more}); refusing to {action}. "
        f"speechpack deletes only what its own records list: move those {entries} away, or choose another {place}")


def walk(root: str) -> list[str]:
    """Every entry under ``root`` as a ``/``-separated relative path, parents before children; symbolic links
    are entries, never followed."""
    found = []
    stack = [""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        for name in sorted(os.listdir(path), reverse=True):
            child = f"{rel}/{name}" if rel else name
            found.append(child)
            full = os.path.join(path, name)
            if os.path.isdir(full) and not os.path.islink(full):
                stack.append(child)
    return sorted(found)


def survey(root: str, plan: PlanOwnership | None = None, plan_file: str = "", receipts_dir: str = "") -> Survey:
    """Read ``root``'s records and sort its entries into owned and foreign (``plan``: the build in progress,
    when ``root`` holds one; ``plan_file``/``receipts_dir``: its state names, from ``packer.build.state``)."""
    result = Survey(root=root)
    if not os.path.isdir(root):
        return result
    result.entries = walk(root)
    owners = []
    for name, attr in ((MANIFEST_NAME, "manifest"), (INCOMING_MANIFEST, "incoming"), (REPLACED_MANIFEST, "replaced")):
        record = read_manifest_record(os.path.join(root, name)) if name in result.entries else None
        setattr(result, attr, record)
        if record is not None:
            owners.append(_manifest_owner(name, record))
    result.plan = plan
    if plan is not None:
        owners.append(_plan_owner(plan, plan_file, receipts_dir))
    def reserved(rel: str) -> bool:  # a record, or a job's plan before it is linked into place
        return (rel in RESERVED_NAMES or _WRITE_PROBE.fullmatch(rel) is not None
                or (bool(plan_file) and rel.startswith(plan_file)
                    and _TEMP_SUFFIX.fullmatch(rel[len(plan_file):]) is not None))

    result.foreign = [rel for rel in result.entries if not reserved(rel) and not any(owns(rel) for owns in owners)]
    # name what is in a foreign directory (its files), not the directory
    parents = {rel.rsplit("/", 1)[0] for rel in result.entries if "/" in rel}
    result.foreign = [rel for rel in result.foreign if rel not in parents]
    return result


def remove_entries(root: str, rels: Iterable[str]) -> None:
    """Remove these entries (files, links, or directories with everything in them), deepest first."""
    for rel in sorted(set(rels), key=lambda r: (-r.count("/"), r)):
        path = os.path.join(root, *rel.split("/"))
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)


def retire_manifest(root: str, record_name: str, keep: set[str] | frozenset = frozenset(),
                    fsync_dir: Callable[[str], None] | None = None) -> list[str]:
    """Remove the pack a manifest record lists: rename the record to ``.tmp-replaced-dataset.json`` (the pack
    stops being a pack at once), delete every file it lists except ``keep`` (and the ``.tmp-`` names of those
    files, and directories left empty), then the record itself.  Return the relative paths deleted (temporary
    names left out).  Killed at any point, the replaced record still owns what is left."""
    record = os.path.join(root, record_name)
    replaced = os.path.join(root, REPLACED_MANIFEST)
    if record_name != REPLACED_MANIFEST:
        os.replace(record, replaced)
        if fsync_dir is not None:
            fsync_dir(root)
    manifest = read_manifest_record(replaced)
    removed = []
    if manifest is not None:
        owns = _manifest_owner(REPLACED_MANIFEST, manifest)
        listed = set(manifest.file_entries())
        for rel in walk(root):
            if rel in keep or rel in (REPLACED_MANIFEST, INCOMING_MANIFEST, MANIFEST_NAME) or not owns(rel):
                continue
            path = os.path.join(root, *rel.split("/"))
            if os.path.isdir(path) and not os.path.islink(path):
                continue  # directories go once empty, below
            os.remove(path)
            if rel in listed:
                removed.append(rel)
        for rel in sorted((r for r in walk(root) if owns(r)), key=lambda r: -r.count("/")):
            path = os.path.join(root, *rel.split("/"))
            if os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path):
                os.rmdir(path)
    os.remove(replaced)
    if fsync_dir is not None:
        fsync_dir(root)
    return removed


#: Suffix of the lock file that sits beside the destination directory (``/local/packs/train.lock``).
LOCK_SUFFIX = ".lock"
#: Version of the verification record kept in the lock file.
RECORD_VERSION = 1


class DestinationLock:
    """An ``flock`` on ``DST.lock``, whose content records the last verified copy into ``DST``."""

    def __init__(self, fd: int, path: str, waited: bool):
        self.fd = fd
        self.path = path
        self.waited = waited

    def read_record(self) -> dict | None:
        os.lseek(self.fd, 0, os.SEEK_SET)
        raw = b""
        while chunk := os.read(self.fd, 1 << 20):
            raw += chunk
        try:
            record = parse_json(raw, "lock record", error=ValueError) if raw else None
        except ValueError:
            return None
        return record if isinstance(record, dict) and record.get("version") == RECORD_VERSION else None

    def clear_record(self) -> None:
        os.ftruncate(self.fd, 0)

    def write_record(self, source, dst: str) -> None:
        record = {"version": RECORD_VERSION, "manifest_sha256": source.manifest_sha256,
                  "files": {rel: file_identity(os.path.join(dst, rel)) for rel in sorted(source.files)}}
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, json.dumps(record, sort_keys=True).encode("utf-8"))
        os.fsync(self.fd)


def file_identity(path: str) -> list[int]:
    """Size, mtime and inode: what changes when a file is rewritten or replaced after it was verified."""
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


def record_matches(lock: DestinationLock, source, dst: str) -> bool:
    """Whether the copy that held the lock verified exactly this source into ``dst``, untouched since."""
    record = lock.read_record()
    if record is None or record.get("manifest_sha256") != source.manifest_sha256:
        return False
    manifest_path = os.path.join(dst, MANIFEST_NAME)
    if not os.path.isfile(manifest_path) or read_bytes(manifest_path) != source.manifest_bytes:
        return False
    files = record.get("files", {})
    if set(files) != set(source.files):
        return False
    try:
        return all(files[rel] == file_identity(os.path.join(dst, rel)) for rel in source.files)
    except OSError:
        return False


@contextlib.contextmanager
def locked(dst: str, exclusive: bool, log: Callable[[str], None] | None,
           wait: bool = True) -> Iterator[DestinationLock]:
    """Hold ``DST.lock`` (exclusive to copy or build, shared to verify or to run one slice of an array build),
    saying so when another process holds it; with ``wait`` false, refuse instead of waiting.

    One lock file per destination, taken by every speechpack command that writes there (``copy``, ``build``,
    ``finalize``), so a copy never runs into a build of the same directory, nor two builds into each other.
    """
    path = dst.rstrip(os.sep) + LOCK_SUFFIX
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise SpeechpackError(f"{path}: cannot open the copy lock ({err.strerror or err})") from None
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    waited = False
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise SpeechpackError(f"{dst}: another speechpack process is writing there (it holds {path}): "
                                      f"wait for it to finish, or choose another directory") from None
            waited = True
            if log is not None:
                log(f"waiting for {path}: another process is copying or verifying {dst}")
            fcntl.flock(fd, mode)
        yield DestinationLock(fd, path, waited)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


__all__ = ["DestinationLock", "INCOMING_MANIFEST", "LOCK_SUFFIX", "PlanOwnership", "REPLACED_MANIFEST", "Survey", "locked", "read_manifest_record", "record_matches", "remove_entries", "retire_manifest", "survey", "walk"]
