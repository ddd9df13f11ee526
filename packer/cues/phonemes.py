"""``json/dae_keyword_phoneme`` (textual cue): per speaker, the words of a transcript with their phoneme ids and
the indices of keyword candidates.

Resource value: ONE dict per key, ``{"words": [str], "phn_label": [[int]], "kw_candidate": [int],
"normalized_text"?: str}``; ``phn_label[i]`` are the phoneme ids of ``words[i]`` and every ``kw_candidate`` is a
word index.  The value is inline (no file), so items are deduplicated by content.  The ids go to ``data.npy``
(int64, WeSep's tensor dtype); the words and text, which no array holds, to ``sources.json``.
"""

from __future__ import annotations

import json
import os

import numpy as np

from speechpack.packer.cues.payload import FlatWriter, LoadContext
from speechpack.packer.cues.resource import CueInputError, EntryContext, ItemSource
from speechpack.packer.files import save_npy
from speechpack.schemas.cue_banks import INDEX_DTYPE, KEYWORDS_NAME, WORD_DTYPE, WORDS_NAME

_INT64_MAX = np.iinfo(np.int64).max


def _id_list(value, what: str, below: int = _INT64_MAX) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < below
                                              for v in value):
        raise CueInputError(f"{what} must be a list of integers in [0, {below}), got {value!r:.120}")
    return value


class DaeKeywordPhonemeWriter(FlatWriter):
    representation = "dae_keyword_phoneme"

    def __init__(self, directory: str, context: LoadContext):
        super().__init__(directory, context)
        self._words: list[tuple[int, int]] = []
        self._keywords: list[int] = []

    @staticmethod
    def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
        words = entry.get("words")
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise CueInputError(f"'words' must be a list of strings, got {words!r:.120}")
        phn_label = entry.get("phn_label")
        if not isinstance(phn_label, list) or len(phn_label) != len(words):
            raise CueInputError(f"'phn_label' must be a list with one list of phoneme ids per word ({len(words)}), "
                                f"got {phn_label!r:.120}")
        for i, ids in enumerate(phn_label):
            _id_list(ids, f"'phn_label[{i}]'")
        kw_candidate = _id_list(entry.get("kw_candidate"), "'kw_candidate'", below=len(words))
        text = entry.get("normalized_text")
        if text is not None and not isinstance(text, str):
            raise CueInputError(f"'normalized_text' must be a string, got {text!r:.120}")
        content = json.dumps({"words": words, "phn_label": phn_label, "kw_candidate": kw_candidate,
                              "normalized_text": text}, sort_keys=True, ensure_ascii=False)
        return ItemSource(context.resource_path, content=content), ""

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> tuple[list[np.ndarray], np.ndarray]:
        """``(phoneme ids per word, keyword candidate word indices)``, int64."""
        value = json.loads(source.content)
        return ([np.asarray(ids, dtype=INDEX_DTYPE) for ids in value["phn_label"]],
                np.asarray(value["kw_candidate"], dtype=INDEX_DTYPE))

    @staticmethod
    def provenance(source: ItemSource) -> dict:
        value = json.loads(source.content)
        return {"path": source.path, "words": value["words"], "normalized_text": value["normalized_text"]}

    def add(self, source: ItemSource, loaded: tuple[list[np.ndarray], np.ndarray]) -> None:
        phonemes, keywords = loaded
        self.rows.append((len(self._words), len(phonemes), len(self._keywords), len(keywords)))
        self._words.extend((self.append(ids), ids.size) for ids in phonemes)
        self._keywords.extend(int(k) for k in keywords)

    def finish(self) -> dict:
        super().finish()
        save_npy(os.path.join(self.directory, WORDS_NAME), np.array(self._words, dtype=WORD_DTYPE))
        save_npy(os.path.join(self.directory, KEYWORDS_NAME), np.array(self._keywords, dtype=INDEX_DTYPE))
        return {}


__all__ = ["DaeKeywordPhonemeWriter"]
