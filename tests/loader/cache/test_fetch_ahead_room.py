"""The node cache's room rules for range entries fetched ahead of need (``NodeCache.reserve_ahead``,
``loader.cache.ranges.claim_rounds``): a fetch ahead fills the cache only to the limit less the headroom the
batches being built need, evicting only entries used later, and a batch's own claims may take the room of what was
fetched ahead.  Plain files in a temporary directory: no store, no torch."""

from __future__ import annotations

from speechpack.loader.cache.node_cache import Claim, EntryKey, NodeCache
from speechpack.loader.cache.ranges import claim_rounds


def _key(i: int, size: int = 100) -> EntryKey:
    return EntryKey(f"{i:032x}", size)


def _fill(cache: NodeCache, key: EntryKey) -> None:
    claim = cache.claim(key, f"test#{key.sha256}")
    assert isinstance(claim, Claim)
    claim.fill(b"x" * key.size)


def test_a_fetch_ahead_leaves_the_headroom_free_and_evicts_only_entries_used_later(tmp_path):
    cache = NodeCache(str(tmp_path / "cache"), limit=1000)
    next_use = {_key(i).name: float(i) for i in range(20)}
    cache.next_use, cache.protected, cache.headroom = next_use.__getitem__, set, lambda held: 500
    for i in (1, 2, 15, 16, 17):
        _fill(cache, _key(i))
    claims = [cache.claim(_key(i), "test") for i in (5, 6, 7, 8)]
    admitted = cache.reserve_ahead(claims, 5.0)
    # 500 bytes may be held: the entries used after position 5 (15, 16, 17) make room, those used before (1, 2)
    # stay, so of the 400 bytes asked for the first 300 are admitted
    assert [c.key.sha256 for c in admitted] == [_key(i).sha256 for i in (5, 6, 7)]
    held = set(cache.entries())
    assert {_key(1).name, _key(2).name} <= held
    assert not {_key(15).name, _key(16).name, _key(17).name} & held
    for claim in claims:
        claim.release()


def test_a_batch_claim_takes_the_room_of_segments_fetched_ahead_when_nothing_else_may_go(tmp_path):
    cache = NodeCache(str(tmp_path / "cache"), limit=500, space_wait=0.0)
    ahead = [_key(i) for i in range(5)]
    for key in ahead:
        _fill(cache, key)
    names = {k.name for k in ahead}
    cache.next_use = lambda name: 3.0 if name in names else float("inf")
    cache.protected = lambda: set(names)  # all of them the next batches' segments
    claims = [cache.claim(_key(i), "test") for i in (10, 11)]
    cache.reserve_claims(claims)  # needed now: without the last resort this waited, then raised CacheFullError
    assert all(c.part is not None for c in claims)
    assert sum(cache.entries().values()) <= 300
    for claim in claims:
        claim.fill(b"y" * claim.key.size)
    assert sum(cache.entries().values()) <= 500


def test_a_block_larger_than_half_the_limit_is_claimed_in_rounds_of_half_the_limit():
    class Want:
        def __init__(self, i, size):
            self.key = EntryKey(f"{i:032x}", size)
            self.layout = type("L", (), {"rel": "shard-0/mix.npy", "start": {i: i * 1000}})()
            self.index = i

    wants = [Want(i, 100) for i in range(9)]
    rounds = claim_rounds(wants, 400)
    assert [len(r) for r in rounds] == [2, 2, 2, 2, 1]
    assert sum(rounds, []) == sorted(wants, key=lambda w: w.index)
    assert claim_rounds(wants, None) == [sorted(wants, key=lambda w: w.index)]
