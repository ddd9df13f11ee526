"""The ASR loader task (``task: asr``): Omnilingual-style batches from ``asr`` packs.

``loader.torch.SpeechLoader`` plans and deals the batches; this module supplies what is ASR-specific
(``TASK``, a ``loader.tasks.LoaderTask``; its builder ``AsrBatchBuilder``, below): ``parse_dataset_args`` (``loader.asr.args``) and ``prepare``, which

1. makes the tokenizer: the built-in character vocabulary from the ``char_counts`` of the loaded packs (or of the
   packs ``tokenizer: {char: ...}`` names: give a validation loader its training packs, so ids agree), or a
   SentencePiece model;
2. indexes, tokenizes and filters every utterance (``loader.asr.items``), counting what each filter removed;
3. with ``hours_beta: true`` on the ``packs`` entries, weighs (corpus, language) groups by Omnilingual's rule
   from the packs' ``hours_by_corpus`` (or Omnilingual's stats TSV, ``dataset_summary_path``) and the top-level
   ``weighting`` betas (``PackWeighting.from_groups``): ASR packs hold several corpora and languages, so the
   groups, not the packs, are weighed.  Omnilingual samples a partition's rows by its weight and filters them
   afterwards, so a group's share of the epoch's kept items is its weight times the fraction of its rows the
   filters keep (renormalised).  It weighs the training stream only: a ``val`` or ``test`` loader reads every
   kept utterance once;
4. checks that LENGTH batches can keep their budget: an utterance longer than ``max_num_elements`` would force
   a batch over it, so that is a configuration error.

Before all that, ``loader.asr.selection`` picks the state's split (``train_split``/``valid_split``) and applies
``partition_filters``: the items and the weighting hours come from the selected packs only, while the character
vocabulary comes from every loaded pack, so a train and a val loader of one config agree on the ids.

ASR batches (Omnilingual's ``Seq2SeqBatch``) built from planned item ids, straight from the mapped int16 shards.

For one planned batch, in Omnilingual's order:

1. each utterance is read from its shard view, mixed to mono (mean over channels) and written into a zero-padded
   float32 ``[B, T]`` array (``T``: the batch's longest utterance) by ``loader.samples.read_window``;
2. ``normalize_audio``: zero mean, unit variance per utterance (``loader.asr.features``), on waveforms only:
   with ``use_fbank`` the features are computed from the waveform as read, as Omnilingual's fbank path does
   (``add_fbank_processing`` never normalises; the features are standardised anyway);
3. SpecAugment (train only, when ``spec_aug_p`` is set): on the features with ``use_fbank``, else through the
   STFT round trip on the waveform (``loader.asr.features``);
4. ``use_fbank``: 80-bin Kaldi log-mel features, standardised (``loader.asr.features``), ``[B, F, 80]``.

Steps 2-4 run in torch on the padded batch.  The batch's random draws come only from
``loader.rng.batch_rng(seed, epoch, global_batch)``: whichever worker builds a batch, it is the same.

The batch (numpy arrays, lists of str), under the names of fairseq2's ``Seq2SeqBatch`` (one set of names, so a
fairseq2 trainer reads it as it is):

``source_seqs``      float32 ``[B, T]`` (or ``[B, F, 80]`` with ``use_fbank``), zero past each row's length
``source_seq_lens``  int64 ``[B]``: samples (or frames)
``target_seqs``      int64 ``[B, S]``: token ids, padded with the tokenizer's pad id (0 when it has none)
``target_seq_lens``  int64 ``[B]``
``language``, ``corpus``, ``key``: one str per row
``valid``            bool ``[B]``: False for the plan's padding rows (repeats that make the epoch's batches even)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from speechpack.loader.asr.args import DATASET_ARGS, AsrArgs, from_recipe, parse_dataset_args
from speechpack.loader.asr.features import fbank
from speechpack.loader.asr.items import AsrItems, asr_items, read_summary, segment_of
from speechpack.loader.asr.selection import select
from speechpack.loader.asr.features import spec_augment_features, spec_augment_waveforms
from speechpack.loader.asr.tokenizer import CharTokenizer, SentencePieceTokenizer, TokenizerSpec
from speechpack.loader.asr.features import normalize_rows
from speechpack.loader.cache import CacheSettings, open_cached_pack
from speechpack.loader.pack import Pack
from speechpack.loader.plan.weighting import PackWeighting, largest_remainder
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.rng import BatchGenerator
from speechpack.loader.samples import read_window
from speechpack.loader.tasks import BatchBuilder, index_samples, LoaderTask, PlanArgs, PlanUnits, Prepared
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays
from speechpack.schemas.constants import KIND_ASR, STREAM_AUDIO
from speechpack.schemas.errors import SpeechpackError


class AsrBatchBuilder(BatchBuilder):
    """Collated ASR batches from item ids (``loader.tasks.BatchBuilder``).  Holds numpy columns only; utterances are
    never cut into train windows."""

    def __init__(self, packs: list[Pack], items: AsrItems, args: AsrArgs, state: str, seed: int, tokenizer, *,
                 weighting=None, unknown_tokens_removed: int = 0):
        kinds = sorted({p.kind for p in packs})
        if kinds != [KIND_ASR]:
            raise SpeechpackError(f"the ASR loader reads asr packs only; got {', '.join(kinds)}")
        rates = sorted({p.sample_rate for p in packs})
        if len(rates) != 1:
            raise SpeechpackError(f"asr packs at different sample rates {rates}: pack them at one rate")
        self.packs = packs
        self.items = items
        self.args = args
        self.state = state
        self.seed = seed
        self.batch_rng = BatchGenerator(seed)  # loader.rng.batch_rng, one generator object reused
        self.tokenizer = tokenizer
        self.rate = rates[0]
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None and tokenizer.pad_id >= 0 else 0
        self.spec_augment = args.spec_aug_p is not None and state == "train"
        #: The (corpus, language) weighting the loader must apply (``PackWeighting.from_groups``), or None.
        self.weighting = weighting
        #: Unknown tokens ``remove_unknown`` deleted from the targets (reported; the items stay).
        self.unknown_tokens_removed = unknown_tokens_removed
        self._waves_are_output = not (args.normalize_audio or args.use_fbank or self.spec_augment)

    @property
    def units(self) -> PlanUnits:
        """Utterances, each whole."""
        return PlanUnits(count=len(self.items), lengths=self.unit_lengths, samples=self.unit_samples)

    @property
    def sample_rate(self) -> int:
        return int(self.rate)

    @property
    def plan_args(self) -> PlanArgs:
        """Omnilingual's plan: fairseq2 shuffle windows and its own rule for evening ranks (``loader.asr.args``)."""
        args = self.args
        return PlanArgs(batch_size=args.batch_size, batching=args.batching, shuffle=args.shuffle, tail=args.tail,
                        shuffle_windows=args.shuffle_windows, sync=args.sync)

    def unit_samples(self) -> tuple[np.ndarray, np.ndarray]:
        return index_samples(self.items.pack, self.items.sample)

    def unit_lengths(self, epoch: int = 0) -> np.ndarray:
        """Samples per utterance (per channel): what LENGTH batching budgets (rows x longest row)."""
        return self.items.num_frames

    def _waveforms(self, items: np.ndarray, arrays: BatchArrays) -> tuple[np.ndarray, np.ndarray]:
        lengths = self.items.num_frames[items]
        # The waveforms are the batch's output only without normalisation, fbank and SpecAugment: then they go
        # straight into the worker's shared-memory slot (``arrays``); otherwise they are scratch.
        # Each row is written once: its samples, then zeros past them (no zeroing of the whole batch first).
        empty = arrays.empty if self._waves_are_output else np.empty
        waves = empty((len(items), int(lengths.max()) if len(items) else 0), np.float32)
        segments = [(self.packs[int(self.items.pack[item])], int(self.items.sample[item])) for item in items.tolist()]
        segments = [(pack, segment_of(pack, sample)) for pack, sample in segments]
        for pack, segment in segments:  # request every read of the batch before the first copy waits on a cold disk
            pack.will_need(STREAM_AUDIO, segment)
        for row, (pack, segment) in enumerate(segments):  # mono by channel mean, zero past the utterance
            read_window(waves[row], pack, STREAM_AUDIO, segment)
        return waves, lengths.astype(np.int64)

    def _targets(self, items: np.ndarray, arrays: BatchArrays) -> tuple[np.ndarray, np.ndarray]:
        lengths = self.items.num_tokens[items].astype(np.int64)
        targets = arrays.full((len(items), int(lengths.max()) if len(items) else 0), self.pad_id, np.int64)
        for row, item in enumerate(items.tolist()):
            targets[row, :lengths[row]] = self.items.targets(item)
        return targets, lengths

    def build(self, items: np.ndarray, valid: np.ndarray, epoch: int, global_batch: int,
              arrays: BatchArrays = NUMPY) -> dict:
        items = np.asarray(items, dtype=np.int64)
        waves_np, lengths_np = self._waveforms(items, arrays)
        waves, lengths = torch.from_numpy(waves_np), torch.from_numpy(lengths_np)
        if self.args.normalize_audio and not self.args.use_fbank:  # Omnilingual's fbank path never normalises
            final = not self.spec_augment  # then the normalised rows are the output
            out = torch.from_numpy(arrays.empty(waves.shape, np.float32)) if final else None
            waves = normalize_rows(waves, lengths, out=out)
        rng = self.batch_rng(epoch, global_batch)
        args = self.args
        if self.args.use_fbank:
            source, lengths = fbank(waves, lengths, self.rate)
            if self.spec_augment:
                source, _ = spec_augment_features(source, lengths.numpy(), rng, args.spec_aug_p,
                                                  args.spec_aug_freq_mask_param, args.spec_aug_time_mask_param)
        else:
            source = waves
            if self.spec_augment:
                source, _ = spec_augment_waveforms(source, lengths_np, rng, args.spec_aug_p,
                                                   args.spec_aug_freq_mask_param, args.spec_aug_time_mask_param)
        targets, target_lengths = self._targets(items, arrays)
        packs = self.items.pack[items].tolist()
        samples = self.items.sample[items].tolist()
        groups = [self.items.groups[g] for g in self.items.group[items].tolist()]
        return {
            "source_seqs": source.numpy().astype(np.float32, copy=False),
            "source_seq_lens": lengths.numpy().astype(np.int64, copy=False),
            "target_seqs": targets,
            "target_seq_lens": target_lengths,
            "language": [g[1] for g in groups],
            "corpus": [g[0] for g in groups],
            "key": [self.packs[p].keys[s] for p, s in zip(packs, samples)],
            "valid": np.asarray(valid, dtype=bool),
        }


def make_tokenizer(spec: TokenizerSpec, packs: list[Pack], cache: CacheSettings | None = None):
    """The tokenizer ``spec`` names (module docstring, step 1); packs it names by URL are read through the node
    cache ``cache`` (the loader config's, ``LoaderConfig.cache``; None: the defaults)."""
    if spec.kind == "sentencepiece":
        return SentencePieceTokenizer(spec.model)
    sources = packs if not spec.packs else [open_cached_pack(path, cache) for path in spec.packs]
    for pack in sources:
        if pack.kind != KIND_ASR:
            raise SpeechpackError(f"{pack.path}: the character vocabulary comes from asr packs, this one is "
                                  f"{pack.kind}")
    return CharTokenizer.from_char_counts([pack.manifest.char_counts for pack in sources])


def group_hours(packs: list[Pack], groups: tuple[tuple[str, str], ...]) -> np.ndarray:
    """Hours of each (corpus, language) group over every pack (``hours_by_corpus``, before filtering)."""
    return np.array([sum(p.manifest.hours_by_corpus.get(corpus, {}).get(language, 0.0) for p in packs)
                     for corpus, language in groups], dtype=np.float64)


def weighs_groups(config) -> bool:
    """Whether the config asks for corpus/language weighting (``hours_beta`` entries); weight/repeat/choose
    entries are per pack, which the loader applies itself."""
    return any(source.hours_beta for source in config.packs)


def summary_hours(path: str, split: str, groups: tuple[tuple[str, str], ...]) -> np.ndarray:
    """Hours of each group from a dataset summary TSV (``read_summary``); every group must be listed."""
    table = read_summary(path, split)
    absent = [f"{c}/{l}" for c, l in groups if table.get((c, l), 0.0) <= 0]
    if absent:
        raise ConfigError(f"{path}: no hours for {', '.join(absent[:5])}{' ...' if len(absent) > 5 else ''} "
                          f"(split {split!r}), which the packs hold")
    return np.array([table[g] for g in groups], dtype=np.float64)


def group_weighting(config, packs: list[Pack], items, selected: np.ndarray | None = None) -> PackWeighting:
    """Corpus/language weighting of ``items`` (numbered group after group; module docstring, step 3).  ``selected``:
    each group's items before filtering (``FilterResult.group_sizes``); the epoch's counts follow the weights
    times the fraction kept (Omnilingual filters after sampling), while ``targets`` stay the weights."""
    args: AsrArgs = config.dataset_args
    sizes = np.bincount(items.group, minlength=len(items.groups))
    corpora = [c for c, _ in items.groups]
    languages = [l for _, l in items.groups]
    hours = (group_hours(packs, items.groups) if args.dataset_summary_path is None
             else summary_hours(args.dataset_summary_path, args.dataset_summary_split, items.groups))
    weighting = PackWeighting.from_groups(sizes, hours, corpora, languages,
                                          config.weighting.beta_corpus, config.weighting.beta_language,
                                          config.weighting.epoch_items, config.dataset_args.shuffle)
    if selected is None:
        return weighting
    selected = np.asarray(selected, dtype=np.float64)
    kept = np.divide(sizes, selected, out=np.zeros(len(sizes)), where=selected > 0)
    counts = largest_remainder(np.asarray(weighting.targets) * kept, sum(weighting.counts))
    return replace(weighting, counts=tuple(int(c) for c in counts))


def every_item_once(config, items) -> PackWeighting:
    """The groups of a ``val``/``test`` loader at their natural sizes: Omnilingual weighs the training stream only,
    and this keeps the loader from weighing the packs instead (``loader.tasks.prepare``)."""
    sizes = np.bincount(items.group, minlength=len(items.groups))
    total = max(int(sizes.sum()), 1)
    return PackWeighting(sizes=tuple(int(n) for n in sizes), counts=tuple(int(n) for n in sizes),
                         targets=tuple(float(n) / total for n in sizes),
                         paths=tuple(f"{c}/{l}" for c, l in items.groups),
                         corpora=tuple(c for c, _ in items.groups), languages=tuple(l for _, l in items.groups),
                         shuffle=config.dataset_args.shuffle)


def _check_budget(args: AsrArgs, lengths: np.ndarray) -> None:
    """LENGTH batches keep ``max_num_elements``: with fairseq2's rule a batch of which fewer than
    ``num_seqs_multiple_of`` rows fit holds what fits, so only an utterance longer than the budget cannot."""
    if args.batching is None or not len(lengths):
        return
    longest = int(lengths.max())
    if longest > args.length_budget:
        raise ConfigError(f"dataset_args.max_num_elements: {args.max_num_elements} cannot hold the longest kept "
                          f"utterance ({longest} samples); lower max_audio_len to at most {args.max_num_elements} "
                          f"or raise max_num_elements")


def prepare(config, state: str, packs: list[Pack], seed: int) -> Prepared:
    """The builder for ``state`` over every utterance the filters keep (module docstring)."""
    args: AsrArgs = config.dataset_args
    selection = select(args, state, config.packs, packs)
    chosen = [pack for pack, keep in zip(packs, selection.packs) if keep]
    tokenizer = make_tokenizer(args.tokenizer, packs, config.cache)  # every split's packs: train and val ids agree
    by_group = weighs_groups(config)
    if args.dataset_summary_path is not None and not by_group:
        # Unused without hours_beta, but a summary that was named and cannot be read is a mistake to report.
        read_summary(args.dataset_summary_path, args.dataset_summary_split)
    items, result = asr_items(packs, tokenizer, args.filters, by_group=by_group, selection=selection)
    _check_budget(args, items.num_frames)
    weighting = None
    if by_group:
        weighting = (group_weighting(config, chosen, items, result.group_sizes) if state == "train"
                     else every_item_once(config, items))
    builder = AsrBatchBuilder(packs, items, args, state, seed, tokenizer, weighting=weighting,
                              unknown_tokens_removed=result.unknown_tokens_removed)
    filtered = int((~result.keep).sum())
    return Prepared(builder=builder, item_pack=items.pack.astype(np.int64), filtered=filtered,
                    filter_report=dict(result.report), weighting=weighting)


class AsrTask(LoaderTask):
    """``task: asr`` (``loader.tasks.LoaderTask``): Omnilingual's recipes are translated, (corpus, language) groups
    weighed, and fairseq2's parallelism keys are the DataLoader's defaults."""

    name = "asr"

    def parse_dataset_args(self, obj, where: str) -> AsrArgs:
        return parse_dataset_args(obj, where)

    def prepare(self, config, state: str, packs: list, seed: int) -> Prepared:
        return prepare(config, state, packs, seed)

    def translate_config(self, obj: dict, where: str) -> dict:
        """Omnilingual's ``dataset:`` block, key by key (``loader.asr.args``)."""
        return from_recipe(obj, where)

    def fingerprint_args(self, args: dict) -> dict:
        """What each key's declaration says the fingerprint hashes (``loader.asr.args.DATASET_ARGS``): every key
        but ``npc`` and ``num_prefetch``, as every saved state was hashed."""
        return DATASET_ARGS.fingerprint(args)

    def dataloader_defaults(self, args: AsrArgs):
        """fairseq2's ``npc`` (parallel calls: the workers) and ``num_prefetch`` (batches waiting in total)."""
        return (args.npc, "npc"), (args.num_prefetch, "num_prefetch")


TASK = AsrTask()


__all__ = ["AsrBatchBuilder", "AsrTask", "TASK", "every_item_once", "group_hours", "group_weighting", "make_tokenizer",
           "parse_dataset_args", "prepare", "summary_hours", "weighs_groups"]
