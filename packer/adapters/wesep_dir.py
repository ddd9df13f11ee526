"""``speechpack build wesep --data-dir data/train``: a WeSep recipe's split directory, packed in one command.

WeSep recipes lay out a split as ``data/<split>/samples.jsonl`` (with ``raw.list`` a link to it), optionally
``shard.list`` (tar shards), ``cues.yaml`` with ``cues/*.json`` resources, and optionally ``spk2label.json``
(referenced from ``cues.yaml``'s ``labels.speaker_label``).  ``find_split`` looks for exactly those files and says
what it found; ``build_wesep_dir`` builds from them with the raw-list or tar-shard reader:

- the list: ``samples.jsonl``, else ``raw.list``, else ``shard.list`` (the raw list first: it is the same samples,
  and cue resources are packed only from a raw list);
- ``cues.yaml`` is packed with the list (``--cues``); its relative resource paths resolve as WeSep resolves them,
  against ``--root`` (default: the current directory, the recipe's directory in WeSep);
- ``spk2label.json`` reaches the pack through ``cues.yaml`` ``labels.speaker_label``, as in WeSep; a
  ``spk2label.json`` that ``cues.yaml`` does not name is reported, not packed (WeSep would not read it either).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from speechpack.schemas.documents import DocumentError
from speechpack.schemas.errors import OptionError, SpeechpackError
from speechpack.schemas.yaml_document import read_yaml

if TYPE_CHECKING:
    from speechpack.packer.adapters.wesep_mainline_files import MainlineInputs

#: The files of a WeSep split directory, in the order the list is chosen.
LIST_NAMES = ("samples.jsonl", "raw.list", "shard.list")
CUES_NAME = "cues.yaml"
LABELS_NAME = "spk2label.json"


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
    from speechpack.packer.adapters.wesep import build_wesep
    from speechpack.packer.adapters.wesep_shards import build_wesep_shards

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
    (``packer.adapters.wesep_mainline``)."""
    from speechpack.packer.adapters.wesep import build_wesep
    from speechpack.packer.adapters import wesep_mainline as mainline
    from speechpack.packer.adapters.wesep_mainline_files import MainlineInputs, find_mainline_split, is_mainline_split

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
        return WesepDirBuild(split=found, summary=mainline.build_mainline(found, options, root=root))
    if asked or mainline.list_format(list_path) != "raw":
        return mainline.build_mainline(MainlineInputs(list_path=list_path, **given), options, root=root)
    return build_wesep(list_path, options, root=root, cues=cues, allow_pickle=allow_pickle)


__all__ = ["WesepDirBuild", "WesepSplit", "build_wesep_command", "build_wesep_dir", "find_split"]
