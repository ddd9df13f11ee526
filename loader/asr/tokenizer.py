"""Tokenizers for ASR targets: the built-in character vocabulary, or a SentencePiece model.

Both encode a whole column of transcripts at once into flat token ids plus offsets (item ``i``'s tokens are
``ids[offsets[i]:offsets[i + 1]]``), so the loader keeps numpy arrays, not a Python list per utterance.
Targets are the plain token ids: no begin/end-of-sentence tokens are added (CTC models, Omnilingual's first use,
want none; a decoder adds its own ``bos``/``eos`` around them).

Character vocabulary (``tokenizer: char``), the same whichever machine or pack order builds it:
  id 0 ``<pad>`` (the padding of ``target_seqs``), 1 ``<unk>``, 2 ``<s>`` (bos), 3 ``</s>`` (eos), then every
  character of the packs' ``char_counts`` (``dataset.json``, counted by the writer) in Unicode code-point order.
  Sorting by code point rather than by count keeps a character's id stable when more data is added; the counts
  only say which characters exist.  Encoding is vectorised: the UTF-8 bytes are decoded once, code points are
  looked up with ``searchsorted``, and a character outside the vocabulary becomes ``<unk>``.

SentencePiece (``tokenizer: {sentencepiece: PATH}``) needs the optional extra ``speechpack[sentencepiece]``; its
special ids are the model's own (``pad_id`` may be -1 in a model trained without one: the loader then pads with 0
and relies on ``target_seq_lens``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from speechpack.loader.config_checks import ConfigError
from speechpack.schemas.errors import SpeechpackError

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)
PAD_ID, UNK_ID, BOS_ID, EOS_ID = range(len(SPECIAL_TOKENS))
TOKEN_DTYPE = np.int64


class TokenizerError(SpeechpackError):
    """A tokenizer cannot be made (missing model, missing optional dependency, empty vocabulary)."""


@dataclass(frozen=True)
class TokenizerSpec:
    """``char`` with the packs whose ``char_counts`` make the vocabulary (empty: the loaded packs), or
    ``sentencepiece`` with a model path."""

    kind: str = "char"
    packs: tuple[str, ...] = ()
    model: str | None = None


def parse_tokenizer(value, where: str) -> TokenizerSpec:
    """``dataset_args.tokenizer`` (``char``, ``{char: PACK or [PACKS]}`` or ``{sentencepiece: MODEL}``) as a spec."""
    if value == "char":
        return TokenizerSpec()
    if isinstance(value, dict) and len(value) == 1:
        (kind, target), = value.items()
        if kind == "sentencepiece":
            if not isinstance(target, str) or not target:
                raise ConfigError(f"{where}.sentencepiece: expected a model path, got {target!r}")
            return TokenizerSpec(kind="sentencepiece", model=target)
        if kind == "char":
            paths = [target] if isinstance(target, str) else target
            if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
                raise ConfigError(f"{where}.char: expected a pack path or a list of them, got {target!r}")
            return TokenizerSpec(kind="char", packs=tuple(paths))
    raise ConfigError(f"{where}: expected 'char', {{char: PACK}} or {{sentencepiece: MODEL}}, got {value!r}")


def utf8_char_counts(data: np.ndarray, byte_offsets: np.ndarray) -> np.ndarray:
    """Characters (code points) of each UTF-8 row: bytes that are not continuation bytes (``10xxxxxx``)."""
    leading = np.concatenate([[0], np.cumsum((np.asarray(data, dtype=np.uint8) & 0xC0) != 0x80, dtype=np.int64)])
    return np.diff(leading[np.asarray(byte_offsets, dtype=np.int64)])


def code_points(data: np.ndarray) -> np.ndarray:
    """Every code point of a flat UTF-8 byte array, as uint32 (one decode for the whole column)."""
    text = np.asarray(data, dtype=np.uint8).tobytes().decode("utf-8")
    return np.frombuffer(text.encode("utf-32-le"), dtype="<u4")


class CharTokenizer:
    """The built-in character vocabulary (module docstring); picklable, holds one small array."""

    kind = "char"
    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(self, characters: Iterable[str]):
        chars = sorted(set(characters))
        bad = [c for c in chars if len(c) != 1]
        if bad:
            raise TokenizerError(f"char vocabulary: entries must be single characters, got {bad[:5]}")
        if not chars:
            raise TokenizerError("char vocabulary: no characters (are the packs' char_counts empty?)")
        self._points = np.array([ord(c) for c in chars], dtype=np.uint32)

    @classmethod
    def from_char_counts(cls, counts: Sequence[Mapping[str, int]]) -> "CharTokenizer":
        """The vocabulary of every character counted in any of ``counts`` (one ``char_counts`` per pack)."""
        return cls(c for table in counts for c, n in table.items() if n > 0)

    def __len__(self) -> int:
        return len(SPECIAL_TOKENS) + len(self._points)

    @property
    def characters(self) -> list[str]:
        return [chr(p) for p in self._points.tolist()]

    def __repr__(self) -> str:
        return f"CharTokenizer({len(self)} ids: {len(SPECIAL_TOKENS)} special + {len(self._points)} characters)"

    def encode_points(self, points: np.ndarray) -> np.ndarray:
        """Token ids of code points (``<unk>`` for characters outside the vocabulary)."""
        points = np.asarray(points, dtype=np.uint32)
        where = np.minimum(np.searchsorted(self._points, points), len(self._points) - 1)
        known = self._points[where] == points
        return np.where(known, where + len(SPECIAL_TOKENS), UNK_ID).astype(TOKEN_DTYPE)

    def encode_utf8(self, data: np.ndarray, byte_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat UTF-8 rows (row ``i`` is ``data[byte_offsets[i]:byte_offsets[i + 1]]``) to (ids, offsets)."""
        ids = self.encode_points(code_points(data))
        offsets = np.concatenate([[0], np.cumsum(utf8_char_counts(data, byte_offsets))]).astype(np.int64)
        return ids, offsets

    def encode(self, text: str) -> np.ndarray:
        return self.encode_points(np.frombuffer(text.encode("utf-32-le"), dtype="<u4"))

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; special ids are written by name (``<unk>``), padding is left out."""
        out = []
        for i in ids:
            i = int(i)
            if i >= len(SPECIAL_TOKENS):
                out.append(chr(int(self._points[i - len(SPECIAL_TOKENS)])))
            elif i != PAD_ID:
                out.append(SPECIAL_TOKENS[i])
        return "".join(out)


def _sentencepiece():
    try:
        import sentencepiece
    except ImportError:
        raise TokenizerError("tokenizer.sentencepiece needs the sentencepiece package: "
                             "pip install 'speechpack[sentencepiece]'") from None
    return sentencepiece


class SentencePieceTokenizer:
    """A SentencePiece model file; the processor is loaded lazily, so the tokenizer pickles into workers."""

    kind = "sentencepiece"

    def __init__(self, path: str):
        if not os.path.isfile(path):
            raise TokenizerError(f"tokenizer.sentencepiece: model file {path} not found")
        self.path = path
        self._processor = None
        processor = self.processor  # fail now (bad model, missing package), not in a worker
        self.pad_id, self.unk_id = processor.pad_id(), processor.unk_id()
        self.bos_id, self.eos_id = processor.bos_id(), processor.eos_id()

    @property
    def processor(self):
        if self._processor is None:
            processor = _sentencepiece().SentencePieceProcessor()
            try:
                processor.Load(self.path)
            except (OSError, RuntimeError) as err:
                raise TokenizerError(f"tokenizer.sentencepiece: {self.path} is not a SentencePiece model "
                                     f"({err})") from None
            self._processor = processor
        return self._processor

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_processor": None}

    def __len__(self) -> int:
        return int(self.processor.GetPieceSize())

    def __repr__(self) -> str:
        return f"SentencePieceTokenizer({self.path!r}, {len(self)} pieces)"

    def encode_utf8(self, data: np.ndarray, byte_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat UTF-8 rows to (ids, offsets), one batched call into SentencePiece."""
        raw = np.asarray(data, dtype=np.uint8).tobytes()
        bounds = np.asarray(byte_offsets, dtype=np.int64).tolist()
        texts = [raw[a:b].decode("utf-8") for a, b in zip(bounds[:-1], bounds[1:])]
        pieces = self.processor.Encode(texts) if texts else []
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        ids = (np.fromiter((i for p in pieces for i in p), dtype=TOKEN_DTYPE, count=int(lengths.sum()))
               if len(pieces) else np.zeros(0, TOKEN_DTYPE))
        return ids, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.processor.Encode(text), dtype=TOKEN_DTYPE)

    def decode(self, ids: Iterable[int]) -> str:
        return self.processor.Decode([int(i) for i in ids])


__all__ = ["BOS_ID", "CharTokenizer", "EOS_ID", "PAD_ID", "SPECIAL_TOKENS", "SentencePieceTokenizer",
           "TokenizerError", "TokenizerSpec", "UNK_ID", "code_points", "parse_tokenizer", "utf8_char_counts"]
