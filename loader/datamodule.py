"""``SpeechDataModule``: any speechpack loader config (tse, asd, asr) as a Lightning DataModule (optional extra:
``speechpack[lightning]``; docs/integrations.md, "Lightning").

::

    dm = SpeechDataModule(train="train.yaml", val={"dev": "/packs/dev", "test-other": "other.yaml"}, seed=0)
    trainer = lightning.Trainer(use_distributed_sampler=False, ...)   # the loader shards itself
    trainer.fit(model, datamodule=dm)

What Lightning gets, and why:

- **Ranks.** The loaders are ``loader.torch.SpeechLoader`` s: each deals its batches to ranks itself (every rank the
  same number, every item once per epoch), with the rank and world size of the attached Trainer. A
  ``DistributedSampler`` on top would split them again, so the Trainer must be built with
  ``use_distributed_sampler=False``; with more than one rank a Trainer that still has it on is refused (a clear
  error, not a silently halved epoch).
- **Epochs.** Lightning calls ``set_epoch`` on a loader's ``sampler`` at every epoch start; the loaders handed to
  it expose one that forwards to ``SpeechLoader.set_epoch`` (``EpochForwarder``), so each epoch has its own order.
- **Resume.** The loaders are stateful (``state_dict``/``load_state_dict``), which Lightning's fit loop keeps in its
  checkpoints; the DataModule's own ``state_dict`` carries the training loader's state too (epoch and global
  position: ``loader.resume``), so a checkpoint resumes the data exactly even where only the DataModule's state is
  restored, and on any number of devices.
- **Evaluation.** ``val`` and ``test`` take one set, a list or a mapping of named sets (below);
  Lightning runs each as its own ``dataloader_idx``. Without ``val`` there is no validation.

Lightning is imported when the class is first used, so ``import loader.datamodule`` works without the extra, and a
missing extra is a clear error.

Which loader configs a DataModule runs: one training config and named validation and test configs.

A split is given the way a training script already holds it:

- a loader config: a mapping (``task``, ``packs``, ``dataset_args`` ...; a WeSep recipe with ``packs`` or an
  Omnilingual recipe with ``dataset:`` and ``packs`` is one too, docs/loader.md), or a YAML file holding one (read
  with ``schemas.yaml_document.read_yaml``: plain data only, bounded, errors name the file and line);
- for validation and test, also a pack directory or a list of pack directories: the training config with its
  ``packs`` replaced by those (and no weighting), so each evaluation pack runs with the training ``dataset_args``;
- several evaluation sets at once: a list (Lightning numbers them: ``dataloader_idx``) or a mapping of name to any
  of the above (Lightning keeps the order; the names key ``SpeechDataModule.loaders``).

Nothing here imports torch or Lightning: the layout is checked when the DataModule is made, before a Trainer runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator
import functools
import os

from speechpack.loader.config import LoaderConfig
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.pack.files import is_remote
from speechpack.loader.resume import ResumeError
from speechpack.loader.tasks import DEFAULT_TASK, FOREIGN_RECIPES, STATES
from speechpack.schemas.constants import MANIFEST_NAME
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.yaml_document import read_yaml


#: Key of the training loader's state in ``SpeechDataModule.state_dict()``.
TRAIN_STATE_KEY = "train_loader"


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

    def load_state_dict(self, state_dict: dict) -> None:
        self.loader.load_state_dict(state_dict)


def lightning(user: str):
    """``lightning.pytorch``, or an error naming the extra that ``user`` (a class name) needs."""
    try:
        import lightning.pytorch as pl
    except ImportError as err:
        raise SpeechpackError(f"{user} needs Lightning: pip install 'speechpack[lightning]'") from err
    return pl


def rank_and_world(trainer) -> tuple[int, int]:
    """The attached Trainer's rank and world size ((0, 1) without one), after checking that Lightning will not put
    a ``DistributedSampler`` over loaders that already shard by rank."""
    if trainer is None:
        return 0, 1
    rank, world = int(trainer.global_rank), int(trainer.world_size)
    connector = getattr(trainer, "_accelerator_connector", None)  # where Lightning keeps the Trainer argument
    if world > 1 and getattr(connector, "use_distributed_sampler", False):
        raise ConfigError("the speechpack loaders deal batches to ranks themselves: build the Trainer with "
                          f"use_distributed_sampler=False (world size {world})")
    return rank, world


def describe_config(config: Any) -> str:
    """One split's loader config in a line: its task and pack paths (a mapping or a ``LoaderConfig``)."""
    if isinstance(config, dict):
        task = config.get("task") or DEFAULT_TASK
        packs = config.get("packs") or []
        paths = [entry.get("path") if isinstance(entry, dict) else entry for entry in packs]
    else:
        task, paths = config.task, [source.path for source in config.packs]
    shown = ", ".join(str(path) for path in paths) if paths else "none"
    return f"task {task}, packs {shown}"


@functools.cache
def datamodule_class() -> type:
    """``SpeechDataModule``, made on first use (that is when Lightning is imported)."""
    pl = lightning("SpeechDataModule")
    from speechpack.loader.torch import build_loader

    class SpeechDataModule(pl.LightningDataModule):
        """Training, validation and test loaders from speechpack loader configs (see the module docstring).

        ``train``: a loader config (mapping or YAML file); ``val``, ``test``: a config, pack directories (the
        training config on those packs), or a list or mapping of either (the module docstring).
        ``num_workers``, ``pin_memory``, ``prefetch_factor``, ``batches_per_message`` and ``seed`` go to every
        ``build_loader``; None keeps the config's own (a WeSep recipe's ``dataloader_args``, an ASR config's ``npc``;
        docs/loader.md) or, for ``batches_per_message``, sizes messages automatically.
        """

        def __init__(self, train: Any = None, val: Any = None, test: Any = None, *, num_workers: int | None = None,
                     seed: int = 0, pin_memory: bool | None = None, prefetch_factor: int | None = None,
                     batches_per_message: int | None = None) -> None:
            super().__init__()
            self.splits: dict[str, Split] = splits(train, val, test)
            self.num_workers = num_workers
            self.seed = seed
            self.pin_memory = pin_memory
            self.prefetch_factor = prefetch_factor
            self.batches_per_message = batches_per_message
            #: The loaders made so far, by name (``train``, ``val``, ``val/0``, ``val/dev`` ...).
            self.loaders: dict[str, LightningLoader] = {}
            #: A resume state loaded before the training loader was made (applied when it is).
            self._pending_resume: dict | None = None

        def _config(self, split_name: str, name: str):
            split = self.splits.get(split_name)
            if split is None:
                raise ConfigError(f"{split_name}: no loader config given for this split")
            return split.configs[name]

        def _loader(self, split_name: str, name: str) -> LightningLoader:
            config = self._config(split_name, name)
            rank, world = rank_and_world(self.trainer)
            current = self.loaders.get(name)
            if current is None or (current.loader.rank, current.loader.world_size) != (rank, world):
                loader = build_loader(config, split_name, rank=rank, world_size=world, num_workers=self.num_workers,
                                      seed=self.seed, pin_memory=self.pin_memory,
                                      prefetch_factor=self.prefetch_factor,
                                      batches_per_message=self.batches_per_message)
                current = self.loaders[name] = LightningLoader(loader)
                if split_name == "train" and self._pending_resume is not None:
                    current.load_state_dict(self._pending_resume)
                    self._pending_resume = None
            return current

        def _evaluation(self, split_name: str):
            """One loader, a list or a mapping, as the split was given; no split: an empty list (Lightning: none)."""
            split = self.splits.get(split_name)
            if split is None:
                return []
            loaders = {name: self._loader(split_name, name) for name in split.names()}
            if split.shape == MAPPING:
                return {name.split("/", 1)[1]: loader for name, loader in loaders.items()}
            if split.shape == LIST:
                return list(loaders.values())
            return loaders[split_name]

        def train_dataloader(self) -> LightningLoader:
            return self._loader("train", "train")

        def val_dataloader(self):
            return self._evaluation("val")

        def test_dataloader(self):
            if "test" not in self.splits:
                raise ConfigError("test: no loader config given for this split")
            return self._evaluation("test")

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            """What the task leaves to the training process, applied on the device Lightning has just moved the
            batch to (``SpeechLoader.augment``: TSE's ``augment_on: batch``); other batches pass unchanged."""
            loader = self.loaders.get("train")
            return batch if loader is None else loader.loader.augment(batch)

        def state_dict(self) -> dict:
            """The training loader's state (a few numbers: epoch, batches consumed, identity); Lightning writes it
            into every checkpoint under this class's name."""
            loader = self.loaders.get("train")
            if loader is not None:
                return {TRAIN_STATE_KEY: loader.state_dict()}
            return {} if self._pending_resume is None else {TRAIN_STATE_KEY: dict(self._pending_resume)}

        def load_state_dict(self, state_dict: dict) -> None:
            """Resume the training loader from a ``state_dict()`` (applied now, or when the loader is made: Lightning
            restores the DataModule before it asks for loaders), at any world size. A state from other data, config
            or seed is refused (``loader.resume.ResumeError``)."""
            if not isinstance(state_dict, dict) or TRAIN_STATE_KEY not in state_dict:
                raise ResumeError(f"DataModule state lacks {TRAIN_STATE_KEY} (SpeechDataModule.state_dict())")
            loader = self.loaders.get("train")
            if loader is not None:
                loader.load_state_dict(state_dict[TRAIN_STATE_KEY])
            else:
                self._pending_resume = state_dict[TRAIN_STATE_KEY]

        def __str__(self) -> str:
            """The splits and their packs, without making a loader.  Lightning's own ``__str__`` calls every
            ``*_dataloader`` method (building loaders, opening packs) and then walks what they return as
            ``DataLoader`` s; ours are ``LightningLoader`` s, which it iterates as if they were lists of loaders."""
            lines = [f"{type(self).__name__}(seed={self.seed}, num_workers="
                     f"{'from the config' if self.num_workers is None else self.num_workers})"]
            for split in self.splits.values():
                for name in split.names():
                    made = self.loaders.get(name)
                    batches = f", {len(made)} batches per rank" if made is not None else ""
                    lines.append(f"  {name}: {describe_config(split.configs[name])}{batches}")
            return "\n".join(lines)

    SpeechDataModule.__module__ = __name__
    SpeechDataModule.__qualname__ = "SpeechDataModule"  # the key of its state in Lightning's checkpoints
    return SpeechDataModule


def __getattr__(name: str):
    """``SpeechDataModule`` is made on first access (that is when Lightning is imported)."""
    if name == "SpeechDataModule":
        return datamodule_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: How an evaluation split was given, which is how its loaders are handed back to Lightning.
ONE, LIST, MAPPING = "one", "list", "mapping"


@dataclass(frozen=True)
class Split:
    """The loader configs of one split, by name (``train``, ``val``, ``val/0``, ``val/dev-clean`` ...), in order,
    and the shape Lightning gets them back in (``ONE`` loader, a ``LIST`` or a ``MAPPING`` of loaders)."""

    split_name: str
    shape: str
    configs: dict[str, Any]

    def names(self) -> list[str]:
        return list(self.configs)


def _is_path(value: Any) -> bool:
    return isinstance(value, str) or hasattr(value, "__fspath__")


def _is_pack(value: Any) -> bool:
    """A pack directory, or a pack's URL (``s3://bucket/packs/train``: read through the node cache)."""
    return _is_path(value) and (is_remote(value) or os.path.isfile(os.path.join(os.fspath(value), MANIFEST_NAME)))


def read_config(spec: Any, where: str) -> dict | LoaderConfig:
    """A loader config from a mapping, a ``LoaderConfig`` (used as it is) or a YAML file's path."""
    if isinstance(spec, (dict, LoaderConfig)):
        return spec
    if _is_path(spec):
        path = os.fspath(spec)
        if not os.path.isfile(path):
            raise ConfigError(f"{where}: {path} is neither a loader config file (YAML) nor a pack directory "
                              f"(no {MANIFEST_NAME})")
        loaded = read_yaml(path, error=ConfigError)
        if not isinstance(loaded, dict):
            raise ConfigError(f"{where}: {path} holds {type(loaded).__name__}, not a loader config mapping")
        return loaded
    raise ConfigError(f"{where}: expected a loader config (mapping or YAML file) or pack directories, "
                      f"got {type(spec).__name__}")


def _packs_config(packs: list, base: dict | LoaderConfig | None, where: str) -> dict:
    """The training config ``base`` with its ``packs`` replaced by ``packs`` (directories) and no weighting."""
    if base is None:
        raise ConfigError(f"{where}: pack directories need a train config to take task and dataset_args from "
                          f"(or give a whole loader config here)")
    if isinstance(base, LoaderConfig):
        raise ConfigError(f"{where}: pack directories need the train config as a mapping or YAML file, "
                          f"not a LoaderConfig (it was read for train only)")
    config = {key: value for key, value in base.items() if key != "weighting"}
    config["packs"] = [{"path": os.fspath(p)} for p in packs]
    return config


def _entry(spec: Any, base: dict | LoaderConfig | None, where: str) -> dict | LoaderConfig:
    """One evaluation loader's config: a pack directory, a list of them, or a loader config."""
    if _is_pack(spec):
        return _packs_config([spec], base, where)
    if isinstance(spec, (list, tuple)) and spec and all(_is_pack(p) for p in spec):
        return _packs_config(list(spec), base, where)
    return read_config(spec, where)


def evaluation_split(spec: Any, split_name: str, base: dict | LoaderConfig | None) -> Split | None:
    """The ``val`` or ``test`` split (``split_name``) from what the user gave (None: no such split)."""
    if spec is None:
        return None
    if isinstance(spec, (list, tuple)) and not spec:
        raise ConfigError(f"{split_name}: an empty list; leave it out for no {split_name} split")
    # A mapping of named sets, not one config (a config has packs, or is another tool's recipe).
    if isinstance(spec, dict) and "packs" not in spec and not any(key in spec for key in FOREIGN_RECIPES):
        if not spec:
            raise ConfigError(f"{split_name}: an empty mapping; leave it out for no {split_name} split")
        configs = {}
        for name, entry in spec.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise ConfigError(f"{split_name}: set names must be non-empty strings without '/', got {name!r}")
            configs[f"{split_name}/{name}"] = _entry(entry, base, f"{split_name}.{name}")
        return Split(split_name, MAPPING, configs)
    if isinstance(spec, (list, tuple)) and not all(_is_pack(p) for p in spec):
        return Split(split_name, LIST, {f"{split_name}/{i}": _entry(entry, base, f"{split_name}[{i}]")
                                        for i, entry in enumerate(spec)})
    return Split(split_name, ONE, {split_name: _entry(spec, base, split_name)})


def splits(train: Any, val: Any, test: Any) -> dict[str, Split]:
    """Every split given, by name (``train``, ``val``, ``test``: a loader's ``state``); at least one is
    required."""
    result: dict[str, Split] = {}
    base = None
    if train is not None:
        base = read_config(train, "train")
        result["train"] = Split("train", ONE, {"train": base})
    for split_name, spec in (("val", val), ("test", test)):
        split = evaluation_split(spec, split_name, base)
        if split is not None:
            result[split_name] = split
    if not result:
        raise ConfigError(f"no split given: pass at least one of {', '.join(STATES)}")
    return result


__all__ = ["EpochForwarder", "LIST", "LightningLoader", "MAPPING", "ONE", "SpeechDataModule", "Split", "TRAIN_STATE_KEY",
           "datamodule_class", "describe_config", "evaluation_split", "lightning", "rank_and_world", "read_config",
           "splits"]
