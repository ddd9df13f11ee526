"""``speechpack copy PACK s3://bucket/packs/train``: publish a local pack to object storage, verified.

The same promises as a copy to a directory (``packer.copy.to_directory``), kept with what an object store offers (objects
appear whole, when their upload completes; no rename, no lock):

- Every file is hashed while it is uploaded (the bytes read are the bytes sent) and compared with the manifest
  *before* the upload is completed; a file that does not match is never completed (its upload is discarded), and
  is reported by name as corrupt.
- ``dataset.json`` is uploaded last, once every object it lists is in place and verified, so a reader never sees
  a pack without all its objects.  Before the first object of an existing pack at the prefix changes, its
  ``dataset.json`` is deleted (after ``.tmp-incoming-dataset.json``, the incoming manifest, is uploaded: it owns
  what the publish writes, as in a directory).
- Idempotent and resumable: an object already there with the right size is streamed back and re-hashed (never
  trusted on its size), kept when it verifies and uploaded again when it does not.  A publish killed at any point
  leaves objects that the incoming record owns, and the next run keeps the verified ones.
- Never deletes what no speechpack record lists: objects under the prefix that neither the old ``dataset.json``,
  an incoming or replaced record, nor the source lists are named and the publish is refused.  An old pack's
  objects that the source does not list are deleted (after its ``dataset.json``), and reported.
- One publish per node: ``SRC.lock`` (beside the source pack, the lock ``build`` and ``copy`` take) is held
  exclusively, so ranks that all run the command publish once, one after the other; the second re-hashes
  (streams back) what the first uploaded and changes nothing.
- One publish per prefix: ``PREFIX/.tmp-publish-lock.json`` (``packer.copy.store_prefix``: a conditional write with a
  lease and the writer's identity), so a publish from another node or of another pack waits for this one.
- Unfinished multipart uploads that killed publishes left under the prefix are aborted when a publish starts and
  after it succeeds (``packer.copy.store_prefix``).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import BinaryIO, Callable

from speechpack.loader.pack.object_store import ObjectStorePackFiles, describe_error
from speechpack.loader.pack.object_store import store_errors as remote_errors
from speechpack.packer.copy.store_prefix import LOCK_NAME, PrefixLock, abort_leftover_uploads
from speechpack.packer.copy.report import (
    COPY_BLOCK,
    DEFAULT_JOBS,
    STREAM_BLOCK,
    CopyError,
    CopyReport,
    ObjectReader,
    mismatch,
    progress_bar,
    run_parallel,
)
from speechpack.packer.ownership import INCOMING_MANIFEST, REPLACED_MANIFEST, locked, refuse_foreign
from speechpack.schemas.constants import MANIFEST_NAME, TEMP_PREFIX
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import FileEntry
from speechpack.schemas.manifest_file import parse_manifest, read_manifest_file


class RemotePack(ObjectStorePackFiles):
    """A pack's prefix on a store, as publishing writes it: the reading of ``loader.pack.ObjectStorePackFiles``
    (listing, whole objects, ranges), and the write side only a publish needs (an upload completed only when
    closed, small objects written whole, objects removed).  Failures raise ``ObjectStoreError`` naming the
    object."""

    @property
    def root(self) -> str:
        """The prefix as the filesystem names it (``bucket/packs/train``), for requests made on ``fs`` directly
        (``packer.copy.store_prefix``)."""
        self.fs  # noqa: B018 - connects in this process first
        return self._root

    def check_name(self, rel: str) -> str:
        """As a reader's, and also the ``.tmp-`` names a publish writes its records and unfinished objects under
        (``.tmp-incoming-dataset.json``): a ``.tmp-`` name is as safe as the name it prefixes."""
        head, _, name = rel.rpartition("/")
        if name.startswith(TEMP_PREFIX) and len(name) > len(TEMP_PREFIX):
            bare = name[len(TEMP_PREFIX):]
            super().check_name(f"{head}/{bare}" if head else bare)
            return rel
        return super().check_name(rel)

    def open_write(self, rel: str) -> BinaryIO:
        """A stream that becomes the object when closed (uploaded in parts when large); until then the object
        does not exist, or keeps its old content."""
        return self.fs.open(self._path(rel), "wb", block_size=max(STREAM_BLOCK, 5 << 20))

    def write_bytes(self, rel: str, data: bytes) -> None:
        path = self._path(rel)
        with self._request(rel, "write"):
            self.fs.pipe_file(path, data)

    def remove(self, rels: list[str]) -> None:
        """Delete these objects (absent ones are no error)."""
        for rel in rels:
            path = self._path(rel)
            try:
                with self._request(rel, "delete"):
                    self.fs.rm_file(path)
            except FileNotFoundError:
                continue


def publish_pack(src: str, url: str, jobs: int = DEFAULT_JOBS, progress: bool = True,
                 log: Callable[[str], None] = print, endpoint_url: str | None = None) -> CopyReport:
    """Upload the local pack ``src`` to the prefix ``url``, verifying every object; ``dataset.json`` last.

    Raises :class:`CopyError` naming every corrupt or unreadable source file; the prefix then holds no
    ``dataset.json``.
    """
    manifest_file = read_manifest_file(src)
    files = manifest_file.manifest.file_entries()
    remote = RemotePack(url, endpoint_url)
    with locked(src, exclusive=True, log=log), PrefixLock(remote, src, log) as prefix_lock:
        started = time.perf_counter()
        report = CopyReport(src=src, dst=remote.location, files=len(files), bytes_total=sum(e.size for e in files.values()))
        target = _Target(src, remote, manifest_file.raw, files, report)
        target.prepare()
        _aborted(abort_leftover_uploads(remote, target.owned), log)
        bar = progress_bar(report.bytes_total, progress, f"publish {os.path.basename(src)}")
        problems = run_parallel(target.process, sorted(files, key=lambda r: -files[r].size), jobs, bar)
        if problems:
            raise CopyError(f"{remote.location}: not published ({len(problems)} problem(s); {MANIFEST_NAME} was not "
                            f"uploaded, so the prefix is not a pack)", problems)
        prefix_lock.check()  # nobody took the prefix over: dataset.json may go up
        target.publish()
        _aborted(abort_leftover_uploads(remote, target.owned), log)
        report.seconds = time.perf_counter() - started
        return report


def _aborted(urls: list[str], log: Callable[[str], None]) -> None:
    if urls:
        log(f"aborted {len(urls)} unfinished upload(s) that an interrupted publish left: {', '.join(urls[:4])}"
            f"{' ...' if len(urls) > 4 else ''}")


def verify_published(src: str, url: str, jobs: int = DEFAULT_JOBS, progress: bool = True,
                     endpoint_url: str | None = None) -> CopyReport:
    """Check that the prefix ``url`` holds a complete, byte-exact copy of the local pack ``src`` (every object
    streamed back and re-hashed); change nothing.  Raises :class:`CopyError` naming every problem."""
    manifest_file = read_manifest_file(src)
    files = manifest_file.manifest.file_entries()
    remote = RemotePack(url, endpoint_url)
    started = time.perf_counter()
    listing = remote.listing()
    problems = []
    if MANIFEST_NAME not in listing:
        problems.append(f"{remote.where(MANIFEST_NAME)}: missing (the prefix is not a complete pack)")
    elif remote.read_bytes(MANIFEST_NAME) != manifest_file.raw:
        problems.append(f"{remote.where(MANIFEST_NAME)}: differs from {manifest_file.path}")
    problems += [f"{remote.where(rel)}: not in {MANIFEST_NAME} (a leftover)"
                 for rel in sorted(set(listing) - set(files) - {MANIFEST_NAME})]

    def check(rel: str, bar) -> str | None:
        outcome = hash_object(remote, rel, files[rel], bar) if rel in listing else "missing"
        return None if outcome is None else f"{remote.where(rel)}: {outcome}"

    total = sum(e.size for e in files.values())
    problems += run_parallel(check, sorted(files), jobs, progress_bar(total, progress, f"verify {remote.location}"))
    if problems:
        raise CopyError(f"{remote.location}: not a verified copy of {src}", problems)
    return CopyReport(src=src, dst=remote.location, files=len(files), bytes_total=total, files_kept=len(files),
                      verify_only=True, seconds=time.perf_counter() - started)


def hash_object(remote: RemotePack, rel: str, entry: FileEntry, bar) -> str | None:
    """Stream one object and hash it; return what is wrong with it (size, hash, unreadable) or None."""
    digest = hashlib.sha256()
    size = 0
    try:
        with ObjectReader(remote, rel) as reader:
            while chunk := reader.read(COPY_BLOCK):
                digest.update(chunk)
                size += len(chunk)
                bar.update(len(chunk))
    except FileNotFoundError:
        return "missing"
    except remote_errors() as err:
        return f"cannot read ({describe_error(err)})"
    return mismatch(size, digest.hexdigest(), entry)


def _owned_by(raw: bytes | None, name: str) -> set[str] | None:
    """The objects a manifest record lists, when it is one speechpack wrote (the strict reader accepts it);
    None for a foreign or damaged record, which owns nothing."""
    if raw is None:
        return None
    try:
        return set(parse_manifest(raw, name).file_entries())
    except (PackFormatError, KeyError, TypeError, ValueError):
        return None


class _Target:
    """The per-object work of one publish to ``remote`` (run by several threads) and the publication at the end."""

    def __init__(self, src: str, remote: RemotePack, manifest_bytes: bytes, files: dict[str, FileEntry],
                 report: CopyReport):
        self.src = src
        self.remote = remote
        self.manifest_bytes = manifest_bytes
        self.files = files
        self.report = report
        self._present: set[str] = set()
        self.owned: set[str] = set()
        self._unpublished = False
        self._lock = threading.Lock()

    def _read(self, listing: dict[str, int], rel: str) -> bytes | None:
        return self.remote.read_bytes(rel) if rel in listing else None

    def prepare(self) -> None:
        """Refuse a prefix holding objects no record lists; finish an interrupted removal; retire another pack
        (or another publish's leftovers) there, keeping objects the source lists under the same name; note which
        objects already have their final size."""
        listing = self.remote.listing()
        current = self._read(listing, MANIFEST_NAME)
        incoming = self._read(listing, INCOMING_MANIFEST)
        replaced = self._read(listing, REPLACED_MANIFEST)
        owned_current = _owned_by(current, self.remote.where(MANIFEST_NAME))
        owned_incoming = _owned_by(incoming, self.remote.where(INCOMING_MANIFEST)) or set()
        owned_replaced = _owned_by(replaced, self.remote.where(REPLACED_MANIFEST)) or set()
        # Only records own objects: an object that merely has a name the source lists (a user's own upload) is
        # foreign until a record speechpack wrote lists it, as a file is in a directory (``packer.ownership``).
        owned = (owned_current or set()) | owned_incoming | owned_replaced
        owned |= {INCOMING_MANIFEST, REPLACED_MANIFEST} | ({MANIFEST_NAME} if owned_current is not None else set())
        #: What speechpack records list here, and what this publish writes: whose unfinished uploads are its own.
        self.owned = owned | set(self.files) | {MANIFEST_NAME}
        owned = owned | {LOCK_NAME}  # the publish lock (held by this publish)
        foreign = sorted(set(listing) - owned)
        refuse_foreign(self.remote.location, foreign, "speechpack manifest", "publish a pack there", entries="objects",
                       place="prefix")
        wanted = set(self.files)
        if replaced is not None:  # an interrupted removal of an older pack: finish it
            self._delete(owned_replaced - wanted - (owned_current or set()), listing)
            self.remote.remove([REPLACED_MANIFEST])
        if incoming is not None and incoming != self.manifest_bytes:  # another publish, interrupted
            self._delete(owned_incoming - wanted - (owned_current or set()), listing)
        if current != self.manifest_bytes:
            self.remote.write_bytes(INCOMING_MANIFEST, self.manifest_bytes)  # owns what we write from now on
            if current is not None:  # another pack (or version) lives here: it stops being one now
                self.remote.write_bytes(REPLACED_MANIFEST, current)
                self.remote.remove([MANIFEST_NAME])
                self._delete((owned_current or set()) - wanted, listing)
                self.remote.remove([REPLACED_MANIFEST])
            self._unpublished = True
        self._present = {rel for rel, entry in self.files.items() if listing.get(rel) == entry.size}

    def _delete(self, rels: set[str], listing: dict[str, int]) -> None:
        gone = sorted(rel for rel in rels if rel in listing)
        self.remote.remove(gone)
        self.report.removed += [self.remote.where(rel) for rel in gone]

    def unpublish(self) -> None:
        """Before the first change to a published pack's objects (once): record the incoming manifest, then delete
        ``dataset.json``."""
        with self._lock:
            if self._unpublished:
                return
            self.remote.write_bytes(INCOMING_MANIFEST, self.manifest_bytes)
            self.remote.remove([MANIFEST_NAME])
            self._unpublished = True

    def process(self, rel: str, bar) -> str | None:
        """Keep, repair or upload one object; return a problem (naming the file) or None."""
        entry = self.files[rel]
        if rel in self._present:
            outcome = hash_object(self.remote, rel, entry, bar)
            if outcome is None:
                with self._lock:
                    self.report.files_kept += 1
                return None
            with self._lock:
                self.report.repaired.append(f"{self.remote.where(rel)}: {outcome}; uploaded again from the source")
            bar.total += entry.size
            bar.refresh()
        self.unpublish()
        problem = self._upload(rel, entry, bar)
        if problem is None:
            with self._lock:
                self.report.files_copied += 1
                self.report.bytes_copied += entry.size
        return problem

    def _upload(self, rel: str, entry: FileEntry, bar) -> str | None:
        """Upload one file, hashing what is read; complete the upload only when it matches the manifest."""
        src_path = os.path.join(self.src, rel)
        digest = hashlib.sha256()
        size = 0
        try:
            reader = open(src_path, "rb")
        except OSError as err:
            return f"{src_path}: cannot read ({err.strerror or err})"
        with reader:
            try:
                writer = self.remote.open_write(rel)
            except remote_errors() as err:
                return f"{self.remote.where(rel)}: cannot upload ({describe_error(err)})"
            try:
                while chunk := reader.read(COPY_BLOCK):
                    digest.update(chunk)
                    writer.write(chunk)
                    size += len(chunk)
                    bar.update(len(chunk))
                wrong = mismatch(size, digest.hexdigest(), entry)
                if wrong:
                    _discard(writer)
                    self.remote.remove([rel])  # a bad object of an earlier run must not stay either
                    return f"{src_path}: {wrong}: the source file is corrupt, it was not uploaded"
                writer.close()  # completes the upload: the object appears whole
            except OSError as err:
                _discard(writer)
                if err.filename == src_path:
                    return f"{src_path}: cannot read ({err.strerror or err})"
                return f"{src_path} -> {self.remote.where(rel)}: cannot upload ({describe_error(err)})"
            except remote_errors() as err:
                _discard(writer)
                return f"{src_path} -> {self.remote.where(rel)}: cannot upload ({describe_error(err)})"
        return None

    def publish(self) -> None:
        """Upload ``dataset.json`` last, exactly the source's bytes; then drop the incoming record."""
        if self._unpublished:
            self.remote.write_bytes(MANIFEST_NAME, self.manifest_bytes)
        self.remote.remove([INCOMING_MANIFEST])


def _discard(writer) -> None:
    """Abandon an upload without completing it (fsspec's buffered files: abort the multipart upload, or never
    send the single PUT)."""
    writer.discard()
    writer.closed = True  # so that garbage collection never completes it


__all__ = ["RemotePack", "hash_object", "publish_pack", "verify_published"]
