"""One rank (or one job) of a training run from an object store, as its own process: the multi-process tests of
tests/loader/cache/test_store_training.py start it with ``python -m factories.store_rank SPEC OUT``.

``SPEC`` is JSON: ``config`` (a loader config with ``packs`` by URL and ``cache``), ``rank``, ``world_size``,
``num_workers``, ``seed`` and optionally ``batches_per_message``, ``block_delay`` (seconds slept before every range request, with small
fetch blocks, so a test can kill the process mid-fetch), ``state`` (a resume state loaded before the pass) and
``save_after`` (the loader's state after that many batches is kept too).  ``OUT`` receives the batches (numpy arrays
and plain values, pickled), the bytes this process fetched from the store and the state kept (or None), renamed
into place when the epoch is done.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import time


def main(spec_json: str, out: str) -> None:
    spec = json.loads(spec_json)
    if spec.get("block_delay"):
        import speechpack.loader.cache.cached_files as cached_files
        from speechpack.loader.pack.object_store import ObjectStorePackFiles

        cached_files.BLOCK_BYTES = 4096
        read_range = ObjectStorePackFiles.read_range

        def slow_range(self, rel, start, stop):
            time.sleep(spec["block_delay"])
            return read_range(self, rel, start, stop)

        ObjectStorePackFiles.read_range = slow_range
    from speechpack.loader import build_loader

    loader = build_loader(spec["config"], "train", rank=spec["rank"], world_size=spec["world_size"],
                          num_workers=spec["num_workers"], seed=spec["seed"],
                          batches_per_message=spec.get("batches_per_message"))
    if spec.get("state") is not None:
        loader.load_state_dict(spec["state"])
    batches, saved = [], None
    for batch in loader:
        batches.append({name: value.numpy().copy() if hasattr(value, "numpy") else value
                        for name, value in batch.items()})
        if len(batches) == spec.get("save_after"):
            saved = loader.state_dict()
    caches = {id(p.files.node_cache): p.files.node_cache for p in loader.builder.packs
              if p.files.node_cache is not None}
    fetched = sum(cache.fetched_bytes for cache in caches.values())
    with open(out + ".tmp", "wb") as fp:
        pickle.dump({"batches": batches, "fetched": fetched, "state": saved}, fp)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
