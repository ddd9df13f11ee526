"""MuVAP's Lightning config as it is (``packed_asd: {train: [paths], val: [paths]}``, in the experiment's YAML)
builds ``PackedASDDataModule`` (``loader/asd/datamodule.py``), here over packs imported from MuVAP-layout packs of
the real talking-face video and over packs built by ``speechpack build avcc``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:
    import lightning.pytorch as pl
except ImportError:  # scripts/test.sh installs the extra: in CI its absence is a failure, not a skip
    if os.environ.get("CI"):
        raise
    pytest.skip("the lightning extra is not installed: pip install 'speechpack[lightning]'", allow_module_level=True)

from factories.muvap_packs import muvap_avcc_corpus
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.importers.muvap import import_muvap
from factories.lightning_asd import TinyASD, cpu_trainer

pytestmark = pytest.mark.filterwarnings("ignore:.*does not have many workers:UserWarning",
                                        "ignore:.*to `True` in `DataLoader`:UserWarning")

#: MuVAP's documented block, verbatim apart from the paths (what a MuVAP user changes: one line per pack).
MUVAP_YAML = """\
model:
  name: muvap_plus
packed_asd:
  train:
    - {train_a}
    - {train_b}
  val:
    - {val}
trainer:
  max_epochs: 30
"""


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    from speechpack.packer.adapters.asd_common import AsdBuildOptions
    from speechpack.packer.adapters.avcc import build_avcc

    root = tmp_path_factory.mktemp("cfg")
    corpus = muvap_avcc_corpus(root / "media")
    imported = root / "AVA" / "packed" / "train"
    import_muvap(str(corpus.muvap), BuildOptions(out=str(imported), sample_rate=16000, progress=False))
    built = root / "AVCC" / "packed" / "train"
    build_avcc(str(corpus.tsv), str(corpus.root), AsdBuildOptions(out=str(built), progress=False))
    return str(imported), str(built)


def test_muvap_yaml_builds_the_datamodule_as_it_is(packs, tmp_path):
    from speechpack.loader.asd.datamodule import PackedASDDataModule

    imported, built = packs
    path = Path(tmp_path / "experiment.yaml")
    path.write_text(MUVAP_YAML.format(train_a=imported, train_b=built, val=imported), encoding="utf-8")
    args = dict(train_window=40, hist_frames=10, frame_budget=80, min_batch=2, max_batch=2, audio_mix_prob=0.5,
                substitute_audio_prob=0.2, jitter=True)
    dm = PackedASDDataModule(str(path), dataset_args=args, num_workers=0, seed=1)  # the YAML file itself
    assert set(dm.configs) == {"train", "val"}
    assert [p["path"] for p in dm.configs["train"]["packs"]] == [imported, built]
    model = TinyASD()
    trainer = cpu_trainer(max_steps=3, num_sanity_val_steps=0, val_check_interval=3, check_val_every_n_epoch=None)
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 3
    frames = dm.val_dataloader().loader.builder.tracks.model_frames.sum()
    assert model.val_scored == frames  # whole tracks, every model frame once


def test_the_whole_config_mapping_or_its_block_give_the_same_splits(packs):
    import yaml

    from speechpack.loader.asd.datamodule import PackedASDDataModule

    imported, built = packs
    config = yaml.safe_load(MUVAP_YAML.format(train_a=imported, train_b=built, val=imported))
    whole = PackedASDDataModule(config, num_workers=0)
    block = PackedASDDataModule(config["packed_asd"], num_workers=0)
    assert whole.configs == block.configs
