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
the same number, every frame scored once per epoch), so Lightning must not wrap them in a ``DistributedSampler``:
construct the Trainer with ``use_distributed_sampler=False`` (MuVAP does the same).  The rank and world size come
from the attached Trainer.  Lightning calls ``set_epoch`` on a loader's ``sampler`` at the start of every epoch;
the loaders handed to Lightning expose one that forwards to ``SpeechLoader.set_epoch``, so each epoch gets its
own order and batch composition.  They are also stateful (``state_dict``/``load_state_dict``), which Lightning's
fit loop keeps in its checkpoints: a run resumed from a mid-epoch checkpoint gets exactly the batches left.
Validation and test run whole tracks (padded, padding unscored); without ``val`` packs there is no validation.

Lightning is imported when the class is first used, so ``import loader.asd`` works without the extra, and a
missing extra is a clear error.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator

from loader.config_checks import ConfigError
from schemas.errors import SpeechpackError

#: Splits a ``packed_asd`` mapping may name, and the loader state each one runs in.
SPLIT_STATES = {"train": "train", "val": "val", "test": "test"}


class EpochForwarder:
    """What Lightning finds as the loader's ``sampler``: its ``set_epoch`` moves the loader to that epoch."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)


class LightningLoader:
    """A ``SpeechLoader`` as Lightning wants it: sized, iterable, with a ``sampler.set_epoch`` and a state.

    Lightning inspects loaders the way it inspects a ``DataLoader`` (``sampler``, ``batch_sampler``); batches are
    planned by the loader, so there is no batch sampler to find."""

    batch_sampler = None

    def __init__(self, loader) -> None:
        self.loader = loader
        self.sampler = EpochForwarder(loader)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.loader)

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)


def loader_config(packs: list, dataset_args: dict | None, where: str) -> dict:
    """A ``task: asd`` loader config from a split's pack list (paths or ``packs`` entries)."""
    if not isinstance(packs, list) or not packs:
        raise ConfigError(f"{where}: a non-empty list of pack paths (or {{path: ...}} entries) is required")
    entries = [{"path": str(p)} if isinstance(p, (str, bytes)) or hasattr(p, "__fspath__") else p for p in packs]
    return {"task": "asd", "packs": entries, "dataset_args": dataset_args}


def splits_of(config):
    """The ``packed_asd`` mapping of ``config``: MuVAP's whole experiment config (a mapping with a ``packed_asd``
    key, as loaded from its YAML) or the mapping itself; a ``str`` is a YAML file holding either (read with
    ``yaml.safe_load``, which builds plain data only)."""
    if isinstance(config, str) or hasattr(config, "__fspath__"):
        import yaml

        with open(config, encoding="utf-8") as fp:
            config = yaml.safe_load(fp)
    if isinstance(config, dict) and "packed_asd" in config:
        return config["packed_asd"]
    return config


def _lightning():
    try:
        import lightning.pytorch as pl
    except ImportError as err:
        raise SpeechpackError("PackedASDDataModule needs Lightning: pip install 'speechpack[lightning]'") from err
    return pl


@functools.cache
def _datamodule_class() -> type:
    pl = _lightning()
    from loader.torch import build_loader

    class PackedASDDataModule(pl.LightningDataModule):
        """ASD packs per split, fed by the speechpack loader (see the module docstring).

        ``packed_asd``: ``{train: [...], val: [...], test: [...]}`` (any subset), or a config holding it under
        ``packed_asd`` (a mapping or a YAML file path: ``splits_of``); ``dataset_args``: the asd
        ``dataset_args`` (``loader.asd.args``), shared by every split (validation ignores the training-only keys);
        ``weighting``: the loader's top-level ``weighting`` for weighted ``packs`` entries.
        """

        def __init__(self, packed_asd: dict, dataset_args: dict | None = None, *, num_workers: int = 4,
                     seed: int = 0, weighting: dict | None = None) -> None:
            super().__init__()
            packed_asd = splits_of(packed_asd)
            if not isinstance(packed_asd, dict) or not packed_asd:
                raise ConfigError("packed_asd: expected a mapping of split (train, val, test) to pack lists")
            unknown = sorted(set(packed_asd) - set(SPLIT_STATES))
            if unknown:
                raise ConfigError(f"packed_asd: unknown split(s) {', '.join(unknown)} (known: train, val, test)")
            self.configs: dict[str, dict] = {}
            for split, packs in packed_asd.items():
                config = loader_config(packs, dataset_args, f"packed_asd.{split}")
                if weighting is not None:
                    config["weighting"] = weighting
                self.configs[split] = config
            self.num_workers = num_workers
            self.seed = seed
            self.loaders: dict[str, Any] = {}

        def _rank_world(self) -> tuple[int, int]:
            trainer = self.trainer  # set by Lightning when the DataModule is attached
            return (0, 1) if trainer is None else (int(trainer.global_rank), int(trainer.world_size))

        def _loader(self, split: str) -> LightningLoader:
            if split not in self.configs:
                raise ConfigError(f"packed_asd.{split}: no packs given for this split")
            rank, world = self._rank_world()
            current = self.loaders.get(split)
            if current is None or (current.loader.rank, current.loader.world_size) != (rank, world):
                loader = build_loader(self.configs[split], SPLIT_STATES[split], rank=rank, world_size=world,
                                      num_workers=self.num_workers, seed=self.seed)
                self.loaders[split] = LightningLoader(loader)
            return self.loaders[split]

        def train_dataloader(self) -> LightningLoader:
            return self._loader("train")

        def val_dataloader(self) -> LightningLoader | list:
            """Whole tracks; without ``val`` packs an empty list, which Lightning reads as "no validation"."""
            return self._loader("val") if "val" in self.configs else []

        def test_dataloader(self) -> LightningLoader:
            return self._loader("test")

    PackedASDDataModule.__module__ = __name__
    return PackedASDDataModule


def __getattr__(name: str):
    """``PackedASDDataModule`` is made on first access (that is when Lightning is imported)."""
    if name == "PackedASDDataModule":
        return _datamodule_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EpochForwarder", "LightningLoader", "PackedASDDataModule", "SPLIT_STATES", "loader_config", "splits_of"]
