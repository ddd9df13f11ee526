"""Audio files opened once per step (``packer.audio.decode``): probing and decoding through one descriptor read what
libsndfile reads by path, every problem keeps the message the path's way gave, and no descriptor is left open.
Real recordings."""

from __future__ import annotations

import os
import struct
import threading

import numpy as np
import pytest
import soundfile

from speechpack.packer.audio import AudioError, probe_audio, read_audio
from speechpack.packer.audio.decode import HEADER_BYTES, by_descriptor


def _open_descriptors() -> set[str]:
    """What each open descriptor of this process refers to.  Compared as sets of files opened since: a descriptor
    that an earlier test's thread closes meanwhile (a finished background hash, a collected mapping) is no leak."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:  # the descriptor listdir itself used, closed again
            pass
    return found


@pytest.fixture
def recordings(real_audio, tmp_path) -> list[str]:
    """16 kHz and 48 kHz WAV, 8 kHz mu-law WAV, a stereo 24-bit WAV and a FLAC copy: each layout the
    descriptor's way takes."""
    ps, alsa, codec = real_audio("pocketsphinx", 1)[0], real_audio("alsa", 1)[0], real_audio("codec2", 3)[2]
    data, rate = soundfile.read(ps, dtype="float32")
    stereo, flac = str(tmp_path / "stereo.wav"), str(tmp_path / "copy.flac")
    soundfile.write(stereo, np.stack([data, data[::-1]], axis=1), rate, subtype="PCM_24")
    soundfile.write(flac, data, rate, subtype="PCM_16")
    return [ps, alsa, codec, stereo, flac]


def test_probe_and_decode_read_what_libsndfile_reads_by_path(recordings):
    for path in recordings:
        assert by_descriptor(path)
        with soundfile.SoundFile(path) as sound:
            rate, frames, channels, pcm16 = sound.samplerate, sound.frames, sound.channels, sound.subtype == "PCM_16"
        info = probe_audio(path)
        assert (info.sample_rate, info.frames, info.channels, info.pcm16) == (rate, frames, channels, pcm16)
        for int16_at, dtype in ((None, "float32"), (rate, "int16" if pcm16 else "float32")):
            expected, _ = soundfile.read(path, dtype=dtype, always_2d=True)
            audio = read_audio(path, int16_at=int16_at)
            assert audio.sample_rate == rate and audio.data.dtype == np.dtype(dtype)
            np.testing.assert_array_equal(audio.data, expected.T)


def test_refused_files_keep_the_messages_of_the_paths_way(recordings, tmp_path):
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"not a RIFF header at all" * 40)
    fifo = str(tmp_path / "pipe.wav")
    os.mkfifo(fifo)
    for read in (probe_audio, read_audio):
        with pytest.raises(AudioError) as refused:
            read(str(garbage))
        # libsndfile's message names the file by its path, as it did before descriptors
        assert refused.value.reason.startswith(f"cannot decode audio (Error opening {str(garbage)!r}")
        with pytest.raises(AudioError, match="file not found"):
            read(str(tmp_path / "absent.wav"))
        outcome: list = []
        reader = threading.Thread(target=lambda: outcome.append(pytest.raises(AudioError, read, fifo)), daemon=True)
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive(), "opening a FIFO blocked"
        assert "not a regular file" in str(outcome[0].value)


def test_no_descriptor_is_left_open(recordings, tmp_path):
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"RIFF" + bytes(100))
    before = _open_descriptors()
    for _ in range(20):
        for path in recordings:
            probe_audio(path)
            read_audio(path)
        for read in (probe_audio, read_audio):
            with pytest.raises(AudioError):
                read(str(garbage))
            with pytest.raises(AudioError):
                read(str(tmp_path))
    left_open = {entry for entry in _open_descriptors() - before if str(tmp_path) in entry
                 or any(path in entry for path in recordings)}
    assert not left_open, sorted(left_open)


def test_a_header_longer_than_one_read_is_still_checked(real_audio, tmp_path):
    """A chunk of 6,000 bytes between ``fmt `` and ``data`` puts the frame count beyond the first read of a header
    (``HEADER_BYTES``): a cut copy is still refused, an intact one read like the original."""
    original = real_audio("pocketsphinx", 1)[0]
    data = open(original, "rb").read()
    at = data.index(b"data")
    padded = data[:at] + b"JUNK" + struct.pack("<I", 6000) + bytes(6000) + data[at:]
    padded = padded[:4] + struct.pack("<I", len(padded) - 8) + padded[8:]
    intact, cut = tmp_path / "padded.wav", tmp_path / "padded-cut.wav"
    intact.write_bytes(padded)
    cut.write_bytes(padded[:len(padded) - 2000])
    assert 6000 > HEADER_BYTES
    expected, _ = soundfile.read(original, dtype="int16", always_2d=True)
    np.testing.assert_array_equal(read_audio(str(intact), int16_at=16000).data, expected.T)
    assert probe_audio(str(intact)).frames == expected.shape[0]
    for read in (probe_audio, read_audio):
        with pytest.raises(AudioError, match="truncated WAV: the header declares"):
            read(str(cut))


def test_the_descriptor_of_a_regular_file_blocks(recordings):
    """Opened without waiting (a FIFO must not hang the build), the descriptor handed to libsndfile is blocking
    again, as any other open file's."""
    from speechpack.packer.audio.decode import open_regular

    fd = open_regular(recordings[0])
    try:
        assert os.get_blocking(fd)
    finally:
        os.close(fd)
