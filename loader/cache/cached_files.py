"""A pack on object storage read through the node cache: :class:`CachedPackFiles`, the ``PackFiles`` a URL pack
gets in training (``build_loader``, the DataModules, torchdata, ``speechpack plan``/``peek``).

``dataset.json`` is read from the store when the pack is opened (a few kilobytes: it says which version of the pack
this is); every file it lists (columns and stream files) is a node cache entry keyed by its sha256
(``loader.cache.node_cache``), fetched once per node and verified (``loader.cache.fetch``).  Columns are then read
from the cache's copy, stream files mapped from it exactly as a local pack's are (``loader.pack.files.map_stream``),
each mapping holding its entry against eviction for as long as it lives.  The column files are fetched together
as the manifest is read (``cache.fetches`` at once, ``fetch_many``): at a million samples they are most of the
bytes before the first batch, and one request after another would pay the store's latency once per file.  The pack's version is fixed at open: the
manifest's identity is its hash, and every file is read by its hash, so a pack published again on the store under a
running job is never mixed with the one opened (a changed file fails its hash and is named).
"""

from __future__ import annotations

import hashlib
import os
import weakref

from speechpack.loader.cache.fetch import fetch_pool, fetch_verified, run_all, with_retries
from speechpack.loader.cache.node_cache import EntryKey, NodeCache
from speechpack.loader.cache.settings import CacheSettings, settings_in_use
from speechpack.loader.pack.content_check import DEFAULT_VERIFY
from speechpack.loader.pack.files import MappedStream, PackFiles, is_remote, map_stream
from speechpack.loader.pack.object_store import ObjectStorePackFiles
from speechpack.loader.pack.reader import Pack, open_pack
from speechpack.schemas.constants import COLUMNS_DIR, MANIFEST_NAME
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import FileEntry, Manifest
from speechpack.schemas.manifest_file import ManifestFile, parse_manifest


def manifest_entries(manifest: Manifest) -> dict[str, FileEntry]:
    """Every file ``dataset.json`` lists with its size and hash, by its name inside the pack."""
    entries = {f"{COLUMNS_DIR}/{name}": entry for name, entry in manifest.columns.items()}
    for shard in manifest.shards:
        entries.update({f"{shard.directory}/{name}": entry for name, entry in shard.files.items()})
    return entries


class CachedPackFiles(PackFiles):
    """The files of the pack at ``store`` (an ``ObjectStorePackFiles``), served from the node cache ``settings``
    describe.  ``max_open_streams`` bounds the mappings a ``Pack`` keeps (each pins its entry)."""

    #: Every listed file is read from the cache's copy, verified against its sha256 when it was fetched.
    hashes_checked = True

    def __init__(self, store: ObjectStorePackFiles, settings: CacheSettings):
        self.store = store
        self.location = store.location
        self.settings = settings
        self.cache = NodeCache(settings.dir, settings.limit)
        self.max_open_streams = settings.open_files
        self.entries: dict[str, FileEntry] = {}
        self.manifest_sha256: str | None = None

    def where(self, rel: str) -> str:
        return self.store.where(rel)

    def _retried(self, request):
        return with_retries(request, self.settings.retry_seconds)

    def read_manifest(self) -> ManifestFile:
        """``dataset.json`` from the store (retried); fixes the version every other file is read at."""
        where = self.where(MANIFEST_NAME)
        try:
            raw = self._retried(lambda: self.store.read_bytes(MANIFEST_NAME))
        except FileNotFoundError:
            raise PackFormatError(f"{self.location}: not a pack (no {MANIFEST_NAME}; an unfinished build leaves "
                                  f"none)") from None
        manifest = parse_manifest(raw, where)
        self.entries = manifest_entries(manifest)
        self.manifest_sha256 = hashlib.sha256(raw).hexdigest()
        self.fetch_many([f"{COLUMNS_DIR}/{name}" for name in manifest.columns])
        return ManifestFile(path=where, manifest=manifest, raw=raw, identity=self.manifest_sha256)

    def key(self, rel: str) -> EntryKey | None:
        """The cache key of file ``rel`` (None for a file the manifest does not list)."""
        entry = self.entries.get(self.check_name(rel))
        return None if entry is None else EntryKey(entry.sha256, entry.size)

    def local_path(self, rel: str, wait: bool = True) -> str | None:
        """The cache's copy of ``rel``, fetched first if the node has none; None for an unlisted file.  ``wait``
        False: ``CacheFullError`` at once when it does not fit now."""
        key = self.key(rel)
        if key is None:
            return None
        return self.cache.ensure(key, lambda fp: fetch_verified(self.store, rel, key.size, key.sha256, fp,
                                                                self.settings.retry_seconds), self.where(rel), wait)

    def fetch_many(self, rels: list[str], wait: bool = True) -> list[str | None]:
        """``local_path`` of every file of ``rels``, up to ``cache.fetches`` fetched at once (``fetch.fetch_pool``);
        the first error is raised once every fetch has ended.  Not for a thread of the fetch pool itself."""
        if len(rels) <= 1 or self.settings.fetches <= 1:
            return [self.local_path(rel, wait) for rel in rels]
        pool = fetch_pool(self.settings.fetches)
        return run_all(pool, [lambda rel=rel: self.local_path(rel, wait) for rel in rels])

    def listing(self) -> dict[str, int]:
        return self._retried(self.store.listing)

    def read_bytes(self, rel: str) -> bytes:
        path = self.local_path(rel)
        if path is None:
            return self._retried(lambda: self.store.read_bytes(rel))
        with open(path, "rb") as fp:
            return fp.read()

    def read_range(self, rel: str, start: int, stop: int) -> bytes:
        path = self.local_path(rel)
        if path is None:
            return self._retried(lambda: self.store.read_range(rel, start, stop))
        with open(path, "rb") as fp:
            fp.seek(start)
            return fp.read(max(stop - start, 0))

    def stream(self, rel: str, dtype: str, row_shape: tuple[int, ...]) -> MappedStream:
        key = self.key(rel)
        if key is None:
            raise PackFormatError(f"{self.where(rel)}: not a file of {MANIFEST_NAME}")
        while True:
            self.local_path(rel)
            pinned = self.cache.pin(key)
            if pinned is not None:  # else evicted between the fetch and the pin: fetch again
                break
        path, fd = pinned
        try:
            mapped = map_stream(path, dtype, row_shape)
        except BaseException:
            os.close(fd)
            raise
        weakref.finalize(mapped.mapping, os.close, fd)  # the pin lives as long as the mapping (and its views)
        return mapped

    def identity(self, rel: str):
        """The opened manifest's hash for ``dataset.json`` (the version is fixed at open), a listed file's hash."""
        if rel == MANIFEST_NAME:
            return self.manifest_sha256
        key = self.key(rel)
        return None if key is None else key.name


def pack_source_files(location: str | os.PathLike, cache: CacheSettings | dict | None = None,
                      endpoint_url: str | None = None) -> str | PackFiles:
    """What ``open_pack`` should open for a config's pack path: a URL through the node cache (``cache``, else the
    loader's being built, else the defaults: ``loader.cache.settings``), a local path as it is."""
    location = os.fspath(location)
    if not is_remote(location):
        return location
    settings = CacheSettings.from_dict(cache if cache is not None else settings_in_use())
    return CachedPackFiles(ObjectStorePackFiles(location, endpoint_url=endpoint_url), settings)


def open_cached_pack(location: str | os.PathLike, cache: CacheSettings | dict | None = None,
                     endpoint_url: str | None = None, verify: str = DEFAULT_VERIFY) -> Pack:
    """``open_pack`` for a loader: a URL pack through the node cache, a local one as before.  ``verify`` is how a
    local pack's stream files are checked when mapped (``loader.pack.content_check``); a cached file was checked
    against its sha256 as it arrived, so the cache's copies are not hashed again."""
    files = pack_source_files(location, cache, endpoint_url)
    return open_pack(files, verify="off" if isinstance(files, CachedPackFiles) else verify)


__all__ = ["CachedPackFiles", "manifest_entries", "open_cached_pack", "pack_source_files"]
