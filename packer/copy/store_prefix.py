"""A store prefix being published: one publish at a time (a lock object with a lease and the writer's identity),
and the unfinished multipart uploads killed publishes left there, aborted.

Why.  ``SRC.lock`` (``packer.ownership``) makes the ranks of one node publish one after the other, but it lies
beside the *source*: two publishes of different packs (or of one pack from two nodes) to the same prefix never see
each other's lock, and interleave their uploads, deletions and ``dataset.json``; both then report a verified pack
over a prefix that holds neither.  The destination needs its own lock, and an object store offers one primitive
for it: a conditional write.  ``PutObject`` with ``If-None-Match: *`` creates an object only if none exists, and
with ``If-Match: <ETag>`` replaces it only if it is still the version read (Amazon S3 since 2024; MinIO, Ceph RGW
and moto as well).  So:

- **acquire**: create ``PREFIX/.tmp-publish-lock.json`` with ``If-None-Match: *``, holding who writes (host, pid,
  a random id, the source) and until when its lease runs.  If it exists, the holder is named and waited for
  (polling) while its lease is renewed; a lease that ran out (its holder was killed) is taken over with
  ``If-Match`` on the stale version, so of two waiters only one wins.
- **renew**: a thread rewrites the lock (``If-Match`` on the version it wrote) every quarter of the lease; if that
  fails, another writer took the prefix over and this publish stops before ``dataset.json`` (``check``).
- **release**: delete the lock, if it is still this writer's.

A store without conditional writes (an fsspec filesystem other than S3) gets no lock; the publish says so once.

**Leftover multipart uploads.** A large object goes up as a multipart upload, which the store keeps (and bills) until it is completed or
aborted; a publish killed mid-upload completes neither, and each killed run left about four.  They are invisible
in a listing of objects, so a later publish that succeeds never saw them.  ``ListMultipartUploads`` shows them by
key, and speechpack can tell its own apart without marking them: the publish holds the prefix's lock
(above), so no other speechpack publish is uploading there, and an upload is speechpack's when its
key is an object a speechpack record lists (the source's files, the current, incoming or replaced
``dataset.json``).  Uploads to any other key are a user's, and are left alone.  A publish aborts them when it
starts (a retry cleans up after the run that was killed) and again after it succeeds.

S3 only (fsspec's ``s3fs``, which exposes the API as ``call_s3``); other stores have no such leftovers to list.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Callable, Iterable, Iterator

from speechpack.schemas.constants import TEMP_PREFIX
from speechpack.schemas.documents import parse_json
from speechpack.schemas.errors import SpeechpackError

#: The lock object, under the prefix it guards (a ``.tmp-`` name: validation reports it as a leftover, never as
#: part of a pack).
LOCK_NAME = f"{TEMP_PREFIX}publish-lock.json"
#: Seconds a lock stays valid without renewal: a killed publish blocks the prefix at most this long.
LEASE_SECONDS = 120.0
#: Seconds between two looks at another writer's lock.
POLL_SECONDS = 2.0


class PrefixLockError(SpeechpackError):
    """The prefix's lock could not be taken or was lost; the message names the other writer."""


def _holder_text(record: dict | None) -> str:
    if not isinstance(record, dict):
        return "an unreadable lock"
    writer = record.get("writer", {}) if isinstance(record.get("writer"), dict) else {}
    until = record.get("lease_until")
    left = f", lease ends in {max(0.0, until - time.time()):.0f} s" if isinstance(until, (int, float)) else ""
    return (f"{writer.get('host', '?')} pid {writer.get('pid', '?')} (id {str(writer.get('id', '?'))[:8]}) "
            f"publishing {record.get('source', '?')!s}{left}")


class PrefixLock:
    """The publish lock of one prefix (``RemotePack``); a context manager."""

    def __init__(self, remote, source: str, log: Callable[[str], None] | None = None,
                 lease: float = LEASE_SECONDS, poll: float = POLL_SECONDS, wait: float | None = None):
        self.remote = remote
        self.source = source
        self.log = log
        self.lease = lease
        self.poll = poll
        self.wait = wait  # seconds to wait for another writer at most (None: as long as its lease is renewed)
        self.id = uuid.uuid4().hex
        self.acquired_at: float | None = None
        self._etag: str | None = None
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._s3 = hasattr(remote.fs, "call_s3")

    # --- the store's conditional requests -----------------------------------------------------------------
    def _key(self) -> tuple[str, str]:
        bucket, _, key = f"{self.remote.root}/{LOCK_NAME}".partition("/")
        return bucket, key

    def _record(self) -> bytes:
        now = time.time()
        return json.dumps({"writer": {"host": socket.gethostname(), "pid": os.getpid(), "id": self.id},
                           "source": self.source, "acquired": self.acquired_at or now,
                           "lease_until": now + self.lease}, sort_keys=True).encode("utf-8")

    def _put(self, **condition) -> str:
        bucket, key = self._key()
        return self.remote.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=self._record(), **condition)["ETag"]

    def _read(self) -> tuple[dict | None, str | None]:
        """The lock now and its ETag; (None, None) when there is none."""
        path = f"{self.remote.root}/{LOCK_NAME}"
        try:  # the version first: if the lock changes before its bytes are read, a takeover of it fails
            etag = self.remote.fs.info(path)["ETag"]
            body = self.remote.fs.cat_file(path)
        except FileNotFoundError:
            return None, None
        try:
            record = parse_json(body, self.remote.where(LOCK_NAME), error=ValueError)
        except ValueError:
            record = None
        return record, etag

    # --- acquire, renew, release --------------------------------------------------------------------------
    def acquire(self) -> None:
        if not self._s3:
            if self.log is not None:
                self.log(f"{self.remote.location}: this store offers no conditional writes; publishing without a lock "
                         f"on the prefix (run one publish at a time)")
            return
        started = time.time()
        told = None
        while True:
            try:
                self.acquired_at = time.time()
                self._etag = self._put(IfNoneMatch="*")
                break
            except FileExistsError:
                pass
            record, etag = self._read()
            if etag is None:
                continue  # released meanwhile: try again at once
            until = record.get("lease_until") if isinstance(record, dict) else None
            if not isinstance(until, (int, float)) or until < time.time():
                try:  # a lapsed (or unreadable) lock: take it over, unless another waiter did first
                    self.acquired_at = time.time()
                    self._etag = self._put(IfMatch=etag)
                    if self.log is not None:
                        self.log(f"{self.remote.location}: took over the publish lock of {_holder_text(record)} (its "
                                 f"lease ran out)")
                    break
                except OSError:
                    continue
            if self.wait is not None and time.time() - started > self.wait:
                raise PrefixLockError(f"{self.remote.location}: another publish holds this prefix ({_holder_text(record)}); "
                                      f"refusing to publish there now, try again when it is done")
            if self.log is not None and told != etag:
                self.log(f"{self.remote.location}: waiting for another publish to this prefix ({_holder_text(record)})")
                told = etag
            time.sleep(self.poll)
        self._thread = threading.Thread(target=self._renew, name="speechpack-prefix-lock", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.lease / 4):
            try:
                self._etag = self._put(IfMatch=self._etag)
            except OSError as err:  # the version changed: another writer took the prefix over
                try:
                    record, _ = self._read()
                except Exception:  # noqa: BLE001 - the store is unreachable: say so, not who
                    record = None
                self._lost = (f"{self.remote.location}: lost the publish lock to {_holder_text(record)} "
                              f"({getattr(err, 'strerror', None) or err})")
                return
            except Exception as err:  # noqa: BLE001 - the store cannot be reached: the lease cannot be kept
                self._lost = f"{self.remote.location}: could not renew the publish lock ({err})"
                return

    def check(self) -> None:
        """Raise ``PrefixLockError`` if this writer no longer holds the prefix (before ``dataset.json`` goes up)."""
        if not self._s3:
            return
        if self._lost is None:
            record, _ = self._read()
            writer = record.get("writer") if isinstance(record, dict) else None
            if not isinstance(writer, dict) or writer.get("id") != self.id:
                self._lost = f"{self.remote.location}: lost the publish lock to {_holder_text(record)}"
        if self._lost is not None:
            raise PrefixLockError(f"{self._lost}; dataset.json was not uploaded by this publish")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if not self._s3 or self._etag is None:
            return
        record, _ = self._read()
        writer = record.get("writer") if isinstance(record, dict) else None
        if isinstance(writer, dict) and writer.get("id") == self.id:
            self.remote.remove([LOCK_NAME])

    def __enter__(self) -> "PrefixLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _uploads(fs, bucket: str, prefix: str) -> Iterator[dict]:
    """Every unfinished multipart upload under ``prefix`` (following the listing's pages)."""
    marker: dict = {}
    while True:
        page = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix, **marker)
        yield from page.get("Uploads", [])
        if not page.get("IsTruncated"):
            return
        marker = {"KeyMarker": page["NextKeyMarker"], "UploadIdMarker": page["NextUploadIdMarker"]}


def abort_leftover_uploads(remote, owned: Iterable[str]) -> list[str]:
    """Abort the unfinished multipart uploads under ``remote``'s prefix whose key is one of ``owned`` (relative
    names); return the objects' URLs, one per upload aborted.  Call it while holding the prefix's lock."""
    fs = remote.fs
    if not hasattr(fs, "call_s3"):
        return []
    owned = set(owned)
    bucket, _, root = remote.root.partition("/")
    aborted = []
    for upload in list(_uploads(fs, bucket, root + "/")):
        rel = upload["Key"][len(root) + 1:]
        if rel not in owned:
            continue  # someone else's upload: never ours to abort
        try:
            fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        except FileNotFoundError:
            continue  # completed or aborted meanwhile
        aborted.append(remote.where(rel))
    return aborted


__all__ = ["LEASE_SECONDS", "LOCK_NAME", "POLL_SECONDS", "PrefixLock", "PrefixLockError", "abort_leftover_uploads"]
