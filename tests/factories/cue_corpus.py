"""A cue corpus for the cue loader tests: four two-speaker mixtures of real speech (each speaker in two of them) and a
resource of every cue kind (enrollments by speaker and by slot, embeddings, static and temporal spatial fields,
phonemes, synthetic MPEG-4 faces, muse features, speaker labels).  The builder behind the ``corpus`` fixture
(tests/conftest.py) lives here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from factories.wesep_lists import Mix
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

#: Frame rate and size (pixels, square) of the synthetic face videos.
VIDEO_FPS = 25
VIDEO_SIZE = 16
#: Values per second of the temporal spatial field, and frames per second of the muse features.
TRACK_RATE = 50
MUSE_RATE = 25


def write_mp4(path: Path, frames: np.ndarray, fps: int = VIDEO_FPS) -> None:
    """A small synthetic MPEG-4 video (uint8 RGB frames ``[T, H, W, 3]``), written with PyAV."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def decode_mp4(path: Path) -> np.ndarray:
    """The frames as PyAV decodes them (what the build stores), ``[T, H, W, 3]``."""
    import av

    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(container.streams.video[0])])


@dataclass
class CueCorpus:
    """Four two-speaker mixtures of real speech (each speaker in two of them) and a resource of every kind.

    ``source[(key, spk)]`` is the slot's source as packed (float64); ``seconds[key]`` the mixture's length.
    """

    root: Path
    case: object
    slots: list[tuple[str, str]]
    source: dict[tuple[str, str], np.ndarray]
    seconds: dict[str, float]
    resources: dict[str, str] = field(default_factory=dict)
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)
    videos: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    muse: dict[tuple[str, str], tuple[np.ndarray, float]] = field(default_factory=dict)
    tracks: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    phonemes: dict[tuple[str, str], list[list[int]]] = field(default_factory=dict)
    labels: dict[str, int] = field(default_factory=dict)

    @property
    def speakers(self) -> list[str]:
        return sorted({spk for _, spk in self.slots})

    def occurrences(self, spk: str) -> list[tuple[str, str]]:
        """The slots of a speaker, in list order."""
        return [slot for slot in self.slots if slot[1] == spk]

    def other(self, slot: tuple[str, str]) -> tuple[str, str]:
        """The speaker's other slot (its other utterance)."""
        return next(s for s in self.occurrences(slot[1]) if s != slot)

    def build(self, name: str, cues: dict, labels: bool = False, **options) -> str:
        """A pack of the list with ``cues`` (a ``cues.yaml`` ``cues`` mapping, resources by name); ``options``:
        more ``BuildOptions`` (``codec="flac"``)."""
        document = {"cues": cues}
        if labels:
            document["labels"] = {"speaker_label": {"resource": self.resources["labels"]}}
        path = self.root / f"{name}.cues.yaml"
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        out = self.root / name
        build_wesep(str(self.case.list_path), BuildOptions(out=str(out), progress=False, **options), cues=str(path))
        return str(out)


def dump_resource(root: Path, name: str, obj) -> str:
    path = root / f"{name}.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    return str(path)


def make_cue_corpus(tmp_path, wesep_list, real_audio) -> CueCorpus:
    r = real_audio("pocketsphinx", 4)
    mixes = [Mix("m1", (r[0], r[1]), seconds=1.0, start=0.25), Mix("m2", (r[1], r[2]), seconds=1.5, start=1.0),
             Mix("m3", (r[2], r[3]), seconds=1.25, start=0.5), Mix("m4", (r[3], r[0]), seconds=2.0, start=1.0)]
    case = wesep_list(mixes)
    slots, source = [], {}
    for line in case.lines:
        for i, spk in enumerate(line.speakers):
            slots.append((line.key, spk))
            source[(line.key, spk)] = line.targets[i]
    src_path = {(line.key, spk): line.record["src"][spk][0] for line in case.lines for spk in line.speakers}
    res = tmp_path / "resources"
    res.mkdir()
    c = CueCorpus(root=tmp_path, case=case, slots=slots, source=source,
                  seconds={m.key: m.seconds for m in mixes})

    def entry(slot):
        return {"utt_id": f"{slot[0]}/{slot[1]}", "path": src_path[slot]}

    c.resources["by_speaker"] = dump_resource(res, "by_speaker", {spk: [entry(s) for s in c.occurrences(spk)]
                                                          for spk in c.speakers})
    c.resources["by_slot"] = dump_resource(res, "by_slot", {f"{k}::{s}": [entry(c.other((k, s))), entry((k, s))]
                                                    for k, s in slots})
    rng = np.random.default_rng(7)
    emb = {}
    for spk in c.speakers:
        c.embeddings[spk] = rng.standard_normal(192).astype(np.float32)
        path = res / f"{spk}.npy"
        np.save(path, c.embeddings[spk][None, :])  # [1, 192]: squeezed to [192]
        emb[spk] = [{"path": str(path)}]
    c.resources["embedding"] = dump_resource(res, "embedding", emb)
    static, track, text, video, muse = {}, {}, {}, {}, {}
    for n, (key, spk) in enumerate(slots):
        lookup, seconds = f"{key}::{spk}", c.seconds[key]
        path = res / f"static-{n}.npz"
        np.savez(path, azimuth=np.float32(0.1 * n), elevation=np.float32(-0.05 * n))
        static[lookup] = {"path": str(path)}
        values = round(seconds * TRACK_RATE)
        c.tracks[(key, spk)] = np.arange(values, dtype=np.float32) + 100 * n
        path = res / f"track-{n}.npz"
        np.savez(path, azimuth=c.tracks[(key, spk)], elevation=np.float32(n))
        track[lookup] = {"path": str(path), "duration_sec": seconds}
        # five words; ids >= 1 so that 0 is only ever padding; word lengths differ per slot
        c.phonemes[(key, spk)] = [[1000 * (n + 1) + 10 * w + j for j in range(1 + (w + n) % 3)] for w in range(5)]
        text[lookup] = {"normalized_text": "a b c d e", "words": list("abcde"), "phn_label": c.phonemes[(key, spk)],
                        "kw_candidate": [2, 0]}
        frames = round(seconds * VIDEO_FPS) + (5 if n % 2 else -3)  # longer or shorter than the audio
        pattern = (np.arange(frames) * 4 % 256).astype(np.uint8)[:, None, None, None]
        path = res / f"face-{n}.mp4"
        write_mp4(path, np.broadcast_to(pattern, (frames, VIDEO_SIZE, VIDEO_SIZE, 3)).copy())
        c.videos[(key, spk)] = decode_mp4(path)
        video[lookup] = [{"utt_id": lookup, "path": str(path)}]
        duration = seconds * (1.25 if n % 2 else 0.8)  # features for a longer or shorter video than the audio
        features = (np.arange(4)[:, None] * 0.5 + np.arange(round(duration * MUSE_RATE))[None, :] + 1000 * n)
        path = res / f"muse-{n}.npy"
        np.save(path, features.astype(np.float32))
        c.muse[(key, spk)] = (features.astype(np.float32), duration)
        muse[lookup] = [{"utt_id": lookup, "path": str(path), "duration_sec": duration}]
    c.resources.update(static=dump_resource(res, "static", static), track=dump_resource(res, "track", track),
                       textual=dump_resource(res, "textual", text), video=dump_resource(res, "video", video),
                       muse=dump_resource(res, "muse", muse))
    c.labels = {spk: i for i, spk in enumerate(c.speakers)}
    c.resources["labels"] = dump_resource(res, "spk2label", c.labels)
    return c


def cue(resource: str, policy: str = "fixed", key: str = "mix_spk_id", **extra) -> dict:
    return {"policy": {"type": policy, "key": key, "resource": resource}, **extra}
