"""The pack kinds, one row each: what every part of speechpack needs to know about a kind, in one table.

A kind (``dataset.json["kind"]``) fixes a pack's streams, its per-sample attributes, the lowest format minor that
has it, the extra manifest totals it carries, how its samples' speakers and segments are laid out, and which
streams ``Pack.sample`` returns as ``mix`` and ``targets``.  The writer (``packer.build.writer``), ``speechpack
validate`` (``packer.validate.pack``), ``speechpack inspect`` (``packer.inspect``), the reader (``loader.pack``) and the
format (``schemas.format``, ``schemas.columns``) iterate :data:`KIND_SPECS` instead of branching on the kind, so a
new kind is one row here (plus its adapter); docs/format.md ("Streams") is the prose of the same table.

Extra manifest totals a kind carries beyond ``totals``: gathered from the shards by the writer, and recomputed
and compared by ``speechpack validate``, with one piece of code so the two can never disagree.

``TranscriptTotals`` (kind ``asr``, format 1.3): ``hours_by_corpus`` (``{corpus: {language: hours}}``, what corpus
and language weighting needs) and ``char_counts`` (``{character: count}`` over every transcript, from which the
loader makes the built-in character vocabulary).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

import numpy as np

from speechpack.schemas.constants import (
    KEYS_FILE,
    KINDS,
    KIND_ASD,
    KIND_ASR,
    KIND_NOISE,
    KIND_RIR,
    KIND_SOURCES,
    KIND_TSE,
    MINOR_BANKS,
    MINOR_TRACKS,
    SAMPLES_FILE,
    SPEAKERS_FILE,
    STREAM_AUDIO,
    STREAM_FACES,
    STREAM_LABELS,
    STREAM_MIX,
    STREAM_SOURCE,
    STREAM_TARGET,
    STREAM_TEXT,
    STREAM_TYPES,
    attr_file,
    blocks_column_file,
    stream_column_file,
)

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


#: How a sample's ``speakers`` relate to the sample (``KindSpec.speakers``).
SPEAKERS_PER_TARGET = "per_target"  # one or more; the ``per_speaker`` stream has one segment per speaker
SPEAKERS_ONE = "one"  # exactly one
SPEAKERS_KIND = "kind"  # exactly ``[kind]``: an audio bank has no speakers, but the list may not be empty
SPEAKERS_KEY = "key"  # exactly ``[key]``: an asd track is its own speaker
_SPEAKER_RULES = {SPEAKERS_PER_TARGET: "one or more speakers", SPEAKERS_ONE: "one speaker",
                  SPEAKERS_KIND: "the one speaker {kind!r}", SPEAKERS_KEY: "its key as its one speaker"}


@dataclass(frozen=True)
class KindSpec:
    """One kind of pack.

    ``streams``       the catalogue, in order (``dataset.json["streams"]``, one file per stream in every shard).
    ``since_minor``   the lowest format minor that has the kind (a writer records the lowest that describes a pack).
    ``attributes``    per-sample attributes: name -> ``float`` or ``str`` (``attrs`` of an index record,
                      ``columns/attr_<name>.npy``).
    ``totals``        an accumulator of extra manifest totals (its ``KEYS`` are required in ``dataset.json`` of this
                      kind and refused in the others), or None.
    ``speakers``      one of the ``SPEAKERS_*`` rules.
    ``per_speaker``   the stream with one segment per speaker; every other stream has one segment per sample.
    ``mono``          streams whose segments must have one channel.
    ``equal_rows``    data streams that hold the same, non-zero number of rows (asd: one label per face).
    ``non_empty``     data streams whose segment holds at least one row (asr: a transcript).
    ``mix``, ``targets`` the streams ``Pack.sample`` returns as ``mix`` (None: no mix) and ``targets`` (every
                      segment of the sample, stacked).
    """

    name: str
    streams: tuple[str, ...]
    since_minor: int
    speakers: str
    targets: str
    mix: str | None = None
    attributes: Mapping[str, type] = field(default_factory=lambda: MappingProxyType({}))
    totals: type[TranscriptTotals] | None = None
    per_speaker: str | None = None
    mono: tuple[str, ...] = ()
    equal_rows: tuple[str, ...] = ()
    non_empty: tuple[str, ...] = ()

    @property
    def manifest_keys(self) -> frozenset[str]:
        """The extra keys of this kind's ``dataset.json`` (asr: ``hours_by_corpus``, ``char_counts``)."""
        return frozenset(self.totals.KEYS) if self.totals is not None else frozenset()

    @property
    def data_streams(self) -> tuple[str, ...]:
        return tuple(name for name in self.streams if not STREAM_TYPES[name].audio)

    def shape_issues(self, record: dict) -> list[str]:
        """What is wrong with the layout of an ``index.json`` record of this kind (empty when nothing): speakers,
        segments per stream, mono streams, equal and non-empty rows.  Segment lengths, offsets and statistics are
        checked elsewhere; the record's structure (``schemas.format.check_shard_index``) is assumed."""
        issues = []
        speakers, streams = record["speakers"], record["streams"]
        rule_holds = {SPEAKERS_PER_TARGET: len(speakers) >= 1, SPEAKERS_ONE: len(speakers) == 1,
                      SPEAKERS_KIND: speakers == [self.name], SPEAKERS_KEY: speakers == [record["key"]]}
        expected = {name: len(speakers) if name == self.per_speaker else 1 for name in self.streams}
        counts = {name: len(streams[name]) for name in self.streams}
        if not rule_holds[self.speakers] or counts != expected:
            wanted = " and ".join(f"one {name} segment{' per speaker' if name == self.per_speaker else ''}"
                                  for name in self.streams)
            got = ", ".join(f"{n} {name}" for name, n in counts.items())
            issues.append(f"a {self.name} sample needs {_SPEAKER_RULES[self.speakers].format(kind=self.name)} and "
                          f"{wanted}, got {speakers!r} and {got} segment(s)")
        if issues:
            return issues
        for name in self.mono:
            if any(seg["channels"] != 1 for seg in streams[name]):
                issues.append(f"{name} segments must be mono (a {self.name} pack's {name} is one voice)")
        rows = {name: streams[name][0]["length"] for name in self.equal_rows}
        if rows and (len(set(rows.values())) != 1 or 0 in rows.values()):
            issues.append(f"{' and '.join(f'{n} {name}' for name, n in rows.items())} rows: they must be equal "
                          f"and non-zero (one label per face)")
        for name in self.non_empty:
            if streams[name][0]["length"] == 0:
                issues.append(f"empty {name} segment")
        return issues


_SPECS = (
    KindSpec(KIND_TSE, (STREAM_MIX, STREAM_TARGET), since_minor=0, speakers=SPEAKERS_PER_TARGET,
             mix=STREAM_MIX, targets=STREAM_TARGET, per_speaker=STREAM_TARGET, mono=(STREAM_TARGET,)),
    KindSpec(KIND_SOURCES, (STREAM_SOURCE,), since_minor=0, speakers=SPEAKERS_ONE, targets=STREAM_SOURCE,
             mono=(STREAM_SOURCE,)),
    KindSpec(KIND_NOISE, (STREAM_AUDIO,), since_minor=MINOR_BANKS, speakers=SPEAKERS_KIND, targets=STREAM_AUDIO),
    KindSpec(KIND_RIR, (STREAM_AUDIO,), since_minor=MINOR_BANKS, speakers=SPEAKERS_KIND, targets=STREAM_AUDIO),
    KindSpec(KIND_ASD, (STREAM_AUDIO, STREAM_FACES, STREAM_LABELS), since_minor=MINOR_TRACKS, speakers=SPEAKERS_KEY,
             targets=STREAM_AUDIO, mono=(STREAM_AUDIO,), equal_rows=(STREAM_FACES, STREAM_LABELS),
             attributes=MappingProxyType({"source_fps": float, "start_sec": float, "clip": str})),
    KindSpec(KIND_ASR, (STREAM_AUDIO, STREAM_TEXT), since_minor=MINOR_TRACKS, speakers=SPEAKERS_ONE,
             targets=STREAM_AUDIO, non_empty=(STREAM_TEXT,), totals=TranscriptTotals,
             attributes=MappingProxyType({"language": str, "corpus": str})),
)
#: The table: kind name -> its row, in ``KINDS`` order.
KIND_SPECS: Mapping[str, KindSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})
if tuple(KIND_SPECS) != KINDS:  # pragma: no cover - a kind added to one list and not the other
    raise ImportError(f"KIND_SPECS {tuple(KIND_SPECS)} and KINDS {KINDS} differ")

#: Views of the table that the format's readers and writers index directly.
STREAMS_BY_KIND: Mapping[str, tuple[str, ...]] = MappingProxyType({k: s.streams for k, s in KIND_SPECS.items()})
ATTRIBUTES_BY_KIND: Mapping[str, Mapping[str, type]] = MappingProxyType(
    {k: s.attributes for k, s in KIND_SPECS.items() if s.attributes})
#: Every extra manifest key some kind carries.
EXTRA_MANIFEST_KEYS = frozenset().union(*(spec.manifest_keys for spec in KIND_SPECS.values()))


def column_files(kind: str, compressed: Iterable[str] = ()) -> tuple[str, ...]:
    """The file names of a pack's columns (``schemas.columns``), in a fixed order; ``compressed`` names the streams
    with a codec (format 1.4), each of which adds its block sizes (``<stream>_blocks.npy``) after its table."""
    compressed = frozenset(compressed)
    streams = STREAMS_BY_KIND[kind]
    unknown = compressed - set(streams)
    if unknown:
        raise ValueError(f"kind {kind!r} has no stream(s) {sorted(unknown)}")
    return ((SAMPLES_FILE, KEYS_FILE, SPEAKERS_FILE)
            + tuple(name for s in streams
                    for name in ((stream_column_file(s), blocks_column_file(s)) if s in compressed
                                 else (stream_column_file(s),)))
            + tuple(attr_file(name) for name in ATTRIBUTES_BY_KIND.get(kind, {})))


__all__ = ["ATTRIBUTES_BY_KIND", "EXTRA_MANIFEST_KEYS", "KIND_SPECS", "STREAMS_BY_KIND", "KindSpec", "TranscriptTotals",
           "column_files"]
