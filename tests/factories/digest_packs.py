"""A pcm16 pack given per-piece digests after its build (format 1.4: ``dataset.json`` ``digests`` and
``shard-k/digests.npy``), as ``speechpack convert`` adds them to an older pack: the packs the range-read tests
(tests/loader/cache/test_range_reads.py) publish, independent of which build options write digests."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from speechpack.loader.pack import open_pack
from speechpack.schemas.constants import DIGEST_ALGORITHM, DIGESTS_NAME, MANIFEST_NAME, MINOR_BLOCKS
from speechpack.schemas.digests import digests_array, piece_digest


def add_digests(root) -> None:
    """Write every shard's ``digests.npy`` of the pcm16 pack at ``root`` and record them in its manifest."""
    pack = open_pack(root)
    manifest = json.loads(open(os.path.join(root, MANIFEST_NAME), encoding="utf-8").read())
    for k, shard in enumerate(pack.manifest.shards):
        pieces = []
        for spec in pack.manifest.streams:
            table = pack.streams[spec.name]
            mine = np.flatnonzero(np.asarray(table.shard) == k)
            mine = mine[np.argsort(np.asarray(table.offset)[mine], kind="stable")]
            array = pack.stream_array(k, spec.name)
            for segment in mine.tolist():
                offset, length = int(table.offset[segment]), int(table.length[segment])
                rows = length * int(table.channels[segment]) if hasattr(table, "channels") else length
                pieces.append(piece_digest(np.ascontiguousarray(array[offset:offset + rows]).tobytes()))
        path = os.path.join(root, shard.directory, DIGESTS_NAME)
        np.save(path, digests_array(pieces))
        data = open(path, "rb").read()
        manifest["shards"][k]["files"][DIGESTS_NAME] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest["digests"] = DIGEST_ALGORITHM
    manifest["format_minor"] = MINOR_BLOCKS
    with open(os.path.join(root, MANIFEST_NAME), "w", encoding="utf-8") as fp:
        json.dump(manifest, fp, indent=1, sort_keys=True)
        fp.write("\n")
    open_pack(root)  # the manifest reads back as a 1.4 pack with digests
