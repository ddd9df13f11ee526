"""Format 1.3: ``asd`` and ``asr`` packs (data streams, per-sample attributes, the asr manifest keys) written by
``PackWriter``, checked by ``speechpack validate`` and read back by ``open_pack``.

The adapters that make such packs from real corpora are tested in test_asd_build.py and test_asr_*.py; here the
samples are generated so every byte is known."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from speechpack.loader.pack import DataSegmentTable, open_pack
from speechpack.packer.audio import StoredAudio
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.packer.validate.pack import validate_pack
from speechpack.packer.build.writer import PackWriter
from speechpack.schemas.constants import FACE_SHAPE, KIND_ASD, KIND_ASR, MANIFEST_NAME, UNKNOWN_SPEAKER
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import MINOR_TRACKS, Manifest

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

RATE = 16000


def _asd_sample(rng, key: str, clip: str, frames: int, fps: float) -> PackedSample:
    audio = rng.integers(-3000, 3000, size=(1, round(frames / fps * RATE)), dtype=np.int16)
    faces = rng.integers(0, 256, size=(frames, *FACE_SHAPE), dtype=np.uint8)
    labels = (rng.random(frames) < 0.5).astype(np.uint8)
    return PackedSample(key=key, speakers=(key,), line=1, orig_sample_rate=RATE, num_frames=audio.shape[1],
                        provenance={"clip": clip}, attrs={"source_fps": fps, "start_sec": 1.5, "clip": clip},
                        streams={"audio": [StoredAudio(audio, 1.0)],
                                 "faces": [StoredArray(faces)], "labels": [StoredArray(labels)]})


def _asr_sample(rng, key: str, text: str, corpus: str, language: str, seconds: float) -> PackedSample:
    audio = rng.integers(-3000, 3000, size=(1, int(seconds * RATE)), dtype=np.int16)
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()
    return PackedSample(key=key, speakers=(UNKNOWN_SPEAKER,), line=1, orig_sample_rate=RATE,
                        num_frames=audio.shape[1], provenance={}, attrs={"corpus": corpus, "language": language},
                        streams={"audio": [StoredAudio(audio, 1.0)], "text": [StoredArray(data)]})


def _plan(sample: PackedSample) -> SamplePlan:
    return SamplePlan(line=sample.line, key=sample.key, num_frames=sample.num_frames, elements=sample.elements)


def _write(path, kind: str, samples: list[PackedSample], per_shard: int = 2) -> Manifest:
    plans = [_plan(s) for s in samples]
    shards = [plans[i:i + per_shard] for i in range(0, len(plans), per_shard)]
    os.makedirs(path, exist_ok=True)
    with PackWriter(str(path), kind, RATE, shards) as writer:
        for sample in samples:
            writer.add(sample)
        return writer.finish({"input": {"path": "generated", "sha256": "0" * 64}, "tool": "speechpack",
                              "tool_version": "test", "command": "test", "options": {}}, [])


def test_asd_pack_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    samples = [_asd_sample(rng, "clipA:1", "clipA", 30, 30.0), _asd_sample(rng, "clipA:2", "clipA", 31, 29.97),
               _asd_sample(rng, "clipB:1", "clipB", 7, 23.976)]
    manifest = _write(tmp_path / "asd", KIND_ASD, samples)
    assert manifest.format_minor == MINOR_TRACKS
    assert [(s.name, s.dtype, s.row_shape) for s in manifest.streams] == [
        ("audio", "<i2", ()), ("faces", "|u1", FACE_SHAPE), ("labels", "|u1", ())]
    report = validate_pack(str(tmp_path / "asd"))
    assert report.ok, report.describe()
    pack = open_pack(tmp_path / "asd")
    assert isinstance(pack.streams["faces"], DataSegmentTable)
    assert pack.attrs["clip"].tolist() == ["clipA", "clipA", "clipB"]
    np.testing.assert_array_equal(pack.attrs["source_fps"], [30.0, 29.97, 23.976])
    for index, sample in enumerate(samples):
        read = pack.sample(index)
        np.testing.assert_array_equal(read.data["faces"], sample.streams["faces"][0].data)
        np.testing.assert_array_equal(read.data["labels"], sample.streams["labels"][0].data)
        np.testing.assert_array_equal(np.rint(read.targets * 32768).astype(np.int16), sample.streams["audio"][0].data)
    segment = pack.segments_of("faces", 1)[0]
    np.testing.assert_array_equal(pack.read_rows("faces", segment, 5, 9), samples[1].streams["faces"][0].data[5:9])
    with pytest.raises(IndexError):
        pack.read_rows("faces", segment, 0, 32)


def test_asd_validate_reports_labels_that_do_not_match_faces(tmp_path):
    rng = np.random.default_rng(1)
    sample = _asd_sample(rng, "c:1", "c", 10, 25.0)
    _write(tmp_path / "asd", KIND_ASD, [sample])
    index_path = tmp_path / "asd" / "shard-000000" / "index.json"
    text = index_path.read_text().replace('"labels":[{"length":10', '"labels":[{"length":9')
    index_path.write_text(text)
    messages = [str(issue) for issue in validate_pack(str(tmp_path / "asd"), check_hashes=False).errors]
    assert any("10 faces and 9 labels" in m for m in messages), messages
    assert any("index covers 9 rows, the file holds 10" in m for m in messages), messages


def test_asr_pack_round_trip_with_hours_and_characters(tmp_path):
    rng = np.random.default_rng(2)
    samples = [_asr_sample(rng, "a", "grüß dich", "cv", "de", 1.0), _asr_sample(rng, "b", "hello", "ls", "en", 2.0),
               _asr_sample(rng, "c", "hallo", "cv", "de", 0.5)]
    manifest = _write(tmp_path / "asr", KIND_ASR, samples)
    assert manifest.hours_by_corpus == {"cv": {"de": 1.5 / 3600}, "ls": {"en": 2.0 / 3600}}
    assert manifest.char_counts["ü"] == 1 and manifest.char_counts["l"] == 4 and manifest.char_counts[" "] == 1
    report = validate_pack(str(tmp_path / "asr"))
    assert report.ok, report.describe()
    pack = open_pack(tmp_path / "asr")
    assert pack.manifest.hours_by_corpus == manifest.hours_by_corpus
    assert pack.attrs["language"].tolist() == ["de", "en", "de"]
    assert bytes(pack.sample(0).data["text"]).decode("utf-8") == "grüß dich"


def test_asr_validate_reports_invalid_utf8_and_wrong_totals(tmp_path):
    rng = np.random.default_rng(3)
    _write(tmp_path / "asr", KIND_ASR, [_asr_sample(rng, "a", "héllo", "cv", "fr", 1.0)])
    text_path = tmp_path / "asr" / "shard-000000" / "text.npy"
    raw = bytearray(text_path.read_bytes())
    raw[-5] = 0xFF  # inside "é"'s two bytes: no longer UTF-8
    text_path.write_bytes(bytes(raw))
    manifest_path = tmp_path / "asr" / MANIFEST_NAME
    obj = json.loads(manifest_path.read_text())
    obj["hours_by_corpus"]["cv"]["fr"] *= 2
    manifest_path.write_text(json.dumps(obj))
    messages = [str(issue) for issue in validate_pack(str(tmp_path / "asr")).errors]
    assert any("not valid UTF-8" in m for m in messages), messages
    assert any("hours_by_corpus does not match" in m for m in messages), messages
    assert any("sha256" in m for m in messages), messages


def test_asr_keys_are_refused_in_other_kinds_and_required_in_asr(tmp_path):
    rng = np.random.default_rng(4)
    manifest = _write(tmp_path / "asr", KIND_ASR, [_asr_sample(rng, "a", "x", "c", "l", 0.1)])
    obj = manifest.to_dict()
    del obj["char_counts"]
    with pytest.raises(PackFormatError, match="missing key.*char_counts"):
        Manifest.from_dict(obj)
    obj = manifest.to_dict()
    obj["kind"] = "sources"
    with pytest.raises(PackFormatError, match="only belong to asr packs"):
        Manifest.from_dict(obj)


def test_face_geometry_other_than_the_constant_is_refused(tmp_path):
    rng = np.random.default_rng(5)
    manifest = _write(tmp_path / "asd", KIND_ASD, [_asd_sample(rng, "c:1", "c", 3, 25.0)])
    obj = manifest.to_dict()
    obj["streams"][1]["row_shape"] = [96, 96]
    with pytest.raises(PackFormatError, match=r"stream 'faces' must be dtype '\|u1' with row_shape \[112, 112\]"):
        Manifest.from_dict(obj)
