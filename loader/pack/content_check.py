"""Checking the *content* of the stream files a reader maps, at no cost in the steady state (docs/format.md, "What
a reader verifies").

Why.  ``open_pack`` hashes the column files and checks every mapped stream file's size, row count and manifest
identity, but a same-size edit in place (bytes zeroed in ``mix.npy``) passes all of those.  Hashing every stream
file at every open would cost a full read of the pack per job; hashing it once per node and remembering the result
costs one read the first time and nothing after.

How.  The first time a process maps a stream file, the reader looks for a *record* of that file: its identity
(``ContentIdentity``: device, inode, size, mtime and ctime, from the ``fstat`` of the descriptor it was mapped from)
and the sha256 computed from those bytes.  A record with the same identity is trusted: its sha256 is compared with ``dataset.json`` at once and
nothing is read.  Without one, the file's mapped bytes are hashed on a background thread (``CheckingThread``: one per process, off the
batch path; the batch reads the mapping meanwhile), the record is written, and a sha256 other than
``dataset.json``'s stops every later read of that file with a ``PackFormatError`` naming it.  Records live in the
user's cache directory (``$XDG_CACHE_HOME/speechpack/verified/``, a directory per pack), never in the pack: a
reader writing into the pack it reads raced every command that replaces or removes that pack (a record landing
after ``build --overwrite`` retired the old manifest is a file no manifest lists, which the build must refuse to
delete).  Packs that earlier versions wrote records into keep their ``.verified/``
(``schemas.constants.VERIFIED_DIR``; the pack's manifest owns it, so ``copy`` and ``build --overwrite`` remove it
with the pack); those records are still read.  Each record file is ``flock``-ed while its file is hashed, so the
DataLoader workers of a node hash a file once between them: the others wait (in their background thread) and
read the record.  A file rewritten in place gets a new mtime and ctime, so its record no longer applies and it is
hashed again; mtime alone is not enough (``os.utime`` puts it back), ctime is (the kernel sets it on every change and
no call sets it back).  A record without a ctime (written by an earlier version) is not trusted: the file is hashed
again and the record rewritten.

Records are data anyone with write access to the cache directory can plant: each is opened without following a
symbolic link, read only when it is a regular file of at most ``MAX_RECORD_BYTES``, and anything else at its name
(a FIFO, a link to ``/dev/zero``, a huge file, a directory) is ignored, never trusted, and replaced by a new record
when the file is hashed.

Records of packs that are gone are pruned (``prune_records``): each pack's directory of records holds the pack's
real path (``PACK_FILE``), and at most once a day (``PRUNE_SECONDS``, a stamp in the records' root) a process that
writes a record removes the directories whose pack no longer has a ``dataset.json``, their records only (a file
there that a reader did not write is left, with its directory).  Directories without the path (written by an
earlier version) are kept.

Modes (``open_pack(verify=...)``, the loader config's ``verify_streams``): ``off``; ``first-map`` (the default:
as above); ``every-open`` (records are not trusted: each open hashes each file before its first read, and a
mismatch is an error before any of its bytes are used).  A pack read from an object store has no node record (its
bytes are in memory): ``first-map`` hashes them in the background, ``every-open`` before use.
"""

from __future__ import annotations

import contextlib
import errno
import stat as stat_mode
import fcntl
import hashlib
import json
import mmap
import os
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Callable, Hashable, Iterator

from speechpack.schemas.constants import MANIFEST_NAME, VERIFIED_DIR
from speechpack.schemas.errors import PackFormatError

VERIFY_OFF = "off"
VERIFY_FIRST_MAP = "first-map"
VERIFY_EVERY_OPEN = "every-open"
#: The values of ``open_pack(verify=...)`` and of the loader config's ``verify_streams``.
VERIFY_MODES = (VERIFY_OFF, VERIFY_FIRST_MAP, VERIFY_EVERY_OPEN)
DEFAULT_VERIFY = VERIFY_FIRST_MAP

#: Version of a record's JSON; a record of another version is ignored (the file is hashed again).
RECORD_VERSION = 1
#: Largest record read (a record is about 250 bytes): anything larger at a record's name is not a record.
MAX_RECORD_BYTES = 4096
#: The file in a pack's directory of records that names the pack (its real path), for ``prune_records``.
PACK_FILE = "pack"
#: Seconds between prunings of the records of packs that are gone (``prune_records``).
PRUNE_SECONDS = 86400.0
_PRUNE_STAMP = ".pruned"
#: Bytes hashed per step: large enough that hashlib releases the GIL for most of the work, small enough that the
#: read-ahead advice for the next step is a modest request.
_HASH_STEP = 8 << 20
#: Errors of a cache directory that cannot be written (read-only home, permissions): files are then hashed
#: without a record.
_CANNOT_WRITE = (errno.EACCES, errno.EPERM, errno.EROFS)


@dataclass(frozen=True)
class ContentIdentity:
    """What identifies one version of a file's content on this node, from one ``fstat``: a writer that replaces the
    file gives a new inode, one that rewrites it in place a new mtime and ctime.  ctime is what ``os.utime`` cannot
    set back (``schemas.manifest_file.FileIdentity``, a manifest's identity, leaves it out: a ``chmod`` or a hard
    link must not make a pack look replaced; for a content record it only costs one more hash)."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, stat: os.stat_result) -> "ContentIdentity":
        return cls(device=stat.st_dev, inode=stat.st_ino, size=stat.st_size, mtime_ns=stat.st_mtime_ns,
                   ctime_ns=stat.st_ctime_ns)

    def record(self, sha256: str) -> dict:
        """The record of these bytes (what ``record_sha256`` reads back)."""
        return {"version": RECORD_VERSION, "device": self.device, "inode": self.inode, "size": self.size,
                "mtime_ns": self.mtime_ns, "ctime_ns": self.ctime_ns, "sha256": sha256}


def read_small_file(path: str, limit: int = MAX_RECORD_BYTES) -> bytes | None:
    """The bytes of ``path`` when it is a regular file (not followed through a symbolic link) of at most ``limit``
    bytes; None for anything else (absent, a link, a FIFO, a device, a directory, larger).  Never blocks: a FIFO is
    opened without waiting for a writer and then refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat_mode.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        raw = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return raw if len(raw) <= limit else None


def _open_record(path: str) -> int | None:
    """A read-write descriptor of the regular record file ``path``, created if need be.  Whatever else is at that
    name (a symbolic link, a FIFO, a device: planted, never written by a reader) is removed first, so the record is
    rewritten rather than trusted or followed; None when that is impossible (a directory there)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _attempt in range(3):
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as err:
            if err.errno != errno.ELOOP:  # a symbolic link at the name: removed below
                raise
            fd = None
        if fd is not None:
            if stat_mode.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
        try:
            os.unlink(path)
        except IsADirectoryError:
            return None
        except FileNotFoundError:
            pass
    return None


def check_verify_mode(mode: object, where: str = "verify") -> str:
    """``mode`` when it is one of ``VERIFY_MODES``, else a ``ValueError`` naming them."""
    if mode not in VERIFY_MODES:
        raise ValueError(f"{where}: expected one of {', '.join(VERIFY_MODES)}, got {mode!r}")
    return mode  # type: ignore[return-value]


def cache_root() -> str:
    """Where records go: ``$XDG_CACHE_HOME/speechpack/verified`` (``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "speechpack", "verified")


def hash_buffer(buffer) -> str:
    """sha256 of a whole file's bytes (a read-only ``mmap`` or ``bytes``), read in steps; a mapping is asked to
    read each next step ahead, so hashing a cold file is one sequential read."""
    digest = hashlib.sha256()
    view = memoryview(buffer)
    try:
        size = len(view)
        for start in range(0, size, _HASH_STEP):
            if isinstance(buffer, mmap.mmap) and start + _HASH_STEP < size:
                ahead = start + _HASH_STEP
                buffer.madvise(mmap.MADV_WILLNEED, ahead, min(_HASH_STEP, size - ahead))
            digest.update(view[start:start + _HASH_STEP])
    finally:
        view.release()
    return digest.hexdigest()


class RecordPlace:
    """Where the records of one local pack live: the cache directory (a directory per pack, named by the hash of
    the pack's real path), the only place they are written; ``PACK/.verified/``, where earlier versions wrote them,
    is still read."""

    def __init__(self, pack_root: str):
        self.pack_root = pack_root
        real = os.path.realpath(pack_root)
        name = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        self.directory = os.path.join(cache_root(), name)
        self.read_dirs = (self.directory, os.path.join(pack_root, VERIFIED_DIR))

    @staticmethod
    def record_name(rel: str) -> str:
        """``shard-000003/mix.npy`` -> ``shard-000003.mix.npy.json`` (one flat directory of records)."""
        return rel.replace("/", ".") + ".json"

    def lookup(self, rel: str, identity: ContentIdentity) -> str | None:
        """The sha256 a record holds for this version of file ``rel``; None without a usable record.  Read without
        a lock: a record being rewritten reads as damaged, and the background check then takes the lock."""
        for directory in self.read_dirs:
            raw = read_small_file(os.path.join(directory, self.record_name(rel)))
            found = None if raw is None else record_sha256(raw, identity)
            if found is not None:
                return found
        return None

    @contextlib.contextmanager
    def held(self, rel: str) -> Iterator["_HeldRecord | None"]:
        """The record file of ``rel``, created if need be and ``flock``-ed exclusively (waiting for another process
        hashing the same file); None where the cache directory cannot be written (the file is then hashed without
        a record)."""
        fd = None
        try:
            os.makedirs(self.directory, exist_ok=True)
            self._name_the_pack()
            fd = _open_record(os.path.join(self.directory, self.record_name(rel)))
        except OSError as err:
            if err.errno not in _CANNOT_WRITE and not isinstance(err, (FileExistsError, NotADirectoryError,
                                                                       IsADirectoryError)):
                raise
        if fd is None:
            yield None
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield _HeldRecord(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)  # explicit: a forked child may still hold a copy of the descriptor
            os.close(fd)


    def _name_the_pack(self) -> None:
        """Write ``PACK_FILE`` (the pack's real path) once, and prune the records of packs that are gone now and
        then (``prune_records``)."""
        named = os.path.join(self.directory, PACK_FILE)
        if read_small_file(named, MAX_RECORD_BYTES) is None:
            real = os.path.realpath(self.pack_root).encode("utf-8", "surrogateescape")
            tmp = f"{named}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, real)
            finally:
                os.close(fd)
            os.replace(tmp, named)
        prune_records(os.path.dirname(self.directory))


def prune_records(root: str, every: float = PRUNE_SECONDS, now: float | None = None) -> list[str]:
    """Remove the records of packs that are gone from the records' directory ``root`` (module docstring), when the
    last pruning is ``every`` seconds old or more; the directories removed."""
    now = time.time() if now is None else now
    stamp = os.path.join(root, _PRUNE_STAMP)
    try:
        if now - os.lstat(stamp).st_mtime < every:
            return []
    except FileNotFoundError:
        pass
    except OSError:
        return []
    try:
        os.close(os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644))
        os.utime(stamp, (now, now), follow_symlinks=False)
        names = os.listdir(root)
    except OSError:
        return []  # a stamp that is not ours (a link, a FIFO): no pruning rather than touching what it names
    removed = []
    for name in names:
        directory = os.path.join(root, name)
        try:
            if not stat_mode.S_ISDIR(os.lstat(directory).st_mode):
                continue
        except OSError:
            continue
        raw = read_small_file(os.path.join(directory, PACK_FILE), MAX_RECORD_BYTES)
        if raw is None or not raw:
            continue  # an earlier version's directory, or not ours: kept
        pack = raw.decode("utf-8", "surrogateescape")
        if os.path.isfile(os.path.join(pack, MANIFEST_NAME)):
            continue
        if _remove_records(directory):
            removed.append(directory)
    return removed


def _remove_records(directory: str) -> bool:
    """Remove the records (``*.json``) and ``PACK_FILE`` of ``directory``, then the directory if nothing else is
    there; True when it is gone."""
    try:  # opened once, never through a link: a directory swapped for one after the caller's check is not entered
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        names = os.listdir(fd)
        for name in names:
            if not (name.endswith(".json") or name == PACK_FILE):
                continue
            try:
                os.unlink(name, dir_fd=fd)  # a record, or whatever was planted at its name: never followed
            except OSError:
                pass
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        os.rmdir(directory)
    except OSError:
        return False
    return True


class _HeldRecord:
    """A record file held under its lock: read it, or replace its content."""

    def __init__(self, fd: int):
        self.fd = fd

    def sha256(self, identity: ContentIdentity) -> str | None:
        raw = os.pread(self.fd, MAX_RECORD_BYTES + 1, 0)
        return None if len(raw) > MAX_RECORD_BYTES else record_sha256(raw, identity)

    def write(self, identity: ContentIdentity, sha256: str) -> None:
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, json.dumps(identity.record(sha256), sort_keys=True).encode("ascii"), 0)


_IDENTITY_KEYS = ("device", "inode", "size", "mtime_ns", "ctime_ns")


def record_sha256(raw: bytes, identity: ContentIdentity) -> str | None:
    """The sha256 a record's bytes hold for the file of ``identity``; None when they are not a record of that very
    file (damaged, another version, or without a ctime: written by an earlier version, so not trusted)."""
    try:
        record = json.loads(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        return None
    if [record.get(k) for k in _IDENTITY_KEYS] != [getattr(identity, k) for k in _IDENTITY_KEYS]:
        return None
    sha256 = record.get("sha256")
    return sha256 if isinstance(sha256, str) and len(sha256) == 64 else None


@dataclass
class StreamCheck:
    """The check of one mapped stream file in one process: ``done`` once its sha256 is known; ``failure`` the
    message when that sha256 is not ``dataset.json``'s.  Written by the background thread, read by the batch path
    (single attribute reads and writes: no lock needed)."""

    where: str
    rel: str
    expected: str
    source: object  # the file's whole bytes: the mmap (kept alive while hashing) or bytes read from a store
    identity: ContentIdentity | None
    records: RecordPlace | None
    pid: int
    done: bool = False
    failure: str | None = None

    def conclude(self, sha256: str) -> None:
        if sha256 != self.expected:
            self.failure = (f"{self.where}: sha256 {sha256} does not match {MANIFEST_NAME} ({self.expected}): the "
                            f"file's bytes changed after the pack was written (same size; edited in place?); "
                            f"stopped reading it; validate the pack")
        self.done = True

    def run(self, trust_record: bool) -> None:
        """Hash the file (unless a record, taken under its lock, already says), write the record, conclude."""
        try:
            if self.records is None or self.identity is None:
                self.conclude(hash_buffer(self.source))
                return
            with self.records.held(self.rel) as held:
                known = held.sha256(self.identity) if (held is not None and trust_record) else None
                sha256 = known if known is not None else hash_buffer(self.source)
                if held is not None and known is None:
                    held.write(self.identity, sha256)
            self.conclude(sha256)
        except Exception as err:  # noqa: BLE001 - the check must never take a worker down; say why it stopped
            self.failure = f"{self.where}: cannot check its sha256 ({err})"
            self.done = True
        finally:
            self.source = None  # let the mapping go once hashed


class CheckingThread:
    """The thread that runs this process's ``StreamCheck`` s, in order, off the batch path (a daemon: a process
    exiting does not wait for it).  ``StreamChecks`` submits to the one it is given, by default
    :data:`CHECKING_THREAD`.

    Why one per process rather than one per loader: checks come from every ``Pack`` a process maps (the loader's,
    a task's banks and tokenizer packs, ``validate``), and a ``Pack`` travels by pickle to DataLoader workers, where
    its checks must run in the worker.  One thread per process keeps hashing to one core per process however many
    packs and loaders it holds, and the records' ``flock`` already makes one process's hash serve the node; an owner
    per loader would have to be threaded through every path that opens a pack and would only add threads.  So a
    ``CheckingThread`` pickles as the receiving process's :data:`CHECKING_THREAD` (a thread does not cross).

    Lifetime: the thread starts with the first check submitted in a process and runs until the process exits.  In a
    child made by ``fork`` the parent's thread does not exist: :meth:`after_fork` (each instance registers it with
    ``os.register_at_fork``) empties the queue and the next check starts a new thread; checks the parent had
    queued are started again by ``StreamChecks.settle`` in the child."""

    def __init__(self):
        self._lock = threading.Lock()  # guards starting the thread
        self._queue: deque[Callable[[], None]] = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        forget = weakref.WeakMethod(self.after_fork)  # the hook must not keep a discarded instance alive
        os.register_at_fork(after_in_child=lambda: (method := forget()) is not None and method())

    def __reduce__(self):
        return _this_process_thread, ()

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task`` on this thread (started now if it has not run in this process yet)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="speechpack-stream-check", daemon=True)
                self._thread.start()
        with self._ready:
            self._queue.append(task)
            self._ready.notify()

    def after_fork(self) -> None:
        """In a forked child: forget the parent's thread, queue and locks (the next ``submit`` starts anew)."""
        self._lock = threading.Lock()
        self._queue = deque()
        self._ready = threading.Condition()
        self._thread = None

    def _loop(self) -> None:
        queue, ready = self._queue, self._ready  # this thread's own, even after a fork replaced the attributes
        while True:
            with ready:
                while not queue:
                    ready.wait()
                task = queue.popleft()
            task()


#: This process's checking thread (see ``CheckingThread`` for why there is one per process, and its lifetime).
CHECKING_THREAD = CheckingThread()


def _this_process_thread() -> CheckingThread:
    return CHECKING_THREAD


class StreamChecks:
    """The content checks of one ``Pack`` in one process (``Pack.checks``): started when a stream file is mapped,
    consulted while ``unsettled`` is not empty (once every mapped file is known good, the batch path checks one
    empty set)."""

    def __init__(self, mode: str, records: RecordPlace | None, thread: CheckingThread | None = None):
        self.mode = check_verify_mode(mode)
        self.records = records
        #: Where background checks run (``CheckingThread``; this process's by default).
        self.thread = CHECKING_THREAD if thread is None else thread
        self._checks: dict[Hashable, StreamCheck] = {}
        #: Keys of mapped files not yet known good (their check runs, or failed).
        self.unsettled: set[Hashable] = set()

    def __getstate__(self) -> dict:
        """Pickled (a Pack sent to a spawned worker): the mode and where records are, no check in flight."""
        return {"mode": self.mode, "records": self.records, "thread": self.thread, "_checks": {}, "unsettled": set()}

    def mapped(self, key: Hashable, rel: str, where: str, expected: str, source,
               identity: ContentIdentity | None) -> None:
        """File ``rel`` was just mapped (``source``: its whole bytes; ``identity``: of the mapped descriptor)."""
        if self.mode == VERIFY_OFF:
            return
        previous = self._checks.get(key)
        if previous is not None and previous.identity == identity and (identity is not None or previous.done):
            self.settle(key)  # mapped again after the LRU let it go: the same file, checked (or being checked)
            return
        check = StreamCheck(where=where, rel=rel, expected=expected, source=source, identity=identity,
                            records=self.records, pid=os.getpid())
        if self.mode == VERIFY_EVERY_OPEN:
            check.run(trust_record=False)  # before the first read: nothing unchecked is used
        elif self.records is not None and identity is not None:
            known = self.records.lookup(rel, identity)
            if known is not None:
                check.source = None
                check.conclude(known)
        self._checks[key] = check
        if not check.done:
            self.unsettled.add(key)
            self.thread.submit(lambda: check.run(trust_record=True))
        elif check.failure is not None:
            self.unsettled.add(key)
        self.settle(key)

    def settle(self, key: Hashable) -> None:
        """Raise ``PackFormatError`` if the check of ``key`` failed; forget it once it passed.  A check started in
        a parent process before a fork is started again here (its thread stayed behind)."""
        check = self._checks.get(key)
        if check is None:
            self.unsettled.discard(key)
            return
        if check.failure is not None:
            raise PackFormatError(check.failure)
        if check.done:
            self.unsettled.discard(key)
        elif check.pid != os.getpid():
            check.pid = os.getpid()
            self.thread.submit(lambda: check.run(trust_record=True))

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every check started so far is done (tests, benchmarks); True when they all are."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while any(not c.done for c in self._checks.values()):
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        self.unsettled.difference_update([k for k in self.unsettled if self._checks[k].failure is None])
        return True


__all__ = ["CHECKING_THREAD", "DEFAULT_VERIFY", "MAX_RECORD_BYTES", "RECORD_VERSION", "ContentIdentity", "VERIFY_EVERY_OPEN", "VERIFY_FIRST_MAP", "VERIFY_MODES", "VERIFY_OFF",
           "CheckingThread", "RecordPlace", "StreamCheck", "StreamChecks", "cache_root", "check_verify_mode", "hash_buffer", "prune_records", "read_small_file",
           "record_sha256"]
