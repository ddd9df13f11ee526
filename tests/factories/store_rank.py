"""One rank (or one job) of a training run from an object store, as its own process: the multi-process tests of
tests/loader/cache/test_store_training.py start it with ``python -m factories.store_rank SPEC OUT``.

``SPEC`` is JSON: ``config`` (a loader config with ``packs`` by URL and ``cache``), ``rank``, ``world_size``,
``num_workers``, ``seed`` and optionally ``batches_per_message`` and ``block_delay`` (seconds slept before every range request, with small
fetch blocks, so a test can kill the process mid-fetch).  ``OUT`` receives the batches (numpy arrays and plain
values, pickled) and the bytes this process fetched from the store, renamed into place when the epoch is done.
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
    batches = [{name: value.numpy().copy() if hasattr(value, "numpy") else value for name, value in batch.items()}
               for batch in loader]
    fetched = sum({id(p.files.node_cache): p.files.node_cache.fetched_bytes for p in loader.dataset.feed.packs}.values())
    with open(out + ".tmp", "wb") as fp:
        pickle.dump({"batches": batches, "fetched": fetched}, fp)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
