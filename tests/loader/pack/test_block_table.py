"""Where a compressed stream's blocks lie (``loader.pack.blocks``): byte offsets by a cumulative sum of the blocks
column, the blocks a frame range touches, and each piece's row in its shard's ``digests.npy``."""

from __future__ import annotations

import numpy as np
import pytest

from speechpack.loader.pack.blocks import BlockTable, piece_rows
from speechpack.schemas.errors import PackFormatError

pytestmark = pytest.mark.fast


def test_block_offsets_are_each_segment_offset_plus_its_earlier_blocks():
    # three segments of 10, 4 and 0 frames in blocks of 4 frames: 3, 1 and 0 blocks
    table = BlockTable.of("flac", 4, offset=np.array([0, 30, 0]), length=np.array([10, 4, 0]),
                          sizes=np.array([10, 12, 8, 5]), where="mix_blocks.npy")
    assert table.first.tolist() == [0, 3, 4, 4]
    assert table.start.tolist() == [0, 10, 22, 30]
    assert table.segment_bytes().tolist() == [30, 5, 0]
    assert list(table.blocks_of(0, 3, 5)) == [0, 1]  # frames 3-4 lie in blocks 0 and 1
    assert list(table.blocks_of(0, 8, 10)) == [2]
    assert list(table.blocks_of(1, 0, 4)) == [3]


def test_a_blocks_column_that_does_not_fit_the_segments_is_refused():
    with pytest.raises(PackFormatError, match=r"mix_blocks\.npy: 3 blocks, the segments' lengths need 4"):
        BlockTable.of("flac", 4, np.array([0, 30]), np.array([10, 4]), np.array([10, 12, 8]), "mix_blocks.npy")
    with pytest.raises(PackFormatError, match=r"row 1: block of 0 bytes"):
        BlockTable.of("flac", 4, np.array([0]), np.array([8]), np.array([10, 0]), "mix_blocks.npy")


def test_pieces_are_numbered_per_shard_stream_by_stream():
    # stream 1 (compressed): two shards, segments of 2, 1 | 3 blocks; stream 2 (one piece per segment): 1 | 2
    first = np.array([0, 2, 3, 6])
    rows, counts = piece_rows([(np.array([0, 0, 1]), first), (np.array([0, 1, 1]), None)], shards=2)
    assert rows[0].tolist() == [0, 1, 2, 0, 1, 2]  # shard 0: blocks 0-2; shard 1: blocks 0-2
    assert rows[1].tolist() == [3, 3, 4]  # after each shard's blocks
    assert counts.tolist() == [4, 5]
