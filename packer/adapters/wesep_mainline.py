"""``speechpack build wesep`` on WeSep's data as a recipe's prep leaves it: a split directory (``--data-dir``) or
mainline's list and enrollment files (``packer.adapters.wesep_mainline_files`` reads them).

``--data-dir data/train``: ``find_split`` looks for what a split holds and says what it found; ``build_wesep_dir``
builds from it with the raw-list or tar-shard reader:

- the list: ``samples.jsonl``, else ``raw.list``, else ``shard.list`` (the raw list first: it is the same samples,
  and cue resources are packed only from a raw list);
- ``cues.yaml`` is packed with the list (``--cues``); its relative resource paths resolve as WeSep resolves them,
  against ``--root`` (default: the current directory, the recipe's directory in WeSep);
- ``spk2label.json`` reaches the pack through ``cues.yaml`` ``labels.speaker_label``, as in WeSep; a
  ``spk2label.json`` that ``cues.yaml`` does not name is reported, not packed (WeSep would not read it either).

A split without ``cues.yaml`` but with mainline's files, or a ``--list`` that is not JSON lines, is mainline's
(``build_mainline``).  The samples come from ``shard.list`` (the tar reader of ``packer.adapters.wesep_shards``:
mainline's tars have the member layout it reads) or from ``wav.scp`` + ``utt2spk``.  The enrollments become the
pack's audio cue, so everything a cue guarantees holds for them too (hashes in the manifest, ``speechpack
validate``, counter-based draws of exactly one entry per slot):

===============================================  =============================================================
mainline input                                    audio cue written (``cues.yaml`` in the pack says it too)
===============================================  =============================================================
``spk2enroll.json`` (training draws)              ``wav/waveform``, ``policy: random``, ``key: spk_id``; its key
                                                  order as ``labels.speaker_label`` (``multi_task``'s index)
``spk1.enroll``... + ``single.wav.scp``           ``wav/waveform``, ``policy: fixed``, ``key: mix_spk_id``
``embed.scp`` + ``single.utt2spk``                ``npy/spk_embedding``, ``policy: random``, ``key: spk_id``
``embed.scp`` + ``spk1.enroll``...                ``npy/spk_embedding``, ``policy: fixed``, ``key: mix_spk_id``
===============================================  =============================================================

The translated ``cues.yaml`` and resources are written to a temporary directory, read by the cue build like any
split's (``packer.cues.prepare_cues``), and removed; the pack keeps ``cues.yaml`` (relative resource names) and
every bank.  A problem the cue build finds names the user's file and line (``embed.scp:14``, ``single.wav.scp:3``,
``spk2enroll.json``), never a staged file.  Enrollment paths are resolved against ``--root``, else the current
directory, as mainline's ``soundfile.read`` resolves them.

Fixed enrollments follow mainline's ``sample_fix_spk_enrollment``: slot 1 from the first file (``spk1.enroll``),
every later slot from its own file when there is one, else from the second (``spk2.enroll``; ``slot_file``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace

import numpy as np
import yaml

from speechpack.packer.adapters.wesep import (
    build_wesep,
    one_kind,
    read_wesep_list,
    single_spk_form,
    speaker_slots,
    wesep_steps,
)
from speechpack.packer.adapters.kaldi_vectors import ScpVector
from speechpack.packer.adapters.wesep_mainline_files import (
    UTT2SPK,
    MainlineInputs,
    find_mainline_split,
    is_mainline_split,
    read_embeddings,
    read_spk2enroll,
    read_table,
    read_wav_scp,
)
from speechpack.packer.adapters.wesep_shards import build_wesep_shards, read_wesep_shards
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.cues import CueProblem, prepare_cues
from speechpack.schemas.cues import MIX_SPK_SEPARATOR
from speechpack.schemas.documents import DocumentError
from speechpack.schemas.errors import BuildError, OptionError, SpeechpackError
from speechpack.schemas.wesep_list import LineProblem, WesepLine, resolve_path
from speechpack.schemas.yaml_document import read_yaml

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
#: The files of a WeSep split directory, in the order the list is chosen.
LIST_NAMES = ("samples.jsonl", "raw.list", "shard.list")
CUES_NAME = "cues.yaml"
LABELS_NAME = "spk2label.json"


def list_format(path: str) -> str:
    """``raw`` (JSON lines: the contract's raw list), ``shard`` (one tar per line) or ``scp`` (``wav.scp``), from
    the first non-blank line."""
    if not os.path.isfile(path):
        raise SpeechpackError(f"{path}: list file not found")
    with open(path, encoding="utf-8", errors="replace") as fp:
        for text in fp:
            text = text.strip()
            if not text:
                continue
            if text.startswith("{"):
                return "raw"
            if len(text.split()) == 1 or text.lower().endswith(TAR_SUFFIXES):
                return "shard"
            return "scp"
    raise SpeechpackError(f"{path}: the list is empty")


def read_scp_lines(wav_scp: str, root: str | None) -> tuple[list[WesepLine], list[LineProblem], str]:
    """``wav.scp`` with the ``utt2spk`` beside it as samples (one kind per pack, problems collected)."""
    utt2spk_path = os.path.join(os.path.dirname(wav_scp), UTT2SPK)
    if not os.path.isfile(utt2spk_path):
        raise SpeechpackError(f"{wav_scp}: no {UTT2SPK} beside it ({utt2spk_path}): mainline's prep writes the "
                              f"speakers of each key there")
    wavs, speakers = read_wav_scp(wav_scp), read_table(utt2spk_path)
    lines, problems = [], []
    for number, (key, paths) in enumerate(wavs.items(), start=1):
        spk = speakers.get(key)
        paths = [resolve_path(p, root) for p in paths]
        if spk is None:
            problems.append(LineProblem(number, key, wav_scp, f"key has no line in {utt2spk_path}"))
        elif len(paths) == 1 and len(spk) == 1:
            lines.append(WesepLine(line=number, key=key, speakers=(spk[0],), mix_paths=(), target_paths=(paths[0],),
                                   provenance={"wav.scp": wav_scp}))
        elif len(paths) == len(spk) + 1:
            lines.append(WesepLine(line=number, key=key, speakers=tuple(spk), mix_paths=(paths[0],),
                                   target_paths=tuple(paths[1:]), provenance={"wav.scp": wav_scp}))
        else:
            problems.append(LineProblem(number, key, wav_scp, f"{len(paths)} path(s) for {len(spk)} speaker(s) in "
                                                              f"{UTT2SPK}: a mixture line is the mixture then one "
                                                              f"source per speaker"))
    listed = one_kind(lines, problems, "line")
    return listed.lines, listed.problems, listed.kind


class _Staging:
    """The translated ``cues.yaml``, resources and embedding files, in a temporary directory, and where in the
    user's files each came from (``origins``): a cue problem names the user's file and line, never the temporary
    file (``named``)."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="speechpack-wesep-mainline-")
        self.embeddings = 0
        self.origins: dict[str, str] = {}
        self.sources: dict[str, dict] = {}  # the sources.json record of each staged file (CueBuild.sources)

    def _origin(self, path: str, origin: str) -> None:
        self.origins.setdefault(os.path.normpath(os.path.join(self.root, path)), origin)

    def json(self, name: str, obj, origin: str) -> str:
        with open(os.path.join(self.root, name), "w", encoding="utf-8") as fp:
            json.dump(obj, fp, ensure_ascii=False, indent=1, sort_keys=True)
        self._origin(name, origin)
        return name

    def embedding(self, vector: ScpVector, origin: str) -> str:
        """A staged ``.npy`` of ``vector``; the pack's ``sources.json`` names its Kaldi source (``ark:offset``)."""
        os.makedirs(os.path.join(self.root, "embeddings"), exist_ok=True)
        name = f"embeddings/{self.embeddings:09d}.npy"
        self.embeddings += 1
        np.save(os.path.join(self.root, name), vector.vector)
        self._origin(name, origin)
        self.sources[os.path.normpath(os.path.join(self.root, name))] = {"path": vector.source}
        return name

    def audio(self, path: str, origin: str) -> str:
        """An enrollment file of the user's, as the resource names it (absolute), and where it is listed."""
        path = os.path.abspath(path)
        self._origin(path, f"{path} ({origin})")
        return path

    def named(self, problem):
        """``problem`` naming the user's file instead of a staged one (other problems unchanged)."""
        if not isinstance(problem, CueProblem) or not problem.path:
            return problem
        origin = self.origins.get(os.path.normpath(problem.path))
        if origin is None:
            return problem
        reason = problem.reason
        if reason.startswith(_MISSING):  # the staged resource JSON: say it in the user's terms
            reason = "has no enrollment there" + reason[len(_MISSING):]
        return replace(problem, path=origin, reason=reason)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


#: How the cue build says that a guaranteed cue's resource lacks a key (``packer.cues.banks._missing_keys``).
_MISSING = "missing from the resource"


def slot_file(slot: int, count: int) -> int | None:
    """Which of ``count`` fixed-enrollment files serves ``slot`` (0-based), as mainline's
    ``sample_fix_spk_enrollment`` reads them: slot 1 from the first (``spk1.enroll``), every later slot from its
    own file when there is one, else from the second (``spk2.enroll``); None when there is no second."""
    if slot < count:
        return slot
    return 1 if count >= 2 else None


def _fixed_resource(paths: tuple[str, ...], lines: list[WesepLine], found, missing: str,
                    path_of) -> tuple[dict[str, list[dict]], list[str]]:
    """The fixed-policy resource ``{key::speaker: [{utt_id, path}]}``: the enrollment id of each slot from the
    file ``slot_file`` names, looked up in ``found`` (``path_of(id, where)`` is its path, ``where`` the
    ``spk<i>.enroll:line`` naming it), and what is missing (an id not in ``found`` is ``"{missing} {id!r} ..."``)."""
    tables = [read_table(p, 2, 2) for p in paths]
    ids, problems = {}, []
    for parsed in lines:
        files = [slot_file(slot, len(tables)) for slot in range(len(parsed.speakers))]
        if None in files:
            problems.append(f"{parsed.key}: {len(parsed.speakers)} speakers, but only {len(tables)} "
                            f"--fixed-enroll file(s) (one per slot: spk1.enroll, spk2.enroll, ...)")
            continue
        for index, speaker in zip(files, parsed.speakers):
            row = tables[index].get(parsed.key)
            if row is None:
                problems.append(f"{paths[index]}: no line for mixture {parsed.key!r}")
            else:
                ids[f"{parsed.key}{MIX_SPK_SEPARATOR}{speaker}"] = (row[0], tables[index].where(parsed.key))
    resource = {}
    for lookup, (utt, where) in ids.items():
        if utt in found:
            resource[lookup] = [{"utt_id": utt, "path": path_of(utt, where)}]
        else:
            problems.append(f"{missing} {utt!r} (fixed enrollment of {lookup})")
    return resource, problems


def stage_enrollments(inputs: MainlineInputs, lines: list[WesepLine], root: str | None,
                      staging: _Staging) -> str | None:
    """Write the audio cue of ``inputs`` (table in the module docstring) into ``staging``; return its
    ``cues.yaml`` path, or None when there are no enrollments.  Every missing id is reported at once."""
    if inputs.enroll and inputs.spk_embeds:
        raise OptionError("--enroll and --spk-embeds: a pack holds one audio cue; build the embedding pack and "
                          "the enrollment-audio pack separately (joint_training picks which one a recipe reads)")
    if inputs.utt2spk and not inputs.spk_embeds:
        raise OptionError(f"--utt2spk {inputs.utt2spk}: it names the speaker of each --spk-embeds embedding; give "
                          f"--spk-embeds embed.scp too (enrollment audio is grouped by --enroll spk2enroll.json)")
    if inputs.utt2spk and inputs.fixed_enroll:
        raise OptionError(f"--utt2spk {inputs.utt2spk} and --fixed-enroll: fixed enrollments name each mixture's "
                          f"embedding, so single.utt2spk would be read by nothing; give one of them")
    fixed = bool(inputs.fixed_enroll)
    problems: list[str] = []
    labels = None
    if inputs.spk_embeds:
        vectors = read_embeddings(inputs.spk_embeds)
        representation = {"type": "npy", "format": "spk_embedding"}
        origin = f"{inputs.spk_embeds}, {', '.join(inputs.fixed_enroll) if fixed else inputs.utt2spk}"

        def staged(utt: str, where: str | None = None) -> str:
            line = f"{inputs.spk_embeds}:{vectors[utt].line} (embedding {utt!r}"
            return staging.embedding(vectors[utt], line + (f", fixed by {where})" if where else ")"))

        if fixed:
            resource, problems = _fixed_resource(inputs.fixed_enroll, lines, vectors,
                                                 f"{inputs.spk_embeds}: no embedding", staged)
        else:
            if not inputs.utt2spk:
                raise OptionError("--spk-embeds needs --utt2spk (single.utt2spk: the speaker of each embedding) "
                                  "or --fixed-enroll (spk1.enroll, spk2.enroll)")
            utt2spk = read_table(inputs.utt2spk, 2, 2)
            resource = {}
            for utt in vectors:
                if utt not in utt2spk:
                    problems.append(f"{inputs.utt2spk}: no speaker for embedding {utt!r}")
                    continue
                resource.setdefault(utt2spk[utt][0], []).append({"utt_id": utt, "path": staged(utt)})
    elif inputs.enroll:
        representation = {"type": "wav", "format": "waveform"}
        is_json = inputs.enroll.endswith(".json")
        origin = inputs.enroll
        if fixed:
            if is_json:
                raise OptionError(f"--fixed-enroll resolves enrollment ids through single.wav.scp: give "
                                  f"--enroll single.wav.scp, not {inputs.enroll}")
            scp = read_wav_scp(inputs.enroll)  # the rest of a line is the path, spaces kept as written
            origin = ", ".join(inputs.fixed_enroll)
            resource, problems = _fixed_resource(
                inputs.fixed_enroll, lines, scp, f"{inputs.enroll}: no line for enrollment",
                lambda utt, where: staging.audio(resolve_path(" ".join(scp[utt]), root),
                                                 f"{scp.where(utt)}, fixed by {where}"))
        else:
            if not is_json:
                raise OptionError(f"--enroll {inputs.enroll}: without --fixed-enroll it takes spk2enroll.json "
                                  f"(the pool of training draws); single.wav.scp resolves --fixed-enroll ids")
            pool = read_spk2enroll(inputs.enroll)
            resource = {spk: [{"utt_id": utt, "path": staging.audio(resolve_path(path, root),
                                                                      f"{inputs.enroll}, utterance {utt!r}")}
                              for utt, path in entries] for spk, entries in pool.items()}
            labels = {spk: index for index, spk in enumerate(pool)}  # multi_task: index in key order
    else:
        if fixed:
            raise OptionError("--fixed-enroll needs --enroll single.wav.scp (enrollment audio) or --spk-embeds "
                              "embed.scp (embeddings) to resolve its ids")
        return None
    if problems:
        raise SpeechpackError(f"{len(problems)} enrollment problem(s):\n  " + "\n  ".join(problems))
    cue = {**representation, "scope": "speaker", "guaranteed": True,
           "policy": {"type": "fixed" if fixed else "random", "key": "mix_spk_id" if fixed else "spk_id",
                      "resource": staging.json("audio.json", resource, origin)}}
    document = {"cues": {"audio": cue}}
    if labels is not None:
        document["labels"] = {"speaker_label": {"resource": staging.json("spk2label.json", labels, inputs.enroll)}}
    path = os.path.join(staging.root, "cues.yaml")
    with open(path, "w", encoding="utf-8") as fp:
        fp.write("# written by speechpack build wesep from mainline WeSep's files: "
                 + ", ".join(os.path.basename(p) for p in (inputs.enroll, *inputs.fixed_enroll, inputs.spk_embeds,
                                                          inputs.utt2spk) if p) + "\n")
        yaml.safe_dump(document, fp, sort_keys=False)
    return path


def build_mainline(inputs: MainlineInputs, options: BuildOptions, root: str | None = None,
                   fmt: str | None = None) -> BuildSummary:
    """Pack mainline's list and enrollments (``inputs``): a ``tse`` pack from mixtures, a ``sources`` pack from
    single-speaker data, with the audio cue of the module docstring's table.  ``fmt``: the list's
    ``list_format``, when the caller has read it already."""
    fmt = fmt or list_format(inputs.list_path)
    if fmt == "raw":
        if not (inputs.enroll or inputs.fixed_enroll or inputs.spk_embeds):
            return build_wesep(inputs.list_path, options, root=root)
        listed = read_wesep_list(inputs.list_path, root)  # mainline's {key, wav, spk} lines take its enrollments
        if not single_spk_form(listed):
            raise OptionError(f"{inputs.list_path} is a contract raw list (JSON lines): its enrollments come from "
                              f"--cues cues.yaml, not --enroll/--fixed-enroll/--spk-embeds")
        lines, problems, kind = listed.lines, listed.problems, listed.kind
    elif fmt == "shard":
        shards = read_wesep_shards(inputs.list_path)
        lines, problems, kind = shards.lines, shards.problems, shards.kind
    else:
        lines, problems, kind = read_scp_lines(inputs.list_path, root)
    recorded = options.recorded()
    if root:
        recorded["root"] = os.path.abspath(root)
    staging = _Staging()
    try:
        yaml_path = stage_enrollments(inputs, lines, root, staging)
        cue_build = None
        if yaml_path is not None:
            cue_build = replace(prepare_cues(yaml_path, list(speaker_slots(lines)), staging.root,
                                             options.sample_rate, False), sources=staging.sources)
            recorded["mainline"] = {name: os.path.abspath(path) for name, path in (
                ("enroll", inputs.enroll), ("spk_embeds", inputs.spk_embeds), ("utt2spk", inputs.utt2spk))
                if path}
            if inputs.fixed_enroll:
                recorded["mainline"]["fixed_enroll"] = [os.path.abspath(p) for p in inputs.fixed_enroll]
        try:
            return run_build(cues=cue_build, items=lines, problems=problems, **wesep_steps(options.sample_rate),
                             kind=kind, input_path=inputs.list_path, command="build wesep",
                             recorded_options=recorded, options=options)
        except BuildError as err:  # name the user's files, not the staged ones (gone once this returns)
            raise BuildError(str(err), [staging.named(problem) for problem in err.problems]) from None
    finally:
        staging.close()



@dataclass(frozen=True)
class WesepSplit:
    """What a split directory holds: the list used (and its kind, ``raw`` or ``shard``), ``cues.yaml``,
    ``spk2label.json``, and notes on what is left out."""

    data_dir: str
    list_path: str
    list_kind: str
    cues: str | None = None
    labels: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        lines = [f"{self.data_dir}: found {os.path.basename(self.list_path)} ({self.list_kind} list)"
                 + (f", {CUES_NAME}" if self.cues else f", no {CUES_NAME} (no cues packed)")
                 + (f", {LABELS_NAME}" if self.labels else "")]
        lines.extend(f"  {note}" for note in self.notes)
        return "\n".join(lines)


@dataclass(frozen=True)
class WesepDirBuild:
    """``build_wesep_dir``'s result: what was found (a contract split, or mainline WeSep's files), and the
    build's summary."""

    split: WesepSplit | MainlineInputs
    summary: object

    def describe(self) -> str:
        return f"{self.split.describe()}\n{self.summary.describe()}"


def _labels_named(cues_path: str) -> str | None:
    """The ``labels.speaker_label.resource`` of a cues.yaml (None when absent or unreadable: the cue build reports
    a broken cues.yaml itself, naming the file)."""
    try:
        document = read_yaml(cues_path)
        return document["labels"]["speaker_label"]["resource"]
    except (OSError, DocumentError, KeyError, TypeError):
        return None


def find_split(data_dir: str) -> WesepSplit:
    """The list, cues.yaml and spk2label.json of a WeSep split directory; an error names what is missing."""
    if not os.path.isdir(data_dir):
        raise SpeechpackError(f"{data_dir}: not a directory (--data-dir takes a WeSep split such as data/train)")
    present = {name: os.path.join(data_dir, name) for name in (*LIST_NAMES, CUES_NAME, LABELS_NAME)
               if os.path.isfile(os.path.join(data_dir, name))}
    lists = [name for name in LIST_NAMES if name in present]
    if not lists:
        raise SpeechpackError(f"{data_dir}: holds none of {', '.join(LIST_NAMES)} (a WeSep split directory has "
                              f"samples.jsonl, or raw.list, or shard.list)")
    chosen = lists[0]
    notes = []
    if chosen != "shard.list" and "shard.list" in present:
        notes.append(f"shard.list: not used ({chosen} holds the same samples)")
    cues = present.get(CUES_NAME)
    if chosen == "shard.list" and cues:
        raise SpeechpackError(f"{data_dir}: cues.yaml with only shard.list; cue resources are packed from the raw "
                              f"list (samples.jsonl or raw.list): add it, or pack without cues with "
                              f"`speechpack build wesep-shards --list {present['shard.list']}`")
    labels = present.get(LABELS_NAME)
    if labels:
        named = _labels_named(cues) if cues else None
        if named is None:
            notes.append(f"{LABELS_NAME}: not packed ({CUES_NAME} names no labels.speaker_label resource, and WeSep "
                         f"reads speaker labels only from there)")
            labels = None
        else:
            notes.append(f"{LABELS_NAME}: packed through {CUES_NAME} labels.speaker_label ({named})")
    return WesepSplit(data_dir=data_dir, list_path=present[chosen], list_kind="shard" if chosen == "shard.list"
                      else "raw", cues=cues, labels=labels, notes=tuple(notes))


def build_wesep_dir(data_dir: str, options, root: str | None = None, allow_pickle: bool = False) -> WesepDirBuild:
    """Pack the split in ``data_dir`` (``find_split``) with its cues, as ``build wesep`` / ``build wesep-shards``
    would from the same files."""
    split = find_split(data_dir)
    if split.list_kind == "shard":
        summary = build_wesep_shards(split.list_path, options)
    else:
        summary = build_wesep(split.list_path, options, root=root, cues=split.cues, allow_pickle=allow_pickle)
    return WesepDirBuild(split=split, summary=summary)


def build_wesep_command(options, list_path: str | None = None, data_dir: str | None = None, root: str | None = None,
                        cues: str | None = None, allow_pickle: bool = False, enroll: str | None = None,
                        fixed_enroll: tuple[str, ...] = (), spk_embeds: str | None = None,
                        utt2spk: str | None = None):
    """``speechpack build wesep``: ``--list`` (with ``--cues``, or mainline's ``--enroll``, ``--fixed-enroll``,
    ``--spk-embeds``) or ``--data-dir``, exactly one.  A list that is not JSON lines (``shard.list``, ``wav.scp``)
    and a split directory without ``cues.yaml`` but with mainline's files are mainline WeSep's
    (``build_mainline``)."""
    if (list_path is None) == (data_dir is None):
        raise OptionError("give one of --list and --data-dir")
    fixed_enroll = tuple(fixed_enroll or ())
    given = {"enroll": enroll, "fixed_enroll": fixed_enroll, "spk_embeds": spk_embeds, "utt2spk": utt2spk}
    asked = any(given.values())
    if cues is not None and asked:
        raise OptionError("--cues (a contract cues.yaml) and mainline's --enroll/--fixed-enroll/--spk-embeds: give "
                          "one of them")
    if data_dir is not None:
        if cues is not None:
            raise OptionError("--data-dir uses the split's cues.yaml; --cues is for --list")
        if not (asked or is_mainline_split(data_dir)):
            return build_wesep_dir(data_dir, options, root=root, allow_pickle=allow_pickle)
        found = find_mainline_split(data_dir, embeddings=True if spk_embeds else None)
        if asked:  # what the command line names wins over what the directory holds
            found = MainlineInputs(list_path=found.list_path, notes=found.notes, **{
                **{k: getattr(found, k) for k in given}, **{k: v for k, v in given.items() if v}})
        return WesepDirBuild(split=found, summary=build_mainline(found, options, root=root))
    fmt = list_format(list_path)
    if asked or fmt != "raw":
        return build_mainline(MainlineInputs(list_path=list_path, **given), options, root=root, fmt=fmt)
    return build_wesep(list_path, options, root=root, cues=cues, allow_pickle=allow_pickle)


__all__ = ["WesepDirBuild", "WesepSplit", "build_mainline", "build_wesep_command", "build_wesep_dir", "find_split",
           "list_format", "read_scp_lines", "slot_file", "stage_enrollments"]
