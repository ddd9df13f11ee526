"""Packs on object storage: a pack location named by an fsspec URL (``s3://bucket/packs/train``).

``copy`` and ``validate`` reach a remote pack only through :class:`RemotePack`: list the objects under its prefix
(with sizes), read one object whole or as a stream, write one object, delete objects.  Everything else a command
guarantees (hashes, ``dataset.json`` last, ownership) is decided by the caller, the same way as for a directory.

Credentials are never an argument of speechpack, never written to a pack and never printed: the filesystem finds
them the standard way (for S3, botocore's chain: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` in the
environment, ``~/.aws/credentials`` and ``~/.aws/config``, ``AWS_PROFILE``, an instance role).  The endpoint of an
S3-compatible store (MinIO, Ceph, a test server) comes from ``AWS_ENDPOINT_URL`` or ``--endpoint-url``
(docs/integrations.md, "Object storage").  Error messages name the object and the store's reason, which for
botocore never contains the secret key.

Why objects need no temporary names: an object store makes an object visible only once its upload is complete
(a single PUT, or a multipart upload when it is completed), so a reader never sees half an object; what stays
is the order in which objects appear, which ``packer.copy.publish`` keeps (``dataset.json`` last).
"""

from __future__ import annotations

import re
from typing import BinaryIO, Iterator

from speechpack.schemas.errors import SpeechpackError

#: ``scheme://`` at the start of a location: an fsspec URL rather than a local path (``file://`` is local).
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
#: The extra that brings the S3 filesystem (``pip install 'speechpack[s3]'``).
S3_EXTRA = "s3"
#: Bytes per request when streaming an object: large enough that per-request latency is amortised.
STREAM_BLOCK = 8 << 20


def is_remote(location: str) -> bool:
    """True for an fsspec URL other than ``file://`` (``s3://bucket/key``)."""
    match = _URL.match(str(location))
    return match is not None and match.group(1).lower() != "file"


class RemoteError(SpeechpackError):
    """An object store refused or failed a request; the message names the object and the store's reason."""


def remote_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a store's client raises for a failed request (OSError from fsspec, botocore's own for
    credentials and endpoints), so callers catch one tuple and name the object."""
    errors: list[type[BaseException]] = [OSError]
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        pass
    else:
        errors += [BotoCoreError, ClientError]
    return tuple(errors)


def describe_error(err: BaseException) -> str:
    """The store's reason, without a traceback (botocore messages name the operation and the error code)."""
    text = getattr(err, "strerror", None) or str(err) or type(err).__name__
    return text.strip()


class RemotePack:
    """One pack's prefix on an fsspec filesystem; relative names are ``/``-separated, as in ``dataset.json``."""

    def __init__(self, url: str, endpoint_url: str | None = None):
        self.url = url.rstrip("/")
        protocol = _URL.match(self.url).group(1).lower()
        try:
            import fsspec
        except ImportError:
            raise SpeechpackError(f"{self.url}: object storage needs fsspec: pip install "
                                  f"'speechpack[{S3_EXTRA}]'") from None
        options: dict = {}
        if protocol in ("s3", "s3a"):
            # Listings change while we copy: never serve a cached one.
            options["use_listings_cache"] = False
            if endpoint_url:
                options["endpoint_url"] = endpoint_url
        elif endpoint_url:
            raise SpeechpackError(f"{self.url}: --endpoint-url applies to s3:// URLs only")
        try:
            self.fs, self.root = fsspec.core.url_to_fs(self.url, skip_instance_cache=True, **options)
        except ImportError as err:
            raise SpeechpackError(f"{self.url}: no filesystem for this URL ({err}); for s3:// install the extra: "
                                  f"pip install 'speechpack[{S3_EXTRA}]'") from None
        self.root = self.root.rstrip("/")
        if not self.root or "/" not in self.root and protocol in ("s3", "s3a"):
            raise SpeechpackError(f"{self.url}: name a prefix inside the bucket (s3://bucket/packs/train), "
                                  f"not a whole bucket")

    def __str__(self) -> str:
        return self.url

    def name(self, rel: str) -> str:
        """The URL of one object, as messages show it."""
        return f"{self.url}/{rel}"

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def listing(self) -> dict[str, int]:
        """Every object under the prefix: relative name -> size (empty when the prefix holds nothing)."""
        try:
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            return {}
        except remote_errors() as err:
            raise RemoteError(f"{self.url}: cannot list the objects ({describe_error(err)})") from None
        objects = {}
        for path, info in found.items():
            path = path.rstrip("/")
            if info.get("type") == "directory" or not path.startswith(self.root + "/"):
                continue  # a "directory" marker some tools write, or the prefix itself
            objects[path[len(self.root) + 1:]] = int(info["size"])
        return objects

    def read_bytes(self, rel: str) -> bytes:
        """One small object whole (a manifest); FileNotFoundError when it is absent."""
        try:
            with self.fs.open(self._path(rel), "rb") as fp:
                return fp.read()
        except FileNotFoundError:
            raise
        except remote_errors() as err:
            raise RemoteError(f"{self.name(rel)}: cannot read ({describe_error(err)})") from None

    def open_read(self, rel: str) -> BinaryIO:
        """A stream over one object, read forward in ``STREAM_BLOCK`` requests."""
        return self.fs.open(self._path(rel), "rb", block_size=STREAM_BLOCK, cache_type="readahead")

    def open_write(self, rel: str) -> BinaryIO:
        """A stream that becomes the object when closed (uploaded in parts when large); until then the object
        does not exist, or keeps its old content."""
        return self.fs.open(self._path(rel), "wb", block_size=max(STREAM_BLOCK, 5 << 20))

    def write_bytes(self, rel: str, data: bytes) -> None:
        try:
            self.fs.pipe_file(self._path(rel), data)
        except remote_errors() as err:
            raise RemoteError(f"{self.name(rel)}: cannot write ({describe_error(err)})") from None

    def remove(self, rels: list[str]) -> None:
        """Delete these objects (absent ones are no error)."""
        for rel in rels:
            try:
                self.fs.rm_file(self._path(rel))
            except FileNotFoundError:
                continue
            except remote_errors() as err:
                raise RemoteError(f"{self.name(rel)}: cannot delete ({describe_error(err)})") from None

    def chunks(self, rel: str, block: int = STREAM_BLOCK) -> Iterator[bytes]:
        """The object's bytes, in order, ``block`` at a time."""
        with self.open_read(rel) as fp:
            while chunk := fp.read(block):
                yield chunk


__all__ = ["RemoteError", "RemotePack", "S3_EXTRA", "STREAM_BLOCK", "describe_error", "is_remote", "remote_errors"]
