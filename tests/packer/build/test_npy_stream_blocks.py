"""Stream files gathered into blocks before they are written and hashed (``packer.build.streams.BLOCK_BYTES``):
the bytes and the hash do not depend on the block size, whether rows fill a block, straddle two or are larger than
one.  Real recordings."""

from __future__ import annotations

import hashlib
import io

import numpy as np

from factories import pack_files
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build import streams
from speechpack.packer.build.streams import NpyStream
from speechpack.packer.build.run import BuildOptions


def test_any_block_size_writes_the_same_pack(six_line_corpus, tmp_path, monkeypatch):
    def build(out):
        build_wesep(str(six_line_corpus.list_path), BuildOptions(out=str(out), shard_bytes=100000, progress=False))
        return pack_files(out)

    reference = build(tmp_path / "reference")
    for block in (1, 1000, 4096, 1 << 24):  # every row larger than the block ... every file within one block
        monkeypatch.setattr(streams, "BLOCK_BYTES", block)
        assert build(tmp_path / f"block-{block}") == reference


def test_rows_of_every_size_make_the_file_numpy_writes(real_audio, tmp_path, monkeypatch):
    import soundfile

    data, _ = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="int16")
    monkeypatch.setattr(streams, "BLOCK_BYTES", 3000)
    pieces = [data[:1], data[1:1500], data[1500:1501], data[1501:4000], data[4000:]]  # 2 B ... far beyond a block
    path = tmp_path / "audio.npy"
    stream = NpyStream(str(path), np.int16, planned=data.size)
    offsets = [stream.append(np.ascontiguousarray(piece)) for piece in pieces]
    entry = stream.close()
    expected = io.BytesIO()
    np.save(expected, data)
    assert path.read_bytes() == expected.getvalue()
    assert entry.size == len(expected.getvalue())
    assert entry.sha256 == hashlib.sha256(expected.getvalue()).hexdigest()
    assert offsets == [0, 1, 1500, 1501, 4000]
