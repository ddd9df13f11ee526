"""The cues of one build: ``cues.yaml`` and every resource it points to, checked before any audio is decoded
(``prepare_cues``), then decoded and written as ``cues/`` just before ``dataset.json`` (``write_cues``).

Items are read in ``--workers`` processes through the same ordered map as the audio, so ``cues/`` is
byte-identical whatever the number of workers.
"""

from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass
from typing import Sequence

from tqdm import tqdm

from speechpack.packer.cues.bank import load_item, loadable_items, read_labels, write_bank, write_labels, writer
from speechpack.packer.cues.payload import LoadContext
from speechpack.packer.cues.resource import CueProblem, EntryContext, Resource, read_resource
from speechpack.packer.build.executor import map_in_order
from speechpack.packer.files import fresh_temp_dir, fsync_dir, hash_file
from speechpack.schemas.cues import CUES_DIR, CUES_YAML, LABELS_DIR, CuesConfig, CueSpec, SpeakerSlot, lookup_key
from speechpack.schemas.errors import ManifestError, SpeechpackError
from speechpack.schemas.format import FileEntry
from speechpack.schemas.wesep_list import resolve_path
from speechpack.schemas.yaml_document import parse_yaml


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
               desc: str = "cues", pool=None) -> tuple[dict[str, FileEntry], list[CueProblem]]:
    """Decode every item (in ``workers`` processes: the build's ``pool`` when given) and write ``PACK/cues/``
    under a temporary name, renamed into place only when nothing was wrong.  Returns the manifest's file list
    (``/``-separated paths) and every problem, including ``build.problems``; with problems, the temporary
    directory is left for the caller's clean-up."""
    problems = list(build.problems)
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
                                   itertools.islice(loaded, len(loadable_items(resource))), build.context)
    if build.labels is not None:
        write_labels(os.path.join(temp, LABELS_DIR), build.labels)
    if problems:
        return {}, problems
    files = {}
    for directory, subdirs, names in os.walk(temp):
        subdirs.sort()
        for name in sorted(names):
            path = os.path.join(directory, name)
            files[os.path.relpath(path, temp).replace(os.sep, "/")] = hash_file(path)
        fsync_dir(directory)
    os.replace(temp, final)
    fsync_dir(pack_dir)
    return dict(sorted(files.items())), []
