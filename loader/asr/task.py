"""The ASR loader task (``task: asr``): Omnilingual-style batches from ``asr`` packs.

``loader.torch.SpeechLoader`` plans and deals the batches; this module supplies what is ASR-specific
(``loader.tasks``): ``parse_dataset_args`` (``loader.asr.args``) and ``prepare``, which

1. makes the tokenizer: the built-in character vocabulary from the ``char_counts`` of the loaded packs (or of the
   packs ``tokenizer: {char: ...}`` names: give a validation loader its training packs, so ids agree), or a
   SentencePiece model;
2. indexes, tokenizes and filters every utterance (``loader.asr.items``), counting what each filter removed;
3. with ``hours_beta: true`` on the ``packs`` entries, weighs (corpus, language) groups by Omnilingual's rule
   from the packs' ``hours_by_corpus`` (or Omnilingual's stats TSV, ``dataset_summary_path``) and the top-level
   ``weighting`` betas (``PackWeighting.from_groups``): ASR packs hold several corpora and languages, so the
   groups, not the packs, are weighed;
4. checks that LENGTH batches can keep their budget: an utterance longer than ``max_num_elements`` would force
   a batch over it, so that is a configuration error.

Before all that, ``loader.asr.selection`` picks the state's split (``train_split``/``valid_split``) and applies
``partition_filters``: the items and the weighting hours come from the selected packs only, while the character
vocabulary comes from every loaded pack, so a train and a val loader of one config agree on the ids.
"""

from __future__ import annotations

import numpy as np

from speechpack.loader.asr.args import AsrArgs, TokenizerSpec, parse_dataset_args
from speechpack.loader.asr.batch import AsrBatchBuilder
from speechpack.loader.asr.items import asr_items
from speechpack.loader.asr.selection import select
from speechpack.loader.asr.summary import read_summary
from speechpack.loader.asr.tokenizer import CharTokenizer, SentencePieceTokenizer
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.cache import open_cached_pack
from speechpack.loader.pack import Pack
from speechpack.loader.tasks import Prepared
from speechpack.loader.weighting import PackWeighting
from speechpack.schemas.constants import KIND_ASR
from speechpack.schemas.errors import SpeechpackError


def make_tokenizer(spec: TokenizerSpec, packs: list[Pack]):
    """The tokenizer ``spec`` names (module docstring, step 1)."""
    if spec.kind == "sentencepiece":
        return SentencePieceTokenizer(spec.model)
    sources = packs if not spec.packs else [open_cached_pack(path) for path in spec.packs]
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
    """Hours of each group from a dataset summary TSV (``loader.asr.summary``); every group must be listed."""
    table = read_summary(path, split)
    absent = [f"{c}/{l}" for c, l in groups if table.get((c, l), 0.0) <= 0]
    if absent:
        raise ConfigError(f"{path}: no hours for {', '.join(absent[:5])}{' ...' if len(absent) > 5 else ''} "
                          f"(split {split!r}), which the packs hold")
    return np.array([table[g] for g in groups], dtype=np.float64)


def group_weighting(config, packs: list[Pack], items) -> PackWeighting:
    """Corpus/language weighting of ``items`` (numbered group after group; module docstring, step 3)."""
    args: AsrArgs = config.dataset_args
    sizes = np.bincount(items.group, minlength=len(items.groups))
    corpora = [c for c, _ in items.groups]
    languages = [l for _, l in items.groups]
    hours = (group_hours(packs, items.groups) if args.dataset_summary_path is None
             else summary_hours(args.dataset_summary_path, args.dataset_summary_split, items.groups))
    return PackWeighting.from_groups(sizes, hours, corpora, languages,
                                     config.weighting.beta_corpus, config.weighting.beta_language,
                                     config.weighting.epoch_items, config.dataset_args.shuffle)


def _check_budget(args: AsrArgs, lengths: np.ndarray) -> None:
    """LENGTH batches keep ``max_num_elements``: with fairseq2's rule a batch of which fewer than
    ``num_seqs_multiple_of`` rows fit holds what fits, so only an utterance longer than the budget cannot."""
    if args.batching is None or not len(lengths):
        return
    longest = int(lengths.max())
    if longest > args.max_num_elements:
        raise ConfigError(f"dataset_args.max_num_elements: {args.max_num_elements} cannot hold the longest kept "
                          f"utterance ({longest} samples); lower max_audio_len to at most {args.max_num_elements} "
                          f"or raise max_num_elements")


def prepare(config, state: str, packs: list[Pack], seed: int) -> Prepared:
    """The builder for ``state`` over every utterance the filters keep (module docstring)."""
    args: AsrArgs = config.dataset_args
    selection = select(args, state, config.packs, packs)
    chosen = [pack for pack, keep in zip(packs, selection.packs) if keep]
    tokenizer = make_tokenizer(args.tokenizer, packs)  # every split's packs: train and val ids agree
    by_group = weighs_groups(config)
    if args.dataset_summary_path is not None and not by_group:
        # Unused without hours_beta, but a summary that was named and cannot be read is a mistake to report.
        read_summary(args.dataset_summary_path, args.dataset_summary_split)
    items, result = asr_items(packs, tokenizer, args.filters, by_group=by_group, selection=selection)
    _check_budget(args, items.num_frames)
    weighting = group_weighting(config, chosen, items) if by_group else None
    builder = AsrBatchBuilder(packs, items, args, state, seed, tokenizer, weighting=weighting,
                              unknown_tokens_removed=result.unknown_tokens_removed)
    filtered = int((~result.keep).sum())
    return Prepared(builder=builder, item_pack=items.pack.astype(np.int64), filtered=filtered,
                    filter_report=dict(result.report), weighting=weighting)


__all__ = ["group_hours", "group_weighting", "make_tokenizer", "parse_dataset_args", "prepare", "summary_hours",
           "weighs_groups"]
