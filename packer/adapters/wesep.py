"""``speechpack build wesep``: WeSep's data in whichever form a recipe holds it, to a ``tse`` pack (mixtures) or a
``sources`` pack (single-speaker data), in one command.

- ``--list raw.list`` (or ``samples.jsonl``): a WeSep raw list, with the split's cues (``--cues cues.yaml``;
  ``build_wesep``).  The lines are read and each sample planned and decoded by ``packer.adapters.wesep_lines``
  (WeSep's strict waveform policy, shared with tar shards and mainline's lists); here the list becomes a pack: its
  relative paths checked against where they are read from, its cue resources prepared (``packer.cues``), the build
  run.
- ``--data-dir data/train``: ``find_split`` looks for what a split holds and says what it found; ``build_wesep_dir``
  builds from it with the raw-list or tar-shard reader (``packer.adapters.wesep_shards``):

  - the list: ``samples.jsonl``, else ``raw.list``, else ``shard.list`` (the raw list first: it is the same samples,
    and cue resources are packed only from a raw list);
  - ``cues.yaml`` is packed with the list (``--cues``); its relative resource paths resolve as WeSep resolves them,
    against ``--root`` (default: the current directory, the recipe's directory in WeSep);
  - ``spk2label.json`` reaches the pack through ``cues.yaml`` ``labels.speaker_label``, as in WeSep; a
    ``spk2label.json`` that ``cues.yaml`` does not name is reported, not packed (WeSep would not read it either).

- mainline WeSep's data: a split without ``cues.yaml`` but with mainline's files, a ``--list`` that is not JSON lines
  (``shard.list``, ``wav.scp``), or mainline's ``--enroll``/``--fixed-enroll``/``--spk-embeds``: packed by
  ``packer.adapters.wesep_mainline`` (``build_mainline``), its enrollments as the pack's audio cue.

``build_wesep_command`` is the command (``packer.adapters.registry``): it checks which of these it was given and
dispatches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from speechpack.packer.adapters.wesep_lines import read_wesep_list, speaker_slots, wesep_steps
from speechpack.packer.adapters.wesep_mainline import (
    MainlineInputs,
    build_mainline,
    find_mainline_split,
    has_enrollments,
    is_mainline_split,
    list_format,
)
from speechpack.packer.adapters.wesep_shards import build_wesep_shards
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.cues import prepare_cues
from speechpack.schemas.documents import DocumentError
from speechpack.schemas.errors import OptionError, SpeechpackError
from speechpack.schemas.wesep_list import WesepLine
from speechpack.schemas.yaml_document import read_yaml

#: The files of a WeSep split directory, in the order the list is chosen.
LIST_NAMES = ("samples.jsonl", "raw.list", "shard.list")
CUES_NAME = "cues.yaml"
LABELS_NAME = "spk2label.json"


def _check_relative_paths(list_path: str, lines: list[WesepLine]) -> None:
    """Relative audio paths are read from the current directory, as WeSep reads them (its lists usually hold
    absolute paths, and a recipe run from its own directory may hold paths relative to it).  A list whose relative
    paths are missing from there but present beside the list was written relative to itself (the demo's lists
    are): say so, with the ``--root`` that reads it, before any audio is probed, rather than a "file not found" on
    every line."""
    relative = [p for parsed in lines for p in (*parsed.mix_paths, *parsed.target_paths)
                if isinstance(p, str) and not os.path.isabs(p)]
    missing = [p for p in relative if not os.path.exists(p)]
    if not missing:
        return
    beside = os.path.dirname(os.path.abspath(list_path))
    if not all(os.path.exists(os.path.join(beside, p)) for p in missing):
        return  # not a list relative to itself: each missing file is reported on its line
    shown = missing[0]
    raise SpeechpackError(
        f"{list_path}: {len(missing)} relative audio path(s) not found from the current directory "
        f"({os.getcwd()}; e.g. {shown} -> {os.path.abspath(shown)}), but found beside the list "
        f"({os.path.join(beside, shown)}): pass --root {os.path.relpath(beside)} (relative paths in a list are "
        f"read from the current directory, as WeSep reads them, or from --root)")


def build_wesep(list_path: str, options: BuildOptions, root: str | None = None, cues: str | None = None,
                allow_pickle: bool = False) -> BuildSummary:
    """``speechpack build wesep``: a WeSep raw list to a ``tse`` or ``sources`` pack.

    ``cues`` is the split's ``cues.yaml``: every resource it points to is packed into ``cues/`` (see
    ``packer.cues``), after checking that each guaranteed cue has a lookup key for every slot of the list.
    ``allow_pickle`` lets spatial resources that are pickled dicts be unpickled (only for files you trust).
    """
    if not os.path.isfile(list_path):
        raise SpeechpackError(f"{list_path}: list file not found")
    wesep_list = read_wesep_list(list_path, root)
    if not root:
        _check_relative_paths(list_path, wesep_list.lines)
    recorded = options.recorded()
    if root:
        recorded["root"] = os.path.abspath(root)
    cue_build = None
    if cues is not None:
        cue_build = prepare_cues(cues, list(speaker_slots(wesep_list.lines)), root, options.sample_rate, allow_pickle)
        recorded.update(cue_build.recorded())
    return run_build(
        cues=cue_build,
        items=wesep_list.lines,
        problems=wesep_list.problems,
        **wesep_steps(options.sample_rate),
        kind=wesep_list.kind,
        input_path=list_path,
        command="build wesep",
        recorded_options=recorded,
        options=options,
    )


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
        return WesepDirBuild(split=found, summary=_build_mainline_inputs(found, options, root,
                                                                         list_format(found.list_path)))
    fmt = list_format(list_path)
    if asked or fmt != "raw":
        return _build_mainline_inputs(MainlineInputs(list_path=list_path, **given), options, root, fmt)
    return build_wesep(list_path, options, root=root, cues=cues, allow_pickle=allow_pickle)


def _build_mainline_inputs(inputs: MainlineInputs, options: BuildOptions, root: str | None, fmt: str) -> BuildSummary:
    """Mainline's inputs packed by ``build_mainline``; a raw list that names no enrollment file is a plain raw list
    (``build_wesep``, without cues)."""
    if fmt == "raw" and not has_enrollments(inputs):
        return build_wesep(inputs.list_path, options, root=root)
    return build_mainline(inputs, options, root=root, fmt=fmt)


__all__ = ["CUES_NAME", "LABELS_NAME", "LIST_NAMES", "WesepDirBuild", "WesepSplit", "build_wesep", "build_wesep_command",
           "build_wesep_dir", "find_split"]
