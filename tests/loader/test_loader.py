"""The training loader (``loader.build_loader``): packs in, WeSep-shaped TSE batches out.

What is pinned (see docs/loader.md: "What one epoch is", "Batching", "Batches", "Normalisation", "Resume"):
- exactly-once over ranks and workers, equal ``len()`` on every rank, the same batches whatever ``num_workers``;
- resume from ``state_dict()`` gives exactly the remaining batches, and a foreign state is refused;
- batches built from real recordings equal what was packed, row by row (mixture-major, WeSep's fields);
- WeSep's chunking (fixed and random start, pad/keep, the zero-chunk redraw), val padding and ``align: min``,
  ``whole_utt`` with ``filter_len``, ``expand_targets``;
- MuVAP normalisation from whole-recording statistics, computed here independently in float64;
- resampling at load time, and the errors a config or pack can raise.

Audio is generated (``make_wav``, int16 values, so packs store it bit-exactly) except in the real-recording tests.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soxr
import torch

from speechpack import loader
from factories import FULL_SCALE, Mix, at_rate
from factories.batches import assert_batches_equal
from factories.delivery import batch_differences, exactly_once_problems, origin
from factories.tse import (
    RATE,
    Mixture,
    build,
    config,
    mixture,
    take,
)
from speechpack.loader import open_pack
from speechpack.loader.config import ConfigError
from speechpack.loader.rng import batch_rng
from speechpack.schemas.errors import PlanError
from speechpack.loader.torch import ResumeError
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.errors import PackFormatError, SpeechpackError

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

NO_LABEL = -100


# ---------------------------------------------------------------------------------------------------------------
# Row checks (the generated mixtures and packs: factories.tse, the tse_pack and two_packs fixtures)
# ---------------------------------------------------------------------------------------------------------------


def start_of(ratio: dict) -> int:
    return int(round(ratio["start_ratio"] * ratio["orig_len"]))


def assert_rows_match(batch: dict, mixtures: dict[str, Mixture]) -> None:
    """Every row is its source at the row's window: ``[start, start + length)`` then zeros (no normalisation)."""
    width = batch["wav_target"].shape[-1]
    assert batch["wav_mix"].shape[-1] == width
    for r, (key, spk) in enumerate(zip(batch["key"], batch["spk"])):
        m = mixtures[key]
        slot = m.speakers.index(spk)
        s, n = start_of(batch["chunk_ratio"][r]), int(batch["lengths"][r])
        assert batch["chunk_ratio"][r]["orig_len"] == m.frames
        assert batch["num_speaker"][r] == len(m.speakers)
        np.testing.assert_array_equal(batch["wav_target"][r, 0, :n].numpy(),
                                      m.target_f[slot, s:s + n].astype(np.float32), err_msg=f"{key}/{spk}")
        np.testing.assert_array_equal(batch["wav_mix"][r, :, :n].numpy(), m.mix_f[:, s:s + n].astype(np.float32),
                                      err_msg=f"{key} mix (row {r})")
        assert not batch["wav_target"][r, :, n:].any() and not batch["wav_mix"][r, :, n:].any(), "padding is zeros"


def all_pairs(mixtures: dict[str, Mixture]) -> Counter:
    return Counter((m.key, spk) for m in mixtures.values() for spk in m.speakers)


def valid_pairs(batches: list[dict]) -> Counter:
    return Counter((k, s) for b in batches for k, s, v in zip(b["key"], b["spk"], b["valid"].tolist()) if v)


# ---------------------------------------------------------------------------------------------------------------
# Exactly once, across ranks and workers
# ---------------------------------------------------------------------------------------------------------------

TRAIN_ARGS = dict(batch_size=2, chunk_len=1000)


@pytest.mark.parametrize("world_size, num_workers", [(1, 0), (2, 0), (3, 0), (1, 3), (2, 1), (3, 3)])
def test_exactly_once_over_ranks_and_workers(two_packs, world_size, num_workers):
    packs, mixtures = two_packs
    cfg = config(*packs, **TRAIN_ARGS)
    loaders = [build(cfg, rank=r, world_size=world_size, num_workers=num_workers, seed=5) for r in range(world_size)]
    lengths = {len(l) for l in loaders}
    assert len(lengths) == 1, f"ranks have different len(): {lengths}"
    expected_len = -(-11 // (2 * world_size))
    assert lengths == {expected_len}
    per_rank = [list(l) for l in loaders]
    assert [len(b) for b in per_rank] == [expected_len] * world_size

    def describe(rank: int, index: int) -> str:  # the worker and slot a batch came from, for the message
        return f"rank {rank} " + origin(loaders[rank], index, per_rank[rank][index])

    # One message with everything a rare failure needs: each pair missing or repeated (rank, batch, row, worker,
    # slot), and each batch that differs from what one process builds (an overwritten slot shows up in both).
    problems = exactly_once_problems(per_rank, all_pairs(mixtures), describe)
    if num_workers:
        for rank, batches in enumerate(per_rank):
            reference = list(build(cfg, rank=rank, world_size=world_size, num_workers=0, seed=5))
            problems += batch_differences(batches, reference, functools.partial(describe, rank))
    assert not problems, "valid rows are not every (mixture, target) once, as one process builds them:\n" + \
        "\n".join(problems)
    everything = [b for batches in per_rank for b in batches]
    # Rows flagged invalid are the tail's repeats of real mixtures, counted by report().
    repeated_items = sum(len(set(k for k, v in zip(b["key"], b["valid"].tolist()) if not v)) for b in everything)
    assert repeated_items == loaders[0].report().padded_items == expected_len * 2 * world_size - 11
    for batch in everything:
        assert_rows_match(batch, mixtures)


def test_exactly_once_with_expanded_targets_and_drop(two_packs):
    packs, mixtures = two_packs
    cfg = config(*packs, batch_size=3, chunk_len=1000, expand_targets=True)
    per_rank = [list(build(cfg, rank=r, world_size=2)) for r in range(2)]
    assert valid_pairs([b for bs in per_rank for b in bs]) == all_pairs(mixtures)  # 22 targets, padded to 24
    cfg = config(*packs, batch_size=3, chunk_len=1000, expand_targets=True, tail="drop")
    loaders = [build(cfg, rank=r, world_size=2) for r in range(2)]
    report = loaders[0].report()
    assert (report.items, report.dropped_items, report.padded_items) == (22, 4, 0)
    batches = [b for l in loaders for b in l]
    seen = valid_pairs(batches)
    assert all(v for b in batches for v in b["valid"].tolist())
    assert max(seen.values()) == 1 and sum(seen.values()) == 18 and set(seen) <= set(all_pairs(mixtures))


def test_set_epoch_changes_order_and_is_reproducible(two_packs):
    packs, mixtures = two_packs
    l = build(config(*packs, **TRAIN_ARGS), seed=3)
    epoch0 = list(l)
    l.set_epoch(1)
    assert l.epoch == 1
    epoch1 = list(l)
    assert [b["key"] for b in epoch0] != [b["key"] for b in epoch1], "a new epoch keeps the order"
    assert valid_pairs(epoch1) == all_pairs(mixtures)
    l.set_epoch(0)
    assert_batches_equal(list(l), epoch0)
    # Without shuffle the order stays, but the random chunk windows are drawn afresh.
    l = build(config(*packs, shuffle=False, **TRAIN_ARGS), seed=3)
    first = list(l)
    l.set_epoch(1)
    second = list(l)
    assert [b["key"] for b in first] == [b["key"] for b in second]
    starts = lambda batches: [r["start_ratio"] for b in batches for r in b["chunk_ratio"]]  # noqa: E731
    assert starts(first) != starts(second)


def test_bad_rank_state_or_seed_fail_at_build(two_packs):
    packs, _ = two_packs
    cfg = config(*packs)
    with pytest.raises(PlanError, match="rank"):
        build(cfg, rank=2, world_size=2)
    with pytest.raises(ConfigError, match="state"):
        build(cfg, "training")
    with pytest.raises(ConfigError, match="seed"):
        build(cfg, seed=-1)


# ---------------------------------------------------------------------------------------------------------------
# Resume
# ---------------------------------------------------------------------------------------------------------------

RESUME_ARGS = dict(batch_size=1, chunk_len=1000)


def test_resume_gives_the_remaining_batches(two_packs):
    packs, _ = two_packs
    cfg = config(*packs, **RESUME_ARGS)
    kwargs = dict(rank=1, world_size=2, seed=9)
    full = list(build(cfg, **kwargs))
    assert len(full) == 6
    first = build(cfg, **kwargs)
    head = take(first, 2)
    assert_batches_equal(head, full[:2])
    state = first.state_dict()
    assert state["batches_consumed"] == 2 and state["epoch"] == 0
    state = json.loads(json.dumps(state))  # a checkpoint holds plain data
    for num_workers in (0, 2):
        resumed = build(cfg, num_workers=num_workers, **kwargs)
        resumed.load_state_dict(state)
        assert_batches_equal(list(resumed), full[2:])
        # The resume applies to one pass; the next pass is the whole epoch again.
        assert_batches_equal(list(resumed), full)


def test_resume_mid_epoch_of_a_later_epoch_on_the_same_loader_with_workers(two_packs):
    packs, _ = two_packs
    cfg = config(*packs, **RESUME_ARGS)
    reference = build(cfg, seed=4)
    reference.set_epoch(3)
    full = list(reference)
    l = build(cfg, seed=4, num_workers=2)
    l.set_epoch(3)
    take(l, 5)
    state = l.state_dict()
    assert (state["epoch"], state["batches_consumed"]) == (3, 5)
    # Back in the same process, the persistent workers were mid-prefetch: their batches must not leak in.
    l.load_state_dict(state)
    assert_batches_equal(list(l), full[5:])
    fresh = build(cfg, seed=4)
    fresh.load_state_dict(state)
    assert fresh.epoch == 3
    assert_batches_equal(list(fresh), full[5:])


def test_state_after_set_epoch_counts_from_the_new_epoch(two_packs):
    packs, _ = two_packs
    l = build(config(*packs, **RESUME_ARGS))
    take(l, 3)  # a pass left early (e.g. a step limit), then the next epoch begins
    l.set_epoch(1)
    assert l.state_dict()["batches_consumed"] == 0


def test_state_after_a_finished_pass_resumes_with_nothing_left(two_packs):
    packs, _ = two_packs
    cfg = config(*packs, **RESUME_ARGS)
    l = build(cfg)
    list(l)
    resumed = build(cfg)
    resumed.load_state_dict(l.state_dict())
    assert list(resumed) == [], "the epoch was already consumed"


def test_foreign_state_is_refused_naming_the_key(two_packs, tse_pack):
    packs, mixtures = two_packs
    cfg = config(*packs, **RESUME_ARGS)
    l = build(cfg, world_size=2, seed=9)
    take(l, 1)
    state = l.state_dict()
    with pytest.raises(ResumeError, match="seed"):
        build(cfg, world_size=2, seed=10).load_state_dict(state)
    build(cfg, world_size=3, seed=9).load_state_dict(state)  # another world size resumes (test_resume_world.py)
    with pytest.raises(ResumeError, match="fingerprint"):  # another config
        build(config(*packs, batch_size=2, chunk_len=1000), world_size=2, seed=9).load_state_dict(state)
    with pytest.raises(ResumeError, match="fingerprint"):  # another state
        build(cfg, "val", world_size=2, seed=9).load_state_dict(state)
    other, _ = tse_pack("other", [mixture("c0", 900)])  # another pack
    with pytest.raises(ResumeError, match="fingerprint"):
        build(config(packs[0], other, **RESUME_ARGS), world_size=2, seed=9).load_state_dict(state)
    with pytest.raises(ResumeError, match="state_version"):
        build(cfg, world_size=2, seed=9).load_state_dict({**state, "state_version": 99})
    with pytest.raises(ResumeError, match="batches_consumed"):
        build(cfg, world_size=2, seed=9).load_state_dict({k: v for k, v in state.items() if k != "batches_consumed"})
    with pytest.raises(ResumeError, match="outside"):
        build(cfg, world_size=2, seed=9).load_state_dict({**state, "batches_consumed": 7})
    # The same loader on the other rank, or with other workers, accepts it.
    build(cfg, rank=1, world_size=2, seed=9, num_workers=1).load_state_dict(state)


# ---------------------------------------------------------------------------------------------------------------
# Real recordings
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("corpus", ["pocketsphinx", "alsa"])
def test_real_recordings_round_trip(real_audio, wesep_list, tmp_path, corpus):
    """Val batches are whole utterances equal to the pack, which is within int16 quantisation of the source."""
    if corpus == "pocketsphinx":
        p = real_audio("pocketsphinx", 4)
        case = wesep_list([Mix("ps-a", (p[0], p[1]), seconds=1.0), Mix("ps-b", (p[1], p[2], p[3]), start=0.5)])
    else:
        p = real_audio("alsa", 3)
        case = wesep_list([Mix("al-a", (p[0], p[1]), seconds=0.8, start=0.2, layout="two_files"),
                           Mix("al-b", (p[2], p[0], p[1]), seconds=1.0, start=0.1, layout="two_files")])
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), sample_rate=16000, progress=False))
    pack = open_pack(out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        l = build(config(str(out), batch_size=2, shuffle=False), "val")
    assert not [w for w in caught if "resampl" in str(w.message)], "the pack is at the training rate"
    [batch] = list(l)
    lines = case.lines
    expected_keys = [line.key for line in lines for _ in line.speakers]
    assert batch["key"] == expected_keys
    assert batch["spk"] == [s for line in lines for s in line.speakers]
    assert batch["num_speaker"] == [len(line.speakers) for line in lines for _ in line.speakers]
    rows = len(expected_keys)
    assert batch["speaker_label"].dtype == torch.int64
    assert batch["speaker_label"].tolist() == [NO_LABEL] * rows
    assert batch["valid"].dtype == torch.bool and batch["valid"].all()
    frames = [int(pack.num_frames[i]) for i, line in enumerate(lines) for _ in line.speakers]
    assert batch["lengths"].tolist() == frames
    assert batch["wav_mix"].shape == (rows, pack.sample(0).mix.shape[0], max(frames))
    assert batch["wav_target"].shape == (rows, 1, max(frames))
    r = 0
    for i, line in enumerate(lines):
        stored = pack.sample(i)
        n = stored.targets.shape[1]
        mix_scale = float(pack.streams["mix"].scale[pack.segments_of("mix", i)[0]])
        expected_mix = at_rate(line.mix, line.rate, 16000)
        expected_targets = at_rate(line.targets, line.rate, 16000)
        assert expected_targets.shape[1] == n
        first_row = r
        for slot in range(len(line.speakers)):
            target = batch["wav_target"][r, 0].numpy()
            np.testing.assert_array_equal(target[:n], stored.targets[slot], err_msg=f"{line.key} row {r}")
            assert not target[n:].any()
            segment = pack.segments_of("target", i)[slot]
            scale = float(pack.streams["target"].scale[segment])
            error = np.abs(target[:n] - expected_targets[slot]).max()
            assert error <= scale / FULL_SCALE, f"{line.key} target {slot}: {error * FULL_SCALE:.2f} int16 steps"
            if line.rate == 16000:
                np.testing.assert_array_equal(target[:n], expected_targets[slot].astype(np.float32))
            # wav_mix repeated per target row.
            np.testing.assert_array_equal(batch["wav_mix"][r].numpy(), batch["wav_mix"][first_row].numpy())
            r += 1
        mix = batch["wav_mix"][first_row].numpy()
        np.testing.assert_array_equal(mix[:, :n], stored.mix)
        assert not mix[:, n:].any()
        assert np.abs(mix[:, :n] - expected_mix).max() <= mix_scale / FULL_SCALE
    assert r == rows


# ---------------------------------------------------------------------------------------------------------------
# Chunking (docs/loader.md, "What one epoch is")
# ---------------------------------------------------------------------------------------------------------------


def test_fixed_start_chunks_are_prefixes(tse_pack):
    mixes = [mixture("long", 3000, 3, channels=2), mixture("mid", 2500, 2, channels=2)]
    pack, mixtures = tse_pack("fixed", mixes)
    L = 1000
    [batch] = list(build(config(pack, batch_size=2, chunk_len=L, chunk_random_start=False, shuffle=False)))
    assert batch["key"] == ["long"] * 3 + ["mid"] * 2
    assert batch["wav_mix"].shape == (5, 2, L)
    for r, key in enumerate(batch["key"]):
        m = mixtures[key]
        slot = m.speakers.index(batch["spk"][r])
        assert batch["chunk_ratio"][r] == {"start_ratio": 0.0, "end_ratio": L / m.frames, "orig_len": m.frames,
                                           "chunk_len": L}
        np.testing.assert_array_equal(batch["wav_target"][r, 0].numpy(), m.target_f[slot, :L].astype(np.float32))
        np.testing.assert_array_equal(batch["wav_mix"][r].numpy(), m.mix_f[:, :L].astype(np.float32))
    assert batch["lengths"].tolist() == [L] * 5


def test_random_start_shares_one_window_per_mixture(tse_pack):
    mixes = [mixture("r0", 3000, 3, channels=2), mixture("r1", 2200, 2, channels=2), mixture("r2", 1500, 1, channels=2)]
    pack, mixtures = tse_pack("rand", mixes)
    L = 1000
    l = build(config(pack, batch_size=3, chunk_len=L), seed=1)
    starts = {key: set() for key in mixtures}
    for epoch in range(6):
        l.set_epoch(epoch)
        [batch] = list(l)
        assert_rows_match(batch, mixtures)  # every field is the source at the row's start
        for r, key in enumerate(batch["key"]):
            ratio = batch["chunk_ratio"][r]
            s, T = start_of(ratio), mixtures[key].frames
            assert 0 <= s <= T - L
            assert ratio["end_ratio"] == pytest.approx((s + L) / T) and ratio["chunk_len"] == L
            assert batch["lengths"][r] == L
            starts[key].add(s)
        # One window per mixture: its target rows share the offset of its mixture rows.
        by_key = {}
        for r, key in enumerate(batch["key"]):
            by_key.setdefault(key, set()).add(start_of(batch["chunk_ratio"][r]))
        assert all(len(s) == 1 for s in by_key.values())
    assert all(len(s) >= 4 for s in starts.values()), f"starts do not vary: {starts}"


def test_short_items_pad_or_keep(tse_pack):
    pack, mixtures = tse_pack("short", [mixture("short", 600, 2), mixture("long", 3000, 1)])
    L = 1000
    short = mixtures["short"]
    [batch] = list(build(config(pack, batch_size=2, chunk_len=L, shuffle=False)))
    assert batch["wav_target"].shape == (3, 1, L)
    for r in range(2):  # the short mixture's rows: whole item, right zeros to L
        assert batch["chunk_ratio"][r] == {"start_ratio": 0.0, "end_ratio": L / 600, "orig_len": 600, "chunk_len": L}
        assert batch["chunk_ratio"][r]["end_ratio"] > 1
        np.testing.assert_array_equal(batch["wav_target"][r, 0, :600].numpy(), short.target_f[r].astype(np.float32))
        assert not batch["wav_target"][r, 0, 600:].any() and not batch["wav_mix"][r, 0, 600:].any()
    assert batch["lengths"].tolist() == [600, 600, L]
    assert_rows_match(batch, mixtures)
    # keep: the short item keeps its length (a batch of it alone is 600 wide) and end_ratio 1.
    l = build(config(pack, batch_size=1, chunk_len=L, shuffle=False, chunk_short_policy="keep"))
    alone, other = list(l)
    assert alone["wav_mix"].shape == (2, 1, 600) and alone["wav_target"].shape == (2, 1, 600)
    assert alone["chunk_ratio"] == [{"start_ratio": 0.0, "end_ratio": 1.0, "orig_len": 600, "chunk_len": 600}] * 2
    assert_rows_match(alone, mixtures)
    assert other["wav_mix"].shape == (1, 1, L)
    [together] = list(build(config(pack, batch_size=2, chunk_len=L, shuffle=False, chunk_short_policy="keep")))
    assert together["chunk_ratio"][0]["chunk_len"] == 600 and together["lengths"].tolist() == [600, 600, L]
    assert_rows_match(together, mixtures)


def test_silent_head_redraws_the_window(tse_pack):
    """WeSep re-draws a window up to 3 times while the mixture chunk is all zeros: the draws are the batch's
    counter-based stream (``batch_rng(seed, epoch, global_batch)``), so the expected start is computed here."""
    T, L, loud = 4000, 1000, 2000
    target = np.zeros(T)
    target[T - loud:] = np.random.default_rng(0).uniform(-0.3, 0.3, loud)
    pack, mixtures = tse_pack("head", [mixture("quiet-head", T, targets=target)])
    m = mixtures["quiet-head"]
    l = build(config(pack, batch_size=1, chunk_len=L), seed=2)
    redrawn = silent = 0
    for epoch in range(40):
        l.set_epoch(epoch)
        [batch] = list(l)
        draws = batch_rng(2, epoch, 0).random((1, 4))[0]
        candidates = [int(d * (T - L + 1)) for d in draws]
        audible = [s for s in candidates if m.mix[:, s:s + L].any()]
        expected = audible[0] if audible else candidates[-1]
        assert start_of(batch["chunk_ratio"][0]) == expected
        assert_rows_match(batch, mixtures)
        chunk_audible = bool(batch["wav_mix"].any())
        assert chunk_audible == bool(audible), "the chunk is silent although a draw was audible"
        redrawn += bool(audible) and not m.mix[:, candidates[0]:candidates[0] + L].any()
        silent += not chunk_audible
    assert redrawn >= 5, "the test never exercised a redraw"
    assert silent <= 3  # 0.33**4 per epoch with the redraws, 0.33 without


def test_val_pads_to_the_longest_and_align_min_crops(tse_pack):
    pack, mixtures = tse_pack("val", [mixture("three", 3 * RATE, 2), mixture("five", 5 * RATE, 1)],
                              shard_bytes=1 << 20)
    [batch] = list(build(config(pack, batch_size=2, shuffle=False), "val"))
    assert batch["wav_mix"].shape == (3, 1, 5 * RATE) and batch["wav_target"].shape == (3, 1, 5 * RATE)
    assert batch["lengths"].tolist() == [3 * RATE, 3 * RATE, 5 * RATE]
    assert_rows_match(batch, mixtures)  # whole utterances, the 3 s rows padded with zeros to 5 s
    assert [c["chunk_len"] for c in batch["chunk_ratio"]] == [3 * RATE] * 2 + [5 * RATE]
    collate = {"wav_mix": {"align": "min"}, "wav_target": {"align": "min"}}
    [cropped] = list(build(config(pack, batch_size=2, shuffle=False, collate=collate), "val"))
    assert cropped["wav_mix"].shape == (3, 1, 3 * RATE) and cropped["wav_target"].shape == (3, 1, 3 * RATE)
    assert cropped["lengths"].tolist() == [3 * RATE] * 3
    for name in ("wav_mix", "wav_target"):
        assert torch.equal(cropped[name], batch[name][..., :3 * RATE])
    # Train with whole_utt behaves the same (no chunking).
    [whole] = list(build(config(pack, batch_size=2, shuffle=False, whole_utt=True)))
    assert_batches_equal([whole], [batch])


def test_whole_utt_filter_len_drops_and_reports(tse_pack):
    seconds = {"f02": 0.2, "f04": 0.4, "f05": 0.5, "f06": 0.6, "f08": 0.8}
    pack, mixtures = tse_pack("filter", [mixture(k, int(s * RATE), 1) for k, s in seconds.items()])
    args = dict(batch_size=1, whole_utt=True, filter_len=True,
                filter_len_args={"min_num_seconds": 0.3, "max_num_seconds": 0.6})
    l = build(config(pack, **args))
    report = l.report()
    assert (report.items, report.filtered, report.batches_per_rank) == (3, 2, 3)
    batches = list(l)
    assert sorted(b["key"][0] for b in batches) == ["f04", "f05", "f06"]  # bounds are inclusive
    for b in batches:
        assert b["wav_mix"].shape[-1] == mixtures[b["key"][0]].frames  # whole utterances
    # WeSep filters in train with whole_utt only: not when chunking, never in val.
    assert build(config(pack, **{**args, "whole_utt": False})).report().filtered == 0
    assert build(config(pack, **args), "val").report().filtered == 0


# ---------------------------------------------------------------------------------------------------------------
# expand_targets
# ---------------------------------------------------------------------------------------------------------------


def test_expand_targets_rows_equal_the_mixture_rows(two_packs):
    packs, mixtures = two_packs
    plain = list(build(config(*packs, batch_size=2, shuffle=False), "val"))
    expanded_loader = build(config(*packs, batch_size=2, shuffle=False, expand_targets=True), "val")
    assert expanded_loader.report().items == 22
    expanded = list(expanded_loader)

    def rows(batches):
        out = []
        for b in batches:
            for r in range(len(b["key"])):
                if b["valid"][r]:
                    n = int(b["lengths"][r])
                    out.append((b["key"][r], b["spk"][r], b["wav_mix"][r, :, :n], b["wav_target"][r, :, :n]))
        return out

    a, e = rows(plain), rows(expanded)
    assert [(k, s) for k, s, _, _ in a] == [(k, s) for k, s, _, _ in e]  # the same rows, in the same order
    for (key, spk, mix_a, target_a), (_, _, mix_e, target_e) in zip(a, e):
        assert torch.equal(mix_a, mix_e) and torch.equal(target_a, target_e), f"{key}/{spk}"
    assert all(n == 1 for b in expanded for n in b["num_speaker"])
    assert {len(b["key"]) for b in expanded} == {2}  # one row per item


# ---------------------------------------------------------------------------------------------------------------
# MuVAP normalisation
# ---------------------------------------------------------------------------------------------------------------


def muvap_reference(x: np.ndarray) -> tuple[float, float]:
    """(mean, gain) of a whole recording in float64, as docs/loader.md ("Normalisation") defines them."""
    mu = float(x.mean())
    sigma = float(np.sqrt(np.mean((x - mu) ** 2)))
    peak = float(np.abs(x - mu).max())
    if sigma <= 1e-8 or peak <= 1e-8:
        return mu, 1.0
    return mu, min(10 ** (-25 / 20) / sigma, 10 ** (20 / 20), 0.99 / peak)


@pytest.fixture
def norm_pack(tse_pack):
    T = 4000
    rng = np.random.default_rng(7)
    half = T // 2
    # Loud then quiet, with DC: the chunk's own statistics would give a very different gain.
    loud = np.concatenate([rng.uniform(-0.45, 0.45, half), rng.uniform(-0.04, 0.04, T - half)]) + 0.05
    other = rng.uniform(-0.1, 0.1, T)
    quiet = rng.uniform(-0.001, 0.001, (2, T))  # rms gain ~97: capped at 20 dB
    spiky = rng.uniform(-0.01, 0.01, T)
    spiky[1234] = 0.6  # rms gain ~5, peak gain 1.65: the peak cap binds
    cancel = rng.uniform(-0.2, 0.2, T)  # targets x and -x: a silent mixture, gain 1
    mixes = [
        mixture("loud", T, targets=np.stack([loud, other])),
        mixture("quiet", T, targets=quiet),
        mixture("spiky", T, targets=spiky),
        mixture("cancel", T, targets=np.stack([cancel, -cancel])),
        mixture("zeros", T, targets=np.zeros(T)),
    ]
    pack, mixtures = tse_pack("norm", mixes, shard_bytes=1 << 20)
    gains = {k: muvap_reference(m.mix_f)[1] for k, m in mixtures.items()}
    # The cases are what their names say.
    assert gains["loud"] < 0.5
    assert gains["quiet"] == 10.0
    spiky = mixtures["spiky"].mix_f
    assert gains["spiky"] == pytest.approx(0.99 / np.abs(spiky - spiky.mean()).max())
    assert gains["cancel"] == gains["zeros"] == 1.0
    return pack, mixtures


def normalised(m: Mixture) -> tuple[np.ndarray, np.ndarray]:
    """(mix, targets) normalised with the mixture's whole-recording gain, each stream minus its own mean."""
    mu_mix, gain = muvap_reference(m.mix_f)
    targets = np.stack([(t - t.mean()) * gain for t in m.target_f])
    return (m.mix_f - mu_mix) * gain, targets


def assert_normalised_rows(batch: dict, mixtures: dict[str, Mixture]) -> None:
    for r, (key, spk) in enumerate(zip(batch["key"], batch["spk"])):
        m = mixtures[key]
        mix, targets = normalised(m)
        s, n = start_of(batch["chunk_ratio"][r]), int(batch["lengths"][r])
        np.testing.assert_allclose(batch["wav_mix"][r, :, :n].numpy(), mix[:, s:s + n], rtol=0, atol=2e-6,
                                   err_msg=f"{key} mix")
        np.testing.assert_allclose(batch["wav_target"][r, 0, :n].numpy(), targets[m.speakers.index(spk), s:s + n],
                                   rtol=0, atol=2e-6, err_msg=f"{key}/{spk}")
        assert not batch["wav_mix"][r, :, n:].any() and not batch["wav_target"][r, :, n:].any(), "pad is 0, not -mu*g"


def test_normalise_whole_utterances(norm_pack):
    pack, mixtures = norm_pack
    [batch] = list(build(config(pack, batch_size=5, shuffle=False, normalize="muvap"), "val"))
    assert torch.isfinite(batch["wav_mix"]).all() and torch.isfinite(batch["wav_target"]).all()
    assert_normalised_rows(batch, mixtures)
    rows = {key: r for r, key in reversed(list(enumerate(batch["key"])))}
    # The peak cap: the spike lands at 0.99 after DC removal.
    assert float(batch["wav_mix"][rows["spiky"]].abs().max()) == pytest.approx(0.99, abs=1e-6)
    # A silent mixture gives silence (no NaN), its targets are unscaled.
    assert not batch["wav_mix"][rows["zeros"]].any() and not batch["wav_mix"][rows["cancel"]].any()
    # Mixture and targets share the mixture's gain: the mixture stays the sum of its targets.
    for key, first in rows.items():
        n = len(mixtures[key].speakers)
        total = batch["wav_target"][first:first + n, 0].sum(0)
        np.testing.assert_allclose(batch["wav_mix"][first, 0].numpy(), total.numpy(), atol=1e-5, err_msg=key)
    # Other spellings mean the same.
    for spelling in (True, {"type": "muvap"}):
        [same] = list(build(config(pack, batch_size=5, shuffle=False, normalize=spelling), "val"))
        assert_batches_equal([same], [batch])
    [raw] = list(build(config(pack, batch_size=5, shuffle=False, normalize=False), "val"))
    assert_rows_match(raw, mixtures)


def test_normalise_chunks_use_whole_recording_statistics(norm_pack, tse_pack):
    pack, mixtures = norm_pack
    l = build(config(pack, batch_size=5, chunk_len=1000, normalize="muvap"), seed=3)
    starts = set()
    for epoch in range(4):
        l.set_epoch(epoch)
        [batch] = list(l)
        assert_normalised_rows(batch, mixtures)
        starts |= {start_of(c) for c in batch["chunk_ratio"]}
    assert len(starts) > 5
    # A short item padded to chunk_len: the pad stays zero.
    short_pack, short = tse_pack("norm-short", [mixture("tiny", 500, 2, amplitude=0.5)])
    [batch] = list(build(config(short_pack, batch_size=1, chunk_len=1000, normalize="muvap")))
    assert batch["wav_mix"].shape[-1] == 1000
    assert_normalised_rows(batch, short)


# ---------------------------------------------------------------------------------------------------------------
# Resampling at load time
# ---------------------------------------------------------------------------------------------------------------


def test_resample_at_load_warns_and_matches_soxr(tse_pack):
    pack, mixtures = tse_pack("hi", [mixture("h0", 3201, 2), mixture("h1", 4000, 1)], rate=16000)
    with pytest.warns(UserWarning, match="resampl"):
        l = build(config(pack, batch_size=2, shuffle=False, resample_rate=8000), "val")
    [batch] = list(l)
    stored = open_pack(pack)
    r = 0
    for i, key in enumerate(["h0", "h1"]):
        sample = stored.sample(i)
        mix = soxr.resample(np.ascontiguousarray(sample.mix.T), 16000, 8000).T
        targets = soxr.resample(np.ascontiguousarray(sample.targets.T), 16000, 8000).T
        n = mix.shape[1]
        assert abs(n - mixtures[key].frames / 2) <= 1
        for slot in range(len(mixtures[key].speakers)):
            assert batch["key"][r] == key and batch["lengths"][r] == n
            np.testing.assert_allclose(batch["wav_target"][r, 0, :n].numpy(), targets[slot], rtol=0, atol=1e-6)
            np.testing.assert_allclose(batch["wav_mix"][r, :, :n].numpy(), mix, rtol=0, atol=1e-6)
            r += 1
    assert batch["wav_mix"].shape[-1] == 2000
    # chunk_len is in samples at the loader's rate.
    with pytest.warns(UserWarning, match="resampl"):
        [chunked] = list(build(config(pack, batch_size=2, chunk_len=1000, resample_rate=8000)))
    assert chunked["wav_mix"].shape[-1] == 1000


# ---------------------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg, name", [
    ({"dataset_args": {}, "dataset_arg": {}}, "dataset_arg"),  # other top-level keys are a recipe's trainer's
    ({"dataset_args": {"chunk_length": 100}}, "chunk_length"),
    ({"dataset_args": {"collate": {"wav_mixture": {"align": "min"}}}}, "wav_mixture"),
    ({"dataset_args": {"collate": {"wav_mix": {"alignment": "min"}}}}, "alignment"),
    ({"dataset_args": {"filter_len_args": {"min_seconds": 1}}}, "min_seconds"),
])
def test_unknown_config_key_is_named(two_packs, cfg, name):
    packs, _ = two_packs
    with pytest.raises(ConfigError, match=name):
        build({"packs": [{"path": packs[0]}], **cfg})


def test_unknown_pack_entry_key_and_bad_values(two_packs):
    packs, _ = two_packs
    with pytest.raises(ConfigError, match="weights"):
        build({"packs": [{"path": packs[0], "weights": 2}]})
    with pytest.raises(ConfigError, match="align"):
        build(config(packs[0], collate={"wav_mix": {"align": "mean"}}))
    with pytest.raises(ConfigError, match="chunk_short_policy"):
        build(config(packs[0], chunk_short_policy="wrap"))


def test_online_mix_is_refused(two_packs):
    packs, _ = two_packs
    with pytest.raises(ConfigError, match="online_mix"):
        build(config(packs[0], online_mix=True))
    assert len(build(config(packs[0], online_mix=False))) == 7  # present and false is fine (WeSep configs)


def test_unknown_major_version_is_refused(two_packs):
    packs, _ = two_packs
    manifest_path = Path(packs[1]) / "dataset.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["format_version"] = 2
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(PackFormatError, match="reads format_version 1"):
        build(config(*packs))


def test_mixed_channel_counts_in_one_batch(tse_pack):
    pack, _ = tse_pack("channels", [mixture("mono", 1000, 2), mixture("stereo", 1000, 2, channels=2)])
    with pytest.raises(SpeechpackError, match=r"different channel counts \[1, 2\]"):
        list(build(config(pack, batch_size=2, shuffle=False), "val"))
    # In separate batches they load.
    shapes = [b["wav_mix"].shape[1] for b in build(config(pack, batch_size=1, shuffle=False), "val")]
    assert shapes == [1, 2]


# ---------------------------------------------------------------------------------------------------------------
# Issue 13, defect 12: load_state_dict validates the whole state before it changes anything
# ---------------------------------------------------------------------------------------------------------------


def loader_at_epoch_2(packs) -> tuple:
    """A loader moved to epoch 2 with one batch consumed, and its state."""
    l = build(config(*packs, **RESUME_ARGS), world_size=2, seed=9)
    l.set_epoch(2)
    take(l, 1)
    return l, l.state_dict()


def test_refused_state_leaves_the_loader_where_it_was(two_packs):
    """Before: a state refused for its batches_consumed had already moved the loader from epoch 2 to epoch 9."""
    packs, _ = two_packs
    l, before = loader_at_epoch_2(packs)
    with pytest.raises(ResumeError, match="batches_consumed"):
        l.load_state_dict({**before, "epoch": 9, "batches_consumed": 10 ** 6})
    assert l.epoch == 2 and l.state_dict() == before
    with pytest.raises(ResumeError, match="fingerprint"):
        l.load_state_dict({**before, "epoch": 9, "fingerprint": "0" * 16})
    assert l.state_dict() == before


@pytest.mark.parametrize("key", ["epoch", "batches_consumed"])
@pytest.mark.parametrize("value", ["abc", None, 1e30, 10 ** 30, 2.9, 12.7, 1.0, True, -1, [1]])
def test_bad_values_raise_resume_error_and_change_nothing(two_packs, key, value):
    """Before: "abc", None and 1e30 raised bare ValueError/TypeError/OverflowError, 2.9 and 12.7 were truncated."""
    packs, _ = two_packs
    l, before = loader_at_epoch_2(packs)
    with pytest.raises(ResumeError, match=f"loader state {key} must be an integer"):
        l.load_state_dict({**before, key: value})
    assert l.epoch == 2 and l.state_dict() == before


@pytest.mark.parametrize("state", ["abc", None, [1, 2], 3])
def test_a_state_that_is_not_a_dict_is_refused(two_packs, state):
    packs, _ = two_packs
    l, before = loader_at_epoch_2(packs)
    with pytest.raises(ResumeError, match="loader state must be a dict"):
        l.load_state_dict(state)
    assert l.state_dict() == before


@pytest.mark.parametrize("key, value", [("seed", 9.0), ("seed", True), ("world_size", "2"), ("state_version", 1.0),
                                        ("fingerprint", None)])
def test_matched_keys_compare_types_too(two_packs, key, value):
    packs, _ = two_packs
    l, before = loader_at_epoch_2(packs)
    with pytest.raises(ResumeError, match=key):
        l.load_state_dict({**before, key: value})
    assert l.state_dict() == before


def test_set_epoch_refuses_non_integers(two_packs):
    packs, _ = two_packs
    l, before = loader_at_epoch_2(packs)
    for bad in (2.9, "3", None, 1e30, True, -1):
        with pytest.raises(ConfigError, match="epoch must be an integer"):
            l.set_epoch(bad)
    assert l.state_dict() == before
    l.set_epoch(np.int64(3))
    assert l.epoch == 3 and type(l.state_dict()["epoch"]) is int


def test_a_valid_state_still_resumes_the_remaining_batches(two_packs):
    packs, _ = two_packs
    _, state = loader_at_epoch_2(packs)
    reference = build(config(*packs, **RESUME_ARGS), world_size=2, seed=9)
    reference.set_epoch(2)
    resumed = build(config(*packs, **RESUME_ARGS), world_size=2, seed=9)
    resumed.load_state_dict(json.loads(json.dumps(state)))  # as a JSON checkpoint round trip gives it back
    assert resumed.epoch == 2
    assert_batches_equal(list(resumed), list(reference)[1:])
