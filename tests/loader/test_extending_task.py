"""docs/extending.md, "Adding a loader task", followed to the letter: a toy task is a module with ``TASK`` (a
``LoaderTask``) whose builder implements the builder protocol (``BatchBuilder``: the required hooks only), and one
``register_task`` call; ``build_loader`` and ``speechpack plan`` then run on it like on any built-in task.

The toy task reads the mixtures of tse packs and yields, per row, the item's key and its length in samples.  This
module is the task's module (what ``register_task`` names), as ``loader/<task>/task.py`` would be.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from click.testing import CliRunner

from factories.tse import mixture
from speechpack.cli import main
from speechpack.loader import build_loader
from speechpack.loader.config_checks import check_type, positive_int, take_known
from speechpack.loader.tasks import TASK_MODULES, BatchBuilder, LoaderTask, PlanUnits, Prepared, register_task
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays

# -- the task module (docs/extending.md, point 1) -------------------------------------------------------------------


@dataclass(frozen=True)
class ToyArgs:
    """``dataset_args`` of the toy task: the planning view's four keys, and the epoch order every task's args
    carry (``shard_window``; None: the whole-epoch shuffle)."""

    batch_size: int = 2
    shuffle: bool = True
    tail: str = "pad"
    batching: None = None
    shard_window: int | None = None


class ToyBuilder(BatchBuilder):
    """Rows of (key, length): the required hooks of the protocol, every other one at its default."""

    def __init__(self, packs: list, args: ToyArgs):
        self.packs = packs
        self.args = args
        self.pack = np.concatenate([np.full(len(p), i, dtype=np.int64) for i, p in enumerate(packs)])
        self.sample = np.concatenate([np.arange(len(p), dtype=np.int64) for p in packs])
        self.lengths = np.concatenate([np.asarray(p.num_frames, dtype=np.int64) for p in packs])

    @property
    def units(self) -> PlanUnits:
        return PlanUnits(count=len(self.pack), lengths=lambda epoch: self.lengths)

    def build(self, items: np.ndarray, valid: np.ndarray, epoch: int, global_batch: int,
              arrays: BatchArrays = NUMPY) -> dict:
        length = arrays.empty((len(items),), np.int64)
        length[:] = self.lengths[items]
        keys = [str(self.packs[int(self.pack[i])].keys[int(self.sample[i])]) for i in items]
        return {"key": keys, "length": length, "valid": np.asarray(valid, dtype=bool)}


class ToyTask(LoaderTask):
    name = "toy"

    def parse_dataset_args(self, obj, where: str) -> ToyArgs:
        v = take_known(obj, where, {"batch_size": 2, "shuffle": True})
        return ToyArgs(batch_size=positive_int(v["batch_size"], f"{where}.batch_size"),
                       shuffle=check_type(v["shuffle"], bool, f"{where}.shuffle"))

    def prepare(self, config, state: str, packs: list, seed: int) -> Prepared:
        builder = ToyBuilder(packs, config.dataset_args)
        return Prepared(builder=builder, item_pack=builder.pack)


TASK = ToyTask()


# -- the registration (docs/extending.md, point 2) ------------------------------------------------------------------


@pytest.fixture
def toy_task():
    register_task("toy", __name__)
    yield
    TASK_MODULES.pop("toy")


@pytest.fixture
def toy_packs(tse_pack):
    a, _ = tse_pack("ta", [mixture(f"a{i}", 600 + 100 * i) for i in range(5)])
    b, _ = tse_pack("tb", [mixture(f"b{i}", 900 + 50 * i) for i in range(3)])
    return a, b


def _config(*packs: str, **dataset_args) -> dict:
    return {"task": "toy", "packs": [{"path": p} for p in packs], "dataset_args": dataset_args}


def test_build_loader_runs_a_registered_task_every_item_once_on_every_rank(toy_task, toy_packs):
    seen = Counter()
    lengths = set()
    for rank in range(2):
        loader = build_loader(_config(*toy_packs, batch_size=2), "train", rank=rank, world_size=2, seed=3)
        for batch in loader:
            for key, length, valid in zip(batch["key"], batch["length"].tolist(), batch["valid"].tolist()):
                if valid:
                    seen[key] += 1
                    lengths.add(length)
    assert seen == Counter({f"a{i}": 1 for i in range(5)} | {f"b{i}": 1 for i in range(3)})
    assert lengths == {600 + 100 * i for i in range(5)} | {900 + 50 * i for i in range(3)}


def test_a_registered_task_resumes_and_is_weighted_like_any_other(toy_task, toy_packs):
    config = _config(*toy_packs, batch_size=3)
    config["packs"][0]["repeat"] = 2  # the loader weighs the packs itself (no weighting of the task's own)
    whole = [b["key"] for b in build_loader(config, "train", seed=5)]
    assert sum(len(keys) for keys in whole) >= 13
    loader = build_loader(config, "train", seed=5)
    first = next(iter(loader))["key"]
    state = loader.state_dict()
    resumed = build_loader(config, "train", seed=5)
    resumed.load_state_dict(state)
    assert [first, *[b["key"] for b in resumed]] == whole
    assert loader.tokenizer is None and loader.builder.sample_rate == 8000  # protocol defaults


def test_speechpack_plan_dry_runs_a_registered_task(toy_task, toy_packs, tmp_path):
    import yaml

    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(_config(*toy_packs, batch_size=2)), encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(path), "--world-size", "2"])
    assert result.exit_code == 0, result.output
    assert "8 items, world size 2" in result.output and "2 batches per rank" in result.output


def test_an_unregistered_task_is_named_with_the_registered_ones():
    from speechpack.loader.config import ConfigError, LoaderConfig

    with pytest.raises(ConfigError, match="'toy' is not one of tse, asd, asr"):
        LoaderConfig.from_dict(_config("x"))
    with pytest.raises(ValueError, match="is speechpack.loader.tse.task already"):
        register_task("tse", __name__)
