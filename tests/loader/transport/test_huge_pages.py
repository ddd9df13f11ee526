"""Batch ring slots on huge pages (``loader.transport.huge_pages``).

What is pinned: a slot is mapped at a 2 MB-aligned address in both processes and its contents are shared; what a
worker wrote into a slot is backed by huge pages in the worker and in the training process where the kernel
grants ``MADV_COLLAPSE`` (only the written part: the slot's reserve stays unallocated); the bytes are the same
either way.
"""

from __future__ import annotations

import gc
import os
import pickle

import numpy as np
import pytest

from speechpack.loader.transport import batch_ring, huge_pages

pytestmark = pytest.mark.skipif(not batch_ring.supported(), reason="memfd_create is Linux only")

MB = 1 << 20


def _collapse_granted() -> bool:
    """Whether this kernel moves an aligned memfd mapping into huge pages on request."""
    fd = os.memfd_create("probe", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, 2 * huge_pages.HUGE_PAGE)
        mapping = huge_pages.map_shared(fd, 2 * huge_pages.HUGE_PAGE)
        np.asarray(mapping)[:] = 1
        return (mapping.address % huge_pages.HUGE_PAGE == 0
                and mapping.advise(huge_pages._MADV_COLLAPSE) and huge_pages.huge_bytes(mapping) > 0)
    finally:
        os.close(fd)


def test_mappings_are_aligned_and_share_the_memfd():
    fd = os.memfd_create("test", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, 3 * MB)
        first, second = huge_pages.map_shared(fd, 3 * MB), huge_pages.map_shared(fd, 3 * MB)
    finally:
        os.close(fd)
    assert first.address != second.address
    assert first.address % huge_pages.HUGE_PAGE == 0 and second.address % huge_pages.HUGE_PAGE == 0
    a, b = np.asarray(first), np.asarray(second)
    assert a.shape == (3 * MB,) and a.dtype == np.uint8
    a[::4096] = 7
    assert (b[::4096] == 7).all() and not b[1::4096].any()
    del first, second
    gc.collect()
    assert (b[::4096] == 7).all()  # the arrays keep their mapping alive


def test_a_slot_written_by_a_worker_is_on_huge_pages_in_both_processes():
    if not _collapse_granted():
        pytest.skip("this kernel does not grant MADV_COLLAPSE on shared memory")
    ring = batch_ring.BatchRing(1, 2, reserve=64 * MB)
    slot = ring.claim(0)
    audio = slot.arrays.empty((8, 1, MB // 2), np.float32)  # 16 MB
    audio[...] = np.arange(MB // 2, dtype=np.float32)
    received = pickle.loads(pickle.dumps(ring.pack(0, slot, {"audio": audio})))
    arrays = received.arrays()
    np.testing.assert_array_equal(arrays["audio"], audio)
    assert slot.mapping.address % huge_pages.HUGE_PAGE == 0
    assert huge_pages.huge_bytes(slot.mapping) >= 16 * MB  # the worker's mapping
    assert huge_pages.mapped_bytes(slot.mapping, "Rss") <= 18 * MB  # the 80 MB reserve is not allocated by the collapse
    reader = ring._maps[(os.getpid(), 0)][2]
    assert reader is not slot.mapping and reader.address % huge_pages.HUGE_PAGE == 0
    assert huge_pages.huge_bytes(reader) >= 16 * MB  # the training process's, faulted in by the comparison
    del arrays, received
    gc.collect()
    again = ring.claim(0)
    assert again is slot and slot.huge_upto >= 16 * MB  # asked once per slot, not per message
