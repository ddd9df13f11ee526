"""``loader.readahead``: a batch's windows announced in one ``process_madvise`` call (or one ``madvise`` each where
the kernel lacks it) never change what is read, warm or with the pages evicted, on a real pack; a forked process
opens its own pidfd (the parent's would advise the parent)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from speechpack.loader.pack import readahead
from speechpack.loader.pack import open_pack
from factories.pack_reads import drop_page_cache, stored_segment


def _windows(pack, rng):
    """Random windows of every audio segment: (stream, segment, start, stop, view)."""
    out = []
    for stream in ("mix", "target"):
        table = pack.streams[stream]
        for segment in range(len(table.offset)):
            stored, _factor = pack.stored_segment(stream, segment)
            length = stored.shape[1]
            start = int(rng.integers(0, length - 1))
            stop = int(rng.integers(start + 1, length + 1))
            out.append((stream, segment, start, stop, stored[:, start:stop]))
    return out


def test_a_batch_of_advice_never_changes_the_windows(real_pack, monkeypatch):  # noqa: F811
    pack = open_pack(real_pack)
    for vector in (True, False):
        if not vector:  # as where the kernel has no process_madvise: one madvise per range
            monkeypatch.setattr(readahead._Vector, "broken", True)
        for cold in (False, True):
            windows = _windows(pack, np.random.default_rng(int(vector) * 2 + int(cold)))
            assert any(view.ndim == 2 and view.shape[0] == 2 for *_, view in windows)  # stereo: 2 ranges
            if cold:
                drop_page_cache(real_pack)
            readahead.will_need_views([view for *_, view in windows] + [np.zeros(3, np.int16)[:0]])  # empty too
            for stream, segment, start, stop, view in windows:
                expected = stored_segment(real_pack, pack, stream, segment)[:, start:stop]
                np.testing.assert_array_equal(view, expected, err_msg=f"vector={vector} cold={cold} {stream}")
    # more ranges than one call takes (UIO_MAXIOV)
    monkeypatch.undo()
    stored, _ = pack.stored_segment("target", 0)
    views = [stored[:, i:i + 7] for i in range(readahead.MAX_RANGES_PER_CALL + 5)]
    readahead.will_need_views(views)
    last = len(views) - 1
    np.testing.assert_array_equal(views[-1], stored_segment(real_pack, pack, "target", 0)[:, last:last + 7])


def test_ranges_are_page_aligned_and_cover_each_row():
    data = np.arange(5 * 5000, dtype=np.int16).reshape(5, 5000)
    view = data[1:4, 10:4010]  # rows not contiguous with each other
    ranges = readahead.view_ranges(view)
    base = data.__array_interface__["data"][0]
    assert ranges == [(base + (r * 5000 + 10) * 2, 4000 * 2) for r in (1, 2, 3)]
    assert readahead.view_ranges(data[0]) == [(base, 10000)]
    assert readahead.view_ranges(data[:, :0]) == []
    readahead.will_need_ranges(ranges)  # anonymous memory: the kernel accepts and ignores the advice
    readahead.will_need_ranges([])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_forked_child_opens_its_own_pidfd():
    readahead.will_need_ranges([(np.zeros(1).__array_interface__["data"][0], 8)])
    parent_pid = readahead._Vector.pid
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: advice re-opens the pidfd for its own pid
        try:
            readahead.will_need_ranges([(np.zeros(1).__array_interface__["data"][0], 8)])
            os.write(write_fd, str(readahead._Vector.pid).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    child_pid = int(os.read(read_fd, 64).decode())
    os.waitpid(pid, 0)
    os.close(read_fd)
    assert parent_pid == os.getpid()
    assert child_pid == pid
