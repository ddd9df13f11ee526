"""Regenerate the golden packs under ``tests/data/golden/``: one tiny pack per pack kind and per format minor
version that the current writer produces, built from a small generated input.

Run it ONLY when a new format minor version (or a new kind) is added, to add that version's golden packs:
``python tests/data/make_golden.py`` from the repository root, then commit the new pack directories.  Never run
it to "fix" a failing ``tests/project/test_golden_packs.py``: those packs stand for packs already written by released
code, which the reader must keep opening and the builder must keep reproducing byte for byte.  A failure there
means a change broke old packs or changed the bytes a build writes.

The input is generated, not recorded, so it is tiny and needs no data: 16-bit WAV at the pack rate (no
resampling), whose int16 samples are a pure function of the file's index (``samples``); for the cue bank, small
JSON, ``.npy`` and ``.npz`` resources; for the asd pack, 112x112 face crops whose pixels are a pure function of the
track and frame (``faces``).  Integer or exactly representable values only, so the bytes are the same everywhere.

Each golden pack is written once and kept: a second run adds only missing ones.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

import numpy as np
import soundfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from speechpack.packer.adapters.asd_common import AsdBuildOptions  # noqa: E402
from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl  # noqa: E402
from speechpack.packer.adapters.audio_bank import build_audio_bank  # noqa: E402
from speechpack.packer.adapters.avcc import build_avcc  # noqa: E402
from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402
from speechpack.schemas.constants import ASD_SAMPLE_RATE, DEFAULT_SAMPLE_RATE, FACE_SHAPE, KIND_TSE  # noqa: E402

GOLDEN = os.path.join(REPO, "tests", "data", "golden")
SPEAKERS = ("spk-a", "spk-b", "spk-c")
#: The golden packs by name: name -> pack kind.  One per kind, plus ``tse_cues`` (a tse pack with a cue bank of
#: every representation that needs no video, and speaker labels: format 1.1) and ``tse_digests`` (a pcm16 tse pack
#: built with ``--digests``: format 1.5 since its columns have deflated copies, 1.4 before, whose golden pack stays
#: for the reader; a flac or opus pack's bytes are libFLAC's and libopus's, which change with their versions, so no
#: golden pack holds them).  Each records the lowest minor version that describes it (``schemas.format``), so the
#: packs cover every minor from 1.0 to 1.5; its directory is ``<name>-1.<minor>``.
PACKS = {"tse": KIND_TSE, "tse_cues": KIND_TSE, "tse_digests": KIND_TSE, "sources": "sources", "noise": "noise",
         "rir": "rir", "asr": "asr", "asd": "asd"}
#: Samples per generated file: 20 ms, so each pack is a few KB (mostly its manifest and column headers).
FRAMES = 320


def samples(index: int, frames: int = FRAMES) -> np.ndarray:
    """The int16 content of generated file ``index``: a triangle wave whose period and level depend on the index.

    Integer arithmetic only, so the input (and so the pack) is the same bytes on every platform.
    """
    period = 80 + 20 * index
    level = 4000 + 1000 * index
    phase = (np.arange(frames, dtype=np.int64) * 4 * level // period) % (4 * level)
    return (np.abs(phase - 2 * level) - level).astype(np.int16)


def write_inputs(root: str) -> None:
    """Write every golden input under ``root``: the WAV files, the two WeSep lists and the ASR manifest."""
    os.makedirs(os.path.join(root, "wav"))
    names = []
    for index in range(len(SPEAKERS)):
        name = os.path.join("wav", f"u{index}.wav")
        soundfile.write(os.path.join(root, name), samples(index), DEFAULT_SAMPLE_RATE, subtype="PCM_16")
        names.append(name)
    mix = os.path.join("wav", "mix.wav")
    soundfile.write(os.path.join(root, mix), (samples(0) // 2 + samples(1) // 2), DEFAULT_SAMPLE_RATE,
                    subtype="PCM_16")
    _lines(os.path.join(root, "tse.list"),
           [{"key": "mix1", "spk": list(SPEAKERS[:2]), "mix": {"default": [mix]},
             "src": {SPEAKERS[0]: [names[0]], SPEAKERS[1]: [names[1]]}}])
    _lines(os.path.join(root, "sources.list"),
           [{"key": f"utt{i}", "spk": [spk], "src": {spk: [names[i]]}} for i, spk in enumerate(SPEAKERS)])
    _lines(os.path.join(root, "asr.jsonl"),
           [{"key": f"utt{i}", "audio_filepath": names[i], "speaker": spk, "text": f"golden {spk} ünïcode {i}",
             "language": "en", "corpus": "golden"} for i, spk in enumerate(SPEAKERS)])
    write_cue_inputs(root)
    write_asd_inputs(root)


#: The cue bank of the ``tse_cues`` pack (WeSep's cues.yaml layout, resources relative to the input root).
CUES_YAML = """\
cues:
  audio:   {type: wav, format: waveform, policy: {type: random, key: spk_id, resource: cues/audio.json}}
  visual:  {type: npy, format: muse_frontend, policy: {type: fixed, key: mix_spk_id, resource: cues/visual.json}}
  spatial: {type: npy, format: fields, fields: [azimuth, elevation],
            policy: {type: fixed, key: mix_spk_id, resource: cues/spatial.json}}
  textual: {type: json, format: dae_keyword_phoneme, policy: {type: fixed, key: mix_spk_id,
                                                              resource: cues/textual.json}}
labels:
  speaker_label: {resource: cues/spk2label.json}
"""


def write_cue_inputs(root: str) -> None:
    """The resources of ``CUES_YAML`` for the tse list's two slots: enrollments (spk-a has two), muse features,
    spatial fields (one static, one moving azimuth), keyword phonemes, and speaker labels."""
    cues = os.path.join(root, "cues")
    os.makedirs(cues)
    slots = [f"mix1::{spk}" for spk in SPEAKERS[:2]]
    _json(os.path.join(cues, "audio.json"), {SPEAKERS[0]: [{"utt_id": "a2", "path": "wav/u2.wav"},
                                                           {"utt_id": "a0", "path": "wav/u0.wav"}],
                                             SPEAKERS[1]: [{"path": "wav/u1.wav"}]})
    visual = {}
    for n, slot in enumerate(slots):
        np.save(os.path.join(cues, f"muse{n}.npy"), np.arange(6 * (n + 2), dtype=np.float32).reshape(6, n + 2) / 4)
        visual[slot] = [{"path": f"cues/muse{n}.npy", "duration_sec": 0.02 * (n + 1)}]
    _json(os.path.join(cues, "visual.json"), visual)
    np.savez(os.path.join(cues, "front.npz"), azimuth=np.float32(0.25), elevation=np.float32(-0.5))
    np.savez(os.path.join(cues, "moving.npz"), azimuth=np.arange(5, dtype=np.float32) / 8, elevation=np.float32(0))
    _json(os.path.join(cues, "spatial.json"), {slots[0]: {"path": "cues/front.npz"},
                                               slots[1]: {"path": "cues/moving.npz", "duration_sec": 0.02}})
    _json(os.path.join(cues, "textual.json"),
          {slots[0]: {"words": ["sense", "and"], "phn_label": [[5, 9, 2], [7]], "kw_candidate": [1]},
           slots[1]: {"words": ["sensibility"], "phn_label": [[3, 3, 8, 1]], "kw_candidate": [0]}})
    _json(os.path.join(cues, "spk2label.json"), {spk: i for i, spk in enumerate(SPEAKERS)})
    with open(os.path.join(root, "cues.yaml"), "w", encoding="utf-8") as fp:
        fp.write(CUES_YAML)


#: The asd pack's tracks: (sample id, first native frame, frames) of one conversation at 25 fps.
ASD_TRACKS = (("conv1_spk1", 0, 2), ("conv1_spk2", 1, 1))
ASD_FPS = 25
#: Samples of the asd conversation WAV (0.2 s at 16 kHz; the tracks cut their audio from it).
ASD_CONVERSATION = ASD_SAMPLE_RATE // 5


def faces(track: int, frames: int) -> np.ndarray:
    """uint8 ``[frames, 112, 112]`` crops of ``track``: pixel values a pure function of track, frame and position."""
    size = FACE_SHAPE[0] * FACE_SHAPE[1]
    values = (np.arange(frames * size, dtype=np.int64) * (track + 3) + 17 * track) % 251
    return values.astype(np.uint8).reshape(frames, *FACE_SHAPE)


def write_asd_inputs(root: str) -> None:
    """An AVCC corpus (``asd.tsv``): one 16 kHz conversation WAV and each track's faces as ``.npy``."""
    asd = os.path.join(root, "asd")
    os.makedirs(asd)
    soundfile.write(os.path.join(asd, "conv1.wav"), samples(0, frames=ASD_CONVERSATION), ASD_SAMPLE_RATE,
                    subtype="PCM_16")
    rows = ["sample_id\tvisual_path\taudio_path\tsource_fps\tlabels\tstart_sec"]
    for track, (key, first, frames) in enumerate(ASD_TRACKS):
        np.save(os.path.join(asd, f"{key}.npy"), faces(track, frames))
        labels = json.dumps([(track + f) % 2 for f in range(frames)])
        rows.append(f"{key}\t{key}.npy\tconv1.wav\t{ASD_FPS}\t{labels}\t{first / ASD_FPS}")
    with open(os.path.join(asd, "asd.tsv"), "w", encoding="utf-8") as fp:
        fp.write("\n".join(rows) + "\n")


def _json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as fp:
        json.dump(obj, fp)


def _lines(path: str, lines: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fp:
        for line in lines:
            fp.write(json.dumps(line, ensure_ascii=False) + "\n")


def build(name: str, root: str, out: str) -> None:
    """Build the golden pack ``name`` (a key of ``PACKS``) from the inputs in ``root`` into ``out`` (one worker, no
    progress).

    The build runs in ``root`` with relative input paths, so that what a pack records of its input's location is
    the same wherever the input was written.
    """
    out = os.path.abspath(out)
    options = BuildOptions(out=out, workers=1, progress=False)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        if name in ("tse", "sources"):
            build_wesep(f"{name}.list", options, root=".")
        elif name == "tse_cues":
            build_wesep("tse.list", options, root=".", cues="cues.yaml")
        elif name == "tse_digests":
            build_wesep("tse.list", BuildOptions(out=out, workers=1, progress=False, digests=True), root=".")
        elif name in ("noise", "rir"):
            build_audio_bank("wav", name, options)
        elif name == "asr":
            build_asr_jsonl("asr.jsonl", options)  # audio paths relative to the manifest
        elif name == "asd":
            build_avcc(os.path.join("asd", "asd.tsv"), "asd", AsdBuildOptions(out=out, workers=1, progress=False))
        else:
            raise ValueError(f"no golden input for {name!r}")
    finally:
        os.chdir(cwd)


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        write_inputs(root)
        for name in PACKS:
            tmp = os.path.join(root, "packs", name)
            build(name, root, tmp)
            with open(os.path.join(tmp, "dataset.json"), encoding="utf-8") as fp:
                minor = json.load(fp)["format_minor"]
            final = os.path.join(GOLDEN, f"{name}-1.{minor}")
            if os.path.exists(final):
                print(f"{final}: exists, kept (golden packs are never rebuilt)")
                continue
            shutil.copytree(tmp, final)
            print(f"wrote {final}")


if __name__ == "__main__":
    main()
