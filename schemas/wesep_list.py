"""WeSep raw list lines (``raw.list`` / ``samples.jsonl``): the input contract of ``speechpack build wesep``.

A mixture line::

    {"key": "mixA", "spk": ["s1", "s2"], "mix": {"default": ["/m.wav"]},
     "src": {"s1": ["/a.wav"], "s2": ["/b.wav"]}}

``spk`` orders the target slots; ``mix.default`` files are concatenated along channels; each target is the
first channel of the first file of ``src[spk]``.  A single-speaker line has no ``mix``, exactly one speaker and
exactly one source file (WeSep's online-mixing input).  Other keys are kept as provenance, never interpreted.

Mainline WeSep's single-speaker line (``parse_raw_single_spk``: the raw form of ``make_shard_online.py``'s tars,
one utterance and its speaker id) is read too, as the single-speaker line it means::

    {"key": "utt1", "wav": "/a.wav", "spk": "s1"}

``wav`` is one path and ``spk`` one speaker id, both non-empty strings (mainline loads ``wav`` as it is and
compares ``spk`` as a string); a line with ``wav`` has no ``src`` or ``mix``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from speechpack.schemas.constants import KIND_SOURCES, KIND_TSE
from speechpack.schemas.documents import parse_json_line
from speechpack.schemas.names import check_name


#: Keys of a list line that the packer interprets; any other key is kept verbatim under ``provenance.extra``.
_INTERPRETED_KEYS = frozenset({"key", "spk", "mix", "src"})
#: The keys of mainline WeSep's single-speaker line (``{key, wav, spk}``), all required.
SINGLE_SPK_KEYS = ("key", "wav", "spk")


@dataclass(frozen=True)
class WesepLine:
    """A parsed line: the kind it implies, the files to read, and what to keep as provenance."""

    line: int
    key: str
    speakers: tuple[str, ...]
    mix_paths: tuple[str, ...]  # empty for a single-speaker line
    target_paths: tuple[str, ...]  # first file of src[spk] for each speaker, in slot order
    provenance: dict

    @property
    def kind(self) -> str:
        return KIND_TSE if self.mix_paths else KIND_SOURCES


def _string_list(value, what: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{what} must be a non-empty list of non-empty strings, got {value!r}")
    return value


def _check_path(path: str, what: str) -> None:
    """A file name holds no NUL byte: no system call can open one (the line is refused, not the build)."""
    if "\0" in path:
        raise ValueError(f"{what}: the file name {path!r} holds a NUL byte")


def parse_wesep_line(text: str, line: int) -> WesepLine:
    """Parse one list line; raise ``ValueError`` with the reason (the caller adds file and line).  Keys and
    speakers must be names a pack can store (``schemas.names``)."""
    obj = parse_json_line(text)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    key = obj.get("key")
    if not isinstance(key, str) or not key:
        raise ValueError(f"key 'key' must be a non-empty string, got {key!r}")
    check_name(key, "key")
    if "wav" in obj:
        return _single_spk_line(obj, key, line)
    if "spk" not in obj:
        raise ValueError("missing key 'spk'")
    speakers = _string_list(obj["spk"], "key 'spk'")
    for speaker in speakers:
        check_name(speaker, "speaker")
    if len(set(speakers)) != len(speakers):
        raise ValueError(f"key 'spk' lists a speaker twice: {speakers!r}")
    src = obj.get("src")
    if not isinstance(src, dict):
        raise ValueError(f"key 'src' must be an object mapping speaker to files, got {src!r}")
    for spk in speakers:
        if spk not in src:
            raise ValueError(f"speaker {spk!r} in 'spk' has no entry in 'src'")
        for path in _string_list(src[spk], f"key 'src.{spk}'"):
            _check_path(path, f"key 'src.{spk}'")
    mix_paths: list[str] = []
    if "mix" in obj:
        mix = obj["mix"]
        if not isinstance(mix, dict) or "default" not in mix:
            raise ValueError(f"key 'mix' must be an object with a 'default' list, got {mix!r}")
        mix_paths = _string_list(mix["default"], "key 'mix.default'")
        for path in mix_paths:
            _check_path(path, "key 'mix.default'")
    else:
        if len(speakers) != 1:
            raise ValueError(f"a line without 'mix' is a single-speaker source and needs exactly one speaker, "
                             f"got {len(speakers)}")
        if len(src[speakers[0]]) != 1:
            raise ValueError(f"a single-speaker source needs exactly one file in 'src.{speakers[0]}', "
                             f"got {len(src[speakers[0]])}")
    provenance = {"src": {spk: list(src[spk]) for spk in speakers}}
    if mix_paths:
        provenance["mix"] = list(mix_paths)
    extra = {name: value for name, value in obj.items() if name not in _INTERPRETED_KEYS}
    if extra:
        provenance["extra"] = extra
    return WesepLine(
        line=line,
        key=key,
        speakers=tuple(speakers),
        mix_paths=tuple(mix_paths),
        target_paths=tuple(src[spk][0] for spk in speakers),
        provenance=provenance,
    )


def _single_spk_line(obj: dict, key: str, line: int) -> WesepLine:
    """Mainline's ``{key, wav, spk}`` line (module docstring) as the single-speaker line it means."""
    mixed = [name for name in ("src", "mix") if name in obj]
    if mixed:
        raise ValueError(f"a line with 'wav' is mainline's single-speaker line ({', '.join(SINGLE_SPK_KEYS)}) and "
                         f"has no {' or '.join(repr(m) for m in mixed)}")
    for name in ("wav", "spk"):
        if name not in obj:
            raise ValueError(f"missing key {name!r} (a single-speaker line holds {', '.join(SINGLE_SPK_KEYS)})")
        value = obj[name]
        if not isinstance(value, str) or not value:
            raise ValueError(f"key {name!r} of a single-speaker line ({', '.join(SINGLE_SPK_KEYS)}) must be a "
                             f"non-empty string, got {value!r}")
    speaker, wav = obj["spk"], obj["wav"]
    check_name(speaker, "speaker")
    _check_path(wav, "key 'wav'")
    provenance = {"wav": wav}
    extra = {name: value for name, value in obj.items() if name not in SINGLE_SPK_KEYS}
    if extra:
        provenance["extra"] = extra
    return WesepLine(line=line, key=key, speakers=(speaker,), mix_paths=(), target_paths=(wav,),
                     provenance=provenance)


def best_effort_key(text: str) -> str | None:
    """The ``key`` of a line that failed to parse, when one can still be read (for error messages)."""
    try:
        obj = parse_json_line(text)
    except ValueError:
        return None
    key = obj.get("key") if isinstance(obj, dict) else None
    return key if isinstance(key, str) else None


def resolve_path(path: str, root: str | None) -> str:
    """A path as the build opens it: absolute as written; relative against ``root`` when given, else left to the
    current directory.  The one rule for list audio, cue resources and the files they point to."""
    return path if not root or os.path.isabs(path) else os.path.join(root, path)
