"""Which loader configs a DataModule runs: one training config and named validation and test configs.

A split is given the way a training script already holds it (``loader.datamodule``):

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

import os
from dataclasses import dataclass
from typing import Any

from speechpack.loader.config import LoaderConfig
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.tasks import STATES
from speechpack.loader.pack.files import is_remote
from speechpack.schemas.constants import MANIFEST_NAME
from speechpack.schemas.yaml_document import read_yaml

#: How an evaluation split was given, which is how its loaders are handed back to Lightning.
ONE, LIST, MAPPING = "one", "list", "mapping"


@dataclass(frozen=True)
class Split:
    """The loader configs of one split, by name (``train``, ``val``, ``val/0``, ``val/dev-clean`` ...), in order,
    and the shape Lightning gets them back in (``ONE`` loader, a ``LIST`` or a ``MAPPING`` of loaders)."""

    state: str
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


def evaluation_split(spec: Any, state: str, base: dict | LoaderConfig | None) -> Split | None:
    """The ``val`` or ``test`` split (``state``) from what the user gave (None: no such split)."""
    if spec is None:
        return None
    if isinstance(spec, (list, tuple)) and not spec:
        raise ConfigError(f"{state}: an empty list; leave it out for no {state} split")
    if isinstance(spec, dict) and "packs" not in spec and "dataset" not in spec:
        if not spec:
            raise ConfigError(f"{state}: an empty mapping; leave it out for no {state} split")
        configs = {}
        for name, entry in spec.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise ConfigError(f"{state}: set names must be non-empty strings without '/', got {name!r}")
            configs[f"{state}/{name}"] = _entry(entry, base, f"{state}.{name}")
        return Split(state, MAPPING, configs)
    if isinstance(spec, (list, tuple)) and not all(_is_pack(p) for p in spec):
        return Split(state, LIST, {f"{state}/{i}": _entry(entry, base, f"{state}[{i}]")
                                   for i, entry in enumerate(spec)})
    return Split(state, ONE, {state: _entry(spec, base, state)})


def splits(train: Any, val: Any, test: Any) -> dict[str, Split]:
    """Every split given, by state; at least one is required."""
    result: dict[str, Split] = {}
    base = None
    if train is not None:
        base = read_config(train, "train")
        result["train"] = Split("train", ONE, {"train": base})
    for state, spec in (("val", val), ("test", test)):
        split = evaluation_split(spec, state, base)
        if split is not None:
            result[state] = split
    if not result:
        raise ConfigError(f"no split given: pass at least one of {', '.join(STATES)}")
    return result


__all__ = ["LIST", "MAPPING", "ONE", "Split", "evaluation_split", "read_config", "splits"]
