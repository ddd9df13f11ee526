"""``speechpack build wesep`` on mainline WeSep's data as its prep leaves it
(``packer.adapters.wesep_mainline_files``).

The samples come from ``shard.list`` (the tar reader of ``packer.adapters.wesep_shards``: mainline's tars have the
member layout it reads) or from ``wav.scp`` + ``utt2spk``.  The enrollments become the pack's audio cue, so
everything a cue guarantees holds for them too (hashes in the manifest, ``speechpack validate``, counter-based
draws of exactly one entry per slot):

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
every bank.  Enrollment paths are resolved against ``--root``, else the current directory, as mainline's
``soundfile.read`` resolves them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np
import yaml

from speechpack.packer.adapters.wesep import build_wesep, one_kind, speaker_slots, wesep_steps
from speechpack.packer.adapters.wesep_mainline_files import (
    UTT2SPK,
    MainlineInputs,
    read_embeddings,
    read_spk2enroll,
    read_table,
    read_wav_scp,
)
from speechpack.packer.adapters.wesep_shards import read_wesep_shards
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.cues import prepare_cues
from speechpack.schemas.cues import MIX_SPK_SEPARATOR
from speechpack.schemas.errors import OptionError, SpeechpackError
from speechpack.schemas.wesep_list import LineProblem, WesepLine, resolve_path

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
    """The translated ``cues.yaml``, resources and embedding files, in a temporary directory."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="speechpack-wesep-mainline-")
        self.embeddings = 0

    def json(self, name: str, obj) -> str:
        with open(os.path.join(self.root, name), "w", encoding="utf-8") as fp:
            json.dump(obj, fp, ensure_ascii=False, indent=1, sort_keys=True)
        return name

    def embedding(self, vector: np.ndarray) -> str:
        os.makedirs(os.path.join(self.root, "embeddings"), exist_ok=True)
        name = f"embeddings/{self.embeddings:09d}.npy"
        self.embeddings += 1
        np.save(os.path.join(self.root, name), vector)
        return name

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _fixed_ids(paths: tuple[str, ...], lines: list[WesepLine]) -> tuple[dict[str, str], list[str]]:
    """``{key::speaker: enroll_id}`` from ``spk<i>.enroll`` (file ``i`` serves slot ``i``), and what is missing."""
    tables = [read_table(p, 2, 2) for p in paths]
    ids, problems = {}, []
    for parsed in lines:
        if len(parsed.speakers) > len(tables):
            problems.append(f"{parsed.key}: {len(parsed.speakers)} speakers, but only {len(tables)} "
                            f"--fixed-enroll file(s) (one per slot: spk1.enroll, spk2.enroll, ...)")
            continue
        for slot, speaker in enumerate(parsed.speakers):
            row = tables[slot].get(parsed.key)
            if row is None:
                problems.append(f"{paths[slot]}: no line for mixture {parsed.key!r}")
            else:
                ids[f"{parsed.key}{MIX_SPK_SEPARATOR}{speaker}"] = row[0]
    return ids, problems


def stage_enrollments(inputs: MainlineInputs, lines: list[WesepLine], root: str | None,
                      staging: _Staging) -> str | None:
    """Write the audio cue of ``inputs`` (table in the module docstring) into ``staging``; return its
    ``cues.yaml`` path, or None when there are no enrollments.  Every missing id is reported at once."""
    if inputs.enroll and inputs.spk_embeds:
        raise OptionError("--enroll and --spk-embeds: a pack holds one audio cue; build the embedding pack and "
                          "the enrollment-audio pack separately (joint_training picks which one a recipe reads)")
    fixed = bool(inputs.fixed_enroll)
    problems: list[str] = []
    labels = None
    if inputs.spk_embeds:
        vectors = read_embeddings(inputs.spk_embeds)
        representation = {"type": "npy", "format": "spk_embedding"}
        if fixed:
            ids, problems = _fixed_ids(inputs.fixed_enroll, lines)
            resource = {}
            for lookup, utt in ids.items():
                if utt not in vectors:
                    problems.append(f"{inputs.spk_embeds}: no embedding {utt!r} (fixed enrollment of {lookup})")
                else:
                    resource[lookup] = [{"utt_id": utt, "path": staging.embedding(vectors[utt])}]
        else:
            if not inputs.utt2spk:
                raise OptionError("--spk-embeds needs --utt2spk (single.utt2spk: the speaker of each embedding) "
                                  "or --fixed-enroll (spk1.enroll, spk2.enroll)")
            utt2spk = read_table(inputs.utt2spk, 2, 2)
            resource = {}
            for utt, vector in vectors.items():
                if utt not in utt2spk:
                    problems.append(f"{inputs.utt2spk}: no speaker for embedding {utt!r}")
                    continue
                resource.setdefault(utt2spk[utt][0], []).append({"utt_id": utt, "path": staging.embedding(vector)})
    elif inputs.enroll:
        representation = {"type": "wav", "format": "waveform"}
        is_json = inputs.enroll.endswith(".json")
        if fixed:
            if is_json:
                raise OptionError(f"--fixed-enroll resolves enrollment ids through single.wav.scp: give "
                                  f"--enroll single.wav.scp, not {inputs.enroll}")
            scp = read_wav_scp(inputs.enroll)  # the rest of a line is the path, spaces kept as written
            ids, problems = _fixed_ids(inputs.fixed_enroll, lines)
            resource = {}
            for lookup, utt in ids.items():
                if utt not in scp:
                    problems.append(f"{inputs.enroll}: no line for enrollment {utt!r} (fixed enrollment of {lookup})")
                else:
                    path = os.path.abspath(resolve_path(" ".join(scp[utt]), root))
                    resource[lookup] = [{"utt_id": utt, "path": path}]
        else:
            if not is_json:
                raise OptionError(f"--enroll {inputs.enroll}: without --fixed-enroll it takes spk2enroll.json "
                                  f"(the pool of training draws); single.wav.scp resolves --fixed-enroll ids")
            pool = read_spk2enroll(inputs.enroll)
            resource = {spk: [{"utt_id": utt, "path": os.path.abspath(resolve_path(path, root))}
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
                      "resource": staging.json("audio.json", resource)}}
    document = {"cues": {"audio": cue}}
    if labels is not None:
        document["labels"] = {"speaker_label": {"resource": staging.json("spk2label.json", labels)}}
    path = os.path.join(staging.root, "cues.yaml")
    with open(path, "w", encoding="utf-8") as fp:
        fp.write("# written by speechpack build wesep from mainline WeSep's files: "
                 + ", ".join(os.path.basename(p) for p in (inputs.enroll, *inputs.fixed_enroll, inputs.spk_embeds,
                                                          inputs.utt2spk) if p) + "\n")
        yaml.safe_dump(document, fp, sort_keys=False)
    return path


def build_mainline(inputs: MainlineInputs, options: BuildOptions, root: str | None = None) -> BuildSummary:
    """Pack mainline's list and enrollments (``inputs``): a ``tse`` pack from mixtures, a ``sources`` pack from
    single-speaker data, with the audio cue of the module docstring's table."""
    fmt = list_format(inputs.list_path)
    if fmt == "raw":
        if inputs.enroll or inputs.fixed_enroll or inputs.spk_embeds:
            raise OptionError(f"{inputs.list_path} is a contract raw list (JSON lines): its enrollments come from "
                              f"--cues cues.yaml, not --enroll/--fixed-enroll/--spk-embeds")
        return build_wesep(inputs.list_path, options, root=root)
    if fmt == "shard":
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
            cue_build = prepare_cues(yaml_path, list(speaker_slots(lines)), staging.root, options.sample_rate, False)
            recorded["mainline"] = {name: os.path.abspath(path) for name, path in (
                ("enroll", inputs.enroll), ("spk_embeds", inputs.spk_embeds), ("utt2spk", inputs.utt2spk))
                if path}
            if inputs.fixed_enroll:
                recorded["mainline"]["fixed_enroll"] = [os.path.abspath(p) for p in inputs.fixed_enroll]
        return run_build(cues=cue_build, items=lines, problems=problems, **wesep_steps(options.sample_rate),
                         kind=kind, input_path=inputs.list_path, command="build wesep", recorded_options=recorded,
                         options=options)
    finally:
        staging.close()


__all__ = ["build_mainline", "list_format", "read_scp_lines", "stage_enrollments"]
