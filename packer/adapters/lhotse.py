"""Lhotse cuts to an ``asr`` or ``sources`` pack (``speechpack build lhotse``).

Lhotse prepares a hundred public corpora into manifests; this adapter makes any of them a pack.  The manifests are
read by ``packer.adapters.lhotse_manifests`` (cuts, recordings + supervisions) or ``packer.adapters.lhotse_shar`` (a
Shar directory); here each cut becomes a sample, and its audio is read by Lhotse itself (``Cut.load_audio``), so every source type Lhotse loads
works: files (any format its backends decode), several files per recording (one per channel), in-memory audio
(Shar: a tar member's bytes, read only when the cut is decoded, see ``packer.adapters.lhotse_shar``), cuts of
longer recordings (``start``/``duration``), padded and mixed cuts.  Two source types are refused,
naming the cut: URLs (``type: url``; a build reads the same audio several times and must not depend on the
network: download first) and shell commands (``type: command``; a manifest must not run programs, as a pack must
not be unpickled: decode them to files with Lhotse first).

**Kinds** (``--kind``, default ``auto``: ``asr`` when any cut has a supervision with text, else ``sources``):

- ``asr``: a cut with exactly one supervision with text.  ``text`` verbatim; ``language`` the supervision's (else
  ``--language``); ``corpus`` the supervision's ``custom.corpus`` (what ``speechpack export lhotse`` writes), else
  ``--corpus``, else the corpus a recipe's file name says (``librispeech_cuts_train-clean-100.jsonl.gz`` ->
  ``librispeech``); ``speaker`` the supervision's, else ``unknown``.  Every channel of the cut is kept.
- ``sources``: a single-speaker mono cut (the input of online mixing): every supervision names the same speaker
  (at least one does).  Text, if any, is not stored (a ``sources`` pack has no text stream).

**Kept**: the cut id is the key.  Each sample's ``provenance`` records ``lhotse``: the cut id, recording id,
``start``/``duration`` (seconds), channels, and each audio source (a file path or URL as given, ``<memory>`` for
in-memory bytes); and ``extra``: what Lhotse's manifests carry beyond what the pack stores as columns, verbatim
(the cut's ``custom``, and the supervision's ``custom``, ``gender`` and word ``alignment``).  Precomputed features
and other array fields are dropped: a pack stores audio (docs/integrations.md, "Lhotse").
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
from dataclasses import dataclass

import numpy as np

from speechpack.packer.adapters.asr_common import asr_plan, asr_sample, check_label, check_text
from speechpack.packer.adapters.lhotse_manifests import CutLine, read_cuts, read_recordings_supervisions, span_problem
from speechpack.packer.adapters.lhotse_shar import read_shar, with_shar_audio
from speechpack.packer.adapters.tar_members import TarMember
from speechpack.packer.audio.decode import path_problem
from speechpack.packer.audio import Audio, AudioError, resample, resampled_frames, to_stored
from speechpack.packer.files import hash_file
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.build.plan import PackedSample, SamplePlan
from speechpack.schemas.constants import KIND_ASR, KIND_SOURCES, STREAM_SOURCE, UNKNOWN_SPEAKER
from speechpack.schemas.errors import OptionError
from speechpack.schemas.names import check_name
from speechpack.schemas.line_problems import LineProblem

#: ``--kind`` choices; ``auto`` decides from the cuts (see the module doc).
KINDS = ("auto", KIND_ASR, KIND_SOURCES)
#: Lhotse audio source types a build refuses, and why.
REFUSED_SOURCES = {
    "url": "is read from a URL; a build reads audio more than once and never from the network: download it and "
           "point the recording at the file",
    "command": "is produced by a shell command; a manifest may not run programs: decode it to a file first",
    "shar": "is a Shar placeholder without its audio: read the Shar directory with --shar",
}
#: Words of Lhotse's recipe file names (``<corpus>_<word>_<split>.jsonl.gz``) that end the corpus name.
_RECIPE_WORDS = ("_cuts", "_supervisions", "_recordings")
#: The ``custom`` field of a supervision that names the corpus (``speechpack export lhotse`` writes it).
CORPUS_FIELD = "corpus"
#: Shown as an in-memory source's place in provenance (the bytes are in the pack, not worth repeating).
MEMORY_SOURCE = "<memory>"
#: Source types whose bytes come with the manifest: in memory, or a Shar placeholder filled from its tar.
_IN_MEMORY_TYPES = ("memory", "shar")


@dataclass(frozen=True)
class LhotseItem:
    """One cut to pack.  ``audio_paths`` are the files it reads (the build checks ``--out`` is not among them).
    A Shar cut carries ``shar_audio``, the tar member its audio is read from when it is decoded, and
    ``manifest_path``, its shard's cuts file, which its problems name with its line.  Items travel to the build's
    worker processes: none holds audio bytes (a gzip-compressed Shar tar's members excepted)."""

    line: int
    key: str
    cut: object
    speaker: str
    audio_paths: tuple[str, ...]
    text: str | None = None
    language: str | None = None
    corpus: str | None = None
    shar_audio: TarMember | None = None
    manifest_path: str | None = None


def recipe_corpus(path: str) -> str | None:
    """The corpus a Lhotse recipe's manifest name says (``librispeech_cuts_dev-clean.jsonl.gz``), or None."""
    name = os.path.basename(os.path.normpath(path))
    for word in _RECIPE_WORDS:
        corpus, found, _ = name.partition(word + "_")
        if found and corpus:
            return corpus
    return None


def _sources(cut) -> list:
    """The audio sources a cut reads (a mixed cut's tracks', a padding cut's none)."""
    from lhotse.cut import MixedCut

    tracks = [track.cut for track in cut.tracks] if isinstance(cut, MixedCut) else [cut]
    return [source for track in tracks if getattr(track, "recording", None) is not None  # not a PaddingCut
            for source in track.recording.sources]


def _check_sources(cut, shar_audio: TarMember | None) -> tuple[str, ...]:
    """The files the cut reads (its file sources, or the tar of its Shar audio); ``ValueError`` for a source type
    a build refuses or a cut without audio."""
    sources = _sources(cut)
    if not sources:
        raise ValueError("the cut has no recording (speechpack packs audio; features-only cuts cannot be packed)")
    for source in sources:
        if source.type in REFUSED_SOURCES and not (source.type == "shar" and shar_audio is not None):
            raise ValueError(f"recording source {str(source.source)[:200]!r} {REFUSED_SOURCES[source.type]}")
    files = tuple(str(source.source) for source in sources if source.type == "file")
    return files + ((shar_audio.tar_path,) if shar_audio is not None else ())


def _where(entry: CutLine) -> dict:
    """The item fields that say where a cut's audio is read from (see ``LhotseItem``)."""
    return {"shar_audio": entry.audio, "manifest_path": entry.path if entry.audio is not None else None}


def _plain(custom: dict | None) -> dict:
    """A ``custom`` dict without Lhotse's array manifests (``Array``, ``TemporalArray``: references to arrays on
    disk, such as precomputed alignments or embeddings, which a pack does not store), as JSON."""
    from lhotse.array import Array, TemporalArray

    return {k: v for k, v in (custom or {}).items() if not isinstance(v, (Array, TemporalArray))}


def _extra(cut, supervision) -> dict:
    """What the manifests carry beyond the pack's columns (kept verbatim in ``provenance.extra``)."""
    extra = {}
    custom = _plain(cut.custom)
    if custom:
        extra["cut"] = custom
    if supervision is not None:
        info = supervision.to_dict()
        custom = {k: v for k, v in _plain(supervision.custom).items() if k != CORPUS_FIELD}
        kept = {"custom": custom or None, "gender": info.get("gender"), "alignment": info.get("alignment")}
        kept = {k: v for k, v in kept.items() if v}
        if kept:
            extra["supervision"] = kept
    return extra


def _asr_item(entry: CutLine, language: str | None, corpus: str | None) -> LhotseItem:
    cut = entry.cut
    if len(cut.supervisions) != 1:
        raise ValueError(f"an asr sample is one utterance: the cut has {len(cut.supervisions)} supervisions "
                         f"(split it with Lhotse's trim_to_supervisions first)")
    supervision = cut.supervisions[0]
    outside = span_problem(supervision.start, supervision.duration, cut.duration, f"the cut {cut.id!r}")
    if outside is not None:  # the transcript would not be of the stored audio
        raise ValueError(f"supervisions[0]: {outside}")
    text = check_text(supervision.text, "supervisions[0].text") if supervision.text is not None else None
    if text is None:
        raise ValueError("supervisions[0].text: missing (an asr sample needs a transcript; --kind sources packs "
                         "untranscribed speech)")
    named = (supervision.custom or {}).get(CORPUS_FIELD)
    labels = {}
    for field, value, flag in (("language", supervision.language or language, "--language"),
                               ("corpus", named or corpus, "--corpus")):
        if value is None:
            raise ValueError(f"supervisions[0].{field}: missing (give {flag} for cuts without one)")
        labels[field] = check_label(value, field)
    speaker = check_label(supervision.speaker, "speaker") if supervision.speaker else UNKNOWN_SPEAKER
    return LhotseItem(entry.line, cut.id, cut, speaker, _check_sources(cut, entry.audio), text=text, **labels,
                      **_where(entry))


def _sources_item(entry: CutLine) -> LhotseItem:
    cut = entry.cut
    for number, supervision in enumerate(cut.supervisions):  # Lhotse keeps those reaching past a cut: not beyond it
        if supervision.start >= cut.duration or supervision.start + supervision.duration <= 0:
            raise ValueError(f"supervisions[{number}]: span [{supervision.start:.6g}, "
                             f"{supervision.start + supervision.duration:.6g}) s does not overlap the cut "
                             f"({cut.duration:.6g} s)")
    speakers = sorted({s.speaker for s in cut.supervisions if s.speaker})
    if len(speakers) != 1:
        raise ValueError(f"a sources sample is one speaker: the cut's supervisions name {len(speakers)} "
                         f"({', '.join(speakers) or 'none'})")
    if cut.num_channels != 1:
        raise ValueError(f"a sources sample is mono: the cut has {cut.num_channels} channels (choose one in Lhotse, "
                         f"or --kind asr keeps them all)")
    return LhotseItem(entry.line, cut.id, cut, check_label(speakers[0], "speaker"), _check_sources(cut, entry.audio),
                      **_where(entry))


def make_items(cuts: list[CutLine], kind: str, language: str | None = None,
               corpus: str | None = None) -> tuple[list[LhotseItem], list[LineProblem]]:
    """Check each cut for ``kind`` (``asr`` or ``sources``): the items, and a problem for each cut that cannot be
    one (naming its manifest, line, key and the field)."""
    items, problems, first = [], [], {}
    for entry in cuts:
        key = entry.cut.id
        try:
            check_name(key, "id")
            if key in first:
                raise ValueError(f"duplicate cut id (first on line {first[key]})")
            item = _asr_item(entry, language, corpus) if kind == KIND_ASR else _sources_item(entry)
        except ValueError as err:
            problems.append(LineProblem(entry.line, key, entry.path, str(err)))
            continue
        first[key] = entry.line
        items.append(item)
    return items, problems


def choose_kind(cuts: list[CutLine], kind: str) -> str:
    """``--kind auto``: ``asr`` when any cut has a supervision with text, else ``sources``."""
    if kind != "auto":
        return kind
    transcribed = any(s.text for entry in cuts for s in entry.cut.supervisions)
    return KIND_ASR if transcribed else KIND_SOURCES


def plan_lhotse_cut(item: LhotseItem, sample_rate: int) -> SamplePlan:
    """Size a cut's sample from its manifest (Lhotse's declared ``num_samples``, which ``load_audio`` returns
    exactly); file sources must exist."""
    for path in item.audio_paths:
        problem = path_problem(path)
        if problem is not None:
            raise AudioError(path, f"{problem} (cut {item.key!r})")
    cut = item.cut
    rate = int(cut.sampling_rate)
    if item.text is not None:
        return asr_plan(item.line, item.key, cut.num_channels, cut.num_samples, rate, sample_rate, item.text,
                        item.key)
    frames = resampled_frames(cut.num_samples, rate, sample_rate, item.key)
    return SamplePlan(line=item.line, key=item.key, num_frames=frames, elements={STREAM_SOURCE: frames})


def _source_name(source) -> str:
    return MEMORY_SOURCE if source.type in _IN_MEMORY_TYPES else str(source.source)


def _provenance(item: LhotseItem) -> dict:
    cut = item.cut
    recording = getattr(cut, "recording", None)  # a MixedCut has tracks instead
    record = {"cut_id": cut.id, "start": float(cut.start), "duration": float(cut.duration),
              "channels": cut.num_channels, "sources": [_source_name(s) for s in _sources(cut)]}
    if recording is not None:
        record["recording_id"] = recording.id
    provenance = {"lhotse": record}
    extra = _extra(cut, cut.supervisions[0] if len(cut.supervisions) == 1 else None)
    if extra:
        provenance["extra"] = extra
    return provenance


def _problem_place(item: LhotseItem) -> tuple[str, str]:
    """Where a decoding problem of ``item`` is: the path it names, and what its reason starts with.  A Shar cut's
    problem names its cuts file (the line is a line of that file) and, in the reason, the tar member."""
    if item.shar_audio is not None:
        return item.manifest_path, f"{item.shar_audio}: "
    return (item.audio_paths[0] if item.audio_paths else f"cut {item.key}"), ""


def _loadable_cut(item: LhotseItem):
    """The cut for Lhotse to load: a Shar cut with its tar member's bytes attached (read now, and dropped with the
    cut once decoded), any other cut as it is."""
    if item.shar_audio is None:
        return item.cut
    return with_shar_audio(item.cut, item.shar_audio.read_bytes())


def read_cut_audio(item: LhotseItem) -> Audio:
    """The cut's audio as Lhotse loads it, float32 ``[channels, samples]``; ``AudioError`` naming the cut."""
    where, member = _problem_place(item)
    try:
        data = _loadable_cut(item).load_audio()
    except AudioError as err:  # a Shar member that cannot be read (truncated since the tar was indexed)
        raise AudioError(where, f"{member}cut {item.key!r}: {err.reason}") from None
    except Exception as err:  # Lhotse's backends raise many types (AudioLoadingError, RuntimeError, OSError...)
        raise AudioError(where, f"{member}Lhotse could not load cut {item.key!r}: {err}") from None
    data = np.ascontiguousarray(np.atleast_2d(data), dtype=np.float32)
    if data.shape[1] != item.cut.num_samples:
        raise AudioError(where, f"{member}cut {item.key!r}: Lhotse loaded {data.shape[1]} samples, the manifest "
                                f"declares {item.cut.num_samples}")
    if not np.isfinite(data).all():
        raise AudioError(where, f"{member}cut {item.key!r}: audio holds NaN/Inf values")
    return Audio(data, int(item.cut.sampling_rate))


def load_lhotse_cut(item: LhotseItem, sample_rate: int) -> PackedSample:
    """Load through Lhotse, resample (soxr), quantise and assemble the sample."""
    audio = read_cut_audio(item)
    if item.text is not None:
        return asr_sample(line=item.line, key=item.key, audio=audio, sample_rate=sample_rate, text=item.text,
                          language=item.language, corpus=item.corpus, speaker=item.speaker,
                          provenance=_provenance(item))
    stored = to_stored(resample(audio, sample_rate))
    return PackedSample(key=item.key, speakers=(item.speaker,), line=item.line, orig_sample_rate=audio.sample_rate,
                        num_frames=stored.length, provenance=_provenance(item), streams={STREAM_SOURCE: [stored]})


def _inputs(cuts: str | None, recordings: str | None, supervisions: str | None, shar: str | None):
    """The one input the options name: ``(path, reader)``; ``OptionError`` for none or several."""
    given = [name for name, value in (("--cuts", cuts), ("--recordings/--supervisions", recordings or supervisions),
                                      ("--shar", shar)) if value]
    if len(given) != 1:
        raise OptionError(f"give exactly one input: --cuts, --recordings with --supervisions, or --shar "
                          f"(got {', '.join(given) or 'none'})")
    if cuts:
        return cuts, functools.partial(read_cuts, cuts)
    if shar:
        return shar, functools.partial(read_shar, shar)
    if not (recordings and supervisions):
        raise OptionError("--recordings and --supervisions go together")
    return supervisions, functools.partial(read_recordings_supervisions, recordings, supervisions)


def build_lhotse(options: BuildOptions, cuts: str | None = None, recordings: str | None = None,
                 supervisions: str | None = None, shar: str | None = None, kind: str = "auto",
                 language: str | None = None, corpus: str | None = None) -> BuildSummary:
    """``speechpack build lhotse``: Lhotse manifests (cuts, recordings + supervisions, or Shar) to a pack."""
    if kind not in KINDS:
        raise OptionError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    input_path, reader = _inputs(cuts, recordings, supervisions, shar)
    read = reader()
    chosen = choose_kind(read.cuts, kind)
    corpus_default = corpus or recipe_corpus(input_path)
    items, problems = make_items(read.cuts, chosen, language, corpus_default)
    recorded = {**options.recorded(), "kind": chosen, "language": language, "corpus": corpus_default}
    files = sorted(glob.glob(os.path.join(shar, "*"))) if shar else [recordings, supervisions] if recordings else []
    if recordings:
        recorded["recordings"] = os.path.abspath(recordings)
    return run_build(
        items=items,
        problems=[*read.problems, *problems],
        plan=functools.partial(plan_lhotse_cut, sample_rate=options.sample_rate),
        load=functools.partial(load_lhotse_cut, sample_rate=options.sample_rate),
        kind=chosen,
        input_path=os.path.abspath(input_path),
        command="build lhotse",
        recorded_options=recorded,
        options=options,
        input_sha256=inputs_sha256(files) if files else None,
    )


def inputs_sha256(paths: list[str]) -> str:
    """One hash for an input of several files (a Shar directory, recordings + supervisions): SHA-256 of each
    file's name and SHA-256, one per line."""
    listing = "".join(f"{os.path.basename(path)} {hash_file(path).sha256}\n" for path in paths)
    return hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()


__all__ = ["KINDS", "LhotseItem", "build_lhotse", "choose_kind", "load_lhotse_cut", "make_items", "plan_lhotse_cut",
           "read_cut_audio", "recipe_corpus"]
