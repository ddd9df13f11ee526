"""The pieces of range reads that need no store (``loader.cache.ranges``): requests coalesced from neighbouring
segments, and the per-process arrays that are filled segment by segment, where a segment never filled faults
instead of reading as zeros."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from types import SimpleNamespace

from speechpack.loader.cache.ranges import (RangeBuffer, ShardLayouts, StreamLayout, coalesce, segment_key,
                                            segment_key_parts)

pytestmark = pytest.mark.fast


def test_neighbouring_ranges_of_one_file_become_one_request_up_to_a_size_and_others_stay_apart():
    ranges = [("a", 0, 10, 1), ("a", 10, 5, 2), ("a", 45, 5, 3), ("b", 15, 5, 4), ("a", 15, 30, 5)]
    assert coalesce(ranges, most=100, gap=0) == [("a", 0, 50, [1, 2, 5, 3]), ("b", 15, 20, [4])]
    assert coalesce(ranges, most=35, gap=0) == [("a", 0, 15, [1, 2]), ("a", 15, 50, [5, 3]), ("b", 15, 20, [4])]
    assert coalesce([("a", 0, 10, 1), ("a", 20, 10, 2)], most=100, gap=9) == [("a", 0, 10, [1]), ("a", 20, 30, [2])]
    assert coalesce([("a", 0, 10, 1), ("a", 20, 10, 2)], most=100, gap=10) == [("a", 0, 30, [1, 2])]
    assert coalesce([("a", 0, 500, 1)], most=100, gap=0) == [("a", 0, 500, [1])], "a larger range alone"


def test_segment_names_are_the_keys_of_their_byte_ranges_and_read_back():
    sha = "ab" * 32
    for start, size in ((0, 10), (4096, 0), (1 << 40, 7)):
        name = segment_key(sha, start, size).name
        assert name == f"{sha[:16]}{start:016x}-{size}"
        assert segment_key_parts(name) == (sha[:16], start, size)
    assert len(segment_key(sha, 1 << 40, 7).sha256) == 32
    for other in (sha + "-5", "ab" * 16, "ab" * 16 + "-x", "zz" * 16 + "-5"):
        assert segment_key_parts(other) is None


def test_a_stream_table_in_any_row_order_gives_each_segment_its_place_in_its_shard():
    """Segments listed as a build writes them (shard, then offset) keep their order; any other order (rows of
    merged packs) is sorted by (shard, offset), ties impossible in a valid pack."""
    def places(shard, offset):
        table = SimpleNamespace(shard=np.asarray(shard, np.int64), offset=np.asarray(offset, np.int64))
        pack = SimpleNamespace(streams={"mix": table}, manifest=SimpleNamespace(streams=[], shards=[0, 1, 2]))
        layouts = ShardLayouts(pack, {})
        order, bounds = layouts._sorted("mix")
        return order.tolist(), bounds.tolist(), layouts.local["mix"].tolist()

    assert places([0, 0, 1, 2, 2], [0, 9, 0, 0, 4]) == ([0, 1, 2, 3, 4], [0, 2, 3, 5], [0, 1, 0, 0, 1])
    assert places([2, 0, 1, 0, 2], [4, 9, 0, 0, 0]) == ([3, 1, 2, 4, 0], [0, 2, 3, 5], [1, 1, 0, 0, 0])
    assert places([0, 0], [5, 5])[0] == [0, 1], "equal offsets (no valid pack has them) are sorted, stably"
    assert places([], []) == ([], [0, 0, 0, 0], [])


def _layout(sizes: list[int], data_offset: int = 128) -> StreamLayout:
    size = np.asarray(sizes, dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    return StreamLayout(rel="shard-000000/mix.npy", shard=0, stream="mix", file_sha256="0" * 64,
                        segments=np.arange(len(sizes)), offset=start // 2, start=start + data_offset, size=size,
                        piece_first=np.arange(len(sizes)), piece_count=np.ones(len(sizes), np.int64),
                        piece_sizes=None, piece_size_first=None, data_offset=data_offset, data_bytes=int(size.sum()))


def test_a_filled_segment_reads_its_bytes_and_a_released_one_gives_its_pages_back():
    layout = _layout([6000, 20000, 10000])
    buffer = RangeBuffer(layout, "<i2", (), 128 + 36000)
    data = np.arange(10000, dtype="<i2")
    buffer.fill(1, data.tobytes())
    array = buffer.mapped.array
    assert not array.flags.writeable and array.shape == (18000,)
    assert np.array_equal(array[3000:13000], data)
    buffer.release(1)
    assert not buffer.filled[1]
    buffer.fill(1, data[::-1].copy().tobytes())
    assert np.array_equal(array[3000:13000], data[::-1])


def test_a_segment_never_filled_faults_instead_of_reading_zeros():
    code = textwrap.dedent("""
        import numpy as np, sys
        sys.path[:0] = %r
        from test_range_buffers import _layout
        from speechpack.loader.cache.ranges import RangeBuffer
        buffer = RangeBuffer(_layout([6000, 20000, 10000]), "<i2", (), 128 + 36000)
        buffer.fill(0, bytes(6000))
        print(int(buffer.mapped.array[:3000].sum()), flush=True)
        print(int(buffer.mapped.array[3000:13000].sum()), flush=True)
    """) % ([p for p in sys.path if p],)
    import os
    here = os.path.dirname(__file__)
    done = subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == ["0"], done.stdout + done.stderr
    assert done.returncode == -11, "reading a segment never asked for must fault (SIGSEGV)"
