"""Weighting across packs (``loader.plan.weighting``, docs/loader.md "Weighting").

What is pinned:
- Omnilingual's hours ** beta shares, against numbers worked out by hand;
- realised proportions within 1% of the weights over 1,000 batches; ``repeat`` / ``choose`` counts;
- within a pack, every item once before any repeats (across epochs); determinism per seed, a new draw per epoch;
- through the loader: equal batch counts on every rank, the selection dealt exactly once over ranks, resume
  mid-epoch, the report, and the config errors.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from speechpack.loader import open_pack
from speechpack.loader.config import ConfigError, LoaderConfig
from speechpack.loader.plan.epoch_plan import make_epoch_plan
from speechpack.loader.torch import ResumeError
from speechpack.loader.plan.weighting import epoch_items, hours_beta_weights, largest_remainder, pack_counts
from factories.batches import assert_batches_equal
from factories.tse import build, take

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


# ---------------------------------------------------------------------------------------------------------------
# Pure functions
# ---------------------------------------------------------------------------------------------------------------


def test_hours_beta_weights_by_hand():
    # Corpus A: en 4 h, fr 12 h; B: en 9 h; C: en 2 h, fr 9 h.  36 h in all, beta 0.5 for both levels.
    # Corpora: sqrt(16/36) = .66667, sqrt(9/36) = .5, sqrt(11/36) = .55277 -> /1.71944 = .38772, .29079, .32148.
    # Languages in A: sqrt(4/16) = .5, sqrt(12/16) = .86603 -> .36603, .63397.
    # Languages in C: sqrt(2/11) = .42640, sqrt(9/11) = .90453 -> .32038, .67962.
    shares = hours_beta_weights([4, 12, 9, 2, 9], ["A", "A", "B", "C", "C"], ["en", "fr", "en", "en", "fr"],
                                0.5, 0.5)
    expected = [.38772 * .36603, .38772 * .63397, .29079, .32148 * .32038, .32148 * .67962]
    np.testing.assert_allclose(shares, expected, atol=2e-5)
    assert shares.sum() == pytest.approx(1.0)


def test_hours_beta_limits_and_shared_groups():
    hours, corpora, langs = [4, 12, 9, 2, 9], ["A", "A", "B", "C", "C"], ["en", "fr", "en", "en", "fr"]
    # beta 1: the natural proportions.
    np.testing.assert_allclose(hours_beta_weights(hours, corpora, langs, 1, 1), np.array(hours) / 36)
    # beta 0: uniform over corpora, then over the languages of each corpus.
    np.testing.assert_allclose(hours_beta_weights(hours, corpora, langs, 0, 0), [1 / 6, 1 / 6, 1 / 3, 1 / 6, 1 / 6])
    # Two packs of one (corpus, language) split its share by hours.
    split = hours_beta_weights([1, 3, 9], ["A", "A", "B"], ["en", "en", "en"], 0.5, 0.5)
    whole = hours_beta_weights([4, 9], ["A", "B"], ["en", "en"], 0.5, 0.5)
    np.testing.assert_allclose(split, [whole[0] / 4, whole[0] * 3 / 4, whole[1]])
    with pytest.raises(ConfigError, match="positive hours"):
        hours_beta_weights([0, 1], ["A", "B"], ["x", "y"], 0.5, 0.5)


def test_largest_remainder_sums_exactly():
    counts = largest_remainder([1, 1, 1], 10)
    assert counts.sum() == 10 and sorted(counts.tolist()) == [3, 3, 4]
    assert largest_remainder([0.5, 0.3, 0.2], 1057).tolist() == [529, 317, 211]  # 528.5, 317.1, 211.4


def test_repeat_and_choose_counts():
    assert pack_counts([10, 7, 5], repeats=[2.5, None, 0.5], chooses=[None, 3, None]).tolist() == [25, 3, 3]
    assert pack_counts([10, 7, 5]).tolist() == [10, 7, 5]
    assert pack_counts([10, 7, 5], weights=[0.2, 0.3, 0.5], epoch_size=100).tolist() == [20, 30, 50]
    items = epoch_items([10, 7, 5], [25, 3, 3], seed=1, epoch=0)
    assert Counter(np.searchsorted([10, 17], items, side="right").tolist()) == {0: 25, 1: 3, 2: 3}


def stream(sizes, counts, pack: int, epochs: int, seed: int = 5) -> np.ndarray:
    offset = int(np.sum(sizes[:pack]))
    parts = []
    for e in range(epochs):
        ids = epoch_items(sizes, counts, seed, e)
        parts.append(ids[(ids >= offset) & (ids < offset + sizes[pack])] - offset)
    return np.concatenate(parts)


def test_every_item_of_a_pack_once_before_any_repeats():
    sizes, counts = [5, 100], [12, 30]
    small = stream(sizes, counts, 0, 5)  # upweighted: cycles 12 times in 5 epochs
    assert len(small) == 60
    for k in range(12):
        assert sorted(small[5 * k:5 * k + 5].tolist()) == list(range(5))
    large = stream(sizes, counts, 1, 7)  # downweighted: covered over 4 epochs, then again
    assert sorted(large[:100].tolist()) == list(range(100))
    assert len(set(large[100:200].tolist())) == 100
    # Successive cycles are different permutations.
    assert small[:5].tolist() != small[5:10].tolist() or small[5:10].tolist() != small[10:15].tolist()


def test_determinism_per_seed_and_change_per_epoch():
    sizes, counts = [50, 30, 20], [40, 40, 20]
    a = epoch_items(sizes, counts, seed=3, epoch=2)
    assert np.array_equal(a, epoch_items(sizes, counts, seed=3, epoch=2))
    assert not np.array_equal(a, epoch_items(sizes, counts, seed=4, epoch=2))
    assert not np.array_equal(a, epoch_items(sizes, counts, seed=3, epoch=3))
    # Without shuffle: storage order, cycling.
    plain = epoch_items([4, 3], [6, 3], seed=3, epoch=1, shuffle=False)
    assert plain.tolist() == [2, 3, 0, 1, 2, 3, 4, 5, 6]


def test_realised_proportions_within_one_percent_over_1000_batches():
    sizes, weights, batch_size = [1000, 50, 7], [0.5, 0.3, 0.2], 8
    counts = pack_counts(sizes, weights=weights)
    seen, batches, epoch = Counter(), 0, 0
    while batches < 1000:
        chosen = epoch_items(sizes, counts, seed=11, epoch=epoch)
        plan = make_epoch_plan(len(chosen), batch_size, 11, epoch, 0, 1, True, "drop")
        for row in plan.items[:1000 - batches]:
            seen.update(np.searchsorted([1000, 1050], chosen[row], side="right").tolist())
            batches += 1
        epoch += 1
    total = sum(seen.values())
    assert total == 8000
    for pack, weight in enumerate(weights):
        assert abs(seen[pack] / total - weight) < 0.01, (pack, seen[pack] / total)


# ---------------------------------------------------------------------------------------------------------------
# Through the loader
# ---------------------------------------------------------------------------------------------------------------


def wconfig(packs, entries, weighting=None, **dataset_args) -> dict:
    cfg = {"packs": [{"path": p, **e} for p, e in zip(packs, entries)],
           "dataset_args": {"batch_size": 2, "chunk_len": 1000, **dataset_args}}
    if weighting is not None:
        cfg["weighting"] = weighting
    return cfg


def pack_of(item_ids: np.ndarray, sizes: list[int]) -> np.ndarray:
    return np.searchsorted(np.cumsum(sizes), item_ids, side="right")


def test_loader_proportions_over_1000_batches(two_packs):
    packs, _ = two_packs  # 7 and 4 mixtures
    cfg = wconfig(packs, [{"weight": 1}, {"weight": 3}], weighting={"epoch_items": 40})
    l = build(cfg, seed=2)
    seen, batches, epoch = Counter(), 0, 0
    while batches < 1000:
        plan = l.dataset.plan(epoch)
        for items, valid in zip(plan.items, plan.valid):
            seen.update(pack_of(items[valid], [7, 4]).tolist())
            batches += 1
        epoch += 1
    total = sum(seen.values())
    assert abs(seen[0] / total - 0.25) < 0.01 and abs(seen[1] / total - 0.75) < 0.01
    report = l.report().weighting
    assert report["epoch_items"] == 40
    assert report["packs"][packs[0]]["items"] == 10 and report["packs"][packs[1]]["items"] == 30
    assert report["packs"][packs[1]]["target"] == pytest.approx(0.75)


def test_loader_repeat_choose_and_equal_batches_on_every_rank(two_packs):
    packs, _ = two_packs
    cfg = wconfig(packs, [{"repeat": 2}, {"choose": 3}])
    for epoch in (0, 3):
        loaders = [build(cfg, rank=r, world_size=3, seed=7) for r in range(3)]
        for l in loaders:
            l.set_epoch(epoch)
        assert len({len(l) for l in loaders}) == 1
        valid = np.concatenate([p.items[p.valid] for p in (l.dataset.plan(epoch) for l in loaders)])
        selection = loaders[0].weighting.items(7, epoch)
        assert Counter(valid.tolist()) == Counter(selection.tolist())  # the selection, exactly once over ranks
        assert Counter(pack_of(valid, [7, 4]).tolist()) == {0: 14, 1: 3}
        report = loaders[0].report().weighting
        assert report["packs"][packs[0]]["items"] == 14 and report["packs"][packs[1]]["items"] == 3


def test_loader_batches_carry_the_selected_mixtures(two_packs):
    packs, _ = two_packs
    l = build(wconfig(packs, [{"choose": 2}, {"repeat": 1}]), seed=1)
    keys = Counter(k for batch in l for k, v in zip(batch["key"], batch["valid"].tolist()) if v)
    assert sum(1 for k in set(keys) if k.startswith("a")) == 2
    assert {k for k in keys if k.startswith("b")} == {f"b{i}" for i in range(4)}


def test_loader_resume_mid_epoch_with_weighting(two_packs):
    packs, _ = two_packs
    cfg = wconfig(packs, [{"weight": 2}, {"weight": 1}], weighting={"epoch_items": 20})
    kwargs = dict(rank=1, world_size=2, seed=9)
    full = build(cfg, **kwargs)
    full.set_epoch(2)
    expected = list(full)
    first = build(cfg, **kwargs)
    first.set_epoch(2)
    head = take(first, 2)
    assert_batches_equal(head, expected[:2])
    state = json.loads(json.dumps(first.state_dict()))
    resumed = build(cfg, num_workers=2, **kwargs)
    resumed.load_state_dict(state)
    assert_batches_equal(list(resumed), expected[2:])
    # Other weights: a different plan, so the state is refused.
    other = build(wconfig(packs, [{"weight": 1}, {"weight": 1}], weighting={"epoch_items": 20}), **kwargs)
    with pytest.raises(ResumeError, match="fingerprint"):
        other.load_state_dict(state)


def test_loader_hours_beta_uses_manifest_hours_and_groups(two_packs):
    packs, _ = two_packs
    hours = [open_pack(p).manifest.totals["hours"] for p in packs]
    cfg = wconfig(packs, [{"hours_beta": True, "corpus": "c1", "language": "en"},
                          {"hours_beta": True, "corpus": "c2", "language": "en"}],
                  weighting={"beta_corpus": 0.5, "beta_language": 0.5})
    report = build(cfg).report().weighting
    root = np.sqrt(np.array(hours) / sum(hours))
    assert report["corpora"]["c1"]["target"] == pytest.approx(root[0] / root.sum())
    assert report["languages"]["en"]["items"] == report["epoch_items"] == 11
    assert report["languages"]["en"]["share"] == pytest.approx(1.0)


def test_unweighted_config_keeps_the_old_plan(two_packs):
    packs, _ = two_packs
    plain = build({"packs": [{"path": p} for p in packs], "dataset_args": {"batch_size": 2, "chunk_len": 1000}})
    assert plain.weighting is None and plain.report().weighting is None
    tagged = build(wconfig(packs, [{"corpus": "x"}, {"language": "y"}]))
    assert tagged.weighting is None and len(tagged) == len(plain)


@pytest.mark.parametrize("entries, weighting, match", [
    ([{"weight": 1, "hours_beta": True}, {"weight": 1}], None, "weight and hours_beta together"),
    ([{"repeat": 2, "choose": 3}, {}], None, "repeat and choose together"),
    ([{"weight": -1}, {"weight": 1}], None, r"packs\[0\]\.weight: must be non-negative"),
    ([{"repeat": -0.5}, {}], None, r"repeat: must be non-negative"),
    ([{"choose": -3}, {}], None, r"choose: must be a non-negative"),
    ([{"choose": 2.5}, {}], None, r"choose: expected int"),
    ([{"weights": 1}, {}], None, "unknown key.*weights"),
    ([{"weight": 1}, {}], None, "all or none"),
    ([{"weight": 1}, {"hours_beta": True}], None, "all or none"),
    ([{"weight": 0}, {"weight": 0}], None, "sum to 0"),
    ([{"repeat": 2}, {}], {"epoch_items": 10}, "epoch_items: only with weight"),
    ([{"hours_beta": True}, {"hours_beta": True}], {"beta_corpus": -1}, "beta_corpus: must be non-negative"),
    ([{"weight": 1}, {"weight": 1}], {"beta": 0.5}, r"weighting: unknown key.*beta"),
    ([{"weight": 1}, {"weight": 1}], {"epoch_items": 0}, "epoch_items: must be at least 1"),
    ([{"hours_beta": "yes"}, {}], None, "hours_beta: expected bool"),
])
def test_config_errors(entries, weighting, match):
    cfg = wconfig(["/p/a", "/p/b"], entries, weighting)
    with pytest.raises(ConfigError, match=match):
        LoaderConfig.from_dict(cfg)


def test_choose_from_an_empty_selection_is_refused(two_packs):
    packs, _ = two_packs
    with pytest.raises(ConfigError, match="without items"):
        build(wconfig(packs, [{"choose": 0}, {"repeat": 0}]))


def test_loader_downweighted_pack_is_covered_before_repeats(two_packs):
    packs, _ = two_packs  # pack a: 7 mixtures, 3 per epoch
    l = build(wconfig(packs, [{"choose": 3}, {}]), seed=4)
    picked = []
    for epoch in range(7):
        plan = l.dataset.plan(epoch)
        valid = plan.items[plan.valid]
        picked.append(sorted(valid[valid < 7].tolist()))
        assert sorted(valid[valid >= 7].tolist()) == [7, 8, 9, 10]  # the other pack: every item, every epoch
    stream = [i for epoch in picked for i in epoch]
    # Epochs are sets of 3 from the pack's stream of permutations: each run of 7 positions is the whole pack.
    assert Counter(stream) == {i: 3 for i in range(7)}
    assert len(set(picked[0] + picked[1])) == 6  # positions 0-5 of the first permutation: no repeat yet
