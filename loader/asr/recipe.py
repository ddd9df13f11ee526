"""Omnilingual's recipe ``dataset:`` block (and ``tokenizer:``) as a speechpack ASR loader config.

An Omnilingual fine-tuning or LLM recipe describes its data with a ``dataset:`` section (``storage_mode:
MIXTURE_PARQUET``, ``task_mode: ASR``, a ``mixture_parquet_storage_config`` and an ``asr_task_config``) and a
``tokenizer:`` section.  ``from_recipe`` turns such a config, plus speechpack's ``packs:`` (where the data now is),
into the plain loader config of ``loader.config``: every key is checked and lands where speechpack implements its
meaning, so ``build_loader``, ``speechpack peek`` and ``speechpack plan`` take the recipe as it is.

=====================================================  =========================================================
recipe key                                             speechpack
=====================================================  =========================================================
``dataset.name``, ``path``, ``family``                 informational (the data is ``packs:``)
``dataset.storage_mode``                               ``MIXTURE_PARQUET`` (the source ``build parquet`` reads)
``dataset.task_mode``                                  ``ASR``: ``task: asr``
``dataset.train_split`` / ``valid_split``              ``dataset_args`` of the same name (``loader.asr.selection``)
``asr_task_config.*``                                  ``dataset_args.*`` (same names and meanings)
``mixture_parquet_storage_config.beta_corpus``,        top-level ``weighting`` and ``hours_beta: true`` on every
``beta_language``                                      ``packs`` entry (a None beta: 1, hours as they are)
``.dataset_summary_path``                              ``dataset_args.dataset_summary_path`` (hours for weighting)
``.sync_mode``, ``.sync_batches``                      ``dataset_args`` of the same name (ranks' equal steps)
``.fragment_streaming.fragment_shuffle_window``        ``dataset_args.fragment_shuffle_window`` (in the plan)
``.fragment_streaming.partition_filters``              ``dataset_args.partition_filters`` (parsed, never evaluated)
``.fragment_streaming.seed``, ``nb_epochs``            checked; the run's seed is ``build_loader(seed=)`` and the
                                                       epochs are the training loop's ``set_epoch`` calls
``.fragment_streaming.parquet_path`` and the rest,     checked, no effect: a pack is memory-mapped, so there is
``.fragment_loading.*``                                nothing to cache, prefetch or read in parallel
``tokenizer.name``                                     a SentencePiece model file: ``{sentencepiece: FILE}``
=====================================================  =========================================================

Other sections of a fairseq2 recipe (``model``, ``trainer``, ``optimizer``...) are fairseq2's and are skipped.
Anything else is refused, naming the key.
"""

from __future__ import annotations

import os
from typing import Any

from speechpack.loader.config_checks import ConfigError, check_type, take_known

#: The top-level key that marks an Omnilingual recipe config.
RECIPE_KEY = "dataset"
#: Recipe sections that configure the model and the training run, not the data: skipped.
OTHER_SECTIONS = ("model", "trainer", "optimizer", "lr_scheduler", "regime", "common", "gang", "evaluator")
STORAGE_MODES = ("MIXTURE_PARQUET",)
TASK_MODES = ("ASR",)
#: Omnilingual's ``AsrTaskConfig`` fields: each is a ``dataset_args`` key of the ASR task (``loader.asr.args``).
ASR_TASK_KEYS = ("min_audio_len", "max_audio_len", "normalize_audio", "use_fbank", "spec_aug_p",
                 "spec_aug_freq_mask_param", "spec_aug_time_mask_param", "filter_long_text_threshold",
                 "remove_unknown", "min_samples_per_char", "batching_strategy", "batch_size", "max_num_elements",
                 "num_seqs_multiple_of", "drop_remainder", "example_shuffle_window", "batch_shuffle_window",
                 "num_prefetch", "npc")
_STORAGE = {"dataset_summary_path": None, "beta_corpus": None, "beta_language": None, "fragment_streaming": None,
            "fragment_loading": None, "sync_mode": None, "sync_batches": True}
_STREAMING = {"parquet_path": None, "seed": None, "fragment_shuffle_window": -1, "nb_epochs": None,
              "partition_filters": None, "split_to_row_groups": True, "files_circular_shift": False,
              "filesystem": None}
_LOADING = {"columns": None, "nb_prefetch": None, "num_parallel_fragments": None, "cache": None,
            "use_threads": None, "drop_null": None, "add_fragment_index": None}
_DATASET = {"name": None, "path": None, "family": None, "train_split": None, "valid_split": None,
            "storage_mode": "MIXTURE_PARQUET", "task_mode": "ASR", "mixture_parquet_storage_config": None,
            "asr_task_config": None}


def _mode(value: Any, allowed: tuple[str, ...], where: str, why: str) -> str:
    name = value.rpartition(".")[2].upper() if isinstance(value, str) else value  # "StorageMode.X" too
    if name not in allowed:
        raise ConfigError(f"{where}: {value!r} is not supported: {why}")
    return name


def _tokenizer(obj: Any, where: str) -> dict:
    """``tokenizer: {name: ...}`` as the ASR task's tokenizer spec: a model file, never an asset card."""
    name = take_known(obj, where, {"name": None})["name"]
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: expected a SentencePiece model file, got {name!r}")
    if not os.path.isfile(name):
        raise ConfigError(f"{where}.name: {name!r} is not a file; fairseq2 would fetch the asset card of that name "
                          f"at run time, speechpack does not download: give the SentencePiece model file "
                          f"(tokenizer: {{name: /path/to/tokenizer.model}})")
    return {"sentencepiece": name}


def _streaming(obj: Any, where: str) -> dict:
    """``fragment_streaming``: the keys that mean something for packs, checked; the others' types checked."""
    v = take_known(obj, where, _STREAMING)
    if v["parquet_path"] not in (None, ""):
        raise ConfigError(f"{where}.parquet_path: the data is read from the packs: entries; leave it empty")
    for key in ("seed", "nb_epochs"):
        if v[key] is not None and check_type(v[key], int, f"{where}.{key}") < (0 if key == "seed" else 1):
            raise ConfigError(f"{where}.{key}: must be {'non-negative' if key == 'seed' else 'at least 1'}, "
                              f"got {v[key]}")
    for key in ("split_to_row_groups", "files_circular_shift"):
        check_type(v[key], bool, f"{where}.{key}")
    return {"fragment_shuffle_window": v["fragment_shuffle_window"], "partition_filters": v["partition_filters"]}


def from_recipe(obj: dict, where: str = "config") -> dict:
    """The speechpack loader config of a recipe config (module docstring)."""
    recipe = {k: v for k, v in obj.items() if k not in OTHER_SECTIONS}
    top = take_known(recipe, where, {RECIPE_KEY: None, "packs": None, "tokenizer": None, "task": "asr",
                                          "cache": None})
    if top["task"] != "asr":
        raise ConfigError(f"{where}.task: a dataset: block configures the asr task, got {top['task']!r}")
    here = f"{where}.{RECIPE_KEY}"
    dataset = take_known(top[RECIPE_KEY], here, _DATASET)
    _mode(dataset["storage_mode"], STORAGE_MODES, f"{here}.storage_mode",
          "packs are built from Omnilingual's parquet layout (speechpack build parquet) or JSON lines")
    _mode(dataset["task_mode"], TASK_MODES, f"{here}.task_mode", "speechpack serves the ASR task")
    for key in ("name", "path", "family"):
        if dataset[key] is not None and not isinstance(dataset[key], str):
            raise ConfigError(f"{here}.{key}: expected a string, got {dataset[key]!r}")
    storage_where = f"{here}.mixture_parquet_storage_config"
    storage = take_known(dataset["mixture_parquet_storage_config"], storage_where, _STORAGE)
    task_where = f"{here}.asr_task_config"
    task = take_known(dataset["asr_task_config"], task_where, {key: None for key in ASR_TASK_KEYS})
    args = {key: value for key, value in task.items() if key in (dataset["asr_task_config"] or {})}
    args.update(_streaming(storage["fragment_streaming"], f"{storage_where}.fragment_streaming"))
    take_known(storage["fragment_loading"], f"{storage_where}.fragment_loading", _LOADING)
    for key in ("train_split", "valid_split"):
        args[key] = dataset[key]
    for key in ("dataset_summary_path", "sync_mode", "sync_batches"):
        args[key] = storage[key]
    if top["tokenizer"] is not None:
        args["tokenizer"] = _tokenizer(top["tokenizer"], f"{where}.tokenizer")
    config: dict = {"task": "asr", "packs": top["packs"], "dataset_args": args}
    if top["cache"] is not None:
        config["cache"] = top["cache"]
    betas = {key: storage[key] for key in ("beta_corpus", "beta_language")}
    if any(beta is not None for beta in betas.values()):
        config["weighting"] = {key: 1.0 if beta is None else beta for key, beta in betas.items()}
        packs = top["packs"]
        if isinstance(packs, list):
            config["packs"] = [{**entry, "hours_beta": True} if isinstance(entry, dict) else entry
                               for entry in packs]
    return config


__all__ = ["ASR_TASK_KEYS", "OTHER_SECTIONS", "RECIPE_KEY", "from_recipe"]
