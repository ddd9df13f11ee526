"""media.codecs, the encode side: FLAC blocks written by libsndfile into a scratch file of the calling thread
(``_encode_to_scratch``) are the very bytes soundfile writes into a ``BytesIO``, for mono and multichannel blocks of
any length, in threads and in forked children; and libsndfile's refusals stay ``EncodeError`` s in its words."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import soundfile

from speechpack.media import codecs
from speechpack.media.codecs import EncodeError, encode_segment

FAST_MODULE = True  # the test marked fast needs neither torch nor recordings

RATE = 16000

pytestmark = pytest.mark.skipif(not codecs._SCRATCH_FILES, reason="no memfd_create here: the BytesIO path encodes")


def bytesio_flac(block: np.ndarray, rate: int = RATE) -> bytes:
    """What soundfile writes for the block into memory, through its public API."""
    import io
    out = io.BytesIO()
    with soundfile.SoundFile(out, "w", samplerate=rate, channels=block.shape[0], format="FLAC",
                             subtype="PCM_16") as sound:
        sound.write(np.ascontiguousarray(block.T))
    return out.getvalue()


@pytest.fixture
def speech(real_audio):
    """Real 16 kHz read speech, int16 ``[1, T]``."""
    parts = [soundfile.read(path, dtype="int16")[0] for path in real_audio("pocketsphinx", 2)]
    return np.concatenate(parts)[None, :]


def test_flac_blocks_from_the_scratch_file_are_soundfiles_bytes(speech):
    stereo = np.stack([speech[0], speech[0][::-1]])
    eight = np.concatenate([np.roll(speech, 100 * k, axis=1) for k in range(8)])
    for block in (speech[:, :16000], speech[:, 5000:5001], speech[:, :16007], stereo[:, :16000],
                  eight[:, :3000], speech[:, 20000:36000][:, ::-1]):  # the last one a strided view
        assert codecs._encode_to_scratch(block, RATE, "FLAC", "PCM_16") == bytesio_flac(block)
    # through the registry, a read-only view as a convert hands it (a pack's mapping)
    view = speech[:, :40000].copy()
    view.flags.writeable = False
    encoded = encode_segment("flac", view, RATE, 16000)
    assert encoded.blocks == [bytesio_flac(view[:, s:s + 16000]) for s in range(0, 40000, 16000)]


def test_threads_and_forked_children_encode_into_files_of_their_own(speech):
    blocks = [speech[:, s:s + 16000] for s in range(0, 160000, 16000)]
    expected = [bytesio_flac(b) for b in blocks]
    got: dict[int, list[bytes]] = {}

    def encode(index: int) -> None:
        got[index] = [codecs._encode_to_scratch(b, RATE, "FLAC", "PCM_16") for b in blocks]

    threads = [threading.Thread(target=encode, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    encode(3)  # this thread meanwhile
    for thread in threads:
        thread.join()
    assert all(got[i] == expected for i in range(4))
    parent = codecs._scratch_file()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child encodes into a file of its own, never into its parent's
        try:
            mine = codecs._scratch_file()
            ok = mine is not parent and mine.pid == os.getpid()
            ok = ok and codecs._encode_to_scratch(blocks[0], RATE, "FLAC", "PCM_16") == expected[0]
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(read)
    assert codecs._scratch_file() is parent
    assert codecs._encode_to_scratch(blocks[1], RATE, "FLAC", "PCM_16") == expected[1]  # the parent's file intact


@pytest.mark.fast
def test_a_rate_flac_cannot_store_is_refused_by_the_scratch_path_in_libsndfiles_words():
    block = np.zeros((1, 100), dtype=np.int16)
    with pytest.raises(RuntimeError, match=r"^Error : flac does not support this sample rate\.$"):
        codecs._encode_to_scratch(block, 1_000_000, "FLAC", "PCM_16")
    with pytest.raises(EncodeError, match=r"could not encode it as flac \(Error : flac does not support this sample "
                                          r"rate\.\)"):
        encode_segment("flac", block, 1_000_000, 16000)
