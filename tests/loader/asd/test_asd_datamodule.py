"""``PackedASDDataModule`` (``loader/asd/datamodule.py``): a Lightning fit of a tiny model on asd packs (real
speech), ``set_epoch`` forwarded every epoch, the loader's own rank sharding, whole-track validation, several
packs per split, and a clear error without the ``lightning`` extra."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from speechpack.loader.asd.datamodule import LightningLoader, loader_config
from speechpack.schemas.timebase import model_frame_count
from speechpack.loader.config import ConfigError
from speechpack.schemas.errors import SpeechpackError
from factories.asd_tracks import TRACKS, Track, write_asd_pack

try:
    import lightning.pytorch as pl
except ImportError:  # scripts/test.sh installs the extra: in CI its absence is a failure, not a skip
    if os.environ.get("CI"):
        raise
    pytest.skip("the lightning extra is not installed: pip install 'speechpack[lightning]'", allow_module_level=True)
import torch  # noqa: E402

from factories.lightning_asd import TinyASD, cpu_trainer  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*no 25 Hz model frame:UserWarning",
                                        "ignore:.*does not have many workers:UserWarning",
                                        "ignore:.*to `True` in `DataLoader`:UserWarning")

SMALL = dict(train_window=60, hist_frames=20, frame_budget=240, min_batch=2, max_batch=4, val_frame_budget=600)


@pytest.fixture
def packs(tmp_path, real_audio):
    """Two train packs (AVA-like and WASD-like clip sharing) and one val pack, from real speech."""
    speech = real_audio("pocketsphinx")
    paths = {}
    for name, tracks in (("ava", TRACKS[:4]), ("wasd", TRACKS[4:]),
                         ("val", [Track("v:1", "v", 120, 25.0), Track("v:2", "w", 75, 30.0)])):
        paths[name] = str(tmp_path / name)
        write_asd_pack(paths[name], tracks, speech)
    return paths


def test_lightning_fit_of_a_tiny_model(packs):
    from speechpack.loader.asd.datamodule import PackedASDDataModule

    dm = PackedASDDataModule({"train": [packs["ava"], {"path": packs["wasd"]}], "val": [packs["val"]]},
                             dataset_args=SMALL, num_workers=0, seed=3)
    model = TinyASD()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = cpu_trainer(max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step > 4
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # it learned something
    # set_epoch reached the loader: epoch 1 is a different order of the same chunks.
    assert dm.loaders["train"].loader.epoch == 1
    first, second = (sum(model.epoch_keys[e], []) for e in (0, 1))
    assert first != second and sorted(first) == sorted(second)
    # Validation ran whole tracks: every model frame of both val tracks scored once per validation pass.
    frames = int(model_frame_count(120, 25.0) + model_frame_count(75, 30.0))
    assert model.val_scored == 2 * frames  # two epochs, one validation pass each


def test_lightning_fit_on_the_real_video_pack(tmp_path):
    """A few steps on the pack the AVA adapter makes from the real talking-face video, validated on it too."""
    from factories.asd_inputs import make_asd_pack

    from speechpack.loader.asd.datamodule import PackedASDDataModule

    pack = make_asd_pack(tmp_path)
    dm = PackedASDDataModule({"train": [pack], "val": [pack]}, num_workers=0, seed=0,
                             dataset_args=dict(train_window=40, hist_frames=10, frame_budget=80, min_batch=2,
                                               max_batch=2))
    model = TinyASD()
    trainer = cpu_trainer(max_steps=4, num_sanity_val_steps=0, val_check_interval=2, check_val_every_n_epoch=None)
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 4
    frames = dm.val_dataloader().loader.builder.tracks.model_frames.sum()
    assert model.val_scored == 2 * frames  # validated twice (steps 2 and 4), every model frame once each time


def test_print_names_the_splits_and_their_packs(packs):
    from speechpack.loader.asd.datamodule import PackedASDDataModule

    dm = PackedASDDataModule({"train": [packs["ava"], {"path": packs["wasd"]}], "val": [packs["val"]]},
                             dataset_args=SMALL, num_workers=0, seed=3)
    assert str(dm).splitlines() == ["PackedASDDataModule(seed=3, num_workers=0)",
                                    f"  train: task asd, packs {packs['ava']}, {packs['wasd']}",
                                    f"  val: task asd, packs {packs['val']}"]
    print(dm)  # what raised inside Lightning's __str__ before
    assert dm.loaders == {}


def test_ranks_get_equal_batch_counts_from_the_loader_itself(packs):
    from speechpack.loader.asd.datamodule import PackedASDDataModule

    lengths, keys = [], []
    for rank in range(3):
        dm = PackedASDDataModule({"train": [packs["ava"], packs["wasd"]]}, dataset_args=SMALL, num_workers=0)
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=3)  # what a 3-GPU Trainer reports
        loader = dm.train_dataloader()
        assert isinstance(loader, LightningLoader)
        loader.sampler.set_epoch(2)  # what Lightning calls at each epoch start
        batches = list(loader)
        lengths.append(len(batches))
        assert len(batches) == len(loader)
        keys += [k for b in batches for k, v in zip(b["key"], b["valid"]) if v]
    assert len(set(lengths)) == 1
    # Every chunk exactly once over the three ranks (repeats are flagged invalid).
    dm = PackedASDDataModule({"train": [packs["ava"], packs["wasd"]]}, dataset_args=SMALL, num_workers=0)
    assert len(keys) == len(dm.train_dataloader().loader.builder.train_windows)


def test_mid_epoch_checkpoint_resumes_with_the_remaining_batches(packs, tmp_path):
    """Lightning saves the loaders' states in its checkpoints: a run stopped after 3 steps and resumed from that
    checkpoint trains on exactly the batches the uninterrupted epoch had left."""
    from speechpack.loader.asd.datamodule import PackedASDDataModule

    def datamodule():
        return PackedASDDataModule({"train": [packs["ava"], packs["wasd"]]}, dataset_args=SMALL, num_workers=0,
                                   seed=3)

    full = TinyASD()
    cpu_trainer(max_epochs=1).fit(full, datamodule=datamodule())
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1)
    first = TinyASD()
    pl.Trainer(accelerator="cpu", devices=1, use_distributed_sampler=False, logger=False, enable_progress_bar=False,
               enable_model_summary=False, max_steps=3, callbacks=[saver]).fit(first, datamodule=datamodule())
    (checkpoint,) = (tmp_path / "ckpt").glob("*.ckpt")
    resumed = TinyASD()
    cpu_trainer(max_epochs=1).fit(resumed, datamodule=datamodule(), ckpt_path=str(checkpoint))
    assert len(full.epoch_keys[0]) > 4
    assert first.epoch_keys[0] + resumed.epoch_keys[0] == full.epoch_keys[0]


def test_loader_state_round_trips_through_the_lightning_wrapper(packs):
    from speechpack.loader.asd.datamodule import PackedASDDataModule

    dm = PackedASDDataModule({"train": [packs["ava"]]}, dataset_args=SMALL, num_workers=0)
    loader = dm.train_dataloader()
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    rest = [b["key"] for b in iterator]
    fresh = PackedASDDataModule({"train": [packs["ava"]]}, dataset_args=SMALL, num_workers=0).train_dataloader()
    fresh.load_state_dict(state)
    assert [b["key"] for b in fresh] == rest


def test_lightning_wrapper_refuses_a_bad_state_and_changes_nothing(packs):
    """PackedASDDataModule's loaders resume through ``LightningLoader.load_state_dict``: a refused state is a
    ``ResumeError`` and leaves the loader at its epoch (before: moved to the state's epoch, or a bare error)."""
    from speechpack.loader.asd.datamodule import PackedASDDataModule
    from speechpack.loader.torch import ResumeError

    loader = PackedASDDataModule({"train": [packs["ava"]]}, dataset_args=SMALL, num_workers=0).train_dataloader()
    loader.sampler.set_epoch(2)
    state = loader.state_dict()
    for bad in ("abc", None, {**state, "epoch": 2.9}, {**state, "batches_consumed": 1e30},
                {**state, "epoch": 9, "batches_consumed": 10 ** 6}):
        with pytest.raises(ResumeError):
            loader.load_state_dict(bad)
        assert loader.state_dict() == state
    with pytest.raises(ConfigError, match="epoch must be an integer"):
        loader.sampler.set_epoch(2.5)
    assert loader.state_dict() == state


def test_bad_split_configs_are_named(packs):
    from speechpack.loader.asd.datamodule import PackedASDDataModule

    with pytest.raises(ConfigError, match=r"packed_asd: unknown split\(s\) dev"):
        PackedASDDataModule({"dev": [packs["val"]]})
    with pytest.raises(ConfigError, match=r"packed_asd.train: a non-empty list"):
        PackedASDDataModule({"train": []})
    with pytest.raises(ConfigError, match=r"packed_asd.test: no packs given"):
        PackedASDDataModule({"train": [packs["ava"]]}, dataset_args=SMALL).test_dataloader()
    assert PackedASDDataModule({"train": [packs["ava"]]}).val_dataloader() == []  # no validation
    assert loader_config([packs["ava"]], None, "x")["packs"] == [{"path": packs["ava"]}]


def test_missing_lightning_is_a_clear_error(monkeypatch):
    import speechpack.loader.asd.datamodule as datamodule

    datamodule._datamodule_class.cache_clear()
    monkeypatch.setitem(sys.modules, "lightning", None)  # import lightning now raises ImportError
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    try:
        with pytest.raises(SpeechpackError, match=r"pip install 'speechpack\[lightning\]'"):
            datamodule.PackedASDDataModule  # noqa: B018 - the attribute access is what imports Lightning
    finally:
        datamodule._datamodule_class.cache_clear()
