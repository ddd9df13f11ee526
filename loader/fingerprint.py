"""Which loader a resume state belongs to: ``loader_fingerprint`` hashes what decides the batches (the packs'
manifests, ``dataset_args``, the state, the task and the weighting), so ``SpeechLoader.load_state_dict`` refuses a
state saved by a loader that would deal other batches.  What only changes how batches are fetched (workers,
prefetch) and where the packs lie is left out, so a state still resumes on another node or with other workers."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from speechpack.loader.config import LoaderConfig
from speechpack.loader.pack import Pack


def loader_fingerprint(config: LoaderConfig, state: str, packs: list[Pack], order: dict | None = None) -> str:
    """Hash of the packs' manifests and ``dataset_args``: a state only resumes the loader it came from.

    Pack paths are left out on purpose, so a state still resumes after the packs are copied to node-local disk
    (or read from a store).  ``order`` is what a plan option outside ``dataset_args`` changes (the node cache's
    shard-aware order, ``loader.cache.shard_order.window_identity``); empty or None leaves the hash as before.
    """
    digest = hashlib.sha256()
    args = asdict(config.dataset_args)
    if config.task == "tse" and args.get("normalize") == "none":
        args["normalize"] = None  # spelt None before normalize had one vocabulary: older states still resume
    # Left out when unset, so older states still resume.
    for key in ("cues", "field_collate", "mix", "augment", "batching", "train_window", "hist_frames"):
        if key in args and not args[key]:
            del args[key]
    for key in ("npc", "num_prefetch"):  # how batches are fetched, not which: any worker count resumes
        args.pop(key, None)
    identity = {"dataset_args": args, "state": state}
    if config.task != "tse":
        identity["task"] = config.task
    identity.update(order or {})
    digest.update(json.dumps(identity, sort_keys=True, default=str).encode())
    if config.weighted:  # hashed only when set, so older states still resume; paths left out as below
        weights = [{k: v for k, v in asdict(p).items() if k != "path" and not (k == "split" and v is None)}
                   for p in config.packs]
        weighted = {"packs": weights, "weighting": asdict(config.weighting)}
        if config.sample_num_per_epoch:
            weighted["sample_num_per_epoch"] = config.sample_num_per_epoch
        digest.update(json.dumps(weighted, sort_keys=True).encode())
    for pack in packs:  # the manifest the pack was opened from (a directory's or a store's: no path is read)
        digest.update(bytes.fromhex(pack.opened.manifest_sha256))
    return digest.hexdigest()[:16]


__all__ = ["loader_fingerprint"]
