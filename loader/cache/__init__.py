"""The node cache: training straight from object storage (docs/integrations.md, "Object storage").

A pack given by URL (``s3://bucket/packs/train``) is read through :class:`CachedPackFiles` (``cached_files``), a
``PackFiles`` (``loader.pack.files``) whose files come from a bounded directory on the node's disk
(``node_cache.NodeCache``): fetched once per node (store failures retried with backoff), verified against
``dataset.json``'s sha256, renamed into place and then mapped exactly as a local pack's files are (checked again
when read, by the identity their fetch recorded: ``verify_streams``), so the batch code never learns where a pack
lives.  A pack with digests (format 1.4) has its audio streams read a segment at a time instead (``ranges``: byte
ranges coalesced into requests, each piece checked against the shard's ``digests.npy`` before use, segments as
the cache's entries; ``segment_schedule`` is the plan's schedule over them, its million entries held as arrays
and named when asked for: ``schedule_entries``).  The loader tells the cache its plan (``schedule``): a thread
fetches ahead in plan order and eviction
removes the file whose next use is farthest away; ``speechpack plan`` replays the same schedule through a cache of
the config's limit, and ``shard_order`` orders an epoch so that it reads each cached file once.  ``settings``
parses the config's ``cache:`` block.
"""

from speechpack.loader.cache.cached_files import CachedPackFiles, open_cached_pack, pack_source_files
from speechpack.loader.cache.node_cache import CacheDirError, CacheFullError, NodeCache
from speechpack.loader.cache.settings import CACHE_DIR_ENV, CacheSettings

__all__ = ["CACHE_DIR_ENV", "CacheDirError", "CacheFullError", "CacheSettings", "CachedPackFiles", "NodeCache", "open_cached_pack",
           "pack_source_files"]
