"""What a build reads without libsndfile, and that it reads what libsndfile reads.

Plain 16-bit PCM WAV (``packer.pcm_wav``): the same frames, rate, channels and sample values as libsndfile, bit for
bit, on real recordings, mono and multichannel, plain and EXTENSIBLE headers; every other layout (mu-law, float,
big-endian RIFX, 24-bit, a truncated file, a file that changed between header and samples) is left to libsndfile,
whose words the errors keep.  FLAC headers (``packer.flac_header``): the probe equals libsndfile's on real
recordings at 8, 16 and 24 bits, mono and stereo; ID3-tagged, unknown-length and broken files are left to it.  And
the statistics that streamed workers measure where they decode equal the writer's."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile

from packer import audio, fast_paths, pcm_wav
from packer.adapters.wesep import build_wesep, load_wesep_sample, read_wesep_list
from packer.build.run import BuildOptions
from schemas.errors import BuildError
from packer.audio import AudioError, StoredAudio, int16_statistics, probe_audio, read_audio
from packer.build.shard_task import decode_measured
from factories import Mix


def libsndfile_probe(path: str) -> audio.AudioInfo:
    return audio._probe(path, path)


def libsndfile_read(path: str, int16_at: int | None) -> audio.Audio:
    return audio._read(path, path, int16_at)


def takes_fast_path(path: str) -> bool:
    plain = fast_paths.open_plain_wav(path)
    if plain is None:
        return False
    plain[0].close()
    return True


def assert_same_as_libsndfile(path: str) -> None:
    """probe_audio and read_audio (int16 at the file's rate, float32 at any other) give libsndfile's answers."""
    info = probe_audio(path)
    assert info == libsndfile_probe(path)
    for int16_at in (info.sample_rate, info.sample_rate * 2, None):
        ours, theirs = read_audio(path, int16_at=int16_at), libsndfile_read(path, int16_at)
        assert ours.sample_rate == theirs.sample_rate
        assert ours.data.dtype == theirs.data.dtype and ours.data.shape == theirs.data.shape
        assert ours.data.flags.c_contiguous
        assert ours.data.tobytes() == theirs.data.tobytes(), f"{path}: samples differ (int16_at={int16_at})"


@pytest.mark.parametrize("corpus", ["pocketsphinx", "alsa", "codec2"])
def test_real_recordings_read_as_libsndfile_reads_them(real_audio, corpus):
    paths = real_audio(corpus)
    for path in paths:
        assert_same_as_libsndfile(path)
    fast = [p for p in paths if takes_fast_path(p)]
    plain = [p for p in paths if soundfile.info(p).subtype == "PCM_16" and soundfile.info(p).format == "WAV"]
    assert fast == plain and fast, "every plain 16-bit PCM recording takes the fast path"


@pytest.mark.parametrize("fmt", ["WAV", "WAVEX"])
@pytest.mark.parametrize("channels", [1, 2, 3])
def test_multichannel_and_extensible_headers(real_audio, tmp_path, fmt, channels):
    speech = [soundfile.read(p, dtype="int16")[0][:12000] for p in real_audio("pocketsphinx", channels)]
    path = str(tmp_path / f"speech-{channels}.wav")
    soundfile.write(path, np.stack(speech, axis=1), 16000, subtype="PCM_16", format=fmt)
    assert takes_fast_path(path)
    assert_same_as_libsndfile(path)
    stored = read_audio(path, int16_at=16000).data
    assert stored.shape == (channels, 12000) and np.array_equal(stored[channels - 1], speech[channels - 1])


@pytest.mark.parametrize("subtype,endian", [("ULAW", "FILE"), ("FLOAT", "FILE"), ("PCM_24", "FILE"),
                                            ("PCM_16", "BIG")], ids=["mu-law", "float", "24-bit", "RIFX"])
def test_other_layouts_are_left_to_libsndfile(real_audio, tmp_path, subtype, endian):
    data, rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="float32")
    path = str(tmp_path / "other.wav")
    soundfile.write(path, data[:16000], rate, subtype=subtype, endian=endian)
    assert not takes_fast_path(path)
    assert_same_as_libsndfile(path)


def test_a_truncated_file_is_refused_in_libsndfile_s_words(real_audio, tmp_path):
    data, rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="int16")
    path = tmp_path / "cut.wav"
    soundfile.write(path, data[:32000], rate, subtype="PCM_16")
    path.write_bytes(path.read_bytes()[:-2 * 21348])
    assert not takes_fast_path(str(path))
    for read in (probe_audio, read_audio):
        with pytest.raises(AudioError, match="header declares 32000 frames, the file holds 10652"):
            read(str(path))


def test_a_file_cut_after_its_header_was_read_goes_to_libsndfile(real_audio, tmp_path):
    data, rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="int16")
    path = tmp_path / "changing.wav"
    soundfile.write(path, data[:32000], rate, subtype="PCM_16")
    with open(path, "rb") as fp:
        layout = pcm_wav.plain_pcm16(fp, os.path.getsize(path))
    assert layout is not None and pcm_wav.frames(layout) == 32000
    path.write_bytes(path.read_bytes()[:-1000])
    with open(path, "rb") as fp:
        assert pcm_wav.read_pcm16(fp, layout, as_float=False) is None


def test_missing_and_directory_paths_keep_their_messages(tmp_path):
    for read in (probe_audio, read_audio):
        with pytest.raises(AudioError, match="file not found"):
            read(str(tmp_path / "absent.wav"))
        (tmp_path / "folder.wav").mkdir(exist_ok=True)
        with pytest.raises(AudioError, match="not a regular file"):
            read(str(tmp_path / "folder.wav"))


def test_streamed_workers_measure_what_the_writer_would(real_audio, wesep_list):
    """``decode_measured`` (run in the pool's workers when they stream to one writer) attaches each audio
    segment's statistics; they are exactly the writer's."""
    ps, alsa = real_audio("pocketsphinx", 2), real_audio("alsa", 2)
    case = wesep_list([Mix("a", tuple(ps), subtype="PCM_16"), Mix("b", tuple(alsa), seconds=0.5, start=0.1, layout="stereo")])
    load = functools.partial(load_wesep_sample, sample_rate=16000)
    for line in read_wesep_list(str(case.list_path)).lines:
        sample = decode_measured(load, line)
        segments = [seg for segs in sample.streams.values() for seg in segs]
        assert segments and all(isinstance(seg, StoredAudio) for seg in segments)
        for seg in segments:
            assert seg.stats == int16_statistics(seg.data, seg.scale)


def flac_copy(path: str, out, subtype: str = "PCM_16", channels: int = 1) -> str:
    data, rate = soundfile.read(path, dtype="float32")
    data = np.stack([data] * channels, axis=1) if channels > 1 else data
    soundfile.write(str(out), data, rate, subtype=subtype)
    return str(out)


@pytest.mark.parametrize("subtype", ["PCM_S8", "PCM_16", "PCM_24"])
def test_flac_headers_probe_as_libsndfile_probes_them(real_audio, tmp_path, subtype):
    sources = real_audio("pocketsphinx", 2) + real_audio("alsa", 2) + real_audio("codec2", 2)
    for number, source in enumerate(sources):
        for channels in (1, 2):
            path = flac_copy(source, tmp_path / f"{number}-{channels}.flac", subtype, channels)
            assert fast_paths.flac_streaminfo(path) is not None
            assert probe_audio(path) == libsndfile_probe(path)


def outcome(probe, path):
    try:
        return probe(path)
    except AudioError as err:
        return err.reason


def test_flac_files_laid_out_otherwise_are_left_to_libsndfile(real_audio, tmp_path):
    good = Path(flac_copy(real_audio("pocketsphinx", 1)[0], tmp_path / "good.flac"))
    data = good.read_bytes()
    cases = {
        "id3.flac": b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10) + data,  # a tag in front of the stream
        "unknown-length.flac": data[:21] + bytes([data[21] & 0xF0]) + bytes(4) + data[26:],  # total samples 0
        "broken-chain.flac": data[:42] + bytes([data[42] & 0x80 | 0x7F]) + data[43:],  # block type 127
        "no-frames.flac": data[:data.index(b"\xff\xf8", 42)],  # metadata only
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        assert fast_paths.flac_streaminfo(str(path)) is None, name
        assert outcome(probe_audio, str(path)) == outcome(libsndfile_probe, str(path)), name


def test_a_cut_flac_file_still_fails_its_line(real_audio, wesep_list, tmp_path):
    """Cut short, a FLAC file still declares its length; the build finds the damage when it decodes (libsndfile's
    probe reads only the metadata too) and names the line and file."""
    path = Path(flac_copy(real_audio("pocketsphinx", 1)[0], tmp_path / "cut.flac"))
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    assert probe_audio(str(path)) == libsndfile_probe(str(path))
    listed = tmp_path / "cut.list"
    listed.write_text(json.dumps({"key": "cut", "spk": ["s1"], "src": {"s1": [str(path)]}}) + "\n")
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), BuildOptions(out=str(tmp_path / "pack"), progress=False))
    [problem] = err.value.problems
    assert problem.line == 1 and problem.path == str(path) and "cannot decode audio" in problem.reason
