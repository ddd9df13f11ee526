"""The shard plan: which samples go to which shard, decided from header-probed sizes before decoding.

Knowing every shard's size up front lets the writer put the final ``.npy`` header first and hash each file as it
streams out (no second read), and makes a shard's content a pure function of the input list and the options.
"""

from __future__ import annotations

from typing import Sequence


def plan_shards(sample_bytes: Sequence[int], shard_bytes: int) -> list[range]:
    """Consecutive sample ranges, one per shard: a shard closes when the next sample would push its payload past
    ``shard_bytes`` (a sample larger than that gets a shard of its own; a sample is never split)."""
    shards: list[range] = []
    start = 0
    payload = 0
    for index, size in enumerate(sample_bytes):
        if index > start and payload + size > shard_bytes:
            shards.append(range(start, index))
            start, payload = index, 0
        payload += size
    if start < len(sample_bytes):
        shards.append(range(start, len(sample_bytes)))
    return shards
