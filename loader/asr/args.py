"""``dataset_args`` of the ASR task (``task: asr``): Omnilingual's ``AsrTaskConfig`` names and defaults, and
Omnilingual's recipe translated into them.

============================  =========  ===================================================================
key                           default    meaning
============================  =========  ===================================================================
min_audio_len                 1          fewer samples (per channel, at the pack rate): filtered out
max_audio_len                 800000     more samples: filtered out (50 s at 16 kHz)
min_samples_per_char          160        fewer audio samples per transcript character: filtered out
filter_long_text_threshold    None       more target tokens: filtered out (None: no limit)
remove_unknown                False      delete unknown tokens from the targets (an item left empty is filtered)
normalize                     none       ``utterance``: zero mean, unit variance per utterance (``loader.normalize``)
normalize_audio               False      Omnilingual's key for the same: ``true`` is ``normalize: utterance``
                                         (waveforms only: with ``use_fbank`` it has no effect, as in Omnilingual)
use_fbank                     False      80-bin Kaldi log-mel filterbank, standardised (``source_seqs`` [B, T, 80])
spec_aug_p                    None       SpecAugment probability per utterance, train only (None: off)
spec_aug_freq_mask_param      80         frequency mask width is below this (bins)
spec_aug_time_mask_param      80         time mask width is below this (frames)
batching_strategy             LENGTH     LENGTH: ``max_num_elements`` budget; STATIC: ``batch_size`` rows
max_num_elements              3200000    LENGTH: rows x longest row (samples) per batch, at most (rounded down
                                         to a multiple of ``max_audio_len``, as Omnilingual does)
num_seqs_multiple_of          8          LENGTH: rows per batch are a multiple of this
batch_size                    8          STATIC: rows per batch
drop_remainder                False      drop the epoch's incomplete last batch (else LENGTH serves it short, as
                                         fairseq2 does; STATIC pads it, rows invalid)
tokenizer                     char       ``char``, ``{char: PACK or [PACKS]}`` or ``{sentencepiece: MODEL}``
shuffle                       True       a new order every epoch (from the seed)
dataset_summary_path          None       Omnilingual's stats TSV: hours for weighting (default: the packs')
dataset_summary_split         train      the TSV rows of this split count
train_split                   None       the split a ``train`` loader reads (``loader.asr.selection``; None: all)
valid_split                   None       the split a ``val`` loader reads
partition_filters             None       pyarrow filter text on corpus/language (``loader.asr.selection``)
fragment_shuffle_window       -1         shuffle of the items as read: -1 whole, 0 none, n a sliding window
example_shuffle_window        0          shuffle before batching: 0 whole, 1 none, n a sliding window
batch_shuffle_window          1000       shuffle of the batches: 0 whole, 1 none, n a sliding window
num_prefetch                  None       batches prefetched: the DataLoader's prefetch (``loader.torch``)
npc                           None       parallel calls: the DataLoader's workers, unless build_loader sets them
sync_mode                     None       UNTIL_FIRST: surplus batches dropped so ranks are even; UNTIL_LAST: the
                                         short ranks padded (None: as ``drop_remainder``)
sync_batches                  True       every rank gets the same number of batches (false is refused)
============================  =========  ===================================================================

The shuffle windows have fairseq2's meaning (``loader.plan.static_plan``) and are applied in the plan, so the order
is a pure function of (seed, epoch): the same on every worker and after a resume.  ``shuffle: false`` turns all
three off.  Corpus/language weighting is the loader's top-level ``weighting`` (see ``loader.asr.task``);
Omnilingual's ``dataset:`` block is translated into these keys by ``from_recipe`` (below).

Every number has a range (``loader.config_checks``): ``batch_size`` and ``num_seqs_multiple_of`` at most
``MAX_BATCH_ROWS`` rows, lengths, budgets and mask widths at most ``MAX_COUNT``, ``npc`` and ``num_prefetch``
at most ``MAX_WORKERS``.  An ``AsrArgs`` built directly is checked the same way.

**Recipes.**  Omnilingual's recipe ``dataset:`` block (and ``tokenizer:``) as a speechpack ASR loader config.

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
from dataclasses import dataclass, fields
from typing import Any

from speechpack.loader.asr.items import FilterArgs
from speechpack.loader.asr.selection import parse_partition_filters
from speechpack.loader.asr.tokenizer import TokenizerSpec, parse_tokenizer
from speechpack.loader.config_checks import (
    MAX_BATCH_ROWS,
    MAX_COUNT,
    ConfigError,
    check_choice,
    check_type,
    positive_int,
    probability,
    take_known,
)
from speechpack.loader.normalize import NONE, UTTERANCE, parse_normalize
from speechpack.loader.plan.batching import BudgetArgs
from speechpack.loader.plan.static_plan import NO_SHUFFLE, WHOLE, ShuffleWindows

#: Most DataLoader workers ``npc`` may ask for, and most batches ``num_prefetch`` may hold back.
MAX_WORKERS = 1024

BATCHING_STRATEGIES = ("LENGTH", "STATIC")
TOKENIZER_KINDS = ("char", "sentencepiece")
#: ``sync_mode`` values -> how the plan evens the batch count across ranks (``loader.plan.static_plan``'s ``sync``).
SYNC_MODES = {"UNTIL_FIRST": "drop", "UNTIL_LAST": "pad"}


@dataclass(frozen=True)
class AsrArgs:
    """The parsed ``dataset_args`` (module docstring)."""

    min_audio_len: int = FilterArgs.min_audio_len  # the filters' defaults are defined once, in loader.asr.items
    max_audio_len: int = FilterArgs.max_audio_len
    min_samples_per_char: int = FilterArgs.min_samples_per_char
    filter_long_text_threshold: int | None = FilterArgs.filter_long_text_threshold
    remove_unknown: bool = FilterArgs.remove_unknown
    #: Omnilingual's key, kept as the stored form (``normalize`` reads it in the shared vocabulary).
    normalize_audio: bool = False
    use_fbank: bool = False
    spec_aug_p: float | None = None
    spec_aug_freq_mask_param: int = 80
    spec_aug_time_mask_param: int = 80
    batching_strategy: str = "LENGTH"
    max_num_elements: int = 3_200_000
    num_seqs_multiple_of: int = 8
    batch_size: int = 8
    drop_remainder: bool = False
    tokenizer: TokenizerSpec = TokenizerSpec()
    shuffle: bool = True
    dataset_summary_path: str | None = None
    dataset_summary_split: str = "train"
    train_split: str | None = None
    valid_split: str | None = None
    partition_filters: str | tuple[str, ...] | None = None
    fragment_shuffle_window: int = -1
    example_shuffle_window: int = WHOLE
    batch_shuffle_window: int = 1000
    num_prefetch: int | None = None
    npc: int | None = None
    sync_mode: str | None = None
    sync_batches: bool = True

    @property
    def shuffle_windows(self) -> ShuffleWindows:
        """The plan's three shuffles; fairseq2's fragment window counts -1 as whole and 0 as none."""
        fragment = self.fragment_shuffle_window
        source = WHOLE if fragment == -1 else NO_SHUFFLE if fragment == 0 else fragment
        return ShuffleWindows(source=source, example=self.example_shuffle_window, batch=self.batch_shuffle_window)

    @property
    def sync(self) -> str | None:
        """How the plan evens the batch count across ranks (None: as ``tail``)."""
        return None if self.sync_mode is None else SYNC_MODES[self.sync_mode]

    def __post_init__(self) -> None:
        _check({f.name: getattr(self, f.name) for f in fields(self)}, "dataset_args")
        if not isinstance(self.tokenizer, TokenizerSpec):
            raise ConfigError(f"dataset_args.tokenizer: expected a TokenizerSpec, got {self.tokenizer!r}")

    @property
    def normalize(self) -> str:
        """``normalize`` in the vocabulary every task shares (``loader.normalize``): ``utterance`` or ``none``."""
        return UTTERANCE if self.normalize_audio else NONE

    @property
    def length_budget(self) -> int:
        """The elements a LENGTH batch may hold: ``max_num_elements`` rounded down to a multiple of
        ``max_audio_len``, as Omnilingual's ``add_length_batching`` rounds it (3,200,000 with 960,000 gives
        2,880,000).  Below ``max_audio_len``, where Omnilingual's rounding leaves 0 and fairseq2 refuses, it is
        ``max_num_elements`` as given (the loader then checks it against the longest kept utterance)."""
        budget, longest = self.max_num_elements, self.max_audio_len
        return budget // longest * longest if 0 < longest <= budget else budget

    @property
    def batching(self) -> BudgetArgs | None:
        """LENGTH: the plan's budget (linear cost: rows x longest row); STATIC: None (fixed ``batch_size``)."""
        if self.batching_strategy != "LENGTH":
            return None
        return BudgetArgs(budget=self.length_budget, cost="linear", multiple_of=self.num_seqs_multiple_of,
                          keep_small=True)

    @property
    def tail(self) -> str:
        return "drop" if self.drop_remainder else "pad"

    @property
    def filters(self) -> FilterArgs:
        return FilterArgs(min_audio_len=self.min_audio_len, max_audio_len=self.max_audio_len,
                          min_samples_per_char=self.min_samples_per_char,
                          filter_long_text_threshold=self.filter_long_text_threshold,
                          remove_unknown=self.remove_unknown)


#: ``dataset_args`` keys and their defaults, as written in a config (the tokenizer as its short form).
_DEFAULTS = {f.name: ("char" if f.name == "tokenizer" else f.default) for f in fields(AsrArgs)}
#: ``normalize`` values the ASR task builds, and the key of the shared vocabulary (``normalize_audio`` its alias).
NORMALIZE_CHOICES = (UTTERANCE, NONE)
_KEYS = {**_DEFAULTS, "normalize": None}


def _check_pipeline(v: dict, where: str) -> None:
    """Splits, partition filters, shuffle windows, prefetch and rank synchronisation (module docstring)."""
    for key in ("train_split", "valid_split"):
        if v[key] is not None and (not isinstance(v[key], str) or not v[key]):
            raise ConfigError(f"{where}.{key}: expected a split name, got {v[key]!r}")
    parse_partition_filters(v["partition_filters"], f"{where}.partition_filters")
    if check_type(v["fragment_shuffle_window"], int, f"{where}.fragment_shuffle_window") < -1:
        raise ConfigError(f"{where}.fragment_shuffle_window: -1 (whole), 0 (none) or a window, got "
                          f"{v['fragment_shuffle_window']}")
    for key in ("example_shuffle_window", "batch_shuffle_window"):
        if check_type(v[key], int, f"{where}.{key}") < 0:
            raise ConfigError(f"{where}.{key}: 0 (whole), 1 (none) or a window, got {v[key]}")
    for key in ("fragment_shuffle_window", "example_shuffle_window", "batch_shuffle_window"):
        positive_int(v[key], f"{where}.{key}", minimum=-1)
    for key, minimum in (("num_prefetch", 0), ("npc", 1)):
        if v[key] is not None:
            positive_int(v[key], f"{where}.{key}", minimum=minimum, maximum=MAX_WORKERS)
    if v["sync_mode"] is not None and v["sync_mode"] not in SYNC_MODES:
        raise ConfigError(f"{where}.sync_mode: {v['sync_mode']!r} is not one of {', '.join(SYNC_MODES)}")
    if check_type(v["sync_batches"], bool, f"{where}.sync_batches") is not True:
        raise ConfigError(f"{where}.sync_batches: speechpack always gives every rank the same number of batches "
                          f"(sync_mode chooses how); false is not supported")


def parse_dataset_args(obj, where: str) -> AsrArgs:
    """``dataset_args`` of an ASR loader config; every key checked, unknown keys named."""
    v = take_known(obj, where, _KEYS)
    if isinstance(v["partition_filters"], list):  # stored as a tuple: the args are frozen and hashable
        v["partition_filters"] = tuple(v["partition_filters"])
    if isinstance(v["sync_mode"], str):  # fairseq2's enum spelt in full ("SyncMode.UNTIL_FIRST") too
        v["sync_mode"] = v["sync_mode"].rpartition(".")[2].upper()
    normalize = v.pop("normalize")
    if normalize is not None:
        normalize = parse_normalize(normalize, f"{where}.normalize", NORMALIZE_CHOICES, UTTERANCE)
        if isinstance(obj, dict) and "normalize_audio" in obj and v["normalize_audio"] != (normalize == UTTERANCE):
            raise ConfigError(f"{where}.normalize: {normalize!r} contradicts normalize_audio: "
                              f"{v['normalize_audio']!r} (its alias); set one of them")
        v["normalize_audio"] = normalize == UTTERANCE
    strategy = v["batching_strategy"]
    if not isinstance(strategy, str) or strategy.upper() not in BATCHING_STRATEGIES:
        raise ConfigError(f"{where}.batching_strategy: {strategy!r} is not one of {', '.join(BATCHING_STRATEGIES)}")
    v["batching_strategy"] = strategy.upper()
    _check(v, where)  # first, so errors name the config path
    p = v["spec_aug_p"]
    return AsrArgs(**{**v, "spec_aug_p": None if p is None else float(p),
                      "tokenizer": parse_tokenizer(v["tokenizer"], f"{where}.tokenizer")})


#: Counts that may be 0 and counts that must be at least 1, with their ceilings: lengths, budgets and mask widths
#: in samples, frames or bins (``MAX_COUNT``); rows of a batch (``MAX_BATCH_ROWS``).
_NON_NEGATIVE = {"min_audio_len": MAX_COUNT, "min_samples_per_char": MAX_COUNT,
                 "spec_aug_freq_mask_param": MAX_COUNT, "spec_aug_time_mask_param": MAX_COUNT}
_POSITIVE = {"max_audio_len": MAX_COUNT, "max_num_elements": MAX_COUNT, "num_seqs_multiple_of": MAX_BATCH_ROWS,
             "batch_size": MAX_BATCH_ROWS}


def _check(v: dict, where: str) -> None:
    """Every value of ``v`` (one per ``AsrArgs`` field but ``tokenizer``) against its type and range, named under
    ``where``: run by the parser (config paths) and on construction."""
    for key, ceiling in _NON_NEGATIVE.items():
        if check_type(v[key], int, f"{where}.{key}") < 0:
            raise ConfigError(f"{where}.{key}: must be non-negative, got {v[key]}")
        positive_int(v[key], f"{where}.{key}", minimum=0, maximum=ceiling)
    for key, ceiling in _POSITIVE.items():
        check_type(v[key], int, f"{where}.{key}")
        if key != "max_audio_len" and v[key] < 1:
            raise ConfigError(f"{where}.{key}: must be at least 1, got {v[key]}")
        positive_int(v[key], f"{where}.{key}", minimum=0, maximum=ceiling)
    for key in ("remove_unknown", "normalize_audio", "use_fbank", "drop_remainder", "shuffle"):
        check_type(v[key], bool, f"{where}.{key}")
    if v["max_audio_len"] < v["min_audio_len"]:
        raise ConfigError(f"{where}.max_audio_len: {v['max_audio_len']} is below min_audio_len {v['min_audio_len']}")
    threshold = v["filter_long_text_threshold"]
    if threshold is not None:
        if check_type(threshold, int, f"{where}.filter_long_text_threshold") < 1:
            raise ConfigError(f"{where}.filter_long_text_threshold: must be at least 1 token, got {threshold}")
        positive_int(threshold, f"{where}.filter_long_text_threshold")
    if v["spec_aug_p"] is not None:
        probability(v["spec_aug_p"], f"{where}.spec_aug_p")
    if v["dataset_summary_path"] is not None and not (isinstance(v["dataset_summary_path"], str)
                                                      and v["dataset_summary_path"]):
        raise ConfigError(f"{where}.dataset_summary_path: expected a TSV path, got {v['dataset_summary_path']!r}")
    if not isinstance(v["dataset_summary_split"], str) or not v["dataset_summary_split"]:
        raise ConfigError(f"{where}.dataset_summary_split: expected a split name, got {v['dataset_summary_split']!r}")
    check_choice(v["batching_strategy"], BATCHING_STRATEGIES, f"{where}.batching_strategy")
    _check_pipeline(v, where)


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


def _recipe_tokenizer(obj: Any, where: str) -> dict:
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
        args["tokenizer"] = _recipe_tokenizer(top["tokenizer"], f"{where}.tokenizer")
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


__all__ = ["ASR_TASK_KEYS", "BATCHING_STRATEGIES", "MAX_WORKERS", "NORMALIZE_CHOICES", "OTHER_SECTIONS", "RECIPE_KEY",
           "SYNC_MODES", "AsrArgs", "from_recipe", "parse_dataset_args"]
