"""Budget batching and train windows (``loader.plan.batching``), the loader with them, and ``speechpack plan``.

The plan is checked as a pure function over AVA-like lengths (lognormal, median 64 frames, a tail to thousands):
utilisation, every frame scored once, equal batch counts over ranks, per-epoch composition, the budget and the
multiple; then end to end through the loader on small packs, and the CLI's dry run.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader.plan.batching import BudgetArgs, make_budget_plan, plan_lengths
from speechpack.loader.plan.train_windows import tile_windows
from speechpack.loader.config import ConfigError
from speechpack.loader.tse.args import DatasetArgs
from factories.tse import build, config, frames_list, mixture

FAST_MODULE = True  # imports without torch: its tests marked fast join the tier (docs/testing.md)

WORLD_SIZES = (1, 2, 3, 8)


def ava_lengths(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.minimum(np.exp(rng.normal(np.log(64), 1.2, n)).astype(np.int64) + 1, 20000)


def plans(lengths, args, world_size, seed=3, epoch=0, tail="pad", shuffle=True):
    return [make_budget_plan(lengths, args, seed, epoch, r, world_size, shuffle, tail) for r in range(world_size)]


@pytest.mark.fast
def test_tiling_covers_every_sample_once():
    lengths = np.array([0, 1, 5, 10, 11, 1000, 1025, 4096])
    w = tile_windows(lengths, 5, hist=2)
    for i, m in enumerate(lengths):
        mine = np.flatnonzero(w.item == i)
        assert np.array_equal(mine, np.arange(w.first[i], w.first[i + 1]))
        edges = np.concatenate([w.start[mine], w.stop[mine][-1:]])
        assert edges[0] == 0 and edges[-1] == m and np.all(np.diff(edges) >= 0)
        assert np.array_equal(w.stop[mine][:-1], w.start[mine][1:]), "chunks must tile the item"
        n = max(-(-m // 5), 1)
        assert len(mine) == n
        assert np.all(w.stop[mine] - w.start[mine] <= 5)
        # MuVAP: round(linspace(0, M, n + 1)) (ties aside)
        assert np.all(np.abs(edges - np.linspace(0, m, n + 1)) <= 0.5)
    assert np.all(w.fed_start == np.maximum(w.start - 2, 0))
    assert np.array_equal(w.units_of(np.array([2, 2])), np.array([2, 2]))
    assert np.array_equal(w.units_of(np.array([3])), np.arange(w.first[3], w.first[4]))


def test_utilisation_and_every_frame_scored_once():
    lengths = ava_lengths(1_000_000)
    assert 60 <= np.median(lengths) <= 70 and lengths.max() > 2000
    w = tile_windows(lengths, 512, hist=0)
    fed = w.fed_length
    args = BudgetArgs(budget=8192)  # default sort window
    [plan] = plans(fed, args, 1)
    pl = plan_lengths(fed, plan)
    utilisation = fed.sum() / (pl[:, 0] * pl[:, 1]).sum()
    assert utilisation >= 0.999, utilisation
    # every frame scored exactly once: the valid chunks are every chunk once, and chunks tile the items
    scored = np.zeros(len(lengths), dtype=np.int64)
    units = plan.items[plan.valid]
    assert np.array_equal(np.sort(units), np.arange(len(w)))
    np.add.at(scored, w.item[units], w.stop[units] - w.start[units])
    assert np.array_equal(scored, lengths)


@pytest.mark.fast
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("multiple", (1, 4))
@pytest.mark.parametrize("tail", ("pad", "drop"))
def test_equal_counts_exactly_once_budget_and_multiple(world_size, multiple, tail):
    lengths = tile_windows(ava_lengths(20_000, seed=1), 512, hist=16).fed_length
    args = BudgetArgs(budget=4096, max_batch=96, multiple_of=multiple, window_items=4096)
    rank_plans = plans(lengths, args, world_size, tail=tail)
    assert len({len(p) for p in rank_plans}) == 1, "ranks differ in batch count"
    valid = np.concatenate([p.items[p.valid] for p in rank_plans])
    if tail == "pad":
        assert np.array_equal(np.sort(valid), np.arange(len(lengths)))
    else:
        assert len(np.unique(valid)) == len(valid)
        assert len(valid) + rank_plans[0].dropped == len(lengths)
    for p in rank_plans:
        pl = plan_lengths(lengths, p)
        assert np.all(pl[:, 0] % multiple == 0), "num_seqs_multiple_of"
        assert np.all(pl[:, 0] <= 96)
        over = pl[:, 0] * pl[:, 1] > 4096
        # the budget is exceeded only where even the smallest allowed batch (one item, or `multiple` items) of
        # the batch's longest item does not fit
        assert np.all(pl[over, 0] == multiple) and np.all(4096 // pl[over, 1] < multiple)


@pytest.mark.fast
@pytest.mark.parametrize("tail", ("pad", "drop"))
def test_a_final_remainder_larger_than_the_multiple_is_batched_not_lost(tail):
    """The leftovers, cut again at the end, may leave more than ``num_seqs_multiple_of`` items (here 4 with a
    multiple of 3, all within the budget): its whole multiples form one more batch, and only the rest (fewer than
    the multiple) is padded or dropped.  Before, ``tail: pad`` lost such items (``padded`` went negative) and
    ``tail: drop`` dropped them all."""
    lengths = np.random.default_rng(0).integers(1, 100, 40)
    args = BudgetArgs(budget=300, multiple_of=3, window_items=16)
    for world_size in (1, 2, 3):
        rank_plans = plans(lengths, args, world_size, tail=tail, shuffle=False)
        valid = np.sort(np.concatenate([p.items[p.valid] for p in rank_plans]))
        assert len(np.unique(valid)) == len(valid)
        assert len(valid) + rank_plans[0].dropped == 40 and rank_plans[0].padded >= 0
        if tail == "pad":
            assert np.array_equal(valid, np.arange(40))
        elif world_size == 1:  # (more ranks also drop the surplus batches that even the count)
            assert rank_plans[0].dropped < 3


@pytest.mark.fast
def test_quadratic_cost_respects_budget():
    lengths = ava_lengths(5000, seed=2)
    args = BudgetArgs(budget=1 << 20, cost="quadratic")
    [plan] = plans(lengths, args, 1)
    pl = plan_lengths(lengths, plan)
    fits = pl[:, 0] * pl[:, 1] ** 2 <= 1 << 20
    assert np.all(fits | (pl[:, 0] == 1))


@pytest.mark.fast
def test_composition_changes_per_epoch_and_repeats_per_seed():
    lengths = ava_lengths(5000, seed=3)
    args = BudgetArgs(budget=2048, window_items=1024)

    def batches(seed, epoch):
        [p] = plans(lengths, args, 1, seed=seed, epoch=epoch)
        return [tuple(sorted(p.batch(b)[0].tolist())) for b in range(len(p))]

    assert batches(5, 0) == batches(5, 0)
    assert set(batches(5, 0)) != set(batches(5, 1)), "the same batches two epochs running"
    assert batches(5, 0) != batches(6, 0)


@pytest.mark.fast
def test_config_keys_and_conflicts():
    args = DatasetArgs.from_dict({"batching": {"type": "budget", "max_num_elements": 1000, "cost": "quadratic",
                                               "num_seqs_multiple_of": 8, "max_batch": 64},
                                  "train_window": 16000, "hist_frames": 800})
    assert args.batching.budget == 1000 and args.batching.multiple_of == 8 and args.train_window == 16000
    assert DatasetArgs.from_dict({"batching": {"type": "static", "batch_size": 6}}).batch_size == 6
    bad = [
        ({"batching": {"type": "budget"}}, "exactly one of max_frames"),
        ({"batching": {"type": "budget", "max_frames": 10, "max_num_elements": 10}}, "exactly one"),
        ({"batching": {"type": "budget", "max_frames": 10, "cost": "cubic"}}, "cost"),
        ({"batching": {"type": "budget", "max_frames": 10, "bogus": 1}}, "bogus"),
        ({"batching": {"type": "static", "batch_size": 4}, "batch_size": 3}, "differs"),
        ({"batching": {"type": "dynamic"}}, "type"),
        ({"train_window": 100, "chunk_len": 100}, "alternative to chunk_len"),
        ({"train_window": 100, "whole_utt": True}, "whole_utt"),
        ({"hist_frames": 10}, "only used with train_window"),
    ]
    for obj, match in bad:
        with pytest.raises(ConfigError, match=match):
            DatasetArgs.from_dict(obj)


@pytest.fixture
def window_packs(tse_pack):
    frames = frames_list(9, 300, 2600, 7)
    mixes = [mixture(f"w{i}", f, 1 + i % 2) for i, f in enumerate(frames)]
    pack, mixtures = tse_pack("pw", mixes)
    return pack, mixtures


WINDOW_ARGS = dict(train_window=700, hist_frames=100, expand_targets=True,
                   batching={"type": "budget", "max_frames": 2400, "num_seqs_multiple_of": 2})


@pytest.mark.parametrize("world_size, num_workers", [(1, 0), (2, 2), (3, 0)])
def test_loader_scores_every_sample_once(window_packs, world_size, num_workers):
    pack, mixtures = window_packs
    loaders = [build(config(pack, **WINDOW_ARGS), rank=r, world_size=world_size, seed=4, num_workers=num_workers)
               for r in range(world_size)]
    assert len({len(l) for l in loaders}) == 1
    scored = {(m.key, spk): np.zeros(m.frames, dtype=np.int64) for m in mixtures.values() for spk in m.speakers}
    for l in loaders:
        for batch in l:
            rows, width = batch["scored"].shape
            assert width == batch["wav_target"].shape[-1]
            assert rows * width <= 2400 or rows <= 2
            assert rows % 2 == 0
            for r in range(rows):
                if not batch["valid"][r]:
                    continue
                m = mixtures[batch["key"][r]]
                slot = m.speakers.index(batch["spk"][r])
                fed = int(round(batch["chunk_ratio"][r]["start_ratio"] * m.frames))
                n = int(batch["lengths"][r])
                np.testing.assert_array_equal(batch["wav_target"][r, 0, :n].numpy(),
                                              m.target_f[slot, fed:fed + n].astype(np.float32))
                mask = batch["scored"][r].numpy()
                idx = np.flatnonzero(mask) + fed
                assert not mask[n:].any()
                scored[(m.key, batch["spk"][r])][idx] += 1
                assert idx[0] == 0 or idx[0] - fed == min(100, idx[0]), "hist_frames of context before a chunk"
    for key, counts in scored.items():
        assert np.all(counts == 1), f"{key}: samples scored {set(counts.tolist())} times"


def test_cli_plan(window_packs, tmp_path):
    pack, _ = window_packs
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"packs:\n  - path: {pack}\ndataset_args:\n  train_window: 700\n  hist_frames: 100\n"
                   f"  batching: {{type: budget, max_frames: 2400}}\n")
    result = CliRunner().invoke(main, ["plan", str(cfg), "--world-size", "2", "--epochs", "2"])
    assert result.exit_code == 0, result.output
    assert "train-window chunks" in result.output and "utilisation" in result.output
    assert result.output.count("batches per rank") == 2
    assert "1.000 epochs consumed" in result.output
    try:
        import matplotlib  # noqa: F401 (the `plot` extra, which scripts/test.sh installs)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("matplotlib is missing: pip install 'speechpack[plot]'")
        pytest.skip("matplotlib is missing: pip install 'speechpack[plot]'")
    result = CliRunner().invoke(main, ["plan", str(cfg), "--plot", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.fast
def test_cli_plan_plot_without_matplotlib_names_the_extra(window_packs, tmp_path, monkeypatch):
    pack, _ = window_packs
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"packs:\n  - path: {pack}\ndataset_args:\n  batch_size: 2\n")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    result = CliRunner().invoke(main, ["plan", str(cfg), "--plot", str(tmp_path / "p.png")])
    assert result.exit_code != 0 and "matplotlib" in result.output


@pytest.mark.fast
def test_cli_plan_with_pack_weights(tse_pack, tmp_path):
    """Budget batching and train windows over the weighting's selection: the realised shares are reported."""
    a, _ = tse_pack("qa", [mixture(f"a{i}", f, 1) for i, f in enumerate(frames_list(6, 300, 2600, 1))])
    b, _ = tse_pack("qb", [mixture(f"b{i}", f, 2) for i, f in enumerate(frames_list(3, 300, 2600, 2))])
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"packs:\n  - {{path: {a}, weight: 1, corpus: A}}\n  - {{path: {b}, weight: 3, corpus: B}}\n"
                   "dataset_args:\n  train_window: 700\n  hist_frames: 50\n"
                   "  batching: {type: budget, max_frames: 3000}\n")
    result = CliRunner().invoke(main, ["plan", str(cfg), "--world-size", "3", "--epochs", "2"])
    assert result.exit_code == 0, result.output
    assert "realised corpora: A" in result.output
