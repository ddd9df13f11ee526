"""Which ASR items an epoch keeps: Omnilingual's ``AsrTask`` filters, vectorised over the pack columns.

Every item removed is counted under exactly one reason, the first it fails in this order (so the counts add up
to the items removed, and the loader reports them instead of losing them from the epoch count silently).  The
order is Omnilingual's: audio length first, then, once the text is tokenized, empty text, sequences of unknown
tokens only, and long text; the speaking-rate check comes last:

``audio_too_short``  fewer than ``min_audio_len`` samples (per channel, at the pack's rate)
``audio_too_long``   more than ``max_audio_len`` samples
``empty_text``       an empty transcript (no character, or no token)
``unknown_only``     every token is the tokenizer's unknown id: always dropped, whatever ``remove_unknown`` says
``text_too_long``    more than ``filter_long_text_threshold`` tokens (counted after ``remove_unknown``), when set
``too_fast``         fewer than ``min_samples_per_char`` samples per character of the transcript

``remove_unknown`` (Omnilingual's "remove unknown tokens from the text in place") deletes the tokenizer's unknown
id from the targets of the items that keep some other token; the tokens it removes are counted
(``unknown_tokens_removed``), the items are not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FILTER_REASONS = ("audio_too_short", "audio_too_long", "empty_text", "unknown_only", "text_too_long", "too_fast")


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


def drop_tokens(ids: np.ndarray, offsets: np.ndarray, token: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Delete every ``token`` from flat token rows; returns (ids, offsets, tokens deleted)."""
    hit = ids == token
    if not hit.any():
        return ids, offsets, 0
    removed_before = np.concatenate([[0], np.cumsum(hit, dtype=np.int64)])
    return ids[~hit], offsets - removed_before[offsets], int(hit.sum())


def asr_filter(audio_len: np.ndarray, num_chars: np.ndarray, num_tokens: np.ndarray, args: FilterArgs,
               unknown_tokens_removed: int = 0, num_unknown: np.ndarray | None = None) -> FilterResult:
    """Keep-mask and per-reason counts (module docstring).  ``num_tokens`` are counted before ``remove_unknown``;
    ``num_unknown`` (default: none) is each item's count of unknown tokens."""
    audio_len = np.asarray(audio_len, dtype=np.int64)
    num_chars = np.asarray(num_chars, dtype=np.int64)
    num_tokens = np.asarray(num_tokens, dtype=np.int64)
    num_unknown = np.zeros(len(num_tokens), np.int64) if num_unknown is None else np.asarray(num_unknown, np.int64)
    if not len(audio_len) == len(num_chars) == len(num_tokens) == len(num_unknown):
        raise ValueError("asr_filter: one audio length, character, token and unknown count per item")
    kept_tokens = num_tokens - num_unknown if args.remove_unknown else num_tokens
    failing = {
        "audio_too_short": audio_len < args.min_audio_len,
        "audio_too_long": audio_len > args.max_audio_len,
        "empty_text": (num_tokens == 0) | (num_chars == 0),
        "unknown_only": num_unknown >= num_tokens,
        "text_too_long": (kept_tokens > args.filter_long_text_threshold
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


__all__ = ["FILTER_REASONS", "FilterArgs", "FilterResult", "asr_filter", "drop_tokens"]
