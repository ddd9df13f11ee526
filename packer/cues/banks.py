"""The cue banks of one build: ``cues.yaml`` and every resource it points to, checked before any audio is decoded
(``prepare_cues``), then decoded and written as ``cues/`` just before ``dataset.json`` (``write_cues``).

Items are read in ``--workers`` processes through the same ordered map as the audio, so ``cues/`` is
byte-identical whatever the number of workers; enrollment audio is encoded there too, with the build's
``--codec`` (``write_cues``'s ``encoding``: the build's recorded choice, so part of its fingerprint).

Writing one cue bank (``cues/<cue>/``): the lookup arrays, the items as their representation's writer stores
them, ``sources.json`` and ``meta.json``; and the speaker labels (``cues/labels/``).  The layout is specified in
``schemas/cue_banks.py``.

:data:`WRITERS` names the writer of each representation.  The six writers live in ``packer.cues.writers``
rather than in a module each: each is 20 to 100 lines, and those reading the same input share its handling (files
FFmpeg decodes; numeric arrays read with numpy; inline JSON).  A new representation's writer goes there, or in a
module of its own (docs/extending.md).
"""

from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

import numpy as np
from tqdm import tqdm

from speechpack.packer.build.encoding import PCM16, Encoding
from speechpack.packer.build.executor import map_in_order
from speechpack.packer.cues.writers import (
    DaeKeywordPhonemeWriter,
    FieldsWriter,
    MuseFrontendWriter,
    RawVideoWriter,
    SpkEmbeddingWriter,
    WaveformWriter,
)
from speechpack.packer.cues.payload import CueWriter, LoadContext
from speechpack.packer.cues.resource import (
    CueInputError,
    CueProblem,
    EntryContext,
    ItemSource,
    Resource,
    key_problem,
    read_resource,
    refuse_duplicates,
    utf8,
)
from speechpack.packer.files import commit_temp_dir, fresh_temp_dir, save_npy, write_json_atomic
from speechpack.schemas.cue_banks import (
    ENTRIES_NAME,
    ENTRY_UTT_IDS_NAME,
    INDEX_DTYPE,
    LOOKUP_COUNT_NAME,
    LOOKUP_FIRST_NAME,
    LOOKUP_KEYS_NAME,
    META_NAME,
    SOURCES_NAME,
)
from speechpack.schemas.cues import (
    CUES_DIR,
    CUES_YAML,
    LABELS_DIR,
    LABEL_SPEAKERS_NAME,
    LABEL_VALUES_NAME,
    CueSpec,
    CuesConfig,
    SpeakerSlot,
    lookup_key,
)
from speechpack.schemas.documents import read_json
from speechpack.schemas.errors import InternalError, ManifestError, SpeechpackError
from speechpack.schemas.format import FileEntry
from speechpack.schemas.wesep_list import resolve_path
from speechpack.schemas.yaml_document import parse_yaml

#: The writer of each representation (a name of ``schemas.cue_banks.REPRESENTATION_SPECS``).
WRITERS: dict[str, type[CueWriter]] = {
    "waveform": WaveformWriter,
    "spk_embedding": SpkEmbeddingWriter,
    "raw_video": RawVideoWriter,
    "muse_frontend": MuseFrontendWriter,
    "fields": FieldsWriter,
    "dae_keyword_phoneme": DaeKeywordPhonemeWriter,
}
_MAX_LABEL = np.iinfo(INDEX_DTYPE).max


def writer(representation: str) -> type[CueWriter]:
    """The writer of ``representation``, looked up when a bank is written (so a test may add one)."""
    try:
        return WRITERS[representation]
    except KeyError:
        raise InternalError(f"no writer for cue representation {representation!r} (packer/cues/banks.py WRITERS; "
                            f"docs/extending.md)") from None


@dataclass(frozen=True)
class LoadFailure:
    """An item that could not be read (returned by a worker instead of raising, so every problem is found)."""

    reason: str


def load_item(job: tuple[str, ItemSource], context: LoadContext):
    """Read one item in a worker: ``job`` is ``(representation, source)``."""
    representation, source = job
    try:
        return writer(representation).load(source, context)
    except CueInputError as err:
        return LoadFailure(str(err))


def loadable_items(resource: Resource) -> list[int]:
    """The items to read: all but those whose file is missing."""
    return [i for i in range(len(resource.items)) if i not in resource.missing_items]


def bytes_array(values: list[bytes]) -> np.ndarray:
    """UTF-8 strings as one ``|S<n>`` array (``n`` at least 1: numpy has no ``|S0``)."""
    return np.array(values, dtype=f"|S{max((len(v) for v in values), default=1) or 1}")


def write_bank(directory: str, spec: CueSpec, resource: Resource, loaded: Iterable,
               context: LoadContext, sources: Mapping[str, dict] | None = None) -> list[CueProblem]:
    """Write the bank of ``spec`` into ``directory`` from ``loaded``: the ``load_item`` results of the items
    that exist (``loadable_items``), in item order.  ``sources``: the ``sources.json`` record of items whose file
    an adapter translated from the user's (``CueBuild.sources``), by item path.

    Items go on being added after a failure, so each bad item is reported (a dimension that differs from the
    first embedding's, too); a bank with a bad or missing item is left unfinished (the build fails and removes it).
    """
    writes = writer(spec.representation)
    os.makedirs(directory)
    payload = writes(directory, context)
    problems = []
    failed = bool(resource.missing_items)  # reported when the resource was read
    loaded = iter(loaded)
    for index in loadable_items(resource):
        source, result = resource.items[index], next(loaded)
        if isinstance(result, LoadFailure):
            reason = result.reason
        else:
            try:
                payload.add(source, result)
                continue
            except CueInputError as err:
                reason = str(err)
        failed = True
        problems.append(CueProblem(spec.name, resource.item_keys[index], source.path, reason))
    if failed:
        payload.abort()
        return problems
    meta = payload.finish()
    counts = np.array(resource.counts, dtype=INDEX_DTYPE)
    arrays = {
        LOOKUP_KEYS_NAME: bytes_array([utf8(k) for k in resource.keys]),
        LOOKUP_FIRST_NAME: np.cumsum(counts, dtype=INDEX_DTYPE) - counts,  # keys' entries stored in key order
        LOOKUP_COUNT_NAME: counts,
        ENTRIES_NAME: np.array(resource.entry_items, dtype=INDEX_DTYPE),
        ENTRY_UTT_IDS_NAME: bytes_array([utf8(u) for u in resource.entry_utt_ids]),
    }
    for name, array in arrays.items():
        save_npy(os.path.join(directory, name), array)
    records = [(sources or {}).get(s.path) or writes.provenance(s) for s in resource.items]
    write_json_atomic(os.path.join(directory, SOURCES_NAME), {"items": records})
    meta.update({"type": spec.type, "format": spec.format, "keys": len(resource.keys),
                 "entries": len(resource.entry_items), "items": len(resource.items),
                 "resource": {"path": spec.resource, "sha256": resource.sha256}})
    write_json_atomic(os.path.join(directory, META_NAME), meta)
    return []


def read_labels(path: str, speakers: Iterable[tuple[str, int]]) -> tuple[dict[str, int] | None, list[CueProblem]]:
    """``labels.speaker_label``: WeSep's ``spk2label.json`` (``{"speaker": class index}``), checked against the list.
    ``speakers`` are ``(speaker, list line)`` pairs that must all have a label: WeSep looks every slot's speaker up
    and raises ``KeyError`` mid-training for an unknown one; here it is a build problem."""
    if not os.path.isfile(path):
        return None, [CueProblem(None, None, path, "speaker-label JSON not found (labels.speaker_label.resource)")]
    try:
        obj = read_json(path, error=ValueError, object_pairs_hook=refuse_duplicates)
    except (OSError, UnicodeDecodeError, ValueError, CueInputError) as err:
        return None, [CueProblem(None, None, path, f"cannot read the speaker-label JSON ({err})")]
    if not isinstance(obj, dict):
        return None, [CueProblem(None, None, path, f"expected a JSON object mapping speaker to label, got "
                                                   f"{type(obj).__name__}")]
    problems = []
    labels = {}
    for speaker, label in obj.items():
        reason = key_problem(speaker)
        if reason is None and (isinstance(label, bool) or not isinstance(label, int) or not 0 <= label <= _MAX_LABEL):
            reason = f"label must be a non-negative integer, got {label!r}"
        if reason:
            problems.append(CueProblem(None, speaker, path, reason))
        else:
            labels[speaker] = label
    reported = set()
    for speaker, line in speakers:
        if speaker not in obj and speaker not in reported:
            reported.add(speaker)
            problems.append(CueProblem(None, speaker, path, "speaker of the list has no label", line=line))
    return labels, problems


def write_labels(directory: str, labels: dict[str, int]) -> None:
    """``cues/labels/speakers.npy`` (sorted) and ``labels.npy``, row for row."""
    os.makedirs(directory)
    speakers = sorted(labels, key=utf8)
    save_npy(os.path.join(directory, LABEL_SPEAKERS_NAME), bytes_array([utf8(s) for s in speakers]))
    save_npy(os.path.join(directory, LABEL_VALUES_NAME), np.array([labels[s] for s in speakers], dtype=INDEX_DTYPE))


@dataclass(frozen=True)
class CueBuild:
    """A checked ``cues.yaml`` with its resources; ``problems`` holds what was found wrong so far."""

    yaml_path: str
    yaml_bytes: bytes
    config: CuesConfig | None  # None when no cue of cues.yaml is usable
    resources: dict[str, Resource]  # cue name -> its parsed resource (cues whose resource could be read)
    labels: dict[str, int] | None
    problems: tuple[CueProblem, ...]
    context: LoadContext
    #: ``sources.json`` records by item path, for items an adapter translated into temporary files (mainline
    #: WeSep's Kaldi embeddings): the pack names the user's source, never a file that is gone after the build.
    sources: Mapping[str, dict] = field(default_factory=dict)

    def recorded(self) -> dict:
        """Provenance options: where cues.yaml came from (its bytes are in the pack) and whether pickles were
        trusted."""
        return {"cues": os.path.abspath(self.yaml_path), "allow_pickle": self.context.allow_pickle}


def _read_config(path: str) -> tuple[bytes, CuesConfig | None, list[CueProblem]]:
    """Parse ``cues.yaml``.  A cue that breaks the contract is a problem, and the other cues are still checked; a
    file that is not a ``cues.yaml`` at all raises."""
    if not os.path.isfile(path):
        raise SpeechpackError(f"{path}: cues.yaml not found")
    with open(path, "rb") as fp:
        raw = fp.read()
    obj = parse_yaml(raw, path)
    try:
        return raw, CuesConfig.from_dict(obj, where=path), []
    except ManifestError:
        cues = obj.get("cues") if isinstance(obj, dict) else None
        if not isinstance(cues, dict):
            raise
        problems, good = [], {}
        for name, spec in cues.items():
            try:
                CueSpec.from_dict(name, spec, f"cues.{name}")
                good[name] = spec
            except ManifestError as err:
                problems.append(CueProblem(str(name), None, path, str(err)))
        if not problems:
            raise  # the error is outside the cues (labels): nothing to salvage
        return raw, CuesConfig.from_dict({**obj, "cues": good}, where=path) if good else None, problems


def _missing_keys(spec: CueSpec, resource: Resource, slots: Sequence[SpeakerSlot]) -> list[CueProblem]:
    """A guaranteed cue must have every lookup key a slot of the list needs (WeSep raises KeyError mid-epoch)."""
    missing: dict[str, SpeakerSlot] = {}
    for slot in slots:
        key = lookup_key(spec.policy_key, slot.sample_key, slot.speaker)
        if key not in resource.all_keys and key not in missing:
            missing[key] = slot
    return [CueProblem(spec.name, key, resource.path,
                       f"missing from the resource, but the cue is guaranteed and sample {slot.sample_key!r} "
                       f"(speaker {slot.speaker!r}) needs it", line=slot.line)
            for key, slot in missing.items()]


def prepare_cues(yaml_path: str, slots: Sequence[SpeakerSlot], root: str | None, sample_rate: int,
                 allow_pickle: bool) -> CueBuild:
    """Read and check ``cues.yaml``, its resources and labels, without decoding any item.

    Relative paths (resources, and the files inside them) resolve against ``root``, else the current directory:
    the rule of the list's audio paths.  Raises only when ``cues.yaml`` itself is unusable; everything else is a
    ``CueProblem`` in the result.
    """
    raw, config, problems = _read_config(yaml_path)

    def resolve(path: str) -> str:
        return os.path.normpath(resolve_path(path, root))

    resources = {}
    for spec in config.cues if config else ():
        context = EntryContext(resolve=resolve, resource_path=resolve(spec.resource))
        resource, found = read_resource(spec, writer(spec.representation).parse_entry, context)
        problems += found
        if resource is not None:
            resources[spec.name] = resource
            if spec.guaranteed:
                problems += _missing_keys(spec, resource, slots)
    labels = None
    if config is not None and config.speaker_label_resource is not None:
        labels, found = read_labels(resolve(config.speaker_label_resource),
                                    ((slot.speaker, slot.line) for slot in slots))
        problems += found
    return CueBuild(yaml_path=yaml_path, yaml_bytes=raw, config=config, resources=resources, labels=labels,
                    problems=tuple(problems), context=LoadContext(sample_rate=sample_rate, allow_pickle=allow_pickle))


def _counted(results, bar: tqdm):
    """``results``, each counted on ``bar`` when it arrives (before the consumer sees it)."""
    for result in results:
        bar.update(1)
        yield result


def write_cues(build: CueBuild, pack_dir: str, workers: int, progress: bool = False,
               desc: str = "cues", pool=None, encoding: Encoding = PCM16) -> tuple[dict[str, FileEntry],
                                                                           list[CueProblem]]:
    """Decode every item (in ``workers`` processes: the build's ``pool`` when given) and write ``PACK/cues/``
    under a temporary name, renamed into place only when nothing was wrong; enrollment audio is stored with
    ``encoding`` (the build's ``--codec``: encoded in the workers too).  Returns the manifest's file list
    (``/``-separated paths) and every problem, including ``build.problems``; with problems, the temporary
    directory is left for the caller's clean-up."""
    problems = list(build.problems)
    build = replace(build, context=replace(build.context, encoding=encoding))
    temp, final = fresh_temp_dir(pack_dir, CUES_DIR)
    with open(os.path.join(temp, CUES_YAML), "wb") as fp:
        fp.write(build.yaml_bytes)  # verbatim: comments, order and all
        fp.flush()
        os.fsync(fp.fileno())
    banks = [(spec, build.resources[spec.name]) for spec in (build.config.cues if build.config else ())
             if spec.name in build.resources]
    jobs = [(spec.representation, resource.items[i]) for spec, resource in banks for i in loadable_items(resource)]
    with tqdm(total=len(jobs), desc=desc, unit="item", disable=not progress) as bar:
        # counted as each item arrives: the banks take their items by islice, which never resumes a wrapped
        # iterator after its last item (a log file's bar would end one short)
        loaded = _counted(map_in_order(functools.partial(load_item, context=build.context), jobs, workers,
                                       pool=pool), bar)
        for spec, resource in banks:
            problems += write_bank(os.path.join(temp, spec.name), spec, resource,
                                   itertools.islice(loaded, len(loadable_items(resource))), build.context,
                                   build.sources)
    if build.labels is not None:
        write_labels(os.path.join(temp, LABELS_DIR), build.labels)
    if problems:
        return {}, problems
    return commit_temp_dir(temp, final), []


__all__ = ["WRITERS", "LoadFailure", "bytes_array", "load_item", "loadable_items", "read_labels", "write_bank",
           "write_labels", "writer"]
