"""A cue's resource JSON, read into the lookup structure of a bank: sorted keys, their entries, deduplicated items;
and what a cue problem says.

The resource is checked without opening the files it points to (their existence aside), so a build reports a
broken resource before decoding anything.  Every problem is collected, each naming the cue, the key and the file
(and the list line, when one needs it).  Cue problems are reported together with the list's bad lines in one
``BuildError``; unlike bad lines they are never skipped (``--skip-bad`` is about list lines), because a cue bank
with a hole would fail later, in training.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Callable

from speechpack.packer.audio.decode import path_problem
from speechpack.schemas.cues import CueSpec
from speechpack.schemas.documents import parse_json


@dataclass(frozen=True)
class CueProblem:
    """One thing wrong with the cues: the cue, the lookup key, the file, and why (and the list line)."""

    cue: str | None  # None: cues.yaml itself, or the speaker labels
    key: str | None  # the lookup key (or speaker) concerned
    path: str | None  # the file at fault: cues.yaml, a resource JSON, or a file a resource points to
    reason: str
    line: int | None = None  # a list line that needs the key

    def __str__(self) -> str:
        parts = [f"cue {self.cue!r}" if self.cue is not None else "cues"]
        if self.key is not None:
            parts.append(f"key {self.key!r}")
        if self.path is not None:
            parts.append(f"file {self.path}")
        if self.line is not None:
            parts.append(f"list line {self.line}")
        return f"{', '.join(parts)}: {self.reason}"

    def to_dict(self) -> dict:
        return {"cue": self.cue, "key": self.key, "path": self.path, "reason": self.reason, "line": self.line}


class CueInputError(Exception):
    """A resource entry or the file it points to cannot be used; the message is the reason (the caller adds cue,
    key and path)."""


@dataclass(frozen=True)
class ItemSource:
    """What one bank item is read from.  Equal sources are one item: a file used by many keys is stored once."""

    path: str  # the resolved file (for an inline item: the resource JSON it came from)
    duration_sec: float | None = None  # part of the identity where the entry carries it (muse_frontend, fields)
    content: str | None = None  # canonical JSON of an inline item (dae_keyword_phoneme): it has no file of its own


@dataclass(frozen=True)
class EntryContext:
    """What a writer's ``parse_entry`` needs besides the entry: how to resolve paths, and where it is."""

    resolve: Callable[[str], str]
    resource_path: str


@dataclass(frozen=True)
class Resource:
    """A parsed resource, in bank order.  Key ``keys[k]`` owns ``counts[k]`` consecutive entries; entry ``e``
    points to item ``entry_items[e]``.  Items are numbered in the order the sorted keys first reach them."""

    path: str
    sha256: str
    keys: tuple[str, ...]
    counts: tuple[int, ...]
    entry_items: tuple[int, ...]
    entry_utt_ids: tuple[str, ...]
    items: tuple[ItemSource, ...]
    item_keys: tuple[str, ...]  # for each item, the first key that reaches it (named in error messages)
    all_keys: frozenset[str]  # every key of the JSON, also those whose entries were refused
    missing_items: frozenset[int]  # items whose file does not exist (reported already; never loaded)


def utf8(key: str) -> bytes:
    return key.encode("utf-8")


def entry_path(entry: dict, context: EntryContext) -> str:
    """The entry's ``path``, resolved (``--root`` or the current directory) and normalised, so that two spellings
    of one file are one item."""
    path = entry.get("path")
    if not isinstance(path, str) or not path:
        raise CueInputError(f"'path' must be a non-empty string, got {path!r}")
    return os.path.normpath(context.resolve(path))


def entry_utt_id(entry: dict) -> str:
    utt_id = entry.get("utt_id", "")
    if not isinstance(utt_id, str) or "\0" in utt_id:
        raise CueInputError(f"'utt_id' must be a string, got {utt_id!r}")
    return utt_id


def entry_duration(entry: dict, required: bool) -> float | None:
    duration = entry.get("duration_sec")
    if duration is None and not required:
        return None
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 0 < duration < float("inf"):
        raise CueInputError(f"'duration_sec' must be a positive number of seconds, got {duration!r}")
    return float(duration)


def refuse_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """``json`` keeps the last of repeated keys silently; a resource that repeats a lookup key is ambiguous."""
    result: dict = {}
    for key, value in pairs:
        if key in result:
            raise CueInputError(f"key {key!r} appears twice in one object")
        result[key] = value
    return result


def key_problem(key: object) -> str | None:
    try:
        encoded = utf8(key)
    except UnicodeEncodeError:
        return "lookup key is not valid UTF-8"
    return "lookup key holds a NUL character" if b"\0" in encoded else None


def read_resource(spec: CueSpec, parse_entry: Callable[[dict, EntryContext], tuple[ItemSource, str]],
                  context: EntryContext) -> tuple[Resource | None, list[CueProblem]]:
    """Read ``context.resource_path`` for ``spec`` with its writer's ``parse_entry``.

    List-valued resources map a key to a non-empty list of entries, dict-valued ones (the row's ``dict_valued``) to
    one entry.  Items whose file is missing are reported (an inline item has none).  Returns the resource (None when
    the file cannot be read at all) and every problem found.
    """
    path = context.resource_path
    problems: list[CueProblem] = []

    def problem(key: str | None, where: str, reason: str) -> None:
        problems.append(CueProblem(spec.name, key, where, reason))

    if not os.path.isfile(path):
        problem(None, path, f"resource JSON not found (policy.resource {spec.resource!r})")
        return None, problems
    try:
        with open(path, "rb") as fp:
            raw = fp.read()
        obj = parse_json(raw, path, error=ValueError, object_pairs_hook=refuse_duplicates)
    except (OSError, UnicodeDecodeError, ValueError, CueInputError) as err:
        problem(None, path, f"cannot read the resource JSON ({err})")
        return None, problems
    if not isinstance(obj, dict):
        problem(None, path, f"expected a JSON object mapping lookup keys to entries, got {type(obj).__name__}")
        return None, problems
    dict_valued = spec.representation_spec.dict_valued
    keys, counts, entry_items, utt_ids = [], [], [], []
    items: dict[ItemSource, int] = {}
    item_keys: list[str] = []
    usable = []
    for key in obj:
        reason = key_problem(key)
        if reason:
            problem(key, path, reason)
        else:
            usable.append(key)
    for key in sorted(usable, key=utf8):
        value = obj[key]
        if dict_valued and not isinstance(value, dict):
            problem(key, path, f"expected an object (a {spec.representation} resource maps a key to one dict), "
                               f"got {type(value).__name__}")
            continue
        if not dict_valued and not (isinstance(value, list) and value):
            problem(key, path, f"expected a non-empty list of entries, got {value!r:.80}")
            continue
        parsed = []
        for position, entry in enumerate([value] if dict_valued else value):
            try:
                if not isinstance(entry, dict):
                    raise CueInputError(f"expected an object, got {type(entry).__name__}")
                parsed.append(parse_entry(entry, context))
            except CueInputError as err:
                problem(key, path, f"{'' if dict_valued else f'entry {position}: '}{err}")
        if len(parsed) != (1 if dict_valued else len(value)):
            continue
        keys.append(key)
        counts.append(len(parsed))
        for source, utt_id in parsed:
            if source not in items:
                items[source] = len(items)
                item_keys.append(key)
            entry_items.append(items[source])
            utt_ids.append(utt_id)
    sources = tuple(items)  # in item order
    unreadable = {index: path_problem(source.path) for index, source in enumerate(sources) if source.content is None}
    missing = frozenset(index for index, reason in unreadable.items() if reason is not None)
    for index in sorted(missing):
        problem(item_keys[index], sources[index].path, unreadable[index])
    resource = Resource(path=path, sha256=hashlib.sha256(raw).hexdigest(), keys=tuple(keys), counts=tuple(counts),
                        entry_items=tuple(entry_items), entry_utt_ids=tuple(utt_ids), items=sources,
                        item_keys=tuple(item_keys), all_keys=frozenset(obj), missing_items=missing)
    return resource, problems
