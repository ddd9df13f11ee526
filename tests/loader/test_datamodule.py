"""``SpeechDataModule`` (``loader/datamodule.py``) with a real Lightning Trainer on packs of real recordings, one
task each (tse: mixtures of librivox speech; asr: transcribed librivox spans; asd: the talking-face video): a fit,
a checkpoint mid-epoch, a resumed run that trains on exactly the batches the epoch had left, the DataModule's own
state carrying the loader's position, validation sets per split, and the loader's own rank sharding."""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import pytest

import factories.paths
from factories import Mix
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.datamodule import TRAIN_STATE_KEY, LightningLoader, rank_and_world
from speechpack.loader.torch import ResumeError
from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.errors import SpeechpackError

try:
    import lightning.pytorch as pl
except ImportError:  # scripts/test.sh installs the extra: in CI its absence is a failure, not a skip
    if os.environ.get("CI"):
        raise
    pytest.skip("the lightning extra is not installed: pip install 'speechpack[lightning]'", allow_module_level=True)
import torch  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*does not have many workers:UserWarning",
                                        "ignore:.*to `True` in `DataLoader`:UserWarning",
                                        "ignore:.*no 25 Hz model frame:UserWarning",
                                        "ignore:.*callbacks used to create the checkpoint:UserWarning",
                                        "ignore:.*LeafSpec.*is deprecated",
                                        "ignore:.*Total length of .* across ranks is zero:UserWarning")

#: The batch field each task's tiny model reads.
SIGNAL = {"tse": "wav_mix", "asr": "source_seqs", "asd": "audio"}


@pytest.fixture
def tse_packs(real_audio, wesep_list, tmp_path) -> dict:
    """A train pack of eight two-speaker mixtures of real speech and two evaluation packs of two mixtures each."""
    p = real_audio("pocketsphinx", 5)
    packs = {}
    for name, count, offset in (("train", 8, 0), ("dev", 2, 1), ("other", 2, 3)):
        mixes = [Mix(f"{name}{i}", (p[(i + offset) % 5], p[(i + offset + 1 + i // 5) % 5]), seconds=1.0,
                     start=0.1 * i) for i in range(count)]
        case = wesep_list(mixes, name=f"{name}.list")
        packs[name] = str(tmp_path / name)
        build_wesep(str(case.list_path), BuildOptions(out=packs[name], sample_rate=16000, progress=False))
    return packs


def tse_config(pack: str) -> dict:
    return {"packs": [{"path": pack}], "dataset_args": {"batch_size": 1, "chunk_len": 8000}}


@pytest.fixture
def asr_packs(real_audio, tmp_path) -> dict:
    """Train and dev packs of transcribed spans (0.5-1.6 s) of the librivox clips."""
    packs = {}
    for name, count in (("train", 12), ("dev", 3)):
        lines = [{"key": f"{name}{i}", "audio_filepath": path, "offset": 0.1 * i, "duration": 0.5 + 0.1 * i,
                  "text": f"utterance number {i}", "language": "en", "corpus": "librivox"}
                 for i, path in enumerate((real_audio("pocketsphinx", 4) * 3)[:count])]
        manifest = tmp_path / f"{name}.jsonl"
        manifest.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        packs[name] = str(tmp_path / name)
        build_asr_jsonl(str(manifest), BuildOptions(out=packs[name], progress=False))
    return packs


def asr_config(pack: str) -> dict:
    return {"task": "asr", "packs": [{"path": pack}],
            "dataset_args": {"batching_strategy": "STATIC", "batch_size": 2}}


class Recorder(pl.LightningModule):
    """One weight trained on the batch's signal; records every training batch (keys and an exact checksum of the
    signal) per epoch and every validation batch per ``dataloader_idx``."""

    def __init__(self, task: str) -> None:
        super().__init__()
        self.field = SIGNAL[task]
        self.weight = torch.nn.Parameter(torch.ones(()))
        self.seen: dict[int, list] = {}
        self.validated: dict[int, list] = {}

    def _fingerprint(self, batch) -> tuple:
        return tuple(batch["key"]), float(batch[self.field].double().sum())

    def training_step(self, batch, _index):
        self.seen.setdefault(self.current_epoch, []).append(self._fingerprint(batch))
        signal = batch[self.field].float()
        return (self.weight * signal.mean() - 1.0) ** 2

    def validation_step(self, batch, _index, dataloader_idx=0):
        self.validated.setdefault(dataloader_idx, []).append(self._fingerprint(batch))

    def test_step(self, batch, _index):
        self.validated.setdefault("test", []).append(self._fingerprint(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _trainer(**kwargs) -> "pl.Trainer":
    options = dict(accelerator="cpu", devices=1, use_distributed_sampler=False, logger=False,
                   enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                   num_sanity_val_steps=0)
    return pl.Trainer(**{**options, **kwargs})


def fit_stop_resume(task: str, make_dm, tmp_path, stop: int) -> dict:
    """An uninterrupted epoch, a run stopped by a checkpoint after ``stop`` steps, and a run resumed from it."""
    from speechpack.loader.datamodule import SpeechDataModule

    full = Recorder(task)
    full_dm = make_dm()
    assert isinstance(full_dm, SpeechDataModule)
    _trainer(max_epochs=1).fit(full, datamodule=full_dm)
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=stop, save_top_k=-1)
    first = Recorder(task)
    _trainer(max_steps=stop, enable_checkpointing=True, callbacks=[saver], limit_val_batches=0).fit(
        first, datamodule=make_dm())
    (checkpoint,) = (tmp_path / "ckpt").glob("*.ckpt")
    resumed = Recorder(task)
    _trainer(max_epochs=1, limit_val_batches=0).fit(resumed, datamodule=make_dm(), ckpt_path=str(checkpoint))
    assert len(full.seen[0]) > stop + 1
    assert first.seen[0] == full.seen[0][:stop]
    assert resumed.seen[0] == full.seen[0][stop:]  # exactly the batches left, bit for bit
    saved = torch.load(checkpoint, weights_only=False)  # a checkpoint this test wrote
    return {"full": full, "dm": full_dm, "state": saved["SpeechDataModule"]}


def assert_datamodule_state_resumes(make_dm, state: dict, expected: list, task: str) -> None:
    """The DataModule's state alone (no fit loop) puts a fresh DataModule's training loader at the same place."""
    dm = make_dm()
    dm.load_state_dict(state)
    model = Recorder(task)
    rest = [model._fingerprint(batch) for batch in dm.train_dataloader()]
    assert rest == expected


def test_tse_fit_checkpoint_resume_and_named_validation_sets(tse_packs, tmp_path):
    from speechpack.loader.datamodule import SpeechDataModule

    def make_dm():
        return SpeechDataModule(train=tse_config(tse_packs["train"]),
                                val={"dev": tse_packs["dev"], "other": tse_config(tse_packs["other"])},
                                num_workers=0, seed=5)

    run = fit_stop_resume("tse", make_dm, tmp_path, stop=3)
    state = run["state"][TRAIN_STATE_KEY]
    assert (state["epoch"], state["batches_consumed"]) == (0, 3)
    assert_datamodule_state_resumes(make_dm, run["state"], run["full"].seen[0][3:], "tse")
    # Both validation sets ran, in the order given, each whole (val: whole mixtures, every target).
    val = run["dm"].val_dataloader()
    assert list(val) == ["dev", "other"] and all(isinstance(v, LightningLoader) for v in val.values())
    keys = {i: [k for batch in run["full"].validated[i] for k in batch[0]] for i in (0, 1)}
    assert sorted(set(keys[0])) == ["dev0", "dev1"] and sorted(set(keys[1])) == ["other0", "other1"]


def test_asr_fit_checkpoint_resume_and_a_list_of_validation_sets(asr_packs, tmp_path):
    from speechpack.loader.datamodule import SpeechDataModule

    def make_dm():
        return SpeechDataModule(train=asr_config(asr_packs["train"]),
                                val=[asr_packs["dev"], asr_config(asr_packs["train"])], num_workers=0, seed=5)

    run = fit_stop_resume("asr", make_dm, tmp_path, stop=2)
    assert run["state"][TRAIN_STATE_KEY]["batches_consumed"] == 2
    assert_datamodule_state_resumes(make_dm, run["state"], run["full"].seen[0][2:], "asr")
    val = run["dm"].val_dataloader()
    assert isinstance(val, list) and len(val) == 2
    for index, count in ((0, 3), (1, 12)):  # the dev pack and the train pack, each utterance once
        keys = [k for batch in run["full"].validated[index] for k in batch[0]]
        assert len(set(keys)) == count


def test_asd_fit_checkpoint_resume_on_the_real_video_pack(tmp_path):
    from factories.asd_inputs import make_asd_pack

    from speechpack.loader.datamodule import SpeechDataModule

    pack = make_asd_pack(tmp_path)
    config = {"task": "asd", "packs": [{"path": pack}],
              "dataset_args": {"train_window": 20, "hist_frames": 5, "frame_budget": 40, "min_batch": 1,
                               "max_batch": 2}}

    def make_dm():
        return SpeechDataModule(train=config, val=pack, test=pack, num_workers=0, seed=1)

    run = fit_stop_resume("asd", make_dm, tmp_path, stop=2)
    assert_datamodule_state_resumes(make_dm, run["state"], run["full"].seen[0][2:], "asd")
    assert run["full"].validated[0]  # the val split ran
    tested = Recorder("asd")
    _trainer().test(tested, datamodule=make_dm(), verbose=False)
    assert tested.validated["test"] == run["full"].validated[0]  # val and test: the same pack, whole tracks


def test_tse_workers_resume_with_the_same_batches(tse_packs):
    """Two workers in the resumed DataModule: the position is in the state, not in any worker."""
    from speechpack.loader.datamodule import SpeechDataModule

    dm = SpeechDataModule(train=tse_config(tse_packs["train"]), num_workers=0, seed=5)
    batches = iter(dm.train_dataloader())
    next(batches), next(batches)
    state = dm.state_dict()
    expected = [(tuple(b["key"]), float(b["wav_mix"].double().sum())) for b in batches]
    fresh = SpeechDataModule(train=tse_config(tse_packs["train"]), num_workers=2, seed=5)
    fresh.load_state_dict(state)
    assert [(tuple(b["key"]), float(b["wav_mix"].double().sum())) for b in fresh.train_dataloader()] == expected


def test_print_names_the_splits_and_their_packs_without_making_loaders(tse_packs):
    from speechpack.loader.datamodule import SpeechDataModule

    dm = SpeechDataModule(train=tse_config(tse_packs["train"]),
                          val={"dev": tse_packs["dev"], "other": tse_packs["other"]}, seed=5)
    shown = str(dm)
    assert shown.splitlines() == ["SpeechDataModule(seed=5, num_workers=from the config)",
                                  f"  train: task tse, packs {tse_packs['train']}",
                                  f"  val/dev: task tse, packs {tse_packs['dev']}",
                                  f"  val/other: task tse, packs {tse_packs['other']}"]
    assert dm.loaders == {}  # printing made no loader
    dm.train_dataloader()
    assert str(dm).splitlines()[1].endswith(f", {len(dm.loaders['train'])} batches per rank")


def test_refused_states_are_named(tse_packs):
    from speechpack.loader.datamodule import SpeechDataModule

    dm = SpeechDataModule(train=tse_config(tse_packs["train"]), seed=5)
    with pytest.raises(ResumeError, match=TRAIN_STATE_KEY):
        dm.load_state_dict({"epoch": 0})
    state = dm.state_dict()  # nothing made yet: no state
    assert state == {}
    dm.train_dataloader()
    state = dm.state_dict()
    other = SpeechDataModule(train=tse_config(tse_packs["train"]), seed=6)
    other.load_state_dict(state)  # applied when the loader is made
    with pytest.raises(ResumeError, match="seed in state: 5 / seed in loader: 6"):
        other.train_dataloader()


def test_ranks_share_an_epoch_and_a_distributed_sampler_is_refused(tse_packs):
    """The loader deals batches to ranks itself: every mixture once over two ranks, the same count on each; a
    Trainer that would also put a DistributedSampler over it is refused with the fix in the message."""
    from speechpack.loader.datamodule import SpeechDataModule

    keys, lengths = [], []
    for rank in range(2):
        dm = SpeechDataModule(train=tse_config(tse_packs["train"]), num_workers=0, seed=5)
        connector = SimpleNamespace(use_distributed_sampler=False)
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=2, _accelerator_connector=connector)
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(1)
        batches = list(loader)
        lengths.append(len(batches))
        keys += [k for b in batches for k, v in zip(b["key"], b["valid"]) if v]
    assert lengths == [4, 4] and len(keys) == 2 * 8 and len(set(keys)) == 8  # two targets per mixture
    wrong = SimpleNamespace(global_rank=0, world_size=2,
                            _accelerator_connector=SimpleNamespace(use_distributed_sampler=True))
    with pytest.raises(ConfigError, match="use_distributed_sampler=False"):
        rank_and_world(wrong)
    assert rank_and_world(SimpleNamespace(global_rank=0, world_size=1, _accelerator_connector=wrong)) == (0, 1)
    trainer = _trainer(max_steps=1)  # a real Trainer: its argument is found where rank_and_world looks
    assert trainer._accelerator_connector.use_distributed_sampler is False


def test_split_configs_are_checked_when_the_datamodule_is_made(tse_packs, tmp_path):
    from speechpack.loader.datamodule import SpeechDataModule

    with pytest.raises(ConfigError, match="no split given"):
        SpeechDataModule()
    with pytest.raises(ConfigError, match="val.dev: pack directories need a train config"):
        SpeechDataModule(val={"dev": tse_packs["dev"]})
    with pytest.raises(ConfigError, match=r"val\[1\]: .*missing.yaml is neither a loader config file"):
        SpeechDataModule(train=tse_config(tse_packs["train"]),
                         val=[tse_packs["dev"], str(tmp_path / "missing.yaml")])
    with pytest.raises(ConfigError, match="test: no loader config given"):
        SpeechDataModule(train=tse_config(tse_packs["train"])).test_dataloader()
    assert SpeechDataModule(train=tse_config(tse_packs["train"])).val_dataloader() == []
    # A YAML file is a config; two pack directories in a list are one set over both packs.
    path = tmp_path / "train.yaml"
    path.write_text(json.dumps(tse_config(tse_packs["train"])), encoding="utf-8")  # JSON is YAML
    dm = SpeechDataModule(train=str(path), val=[tse_packs["dev"], tse_packs["other"]], num_workers=0)
    val = dm.val_dataloader()
    assert isinstance(val, LightningLoader)
    assert sorted({k for batch in val for k in batch["key"]}) == ["dev0", "dev1", "other0", "other1"]


def test_missing_lightning_is_a_clear_error(monkeypatch):
    import speechpack.loader.datamodule as datamodule

    datamodule.datamodule_class.cache_clear()
    monkeypatch.setitem(sys.modules, "lightning", None)  # import lightning now raises ImportError
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    try:
        with pytest.raises(SpeechpackError, match=r"SpeechDataModule needs Lightning: .*speechpack\[lightning\]"):
            datamodule.SpeechDataModule  # noqa: B018 - the attribute access is what imports Lightning
    finally:
        datamodule.datamodule_class.cache_clear()


# ---------------------------------------------------------------------------------------------------------------
# The worked examples of docs/integrations.md ("Lightning"): the files under docs/examples/, run on real packs
# ---------------------------------------------------------------------------------------------------------------

EXAMPLES = os.path.join(factories.paths.REPO, "docs", "examples")


def example(name: str):
    """The example module ``docs/examples/<name>.py``, imported from its file (as ``python FILE`` would run it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_twice(module, argv: list[str], out) -> "pl.Trainer":
    """Two steps with a checkpoint every step, then a resumed run to step four from the last checkpoint."""
    options = ["--max-steps", "2", "--save-every", "1", "--workers", "0"]
    first = module.main([*argv, str(out), *options])
    assert first.global_step == 2 and (out / "last.ckpt").is_file()
    second = module.main([*argv, str(out), *options[:1], "4", *options[2:], "--resume", str(out / "last.ckpt")])
    assert second.global_step == 4
    return second


def test_lightning_tse_example_runs_and_resumes(tse_packs, tmp_path):
    trainer = run_twice(example("lightning_tse"), [tse_packs["train"], tse_packs["dev"]], tmp_path / "out")
    assert "val_loss" in trainer.callback_metrics


def test_lightning_asr_example_runs_and_resumes(asr_packs, tmp_path):
    config = tmp_path / "asr.yaml"
    settings = asr_config(asr_packs["train"])
    settings["dataset_args"]["batch_size"] = 6  # two batches an epoch: the resumed run reaches a validation
    config.write_text(json.dumps(settings), encoding="utf-8")
    trainer = run_twice(example("lightning_asr"), [str(config), "--val", asr_packs["dev"]], tmp_path / "out")
    assert torch.isfinite(trainer.callback_metrics["val_ctc"]), dict(trainer.callback_metrics)


def test_lightning_asd_example_runs_and_resumes(tmp_path):
    from factories.asd_inputs import make_asd_pack

    pack = make_asd_pack(tmp_path)
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(json.dumps({"packed_asd": {"train": [pack], "val": [pack]}}), encoding="utf-8")
    trainer = run_twice(example("lightning_asd"), [str(experiment), "--frame-budget", "80"], tmp_path / "out")
    assert torch.isfinite(trainer.callback_metrics["val_bce"])


def test_the_documented_examples_are_the_tested_files():
    """docs/integrations.md shows each example file whole, after a marker naming it: what a user pastes runs."""
    import re

    doc = os.path.join(os.path.dirname(EXAMPLES), "integrations.md")
    with open(doc, encoding="utf-8") as fp:
        text = fp.read()
    shown = dict(re.findall(r"<!-- example: docs/examples/(\S+) -->\n```python\n(.*?)```\n", text, flags=re.S))
    files = sorted(name for name in os.listdir(EXAMPLES) if name.endswith(".py"))
    assert sorted(shown) == files
    for name in files:
        with open(os.path.join(EXAMPLES, name), encoding="utf-8") as fp:
            assert shown[name] == fp.read(), f"docs/integrations.md shows another {name}"


class RankRecorder(Recorder):
    """Writes the keys each rank trained on to ``<out>/rank<r>.json`` (spawned ranks share only the disk)."""

    def __init__(self, task: str, out: str) -> None:
        super().__init__(task)
        self.out = out

    def on_train_end(self) -> None:
        keys = [key for batch in self.seen.get(0, []) for key in batch[0]]
        with open(os.path.join(self.out, f"rank{self.global_rank}.json"), "w", encoding="utf-8") as fp:
            json.dump(keys, fp)


def test_two_real_ranks_share_the_epoch_without_a_distributed_sampler(tse_packs, tmp_path):
    """A real two-process Trainer (ddp_spawn, gloo on CPU) with use_distributed_sampler=False: each rank trains on
    its own half of the epoch, the same number of steps, every mixture once (two target rows each)."""
    from speechpack.loader.datamodule import SpeechDataModule

    dm = SpeechDataModule(train=tse_config(tse_packs["train"]), num_workers=0, seed=5)
    trainer = _trainer(max_epochs=1, strategy="ddp_spawn", devices=2)
    trainer.fit(RankRecorder("tse", str(tmp_path)), datamodule=dm)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 8  # 4 batches of one mixture (2 targets) per rank
    assert not set(ranks[0]) & set(ranks[1]) and len(set(ranks[0]) | set(ranks[1])) == 8
