"""A real tse split with every cue kind for the cue build tests: two mixtures of real speech, waveform enrollments
(one at 48 kHz), the real talking-face movie and an H.264 mp4 made here, spatial fields and textual cues, and speaker
labels (``CUES_YAML``).  The builder behind the ``tse_split`` fixture (tests/conftest.py) lives here, and
``build_split_pack``, that split built into a pack with every cue.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from factories.wesep_lists import Mix
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

def make_mp4(path: Path, frames: int = 12, width: int = 64, height: int = 48, fps: int = 25) -> str:
    """An H.264 (libx264, bundled with PyAV's FFmpeg) video of moving gradients."""
    import av

    y, x = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            image = np.stack([(x * 4 + i * 9) % 256, (y * 5) % 256, np.full_like(x, 40 + i * 10)], axis=-1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image.astype(np.uint8), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def write_json(path: Path, obj) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj), encoding="utf-8")
    return str(path)


def build_with_cues(case, out: Path, cues: Path, **options):
    root = options.pop("root", None)
    allow_pickle = options.pop("allow_pickle", False)
    options.setdefault("progress", False)
    return build_wesep(str(case.list_path), BuildOptions(out=str(out), **options), root=root, cues=str(cues),
                       allow_pickle=allow_pickle)


def build_split_pack(tse_split, out: Path, **options):
    """The pack of the ``tse_split`` fixture's split (:func:`make_tse_split`) with every cue, built at ``out`` with
    ``options``: the build's summary."""
    case, cues_path, root, _facts = tse_split
    return build_with_cues(case, out, cues_path, root=str(root), **options)


CUES_YAML = """\
# cues of the test split: kept verbatim in the pack, comments included
cues:
  audio:   {type: wav, format: waveform, scope: speaker, guaranteed: true,
            policy: {type: random, key: spk_id, resource: cues/audio.json}}
  visual:
    policy: {type: fixed, key: mix_spk_id, resource: cues/visual.json}   # mp4/raw_video by default
  spatial: {type: npy, format: fields, fields: [azimuth, elevation], field_defaults: {elevation: 0.0},
            policy: {type: fixed, key: mix_spk_id, resource: cues/spatial.json}}
  textual: {type: json, format: dae_keyword_phoneme, selection: {type: fixed},
            policy: {type: fixed, key: mix_spk_id, resource: cues/textual.json}}
labels:
  speaker_label: {resource: spk2label.json}
"""


def make_tse_split(tmp_path, wesep_list, real_audio, real_video):
    """Two real mixtures (speakers A, B and B, C) with every cue of ``CUES_YAML``; resource paths relative to
    ``root`` (the split directory).  Returns ``(case, cues_yaml_path, root, facts)``."""
    a, b, c, d = real_audio("pocketsphinx", 4)
    alsa = real_audio("alsa", 1)[0]  # 48 kHz: resampled to the pack's rate
    case = wesep_list([Mix("m1", (a, b)), Mix("m2", (b, c))])
    speaker_a, speaker_b = case.lines[0].speakers
    speaker_c = case.lines[1].speakers[1]
    root = tmp_path / "split"
    synthetic = make_mp4(tmp_path / "synthetic.mp4")
    audio = {speaker_a: [{"utt_id": "a-full", "path": a}, {"utt_id": "alsa", "path": alsa}],
             speaker_b: [{"utt_id": "b-full", "path": b}],
             speaker_c: [{"utt_id": "c-full", "path": c}, {"utt_id": "alsa-again", "path": alsa}],
             "spk-unused": [{"path": d}]}  # keys no sample needs are packed too
    visual = {f"m1::{speaker_a}": [{"utt_id": "movie", "path": real_video}],
              f"m1::{speaker_b}": [{"utt_id": "synthetic", "path": synthetic}],
              f"m2::{speaker_b}": [{"utt_id": "movie", "path": real_video}],
              f"m2::{speaker_c}": [{"utt_id": "synthetic", "path": synthetic}]}
    np.savez(tmp_path / "front.npz", azimuth=np.float32(0.25), elevation=np.float64(-0.5))
    np.savez(tmp_path / "moving.npz", azimuth=np.linspace(0, 1, 7), distance=np.float32(2.0))
    spatial = {f"m1::{speaker_a}": {"path": str(tmp_path / "front.npz"), "duration_sec": 1.5},
               f"m1::{speaker_b}": {"path": str(tmp_path / "moving.npz")},
               f"m2::{speaker_b}": {"path": str(tmp_path / "front.npz"), "duration_sec": 1.5},
               f"m2::{speaker_c}": {"path": str(tmp_path / "front.npz")}}
    text = {"words": ["marianne", "dashwood", "sense"], "phn_label": [[5, 9, 2], [7], [3, 3, 8, 1]],
            "kw_candidate": [2, 0], "normalized_text": "marianne dashwood sense"}
    textual = {f"m1::{speaker_a}": text, f"m1::{speaker_b}": {**text, "kw_candidate": [1]},
               f"m2::{speaker_b}": text, f"m2::{speaker_c}": {"words": [], "phn_label": [], "kw_candidate": []}}
    for name, obj in (("audio", audio), ("visual", visual), ("spatial", spatial), ("textual", textual)):
        write_json(root / "cues" / f"{name}.json", obj)
    labels = {speaker_a: 0, speaker_b: 1, speaker_c: 2, "spk-unused": 3}
    write_json(root / "spk2label.json", labels)
    cues_path = root / "cues.yaml"
    cues_path.write_text(CUES_YAML, encoding="utf-8")
    facts = {"speakers": (speaker_a, speaker_b, speaker_c), "audio": audio, "visual": visual, "spatial": spatial,
             "textual": textual, "labels": labels, "alsa": alsa, "synthetic": synthetic, "movie": real_video}
    return case, cues_path, root, facts


def assert_same_cue_item(one, two, where: str = "item") -> None:
    """Two reads of a cue item (``CueBank.read``: arrays, tuples and lists of them, dicts of fields, floats) equal,
    values and dtypes."""
    if isinstance(one, np.ndarray):
        assert isinstance(two, np.ndarray) and one.dtype == two.dtype, where
        np.testing.assert_array_equal(one, two, err_msg=where)
    elif isinstance(one, (tuple, list)):
        assert type(one) is type(two) and len(one) == len(two), where
        for n, (a, b) in enumerate(zip(one, two)):
            assert_same_cue_item(a, b, f"{where}[{n}]")
    elif isinstance(one, dict):
        assert one.keys() == two.keys(), where
        for key in one:
            assert_same_cue_item(one[key], two[key], f"{where}[{key!r}]")
    else:
        assert one == two or (one != one and two != two), where  # NaN durations read as NaN


def assert_same_cues(local_pack, other_pack) -> None:
    """Two opened packs hold the same cue banks (every item read from each) and speaker labels."""
    assert local_pack.cues_config == other_pack.cues_config
    assert local_pack.cues.keys() == other_pack.cues.keys()
    for name, bank in local_pack.cues.items():
        other = other_pack.cues[name]
        assert bank.num_items == other.num_items and bank.num_items > 0
        for key in bank.keys:
            assert list(bank.find(key.decode())) == list(other.find(key.decode()))
        for item in range(bank.num_items):
            assert_same_cue_item(bank.read(item), other.read(item), f"{name} item {item}")
    assert (local_pack.speaker_labels is None) == (other_pack.speaker_labels is None)
    if local_pack.speaker_labels is not None:
        assert dict(local_pack.speaker_labels) == dict(other_pack.speaker_labels)
