"""Unfinished multipart uploads that killed publishes left under a prefix, found and aborted.

Why.  A large object goes up as a multipart upload, which the store keeps (and bills) until it is completed or
aborted; a publish killed mid-upload completes neither, and each killed run left about four.  They are invisible
in a listing of objects, so a later publish that succeeds never saw them.  ``ListMultipartUploads`` shows them by
key, and speechpack can tell its own apart without marking them: the publish holds the prefix's lock
(``packer.copy.prefix_lock``), so no other speechpack publish is uploading there, and an upload is speechpack's when its
key is an object a speechpack record lists (the source's files, the current, incoming or replaced
``dataset.json``).  Uploads to any other key are a user's, and are left alone.  A publish aborts them when it
starts (a retry cleans up after the run that was killed) and again after it succeeds.

S3 only (fsspec's ``s3fs``, which exposes the API as ``call_s3``); other stores have no such leftovers to list.
"""

from __future__ import annotations

from typing import Iterable, Iterator


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
        aborted.append(remote.name(rel))
    return aborted


__all__ = ["abort_leftover_uploads"]
