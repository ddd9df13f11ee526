"""Mainline WeSep's data as its prep leaves it (github.com/wenet-e2e/wesep, ``examples/*/local/`` and
``tools/make_shard_*.py``), and how it is packed: the list and enrollment files of a split directory (``--data-dir``,
found by their names) or of the command line (``--list``, ``--enroll``, ``--fixed-enroll``, ``--spk-embeds``), read
as mainline's loaders read them; ``packer.adapters.wesep`` (the ``wesep`` command) sends them here.

The files:

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
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace

import numpy as np
import yaml

from speechpack.packer.adapters.kaldi_vectors import ScpVector, read_vector_scp
from speechpack.packer.adapters.wesep_lines import one_kind, read_wesep_list, single_spk_form, speaker_slots, wesep_steps
from speechpack.packer.adapters.wesep_shards import AUDIO_EXTENSIONS, read_wesep_shards
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.cues import CueProblem, prepare_cues
from speechpack.schemas.cues import MIX_SPK_SEPARATOR
from speechpack.schemas.documents import bounded_repr, read_json, read_lines
from speechpack.schemas.errors import BuildError, OptionError, SpeechpackError
from speechpack.schemas.line_problems import LineProblem
from speechpack.schemas.wesep_list import WesepLine, resolve_path

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


TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")


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


def has_enrollments(inputs: MainlineInputs) -> bool:
    """Whether ``inputs`` names an enrollment or embedding file (what makes a raw list mainline's input)."""
    return bool(inputs.enroll or inputs.fixed_enroll or inputs.spk_embeds)


def build_mainline(inputs: MainlineInputs, options: BuildOptions, root: str | None = None,
                   fmt: str | None = None) -> BuildSummary:
    """Pack mainline's list and enrollments (``inputs``): a ``tse`` pack from mixtures, a ``sources`` pack from
    single-speaker data, with the audio cue of the module docstring's table.  ``fmt``: the list's
    ``list_format``, when the caller has read it already.  A raw list without enrollments is not mainline's input
    (``has_enrollments``): ``packer.adapters.wesep.build_wesep`` packs it."""
    fmt = fmt or list_format(inputs.list_path)
    if fmt == "raw":
        if not has_enrollments(inputs):
            raise OptionError(f"{inputs.list_path} is a raw list (JSON lines) without mainline's enrollments: "
                              f"build_wesep packs it (the wesep command sends it there)")
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


__all__ = ["MainlineInputs", "Table", "build_mainline", "find_mainline_split", "has_enrollments", "is_mainline_split",
           "list_format", "read_embeddings", "read_scp_lines", "read_spk2enroll", "read_table", "read_wav_scp",
           "slot_file", "stage_enrollments"]
