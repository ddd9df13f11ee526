"""``PackedASDDataModule``: the ASD loader as a Lightning DataModule (optional extra: ``speechpack[lightning]``).

MuVAP's seed config maps straight onto it::

    packed_asd:
      train: [/scratch/AVA/packed/train, /scratch/WASD/packed/train]   # paths, or {path, weight|repeat|...}
      val: [/scratch/AVA/packed/val]

    dm = PackedASDDataModule(cfg["packed_asd"], dataset_args={"frame_budget": 2048}, num_workers=4, seed=0)
    dm = PackedASDDataModule("experiment.yaml")      # or the YAML file itself (or the whole config mapping)
    trainer = Trainer(use_distributed_sampler=False, ...)   # the loader shards itself
    trainer.fit(model, datamodule=dm)

The loaders are ``loader.torch.SpeechLoader`` s (``task: asd``): they deal batches to ranks themselves (every rank
the same number, every frame scored at most once per epoch), so Lightning must not wrap them in a
``DistributedSampler``: construct the Trainer with ``use_distributed_sampler=False`` (MuVAP does the same).  The rank and world size come
from the attached Trainer.  Lightning calls ``set_epoch`` on a loader's ``sampler`` at the start of every epoch;
the loaders handed to Lightning expose one that forwards to ``SpeechLoader.set_epoch``, so each epoch gets its
own order and batch composition.  They are also stateful (``state_dict``/``load_state_dict``), which Lightning's
fit loop keeps in its checkpoints: a run resumed from a mid-epoch checkpoint gets exactly the batches left.
Validation and test run whole tracks (padded, padding unscored); without ``val`` packs there is no validation.

It is ``loader.datamodule.SpeechDataModule`` (every task's DataModule) reading MuVAP's ``packed_asd`` mapping:
one ``task: asd`` config per split. Lightning is imported when the class is first used, so ``import loader.asd``
works without the extra, and a missing extra is a clear error.
"""

from __future__ import annotations

import functools
import os

from speechpack.loader.config_checks import ConfigError
from speechpack.loader.datamodule import EpochForwarder, LightningLoader, datamodule_class, lightning
from speechpack.schemas.documents import key_list
from speechpack.schemas.yaml_document import read_yaml

#: Splits a ``packed_asd`` mapping may name, and the loader state each one runs in.
SPLIT_STATES = {"train": "train", "val": "val", "test": "test"}


def loader_config(packs: list, dataset_args: dict | None, where: str) -> dict:
    """A ``task: asd`` loader config from a split's pack list (paths or ``packs`` entries)."""
    if not isinstance(packs, list) or not packs:
        raise ConfigError(f"{where}: a non-empty list of pack paths (or {{path: ...}} entries) is required")
    entries = [{"path": str(p)} if isinstance(p, (str, bytes)) or hasattr(p, "__fspath__") else p for p in packs]
    return {"task": "asd", "packs": entries, "dataset_args": dataset_args}


def splits_of(config):
    """The ``packed_asd`` mapping of ``config``: MuVAP's whole experiment config (a mapping with a ``packed_asd``
    key, as loaded from its YAML) or the mapping itself; a ``str`` is a YAML file holding either (read with
    ``schemas.yaml_document.read_yaml``: plain data only, bounded, errors name the file and line)."""
    if isinstance(config, str) or hasattr(config, "__fspath__"):
        config = read_yaml(os.fspath(config))
    if isinstance(config, dict) and "packed_asd" in config:
        return config["packed_asd"]
    return config


@functools.cache
def _datamodule_class() -> type:
    lightning("PackedASDDataModule")  # imported here too, so a missing extra names this class

    class PackedASDDataModule(datamodule_class()):
        """ASD packs per split, fed by the speechpack loader (see the module docstring).

        ``packed_asd``: ``{train: [...], val: [...], test: [...]}`` (any subset), or a config holding it under
        ``packed_asd`` (a mapping or a YAML file path: ``splits_of``); ``dataset_args``: the asd
        ``dataset_args`` (``loader.asd.args``), shared by every split (validation ignores the training-only keys);
        ``weighting``: the loader's top-level ``weighting`` for weighted ``packs`` entries.
        """

        def __init__(self, packed_asd: dict, dataset_args: dict | None = None, *, num_workers: int = 4,
                     seed: int = 0, weighting: dict | None = None) -> None:
            packed_asd = splits_of(packed_asd)
            if not isinstance(packed_asd, dict) or not packed_asd:
                raise ConfigError("packed_asd: expected a mapping of split (train, val, test) to pack lists")
            unknown = set(packed_asd) - set(SPLIT_STATES)
            if unknown:
                raise ConfigError(f"packed_asd: unknown split(s) {key_list(unknown)} (known: train, val, test)")
            configs: dict[str, dict] = {}
            for split, packs in packed_asd.items():
                config = loader_config(packs, dataset_args, f"packed_asd.{split}")
                if weighting is not None:
                    config["weighting"] = weighting
                configs[split] = config
            super().__init__(**configs, num_workers=num_workers, seed=seed)
            self.configs = configs

        def _config(self, state: str, name: str):
            if state not in self.configs:
                raise ConfigError(f"packed_asd.{state}: no packs given for this split")
            return super()._config(state, name)

        def test_dataloader(self) -> LightningLoader:
            return self._loader("test", "test")

    PackedASDDataModule.__module__ = __name__
    PackedASDDataModule.__qualname__ = "PackedASDDataModule"  # the key of its state in Lightning's checkpoints
    return PackedASDDataModule


def __getattr__(name: str):
    """``PackedASDDataModule`` is made on first access (that is when Lightning is imported)."""
    if name == "PackedASDDataModule":
        return _datamodule_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EpochForwarder", "LightningLoader", "PackedASDDataModule", "SPLIT_STATES", "loader_config", "splits_of"]
