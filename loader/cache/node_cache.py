"""One bounded cache directory per node, shared by every rank and job on it: ``NodeCache``.

Layout (docs/loader.md, "Node cache (packs by URL)"), all under ``<dir>/``:

- ``objects/<sha256>-<size>.bin``: a file's verified bytes.  The key is the file's content hash and size as
  ``dataset.json`` records them, so two versions of a pack never share an entry, and a file one version shares
  with the next is fetched once.
- ``objects/<sha256>-<size>.owned``: the ledger entry written after the bytes were verified and renamed into
  place: the object's URL (for people), then the *record* of the verified bytes, the identity of the data file as
  it stood then (``loader.pack.content_check.ContentIdentity``: device, inode, size, mtime, ctime) with the sha256
  (``verified_as``), so a reader knows whether the file it maps is still the one verified without hashing it
  (``loader.cache.cached_files``, "Checking the cache's copies").  An entry is complete only with both; the cache evicts and deletes only entries it has a ledger entry
  for, so a file it did not fetch (a local pack is never in here; anything copied in by hand) is never deleted.
- ``objects/<sha256>-<size>.lock``: ``fcntl.flock`` lock file of the entry: whoever fetches holds it exclusively,
  so one fetch per file per node; the others wait on it and then map what was fetched.
- ``tmp/<sha256>-<size>.<pid>.part``: a fetch in progress (its size counts against the limit), renamed into
  ``objects/`` after ``fsync`` only when its whole-file hash matched; a kill -9 leaves a ``.part`` that no reader
  takes for a file, and the next fetcher of the entry removes it.
- ``space.lock``: held while an admission computes the usage and evicts, so two admissions never overrun the limit.

A mapped entry is held with a shared ``flock`` on its data file for as long as the mapping lives
(:meth:`NodeCache.pin`); eviction prefers entries nobody maps, and never evicts a file the next batches of the plan
need.  A mapping never loses a byte: an evicted file's name goes, its inode stays until the last mapping of it is
gone.  Locks die with their process: a killed rank pins nothing.
Which entry to evict follows the plan the loader gives (``next_use``, ``loader.cache.schedule``): the file whose next
use is farthest away, and only files used later than the one coming in (Belady, "A study of replacement algorithms
for a virtual-storage computer", IBM Systems Journal 5(2), 1966); without a plan, the least recently completed
first.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator

from speechpack.loader.pack.content_check import ContentIdentity, read_small_file, record_sha256
from speechpack.schemas.errors import PackFormatError, SpeechpackError
from speechpack.schemas.units import format_bytes

#: Seconds an admission waits for other processes to release pinned entries before the limit is an error.
SPACE_WAIT_SECONDS = 120.0
_DATA, _LEDGER, _LOCK, _PART = ".bin", ".owned", ".lock", ".part"
#: An entry's content hash: a whole file's sha256 (64 hex digits), or a range entry's BLAKE2b-128 (32 hex digits:
#: ``loader.cache.ranges``).
_SHA256 = re.compile(r"[0-9a-f]{64}|[0-9a-f]{32}")
_SIZE = re.compile(r"(?:0|[1-9][0-9]{0,18})")  # ASCII only: "²".isdigit() is true, int("²") fails
#: A fetch's ``.part`` in ``tmp/``: ``<entry name>.<pid>.part``.
_PART_NAME = re.compile(r"((?:[0-9a-f]{32}){1,2}-[0-9]+)\.[0-9]{1,10}\.part")
#: Largest ledger entry read (a URL and a record): anything larger is not one of ours and is never trusted.
MAX_LEDGER_BYTES = 1 << 16


class CacheFullError(SpeechpackError):
    """The cache limit cannot hold what the plan needs at once (raised at start, or after waiting for others)."""


class CacheIntegrityError(PackFormatError):
    """Bytes from the store do not match what the pack records (a file's sha256, a piece's digest), twice."""


class CacheDirError(SpeechpackError):
    """The cache directory cannot hold the cache (not a directory, read-only, not ours to write, full, split over
    two file systems): one line naming it and what to do, never a bare ``OSError``."""


#: ``OSError`` numbers that say the cache directory cannot be used as one (``cache_dir_error``); any other (a
#: store's failure: ``ObjectStoreError`` is an ``OSError`` too) passes through as it is.
_DIR_FAULTS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR,
                         errno.EEXIST, errno.EISDIR, errno.EXDEV, errno.ENOENT, errno.ELOOP, errno.EMLINK,
                         errno.ENAMETOOLONG, errno.EIO})


def _free_bytes(path: str) -> int | None:
    try:
        info = os.statvfs(path)
    except OSError:
        return None
    return info.f_bavail * info.f_frsize


@dataclass(frozen=True)
class EntryKey:
    """One entry as the cache knows it: a file's sha256 and size from ``dataset.json``, or a segment's key and size
    (``loader.cache.ranges.segment_key``: 32 hex digits naming a byte range of one version of a stream file, its
    bytes checked against the shard's ``digests.npy`` whenever read)."""

    sha256: str
    size: int

    @property
    def name(self) -> str:
        return f"{self.sha256}-{self.size}"

    @classmethod
    def from_name(cls, name: str) -> "EntryKey | None":
        """The key an entry's file name spells (``<sha256>-<size>``: 64 lower-case hex digits, ASCII decimal
        digits); None for any other name (a file the cache did not make: ignored, never deleted)."""
        sha, _, size = name.partition("-")
        if not (_SHA256.fullmatch(sha) and _SIZE.fullmatch(size)):
            return None
        return cls(sha, int(size))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _try_lock(path: str, mode: int) -> int | None:
    """An open descriptor of ``path`` holding ``flock(mode | LOCK_NB)``, or None when it is held elsewhere or gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def hash_file(path: str) -> str:
    """sha256 of a local file, read in large blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fp:
        while block := fp.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


class NodeCache:
    """The cache directory ``root`` holding at most ``limit`` bytes (None: no limit); see the module docstring.
    Pickled with the pack (DataLoader workers), without its process-local eviction order."""

    def __init__(self, root: str, limit: int | None = None, space_wait: float = SPACE_WAIT_SECONDS):
        self.root = os.path.abspath(root)
        self.limit = limit
        self.space_wait = space_wait
        self.objects = os.path.join(self.root, "objects")
        self.tmp = os.path.join(self.root, "tmp")
        for directory in (self.objects, self.tmp):
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as err:
                raise self.dir_error(err, "make its directories") from None
            if not os.path.isdir(directory):  # makedirs accepts a symbolic link to a non-directory on some systems
                raise self.dir_error(NotADirectoryError(errno.ENOTDIR, "not a directory", directory),
                                     "make its directories")
        #: Process-local, set by ``loader.cache.schedule``: an entry's next use in the plan (inf: none), and the
        #: entries that must stay (the next batches' files).
        self.next_use: Callable[[str], float] | None = None
        self.protected: Callable[[], set[str]] | None = None
        #: Process-local, set by ``loader.cache.schedule`` for a plan of range entries: given the entries held, the
        #: bytes a fetch ahead of need leaves free under the limit for what the batches being built still claim.
        self.headroom: Callable[[set[str]], int] | None = None
        #: Bytes this process fetched from the store (for reports and tests): each fetched file counted once its
        #: bytes are in, before its entry is complete, so nobody sees a complete entry whose fetch is not counted.
        self.fetched_bytes = 0
        #: Process-local: the data files this process verified and recorded (entry name -> identity).
        self.written: dict[str, ContentIdentity] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "next_use": None, "protected": None, "headroom": None, "fetched_bytes": 0,
                "written": {}}

    def __repr__(self) -> str:
        return f"NodeCache({self.root!r}, limit={self.limit})"

    def _path(self, key: EntryKey, suffix: str) -> str:
        return os.path.join(self.objects, key.name + suffix)

    def _has_ledger(self, key: EntryKey) -> bool:
        """Whether ``key`` has a ledger entry the cache wrote: a regular file, not a link (as ``entries`` counts)."""
        try:
            return stat.S_ISREG(os.lstat(self._path(key, _LEDGER)).st_mode)
        except OSError:
            return False

    def lookup(self, key: EntryKey) -> str | None:
        """The data path of a complete entry (ledger entry present, data a regular file of the recorded size), else
        None."""
        data = self._path(key, _DATA)
        try:
            info = os.stat(data)
        except OSError:
            return None
        if stat.S_ISREG(info.st_mode) and info.st_size == key.size and self._has_ledger(key):
            return data
        return None

    @contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by close, or by the kernel when the process dies
            yield
        finally:
            os.close(fd)

    def dir_error(self, err: OSError, doing: str, key: "EntryKey | None" = None) -> "CacheDirError | OSError":
        """``err``, met while the cache did ``doing``, as one line naming the directory and what to do; an error that
        is not the directory's fault (a store's) is returned as it is."""
        if isinstance(err, SpeechpackError) or err.errno not in _DIR_FAULTS:
            return err
        where = err.filename if isinstance(err.filename, str) else self.root
        reason = err.strerror or str(err)
        fix = "point cache.dir (or $SPEECHPACK_CACHE_DIR) at a writable directory on a local disk"
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            free = _free_bytes(self.root)
            free_text = "unknown" if free is None else format_bytes(free)
            need = (f"the cache needs room for its limit, cache.limit {format_bytes(self.limit)}, and has "
                    f"{format_bytes(self.usage_or_zero())} of it; free space on that disk: {free_text}"
                    if self.limit is not None else
                    f"cache.limit is not set, so the cache grows with every file the plan reads; free space on "
                    f"that disk: {free_text}")
            what = f"{format_bytes(key.size)} " if key is not None else ""
            return CacheDirError(f"{self.root}: the disk is full ({reason}) while the cache did {doing}, "
                                 f"{what}more needed; {need}: set cache.limit to what the disk can hold, free space "
                                 f"there, or {fix}")
        if err.errno == errno.EROFS:
            return CacheDirError(f"{self.root}: the cache directory is on a read-only file system (while the cache "
                                 f"did {doing}); {fix}")
        if err.errno in (errno.EACCES, errno.EPERM):
            return CacheDirError(f"{self.root}: this user may not write there ({reason}: {where}, while the cache "
                                 f"did {doing}); {fix}")
        if err.errno == errno.EXDEV:
            return CacheDirError(f"{self.root}: {self.tmp} and {self.objects} are on different file systems (a "
                                 f"fetch is renamed from tmp/ into objects/); keep the whole cache directory on one "
                                 f"file system, or {fix}")
        if err.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
            return CacheDirError(f"{where}: not a directory the cache can use ({reason}, while the cache did "
                                 f"{doing}; it needs {self.objects} and {self.tmp} as directories); {fix}")
        return CacheDirError(f"{where}: the cache cannot {doing} there ({reason}); {fix}")

    def usage_or_zero(self) -> int:
        try:
            return self.usage()
        except OSError:
            return 0

    def ensure(self, key: EntryKey, fetch: Callable[[BinaryIO], None], source: str, wait: bool = True) -> str:
        """The data path of ``key``, fetched first when the node has no complete copy: ``fetch(fp)`` writes the
        verified bytes to ``fp`` (and raises when it cannot).  One process fetches; the others wait on the entry's
        lock and return the path it completed.  ``wait`` False: raise ``CacheFullError`` at once when the entry does
        not fit now (a fetch ahead of need).  A directory that cannot hold the entry (full, read-only, ...) is a
        ``CacheDirError`` naming it."""
        found = self.lookup(key)
        if found is not None:
            return found
        in_fetch = [False]  # the store's own errors (an absent object: FileNotFoundError) pass through
        try:
            return self._ensure_locked(key, fetch, source, wait, in_fetch)
        except OSError as err:
            if in_fetch[0] and err.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise self.dir_error(err, f"fetch {source}", key) from None

    def _ensure_locked(self, key: EntryKey, fetch: Callable[[BinaryIO], None], source: str, wait: bool,
                       in_fetch: list) -> str:
        with self._locked(self._path(key, _LOCK)):
            found = self.lookup(key) or self._adopt(key, source)
            if found is not None:
                return found
            part = self._reserve(key, wait)
            try:
                with open(part, "r+b") as fp:
                    in_fetch[0] = True
                    fetch(fp)
                    in_fetch[0] = False
                    # counted now, before the entry is complete: a reader's ``lookup`` takes no lock, so it may
                    # use the entry (and its process report what it fetched) while this thread still syncs
                    self.fetched_bytes += key.size
                    fp.truncate()
                    fp.flush()
                    os.fsync(fp.fileno())
                self._complete(key, part, source)
            except BaseException:
                try:
                    os.unlink(part)
                except FileNotFoundError:
                    pass
                raise
            return self._path(key, _DATA)

    def claim(self, key: EntryKey, source: str) -> "str | Claim | None":
        """Take ``key``'s entry lock without waiting, for a fetch that serves several entries with one request
        (``loader.cache.ranges``): the data path when the entry is complete, a :class:`Claim` (this process now
        fetches it: ``fill`` or ``release`` it), or None when another process holds the lock (it is fetching the
        entry: wait for it with :meth:`ensure`)."""
        found = self.lookup(key)
        if found is not None:
            return found
        lock = self._path(key, _LOCK)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise self.dir_error(err, f"fetch {source}", key) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            found = self.lookup(key) or self._adopt(key, source)
        except BaseException:
            os.close(fd)
            raise
        if found is not None:
            os.close(fd)
            return found
        return Claim(self, key, source, fd)

    def _complete(self, key: EntryKey, part: str, source: str, durable: bool = True) -> None:
        """Rename a fetched ``.part`` into place and write its ledger entry, under the space lock: between the two
        the entry is neither in flight nor complete, and an admission counting the usage then would miss it."""
        with self._locked(os.path.join(self.root, "space.lock")):
            os.replace(part, self._path(key, _DATA))
            if durable:
                _fsync_dir(self.objects)
                self._write_ledger(key, source, self._identity_of(key))
            else:
                self._write_ledger(key, source, self._identity_of(key), durable=False)

    def _identity_of(self, key: EntryKey) -> ContentIdentity:
        return ContentIdentity.of(os.stat(self._path(key, _DATA)))

    def _write_ledger(self, key: EntryKey, source: str, identity: ContentIdentity | None,
                      durable: bool = True) -> None:
        """The ledger entry of ``key``: ``source`` (for people: where the bytes came from, a URL, never
        credentials) and the record of the data file ``identity`` describes, verified to hold ``key``'s bytes.
        ``durable`` False: not synced (a range entry, checked against its digests whenever read)."""
        tmp = os.path.join(self.tmp, f"{key.name}.{os.getpid()}.{threading.get_ident()}{_LEDGER}")
        record = "" if identity is None else json.dumps(identity.record(key.sha256), sort_keys=True) + "\n"
        with open(tmp, "w", encoding="utf-8") as fp:
            fp.write(source.replace("\n", " ") + "\n" + record)
            if durable:
                fp.flush()
                os.fsync(fp.fileno())
        os.replace(tmp, self._path(key, _LEDGER))
        if identity is not None:
            self.written[key.name] = identity
        if durable:
            _fsync_dir(self.objects)

    def verified_as(self, key: EntryKey, identity: ContentIdentity) -> bool:
        """Whether the ledger entry of ``key`` records the data file of ``identity`` as verified (by whichever
        process fetched or checked it): same device, inode, size, mtime and ctime.  A ledger entry that is not a
        small regular file, has no record (an earlier version's) or records another file answers False."""
        raw = read_small_file(self._path(key, _LEDGER), MAX_LEDGER_BYTES)
        if raw is None:
            return False
        _source, _, record = raw.partition(b"\n")
        return record_sha256(record.strip(), identity) == key.sha256

    def record_verified(self, key: EntryKey, identity: ContentIdentity, source: str) -> None:
        """The data file of ``identity`` was hashed and holds ``key``'s bytes: record it in the ledger entry (under
        the entry's lock; nothing when the entry was evicted meanwhile)."""
        try:
            with self._locked(self._path(key, _LOCK)):
                if self._has_ledger(key):
                    self._write_ledger(key, source, identity)
        except OSError as err:
            if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT):
                raise self.dir_error(err, "record a checked file") from None
            # a cache that cannot be written is still read: the file is hashed again next time

    def discard(self, key: EntryKey) -> None:
        """Remove the owned entry ``key`` (its data no longer holds its bytes), so the next use fetches it again;
        mappings of it keep their bytes (POSIX ``unlink``)."""
        try:
            with self._locked(self._path(key, _LOCK)):
                if not self._has_ledger(key):
                    return  # evicted or discarded meanwhile; never delete data the cache has no ledger entry for
                for suffix in (_LEDGER, _DATA):  # the ledger first, as eviction does
                    try:
                        os.unlink(self._path(key, suffix))
                    except FileNotFoundError:
                        pass
                self.written.pop(key.name, None)
        except OSError as err:
            raise self.dir_error(err, f"remove the changed copy {self._path(key, _DATA)}") from None

    def _adopt(self, key: EntryKey, source: str) -> str | None:
        """Data renamed into place by a process killed before it wrote the ledger entry: reused when it is a regular
        file whose hash is the key's, else moved aside (never deleted: the cache may not have written it; never
        hashed when it is not a regular file: a FIFO would block) so the name is free."""
        data = self._path(key, _DATA)
        try:
            info = os.stat(data)
        except FileNotFoundError:
            return None
        identity = ContentIdentity.of(info)
        if stat.S_ISREG(info.st_mode) and identity.size == key.size and hash_file(data) == key.sha256:
            self._write_ledger(key, source, identity)
            return data
        os.replace(data, f"{data}.unverified-{time.time_ns()}")
        return None

    def _reserve(self, key: EntryKey, wait: bool = True) -> str:
        """Make room for ``key`` (evicting) and create its ``.part`` file, all under the space lock."""
        deadline = time.monotonic() + self.space_wait
        part = os.path.join(self.tmp, f"{key.name}.{os.getpid()}{_PART}")
        while True:
            with self._locked(os.path.join(self.root, "space.lock")):
                # a range entry needed now (``loader.cache.ranges``) may take protected range entries' room too
                used, pinned = self._make_room(key, wait, last_resort=wait and len(key.sha256) == 32)
                if self.limit is None or used + key.size <= self._admits(wait, self.entries()):
                    with open(part, "wb"):
                        pass
                    return part
            if not wait or key.size > (self.limit or 0) or time.monotonic() > deadline:
                raise CacheFullError(
                    f"{self.root}: cache limit {format_bytes(self.limit or 0)} cannot take "
                    f"{format_bytes(key.size)} more: {format_bytes(used)} held, {format_bytes(pinned)} of it needed by the "
                    f"next batches or being fetched; raise cache.limit or lower cache.ahead")
            time.sleep(0.2)

    def reserve_claims(self, claims: list["Claim"]) -> None:
        """Make room for every claim at once (one count of the usage and one eviction pass, not one per entry: a
        batch claims a segment per sample) and create their ``.part`` files, waiting as ``_reserve`` does."""
        if not claims:
            return
        total = EntryKey(claims[0].key.sha256, sum(c.key.size for c in claims))
        deadline = time.monotonic() + self.space_wait
        while True:
            with self._locked(os.path.join(self.root, "space.lock")):
                used, pinned = self._make_room(total, True, last_resort=True)
                if self.limit is None or used + total.size <= self.limit:
                    for claim in claims:
                        claim.part = os.path.join(self.tmp, f"{claim.key.name}.{os.getpid()}{_PART}")
                        with open(claim.part, "wb"):
                            pass
                    return
            if total.size > (self.limit or 0) or time.monotonic() > deadline:
                raise CacheFullError(
                    f"{self.root}: cache limit {format_bytes(self.limit or 0)} cannot take "
                    f"{format_bytes(total.size)} more for one batch's segments: {format_bytes(used)} held, "
                    f"{format_bytes(pinned)} of it needed by the next batches or being fetched; raise cache.limit")
            time.sleep(0.2)

    def reserve_ahead(self, claims: list["Claim"], needed_at: float) -> list["Claim"]:
        """Make room for a fetch ahead of need (range entries first used at batch position ``needed_at``) without
        waiting: under the space lock, entries used later than ``needed_at`` are evicted (Belady) until the claims
        fit the limit less the headroom of the batches being built (``headroom``), and the longest prefix of
        ``claims`` that fits gets its ``.part``; the caller releases the rest."""
        if not claims:
            return []
        with self._locked(os.path.join(self.root, "space.lock")):
            total = EntryKey(claims[0].key.sha256, sum(c.key.size for c in claims))
            used, _ = self._make_room(total, False, needed_at=needed_at)
            room = None if self.limit is None else self._admits(False, self.entries()) - used
            admitted = []
            for claim in claims:
                if room is not None:
                    if claim.key.size > room:
                        break
                    room -= claim.key.size
                claim.part = os.path.join(self.tmp, f"{claim.key.name}.{os.getpid()}{_PART}")
                with open(claim.part, "wb"):
                    pass
                admitted.append(claim)
            return admitted

    def _admits(self, needed_now: bool, owned: dict[str, int]) -> int:
        """Bytes an admission may fill the cache to (``owned``: the entries held): the limit, less the headroom
        for a fetch ahead of need."""
        if needed_now or self.headroom is None:
            return self.limit
        return max(0, self.limit - self.headroom(set(owned)))

    def entries(self) -> dict[str, int]:
        """Complete entries this cache owns (a ledger entry that is a regular file, beside its data): name -> size.
        A ledger entry without data was not written by the cache (it removes the ledger entry first, and writes it
        last): it claims nothing against the limit, whatever size its name spells."""
        ledgers, data = set(), set()
        with os.scandir(self.objects) as listing:
            for item in listing:
                if item.name.endswith(_LEDGER) and item.is_file(follow_symlinks=False):
                    ledgers.add(item.name[:-len(_LEDGER)])
                elif item.name.endswith(_DATA):
                    data.add(item.name[:-len(_DATA)])
        owned = {}
        for name in ledgers & data:
            key = EntryKey.from_name(name)
            if key is not None:
                owned[key.name] = key.size
        return owned

    def _in_flight(self) -> int:
        """Bytes of live fetches (``.part`` files whose entry lock is held); stale ones are removed.  A ``.part``
        whose entry has no lock file was never made by a fetch (a fetcher creates the lock first, and lock files
        stay): not a fetch, ignored and left alone, as is any name the cache does not spell."""
        total = 0
        for name in os.listdir(self.tmp):
            match = _PART_NAME.fullmatch(name)
            key = None if match is None else EntryKey.from_name(match.group(1))
            if key is None or not os.path.exists(self._path(key, _LOCK)):
                continue
            fd = _try_lock(self._path(key, _LOCK), fcntl.LOCK_EX)
            if fd is None:
                total += key.size  # its fetcher holds the entry lock (or it is ours, being made now)
                continue
            try:
                os.unlink(os.path.join(self.tmp, name))  # left by a killed fetcher: never renamed, never read
            except FileNotFoundError:
                pass
            finally:
                os.close(fd)
        return total

    def _make_room(self, incoming: EntryKey, needed_now: bool = True, needed_at: float | None = None,
                   last_resort: bool = False) -> tuple[int, int]:
        """Evict until ``incoming`` fits (or nothing more may go); returns (bytes held, bytes protected).  With a
        plan, the entries used farthest in the future go first (Belady), and for a fetch ahead of need
        (``needed_now`` False) only those used later than ``incoming`` (or than position ``needed_at``), within
        the limit less the headroom (``_admits``); without a plan, the oldest first.

        Two passes over the victims: first entries nobody maps, then mapped ones the plan does not need soon.
        Removing a mapped file's name is safe (its mapping keeps the inode and every byte until unmapped, POSIX
        ``unlink``); its disk space returns when the mapping goes, so the limit may be passed by what processes
        still map (at most ``open_files`` files each) until then.  ``last_resort`` (a batch's range claims, which
        are needed now and must never fail for entries fetched ahead): a third pass over the protected range
        entries too, farthest next use first (a range entry is never mapped: it is read and verified when used,
        so one evicted is fetched again, never lost)."""
        size = incoming.size
        owned = self.entries()
        used = sum(owned.values()) + self._in_flight()
        limit = None if self.limit is None else self._admits(needed_now, owned)
        if limit is None or used + size <= limit:
            return used, 0
        keep = self.protected() if self.protected is not None else set()
        if self.next_use is None:
            order = [n for n in self._oldest_first(owned) if n not in keep]
            spared = [n for n in self._oldest_first(owned) if n in keep]
        else:
            if needed_now:
                needed_at = -1.0
            elif needed_at is None:
                needed_at = self.next_use(incoming.name)
            later = {n: self.next_use(n) for n in owned}
            order = sorted((n for n, at in later.items() if at > needed_at and n not in keep), key=lambda n: -later[n])
            spared = sorted((n for n in owned if n in keep), key=lambda n: -later[n])
        passes = [(order, False), (order, True)]
        if last_resort:
            passes.append(([n for n in spared if len(n.partition("-")[0]) == 32], False))
        for victims, mapped_too in passes:
            for name in victims:
                if used + size <= limit:
                    return used, 0
                if name in owned and self._evict(EntryKey.from_name(name), mapped_too):
                    used -= owned.pop(name)
        return used, sum(owned[n] for n in keep if n in owned)

    def _oldest_first(self, owned: dict[str, int]) -> list[str]:
        def completed(name: str) -> float:
            try:
                return os.path.getmtime(os.path.join(self.objects, name + _LEDGER))
            except FileNotFoundError:
                return 0.0
        return sorted(owned, key=completed)

    def _evict(self, key: EntryKey, mapped_too: bool = False) -> bool:
        """Delete an owned entry unless it is being fetched or verified (entry lock) or, unless ``mapped_too``,
        mapped (a shared lock on its data)."""
        entry_fd = _try_lock(self._path(key, _LOCK), fcntl.LOCK_EX)
        if entry_fd is None:
            return False
        try:
            data_fd = _try_lock(self._path(key, _DATA), fcntl.LOCK_EX)
            if data_fd is None and not mapped_too:
                return False
            try:
                os.unlink(self._path(key, _LEDGER))  # first: data without a ledger entry is never taken as complete
                os.unlink(self._path(key, _DATA))
            except FileNotFoundError:
                pass
            finally:
                if data_fd is not None:
                    os.close(data_fd)
            return True
        finally:
            os.close(entry_fd)

    def pin(self, key: EntryKey) -> tuple[str, int] | None:
        """``(path, fd)`` of a complete entry, ``fd`` holding a shared lock that keeps it from eviction until it is
        closed; None when the entry is not (or no longer) complete."""
        path = self.lookup(key)
        if path is None:
            return None
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits out an eviction in progress, which then removed the ledger entry
        if not self._has_ledger(key):
            os.close(fd)
            return None
        return path, fd

    def free_bytes(self) -> int | None:
        """Bytes the limit leaves beside complete entries and live fetches now (None: no limit); a hint only, as
        other processes admit and evict at any time."""
        if self.limit is None:
            return None
        return self.limit - sum(self.entries().values()) - self._in_flight()

    def usage(self) -> int:
        """Bytes of complete entries."""
        return sum(self.entries().values())


class Claim:
    """The entry lock of one entry this process fetches (:meth:`NodeCache.claim`); the lock goes with the process,
    so a killed fetcher leaves only a ``.part`` that the next fetcher of the entry removes."""

    def __init__(self, cache: NodeCache, key: EntryKey, source: str, fd: int):
        self.cache, self.key, self.source, self._fd = cache, key, source, fd
        #: Its ``.part``, once room is made for it (``NodeCache.reserve_claims``, or ``fill``).
        self.part: str | None = None

    def fill(self, data, wait: bool = True) -> str:
        """Make the entry of ``data`` (its verified bytes, ``key.size`` of them): room made under the limit (waiting
        for it as a fetch does; ``wait`` False: ``CacheFullError`` at once), written to a ``.part``, synced, renamed into place, then its ledger entry; the lock
        is released.  Returns the data path."""
        cache, key = self.cache, self.key
        part, self.part = self.part, None
        try:
            if part is None:
                part = cache._reserve(key, wait)
            with open(part, "r+b") as fp:
                fp.write(data)
                cache.fetched_bytes += key.size
            # not synced: a range entry's bytes are checked against their digests whenever they are read, so what
            # a crash of the machine leaves torn is fetched again, never used (a kill -9 loses nothing written)
            cache._complete(key, part, self.source, durable=False)
            part = None
        except OSError as err:
            raise cache.dir_error(err, f"fetch {self.source}", key) from None
        finally:
            if part is not None:
                try:
                    os.unlink(part)
                except FileNotFoundError:
                    pass
            self.release()
        return cache._path(key, _DATA)

    def release(self) -> None:
        """Let the entry go unfetched (an error on the way); another process may take it."""
        if self.part is not None:
            try:
                os.unlink(self.part)
            except FileNotFoundError:
                pass
            self.part = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


__all__ = ["CacheDirError", "CacheFullError", "CacheIntegrityError", "Claim", "EntryKey", "NodeCache", "hash_file"]
