"""A pack on object storage, read through fsspec: :class:`ObjectStorePackFiles` (``s3://bucket/packs/train``).

The same ``PackFiles`` a local directory gives (``loader.pack.files``), over requests: a listing of the objects under
the pack's prefix, an object whole or a byte range, and a stream file read into memory (training reads through the
node cache instead, ``loader.cache``, which keeps verified files on local disk and maps them: docs/integrations.md,
"Training from a store").  The identity
of an object is its size and ETag (a store gives a new ETag to every upload), so a pack published again under a
running reader is noticed as a local one is.

Credentials are never an argument of speechpack, never written to a pack and never printed: the filesystem finds
them the standard way (for S3, botocore's chain: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` in the
environment, ``~/.aws/credentials`` and ``~/.aws/config``, ``AWS_PROFILE``, an instance role).  The endpoint of an
S3-compatible store (MinIO, Ceph, a test server) comes from ``AWS_ENDPOINT_URL`` or ``endpoint_url``.  Failures
raise :class:`ObjectStoreError` naming the object and the store's reason, which for botocore never contains the
secret key.  fsspec and s3fs are the ``s3`` extra, imported only when a store is used.
"""

from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from speechpack.loader.pack.files import MappedStream, PackFiles, stream_from_bytes, url_scheme
from speechpack.schemas.errors import PackFormatError, SpeechpackError

#: The extra that brings the S3 filesystem (``pip install 'speechpack[s3]'``).
S3_EXTRA = "s3"
_S3_SCHEMES = ("s3", "s3a")


class ObjectStoreError(SpeechpackError, OSError):
    """A store refused or failed a request.  ``strerror`` is the store's reason and ``filename`` the object's URL;
    the message names both (an ``OSError``, so the reader reports it as it reports a local read error)."""

    def __init__(self, url: str, action: str, reason: str):
        super().__init__(errno.EIO, reason, url)
        self.action = action

    def __str__(self) -> str:
        return f"{self.filename}: cannot {self.action} ({self.strerror})"

    def __reduce__(self):  # pickled whole (an error raised in a worker process), not as OSError's arguments
        return type(self), (self.filename, self.action, self.strerror)


def store_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a store's client raises for a failed request (OSError from fsspec, botocore's own for
    credentials and endpoints)."""
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


@dataclass(frozen=True)
class ObjectIdentity:
    """Size and entity tag of one version of an object (None where the backend reports no tag)."""

    size: int
    etag: str | None


class ObjectStorePackFiles(PackFiles):
    """One pack's prefix on an fsspec filesystem.  The filesystem is made on first use in each process (a forked
    DataLoader worker makes its own: an async client's event loop does not survive a fork) and never pickled."""

    def __init__(self, url: str, endpoint_url: str | None = None):
        self.location = str(url).rstrip("/")
        self.endpoint_url = endpoint_url
        scheme = url_scheme(self.location)
        if scheme is None:
            raise SpeechpackError(f"{self.location}: not a URL (s3://bucket/prefix)")
        if endpoint_url and scheme not in _S3_SCHEMES:
            raise SpeechpackError(f"{self.location}: an endpoint URL applies to s3:// URLs only")
        self._fs = None
        self._pid = -1
        self._root = ""
        self._connect()  # a missing extra or a bucket without a prefix is an error now, not at the first read

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fs": None, "_pid": -1}

    def _connect(self):
        try:
            import fsspec
        except ImportError:
            raise SpeechpackError(f"{self.location}: object storage needs fsspec: pip install "
                                  f"'speechpack[{S3_EXTRA}]'") from None
        options: dict = {}
        if url_scheme(self.location) in _S3_SCHEMES:
            options["use_listings_cache"] = False  # a pack may be published again while it is read
            if self.endpoint_url:
                options["endpoint_url"] = self.endpoint_url
        try:
            fs, root = fsspec.core.url_to_fs(self.location, skip_instance_cache=True, **options)
        except ImportError as err:
            raise SpeechpackError(f"{self.location}: no filesystem for this URL ({err}); for s3:// install the "
                                  f"extra: pip install 'speechpack[{S3_EXTRA}]'") from None
        root = root.rstrip("/")
        if not root or "/" not in root and url_scheme(self.location) in _S3_SCHEMES:
            raise SpeechpackError(f"{self.location}: name a prefix inside the bucket (s3://bucket/packs/train), "
                                  f"not a whole bucket")
        self._fs, self._root, self._pid = fs, root, os.getpid()
        return fs

    @property
    def fs(self):
        """The fsspec filesystem of this process."""
        return self._fs if self._fs is not None and self._pid == os.getpid() else self._connect()

    def where(self, rel: str) -> str:
        return f"{self.location}/{rel}"

    def _path(self, rel: str) -> str:
        return f"{self._root}/{self.check_name(rel)}"

    @contextmanager
    def _request(self, rel: str, action: str) -> Iterator[None]:
        """Run one request; an absent object stays ``FileNotFoundError``, any other failure names the object."""
        try:
            yield
        except FileNotFoundError:
            raise
        except store_errors() as err:
            raise ObjectStoreError(self.where(rel) if rel else self.location, action, describe_error(err)) from None

    def listing(self) -> dict[str, int]:
        fs = self.fs
        try:
            with self._request("", "list the objects"):
                found = fs.find(self._root, detail=True)
        except FileNotFoundError:
            return {}
        objects = {}
        for path, info in found.items():
            path = path.rstrip("/")
            if info.get("type") == "directory" or not path.startswith(self._root + "/"):
                continue  # a "directory" marker some tools write, or the prefix itself
            objects[path[len(self._root) + 1:]] = int(info["size"])
        return objects

    def read_bytes(self, rel: str) -> bytes:
        path = self._path(rel)
        with self._request(rel, "read"):
            return self.fs.cat_file(path)

    def read_range(self, rel: str, start: int, stop: int) -> bytes:
        path = self._path(rel)
        if stop <= start:
            return b""
        with self._request(rel, "read"):
            return self.fs.cat_file(path, start=start, end=stop)

    def stream(self, rel: str, dtype: str, row_shape: tuple[int, ...]) -> MappedStream:
        try:
            data = self.read_bytes(rel)
        except OSError as err:
            raise PackFormatError(f"{self.where(rel)}: cannot map stream file ({err.strerror or err})") from None
        return stream_from_bytes(self.where(rel), data, dtype, row_shape)

    def identity(self, rel: str) -> ObjectIdentity | None:
        path = self._path(rel)
        try:
            with self._request(rel, "look up"):
                info = self.fs.info(path)
        except FileNotFoundError:
            return None
        etag = info.get("ETag", info.get("etag"))
        return ObjectIdentity(size=int(info["size"]), etag=None if etag is None else str(etag))


__all__ = ["ObjectIdentity", "ObjectStoreError", "ObjectStorePackFiles", "S3_EXTRA", "describe_error",
           "store_errors"]
