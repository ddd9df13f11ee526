"""An audio file whose header overstates its length (a FLAC whose STREAMINFO says ``total_samples = 2**35`` over
16,000 real frames) is a named problem of its line, skippable with ``--skip-bad``, decoded in bounded blocks: never
a 64 GiB allocation that takes the whole build down (``media/sound_blocks.py``).  The FLAC is a real recording
with its STREAMINFO patched."""

from __future__ import annotations

import io
import json
import resource
from pathlib import Path

import numpy as np
import pytest
import soundfile

from factories.asr import write_jsonl_manifest
from factories.noise_lmdb import make_lmdb
from speechpack.loader import open_pack
from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl
from speechpack.packer.adapters.noise_lmdb import build_noise_lmdb
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.audio import AudioError, probe_audio, read_audio, read_audio_bytes
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.errors import BuildError
from speechpack.media.noise_lmdb import NoiseLmdbError, decode_noise
from speechpack.media.sound_blocks import read_frames

OVERSTATED = 1 << 35
REAL_FRAMES = 16_000


def _flac(data: np.ndarray, rate: int, total_samples: int | None = None) -> bytes:
    """``data`` encoded as FLAC; with ``total_samples``, STREAMINFO's 36-bit sample count replaced by it."""
    buffer = io.BytesIO()
    soundfile.write(buffer, data, rate, format="FLAC", subtype="PCM_16")
    raw = bytearray(buffer.getvalue())
    if total_samples is not None:
        # "fLaC", a 4-byte block header, then STREAMINFO: its bytes 10-17 hold rate (20 bits), channels - 1 (3),
        # bits per sample - 1 (5) and total samples (36), big-endian (https://xiph.org/flac/format.html)
        assert raw[:4] == b"fLaC" and raw[4] & 0x7F == 0
        packed = int.from_bytes(raw[18:26], "big")
        packed = (packed & ~((1 << 36) - 1)) | total_samples
        raw[18:26] = packed.to_bytes(8, "big")
    return bytes(raw)


@pytest.fixture
def recordings(real_audio, tmp_path):
    """(a good FLAC, the overstated FLAC, their real frames), both cut from real LibriVox recordings."""
    first, second = real_audio("pocketsphinx", 2)
    good_data, rate = soundfile.read(first, dtype="int16")
    bad_data, _ = soundfile.read(second, dtype="int16")
    good, bad = tmp_path / "good.flac", tmp_path / "overstated.flac"
    good.write_bytes(_flac(good_data[:REAL_FRAMES], rate))
    bad.write_bytes(_flac(bad_data[:REAL_FRAMES], rate, OVERSTATED))
    with soundfile.SoundFile(bad) as sound:
        assert sound.frames == OVERSTATED  # what libsndfile believes
    return str(good), str(bad)


def _peak_rss_growth(run) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    run()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before


def test_decoding_an_overstated_flac_is_a_named_problem_in_bounded_memory(recordings):
    good, bad = recordings

    def decode():
        with pytest.raises(AudioError, match=rf"overstated\.flac: .*{OVERSTATED} frames its FLAC header declares"):
            read_audio(bad)

    assert _peak_rss_growth(decode) < 512 << 20
    assert read_audio(good).num_frames == REAL_FRAMES


def test_read_frames_joins_blocks_of_a_long_file(recordings, monkeypatch):
    from speechpack.media import sound_blocks

    good, _ = recordings
    monkeypatch.setattr(sound_blocks, "DIRECT_BYTES", 4096)  # blocks of 2048 frames
    with soundfile.SoundFile(good) as sound:
        blocks = read_frames(sound, "int16")
    np.testing.assert_array_equal(blocks, soundfile.read(good, dtype="int16", always_2d=True)[0])


def test_build_wesep_names_the_line_and_skip_bad_skips_it(recordings, tmp_path):
    good, bad = recordings
    listed = tmp_path / "raw.list"
    listed.write_text("\n".join(json.dumps({"key": k, "spk": [s], "src": {s: [p]}})
                                for k, s, p in (("a", "s1", good), ("b", "s2", bad))) + "\n")
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), BuildOptions(out=str(tmp_path / "pack"), progress=False))
    [problem] = err.value.problems
    assert problem.line == 2 and problem.path == bad and str(OVERSTATED) in problem.reason
    kept = build_wesep(str(listed), BuildOptions(out=str(tmp_path / "kept"), progress=False, skip_bad=True))
    assert open_pack(kept.out).keys.tolist() == ["a"]


def test_build_asr_jsonl_names_the_line_and_skip_bad_skips_it(recordings, tmp_path):
    good, bad = recordings
    manifest = write_jsonl_manifest(tmp_path / "train.jsonl", [
        {"audio_filepath": good, "text": "good", "language": "en", "corpus": "c"},
        {"audio_filepath": bad, "text": "whole", "language": "en", "corpus": "c"},
        {"key": "span", "audio_filepath": bad, "text": "span", "language": "en", "corpus": "c", "offset": 0.5,
         "duration": 2.0},
    ])
    with pytest.raises(BuildError) as err:
        build_asr_jsonl(str(manifest), BuildOptions(out=str(tmp_path / "pack"), progress=False))
    assert sorted(p.line for p in err.value.problems) == [2, 3]
    assert all(str(OVERSTATED) in p.reason or "runs past" in p.reason for p in err.value.problems)
    kept = build_asr_jsonl(str(manifest), BuildOptions(out=str(tmp_path / "kept"), progress=False, skip_bad=True))
    assert len(open_pack(kept.out)) == 1


def test_build_audio_bank_lmdb_names_the_key_and_skip_bad_skips_it(recordings, tmp_path):
    good, bad = recordings
    entries = {"good": Path(good).read_bytes(), "overstated": Path(bad).read_bytes()}
    with pytest.raises(NoiseLmdbError, match=f"noise 'overstated': .*{OVERSTATED} frames"):
        decode_noise(entries["overstated"], "overstated")
    path = tmp_path / "noise.lmdb"
    make_lmdb(path, entries)
    with pytest.raises(BuildError) as err:
        build_noise_lmdb(str(path), BuildOptions(out=str(tmp_path / "pack"), progress=False))
    [problem] = err.value.problems
    assert problem.key == "overstated" and str(OVERSTATED) in problem.reason
    kept = build_noise_lmdb(str(path), BuildOptions(out=str(tmp_path / "kept"), progress=False, skip_bad=True))
    assert open_pack(kept.out).keys.tolist() == ["good"]


def _patch_mp4_durations(data: bytes, divisor: int) -> bytes:
    """``data`` with the movie's and the track's stated durations (``mvhd``, ``mdhd``, version 0) cut by
    ``divisor``: the packets, and so the decoded audio, stay as they are."""
    patched = bytearray(data)
    for atom in (b"mvhd", b"mdhd"):
        at = patched.find(atom) + 4 + 4 + 8 + 4  # version/flags, creation and modification times, time scale
        duration = int.from_bytes(patched[at:at + 4], "big")
        patched[at:at + 4] = (duration // divisor).to_bytes(4, "big")
    return bytes(patched)


@pytest.mark.real_data
def test_pyav_decode_is_bounded_by_the_containers_stated_duration(real_audio, tmp_path):
    """A PyAV-decoded file may decode to at most twice the duration its container states plus 10 s: an M4A of
    24 s of real speech whose header states 1.2 s is refused by name, the same file with its own header is read."""
    import av

    speech, rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="float32")
    speech = np.tile(speech, -(-24 * rate // len(speech)))[:24 * rate]
    honest = tmp_path / "speech.m4a"
    with av.open(str(honest), "w") as container:
        stream = container.add_stream("aac", rate=rate, layout="mono")
        for start in range(0, len(speech), 1024):
            frame = av.AudioFrame.from_ndarray(speech[None, start:start + 1024], format="fltp", layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    assert abs(read_audio(str(honest)).num_frames - len(speech)) <= 4096
    lying = tmp_path / "lying.m4a"
    lying.write_bytes(_patch_mp4_durations(honest.read_bytes(), 20))
    for reader in (lambda: read_audio(str(lying)), lambda: probe_audio(str(lying)),
                   lambda: read_audio_bytes(lying.read_bytes(), "t.tar:lying.m4a")):
        with pytest.raises(AudioError, match=r"decodes to more than \d+ frames \(its container states 1\.2"):
            reader()


def _adts(speech: np.ndarray, rate: int, layout: str) -> bytes:
    """``speech`` encoded as a raw AAC (ADTS) stream: self-framed, so two of them joined end to end decode as one
    file whose rate or channel count changes where the second begins."""
    import av

    channels = 2 if layout == "stereo" else 1
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="adts") as container:
        stream = container.add_stream("aac", rate=rate, layout=layout)
        for start in range(0, len(speech), 1024):
            frame = av.AudioFrame.from_ndarray(np.tile(speech[None, start:start + 1024], (channels, 1)),
                                               format="fltp", layout=layout)
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


@pytest.mark.real_data
def test_a_pyav_stream_whose_rate_or_channels_change_midway_is_refused_by_name(real_audio, tmp_path):
    """Real speech as 16 kHz mono AAC, then the same at 48 kHz (it would be read at 48 kHz whole: the first part
    three times too fast), or in stereo (the parts' shapes do not join): refused naming the file and the change."""
    speech, rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="float32")
    speech = speech[:rate]
    first = _adts(speech, rate, "mono")
    path = tmp_path / "one.aac"
    path.write_bytes(first)
    assert read_audio(str(path)).sample_rate == rate
    for name, second, change in [("rate", _adts(speech, 48000, "mono"), f"{rate} Hz, 1 channel to 48000 Hz, 1 channel"),
                                 ("channels", _adts(speech, rate, "stereo"), f"{rate} Hz, 1 channel to {rate} Hz, 2 channels")]:
        joined = tmp_path / f"{name}.aac"
        joined.write_bytes(first + second)
        for reader in (read_audio, probe_audio):
            with pytest.raises(AudioError, match=f"{joined}: the audio changes from {change} after"):
                reader(str(joined))


@pytest.mark.real_data
def test_a_pyav_path_is_the_file_it_names_never_an_ffmpeg_protocol(real_audio, tmp_path, monkeypatch):
    """A relative list path that starts like one of FFmpeg's protocols (``cache:``, ``pipe:``, ``http:`` with a
    directory of that name) is the file of that name: FFmpeg would read another file (``cache:a.m4a`` is
    ``a.m4a``), standard input or the network."""
    speech, rate = soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="float32")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "speech.aac").write_bytes(_adts(speech[:rate], rate, "mono"))
    (tmp_path / "cache:speech.aac").write_bytes(_adts(speech[:rate // 2], rate, "mono"))
    whole, named = read_audio("speech.aac"), read_audio("cache:speech.aac")
    assert abs(whole.num_frames - rate) <= 2048 and abs(named.num_frames - rate // 2) <= 2048
    assert probe_audio("cache:speech.aac").frames == named.num_frames
