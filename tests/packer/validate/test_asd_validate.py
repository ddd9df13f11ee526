"""``packer.validate.asd.asd_issues``: the asd-only checks of ``speechpack validate``, on a pack of the real
talking-face video (``tests/factories/asd_inputs.make_asd_pack``) and on copies of it with one thing broken each."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

from factories.asd_inputs import make_asd_pack
from speechpack.loader.pack import read_manifest
from speechpack.packer.validate.pack import validate_pack
from speechpack.packer.validate.asd import asd_issues
from speechpack.schemas.format import StreamSpec

pytestmark = pytest.mark.real_data


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> str:
    return make_asd_pack(tmp_path_factory.mktemp("asd"))


def _records_by_shard(pack: str, manifest) -> dict[str, list[dict]]:
    records = {}
    for shard in manifest.shards:
        with open(os.path.join(pack, shard.directory, "index.json"), encoding="utf-8") as fp:
            records[shard.directory] = json.load(fp)["samples"]
    return records


def test_a_built_pack_has_no_asd_issue(pack):
    manifest = read_manifest(pack)
    records = _records_by_shard(pack, manifest)
    assert sum(len(r) for r in records.values()) == 3
    assert asd_issues(pack, manifest, records) == []
    assert validate_pack(pack).ok


def test_a_corrupted_label_value_is_found_in_labels_npy(pack, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(pack, broken)
    manifest = read_manifest(str(broken))
    records = _records_by_shard(str(broken), manifest)
    second = records["shard-000000"][1]
    labels_path = broken / "shard-000000" / "labels.npy"
    labels = np.load(labels_path, mmap_mode="r+")
    labels[second["streams"]["labels"][0]["offset"] + 7] = 2
    labels.flush()
    del labels
    issues = asd_issues(str(broken), manifest, records)
    assert issues == [(f"{labels_path} key {second['key']!r}", "1 label(s) not 0 or 1 (first: 2 at frame 7)")]


def test_track_invariants_are_checked_record_by_record(pack):
    manifest = read_manifest(pack)
    records = copy.deepcopy(_records_by_shard(pack, manifest))
    first, second, third = records["shard-000000"]
    first["streams"]["audio"][0]["length"] += 1  # audio one sample longer than round(F / fps * 16000)
    second["attrs"]["source_fps"] = 10_000.0  # 44 frames at 10 kHz: no 25 Hz model frame, and a shorter audio
    third["streams"]["labels"][0]["length"] -= 1
    by_key: dict[str, list[str]] = {}
    for file, message in asd_issues(pack, manifest, records):
        by_key.setdefault(file.split(" key ")[1], []).append(message)
    frames = first["streams"]["faces"][0]["length"]
    assert by_key[repr(first["key"])] == [
        f"audio has {first['streams']['audio'][0]['length']} samples; {frames} frames at "
        f"{first['attrs']['source_fps']:g} fps need round({frames} / {first['attrs']['source_fps']:g} * 16000) = "
        f"{first['streams']['audio'][0]['length'] - 1}"]
    assert len(by_key[repr(second["key"])]) == 2  # the audio length no longer fits, and no model frame
    assert "make no 25 Hz model frame" in by_key[repr(second["key"])][1]
    assert by_key[repr(third["key"])] == [f"{third['streams']['labels'][0]['length']} labels for "
                                          f"{third['streams']['faces'][0]['length']} faces"]
    second["attrs"]["source_fps"] = float("nan")
    assert any("source_fps must be a positive frame rate" in m for _f, m in asd_issues(pack, manifest, records))


def test_the_pack_must_be_16_khz_with_the_face_geometry_of_this_code(pack):
    manifest = read_manifest(pack)
    records = _records_by_shard(pack, manifest)
    streams = tuple(StreamSpec(s.name, s.dtype, (96, 96)) if s.name == "faces" else s for s in manifest.streams)
    other = dataclasses.replace(manifest, sample_rate=8000, streams=streams)
    messages = [message for _file, message in asd_issues(pack, other, records)]
    assert any("an asd pack is 16000 Hz, this one says 8000" in m for m in messages)
    assert any("rows of [96, 96]" in m and "[112, 112]" in m for m in messages)
