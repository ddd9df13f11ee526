"""loader.asr.items: every removed item counted once, under the first reason it fails."""

from __future__ import annotations

import numpy as np
import pytest

from speechpack.loader.asr.items import FILTER_REASONS, FilterArgs, asr_filter, drop_tokens

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")


def test_each_reason_and_its_boundaries():
    args = FilterArgs(min_audio_len=1000, max_audio_len=50_000, min_samples_per_char=160,
                      filter_long_text_threshold=10)
    audio = np.array([999, 1000, 50_000, 50_001, 8000, 8000, 1600, 1599, 40_000, 40_000])
    chars = np.array([1, 1, 1, 1, 0, 5, 10, 10, 11, 10])
    tokens = np.array([1, 1, 1, 1, 0, 0, 10, 10, 11, 10])
    result = asr_filter(audio, chars, tokens, args)
    assert result.keep.tolist() == [False, True, True, False, False, False, True, False, False, True]
    assert result.report == {"audio_too_short": 1, "audio_too_long": 1, "empty_text": 2, "unknown_only": 0,
                             "text_too_long": 1, "too_fast": 1}
    assert sum(result.report.values()) == int((~result.keep).sum())
    assert list(result.report) == list(FILTER_REASONS)


def test_first_failing_reason_wins_and_defaults_keep_everything_reasonable():
    result = asr_filter([10], [1], [0], FilterArgs(min_audio_len=100))
    assert result.report["audio_too_short"] == 1 and result.report["empty_text"] == 0
    assert asr_filter([16000], [50], [50], FilterArgs()).keep.all()  # no text threshold by default


def test_unknown_only_sequences_are_always_dropped_and_long_text_counts_unknown_tokens():
    # items: all unknown, half unknown, clean; 3 tokens each, threshold 2.  Omnilingual filters long text before
    # remove_unknown deletes the unknown tokens, so the half-unknown item is too long either way.
    audio, chars, tokens, unknown = [16000] * 3, [3] * 3, [3] * 3, [3, 2, 0]
    for remove in (False, True):
        args = FilterArgs(filter_long_text_threshold=2, remove_unknown=remove)
        result = asr_filter(audio, chars, tokens, args, num_unknown=unknown)
        assert result.report["unknown_only"] == 1 and not result.keep[0]
        assert result.keep.tolist() == [False, False, False]
        assert result.report["text_too_long"] == 2


def test_the_speaking_rate_is_checked_before_the_tokens():
    # too fast and too long at once: Omnilingual's filter_fast_speech runs before encoding, so it is too_fast
    result = asr_filter([1000], [20], [20], FilterArgs(filter_long_text_threshold=10))
    assert result.report["too_fast"] == 1 and result.report["text_too_long"] == 0
    assert list(FILTER_REASONS) == ["audio_too_short", "audio_too_long", "empty_text", "too_fast", "unknown_only",
                                    "text_too_long"]


def test_drop_tokens_deletes_unknowns_and_fixes_offsets():
    ids = np.array([5, 1, 6, 1, 1, 7])
    offsets = np.array([0, 3, 5, 6])
    out, new_offsets, removed = drop_tokens(ids, offsets, 1)
    assert out.tolist() == [5, 6, 7] and new_offsets.tolist() == [0, 2, 2, 3] and removed == 3
    same, same_offsets, none = drop_tokens(out, new_offsets, 1)
    assert same is out and none == 0
