"""``loader/stateful_loader.py``: the loader as a torchdata ``StatefulDataLoader`` on packs of real speech: a state
taken mid-epoch (after k batches, workers prefetching) resumes in a fresh loader with exactly the remaining batches,
bit-identical, with 0 and 2 workers, through ``torch.save``; a state from another loader is refused."""

from __future__ import annotations

import json
import os

import pytest
import torch

import factories.paths
from factories import Mix
from factories.batches import assert_batches_equal
from speechpack.loader import build_loader
from speechpack.loader.torch import ResumeError
from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

try:
    import torchdata.stateful_dataloader  # noqa: F401
except ImportError:  # scripts/test.sh installs the extra: in CI its absence is a failure, not a skip
    if os.environ.get("CI"):
        raise
    pytest.skip("the torchdata extra is not installed: pip install 'speechpack[torchdata]'", allow_module_level=True)

from speechpack.loader.stateful_loader import EpochBatchSampler, stateful_dataloader  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning",
                                        "ignore:'set_vital' is deprecated:UserWarning")


@pytest.fixture
def tse_config(real_audio, wesep_list, tmp_path) -> dict:
    """Eight two-speaker mixtures of real speech, one mixture per batch, shuffled, 0.5 s chunks."""
    p = real_audio("pocketsphinx", 5)
    mixes = [Mix(f"m{i}", (p[i % 5], p[(i + 1 + i // 5) % 5]), seconds=1.0, start=0.1 * i) for i in range(8)]
    case = wesep_list(mixes)
    out = tmp_path / "tse"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), sample_rate=16000, progress=False))
    return {"packs": [{"path": str(out)}], "dataset_args": {"batch_size": 1, "chunk_len": 8000}}


@pytest.fixture
def asr_config(real_audio, tmp_path) -> dict:
    """Twelve spans (0.5-1.6 s) of the librivox clips with text, two per batch, waveform features."""
    lines = [{"key": f"u{i}", "audio_filepath": path, "offset": 0.1 * i, "duration": 0.5 + 0.1 * i,
              "text": f"utterance number {i}", "language": "en", "corpus": "librivox"}
             for i, path in enumerate(real_audio("pocketsphinx", 4) * 3)]
    manifest = tmp_path / "asr.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "asr"
    build_asr_jsonl(str(manifest), BuildOptions(out=str(out), progress=False))
    return {"task": "asr", "packs": [{"path": str(out)}],
            "dataset_args": {"batching_strategy": "STATIC", "batch_size": 2}}


def resume_mid_epoch(config: dict, workers: int, k: int, tmp_path, snapshot_every_n_steps: int = 1,
                     resume_workers: int | None = None) -> None:
    reference = build_loader(config, "train", num_workers=0, seed=7)
    reference.set_epoch(1)
    expected = list(reference)
    assert len(expected) > k + 1
    loader = stateful_dataloader(config, "train", num_workers=workers, seed=7,
                                 snapshot_every_n_steps=snapshot_every_n_steps)
    loader.set_epoch(1)
    assert len(loader) == len(expected)
    iterator = iter(loader)
    head = [next(iterator) for _ in range(k)]
    torch.save(loader.state_dict(), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)  # plain data: no pickled objects needed
    assert_batches_equal(head, expected[:k])
    fresh = stateful_dataloader(config, "train", num_workers=workers if resume_workers is None else resume_workers,
                                seed=7)
    fresh.load_state_dict(state)
    assert_batches_equal(list(fresh), expected[k:])
    # The next epoch starts from its first batch, as the SpeechLoader's does.
    fresh.set_epoch(2)
    reference.set_epoch(2)
    assert_batches_equal(list(fresh), list(reference))


@pytest.mark.parametrize("workers", [0, 2])
def test_tse_resumes_mid_epoch_with_exactly_the_remaining_batches(tse_config, tmp_path, workers):
    resume_mid_epoch(tse_config, workers, 3, tmp_path)


@pytest.mark.parametrize("saved, resumed", [(2, 0), (0, 2)])
def test_a_state_resumes_with_another_worker_count(tse_config, tmp_path, saved, resumed):
    """torchdata's own restore refuses another num_workers; the position alone needs no particular one."""
    resume_mid_epoch(tse_config, saved, 3, tmp_path, resume_workers=resumed)


def test_a_state_between_torchdata_snapshots_resumes_exactly_too(tse_config, tmp_path):
    """Snapshots every 3 batches, state after 4: the last snapshot's position plus the one batch handed out since."""
    resume_mid_epoch(tse_config, 2, 4, tmp_path, snapshot_every_n_steps=3)


@pytest.mark.parametrize("workers", [0, 2])
def test_asr_resumes_mid_epoch_with_exactly_the_remaining_batches(asr_config, tmp_path, workers):
    resume_mid_epoch(asr_config, workers, 2, tmp_path)


def test_a_state_from_another_loader_is_refused_and_changes_nothing(tse_config):
    loader = stateful_dataloader(tse_config, "train", seed=7)
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    other = stateful_dataloader(tse_config, "train", seed=8)
    with pytest.raises(ResumeError, match="seed in state: 7 / seed in loader: 8"):
        other.load_state_dict(state)
    assert len(list(other)) == 8  # untouched: a whole epoch
    with pytest.raises(ResumeError, match="no speechpack position"):
        other.load_state_dict({"_snapshot": {}, "_steps_since_snapshot": 0})
    sampler = EpochBatchSampler(build_loader(tse_config, "train", seed=7))
    with pytest.raises(ResumeError, match="batches_consumed"):
        iter(sampler).load_state_dict({**loader.speech_loader.state_dict(), "batches_consumed": 10 ** 6})
    assert sampler.epoch == 0
    for bad in (None, {}, {"epoch": 1.5}):
        with pytest.raises(ResumeError, match="sampler state"):
            sampler.load_state_dict(bad)
    assert sampler.epoch == 0


def test_settings_are_the_speech_loaders(tse_config):
    """Workers, prefetch and pinning come from the same place as build_loader's (docs/loader.md)."""
    loader = stateful_dataloader({**tse_config, "dataloader_args": {"num_workers": 2, "prefetch_factor": 3}},
                                 "train", pin_memory=False)
    assert (loader.num_workers, loader.prefetch_factor, loader.pin_memory) == (2, 3, False)
    assert loader.persistent_workers


def test_the_torchdata_example_loop_resumes_where_it_stopped(tse_config, tmp_path, capsys):
    """docs/examples/torchdata_loop.py (shown whole in docs/integrations.md): 5 steps, then 7 more from its
    checkpoint, are the 12 batches of one uninterrupted run, across the epoch boundary (8 batches an epoch)."""
    import importlib.util

    path = os.path.join(factories.paths.REPO, "docs", "examples",
                        "torchdata_loop.py")
    spec = importlib.util.spec_from_file_location("example_torchdata_loop", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = tmp_path / "tse.yaml"
    config.write_text(json.dumps(tse_config), encoding="utf-8")
    whole = module.main([str(config), str(tmp_path / "whole.pt"), "--steps", "12", "--workers", "0"])
    first = module.main([str(config), str(tmp_path / "run.pt"), "--steps", "5", "--workers", "2"])
    second = module.main([str(config), str(tmp_path / "run.pt"), "--steps", "7", "--workers", "2"])
    printed = capsys.readouterr().out.splitlines()  # a resumed run says so: it does not look like a fresh one
    assert printed[2] == f"fresh start (no {tmp_path / 'run.pt'})"
    assert printed[4] == (f"resumed from {tmp_path / 'run.pt'}: epoch 0, step 5, 5 batches of that epoch already "
                          "trained on")
    assert printed[5].startswith("trained 7 steps, now at epoch 1, step 12, loss ")
    assert first["keys"] + second["keys"] == whole["keys"]
    assert second["state"]["epoch"] == whole["state"]["epoch"] == 1
    assert torch.equal(second["state"]["gain"], whole["state"]["gain"])  # the same steps on the same batches


def test_lightning_resumes_a_stateful_dataloader_mid_epoch(tse_config, tmp_path):
    """Handed to a Lightning Trainer directly, the StatefulDataLoader's state rides in Lightning's checkpoint: a run
    resumed (with no workers) from a checkpoint after 3 steps (with two) trains on exactly the batches left."""
    import lightning.pytorch as pl  # the lightning extra: scripts/test.sh installs it

    class Keys(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.gain = torch.nn.Parameter(torch.ones(()))
            self.keys: list = []

        def training_step(self, batch, _index):
            self.keys.append((tuple(batch["key"]), float(batch["wav_mix"].double().sum())))
            return (self.gain * batch["wav_mix"].mean() - 1.0) ** 2

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    full = Keys()
    pl.Trainer(accelerator="cpu", devices=1, use_distributed_sampler=False, logger=False, enable_progress_bar=False,
               enable_model_summary=False, enable_checkpointing=False, max_epochs=1).fit(
        full, train_dataloaders=stateful_dataloader(tse_config, "train", seed=7))
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1)
    first = Keys()
    pl.Trainer(accelerator="cpu", devices=1, use_distributed_sampler=False, logger=False, enable_progress_bar=False,
               enable_model_summary=False, max_steps=3, callbacks=[saver]).fit(
        first, train_dataloaders=stateful_dataloader(tse_config, "train", seed=7, num_workers=2))
    (checkpoint,) = (tmp_path / "ckpt").glob("*.ckpt")
    resumed = Keys()
    pl.Trainer(accelerator="cpu", devices=1, use_distributed_sampler=False, logger=False, enable_progress_bar=False,
               enable_model_summary=False, enable_checkpointing=False, max_epochs=1).fit(
        resumed, train_dataloaders=stateful_dataloader(tse_config, "train", seed=7), ckpt_path=str(checkpoint))
    assert len(full.keys) == 8
    assert first.keys == full.keys[:3] and resumed.keys == full.keys[3:]
