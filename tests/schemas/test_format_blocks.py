"""Format 1.4 in ``schemas/``: codec streams (catalogue keys, segment ``blocks``, the blocks column), digests
(manifest key, ``digests.npy``), the checks on them, the version, and why a 1.3 reader refuses such a pack."""

from __future__ import annotations

import copy
import json
import types

import numpy as np
import pytest

from factories.format_rules import v13_refusals
from factories.manifest_edits import delete_at, set_at
from speechpack.schemas.columns import (
    ColumnBuilder,
    check_column_types,
    check_column_values,
    digest_piece_counts,
)
from speechpack.schemas.constants import MINOR_BLOCKS, MINOR_CUES, MINOR_TRACKS, block_count, blocks_column_file
from speechpack.schemas.digests import check_digests_header, digests_array, piece_digest
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import FileEntry, Manifest, ShardEntry, StreamSpec, check_shard_index, lowest_minor
from speechpack.schemas.kinds import column_files
from speechpack.schemas.npyfile import NpyHeader

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

DIGEST = "ab" * 32
B = 4  # frames per block in these tables


def _flac(name: str) -> StreamSpec:
    return StreamSpec(name, "|u1", (), codec="flac", block_frames=B)


def make_manifest(compressed: bool = True, digests: bool = True, shard_sizes=(100, 100), samples=(1, 1)) -> Manifest:
    """A sources pack of two shards; ``compressed``: its ``source`` stream is flac."""
    spec = _flac("source") if compressed else StreamSpec("source")
    files = ("index.json", "source.npy", *(("digests.npy",) if digests else ()))
    return Manifest(
        kind="sources",
        sample_rate=16000,
        streams=(spec,),
        shards=tuple(ShardEntry(directory=f"shard-{i:06d}", samples=samples[i],
                                files={name: FileEntry(size=size if name == "source.npy" else 50, sha256=DIGEST)
                                       for name in files})
                     for i, size in enumerate(shard_sizes)),
        totals={"samples": sum(samples), "hours": 0.01, "speakers": 2, "bytes": 1234},
        provenance={"input": {"path": "/data/raw.list", "sha256": DIGEST}, "tool": "speechpack",
                    "tool_version": "0.1.0", "command": "build wesep", "options": {}},
        columns={name: FileEntry(size=200, sha256=DIGEST)
                 for name in column_files("sources", ("source",) if compressed else ())},
        format_minor=MINOR_BLOCKS,
        digests="blake2b-128" if digests else None,
    )


# -- the manifest ------------------------------------------------------------------------------------------------


def test_compressed_manifest_round_trips_with_codec_keys_and_digests():
    manifest = make_manifest()
    obj = json.loads(json.dumps(manifest.to_dict()))
    assert obj["streams"] == [{"name": "source", "dtype": "|u1", "row_shape": [], "file": "source.npy",
                               "codec": "flac", "block_frames": B}]
    assert obj["digests"] == "blake2b-128"
    assert sorted(obj["columns"]["files"]) == ["keys.npy", "samples.npy", "source.npy", "source_blocks.npy",
                                               "speakers.npy"]
    again = Manifest.from_dict(obj)
    assert again == manifest
    assert again.block_frames == {"source": B} and again.has_blocks
    assert again.stream("source").codec_name == "flac"
    assert again.column_file_names() == column_files("sources", ("source",))


def test_pcm16_pack_with_digests_needs_no_codec_keys():
    manifest = make_manifest(compressed=False, digests=True)
    obj = manifest.to_dict()
    assert "codec" not in obj["streams"][0] and obj["digests"] == "blake2b-128"
    again = Manifest.from_dict(obj)
    assert again.block_frames == {} and again.has_blocks and again.stream("source").codec_name == "pcm16"


def test_a_pcm16_manifest_without_digests_has_no_new_keys():
    obj = make_manifest(compressed=False, digests=False).to_dict()
    assert "digests" not in obj and set(obj["streams"][0]) == {"name", "dtype", "row_shape", "file"}
    assert not Manifest.from_dict(obj).has_blocks


MALFORMED = {
    "codec without block_frames": (delete_at(("streams", 0, "block_frames")),
                                   r"streams\[0\]: missing key\(s\) block_frames"),
    "block_frames without codec": (delete_at(("streams", 0, "codec")), r"streams\[0\]: missing key\(s\) codec"),
    "unknown codec": (set_at(("streams", 0, "codec"), "mp3"), r"streams\[0\].codec: 'mp3' is not one of flac, opus"),
    "pcm16 named as a codec": (set_at(("streams", 0, "codec"), "pcm16"), r"'pcm16' is not one of flac, opus"),
    "zero block_frames": (set_at(("streams", 0, "block_frames"), 0), r"block_frames: must be positive, got 0"),
    "bool block_frames": (set_at(("streams", 0, "block_frames"), True), r"block_frames: expected int, got True"),
    "compressed stream as int16": (set_at(("streams", 0, "dtype"), "<i2"),
                                   r"a flac stream must be dtype '\|u1' with row_shape \[\], got '<i2'"),
    "missing digests": (delete_at(("digests",)), r"missing key digests \(stream\(s\) source have a codec"),
    "unknown digest algorithm": (set_at(("digests",), "sha1"), r"digests: expected 'blake2b-128', got 'sha1'"),
    "shard without digests.npy": (delete_at(("shards", 1, "files", "digests.npy")),
                                  r"shards\[1\].files: expected \['digests.npy', 'index.json', 'source.npy'\]"),
    "no blocks column": (delete_at(("columns", "files", "source_blocks.npy")),
                         r"columns.files: expected .*'source_blocks.npy'"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_compressed_manifest_is_refused_naming_the_field(name):
    edit, message = MALFORMED[name]
    obj = copy.deepcopy(make_manifest().to_dict())
    edit(obj)
    with pytest.raises(PackFormatError, match=message):
        Manifest.from_dict(obj)


def test_digests_file_without_the_manifest_key_is_refused():
    obj = make_manifest(compressed=False, digests=True).to_dict()
    del obj["digests"]
    with pytest.raises(PackFormatError, match=r"shards\[0\].files: expected \['index.json', 'source.npy'\], got "
                                              r"\['digests.npy'"):
        Manifest.from_dict(obj)


def test_a_data_stream_never_has_a_codec():
    obj = make_manifest().to_dict()
    obj.update(kind="asr", hours_by_corpus={"c": {"en": 0.01}}, char_counts={"a": 1})
    obj["streams"] = [StreamSpec("audio").to_dict(),
                      {"name": "text", "dtype": "|u1", "row_shape": [], "file": "text.npy", "codec": "flac",
                       "block_frames": 4}]
    with pytest.raises(PackFormatError, match=r"streams\[1\]: stream 'text' is a data stream; only audio streams "
                                              r"have a codec"):
        Manifest.from_dict(obj)


def test_lowest_minor_is_4_with_blocks_and_unchanged_without():
    assert lowest_minor("tse", False) == 0 and lowest_minor("tse", True) == MINOR_CUES
    assert lowest_minor("asr", False) == MINOR_TRACKS
    assert lowest_minor("tse", False, has_blocks=True) == MINOR_BLOCKS == 4
    assert lowest_minor("asd", True, has_blocks=True) == MINOR_BLOCKS


@pytest.mark.parametrize("compressed", [True, False])
def test_a_1_3_reader_refuses_every_1_4_pack(compressed):
    """Both kinds of 1.4 pack (a codec stream; pcm16 with digests) break rules a 1.3 reader enforced, and an
    older pack (pcm16, no digests) breaks none of them, so 1.3 readers keep reading what they read."""
    assert v13_refusals(make_manifest(compressed=compressed, digests=True).to_dict())
    assert not v13_refusals(make_manifest(compressed=False, digests=False).to_dict())


# -- index.json ---------------------------------------------------------------------------------------------------


def _record(length: int, blocks: list[int] | None):
    seg = {"offset": 0, "channels": 1, "length": length, "scale": 1.0, "mean": 0.0, "rms": 0.0, "peak": 0.0}
    if blocks is not None:
        seg["blocks"] = blocks
    return {"key": "k", "speakers": ["a"], "num_frames": length, "duration": 0.1, "orig_sample_rate": 16000,
            "line": 1, "provenance": {}, "streams": {"source": [seg]}}


def test_compressed_segments_carry_their_block_sizes():
    index = {"format_version": 1, "shard": "shard-000000", "samples": [_record(9, [30, 31, 5])]}
    assert check_shard_index(index, "sources", "index.json", {"source": B})[0]["streams"]["source"][0]["blocks"] \
        == [30, 31, 5]
    assert block_count(9, B) == 3 and block_count(8, B) == 2 and block_count(0, B) == 0


@pytest.mark.parametrize("blocks,message", [
    (None, r"streams.source\[0\]: missing key\(s\) blocks"),
    ([30, 31], r"blocks: 2 block\(s\), a segment of 9 frames in blocks of 4 has 3"),
    ([30, 0, 5], r"blocks: 0 is not a positive byte size"),
    ([30, 1.5, 5], r"blocks: 1.5 is not a positive byte size"),
    ([30, True, 5], r"blocks: True is not a positive byte size"),
    ("30", r"blocks: expected list"),
])
def test_bad_block_lists_are_refused(blocks, message):
    index = {"format_version": 1, "shard": "shard-000000", "samples": [_record(9, blocks)]}
    with pytest.raises(PackFormatError, match=message):
        check_shard_index(index, "sources", "index.json", {"source": B})


def test_a_pcm16_segment_may_not_carry_blocks():
    index = {"format_version": 1, "shard": "shard-000000", "samples": [_record(9, [30, 31, 5])]}
    with pytest.raises(PackFormatError, match=r"unknown key\(s\) blocks"):
        check_shard_index(index, "sources", "index.json")


# -- columns ------------------------------------------------------------------------------------------------------

HEADER = 128  # the .npy header of a stream file in these tables


def _columns(records_by_shard):
    builder = ColumnBuilder("sources", compressed=("source",))
    for shard, records in enumerate(records_by_shard):
        for record in records:
            builder.add(shard, record)
    return builder.arrays()


def _seg(offset, length, blocks):
    record = _record(length, blocks)
    record["streams"]["source"][0]["offset"] = offset
    return record


def _check(manifest, arrays, blocks=None):
    samples = arrays["samples.npy"]
    seg = arrays["source.npy"]
    table = types.SimpleNamespace(**{name: np.ascontiguousarray(seg[name]) for name in seg.dtype.names},
                                  first=samples["source_first"], count=samples["source_count"])
    check_column_types(manifest, arrays, "PACK/columns")
    rows = check_column_values(manifest, samples["shard"], samples["speaker_first"], samples["speaker_count"],
                               len(arrays["speakers.npy"]), {"source": table}, "PACK/columns",
                               blocks={"source": arrays["source_blocks.npy"]} if blocks is None else blocks)
    return rows, table


def test_block_columns_are_checked_in_bytes_and_give_the_stream_files_byte_counts():
    arrays = _columns([[_seg(0, 9, [30, 31, 5])], [_seg(0, 4, [20])]])
    assert arrays[blocks_column_file("source")].dtype.str == "<i8"
    assert list(arrays["source_blocks.npy"]) == [30, 31, 5, 20]
    manifest = make_manifest(shard_sizes=(HEADER + 66, HEADER + 20))
    rows, table = _check(manifest, arrays)
    assert list(rows["source"]) == [66, 20]
    assert list(digest_piece_counts(manifest, {"source": table})) == [3, 1]


@pytest.mark.parametrize("shard0,message", [
    ([_seg(0, 9, [30, 31, 5]), _seg(60, 4, [6])], r"source.npy: row 1: offset 60, expected 66 \(segments follow each "
                                                  r"other with no gap"),
    ([_seg(0, 9, [30, 31, 5]), _seg(66, 4, [6])], r"the segments of shard-000000 need 72 rows of source.npy"),
])
def test_block_columns_refuse_gaps_and_sizes_that_do_not_add_up(shard0, message):
    manifest = make_manifest(shard_sizes=(HEADER + 66, HEADER + 20), samples=(2, 1))
    with pytest.raises(PackFormatError, match=message):
        _check(manifest, _columns([shard0, [_seg(0, 4, [20])]]))


def test_block_columns_refuse_a_wrong_count_and_non_positive_sizes():
    manifest = make_manifest(shard_sizes=(HEADER + 66, HEADER + 20))
    arrays = _columns([[_seg(0, 9, [30, 31, 5])], [_seg(0, 4, [20])]])
    with pytest.raises(PackFormatError, match=r"source_blocks.npy: the source segments need 4 blocks of 4 frames"):
        _check(manifest, arrays, blocks={"source": arrays["source_blocks.npy"][:3]})
    bad = arrays["source_blocks.npy"].copy()
    bad[1] = -31
    with pytest.raises(PackFormatError, match=r"source_blocks.npy: row 1: block size -31"):
        _check(manifest, arrays, blocks={"source": bad})
    huge = arrays["source.npy"].copy()
    huge["length"][0] = 2 ** 62  # claims more blocks than the column has: refused without any allocation
    with pytest.raises(PackFormatError, match=r"segment 0 of 4611686018427387904 frames needs"):
        _check(manifest, dict(arrays, **{"source.npy": huge}))
    with pytest.raises(PackFormatError, match=r"the source stream is compressed, its block sizes are needed"):
        _check(manifest, arrays, blocks={})


def test_a_pcm16_pack_digests_one_piece_per_segment():
    manifest = make_manifest(compressed=False, shard_sizes=(128 + 26, 128 + 8))
    table = types.SimpleNamespace(shard=np.array([0, 0, 1], dtype=np.int32), length=np.array([9, 4, 4]))
    assert list(digest_piece_counts(manifest, {"source": table})) == [2, 1]


def test_digests_are_blake2b_128_rows_of_sixteen_bytes():
    import hashlib

    rows = digests_array([piece_digest(b"abc"), piece_digest(np.arange(4, dtype="<i2"))])
    assert rows.shape == (2, 16) and rows.dtype == np.uint8
    assert rows[0].tobytes() == hashlib.blake2b(b"abc", digest_size=16).digest()
    assert rows[1].tobytes() == hashlib.blake2b(np.arange(4, dtype="<i2").tobytes(), digest_size=16).digest()
    assert digests_array([]).shape == (0, 16)
    check_digests_header(NpyHeader((2, 16), np.dtype("|u1"), False, 128), 2, "digests.npy")
    with pytest.raises(PackFormatError, match=r"digests.npy: expected a \|u1 array of shape \[3, 16\]"):
        check_digests_header(NpyHeader((2, 16), np.dtype("|u1"), False, 128), 3, "digests.npy")
