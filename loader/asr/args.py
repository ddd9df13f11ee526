"""``dataset_args`` of the ASR task (``task: asr``): Omnilingual's ``AsrTaskConfig`` names and defaults, every key
declared once, in ``DATASET_ARGS``, and Omnilingual's recipe translated into them.

The table below is ``DATASET_ARGS.markdown()`` (``loader.config_keys``; a test keeps it and docs/asr.md equal to
the declarations).  The last column is where an Omnilingual recipe sets the key (``from_recipe`` reads it there):

| key | type | default | meaning | omnilingual name |
|---|---|---|---|---|
| `min_audio_len` | int in [0, 2^40] | 1 | fewer samples (per channel, at the pack rate): filtered out | `dataset.asr_task_config.min_audio_len` |
| `max_audio_len` | int in [0, 2^40] | 800000 | more samples: filtered out (50 s at 16 kHz); at least `min_audio_len` | `dataset.asr_task_config.max_audio_len` |
| `min_samples_per_char` | int in [0, 2^40] | 160 | fewer audio samples per transcript character: filtered out | `dataset.asr_task_config.min_samples_per_char` |
| `filter_long_text_threshold` | int in [1, 2^40], or null | null | more target tokens: filtered out (`null`: no limit) | `dataset.asr_task_config.filter_long_text_threshold` |
| `remove_unknown` | bool | false | delete unknown tokens from the targets (an item left empty is filtered) | `dataset.asr_task_config.remove_unknown` |
| `normalize_audio` | bool | false | zero mean, unit variance per utterance, on waveforms only (no effect with `use_fbank`, as in Omnilingual); `normalize: utterance` / `none` is the same key in the shared vocabulary (`loader.normalize`) | `dataset.asr_task_config.normalize_audio` |
| `use_fbank` | bool | false | 80-bin Kaldi log-mel filterbank, standardised (`source_seqs` [B, T, 80]) | `dataset.asr_task_config.use_fbank` |
| `spec_aug_p` | number in [0, 1], or null | null | SpecAugment probability per utterance, train only (`null`: off) | `dataset.asr_task_config.spec_aug_p` |
| `spec_aug_freq_mask_param` | int in [0, 2^40] | 80 | frequency mask width is below this (bins) | `dataset.asr_task_config.spec_aug_freq_mask_param` |
| `spec_aug_time_mask_param` | int in [0, 2^40] | 80 | time mask width is below this (frames) | `dataset.asr_task_config.spec_aug_time_mask_param` |
| `batching_strategy` | LENGTH, STATIC | LENGTH | LENGTH: `max_num_elements` budget; STATIC: `batch_size` rows (any case) | `dataset.asr_task_config.batching_strategy` |
| `max_num_elements` | int in [1, 2^40] | 3200000 | LENGTH: rows x longest row (samples) per batch, at most (rounded down to a multiple of `max_audio_len`, as Omnilingual does) | `dataset.asr_task_config.max_num_elements` |
| `num_seqs_multiple_of` | int in [1, 2^20] | 8 | LENGTH: rows per batch are a multiple of this | `dataset.asr_task_config.num_seqs_multiple_of` |
| `batch_size` | int in [1, 2^20] | 8 | STATIC: rows per batch | `dataset.asr_task_config.batch_size` |
| `drop_remainder` | bool | false | drop the epoch's incomplete last batch (else LENGTH serves it short, as fairseq2 does; STATIC pads it, rows invalid) | `dataset.asr_task_config.drop_remainder` |
| `tokenizer` | `char`, `{char: PACK or [PACKS]}` or `{sentencepiece: MODEL}` | char | the target vocabulary (`loader.asr.tokenizer`); a recipe's `tokenizer.name` is a SentencePiece model file | `tokenizer.name` |
| `shuffle` | bool | true | a new order every epoch (from the seed); `false`: the three windows off |  |
| `dataset_summary_path` | a TSV path, or null | null | Omnilingual's stats TSV: hours for weighting (`null`: the packs') | `dataset.mixture_parquet_storage_config.dataset_summary_path` |
| `dataset_summary_split` | a split name | train | the TSV rows of this split count |  |
| `train_split` | a split name, or null | null | the split a `train` loader reads (`loader.asr.selection`; `null`: all) | `dataset.train_split` |
| `valid_split` | a split name, or null | null | the split a `val` loader reads | `dataset.valid_split` |
| `partition_filters` | filter text, a list of them, or null | null | pyarrow filter text on corpus/language (`loader.asr.selection`) | `dataset.mixture_parquet_storage_config.fragment_streaming.partition_filters` |
| `fragment_shuffle_window` | int in [-1, 2^40]; -1 (whole), 0 (none) | -1 | shuffle of the items as read; n: a sliding window | `dataset.mixture_parquet_storage_config.fragment_streaming.fragment_shuffle_window` |
| `example_shuffle_window` | int in [0, 2^40]; 0 (whole), 1 (none) | 0 | shuffle before batching; n: a sliding window | `dataset.asr_task_config.example_shuffle_window` |
| `batch_shuffle_window` | int in [0, 2^40]; 0 (whole), 1 (none) | 1000 | shuffle of the batches; n: a sliding window | `dataset.asr_task_config.batch_shuffle_window` |
| `num_prefetch` | int in [0, 2^10], or null | null | batches prefetched: the DataLoader's prefetch (`loader.torch`) | `dataset.asr_task_config.num_prefetch` |
| `npc` | int in [1, 2^10], or null | null | parallel calls: the DataLoader's workers, unless `build_loader` sets them | `dataset.asr_task_config.npc` |
| `sync_mode` | UNTIL_FIRST, UNTIL_LAST, or null | null | UNTIL_FIRST: surplus batches dropped so ranks are even; UNTIL_LAST: the short ranks padded (`null`: as `drop_remainder`) | `dataset.mixture_parquet_storage_config.sync_mode` |
| `sync_batches` | true | true | every rank gets the same number of batches (`false` is refused) | `dataset.mixture_parquet_storage_config.sync_batches` |
| `shard_window` | int in [1, 2^30], or null | none (whole-epoch shuffle) | shuffle within windows of this many shards (the shards shuffled, then the items within each window; batches kept in that order) instead of the whole epoch: each byte fetched about once per epoch from a store with a cache of a window's shards ([Shard windows](integrations.md#shard-windows)); unweighted epochs only |  |

The shuffle windows have fairseq2's meaning (``loader.plan.static_plan``) and are applied in the plan, so the order
is a pure function of (seed, epoch): the same on every worker and after a resume.  ``shuffle: false`` turns all
three off.  Corpus/language weighting is the loader's top-level ``weighting`` (see ``loader.asr.task``);
Omnilingual's ``dataset:`` block is translated into these keys by ``from_recipe`` (below).

Every number has a range (``loader.config_checks``): ``batch_size`` and ``num_seqs_multiple_of`` at most
``MAX_BATCH_ROWS`` rows, lengths, budgets and mask widths at most ``MAX_COUNT``, ``npc`` and ``num_prefetch``
at most ``MAX_WORKERS``.  An ``AsrArgs`` built directly is checked the same way.  A config is read first
(``Key.read``: ``normalize`` into ``normalize_audio``, ``batching_strategy`` in any case, the tokenizer's forms
into a ``TokenizerSpec``), then checked key by key in the table's order, then ``max_audio_len`` against
``min_audio_len``.  The resume fingerprint hashes every key but ``npc`` and ``num_prefetch``
(``fingerprint=NEVER``: they change how batches are fetched, not which), as every saved ASR state was hashed.

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
every key of the table above's last column             the ``dataset_args`` key of its row (``omnilingual_keys``)
``mixture_parquet_storage_config.beta_corpus``,        top-level ``weighting`` and ``hours_beta: true`` on every
``beta_language``                                      ``packs`` entry (a None beta: 1, hours as they are)
``.fragment_streaming.seed``, ``nb_epochs``            checked; the run's seed is ``build_loader(seed=)`` and the
                                                       epochs are the training loop's ``set_epoch`` calls
``.fragment_streaming.parquet_path`` and the rest,     checked, no effect: a pack is memory-mapped, so there is
``.fragment_loading.*``                                nothing to cache, prefetch or read in parallel
``tokenizer.name``                                     a SentencePiece model file: ``tokenizer: {sentencepiece:
                                                       FILE}``
=====================================================  =========================================================

Other sections of a fairseq2 recipe (``model``, ``trainer``, ``optimizer``...) are fairseq2's and are skipped.
Anything else is refused, naming the key.
"""

from __future__ import annotations

import os
from typing import Any

from speechpack.loader.asr.items import FilterArgs
from speechpack.loader.asr.selection import parse_partition_filters
from speechpack.loader.asr.tokenizer import TokenizerSpec, parse_tokenizer
from speechpack.loader.config_checks import (
    MAX_BATCH_ROWS,
    MAX_COUNT,
    ConfigError,
    check_type,
    positive_int,
    take_known,
)
from speechpack.loader.config_keys import NEVER, SHARD_WINDOW, Bool, Int, Key, KeyTable, Nullable, OneOf, Probability
from speechpack.loader.normalize import NONE, UTTERANCE, parse_normalize
from speechpack.loader.plan.batching import BudgetArgs
from speechpack.loader.plan.static_plan import NO_SHUFFLE, WHOLE, ShuffleWindows

#: Most DataLoader workers ``npc`` may ask for, and most batches ``num_prefetch`` may hold back.
MAX_WORKERS = 1024

BATCHING_STRATEGIES = ("LENGTH", "STATIC")
TOKENIZER_KINDS = ("char", "sentencepiece")
#: ``sync_mode`` values -> how the plan evens the batch count across ranks (``loader.plan.static_plan``'s ``sync``).
SYNC_MODES = {"UNTIL_FIRST": "drop", "UNTIL_LAST": "pad"}
#: ``normalize`` values the ASR task builds, and the key of the shared vocabulary (``normalize_audio`` its alias).
NORMALIZE_CHOICES = (UTTERANCE, NONE)
#: The shared vocabulary's key (``loader.normalize``): another spelling of ``normalize_audio``, read by the parser.
NORMALIZE_KEY = "normalize"
#: The ``dialects`` name of Omnilingual's recipes; a key's name there is its path in the recipe.
OMNILINGUAL = "omnilingual"
_TASK_CONFIG = "dataset.asr_task_config."
_STORAGE_CONFIG = "dataset.mixture_parquet_storage_config."
_STREAMING_CONFIG = _STORAGE_CONFIG + "fragment_streaming."


# -- checks with the ASR task's own wording (``loader.config_keys``: value + where -> the value held) -------------

class _Count:
    """An int in ``[0, hi]``, refused below 0 as ``must be non-negative``."""

    annotation = int

    def __init__(self, hi: int = MAX_COUNT):
        self.hi = hi

    def __call__(self, value: Any, where: str) -> int:
        if check_type(value, int, where) < 0:
            raise ConfigError(f"{where}: must be non-negative, got {value}")
        return positive_int(value, where, minimum=0, maximum=self.hi)

    @property
    def doc(self) -> str:
        return Int(lo=0, hi=self.hi).doc


class _Positive:
    """An int in ``[1, hi]`` (the value written out in full, as this task always did)."""

    annotation = int

    def __init__(self, hi: int = MAX_COUNT):
        self.hi = hi

    def __call__(self, value: Any, where: str) -> int:
        if check_type(value, int, where) < 1:
            raise ConfigError(f"{where}: must be at least 1, got {value}")
        return positive_int(value, where, minimum=0, maximum=self.hi)

    @property
    def doc(self) -> str:
        return Int(hi=self.hi).doc


class _AsGiven:
    """``check``'s checks, the value held as given: an ``AsrArgs`` built in code keeps its ``spec_aug_p: 1`` an
    int, as it always did (a config's is read as a float: ``_read_float``), so its fingerprint stands."""

    def __init__(self, check: Any):
        self.check = check
        self.annotation, self.doc = check.annotation, check.doc

    def __call__(self, value: Any, where: str) -> Any:
        self.check(value, where)
        return value


class _Tokens:
    """A token count in ``[1, 2^40]``, refused below 1 as ``must be at least 1 token``."""

    annotation = int
    doc = Int().doc

    def __call__(self, value: Any, where: str) -> int:
        if check_type(value, int, where) < 1:
            raise ConfigError(f"{where}: must be at least 1 token, got {value}")
        return positive_int(value, where)


class _Window:
    """A fairseq2 shuffle window: an int in ``[lo, 2^40]`` whose smallest values mean whole / none (``words``)."""

    annotation = int

    def __init__(self, lo: int, words: str):
        self.lo, self.words = lo, words

    def __call__(self, value: Any, where: str) -> int:
        if check_type(value, int, where) < self.lo:
            raise ConfigError(f"{where}: {self.words} or a window, got {value}")
        return positive_int(value, where, minimum=-1)

    @property
    def doc(self) -> str:
        return f"{Int(lo=self.lo).doc}; {self.words}"


class _Text:
    """A non-empty string (``what`` it names, in the error)."""

    annotation = str

    def __init__(self, what: str):
        self.what = what

    def __call__(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: expected {self.what}, got {value!r}")
        return value

    @property
    def doc(self) -> str:
        return self.what


class _SyncMode:
    """``null`` or a key of ``SYNC_MODES`` (a config's ``SyncMode.UNTIL_FIRST`` is read as ``UNTIL_FIRST``)."""

    annotation = str | None
    doc = f"{', '.join(SYNC_MODES)}, or null"

    def __call__(self, value: Any, where: str) -> str | None:
        if value is not None and value not in SYNC_MODES:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(SYNC_MODES)}")
        return value


class _SyncBatches:
    """``true`` only: every rank gets the same number of batches."""

    annotation = bool
    doc = "true"

    def __call__(self, value: Any, where: str) -> bool:
        if check_type(value, bool, where) is not True:
            raise ConfigError(f"{where}: speechpack always gives every rank the same number of batches "
                              f"(sync_mode chooses how); false is not supported")
        return value


class _PartitionFilters:
    """``null``, a pyarrow filter text or a list of them (held as a tuple), parsed here and in the selection."""

    annotation = str | tuple[str, ...] | None
    doc = "filter text, a list of them, or null"

    def __call__(self, value: Any, where: str) -> Any:
        parse_partition_filters(value, where)
        return value


class _Tokenizer:
    """A ``TokenizerSpec`` (a config's forms are read into one by ``parse_tokenizer``)."""

    annotation = TokenizerSpec
    doc = "`char`, `{char: PACK or [PACKS]}` or `{sentencepiece: MODEL}`"

    def __call__(self, value: Any, where: str) -> TokenizerSpec:
        if not isinstance(value, TokenizerSpec):
            raise ConfigError(f"{where}: expected a TokenizerSpec, got {value!r}")
        return value


# -- a config's other spellings (``Key.read``) --------------------------------------------------------------------

def _read_strategy(value: Any, where: str) -> str:
    """``batching_strategy`` in any case (``static``)."""
    if not isinstance(value, str) or value.upper() not in BATCHING_STRATEGIES:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(BATCHING_STRATEGIES)}")
    return value.upper()


#: The default tokenizer, held as it is; any other value a config gives is read by ``parse_tokenizer``.
_CHAR = TokenizerSpec()


def _read_tokenizer(value: Any, where: str) -> TokenizerSpec:
    return value if value is _CHAR else parse_tokenizer(value, where)


def _read_float(value: Any, where: str) -> Any:
    """A config's probability held as a float; any other value is left for the check to refuse as written."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if number and 0 <= value <= 1 else value


def _read_filters(value: Any, where: str) -> Any:
    """A config's list held as a tuple: the args are frozen and hashable."""
    return tuple(value) if isinstance(value, list) else value


def _read_sync_mode(value: Any, where: str) -> Any:
    """fairseq2's enum spelt in full (``SyncMode.UNTIL_FIRST``), in any case."""
    return value.rpartition(".")[2].upper() if isinstance(value, str) else value


def _relate(v: dict, where: str) -> None:
    if v["max_audio_len"] < v["min_audio_len"]:
        raise ConfigError(f"{where}.max_audio_len: {v['max_audio_len']} is below min_audio_len {v['min_audio_len']}")


def _task(name: str) -> dict:
    """The key's name in Omnilingual's recipes: its field of ``AsrTaskConfig``."""
    return {OMNILINGUAL: _TASK_CONFIG + name}


_ROWS = _Positive(MAX_BATCH_ROWS)

#: Every key of ASR's ``dataset_args``, with its place in an Omnilingual recipe (``dialects``, the recipe path;
#: ``from_recipe`` reads the keys from there).  Every key defines the plan but the DataLoader's ``npc`` and
#: ``num_prefetch``, which change how batches are fetched, not which.
DATASET_ARGS = KeyTable((
    Key("min_audio_len", FilterArgs.min_audio_len, _Count(), "fewer samples (per channel, at the pack rate): "
        "filtered out", dialects=_task("min_audio_len")),
    Key("max_audio_len", FilterArgs.max_audio_len, Int(lo=0), "more samples: filtered out (50 s at 16 kHz); at "
        "least `min_audio_len`", dialects=_task("max_audio_len")),
    Key("min_samples_per_char", FilterArgs.min_samples_per_char, _Count(), "fewer audio samples per transcript "
        "character: filtered out", dialects=_task("min_samples_per_char")),
    Key("filter_long_text_threshold", FilterArgs.filter_long_text_threshold, Nullable(_Tokens()), "more target "
        "tokens: filtered out (`null`: no limit)", dialects=_task("filter_long_text_threshold")),
    Key("remove_unknown", FilterArgs.remove_unknown, Bool(), "delete unknown tokens from the targets (an item left "
        "empty is filtered)", dialects=_task("remove_unknown")),
    Key("normalize_audio", False, Bool(), "zero mean, unit variance per utterance, on waveforms only (no effect "
        "with `use_fbank`, as in Omnilingual); `normalize: utterance` / `none` is the same key in the shared "
        "vocabulary (`loader.normalize`)", dialects=_task("normalize_audio")),
    Key("use_fbank", False, Bool(), "80-bin Kaldi log-mel filterbank, standardised (`source_seqs` [B, T, 80])",
        dialects=_task("use_fbank")),
    Key("spec_aug_p", None, Nullable(_AsGiven(Probability())), "SpecAugment probability per utterance, train "
        "only (`null`: off)", read=_read_float, dialects=_task("spec_aug_p")),
    Key("spec_aug_freq_mask_param", 80, _Count(), "frequency mask width is below this (bins)",
        dialects=_task("spec_aug_freq_mask_param")),
    Key("spec_aug_time_mask_param", 80, _Count(), "time mask width is below this (frames)",
        dialects=_task("spec_aug_time_mask_param")),
    Key("batching_strategy", "LENGTH", OneOf(BATCHING_STRATEGIES), "LENGTH: `max_num_elements` budget; STATIC: "
        "`batch_size` rows (any case)", read=_read_strategy, dialects=_task("batching_strategy")),
    Key("max_num_elements", 3_200_000, _Positive(), "LENGTH: rows x longest row (samples) per batch, at most (rounded "
        "down to a multiple of `max_audio_len`, as Omnilingual does)", dialects=_task("max_num_elements")),
    Key("num_seqs_multiple_of", 8, _ROWS, "LENGTH: rows per batch are a multiple of this",
        dialects=_task("num_seqs_multiple_of")),
    Key("batch_size", 8, _ROWS, "STATIC: rows per batch", dialects=_task("batch_size")),
    Key("drop_remainder", False, Bool(), "drop the epoch's incomplete last batch (else LENGTH serves it short, as "
        "fairseq2 does; STATIC pads it, rows invalid)", dialects=_task("drop_remainder")),
    Key("tokenizer", _CHAR, _Tokenizer(), "the target vocabulary (`loader.asr.tokenizer`); a recipe's "
        "`tokenizer.name` is a SentencePiece model file", default_doc="char", read=_read_tokenizer,
        dialects={OMNILINGUAL: "tokenizer.name"}),
    Key("shuffle", True, Bool(), "a new order every epoch (from the seed); `false`: the three windows off"),
    Key("dataset_summary_path", None, Nullable(_Text("a TSV path")), "Omnilingual's stats TSV: hours for "
        "weighting (`null`: the packs')", dialects={OMNILINGUAL: _STORAGE_CONFIG + "dataset_summary_path"}),
    Key("dataset_summary_split", "train", _Text("a split name"), "the TSV rows of this split count"),
    Key("train_split", None, Nullable(_Text("a split name")), "the split a `train` loader reads "
        "(`loader.asr.selection`; `null`: all)", dialects={OMNILINGUAL: "dataset.train_split"}),
    Key("valid_split", None, Nullable(_Text("a split name")), "the split a `val` loader reads",
        dialects={OMNILINGUAL: "dataset.valid_split"}),
    Key("partition_filters", None, _PartitionFilters(), "pyarrow filter text on corpus/language "
        "(`loader.asr.selection`)", read=_read_filters,
        dialects={OMNILINGUAL: _STREAMING_CONFIG + "partition_filters"}),
    Key("fragment_shuffle_window", -1, _Window(-1, "-1 (whole), 0 (none)"), "shuffle of the items as read; n: a "
        "sliding window",
        dialects={OMNILINGUAL: _STREAMING_CONFIG + "fragment_shuffle_window"}),
    Key("example_shuffle_window", WHOLE, _Window(0, "0 (whole), 1 (none)"), "shuffle before batching; n: a "
        "sliding window",
        dialects=_task("example_shuffle_window")),
    Key("batch_shuffle_window", 1000, _Window(0, "0 (whole), 1 (none)"), "shuffle of the batches; n: a sliding "
        "window",
        dialects=_task("batch_shuffle_window")),
    Key("num_prefetch", None, Nullable(Int(lo=0, hi=MAX_WORKERS)), "batches prefetched: the DataLoader's "
        "prefetch (`loader.torch`)", fingerprint=NEVER, dialects=_task("num_prefetch")),
    Key("npc", None, Nullable(Int(hi=MAX_WORKERS)), "parallel calls: the DataLoader's workers, unless "
        "`build_loader` sets them", fingerprint=NEVER, dialects=_task("npc")),
    Key("sync_mode", None, _SyncMode(), "UNTIL_FIRST: surplus batches dropped so ranks are even; UNTIL_LAST: the "
        "short ranks padded (`null`: as `drop_remainder`)", read=_read_sync_mode,
        dialects={OMNILINGUAL: _STORAGE_CONFIG + "sync_mode"}),
    Key("sync_batches", True, _SyncBatches(), "every rank gets the same number of batches (`false` is refused)",
        dialects={OMNILINGUAL: _STORAGE_CONFIG + "sync_batches"}),
    SHARD_WINDOW,
), relate=_relate)


@DATASET_ARGS.args_class("dataset_args")
class AsrArgs:
    """The checked ``dataset_args``: one field per key of ``DATASET_ARGS``, checked on construction."""

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


def _read_normalize(obj: Any, where: str) -> Any:
    """``obj`` with ``normalize`` (the shared vocabulary) read into ``normalize_audio``; a ``normalize_audio`` given
    too must say the same.  Unknown keys are refused first, naming ``normalize`` among the known ones."""
    if not isinstance(obj, dict):
        return obj  # None: every default; anything else: parse refuses it
    take_known(obj, where, {**DATASET_ARGS.defaults(), NORMALIZE_KEY: None})
    rest = {key: value for key, value in obj.items() if key != NORMALIZE_KEY}
    if obj.get(NORMALIZE_KEY) is None:
        return rest
    normalize = parse_normalize(obj[NORMALIZE_KEY], f"{where}.{NORMALIZE_KEY}", NORMALIZE_CHOICES, UTTERANCE)
    if "normalize_audio" in obj and obj["normalize_audio"] != (normalize == UTTERANCE):
        raise ConfigError(f"{where}.{NORMALIZE_KEY}: {normalize!r} contradicts normalize_audio: "
                          f"{obj['normalize_audio']!r} (its alias); set one of them")
    rest["normalize_audio"] = normalize == UTTERANCE
    return rest


def parse_dataset_args(obj, where: str) -> AsrArgs:
    """``dataset_args`` of an ASR loader config; every key checked, unknown keys named."""
    values = DATASET_ARGS.parse(_read_normalize(obj, where), where)  # checked once, so errors name the config path
    return DATASET_ARGS.held(AsrArgs, values)


def omnilingual_keys(section: str) -> dict[str, Key]:
    """The keys an Omnilingual recipe gives in ``section`` (``dataset.asr_task_config``), by their name there."""
    prefix = section + "."
    return {k.dialects[OMNILINGUAL][len(prefix):]: k for k in DATASET_ARGS.keys
            if k.dialects.get(OMNILINGUAL, "").startswith(prefix) and "." not in k.dialects[OMNILINGUAL][len(prefix):]}


#: The top-level key that marks an Omnilingual recipe config.
RECIPE_KEY = "dataset"
#: Recipe sections that configure the model and the training run, not the data: skipped.
OTHER_SECTIONS = ("model", "trainer", "optimizer", "lr_scheduler", "regime", "common", "gang", "evaluator")
STORAGE_MODES = ("MIXTURE_PARQUET",)
TASK_MODES = ("ASR",)
_TASK_SECTION, _STORAGE_SECTION = _TASK_CONFIG[:-1], _STORAGE_CONFIG[:-1]
_STREAMING_SECTION = _STREAMING_CONFIG[:-1]
#: Omnilingual's ``AsrTaskConfig`` fields: each is a ``dataset_args`` key of the ASR task (their ``dialects``).
ASR_TASK_KEYS = tuple(omnilingual_keys(_TASK_SECTION))


def _section(section: str, other: dict) -> dict:
    """A recipe section's keys and their defaults: the ASR keys it gives (the declarations'), and ``other``."""
    return {**{name: k.default for name, k in omnilingual_keys(section).items()}, **other}


#: The recipe sections' keys that are no ASR key: checked, or informational, or without effect on packs.
_STORAGE = _section(_STORAGE_SECTION, {"beta_corpus": None, "beta_language": None, "fragment_streaming": None,
                                       "fragment_loading": None})
_STREAMING = _section(_STREAMING_SECTION, {"parquet_path": None, "seed": None, "nb_epochs": None,
                                           "split_to_row_groups": True, "files_circular_shift": False,
                                           "filesystem": None})
_LOADING = {"columns": None, "nb_prefetch": None, "num_parallel_fragments": None, "cache": None,
            "use_threads": None, "drop_null": None, "add_fragment_index": None}
_DATASET = _section("dataset", {"name": None, "path": None, "family": None, "storage_mode": "MIXTURE_PARQUET",
                                "task_mode": "ASR", "mixture_parquet_storage_config": None,
                                "asr_task_config": None})


def _given(section: str, values: dict) -> dict:
    """``dataset_args`` from a recipe section's checked ``values``: each ASR key it holds, by our name."""
    return {k.name: values[name] for name, k in omnilingual_keys(section).items()}


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
    return _given(_STREAMING_SECTION, v)


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
    given = dataset["asr_task_config"] or {}  # only these: a task config's absent key is dataset_args' default
    args = {k.name: task[name] for name, k in omnilingual_keys(_TASK_SECTION).items() if name in given}
    args.update(_streaming(storage["fragment_streaming"], f"{storage_where}.fragment_streaming"))
    take_known(storage["fragment_loading"], f"{storage_where}.fragment_loading", _LOADING)
    args.update(_given("dataset", dataset))
    args.update(_given(_STORAGE_SECTION, storage))
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


__all__ = ["ASR_TASK_KEYS", "BATCHING_STRATEGIES", "DATASET_ARGS", "MAX_WORKERS", "NORMALIZE_CHOICES", "NORMALIZE_KEY",
           "OMNILINGUAL", "OTHER_SECTIONS", "RECIPE_KEY", "SYNC_MODES", "AsrArgs", "from_recipe", "omnilingual_keys",
           "parse_dataset_args"]
