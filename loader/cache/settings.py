"""The config's ``cache:`` block: where the node cache lives and how large it may grow (``CacheSettings``).

``cache: {dir: /local/cache, limit: 200GB, ahead: 8, fetches: 8}`` in a loader config, the same keys as
``build_loader(..., cache=...)``.  ``dir`` defaults to ``$SPEECHPACK_CACHE_DIR``, else ``~/.cache/speechpack``;
``limit`` (an integer count of bytes or a size: ``200GB``, ``512MiB``; ``loader.config_checks.byte_size``) defaults to none: the cache then keeps every file it
fetches; ``limit: 0`` reads through (every file and segment fetched into memory and verified there, nothing written
to the node's disk).  None of these change which batches are dealt, so none is part of a resume state's fingerprint
(``loader.config.loader_fingerprint``).  ``shard_order: true`` is the deprecated spelling of the plan option
``dataset_args.shard_window: 16`` (``loader.cache.shard_order.with_shard_order_alias``: a warning, and the key's plan
and fingerprint, whatever the limit).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from speechpack.loader.config_checks import ConfigError, byte_size, check_type, positive_int, take_known

#: The environment variable that names the default cache directory (one per node; shared by ranks and jobs).
CACHE_DIR_ENV = "SPEECHPACK_CACHE_DIR"
#: Batches fetched ahead of the one being built: enough to hide a store's latency behind a few batches of work.
DEFAULT_AHEAD = 8
#: Stream files one process keeps mapped from the cache (``Pack``'s mapping LRU): a mapped file cannot be evicted,
#: so this bounds what each process pins (a local pack keeps 256).
DEFAULT_OPEN_FILES = 16
#: Seconds a store failure is retried (throttling, timeouts, dropped connections) before training stops.
DEFAULT_RETRY_SECONDS = 60.0
#: Files one process fetches from the store at once (a pack's columns at open, the next batches' files): a
#: store's per-request latency (tens of ms) is then paid once per round, not once per file.
DEFAULT_FETCHES = 8
#: Largest ``limit``: 1 EiB, beyond any node's disk (a larger figure is a mistake, refused by name).
MAX_LIMIT = 1 << 60
#: Largest fetch-ahead distance (batches).
MAX_AHEAD = 1 << 16


def default_cache_dir() -> str:
    """``$SPEECHPACK_CACHE_DIR``, else ``~/.cache/speechpack``."""
    return os.environ.get(CACHE_DIR_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "speechpack")


@dataclass(frozen=True)
class CacheSettings:
    """A checked ``cache:`` block (see the module docstring)."""

    dir: str
    #: Bytes the cache may hold (None: no limit; 0: read through, nothing kept).
    limit: int | None = None
    #: Batches of the plan fetched ahead of the one being built.
    ahead: int = DEFAULT_AHEAD
    #: Files one process fetches from the store at once (a thread pool; each fetch verified and locked alone).
    fetches: int = DEFAULT_FETCHES
    #: Mapped files one process keeps open (each pins its file against eviction while mapped).
    open_files: int = DEFAULT_OPEN_FILES
    #: Seconds a failing store request is retried with backoff before it is an error.
    retry_seconds: float = DEFAULT_RETRY_SECONDS
    #: Deprecated: ``dataset_args.shard_window: 16`` (``loader.cache.shard_order.ALIAS_WINDOW``), read once by the
    #: loader and the dry run, which then hold it as that key.
    shard_order: bool = False

    @classmethod
    def from_dict(cls, obj: Any, where: str = "cache") -> "CacheSettings":
        """A ``cache:`` mapping (None or absent keys take the defaults); a ``CacheSettings`` is returned as is."""
        if isinstance(obj, CacheSettings):
            return obj
        if isinstance(obj, (str, os.PathLike)):
            obj = {"dir": os.fspath(obj)}
        v = take_known(obj, where, {"dir": None, "limit": None, "ahead": DEFAULT_AHEAD, "fetches": DEFAULT_FETCHES,
                                    "open_files": DEFAULT_OPEN_FILES, "retry_seconds": DEFAULT_RETRY_SECONDS,
                                    "shard_order": False})
        directory = v["dir"] if v["dir"] is not None else default_cache_dir()
        if not isinstance(directory, str) or not directory:
            raise ConfigError(f"{where}.dir: expected a directory, got {directory!r}")
        if v["limit"] is None:
            limit = None
        elif type(v["limit"]) is int and v["limit"] == 0:
            limit = 0  # read through: nothing is kept on the node's disk (``loader.cache.cached_files``)
        else:
            limit = byte_size(v["limit"], f"{where}.limit", MAX_LIMIT)
        retry = check_type(v["retry_seconds"], (int, float), f"{where}.retry_seconds")
        if not 0 <= retry <= 86400:
            raise ConfigError(f"{where}.retry_seconds: must be in [0, 86400], got {retry}")
        return cls(dir=os.path.expanduser(directory), limit=limit,
                   ahead=positive_int(v["ahead"], f"{where}.ahead", minimum=0, maximum=MAX_AHEAD),
                   fetches=positive_int(v["fetches"], f"{where}.fetches", minimum=1, maximum=256),
                   open_files=positive_int(v["open_files"], f"{where}.open_files", minimum=1, maximum=4096),
                   retry_seconds=float(retry),
                   shard_order=check_type(v["shard_order"], bool, f"{where}.shard_order"))


__all__ = ["CACHE_DIR_ENV", "DEFAULT_FETCHES", "CacheSettings", "default_cache_dir"]
