"""loader.asr.tokenizer: the built-in character vocabulary and SentencePiece, on the librivox transcripts."""

from __future__ import annotations

import builtins
import os
import pickle
import re

import numpy as np
import pytest

from speechpack.loader.asr.tokenizer import (PAD_ID, SPECIAL_TOKENS, UNK_ID, CharTokenizer, SentencePieceTokenizer,
                                  TokenizerError, utf8_char_counts)
from factories import missing_recording
from factories import require

TRANSCRIPTION = "/usr/share/pocketsphinx/test/data/librivox/transcription"


def librivox_transcripts() -> list[str]:
    """The clips' transcripts, without the ``<s> ... </s> (id)`` markup of the file."""
    if not os.path.isfile(TRANSCRIPTION):
        missing_recording(TRANSCRIPTION, "pocketsphinx-testdata")
    with open(TRANSCRIPTION, encoding="utf-8") as fp:
        return [re.sub(r"^<s>\s*|\s*</s>\s*\(.*\)$", "", line.strip()) for line in fp if line.strip()]


def _flat(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    raw = [t.encode("utf-8") for t in texts]
    return (np.frombuffer(b"".join(raw), dtype=np.uint8),
            np.concatenate([[0], np.cumsum([len(r) for r in raw])]).astype(np.int64))


def test_char_vocabulary_is_deterministic_and_encodes_the_transcripts():
    texts = librivox_transcripts()
    counts = {}
    for t in texts:
        for c in t:
            counts[c] = counts.get(c, 0) + 1
    tok = CharTokenizer.from_char_counts([counts])
    shuffled = CharTokenizer.from_char_counts([dict(reversed(list(counts.items())))])
    assert tok.characters == shuffled.characters == sorted(counts)
    assert len(tok) == len(SPECIAL_TOKENS) + len(counts)
    ids, offsets = tok.encode_utf8(*_flat(texts))
    assert (ids >= len(SPECIAL_TOKENS)).all()
    for i, text in enumerate(texts):
        row = ids[offsets[i]:offsets[i + 1]]
        assert tok.decode(row) == text
        np.testing.assert_array_equal(row, tok.encode(text))


def test_unknown_characters_and_multibyte_text():
    tok = CharTokenizer.from_char_counts([{"a": 1, "é": 2}, {"ß": 1, "x": 0}])
    assert tok.characters == ["a", "ß", "é"]  # code-point order: U+00DF before U+00E9
    data, offsets = _flat(["aé", "", "xßz", "日本"])
    ids, out = tok.encode_utf8(data, offsets)
    assert out.tolist() == [0, 2, 2, 5, 7]
    assert ids.tolist() == [4, 6, UNK_ID, 5, UNK_ID, UNK_ID, UNK_ID]
    assert utf8_char_counts(data, offsets).tolist() == [2, 0, 3, 2]
    assert tok.decode([PAD_ID, 4, UNK_ID]) == "a<unk>"
    assert pickle.loads(pickle.dumps(tok)).characters == tok.characters


def test_empty_vocabulary_is_an_error():
    with pytest.raises(TokenizerError, match="no characters"):
        CharTokenizer.from_char_counts([{}])


@pytest.fixture
def sp_model(tmp_path):
    sentencepiece = require("sentencepiece", "sentencepiece")
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(librivox_transcripts()) + "\n", encoding="utf-8")
    prefix = tmp_path / "sp"
    sentencepiece.SentencePieceTrainer.Train(input=str(corpus), model_prefix=str(prefix), vocab_size=60,
                                             model_type="unigram", hard_vocab_limit=False, pad_id=3, bos_id=-1,
                                             eos_id=2, unk_id=1, minloglevel=2)
    return str(prefix) + ".model"


def test_sentencepiece_encodes_a_column_like_one_call_per_text(sp_model):
    texts = librivox_transcripts() + [""]
    tok = SentencePieceTokenizer(sp_model)
    assert (tok.pad_id, tok.unk_id, tok.eos_id) == (3, 1, 2)
    ids, offsets = tok.encode_utf8(*_flat(texts))
    assert offsets[-1] == offsets[-2]  # the empty text has no token
    for i, text in enumerate(texts):
        np.testing.assert_array_equal(ids[offsets[i]:offsets[i + 1]], tok.encode(text))
        assert tok.decode(ids[offsets[i]:offsets[i + 1]]) == text
    again = pickle.loads(pickle.dumps(tok))
    np.testing.assert_array_equal(again.encode(texts[0]), tok.encode(texts[0]))


def test_sentencepiece_errors_name_the_problem(tmp_path, sp_model, monkeypatch):
    with pytest.raises(TokenizerError, match="not found"):
        SentencePieceTokenizer(str(tmp_path / "missing.model"))
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(TokenizerError, match="not a SentencePiece model"):
        SentencePieceTokenizer(str(bad))
    real_import = builtins.__import__

    def no_sentencepiece(name, *args, **kwargs):
        if name == "sentencepiece":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sentencepiece)
    with pytest.raises(TokenizerError, match=r"speechpack\[sentencepiece\]"):
        SentencePieceTokenizer(sp_model)
