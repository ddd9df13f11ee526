"""A real wesep pack over several shards for the read-path tests, and numpy's own view of what it stores.

The builder behind the ``real_pack`` fixture (tests/conftest.py) lives here.
"""

from __future__ import annotations

import os

import numpy as np

from factories.wesep_lists import Mix
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

def make_real_pack(tmp_path, wesep_list, real_audio):
    librivox = real_audio("pocketsphinx", 4)
    case = wesep_list([Mix("m1", tuple(librivox[:2]), seconds=1.3), Mix("m2", tuple(librivox[1:4]), layout="stereo"),
                       Mix("m3", (librivox[0], librivox[3]), seconds=0.7)])
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=120_000, progress=False))
    return out


def drop_page_cache(pack_dir) -> None:
    for path in pack_dir.glob("shard-*/*.npy"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def stored_segment(pack_dir, pack, stream: str, segment: int) -> np.ndarray:
    """The segment as ``[C, T]`` stored int16, read with numpy's own loader (no speechpack mapping code)."""
    table = pack.streams[stream]
    directory = pack.manifest.shards[int(table.shard[segment])].directory
    array = np.load(pack_dir / directory / f"{stream}.npy")
    offset, channels, length = int(table.offset[segment]), int(table.channels[segment]), int(table.length[segment])
    return array[offset:offset + channels * length].reshape(channels, length)
