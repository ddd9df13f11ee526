"""``json/dae_keyword_phoneme`` (textual cue): DAE keyword phoneme ids, int64 ``[L]``, chosen by the cue's
``selection`` (``random``: a span of words drawn with the batch's draws; ``fixed``: ``kw_candidate``)."""

from __future__ import annotations

import numpy as np

from speechpack.loader.tse.cues.values import ChunkInfo


def read(bank, item: int, data: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """``([int64 phoneme ids per word], int64 kw_candidate)`` (copies)."""
    word_first, word_count, kw_first, kw_count = (int(bank.field(n, item)) for n in
                                                  ("word_first", "word_count", "kw_first", "kw_count"))
    words = bank.words[word_first:word_first + word_count]
    return ([np.array(data[int(w["phn_offset"]):int(w["phn_offset"]) + int(w["phn_length"])]) for w in words],
            np.array(bank.keywords[kw_first:kw_first + kw_count]))


def value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    words, keywords = bank.read(item)
    return select_phonemes(words, keywords, spec.selection or {}, draws[1:3])


def check_spec(spec, pack_path: str) -> str | None:
    """What makes a ``cues.yaml`` entry of this representation unusable, or None."""
    return None if isinstance(spec.selection, dict) else "a dae_keyword_phoneme cue needs a selection"


def randint(lo: int, hi: int, u: float) -> int:
    """``random.randint(lo, hi)`` (inclusive) from one uniform draw ``u`` in [0, 1)."""
    return lo + min(int(u * (hi - lo + 1)), hi - lo)


def select_phonemes(words: list[np.ndarray], keywords: np.ndarray, selection: dict, draws: np.ndarray) -> np.ndarray:
    """WeSep's DAE keyword selection, int64 ``[L]``: ``random`` a contiguous span of ``min(randint(lo, hi),
    n_words)`` words from ``randint(0, n_words - n)``; ``fixed`` the words of ``kw_candidate`` in its order."""
    if not len(words):
        raise ValueError("a DAE keyword cue needs a non-empty phn_label")
    if any(len(word) == 0 for word in words):
        raise ValueError("each DAE keyword word needs phoneme ids")
    kind = selection.get("type")
    if kind == "random":
        lo, hi = selection.get("word_range", [2, 6])
        count = min(randint(lo, hi, float(draws[0])), len(words))
        start = randint(0, len(words) - count, float(draws[1]))
        chosen = words[start:start + count]
    elif kind == "fixed":
        if not len(keywords):
            raise ValueError("DAE fixed selection needs a non-empty kw_candidate")
        if any(not 0 <= int(i) < len(words) for i in keywords):
            raise IndexError(f"a kw_candidate index is outside phn_label ({len(words)} words): {list(keywords)}")
        chosen = [words[int(i)] for i in keywords]
    else:
        raise ValueError(f"unsupported DAE keyword selection {kind!r}")
    return np.concatenate([np.asarray(word, dtype=np.int64) for word in chosen])
