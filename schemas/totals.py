"""Extra manifest totals a kind carries beyond ``totals``: gathered from the shards by the writer, and recomputed
and compared by ``speechpack validate``, with one piece of code so the two can never disagree.

``TranscriptTotals`` (kind ``asr``, format 1.3): ``hours_by_corpus`` (``{corpus: {language: hours}}``, what corpus
and language weighting needs) and ``char_counts`` (``{character: count}`` over every transcript, from which the
loader makes the built-in character vocabulary).
"""

from __future__ import annotations

import collections
import math
from typing import Callable

import numpy as np

from speechpack.schemas.constants import STREAM_TEXT

#: ``read_stream(name)``: a shard's mapped stream file, or None when it cannot be read.
StreamReader = Callable[[str], "np.ndarray | None"]
#: ``on_error(record, stream, message)``: a record whose stored data cannot be counted.
ErrorSink = Callable[[dict, str, str], None]


class TranscriptTotals:
    """``hours_by_corpus`` and ``char_counts`` of an asr pack, shard by shard in pack order."""

    #: The manifest keys these totals fill (required in an asr ``dataset.json``, refused elsewhere).
    KEYS = ("hours_by_corpus", "char_counts")

    def __init__(self) -> None:
        self.frames: collections.Counter[tuple[str, str]] = collections.Counter()
        self.chars: collections.Counter[str] = collections.Counter()

    def add(self, records: list[dict], read_stream: StreamReader, on_error: ErrorSink | None = None) -> None:
        """Count one shard's records; transcripts are read from its ``text`` stream.  A transcript out of the
        file's bounds is not counted; one that is not UTF-8 is reported to ``on_error`` (raised without one)."""
        if not records:
            return
        text = read_stream(STREAM_TEXT)
        for record in records:
            self.frames[(record["attrs"]["corpus"], record["attrs"]["language"])] += record["num_frames"]
            for segment in record["streams"][STREAM_TEXT]:
                stop = segment["offset"] + segment["length"]
                if text is None or stop > text.shape[0]:
                    continue
                try:
                    decoded = text[segment["offset"]:stop].tobytes().decode("utf-8")
                except UnicodeDecodeError as err:
                    if on_error is None:
                        raise
                    on_error(record, STREAM_TEXT, f"transcript is not valid UTF-8 ({err.reason} at byte {err.start})")
                    continue
                self.chars.update(decoded)

    def manifest_fields(self, sample_rate: int) -> dict:
        """The manifest keys' values (sorted, so equal packs have equal manifests)."""
        hours: dict[str, dict[str, float]] = {}
        for (corpus, language), frames in sorted(self.frames.items()):
            hours.setdefault(corpus, {})[language] = frames / sample_rate / 3600.0
        return {"hours_by_corpus": hours, "char_counts": dict(sorted(self.chars.items()))}

    def issues(self, recorded: dict, sample_rate: int) -> list[str]:
        """How the manifest's ``recorded`` values differ from what was counted (empty when they agree)."""
        found = []
        by_group = {(c, lang): h for c, langs in recorded["hours_by_corpus"].items() for lang, h in langs.items()}
        measured = {group: frames / sample_rate / 3600.0 for group, frames in self.frames.items()}
        if set(by_group) != set(measured) or any(
                not math.isclose(by_group[g], measured[g], rel_tol=1e-9, abs_tol=1e-12) for g in measured):
            found.append(f"hours_by_corpus does not match the shards (recorded {sorted(by_group.items())}, "
                         f"measured {sorted(measured.items())})")
        if recorded["char_counts"] != dict(self.chars):
            differ = sorted(set(recorded["char_counts"].items()) ^ set(self.chars.items()))[:5]
            found.append(f"char_counts does not match the transcripts (first differences: {differ})")
        return found


__all__ = ["TranscriptTotals"]
