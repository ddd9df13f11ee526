"""Plain 16-bit PCM WAV read without libsndfile (``packer.audio.plain_wav``): the same frames, rates and sample bits
libsndfile gives, for every layout that takes this way; every other layout (and every odd file) goes to libsndfile
and keeps its messages.  Real recordings, rewritten in each layout."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
import soundfile

from speechpack.packer.audio import AudioError, probe_audio, read_audio
from speechpack.packer.audio.plain_wav import plain_layout, probe_plain


def _samples(real_audio) -> tuple[np.ndarray, int]:
    data, rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="float32")
    return data[:20000], rate


def _plain(path: str):
    fd = os.open(path, os.O_RDONLY)
    try:
        return probe_plain(fd)
    finally:
        os.close(fd)


def _wav(chunks: list[tuple[bytes, bytes]], container: bytes = b"RIFF") -> bytes:
    body = b"WAVE" + b"".join(cid + struct.pack("<I", len(data)) + data + b"\0" * (len(data) & 1)
                             for cid, data in chunks)
    return container + struct.pack("<I", len(body)) + body


def _fmt(channels: int, rate: int, bits: int = 16, tag: int = 1) -> bytes:
    align = channels * bits // 8
    return struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits)


def _agrees_with_libsndfile(path: str) -> None:
    with soundfile.SoundFile(path) as sound:
        rate, frames, channels = sound.samplerate, sound.frames, sound.channels
    info = probe_audio(path)
    assert (info.sample_rate, info.frames, info.channels, info.pcm16) == (rate, frames, channels, True)
    for int16_at, dtype in ((rate, "int16"), (None, "float32"), (rate + 1, "float32")):
        expected, _ = soundfile.read(path, dtype=dtype, always_2d=True)
        audio = read_audio(path, int16_at=int16_at)
        assert audio.sample_rate == rate and audio.data.dtype == np.dtype(dtype)
        assert audio.data.flags.c_contiguous
        assert audio.data.tobytes() == np.ascontiguousarray(expected.T).tobytes()  # the same bits


def test_plain_layouts_read_what_libsndfile_reads(real_audio, tmp_path):
    data, rate = _samples(real_audio)
    stereo = np.stack([data, -data[::-1]], axis=1)
    full_scale = np.array([-1.0, -0.5, 0.0, 32767 / 32768, 1 / 32768] * 50, dtype=np.float32)
    for name, signal, sample_rate in (("mono", data, rate), ("stereo", stereo, 48000), ("edges", full_scale, 8000)):
        path = str(tmp_path / f"{name}.wav")
        soundfile.write(path, signal, sample_rate, subtype="PCM_16")
        assert _plain(path) is not None
        _agrees_with_libsndfile(path)
    # a real file as shipped, and chunks libsndfile skips: LIST before fmt, an odd-sized chunk, a chunk after data
    pcm = (np.clip(data, -1, 32767 / 32768) * 32768).astype("<i2").tobytes()
    extra = str(tmp_path / "chunks.wav")
    with open(extra, "wb") as fp:
        fp.write(_wav([(b"LIST", b"INFOabc"), (b"fmt ", _fmt(1, rate)), (b"fact", b"\0" * 4), (b"data", pcm),
                       (b"LIST", b"INFO trailing")]))
    assert _plain(extra).frames == len(data)
    _agrees_with_libsndfile(extra)
    _agrees_with_libsndfile(real_audio("pocketsphinx", 1)[0])


def test_other_layouts_go_to_libsndfile(real_audio, tmp_path):
    data, rate = _samples(real_audio)
    for subtype in ("PCM_24", "PCM_U8", "FLOAT", "ULAW"):
        path = str(tmp_path / f"{subtype}.wav")
        soundfile.write(path, data, rate, subtype=subtype)
        assert _plain(path) is None, subtype
    for name, fmt in (("wavex.wav", "WAVEX"), ("rf64.wav", "RF64")):
        path = str(tmp_path / name)
        soundfile.write(path, data, rate, subtype="PCM_16", format=fmt)
        assert _plain(path) is None, fmt
        info = probe_audio(path)
        assert info.pcm16 and info.frames == len(data)
        np.testing.assert_array_equal(read_audio(path, int16_at=rate).data[0],
                                      soundfile.read(path, dtype="int16")[0])
    pcm = struct.pack("<4h", 1, 2, 3, 4)
    assert plain_layout(_wav([(b"fmt ", _fmt(1, 16000)), (b"data", pcm)], b"RIFX"), 100) is None
    # a streaming writer's unknown size, a data chunk before fmt, a header without data
    unknown = _wav([(b"fmt ", _fmt(1, 16000)), (b"data", pcm)]).replace(b"data" + struct.pack("<I", 8),
                                                                       b"data" + struct.pack("<I", 0xFFFFFFFF))
    assert plain_layout(unknown, len(unknown)) is None
    assert plain_layout(_wav([(b"data", pcm), (b"fmt ", _fmt(1, 16000))]), 100) is None
    assert plain_layout(_wav([(b"fmt ", _fmt(1, 16000))]), 100) is None


def test_truncated_and_empty_files_keep_libsndfiles_messages(real_audio, tmp_path):
    data, rate = _samples(real_audio)
    whole = str(tmp_path / "whole.wav")
    soundfile.write(whole, data, rate, subtype="PCM_16")
    cut = tmp_path / "cut.wav"
    cut.write_bytes(open(whole, "rb").read()[:-1001])
    assert _plain(str(cut)) is None  # the header declares bytes the file does not hold
    for read in (probe_audio, read_audio):
        with pytest.raises(AudioError, match=f"truncated WAV: the header declares {len(data)} frames, the file "
                                             f"holds {len(data) - 501}"):
            read(str(cut))
    empty = tmp_path / "empty.wav"
    empty.write_bytes(_wav([(b"fmt ", _fmt(1, 16000)), (b"data", b"")]))
    for read in (probe_audio, read_audio):
        with pytest.raises(AudioError, match=r"empty audio \(0 samples\)"):
            read(str(empty))
