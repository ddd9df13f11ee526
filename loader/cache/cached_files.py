"""A pack on object storage read through the node cache: :class:`CachedPackFiles`, the ``PackFiles`` a URL pack
gets in training (``build_loader``, the DataModules, torchdata, ``speechpack plan``/``peek``), and its core, the
verified fetch of one file into the cache (``fetch_verified``).

``dataset.json`` is read from the store when the pack is opened (a few kilobytes: it says which version of the pack
this is); every file it lists (columns and stream files) is a node cache entry keyed by its sha256
(``loader.cache.node_cache``), fetched once per node and verified.  Columns are then read from the cache's copy,
stream files mapped from it exactly as a local pack's are (``loader.pack.files.map_stream``), each mapping holding
its entry against eviction for as long as it lives.  The column files are fetched together as the manifest is read
(``cache.fetches`` at once): at a million samples they are most of the bytes before the first batch, and one
request after another would pay the store's latency once per file.  Each is hashed as its bytes arrive, and the
bytes whose hash matched are handed to the reader as they are (``_fetch_column``), not read back from the copy just
written; a column the node already holds is read from that copy, checked as below.  A column with a deflated copy
(format 1.5, ``schemas.deflated_columns``) is fetched as that copy and inflated as it arrives (``fetch_inflated``):
the inflated bytes are checked against the column's sha256 and become its entry, a fifth to three fifths of the
bytes fetched (25 MB for the bench's 122 MB of a million samples' columns).  The pack's version is fixed at open:
the manifest's identity is its hash, and every file is read by its hash, so a pack published again on the store
under a running job is never mixed with the one opened (a changed file fails its hash and is named).

**Packs with digests** (format 1.4 and later) are read by segments instead (``loader.cache.ranges``,
``range_reads``): their audio stream files are never fetched whole and are not in the plan's file schedule
(``key``); the rest of this docstring is about whole files (columns, ``digests.npy``, data streams, and every
file of an older pack).
**Reading through** (``cache.limit: 0``): every file is fetched into memory and verified there, as a fetch into
the cache is, and nothing is written to the node's disk.

**Why whole files are verified, not blocks** (a pack without digests).  ``dataset.json`` records one sha256 per file, and that is the only
hash a reader can trust: a per-block hash computed when a block is first fetched would only confirm the bytes the
store sent that time, corrupt or not.  So a stream file is fetched in large aligned ranges (``BLOCK_BYTES``; one
request when it is smaller), hashed while the ranges arrive in order, and it becomes a cache entry only when the
whole file's hash is the manifest's: a file is the cache's unit of fetch, verification and eviction (a pack's
shards keep files to a size a node's cache holds many of: ``build --shard-bytes``).  A mismatch is fetched once
more (a corrupted transfer), then it is an error naming the object and both hashes.

**Checking the cache's copies** (``verify_streams``, as for a local pack: docs/loader.md).  The cache's files lie
on a node's disk, where anything may change them after their fetch (a user, a tool, a failing disk), so a copy's
bytes are checked again when they are read, at no cost in the steady state: the ledger entry records the identity
of the data file its fetcher verified (``node_cache``: device, inode, size, mtime, ctime), and a copy whose
``fstat`` still shows that identity is the verified file; one that does not (edited in place, even with its mtime
put back) is hashed before any of its bytes are used.  ``every-open`` hashes each copy at each open (except those
this process fetched itself); ``off`` checks only the size and the ledger.  Column files are checked this way in
every mode (a local pack's columns are hashed at every open).  A copy whose bytes are not its key's is removed from
the cache with a warning naming it, and fetched again (the fetch verifies what the store sends); a copy that is
wrong again after that is an error naming it (``CacheIntegrityError``).

**Retries** (``with_retries``).  Throttling (``SlowDown``, 503), timeouts and dropped connections are transient on
any object store, so one failed request must not stop a training run; a failure that outlasts the budget stops it,
naming the object and the store's reason (``ObjectStoreError``), and never skips a sample.  Backoff is exponential
with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015): ranks that failed together do not
retry together.  Failures that waiting cannot fix (an absent object, refused credentials, an absent bucket) are
raised at once.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import threading
import time
import warnings
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, Callable, Iterable, Iterator, TypeVar

from speechpack.loader.cache.node_cache import CacheIntegrityError, EntryKey, NodeCache
from speechpack.loader.cache.settings import CacheSettings
from speechpack.loader.pack.content_check import (DEFAULT_VERIFY, VERIFY_EVERY_OPEN, VERIFY_OFF, ContentIdentity,
                                                  check_verify_mode, hash_buffer)
from speechpack.loader.cache.ranges import RangeReads
from speechpack.loader.pack.files import MappedStream, PackFiles, is_remote, map_stream, stream_from_bytes
from speechpack.loader.pack.object_store import ObjectStoreError, ObjectStorePackFiles
from speechpack.loader.pack.reader import Pack, open_pack
from speechpack.schemas.constants import COLUMNS_DIR, MANIFEST_NAME
from speechpack.schemas.deflated_columns import Inflater, deflated_name
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import FileEntry
from speechpack.schemas.manifest_file import ManifestFile, manifest_from

T = TypeVar("T")

#: First wait and longest single wait between attempts (seconds).
FIRST_DELAY = 0.1
MAX_DELAY = 5.0
#: Reasons that no wait can fix (botocore's error codes and messages): raised at the first attempt.
PERMANENT = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket", "Forbidden",
             "NoCredentials", "Unable to locate credentials", "InvalidBucketName")


def is_permanent(err: BaseException) -> bool:
    """Whether waiting cannot fix ``err``: an absent object, or a reason in ``PERMANENT``."""
    if isinstance(err, FileNotFoundError):
        return True
    reason = str(getattr(err, "strerror", "") or err)
    return any(word in reason for word in PERMANENT)


def with_retries(request: Callable[[], T], budget_seconds: float, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> T:
    """``request()``, retried on ``ObjectStoreError`` (and ``OSError``) until it succeeds or ``budget_seconds``
    have passed since the first attempt; then its last error is raised as it was (it names the object)."""
    start = clock()
    deadline = start + budget_seconds
    delay = FIRST_DELAY
    attempts = 0
    while True:
        attempts += 1
        try:
            return request()
        except (ObjectStoreError, OSError) as err:
            if is_permanent(err):
                raise
            left = deadline - clock()
            if left <= 0:
                if isinstance(err, ObjectStoreError):
                    raise ObjectStoreError(err.filename, err.action, f"{err.strerror}; gave up after {attempts} "
                                           f"attempt{'s' if attempts > 1 else ''} in {clock() - start:.1f} "
                                           f"s") from None
                raise
            sleep(min(left, random.uniform(0, delay)))
            delay = min(MAX_DELAY, delay * 2)


#: Bytes per range request: large enough that a store's per-request latency is small beside the transfer
#: (object stores serve 8-16 MB ranges at full bandwidth), aligned so that ranges never straddle a block.
BLOCK_BYTES = 16 << 20
#: Fetches of a file whose hash does not match before it is an error (the first plus one more).
FETCH_ATTEMPTS = 2


def _blocks(store: ObjectStorePackFiles, rel: str, size: int, retry_seconds: float) -> Iterator[bytes]:
    """File ``rel``'s bytes from its start, in range requests of ``BLOCK_BYTES`` (one request when smaller)."""
    if size <= BLOCK_BYTES:
        yield with_retries(lambda: store.read_bytes(rel), retry_seconds)
        return
    for start in range(0, size, BLOCK_BYTES):
        stop = min(start + BLOCK_BYTES, size)
        block = with_retries(lambda: store.read_range(rel, start, stop), retry_seconds)
        if len(block) != stop - start:
            raise CacheIntegrityError(f"{store.where(rel)}: the store returned {len(block)} bytes for range "
                                      f"[{start}, {stop}) of a {size}-byte file (the object changed; open the pack "
                                      f"again)")
        yield block


def _fetch_once(store: ObjectStorePackFiles, rel: str, size: int, fp: BinaryIO, retry_seconds: float) -> str:
    """Write file ``rel`` to ``fp`` from its start; returns the sha256 of what was written."""
    digest = hashlib.sha256()
    fp.seek(0)
    fp.truncate()
    for block in _blocks(store, rel, size, retry_seconds):
        digest.update(block)
        fp.write(block)
    return digest.hexdigest()


def fetch_verified(store: ObjectStorePackFiles, rel: str, size: int, sha256: str, fp: BinaryIO,
                   retry_seconds: float) -> None:
    """Write file ``rel`` of ``store`` to ``fp``, its whole-file sha256 checked against ``sha256`` (see the module
    docstring); raises ``ObjectStoreError`` when the store keeps failing and ``CacheIntegrityError`` when the bytes
    never match."""
    got = None
    for _attempt in range(FETCH_ATTEMPTS):
        got = _fetch_once(store, rel, size, fp, retry_seconds)
        if got == sha256 and fp.tell() == size:
            return
    raise CacheIntegrityError(f"{store.where(rel)}: sha256 {got} does not match dataset.json ({sha256}) after "
                              f"{FETCH_ATTEMPTS} fetches: the object is corrupt on the store, or the pack was "
                              f"replaced since it was opened (validate it: speechpack validate {store.location})")


def fetch_inflated(store: ObjectStorePackFiles, rel: str, copy: FileEntry, size: int, sha256: str, fp: BinaryIO,
                   retry_seconds: float) -> None:
    """Write the column whose deflated copy (format 1.5) is file ``rel`` (``copy``: its entry) to ``fp``, inflated
    as its blocks arrive (``schemas.deflated_columns.Inflater``: never beyond the column's ``size``), the inflated
    bytes checked against the column's ``sha256``: what ``fetch_verified`` of the column writes, a fifth to three fifths
    of its bytes fetched.  Raises as ``fetch_verified`` does."""
    for _attempt in range(FETCH_ATTEMPTS):
        fp.seek(0)
        fp.truncate()
        inflater = Inflater(size, sha256)
        fetched = 0
        for block in _blocks(store, rel, copy.size, retry_seconds):
            fetched += len(block)
            fp.write(inflater.feed(block))
        if inflater.finish() and fetched == copy.size and fp.tell() == size:
            return
    raise CacheIntegrityError(f"{store.where(rel)}: does not inflate to the column it copies ({size} bytes, sha256 "
                              f"{sha256}) after {FETCH_ATTEMPTS} fetches: the object is corrupt on the store, or the "
                              f"pack was replaced since it was opened (validate it: speechpack validate "
                              f"{store.location})")


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def fetch_pool(workers: int) -> ThreadPoolExecutor:
    """This process's pool of ``workers`` fetch threads (``cache.fetches``), shared by every pack it opens.

    Why threads: a fetch waits on the store (latency, then the transfer) and hashes with the GIL released, so a
    few threads keep several requests in flight; each fetch still takes its entry's lock and reserves its size
    under the cache's space lock (``loader.cache.node_cache``), so one fetch per file per node and the limit hold
    as for one at a time.  Keyed by process id: a forked DataLoader worker inherits no live thread, and makes its
    own pool."""
    key = (os.getpid(), workers)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="speechpack-fetch")
        return pool


def run_all(pool: ThreadPoolExecutor, calls: Iterable[Callable[[], T]]) -> list[T]:
    """Every call of ``calls`` run on ``pool`` at once; their results in order once all have finished.  The first
    error (in order) is raised after every call has ended, so no fetch is left running behind an error.  Never
    called from a thread of ``pool`` itself (it would wait on its own queue)."""
    futures = [pool.submit(call) for call in calls]
    error: BaseException | None = None
    results = []
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as err:  # noqa: BLE001 - re-raised below, after the other fetches ended
            results.append(None)
            error = error or err
    if error is not None:
        raise error
    return results


class _StoreFailed(Exception):
    """Carries a store's ``ObjectStoreError`` through ``manifest_from`` (which words local read errors) unchanged."""

    def __init__(self, error: ObjectStoreError):
        super().__init__(str(error))
        self.error = error


class _Kept:
    """The file a fetch writes (``fetch_verified``: ``seek(0)``, ``truncate``, ``write``, ``tell``), whose bytes
    are also kept in memory as they are written (a fetch started again from byte 0 starts them again)."""

    def __init__(self, fp: BinaryIO):
        self.fp = fp
        self.blocks: list[bytes] = []

    def seek(self, offset: int) -> int:
        if offset != 0:
            raise ValueError("a fetch is kept from byte 0 only")
        self.blocks = []
        return self.fp.seek(0)

    def truncate(self) -> int:
        return self.fp.truncate()

    def write(self, data: bytes) -> int:
        self.blocks.append(data)
        return self.fp.write(data)

    def tell(self) -> int:
        return self.fp.tell()

    def value(self) -> bytes:
        return self.blocks[0] if len(self.blocks) == 1 else b"".join(self.blocks)


class CachedPackFiles(PackFiles):
    """The files of the pack at ``store`` (an ``ObjectStorePackFiles``), served from the node cache ``settings``
    describe.  ``max_open_streams`` bounds the mappings a ``Pack`` keeps (each pins its entry).  ``verify`` is how
    the cache's copies of stream files are checked when mapped (``verify_streams``; module docstring)."""

    #: Every listed file is read from the cache's copy, verified against its sha256 when it was fetched and checked
    #: again here when read or mapped (module docstring): the reader does not hash it a second time.
    hashes_checked = True

    def __init__(self, store: ObjectStorePackFiles, settings: CacheSettings, verify: str = DEFAULT_VERIFY):
        self.store = store
        self.location = store.location
        self.settings = settings
        self.verify = check_verify_mode(verify)
        self.node_cache = NodeCache(settings.dir, settings.limit)
        self.max_open_streams = settings.open_files
        #: ``cache.limit: 0``: nothing is written to the node's disk; every file and segment is fetched into memory
        #: and verified there (module docstring, "Reading through").
        self.read_through = settings.limit == 0
        self.entries: dict[str, FileEntry] = {}
        #: Stream files read by ranges (a pack with digests: ``loader.cache.ranges``), set by ``read_manifest``.
        self.range_reads: RangeReads | None = None
        self._range_files: frozenset[str] = frozenset()
        self.manifest_sha256: str | None = None
        #: Copies this open has checked (entry name -> identity of the file then): a mapping the LRU let go and
        #: made again is not hashed again while the file is the same.
        self._checked: dict[str, ContentIdentity] = {}
        #: Column files this open fetched (name -> their bytes, verified against their sha256 as they arrived):
        #: handed to the reader once (``read_bytes``) instead of read back from the copy just written.
        self._arrived: dict[str, bytes] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_arrived": {}}  # a worker gets the opened Pack's arrays, not the bytes again

    def where(self, rel: str) -> str:
        return self.store.where(rel)

    def _retried(self, request):
        return with_retries(request, self.settings.retry_seconds)

    def read_manifest(self) -> ManifestFile:
        """``dataset.json`` from the store (retried) through the one manifest reader (``manifest_from``: an absent
        one is "not a pack", worded as for every other source); fixes the version every other file is read at.  A
        store that keeps failing stays an ``ObjectStoreError``."""

        def identity_and_bytes() -> tuple[str, bytes]:
            try:
                raw = self._retried(lambda: self.store.read_bytes(MANIFEST_NAME))
            except ObjectStoreError as err:
                raise _StoreFailed(err) from None
            return hashlib.sha256(raw).hexdigest(), raw

        try:
            manifest_file = manifest_from(identity_and_bytes, self.location, self.where(MANIFEST_NAME))
        except _StoreFailed as failed:
            raise failed.error from None
        manifest = manifest_file.manifest
        self.entries = manifest.file_entries()
        self.manifest_sha256 = manifest_file.identity
        if manifest.digests is not None:
            self.range_reads = RangeReads(self)
            self._range_files = frozenset(f"{shard.directory}/{spec.file}" for shard in manifest.shards
                                          for spec in manifest.streams if self.range_reads.reads(spec.name))
        if not self.read_through:
            self.fetch_all([lambda rel=f"{COLUMNS_DIR}/{name}": self._fetch_column(rel) for name in manifest.columns])
        return manifest_file

    def _fetch_column(self, rel: str) -> None:
        """Column file ``rel`` in the cache, its verified bytes kept for the reader when this call fetched them (a
        copy the node already had is read from the cache as any other file)."""
        key = self._file_key(rel)
        kept: list[_Kept] = []

        def fetch(fp: BinaryIO) -> None:
            kept[:] = [_Kept(fp)]
            self._fetch_file(rel, key, kept[0])

        self.node_cache.ensure(key, fetch, self.where(rel))
        if kept:  # fetch_verified returned: the kept bytes are the ones whose sha256 matched
            self._arrived[rel] = kept[0].value()

    def retried(self, request):
        """``request()`` retried as every store request of this pack is (``cache.retry_seconds``)."""
        return self._retried(request)

    def key(self, rel: str) -> EntryKey | None:
        """The cache entry of file ``rel`` that the plan schedules (``loader.cache.schedule``): None for a file the
        manifest does not list, and for one never fetched whole (a stream file read by ranges, any file when
        reading through)."""
        if self.read_through or rel in self._range_files:
            return None
        return self._file_key(rel)

    def _file_key(self, rel: str) -> EntryKey | None:
        """The cache key of listed file ``rel`` (its sha256 and size; None for a file the manifest does not list)."""
        entry = self.entries.get(self.check_name(rel))
        return None if entry is None else EntryKey(entry.sha256, entry.size)

    def local_path(self, rel: str, wait: bool = True) -> str | None:
        """The cache's copy of ``rel``, fetched first if the node has none; None for an unlisted file.  ``wait``
        False: ``CacheFullError`` at once when it does not fit now."""
        key = self._file_key(rel)
        if key is None:
            return None
        return self.node_cache.ensure(key, lambda fp: self._fetch_file(rel, key, fp), self.where(rel), wait)

    def fetch_many(self, rels: list[str], wait: bool = True) -> list[str | None]:
        """``local_path`` of every file of ``rels``, up to ``cache.fetches`` fetched at once (``fetch_pool``);
        the first error is raised once every fetch has ended.  Not for a thread of the fetch pool itself."""
        if len(rels) <= 1 or self.settings.fetches <= 1:
            return [self.local_path(rel, wait) for rel in rels]
        pool = fetch_pool(self.settings.fetches)
        return run_all(pool, [lambda rel=rel: self.local_path(rel, wait) for rel in rels])

    def prefetch(self, rels: list[str]) -> None:
        """The listed files of ``rels`` fetched together (``fetch_many``): the cue banks' index files at open."""
        self.fetch_many([rel for rel in rels if self.key(rel) is not None])

    def fetch_all(self, calls: list[Callable[[], T]]) -> list[T]:
        """Every call of ``calls`` (fetches), up to ``cache.fetches`` at once (``run_all``)."""
        if len(calls) <= 1 or self.settings.fetches <= 1:
            return [call() for call in calls]
        return run_all(fetch_pool(self.settings.fetches), calls)

    def listing(self) -> dict[str, int]:
        return self._retried(self.store.listing)

    def _holds_its_bytes(self, key: EntryKey, identity: ContentIdentity, digest: Callable[[], str], rel: str,
                         mode: str) -> bool:
        """Whether the cache's copy of ``key`` (``identity``: ``fstat`` of the descriptor read) holds the bytes its
        key names (module docstring): known from this open, this process's own fetch or (unless ``every-open``)
        the ledger's record; else ``digest()`` says, and a match is recorded."""
        if self._checked.get(key.name) == identity or self.node_cache.written.get(key.name) == identity:
            return True
        if mode != VERIFY_EVERY_OPEN and self.node_cache.verified_as(key, identity):
            self._checked[key.name] = identity
            return True
        if digest() != key.sha256:
            return False
        self.node_cache.record_verified(key, identity, self.where(rel))
        self._checked[key.name] = identity
        return True

    def _changed_copy(self, key: EntryKey, path: str, rel: str, attempt: int) -> None:
        """The copy at ``path`` no longer holds ``key``'s bytes: removed from the cache (fetched again next), with
        a warning; the second time, an error."""
        self.node_cache.discard(key)
        self._checked.pop(key.name, None)
        what = (f"{path} (the node cache's copy of {self.where(rel)}): its bytes changed on disk after it was fetched "
                f"(sha256 is not {key.sha256}, {MANIFEST_NAME}'s)")
        if attempt + 1 >= FETCH_ATTEMPTS:
            raise CacheIntegrityError(f"{what}, again after it was fetched once more: something under cache.dir "
                                      f"({self.node_cache.root}) keeps changing the cache's files (a failing disk, a "
                                      f"tool writing there); remove it from the cache directory and run again")
        warnings.warn(f"{what}; removed it from the cache and fetching it again", stacklevel=3)

    def _read_checked(self, rel: str, read: Callable[[BinaryIO], bytes]) -> bytes | None:
        """``read(fp)`` of the cache's copy of listed file ``rel``, once the copy is checked (module docstring;
        columns and whole reads are checked in every mode, by record or by hash); None for an unlisted file."""
        key = self._file_key(rel)
        if key is None:
            return None
        if self.read_through:
            return read(io.BytesIO(self._fetch_to_memory(rel, key)))
        mode = VERIFY_EVERY_OPEN if self.verify == VERIFY_EVERY_OPEN else DEFAULT_VERIFY
        for attempt in range(FETCH_ATTEMPTS):
            path = self.local_path(rel)
            try:
                fp = open(path, "rb")
            except FileNotFoundError:  # evicted between the fetch and the open: fetch again
                continue
            with fp:
                identity = ContentIdentity.of(os.fstat(fp.fileno()))
                if self._holds_its_bytes(key, identity, lambda: _hash_open_file(fp), rel, mode):
                    fp.seek(0)
                    return read(fp)
            self._changed_copy(key, path, rel, attempt)
        raise CacheIntegrityError(f"{self.where(rel)}: the node cache's copy was removed while it was being read, "
                                  f"twice; is another process deleting files under {self.node_cache.root}?")

    def read_bytes(self, rel: str) -> bytes:
        arrived = self._arrived.pop(rel, None)
        if arrived is not None:  # verified as it arrived, in this process (``_fetch_column``)
            return arrived
        data = self._read_checked(rel, lambda fp: fp.read())
        if data is None:
            return self._retried(lambda: self.store.read_bytes(rel))
        return data

    def read_range(self, rel: str, start: int, stop: int) -> bytes:
        def ranged(fp: BinaryIO) -> bytes:
            fp.seek(start)
            return fp.read(max(stop - start, 0))

        data = self._read_checked(rel, ranged)
        if data is None:
            return self._retried(lambda: self.store.read_range(rel, start, stop))
        return data

    def _fetch_to_memory(self, rel: str, key: EntryKey) -> bytes:
        """File ``rel`` fetched whole into memory, verified as a cache fetch is (reading through)."""
        buffer = io.BytesIO()
        self._fetch_file(rel, key, buffer)
        return buffer.getvalue()

    def _fetch_file(self, rel: str, key: EntryKey, fp: BinaryIO) -> None:
        """Listed file ``rel`` (``key``: its size and sha256) written to ``fp``, verified: a column with a deflated
        copy (format 1.5) through the copy (``fetch_inflated``), any other file as it is (``fetch_verified``)."""
        directory, _, name = rel.rpartition("/")
        copy_rel = f"{COLUMNS_DIR}/{deflated_name(name)}" if directory == COLUMNS_DIR else None
        copy = self.entries.get(copy_rel) if copy_rel is not None else None
        if copy is not None:
            fetch_inflated(self.store, copy_rel, copy, key.size, key.sha256, fp, self.settings.retry_seconds)
        else:
            fetch_verified(self.store, rel, key.size, key.sha256, fp, self.settings.retry_seconds)

    def stream(self, rel: str, dtype: str, row_shape: tuple[int, ...]) -> MappedStream:
        if rel in self._range_files:
            return self.range_reads.stream(rel)
        key = self._file_key(rel)
        if key is None:
            raise PackFormatError(f"{self.where(rel)}: not a file of {MANIFEST_NAME}")
        if self.read_through:
            return stream_from_bytes(self.where(rel), self._fetch_to_memory(rel, key), dtype, row_shape)
        for attempt in range(FETCH_ATTEMPTS):
            mapped, path = self._pinned_mapping(rel, key, dtype, row_shape)
            if self.verify == VERIFY_OFF or self._holds_its_bytes(
                    key, mapped.identity, lambda: hash_buffer(mapped.source), rel, self.verify):
                return mapped
            del mapped  # its pin goes with the mapping
            self._changed_copy(key, path, rel, attempt)
        raise AssertionError("unreachable: the last attempt raises")

    def _pinned_mapping(self, rel: str, key: EntryKey, dtype: str, row_shape: tuple[int, ...]
                        ) -> tuple[MappedStream, str]:
        """The cache's copy of ``rel`` mapped, its entry pinned for as long as the mapping lives."""
        while True:
            self.local_path(rel)
            pinned = self.node_cache.pin(key)
            if pinned is not None:  # else evicted between the fetch and the pin: fetch again
                break
        path, fd = pinned
        try:
            mapped = map_stream(path, dtype, row_shape)
        except BaseException:
            os.close(fd)
            raise
        weakref.finalize(mapped.mapping, os.close, fd)  # the pin lives as long as the mapping (and its views)
        return mapped, path

    def identity(self, rel: str):
        """The opened manifest's hash for ``dataset.json`` (the version is fixed at open), a listed file's hash."""
        if rel == MANIFEST_NAME:
            return self.manifest_sha256
        key = self._file_key(rel)
        return None if key is None else key.name


def pack_source_files(location: str | os.PathLike, cache: CacheSettings | dict | None = None,
                      endpoint_url: str | None = None, verify: str = DEFAULT_VERIFY) -> str | PackFiles:
    """What ``open_pack`` should open for a config's pack path: a URL through the node cache (``cache``, else the
    defaults: ``loader.cache.settings``; its copies checked as ``verify`` says), a
    local path as it is."""
    location = os.fspath(location)
    if not is_remote(location):
        return location
    settings = CacheSettings.from_dict(cache)
    return CachedPackFiles(ObjectStorePackFiles(location, endpoint_url=endpoint_url), settings, verify)


def open_cached_pack(location: str | os.PathLike, cache: CacheSettings | dict | None = None,
                     endpoint_url: str | None = None, verify: str = DEFAULT_VERIFY) -> Pack:
    """``open_pack`` for a loader: a URL pack through the node cache, a local one as before.  ``verify`` is how
    stream files are checked when mapped: a local pack's by ``loader.pack.content_check``, the cache's copies by
    ``CachedPackFiles`` (its ``hashes_checked``: the reader does not hash them a second time)."""
    return open_pack(pack_source_files(location, cache, endpoint_url, verify), verify=verify)


def _hash_open_file(fp: BinaryIO) -> str:
    """sha256 of an open file from its start, read in large blocks."""
    digest = hashlib.sha256()
    fp.seek(0)
    while block := fp.read(1 << 22):
        digest.update(block)
    return digest.hexdigest()


__all__ = ["BLOCK_BYTES", "CacheIntegrityError", "CachedPackFiles", "fetch_pool", "fetch_verified", "is_permanent",
           "open_cached_pack", "pack_source_files", "run_all", "with_retries"]
