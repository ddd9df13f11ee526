"""Splits written the way mainline WeSep's prep writes them (github.com/wenet-e2e/wesep: the LibriMix recipes'
``local/prepare_data.sh``, ``tools/make_shard_list_premix.py``, ``tools/make_shard_online.py``), from real speech.

``librimix_split`` writes a LibriMix-like split: utterances ``<spk>-<chapter>-<n>`` cropped from real recordings
(one recording per speaker), mixtures keyed ``<utt1>_<utt2>`` in ``mix/``, ``s1/``, ``s2/``, then ``wav.scp``,
``utt2spk``, ``single.wav.scp`` (keys ``s1/<key>.wav``), ``single.utt2spk``, ``spk2enroll.json``,
``spk1.enroll``/``spk2.enroll`` (fixed enrollment ids, keys of ``single.wav.scp``), Kaldi embeddings
(``embed.ark``/``embed.scp``, keyed like ``single.wav.scp``) and tar shards listed in ``shard.list``.
``online_split`` writes single-speaker tars (``key.spk`` + ``key.wav``, keys with ``/``) as VoxCeleb's online recipe
does.  The tars are written here, member by member in mainline's order; nothing is copied from its code.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import soundfile

RATE = 16000
EMBED_DIM = 8


def _crop(path: str, start: float, seconds: float) -> np.ndarray:
    audio, rate = soundfile.read(path, dtype="float64", always_2d=True)
    first = int(start * rate)
    return audio[first:first + int(seconds * rate), 0]


def _write(path: Path, audio: np.ndarray) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), audio, RATE, subtype="FLOAT")
    return str(path)


def _tar(path: Path, members: list[tuple[str, bytes]]) -> str:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def _lines(path: Path, rows) -> None:
    path.write_text("".join(" ".join(row) + "\n" for row in rows), encoding="utf-8")


def librimix_split(out: Path, recordings: list[str], mixtures: int, utts_per_speaker: int = 3,
                   seconds: float = 1.0, per_shard: int = 2, silent_tail: float = 0.0) -> dict:
    """A LibriMix-like split in ``out`` (module docstring); returns facts the tests check against.
    ``silent_tail``: seconds of exact zeros ending every second source, which is that much shorter than the
    first (LibriMix's ``max`` mode pads the shorter source so)."""
    out.mkdir(parents=True, exist_ok=True)
    speakers = [f"{100 + i}" for i in range(len(recordings))]
    utts = {}  # utt id -> (speaker, audio)
    for spk, recording in zip(speakers, recordings):
        for n in range(utts_per_speaker):
            utts[f"{spk}-7{n}-{n:04d}"] = (spk, _crop(recording, 0.2 + 0.6 * n, seconds + silent_tail))
    tail = int(silent_tail * RATE)
    ids = list(utts)
    pairs = []
    for m in range(mixtures):
        a = ids[(m * 2) % len(ids)]
        b = next(u for u in ids[(m * 2 + 1 + m) % len(ids):] + ids if utts[u][0] != utts[a][0])
        pairs.append((a, b))
    wav_scp, utt2spk, single_scp, single_utt2spk, enroll1, enroll2 = [], [], [], [], [], []
    tar_members = []
    for a, b in pairs:
        key = f"{a}_{b}"
        s1, s2 = utts[a][1], utts[b][1]
        if tail:
            s2 = np.concatenate([s2[:len(s2) - tail], np.zeros(tail)])
        paths = [_write(out / "mix" / f"{key}.wav", (s1 + s2) / 2), _write(out / "s1" / f"{key}.wav", s1),
                 _write(out / "s2" / f"{key}.wav", s2)]
        wav_scp.append((key, *paths))
        utt2spk.append((key, utts[a][0], utts[b][0]))
        single_scp += [(f"s1/{key}.wav", paths[1]), (f"s2/{key}.wav", paths[2])]
        single_utt2spk += [(f"s1/{key}.wav", utts[a][0]), (f"s2/{key}.wav", utts[b][0])]
        members = [(f"{key}.spk1", utts[a][0].encode()), (f"{key}.spk2", utts[b][0].encode())]
        members += [(f"{key}.wav", Path(paths[0]).read_bytes()), (f"{key}_spk1.wav", Path(paths[1]).read_bytes()),
                    (f"{key}_spk2.wav", Path(paths[2]).read_bytes())]
        tar_members.append(members)
    # fixed enrollments: another mixture's source of the same speaker (a key of single.wav.scp)
    for (a, b), (key, *_) in zip(pairs, wav_scp):
        for slot, utt, rows in ((1, a, enroll1), (2, b, enroll2)):
            spk = utts[utt][0]
            other = [k for k, s in single_utt2spk if s == spk and not k.endswith(f"/{key}.wav")]
            rows.append((key, (other or [f"s{slot}/{key}.wav"])[0]))
    spk2enroll = {}
    for utt, (spk, audio) in utts.items():
        spk2enroll.setdefault(spk, []).append([utt, _write(out / "enroll" / f"{utt}.wav", audio)])
    _lines(out / "wav.scp", wav_scp)
    _lines(out / "utt2spk", utt2spk)
    _lines(out / "single.wav.scp", single_scp)
    _lines(out / "single.utt2spk", single_utt2spk)
    _lines(out / "spk1.enroll", enroll1)
    _lines(out / "spk2.enroll", enroll2)
    (out / "spk2enroll.json").write_text(json.dumps(spk2enroll), encoding="utf-8")
    embeds = {}
    rng = np.random.default_rng(7)
    for key, _ in single_scp:
        embeds[key] = rng.standard_normal(EMBED_DIM).astype(np.float32)
    import kaldiio

    kaldiio.save_ark(str(out / "embed.ark"), embeds, scp=str(out / "embed.scp"))
    shards = []
    (out / "shards").mkdir(exist_ok=True)
    for i in range(0, len(tar_members), per_shard):
        shards.append(_tar(out / "shards" / f"shards_{i // per_shard:09d}.tar",
                           [m for sample in tar_members[i:i + per_shard] for m in sample]))
    _lines(out / "shard.list", [(s,) for s in shards])
    return {"keys": [row[0] for row in wav_scp], "spk2enroll": spk2enroll, "embeds": embeds,
            "enroll": {1: dict(enroll1), 2: dict(enroll2)}, "single": dict(single_scp),
            "utt2spk": {row[0]: row[1:] for row in utt2spk}}


def online_split(out: Path, recordings: list[str], utts_per_speaker: int = 3, seconds: float = 1.2) -> dict:
    """VoxCeleb-like single-speaker tars (``id1000N/<video>/0000n.spk`` + ``.wav``) and ``spk2enroll.json``."""
    out.mkdir(parents=True, exist_ok=True)
    members, spk2enroll = [], {}
    for s, recording in enumerate(recordings):
        spk = f"id1000{s}"
        for n in range(utts_per_speaker):
            key = f"{spk}/vid{n % 2}/{n:05d}"
            path = _write(out / "wav" / f"{key}.wav", _crop(recording, 0.1 + 0.5 * n, seconds))
            members += [(f"{key}.spk", spk.encode()), (f"{key}.wav", Path(path).read_bytes())]
            spk2enroll.setdefault(spk, []).append([key, path])
    (out / "shards").mkdir(exist_ok=True)
    _lines(out / "shard.list", [(_tar(out / "shards" / "shards_000000000.tar", members),)])
    (out / "spk2enroll.json").write_text(json.dumps(spk2enroll), encoding="utf-8")
    return {"spk2enroll": spk2enroll}


def three_speaker_split(out: Path, librimix: Path, own_third_file: bool = False) -> dict:
    """A dev split of three-speaker mixtures made from ``librimix_split``'s files in ``librimix``: each mixture of
    it gains a third source (another mixture's source of a speaker it lacks), keys kept, so its ``spk1.enroll``,
    ``spk2.enroll``, ``single.wav.scp`` and ``embed.scp`` apply unchanged.  ``own_third_file`` also writes
    ``spk3.enroll`` (the third source's own single key).  Returns ``{key: (speaker 3, its single key)}``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [line.split() for line in (librimix / "wav.scp").read_text().splitlines()]
    speakers = {row[0]: row[1:] for row in (line.split() for line in (librimix / "utt2spk").read_text().splitlines())}
    wav_scp, utt2spk, enroll3, third = [], [], [], {}
    for key, mix, s1, s2 in rows:
        other = next((k, slot) for k, *_ in rows for slot in (0, 1) if speakers[k][slot] not in speakers[key])
        source = rows[[r[0] for r in rows].index(other[0])][2 + other[1]]
        wav_scp.append((key, mix, s1, s2, source))
        utt2spk.append((key, *speakers[key], speakers[other[0]][other[1]]))
        third[key] = (speakers[other[0]][other[1]], f"s{other[1] + 1}/{other[0]}.wav")
        enroll3.append((key, third[key][1]))
    _lines(out / "wav.scp", wav_scp)
    _lines(out / "utt2spk", utt2spk)
    for name in ("spk1.enroll", "spk2.enroll", "single.wav.scp", "single.utt2spk", "embed.scp"):
        (out / name).write_bytes((librimix / name).read_bytes())
    if own_third_file:
        _lines(out / "spk3.enroll", enroll3)
    return third
