"""``loader.pack`` reads through ``map_stream`` and ``MADV_WILLNEED``: the same bytes as numpy's own mapping, warm
or with the page cache dropped, for audio and data streams, and clear errors for stream files that do not match
their header or catalogue."""

from __future__ import annotations

import os

import numpy as np
import pytest
import soundfile

from factories.pack_reads import drop_page_cache, stored_segment
from speechpack.loader.pack import map_stream, open_pack, will_need_view
from speechpack.packer.audio import StoredAudio
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.packer.build.writer import PackWriter
from speechpack.schemas.constants import FACE_SHAPE, KIND_ASD
from speechpack.schemas.errors import PackFormatError


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
def test_windows_read_the_same_bytes_as_numpy(real_pack, cold):
    pack = open_pack(real_pack)
    rng = np.random.default_rng(0)
    if cold:
        drop_page_cache(real_pack)
    for stream, table in pack.streams.items():
        for segment in range(len(table.offset)):
            expected = stored_segment(real_pack, pack, stream, segment)
            length = expected.shape[1]
            for start, stop in [(0, length), (1, length - 1), *sorted(rng.integers(0, length, (3, 2)).tolist())]:
                start, stop = min(start, stop), max(start, stop)
                window = pack.read_segment(stream, segment, start, stop)
                factor = float(table.scale[segment]) / 32768.0
                np.testing.assert_array_equal(window, expected[:, start:stop].astype(np.float32) * np.float32(factor))
            pack.will_need(stream, segment, 7, length)  # a hint never changes what is read
            stored, _factor = pack.stored_segment(stream, segment)
            np.testing.assert_array_equal(stored, expected)
            assert not stored.flags.writeable


def test_will_need_accepts_any_range_of_any_channel(real_pack):
    pack = open_pack(real_pack)
    table = pack.streams["mix"]
    stereo = int(np.flatnonzero(table.channels == 2)[0])
    length = int(table.length[stereo])
    for start, stop in [(0, None), (3, 5), (length - 1, length), (5, 5), (9, 2), (-4, length + 100)]:
        pack.will_need("mix", stereo, start, stop)
    mapped = pack._mapped(int(table.shard[stereo]), "mix")
    assert mapped.data_offset % 64 == 0 and mapped.row_bytes == 2  # .npy headers are 64-byte aligned, not pages
    mapped.will_need(1, 1)  # a range inside a page, off the page boundary
    mapped.will_need(0, 0)


def test_will_need_view_advises_views_of_any_shape_and_leaves_bytes_alone(real_pack):
    """The TSE builder hints the windows of its stored views (1-D, a channel-major window of a stereo segment,
    empty, or a heap copy the kernel ignores); what is read afterwards is unchanged."""
    pack = open_pack(real_pack)
    table = pack.streams["mix"]
    stereo = int(np.flatnonzero(table.channels == 2)[0])
    stored, _factor = pack.stored_segment("mix", stereo)
    expected = stored_segment(real_pack, pack, "mix", stereo)
    drop_page_cache(real_pack)
    for view in (stored[:, 100:900], stored[0], stored[:, 5:5], stored[1, 17:18], stored.copy()):
        will_need_view(view)
    np.testing.assert_array_equal(stored, expected)


def test_a_truncated_or_mismatched_stream_file_is_named(real_pack, tmp_path):
    pack = open_pack(real_pack)
    path = real_pack / "shard-000000" / "mix.npy"
    data = path.read_bytes()
    with pytest.raises(PackFormatError, match="holds <i2 .* the catalogue says \\|u1 rows of \\[112, 112\\]"):
        map_stream(str(path), "|u1", (112, 112))
    truncated = tmp_path / "mix.npy"
    truncated.write_bytes(data[:-3])
    with pytest.raises(PackFormatError, match=f"{truncated}: cannot map stream file .* the file is truncated"):
        map_stream(str(truncated), "<i2", ())
    path.write_bytes(b"not an npy file at all")
    with pytest.raises(PackFormatError, match=f"{path}: cannot map stream file"):
        pack.stored_segment("mix", 0)


def test_will_need_on_data_streams_counts_whole_rows(tmp_path, real_audio):
    """Faces rows are 112 x 112 bytes: a hint for rows [2, 5) covers exactly those rows' pages, and reading the rows
    afterwards gives the stored bytes."""
    rng = np.random.default_rng(1)
    audio = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="int16")[0][None, :16000]
    faces = rng.integers(0, 256, (25, *FACE_SHAPE), dtype=np.uint8)
    labels = (np.arange(25) % 2).astype(np.uint8)
    sample = PackedSample(key="clip:0", speakers=("clip:0",), line=1, orig_sample_rate=16000, num_frames=16000,
                          provenance={}, attrs={"source_fps": 25.0, "start_sec": 0.0, "clip": "clip"},
                          streams={"audio": [StoredAudio(audio, 1.0)], "faces": [StoredArray(faces)],
                                   "labels": [StoredArray(labels)]})
    out = tmp_path / "asd"
    os.makedirs(out)
    plan = SamplePlan(line=1, key=sample.key, num_frames=sample.num_frames, elements=sample.elements)
    with PackWriter(str(out), KIND_ASD, 16000, [[plan]]) as writer:
        writer.add(sample)
        writer.finish({"input": {"path": "test", "sha256": "0" * 64}, "tool": "speechpack", "tool_version": "test",
                       "command": "test", "options": {}}, [])
    pack = open_pack(out)
    drop_page_cache(out)
    pack.will_need("faces", 0, 2, 5)
    pack.will_need("labels", 0)
    assert pack._mapped(0, "faces").row_bytes == FACE_SHAPE[0] * FACE_SHAPE[1]
    np.testing.assert_array_equal(pack.read_rows("faces", 0, 2, 5), faces[2:5])
    np.testing.assert_array_equal(pack.read_rows("labels", 0), labels)
