"""``PackWeighting.from_groups``: Omnilingual's corpus/language weighting over the groups inside ASR packs."""

from __future__ import annotations

import numpy as np
import pytest

from speechpack.loader.config import ConfigError
from speechpack.loader.plan.weighting import PackWeighting

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")


def test_group_shares_by_hand_and_counts_that_sum_to_the_epoch():
    # Corpus A: en 1 h, fr 3 h; corpus B: en 4 h.  beta 0.5: corpora sqrt(4/8), sqrt(4/8) -> 1/2 each;
    # languages in A: sqrt(1/4) = .5, sqrt(3/4) = .86603 -> .36603, .63397 of A's half.
    w = PackWeighting.from_groups([10, 30, 40], [1.0, 3.0, 4.0], ["A", "A", "B"], ["en", "fr", "en"], 0.5, 0.5,
                                  epoch_size=1000)
    np.testing.assert_allclose(w.targets, [0.183013, 0.316987, 0.5], atol=1e-6)
    assert w.counts == (183, 317, 500) and w.paths == ("A/en", "A/fr", "B/en")
    chosen = w.items(seed=3, epoch=0)
    assert len(chosen) == 1000
    assert np.bincount(np.searchsorted([0, 10, 40, 80], chosen, side="right") - 1).tolist() == [183, 317, 500]
    report = w.report(chosen)
    assert report["corpora"]["A"]["items"] == 500 and report["languages"]["en"]["items"] == 683


def test_an_emptied_group_gives_its_items_to_the_others():
    w = PackWeighting.from_groups([0, 30, 40], [1.0, 3.0, 4.0], ["A", "A", "B"], ["en", "fr", "en"], 0.5, 0.5)
    assert w.counts[0] == 0 and sum(w.counts) == 70
    assert w.targets[0] > 0  # still part of the share computation, and reported as such
    with pytest.raises(ConfigError, match="every .* group is empty"):
        PackWeighting.from_groups([0], [1.0], ["A"], ["en"], 0.5, 0.5)
