"""Resuming at another world size (docs/loader.md, "Resume"; ``loader/plan/static_plan.py``, ``loader/resume.py``).

A state saved by four ranks mid-epoch resumes on two and on eight, for every task (TSE, ASR budget batches, ASD
train chunks) on packs of real speech: over the epoch, the valid rows of the batches handed out before the save
and after the resume are every item exactly once, every rank of a pass takes the same number of steps, and each
global batch is bit for bit the batch one process builds as that global batch, whichever world size and worker
count dealt it.  The same through a resumed resume, torchdata's loader, the Lightning DataModule and a pack read
by URL through the node cache (a real S3-protocol server on loopback); a changed seed, config or pack is refused
naming the key.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from factories import Mix
from factories.asd_tracks import TRACKS, write_asd_pack
from factories.asr import librivox_clips, librivox_span_pack
from factories.batches import field_differences
from factories.wesep_lists import write_mixture
from speechpack.loader import build_loader
from speechpack.loader.resume import ResumeError
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning",
                                        "ignore:.*no 25 Hz model frame:UserWarning",
                                        "ignore:'set_vital' is deprecated:UserWarning")

SEED, EPOCH = 3, 1
#: The world size that saves, and the ones that resume.
SAVED_AT, RESUMED_AT = 4, (2, 8)


# ---------------------------------------------------------------------------------------------------------------
# Packs of real speech, one config per task
# ---------------------------------------------------------------------------------------------------------------


def speech() -> list[str]:
    """The LibriVox clips (16 kHz mono; a missing one fails in CI and skips elsewhere, naming the package)."""
    return [clip.path for clip in librivox_clips()]


def tse_pack(root: Path, mixes: list[Mix]) -> str:
    """A tse pack of ``mixes`` (cropped from real recordings into ``root``), at 16 kHz, about a mixture per shard."""
    records = [write_mixture(mix, root / mix.key, number).record for number, mix in enumerate(mixes, start=1)]
    (root / "raw.list").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    build_wesep(str(root / "raw.list"), BuildOptions(out=str(root / "pack"), sample_rate=16000, shard_bytes=100_000,
                                                     progress=False))
    return str(root / "pack")


@pytest.fixture(scope="module")
def tse_config(tmp_path_factory) -> dict:
    """13 two-speaker mixtures of LibriVox speech, one per batch (13 global batches: 4 ranks pad 3), 0.5 s
    chunks at random offsets (drawn per global batch)."""
    p = speech()
    mixes = [Mix(f"m{i:02d}", (p[i % 4], p[(i + 1) % 4]), seconds=0.6 + 0.1 * (i % 3), start=0.1 * (i % 7))
             for i in range(13)]
    pack = tse_pack(tmp_path_factory.mktemp("tse"), mixes)
    return {"packs": [{"path": pack}], "dataset_args": {"batch_size": 1, "chunk_len": 8000}}


@pytest.fixture(scope="module")
def asr_config(tmp_path_factory) -> dict:
    """30 spans (0.3-1.5 s) of the LibriVox clips in budget batches of at most 48,000 samples (rows x longest)."""
    out = librivox_span_pack(tmp_path_factory.mktemp("asr"), 30, seed=5, seconds=(0.3, 1.5), words=3)
    return {"task": "asr", "packs": [{"path": out}], "dataset_args": {"max_num_elements": 48_000}}


@pytest.fixture(scope="module")
def asd_config(tmp_path_factory) -> dict:
    """MuVAP train chunks of the ASD tracks (real speech, traceable faces), with augmentation (drawn per row)."""
    path = str(tmp_path_factory.mktemp("asd") / "pack")
    write_asd_pack(path, TRACKS, speech())
    return {"task": "asd", "packs": [{"path": path}],
            "dataset_args": {"train_window": 60, "hist_frames": 20, "frame_budget": 120, "min_batch": 1,
                             "max_batch": 2}}


def rows(batch: dict) -> list:
    """What identifies each valid row: (mixture, target), the utterance, or (track, chunk start)."""
    valid = batch["valid"].tolist()
    if "spk" in batch:
        ids = list(zip(batch["key"], batch["spk"]))
    elif "start" in batch:
        ids = list(zip(batch["key"], batch["start"].tolist()))
    else:
        ids = list(batch["key"])
    return [i for i, ok in zip(ids, valid) if ok]


# ---------------------------------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------------------------------


def loaders(config: dict, world: int, state: dict | list | None = None, workers: dict | None = None) -> list:
    """One loader per rank at ``EPOCH``; ``state``: loaded into every rank (a list: rank ``r`` loads entry
    ``r % len``); ``workers``: ``{rank: num_workers}`` (others 0)."""
    made = []
    for rank in range(world):
        loader = build_loader(config, "train", rank=rank, world_size=world, seed=SEED,
                              num_workers=(workers or {}).get(rank, 0))
        loader.set_epoch(EPOCH)
        if state is not None:
            loader.load_state_dict(state[rank % len(state)] if isinstance(state, list) else state)
        made.append(loader)
    return made


def dealt(loader, steps: int | None = None) -> list[tuple[int, dict]]:
    """``(global batch, batch)`` for the next ``steps`` batches of the loader's pass (None: all that remain)."""
    position = loader.position
    numbers = loader.dataset.plan(position.epoch, position.global_start).global_batch[position.consumed:]
    out, batches = [], iter(loader)
    for number in numbers.tolist()[:steps]:
        out.append((number, next(batches)))
    if steps is None:
        assert next(batches, None) is None
    return out


def run(ranks: list, steps: int | None = None) -> list[tuple[int, dict]]:
    """Every rank's next ``steps`` batches, checking that the ranks take the same number."""
    per_rank = [dealt(loader, steps) for loader in ranks]
    assert len({len(batches) for batches in per_rank}) == 1, [len(batches) for batches in per_rank]
    return [pair for batches in per_rank for pair in batches]


def saved_states(ranks: list) -> list[dict]:
    """Every rank's state, through JSON (a checkpoint holds plain data); all but ``rank`` equal."""
    states = [json.loads(json.dumps(loader.state_dict())) for loader in ranks]
    assert len({json.dumps({k: v for k, v in s.items() if k != "rank"}, sort_keys=True) for s in states}) == 1
    return states


def check_epoch(pieces: list[list[tuple[int, dict]]], reference: dict[int, dict]) -> None:
    """Every valid row of the reference epoch exactly once over ``pieces`` (the passes of one epoch); every real
    global batch dealt once and equal to one process's; every other batch (padding) without a valid row."""
    expected = Counter(r for batch in reference.values() for r in rows(batch))
    assert set(expected.values()) == {1}
    seen = Counter(r for piece in pieces for _, batch in piece for r in rows(batch))
    assert seen == expected, (f"missing {sorted(expected - seen)[:5]}, "
                              f"repeated {sorted(r for r, n in seen.items() if n > 1)[:5]}")
    real = Counter(number for piece in pieces for number, _ in piece if number in reference)
    assert sorted(real) == sorted(reference) and set(real.values()) == {1}
    for number, batch in (pair for piece in pieces for pair in piece):
        if number in reference:
            assert not field_differences(batch, reference[number]), f"global batch {number} differs from one process's"
        else:
            assert not rows(batch), f"padding batch {number} has valid rows"


def reference_epoch(config: dict) -> dict[int, dict]:
    """One process's epoch: global batch -> batch."""
    [loader] = loaders(config, 1)
    return dict(dealt(loader))


# ---------------------------------------------------------------------------------------------------------------
# Save at 4, resume at 2 and 8: every task
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task, saved_steps", [("tse", 1), ("tse", 3), ("asr", 1), ("asd", 3)])
def test_a_state_saved_at_four_ranks_resumes_at_two_and_eight(task, saved_steps, request):
    """Positions 4 and 12 (1 and 3 steps of 4 ranks) are multiples of 2 but not of 8: the eight ranks then deal
    from global batch 4 (``loader.plan.static_plan.resume_point``).  Workers change between save and resume."""
    config = request.getfixturevalue(f"{task}_config")
    reference = reference_epoch(config)
    savers = loaders(config, SAVED_AT, workers={1: 1})
    assert len(savers[0]) > saved_steps, "the save is mid-epoch"
    before = run(savers, saved_steps)
    states = saved_states(savers)
    assert states[0]["batches_consumed"] == saved_steps and states[0]["world_size"] == SAVED_AT
    for world in RESUMED_AT:
        after = run(loaders(config, world, states, workers={0: 2} if world == 2 else None))
        check_epoch([before, after], reference)


def test_a_resumed_pass_saves_and_resumes_again(tse_config):
    """4 ranks take a step, 8 take one more from global batch 4 (a state with ``global_start`` 4), 2 finish."""
    reference = reference_epoch(tse_config)
    first = loaders(tse_config, 4)
    pieces = [run(first, 1)]
    second = loaders(tse_config, 8, saved_states(first))
    assert second[0].position.global_start == 4
    pieces.append(run(second, 1))
    state = saved_states(second)
    assert (state[0]["global_start"], state[0]["batches_consumed"]) == (4, 1)
    pieces.append(run(loaders(tse_config, 2, state)))
    check_epoch(pieces, reference)


def test_a_state_saved_in_the_padding_resumes_with_nothing_left(tse_config):
    """13 batches over 4 ranks: the fourth step holds batch 12 and three padding batches; after it the epoch is
    done at any world size, and the next epoch is whole."""
    savers = loaders(tse_config, 4)
    run(savers, 4)
    for world in RESUMED_AT:
        ranks = loaders(tse_config, world, saved_states(savers))
        assert run(ranks) == []
        for loader in ranks:
            loader.set_epoch(EPOCH + 1)
        assert len(run(ranks)) == -(-13 // world) * world


def test_same_world_size_resumes_the_batches_it_would_have_dealt(tse_config):
    """No change of world size: the resumed pass is the rest of the uninterrupted one, batch for batch."""
    whole = [dealt(loader) for loader in loaders(tse_config, 4)]
    savers = loaders(tse_config, 4)
    run(savers, 2)
    for rank, loader in enumerate(loaders(tse_config, 4, saved_states(savers))):
        rest = dealt(loader)
        assert [n for n, _ in rest] == [n for n, _ in whole[rank][2:]]
        assert all(not field_differences(a, b) for (_, a), (_, b) in zip(rest, whole[rank][2:]))


def test_a_version_one_state_still_resumes(tse_config):
    """States written before world sizes could change (``state_version`` 1, no ``global_start``) resume as then."""
    savers = loaders(tse_config, 4)
    run(savers, 2)
    old = {k: v for k, v in savers[0].state_dict().items() if k != "global_start"}
    old["state_version"] = 1
    [resumed] = loaders(tse_config, 1, old)
    assert (resumed.position.global_start, resumed.position.consumed) == (0, 8)


# ---------------------------------------------------------------------------------------------------------------
# Refusals: another seed, config or pack, whatever the world size
# ---------------------------------------------------------------------------------------------------------------


def test_another_seed_config_or_pack_is_refused_naming_the_key(tse_config, tmp_path):
    savers = loaders(tse_config, 4)
    run(savers, 1)
    state = saved_states(savers)[0]
    with pytest.raises(ResumeError, match=f"seed in state: {SEED} / seed in loader: {SEED + 1}"):
        build_loader(tse_config, "train", world_size=2, seed=SEED + 1).load_state_dict(state)
    other_args = {**tse_config, "dataset_args": {**tse_config["dataset_args"], "chunk_len": 4000}}
    with pytest.raises(ResumeError, match="fingerprint in state: .* / fingerprint in loader"):
        build_loader(other_args, "train", world_size=2, seed=SEED).load_state_dict(state)
    p = speech()
    other = tse_pack(tmp_path, [Mix("other", (p[0], p[1]), seconds=0.6)])
    other_pack = {**tse_config, "packs": [*tse_config["packs"], {"path": other}]}
    loader = build_loader(other_pack, "train", world_size=8, rank=5, seed=SEED)
    with pytest.raises(ResumeError, match="fingerprint"):
        loader.load_state_dict(state)
    assert (loader.epoch, loader.position.consumed) == (0, 0), "a refused state changes nothing"
    # global_start is below the world size that saved it
    with pytest.raises(ResumeError, match=r"global_start must be an integer in \[0, 3\]"):
        build_loader(tse_config, "train", world_size=2, seed=SEED).load_state_dict({**state, "global_start": 4})


# ---------------------------------------------------------------------------------------------------------------
# torchdata and Lightning resume the same way
# ---------------------------------------------------------------------------------------------------------------


def test_torchdatas_loader_resumes_at_another_world_size(tse_config):
    pytest.importorskip("torchdata.stateful_dataloader")
    from speechpack.loader.stateful_loader import stateful_dataloader

    reference = reference_epoch(tse_config)

    def ranks(world, state=None, workers=0):
        made = [stateful_dataloader(tse_config, "train", rank=r, world_size=world, seed=SEED,
                                    num_workers=workers if r == 0 else 0) for r in range(world)]
        for loader in made:
            loader.set_epoch(EPOCH)
            if state is not None:
                loader.load_state_dict(state)
        return made

    def numbered(loader, steps=None):
        position = loader.speech_loader.position  # where the loaded state put the next pass
        plan = loader.speech_loader.dataset.plan(loader.sampler.epoch, position.global_start)
        numbers = plan.global_batch[position.consumed:].tolist()
        batches = iter(loader)
        return [(n, next(batches)) for n in numbers[:steps]]

    savers = ranks(4, workers=2)
    before = [pair for loader in savers for pair in numbered(loader, 1)]
    state = json.loads(json.dumps(savers[0].state_dict()["speechpack_position"]))
    saved = savers[0].state_dict()
    for world in RESUMED_AT:
        after = [pair for loader in ranks(world, saved) for pair in numbered(loader)]
        check_epoch([before, after], reference)
    assert state["global_start"] == 0 and state["batches_consumed"] == 1


def test_the_datamodule_resumes_at_another_world_size(tse_config):
    pytest.importorskip("lightning")
    from speechpack.loader.datamodule import SpeechDataModule

    def ranks(world, state=None):
        made = []
        for rank in range(world):
            dm = SpeechDataModule(train=tse_config, seed=SEED)
            dm.trainer = SimpleNamespace(global_rank=rank, world_size=world,
                                         _accelerator_connector=SimpleNamespace(use_distributed_sampler=False))
            if state is not None:
                dm.load_state_dict(state)
            loader = dm.train_dataloader()
            if state is None:
                loader.sampler.set_epoch(EPOCH)
            made.append(loader.loader)
        return made

    reference = reference_epoch(tse_config)
    savers = ranks(4)
    before = run(savers, 3)
    state = {"train_loader": saved_states(savers)[0]}
    for world in RESUMED_AT:
        check_epoch([before, run(ranks(world, state))], reference)


# ---------------------------------------------------------------------------------------------------------------
# A pack by URL: the node cache follows the resumed pass
# ---------------------------------------------------------------------------------------------------------------


def test_a_pack_by_url_resumes_at_another_world_size_and_on_the_local_copy(s3_server, tse_config, tmp_path):
    """Four ranks read the pack from a real S3-protocol server through a node cache smaller than the pack; eight
    resume from global batch 4 (the cache fetches ahead in the resumed pass's order), and two resume on the local
    copy: where a pack lies is not part of a state."""
    from factories.s3 import publish, stream_bytes

    local = tse_config["packs"][0]["path"]
    url = publish(local, "resume-world/tse")
    cache = {"dir": str(tmp_path / "cache"), "limit": stream_bytes(local) * 3 // 4, "ahead": 2}
    remote = {**tse_config, "packs": [{"path": url}], "cache": cache}
    reference = reference_epoch(tse_config)
    savers = loaders(remote, 4)
    before = run(savers, 1)
    states = saved_states(savers)
    assert savers[0].dataset.feed.active and len(savers[0].dataset.feed.packs[0].manifest.shards) > 4
    resumed = loaders(remote, 8, states)
    check_epoch([before, run(resumed)], reference)
    assert resumed[0].dataset.feed.caches[0].usage() <= cache["limit"]
    check_epoch([before, run(loaders(tse_config, 2, states))], reference)
