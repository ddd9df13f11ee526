"""Writing one cue bank (``cues/<cue>/``): the lookup arrays, the items as their representation's writer stores
them, ``sources.json`` and ``meta.json``; and the speaker labels (``cues/labels/``).  The layout is specified in
``schemas/cue_banks.py``.

:data:`WRITERS` names the writer of each representation.  The six writers are grouped by what they read rather
than given a module each: each is 20 to 100 lines, and those of a group share their input handling (``media``: files
FFmpeg decodes; ``arrays``: numeric arrays read with numpy; ``phonemes``: inline JSON).  A new representation's
writer goes in the module of its input, or in a module of its own (docs/extending.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from speechpack.packer.cues.arrays import FieldsWriter, MuseFrontendWriter, SpkEmbeddingWriter
from speechpack.packer.cues.media import RawVideoWriter, WaveformWriter
from speechpack.packer.cues.payload import CueWriter, LoadContext
from speechpack.packer.cues.phonemes import DaeKeywordPhonemeWriter
from speechpack.packer.cues.resource import (
    CueInputError,
    CueProblem,
    ItemSource,
    Resource,
    key_problem,
    refuse_duplicates,
    utf8,
)
from speechpack.packer.files import save_npy, write_json_atomic
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
from speechpack.schemas.cues import LABEL_SPEAKERS_NAME, LABEL_VALUES_NAME, CueSpec
from speechpack.schemas.documents import parse_json
from speechpack.schemas.errors import InternalError

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
        raise InternalError(f"no writer for cue representation {representation!r} (packer/cues/bank.py WRITERS; "
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
               context: LoadContext) -> list[CueProblem]:
    """Write the bank of ``spec`` into ``directory`` from ``loaded``: the ``load_item`` results of the items
    that exist (``loadable_items``), in item order.

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
    write_json_atomic(os.path.join(directory, SOURCES_NAME), {"items": [writes.provenance(s) for s in resource.items]})
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
        with open(path, "rb") as fp:
            obj = parse_json(fp.read(), path, error=ValueError, object_pairs_hook=refuse_duplicates)
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


__all__ = ["WRITERS", "LoadFailure", "bytes_array", "load_item", "loadable_items", "read_labels", "write_bank",
           "write_labels", "writer"]
