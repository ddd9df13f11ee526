"""The files mainline WeSep's data preparation writes (github.com/wenet-e2e/wesep, ``examples/*/local/`` and
``tools/make_shard_*.py``), read as its loaders read them, and found in a split directory by their names.

- ``wav.scp``: ``key path [path ...]``: a mixture line is ``key mix.wav s1.wav s2.wav`` (the mixture, then one
  source per speaker, in ``utt2spk``'s order); a single-speaker line (online mixing data) is ``key path``, the
  rest of the line being the path, as ``make_shard_online.py`` reads it;
- ``utt2spk``: ``key spk1 [spk2 ...]`` (one speaker for single-speaker data);
- ``shard.list``: one tar path per line (``packer.adapters.wesep_shards`` reads the tars: the member layout is the
  same as ``make_shard_list_premix.py`` and ``make_shard_online.py`` write);
- ``spk2enroll.json``: ``{speaker: [[utt_id, path], ...]}``, the enrollment pool of training draws; its key order
  numbers the speakers for ``multi_task`` (``spk_label``);
- ``spk1.enroll``/``spk2.enroll``: ``mix_key enroll_id``: the fixed enrollment of slot 1/2 of each dev/test
  mixture, resolved through ``single.wav.scp`` (``enroll_id path``) or, for embeddings, ``embed.scp``; as in
  mainline's ``sample_fix_spk_enrollment``, every slot after the first reads ``spk2.enroll`` unless it has a file
  of its own (``spk3.enroll``, speechpack's addition);
- ``embed.scp`` (+ ``embed.ark``): Kaldi vectors of pre-extracted speaker embeddings keyed by utterance, grouped
  by speaker through ``single.utt2spk`` (``utt_id speaker``); ``packer.adapters.kaldi_vectors`` reads them
  (never a command or standard input, every read bounded).

Every reader reports each bad line (file and line number) at once, a byte that is not UTF-8 or NUL included; a speaker
listed twice in ``spk2enroll.json`` is refused with both places.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from speechpack.packer.adapters.wesep_shards import AUDIO_EXTENSIONS
from speechpack.packer.adapters.kaldi_vectors import ScpVector, read_vector_scp
from speechpack.schemas.documents import bounded_repr, read_json, read_lines
from speechpack.schemas.errors import SpeechpackError

#: The names mainline's prep gives these files inside ``data/<noise_type>/<split>/``.
SHARD_LIST = "shard.list"
WAV_SCP = "wav.scp"
UTT2SPK = "utt2spk"
SPK2ENROLL = "spk2enroll.json"
SINGLE_WAV_SCP = "single.wav.scp"
SINGLE_UTT2SPK = "single.utt2spk"
EMBED_SCP = "embed.scp"
FIXED_ENROLL = ("spk1.enroll", "spk2.enroll", "spk3.enroll")


class Table(dict):
    """A Kaldi-style table, ``key -> the other fields``, that knows where each key is: ``where(key)`` is
    ``path:line`` (messages name the user's file and line)."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self.lines: dict[str, int] = {}

    def add(self, key: str, value: list[str], line: int) -> None:
        self[key] = value
        self.lines[key] = line

    def where(self, key: str) -> str:
        return f"{self.path}:{self.lines[key]}"


def _table_lines(path: str):
    """``(line number, text, fields, problem)`` of a whitespace-separated text table, blank lines skipped; a line
    that is not UTF-8, or holds a NUL byte, comes with ``problem`` saying so (and no text)."""
    if not os.path.isfile(path):
        raise SpeechpackError(f"{path}: file not found")
    for number, text, problem in read_lines(path):
        if problem is None and "\0" in text:  # no file name or id holds one (and os calls refuse it)
            problem = f"a NUL byte at byte {text.index(chr(0)) + 1} of the line"
        if problem is not None:
            yield number, None, None, f"{path}:{number}: {problem}"
            continue
        fields = text.split()
        if fields:
            yield number, text.strip(), fields, None


def read_table(path: str, min_fields: int = 2, max_fields: int | None = None) -> Table:
    """``key -> the other fields`` of a Kaldi-style table; duplicate keys, short lines and bytes that are not UTF-8
    are errors (all of them, in one message)."""
    table = Table(path)
    problems = []
    for number, _, fields, problem in _table_lines(path):
        if problem is not None:
            problems.append(problem)
        elif len(fields) < min_fields or (max_fields is not None and len(fields) > max_fields):
            wanted = f"{min_fields}" if max_fields == min_fields else f"at least {min_fields}"
            problems.append(f"{path}:{number}: expected {wanted} fields, got {len(fields)}")
        elif fields[0] in table:
            problems.append(f"{path}:{number}: key {fields[0]!r} appears twice")
        else:
            table.add(fields[0], fields[1:], number)
    if problems:
        raise SpeechpackError("\n".join(problems))
    return table


def read_wav_scp(path: str) -> Table:
    """``wav.scp``: key -> its paths.  Several fields that each end in an audio extension are a mixture line
    (mixture, then sources); otherwise the rest of the line is one path (``make_shard_online.py`` keeps spaces).
    Kaldi's pipe form (``key sox ... |``) is refused by line: no command is run from a list."""
    table = Table(path)
    problems = []
    for number, text, fields, problem in _table_lines(path):
        if problem is not None:
            problems.append(problem)
        elif len(fields) < 2:
            problems.append(f"{path}:{number}: expected a key and at least one path")
        elif fields[0] in table:
            problems.append(f"{path}:{number}: key {fields[0]!r} appears twice")
        elif fields[1].startswith("|") or fields[-1].endswith("|"):
            problems.append(f"{path}:{number}: {bounded_repr(text.split(maxsplit=1)[1])} is a shell command "
                            f"(Kaldi's pipe form); a list file never runs one here: list the audio files' paths")
        elif len(fields) > 2 and all(os.path.splitext(p)[1].lstrip(".").lower() in AUDIO_EXTENSIONS
                                     for p in fields[1:]):
            table.add(fields[0], fields[1:], number)
        else:
            table.add(fields[0], [text.split(maxsplit=1)[1]], number)
    if problems:
        raise SpeechpackError("\n".join(problems))
    return table


class _JsonObject(dict):
    """A JSON object that remembers the keys it held more than once (``json`` keeps the last, silently):
    ``repeated`` maps each to its positions among the object's keys (0-based)."""

    def __init__(self, pairs: list[tuple[str, object]]):
        super().__init__(pairs)
        self.repeated: dict[str, list[int]] = {}
        if len(self) < len(pairs):
            positions: dict[str, list[int]] = {}
            for position, (key, _) in enumerate(pairs):
                positions.setdefault(key, []).append(position)
            self.repeated = {key: found for key, found in positions.items() if len(found) > 1}


#: A JSON string token (``"..."`` with its escapes), a key when ``:`` follows it, or a bracket.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"(\s*:)?|[][{}]')


def _top_level_key_lines(raw: bytes) -> list[int]:
    """The line of each key of the top-level object of the JSON document ``raw``, in order."""
    lines, depth, line, last = [], 0, 1, 0
    for match in _JSON_TOKEN.finditer(raw):
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
        elif token in (b"}", b"]"):
            depth -= 1
        elif depth == 1 and match.group(1) is not None:
            line += raw.count(b"\n", last, match.start())
            last = match.start()
            lines.append(line)
    return lines


#: Places of one repeated speaker a message lists before it counts the rest.
_PLACES_SHOWN = 10


def _repeated_speakers(path: str, repeated: dict[str, list[int]]) -> list[str]:
    """One problem per speaker listed more than once, naming every place (the lines, else the positions)."""
    with open(path, "rb") as fp:
        lines = _top_level_key_lines(fp.read())
    problems = []
    for speaker, positions in repeated.items():
        more = f" and {len(positions) - _PLACES_SHOWN} more" if len(positions) > _PLACES_SHOWN else ""
        if all(position < len(lines) for position in positions):
            places = "lines " + ", ".join(str(lines[p]) for p in positions[:_PLACES_SHOWN]) + more
        else:
            places = "keys " + ", ".join(str(p + 1) for p in positions[:_PLACES_SHOWN]) + more + " of the object"
        problems.append(f"{path}: speaker {speaker!r} appears {len(positions)} times ({places}); JSON keeps only "
                        f"the last: merge its enrollments into one list")
    return problems


def read_spk2enroll(path: str) -> dict[str, list[tuple[str, str]]]:
    """``spk2enroll.json``: speaker -> ``[(utt_id, path), ...]``, key order kept (it numbers ``spk_label``).  A
    speaker listed twice is refused (naming both places): mainline's ``json.load`` would keep the last."""
    if not os.path.isfile(path):
        raise SpeechpackError(f"{path}: file not found")
    obj = read_json(path, object_pairs_hook=_JsonObject)  # bounded, every decoding failure named
    if not isinstance(obj, dict):
        raise SpeechpackError(f"{path}: expected {{speaker: [[utt_id, wav_path], ...]}}, got {type(obj).__name__}")
    result, problems = {}, []
    if obj.repeated:
        problems += _repeated_speakers(path, obj.repeated)
    for speaker, entries in obj.items():
        if not isinstance(entries, list) or not entries or not all(
                isinstance(e, list) and len(e) == 2 and all(isinstance(v, str) for v in e) for e in entries):
            problems.append(f"{path}: speaker {speaker!r}: expected a non-empty list of [utt_id, wav_path] pairs")
            continue
        if any("\0" in value for entry in entries for value in entry):
            problems.append(f"{path}: speaker {speaker!r}: an utterance id or path holds a NUL byte")
            continue
        result[speaker] = [(utt, wav) for utt, wav in entries]
    if problems:
        raise SpeechpackError("\n".join(problems))
    return result


def read_embeddings(scp_path: str) -> dict[str, ScpVector]:
    """``embed.scp``: utterance -> its line and float32 vector ``[D]``, read by ``packer.adapters.kaldi_vectors``
    (bounded reads; never a command, never stdin)."""
    return read_vector_scp(scp_path)


@dataclass(frozen=True)
class MainlineInputs:
    """What ``build wesep`` reads from mainline's files (the command line's or a split directory's)."""

    list_path: str
    enroll: str | None = None  # spk2enroll.json or single.wav.scp
    fixed_enroll: tuple[str, ...] = ()
    spk_embeds: str | None = None
    utt2spk: str | None = None  # single.utt2spk for --spk-embeds
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        found = [os.path.basename(self.list_path)]
        found += [os.path.basename(p) for p in (self.enroll, *self.fixed_enroll, self.spk_embeds, self.utt2spk) if p]
        return "mainline WeSep inputs: " + ", ".join(found) + "".join(f"\n  {note}" for note in self.notes)


def _draws_on_the_fly(path: str) -> bool:
    """``prepare_librimix_enroll.py --train True`` writes ``mix *utt spk`` lines: no fixed enrollment."""
    for _, _, fields, problem in _table_lines(path):
        return problem is None and len(fields) > 1 and fields[1].startswith("*")
    return False


def is_mainline_split(data_dir: str) -> bool:
    """A split directory of mainline's prep: no contract files (``cues.yaml``, ``samples.jsonl``, ``raw.list``:
    mainline never writes a raw list of mixtures), and its own enrollment or list files."""
    names = set(os.listdir(data_dir)) if os.path.isdir(data_dir) else set()
    if names & {"cues.yaml", "samples.jsonl", "raw.list"}:
        return False
    return bool(names & {SPK2ENROLL, SINGLE_WAV_SCP, EMBED_SCP, WAV_SCP, *FIXED_ENROLL})


def find_mainline_split(data_dir: str, embeddings: bool | None = None) -> MainlineInputs:
    """Mainline's files of ``data_dir`` by their names: ``shard.list`` (else ``wav.scp`` + ``utt2spk``); fixed
    enrollments (``spk*.enroll``) with ``single.wav.scp`` when present, else ``spk2enroll.json`` for training
    draws; ``embed.scp`` (+ ``single.utt2spk`` or the fixed enrollments) instead of audio when ``embeddings``
    (default: only when the directory has no enrollment audio, neither spk2enroll.json nor single.wav.scp)."""
    def present(name: str) -> str | None:
        path = os.path.join(data_dir, name)
        return path if os.path.isfile(path) else None

    if not os.path.isdir(data_dir):
        raise SpeechpackError(f"{data_dir}: not a directory (--data-dir takes a split such as data/clean/train-100)")
    if embeddings is None:
        embeddings = bool(present(EMBED_SCP)) and not present(SPK2ENROLL) and not present(SINGLE_WAV_SCP)

    notes = []
    list_path = present(SHARD_LIST) or present(WAV_SCP)
    if list_path is None:
        raise SpeechpackError(f"{data_dir}: holds neither {SHARD_LIST} nor {WAV_SCP} (mainline WeSep's prep writes "
                              f"them: local/prepare_data.sh, tools/make_shard_list_premix.py)")
    if list_path.endswith(SHARD_LIST) and present(WAV_SCP):
        notes.append(f"{WAV_SCP}: not used ({SHARD_LIST} holds the same samples)")
    fixed = tuple(p for p in (present(n) for n in FIXED_ENROLL) if p)
    if fixed and _draws_on_the_fly(fixed[0]):
        notes.append(f"{', '.join(map(os.path.basename, fixed))}: not used (the '*utt spk' lines of a training "
                     f"split: enrollments are drawn from {SPK2ENROLL})")
        fixed = ()
    if fixed and tuple(map(os.path.basename, fixed)) != FIXED_ENROLL[:len(fixed)]:
        absent = next(n for n in FIXED_ENROLL if not present(n))
        raise SpeechpackError(f"{data_dir}: {', '.join(map(os.path.basename, fixed))} without {absent}: slot 1 "
                              f"reads spk1.enroll and every later slot its own file or else spk2.enroll, so the "
                              f"files go from spk1.enroll up without a gap")
    if embeddings:
        if not present(EMBED_SCP):
            raise SpeechpackError(f"{data_dir}: --spk-embeds asked for, but there is no {EMBED_SCP}")
        if not fixed and not present(SINGLE_UTT2SPK):
            raise SpeechpackError(f"{data_dir}: {EMBED_SCP} without {SINGLE_UTT2SPK} (speaker of each embedding) "
                                  f"or spk*.enroll (fixed enrollments)")
        return MainlineInputs(list_path=list_path, fixed_enroll=fixed, spk_embeds=present(EMBED_SCP),
                              utt2spk=None if fixed else present(SINGLE_UTT2SPK), notes=tuple(notes))
    if fixed:
        if not present(SINGLE_WAV_SCP):
            raise SpeechpackError(f"{data_dir}: {', '.join(map(os.path.basename, fixed))} without "
                                  f"{SINGLE_WAV_SCP} (where each enrollment id's audio is)")
        enroll = present(SINGLE_WAV_SCP)
        if present(SPK2ENROLL):
            notes.append(f"{SPK2ENROLL}: not used (fixed enrollments: {', '.join(map(os.path.basename, fixed))})")
    else:
        enroll = present(SPK2ENROLL)
        if enroll is None:
            notes.append(f"no {SPK2ENROLL} and no spk*.enroll: packed without enrollments")
    return MainlineInputs(list_path=list_path, enroll=enroll, fixed_enroll=fixed, notes=tuple(notes))


__all__ = ["MainlineInputs", "Table", "find_mainline_split", "is_mainline_split", "read_embeddings",
           "read_spk2enroll", "read_table", "read_wav_scp"]
