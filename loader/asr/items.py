"""The ASR item universe: one item per utterance of every ``asr`` pack, as numpy columns with the tokenized
targets, filtered (below) and numbered group after group.

Items are numbered pack after pack in storage order (what per-pack weighting needs), or, for corpus/language
weighting (``PackWeighting.from_groups``), group after group (groups sorted by (corpus, language)), then pack, then
storage order: each group's items contiguous; a group's hours, which weigh it, are the packs' or those of
Omnilingual's dataset summary TSV (``read_summary``).  Transcripts are read once, straight from the mapped ``text``
shards, and tokenized as one column; nothing here keeps a Python object per utterance (DataLoader workers fork
from it).

Which ASR items an epoch keeps: Omnilingual's ``AsrTask`` filters, vectorised over the pack columns.

Every item removed is counted under exactly one reason, the first it fails in this order (so the counts add up
to the items removed, and the loader reports them instead of losing them from the epoch count silently).  The
order is that of Omnilingual's ``AsrTask`` (``filter_by_audio_length``, then ``add_tokenization_pipeline``): audio
length, empty text, the speaking rate, then, once the text is tokenized, sequences of unknown tokens only and
long text:

``audio_too_short``  fewer than ``min_audio_len`` samples (per channel, at the pack's rate)
``audio_too_long``   more than ``max_audio_len`` samples
``empty_text``       an empty transcript (no character, or no token)
``too_fast``         fewer than ``min_samples_per_char`` samples per character of the transcript
``unknown_only``     every token is the tokenizer's unknown id: always dropped, whatever ``remove_unknown`` says
``text_too_long``    more than ``filter_long_text_threshold`` tokens, unknown ones included (Omnilingual filters
                     long text before ``remove_unknown`` deletes them), when set

``remove_unknown`` (Omnilingual's "remove unknown tokens from the text in place") deletes the tokenizer's unknown
id from the targets of the items that keep some other token; the tokens it removes are counted
(``unknown_tokens_removed``), the items are not.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace

import numpy as np

from speechpack.loader.asr.tokenizer import utf8_char_counts
from speechpack.loader.pack import Pack
from speechpack.schemas.constants import STREAM_AUDIO, STREAM_TEXT
from speechpack.loader.config_checks import ConfigError
from speechpack.schemas.errors import SpeechpackError


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``range(start, start + length)`` of every pair (vectorised)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths) + np.arange(int(ends[-1]) if
                                                                                                  len(ends) else 0)


def pack_texts(pack: Pack) -> tuple[np.ndarray, np.ndarray]:
    """Every transcript of ``pack`` (one text segment per sample) as flat UTF-8 bytes and byte offsets."""
    table = pack.streams[STREAM_TEXT]
    segments = np.asarray(table.first, dtype=np.int64)
    lengths = np.asarray(table.length[segments], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    shards = np.asarray(table.shard)[segments]
    for shard in np.unique(shards).tolist():
        mine = np.flatnonzero(shards == shard)
        source = pack.stream_array(shard, STREAM_TEXT)
        out[_ranges(offsets[mine], lengths[mine])] = source[_ranges(np.asarray(table.offset)[segments[mine]],
                                                                    lengths[mine])]
    return out, offsets


@dataclass(frozen=True)
class AsrItems:
    """Items as parallel arrays; item ``i``'s targets are ``token_ids[token_offsets[i]:token_offsets[i + 1]]``."""

    pack: np.ndarray
    sample: np.ndarray
    num_frames: np.ndarray
    group: np.ndarray
    token_ids: np.ndarray
    token_offsets: np.ndarray
    #: (corpus, language) of each group id, sorted
    groups: tuple[tuple[str, str], ...]

    def __len__(self) -> int:
        return len(self.pack)

    @property
    def num_tokens(self) -> np.ndarray:
        return np.diff(self.token_offsets)

    def take(self, order: np.ndarray) -> "AsrItems":
        """The items ``order`` (indices, in that order), targets re-sliced."""
        order = np.asarray(order, dtype=np.int64)
        lengths = self.num_tokens[order]
        ids = self.token_ids[_ranges(self.token_offsets[order], lengths)] if len(order) else self.token_ids[:0]
        return AsrItems(self.pack[order], self.sample[order], self.num_frames[order], self.group[order], ids,
                        np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), self.groups)

    def targets(self, item: int) -> np.ndarray:
        return self.token_ids[self.token_offsets[item]:self.token_offsets[item + 1]]


def _labels(pack: Pack, name: str) -> np.ndarray:
    """An attribute column as a numpy unicode array (one array, not a list of str; UTF-8 decoded)."""
    return np.char.decode(np.asarray(pack.attrs[name].raw), "utf-8") if len(pack) else np.zeros(0, dtype=str)


def asr_items(packs: list[Pack], tokenizer, filters: FilterArgs, by_group: bool = False,
              selection=None) -> tuple[AsrItems, FilterResult]:
    """Every selected utterance of ``packs``, tokenized and filtered; returns the kept items and the filter result
    over the selected ones (in pack order).  Kept items are in pack order (what per-pack weighting needs), or
    group after group with ``by_group`` (what group weighting needs).  ``selection`` (``loader.asr.selection``)
    leaves out the packs and rows of other splits and partitions first: they are not items at all."""
    pack_col, sample_col, frames_col, corpus_col, language_col, texts, text_offsets = [], [], [], [], [], [], []
    base = 0
    for pack_id, pack in enumerate(packs):
        if selection is not None and not selection.packs[pack_id]:
            continue
        corpus, language = _labels(pack, "corpus"), _labels(pack, "language")
        rows = (np.arange(len(pack), dtype=np.int64) if selection is None
                else np.flatnonzero(selection.mask(corpus, language)).astype(np.int64))
        pack_col.append(np.full(len(rows), pack_id, dtype=np.int32))
        sample_col.append(rows)
        frames_col.append(np.asarray(pack.num_frames, dtype=np.int64)[rows])
        corpus_col.append(corpus[rows])
        language_col.append(language[rows])
        data, offsets = pack_texts(pack)
        if len(rows) < len(pack):  # only the selected rows' transcripts
            lengths = np.diff(offsets)[rows]
            data = data[_ranges(offsets[rows], lengths)] if len(rows) else data[:0]
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        texts.append(data)
        text_offsets.append(offsets[:-1] + base)
        base += len(data)
    if not pack_col:
        raise SpeechpackError("asr loader: the selection holds no pack (see train_split/valid_split)")
    data = np.concatenate(texts)
    byte_offsets = np.concatenate(text_offsets + [np.array([base], dtype=np.int64)])
    ids, token_offsets = tokenizer.encode_utf8(data, byte_offsets)
    num_tokens = np.diff(token_offsets)
    num_unknown = np.zeros(len(num_tokens), dtype=np.int64)
    removed = 0
    if tokenizer.unk_id is not None and tokenizer.unk_id >= 0:
        hits = ids == tokenizer.unk_id
        if hits.any():
            owner = np.repeat(np.arange(len(num_tokens), dtype=np.int64), num_tokens)
            num_unknown = np.bincount(owner[hits], minlength=len(num_tokens)).astype(np.int64)
        if filters.remove_unknown:
            ids, token_offsets, removed = drop_tokens(ids, token_offsets, tokenizer.unk_id)
    frames = np.concatenate(frames_col)
    result = asr_filter(frames, utf8_char_counts(data, byte_offsets), num_tokens, filters, removed, num_unknown)
    # Groups over every selected item (filtered ones too: a group emptied by the filters is still weighed).
    pairs = np.rec.fromarrays([np.concatenate(corpus_col), np.concatenate(language_col)], names="corpus,language")
    if not len(pairs) and selection is not None:
        raise SpeechpackError("asr loader: the selection holds no utterance (see train_split, valid_split and "
                              "partition_filters)")
    unique, group = np.unique(pairs, return_inverse=True)
    everything = AsrItems(np.concatenate(pack_col), np.concatenate(sample_col), frames,
                          group.reshape(-1).astype(np.int32), ids, token_offsets,
                          tuple((str(c), str(l)) for c, l in unique.tolist()))
    result = replace(result, group_sizes=np.bincount(everything.group, minlength=len(everything.groups)))
    kept = np.flatnonzero(result.keep)
    if by_group:  # group after group; pack, then storage order inside a group
        kept = kept[np.argsort(everything.group[kept], kind="stable")]
    return everything.take(kept), result


def segment_of(pack: Pack, sample: int) -> int:
    """The audio segment of an asr sample (one per sample)."""
    return int(pack.streams[STREAM_AUDIO].first[sample])


FILTER_REASONS = ("audio_too_short", "audio_too_long", "empty_text", "too_fast", "unknown_only", "text_too_long")


@dataclass(frozen=True)
class FilterArgs:
    """The filter settings of ``dataset_args`` (Omnilingual's names and defaults)."""

    min_audio_len: int = 1
    max_audio_len: int = 800_000
    min_samples_per_char: int = 160
    filter_long_text_threshold: int | None = None
    remove_unknown: bool = False


@dataclass(frozen=True)
class FilterResult:
    keep: np.ndarray
    #: reason -> items removed for it (every reason listed, zeros included)
    report: dict[str, int]
    #: unknown tokens deleted by ``remove_unknown`` (in kept and removed items alike)
    unknown_tokens_removed: int
    #: selected items per (corpus, language) group before filtering (``asr_items``; None from ``asr_filter``):
    #: what Omnilingual's weighting samples from (``loader.asr.task.group_weighting``)
    group_sizes: np.ndarray | None = None


def drop_tokens(ids: np.ndarray, offsets: np.ndarray, token: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Delete every ``token`` from flat token rows; returns (ids, offsets, tokens deleted)."""
    hit = ids == token
    if not hit.any():
        return ids, offsets, 0
    removed_before = np.concatenate([[0], np.cumsum(hit, dtype=np.int64)])
    return ids[~hit], offsets - removed_before[offsets], int(hit.sum())


def asr_filter(audio_len: np.ndarray, num_chars: np.ndarray, num_tokens: np.ndarray, args: FilterArgs,
               unknown_tokens_removed: int = 0, num_unknown: np.ndarray | None = None) -> FilterResult:
    """Keep-mask and per-reason counts (module docstring).  ``num_tokens`` are counted before ``remove_unknown``
    (as ``text_too_long`` counts them); ``num_unknown`` (default: none) is each item's count of unknown tokens."""
    audio_len = np.asarray(audio_len, dtype=np.int64)
    num_chars = np.asarray(num_chars, dtype=np.int64)
    num_tokens = np.asarray(num_tokens, dtype=np.int64)
    num_unknown = np.zeros(len(num_tokens), np.int64) if num_unknown is None else np.asarray(num_unknown, np.int64)
    if not len(audio_len) == len(num_chars) == len(num_tokens) == len(num_unknown):
        raise ValueError("asr_filter: one audio length, character, token and unknown count per item")
    failing = {
        "audio_too_short": audio_len < args.min_audio_len,
        "audio_too_long": audio_len > args.max_audio_len,
        "empty_text": (num_tokens == 0) | (num_chars == 0),
        "unknown_only": num_unknown >= num_tokens,
        "text_too_long": (num_tokens > args.filter_long_text_threshold
                          if args.filter_long_text_threshold is not None else np.zeros(len(audio_len), bool)),
        "too_fast": audio_len < args.min_samples_per_char * num_chars,
    }
    keep = np.ones(len(audio_len), dtype=bool)
    report = {}
    for reason in FILTER_REASONS:
        hit = keep & failing[reason]
        report[reason] = int(hit.sum())
        keep &= ~hit
    return FilterResult(keep=keep, report=report, unknown_tokens_removed=unknown_tokens_removed)


#: The columns of Omnilingual's dataset summary TSV that ``read_summary`` reads (besides corpus and language).
SECONDS_COLUMN = "total_audio_seconds"
HOURS_COLUMN = "hours"
SPLIT_COLUMN = "split"


def read_summary(path: str, split: str = "train") -> dict[tuple[str, str], float]:
    """``{(corpus, language): hours}`` from Omnilingual's dataset summary TSV at ``path`` (``dataset_summary_path``).

    An ``asr`` pack already records ``hours_by_corpus``, so the file is optional: give it to weigh by the hours of
    the whole original dataset (as an Omnilingual recipe does) rather than by what the packs hold, e.g. when the
    packs are a subset.  The format is Omnilingual's ``language_distribution_*.tsv``: a header row, then one row
    per (corpus, language[, split]) with the columns

    ``corpus``, ``language``  required;
    ``total_audio_seconds``    the group's audio (or ``hours``, in hours);
    ``split``                  optional: only the rows of ``split`` count (default ``train``);
                               other columns (``num_samples``...) are ignored.

    Rows of one (corpus, language) add up.  Errors name the file, the line and the column."""
    try:
        with open(path, encoding="utf-8", newline="") as fp:
            rows = list(csv.reader(fp, delimiter="\t"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the dataset summary ({err.strerror})") from None
    if not rows:
        raise ConfigError(f"{path}: the dataset summary is empty (a header row is required)")
    header = [name.strip() for name in rows[0]]
    missing = [c for c in ("corpus", "language") if c not in header]
    if missing:
        raise ConfigError(f"{path}:1: column {missing[0]!r} is missing from the header")
    amount = SECONDS_COLUMN if SECONDS_COLUMN in header else HOURS_COLUMN if HOURS_COLUMN in header else None
    if amount is None:
        raise ConfigError(f"{path}:1: needs a {SECONDS_COLUMN!r} (or {HOURS_COLUMN!r}) column")
    per_hour = 3600.0 if amount == SECONDS_COLUMN else 1.0
    hours: dict[tuple[str, str], float] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise ConfigError(f"{path}:{number}: {len(row)} columns, the header has {len(header)}")
        cells = dict(zip(header, (cell.strip() for cell in row)))
        if SPLIT_COLUMN in cells and cells[SPLIT_COLUMN] != split:
            continue
        try:
            value = float(cells[amount]) / per_hour
        except ValueError:
            raise ConfigError(f"{path}:{number}: column {amount!r}: {cells[amount]!r} is not a number") from None
        if not value >= 0:
            raise ConfigError(f"{path}:{number}: column {amount!r}: must be non-negative, got {cells[amount]}")
        for column in ("corpus", "language"):
            if not cells[column]:
                raise ConfigError(f"{path}:{number}: column {column!r} is empty")
        group = (cells["corpus"], cells["language"])
        hours[group] = hours.get(group, 0.0) + value
    return hours



__all__ = ["AsrItems", "FILTER_REASONS", "FilterArgs", "FilterResult", "asr_filter", "asr_items", "drop_tokens",
           "pack_texts", "read_summary", "segment_of"]
