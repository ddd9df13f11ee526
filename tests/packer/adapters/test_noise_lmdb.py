"""WeSep's noise LMDB: read as it is (``media/noise_lmdb.py``) and converted once into a noise pack
(``speechpack build audio-bank --kind noise --lmdb``), from an LMDB made exactly as WeSep's ``tools/make_lmdb.py``
makes one (keys -> the bytes of real recordings, ``__keys__`` -> the pickled key list)."""

from __future__ import annotations

import io
import json
import os
import pickle

import numpy as np
import pytest
import soundfile
import soxr
from click.testing import CliRunner

from speechpack.cli import main
from factories import require_recording
from factories.noise_lmdb import RECORDINGS, make_lmdb
from speechpack.loader import open_pack
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.constants import KIND_NOISE, SKIPPED_NAME, STREAM_AUDIO
from speechpack.media.noise_lmdb import (
    NOISE_SNR_DB,
    SPEECH_SNR_DB,
    NoiseLmdb,
    NoiseLmdbError,
    decode_noise,
    noise_snr_range,
)

FULL_SCALE = 32768.0


class _Tripwire:
    """Unpickled, it creates the directory ``path``: proof, across processes, that someone unpickled it."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def _flac_bytes(path: str) -> bytes:
    """A real recording re-encoded as FLAC in memory (an LMDB may hold any format libsndfile reads)."""
    data, rate = soundfile.read(path, dtype="int16")
    buffer = io.BytesIO()
    soundfile.write(buffer, data, rate, format="FLAC")
    return buffer.getvalue()


@pytest.fixture
def noise_lmdb(tmp_path):
    """A make_lmdb.py LMDB of real recordings (one re-encoded to FLAC); returns (path, key -> bytes)."""
    entries = {key: open(require_recording(package, path), "rb").read() for key, (package, path) in RECORDINGS.items()}
    entries["speech_librivox_flac"] = _flac_bytes(RECORDINGS["speech_librivox"][1])
    path = tmp_path / "noise.lmdb"
    make_lmdb(path, entries)
    return path, entries


def _expected(data: bytes, rate: int) -> np.ndarray:
    samples, orig = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    if orig != rate:
        samples = soxr.resample(samples, orig, rate)
    return np.ascontiguousarray(samples.T, dtype=np.float32)


def _refuse_pickle(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the reader unpickled something")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)


@pytest.mark.real_data
def test_keys_come_from_a_cursor_never_from_the_pickle(noise_lmdb, monkeypatch):
    path, entries = noise_lmdb
    _refuse_pickle(monkeypatch)
    with NoiseLmdb(str(path)) as reader:
        keys = reader.keys()
    assert keys == sorted(entries)  # LMDB's byte order; __keys__ left out
    assert "__keys__" not in keys


@pytest.mark.real_data
def test_entries_decode_and_resample(noise_lmdb):
    path, entries = noise_lmdb
    reader = NoiseLmdb(str(path))
    for key, data in entries.items():
        native, rate = reader.read(key)
        assert rate == soundfile.info(io.BytesIO(data)).samplerate
        np.testing.assert_array_equal(native, _expected(data, rate))
        at_16k, rate = reader.read(key, 16000)
        assert rate == 16000
        np.testing.assert_allclose(at_16k, _expected(data, 16000), atol=1e-6)
    assert reader.read("dolphin")[0].shape[0] == 2  # stereo kept
    # the FLAC re-encoding decodes to the same samples as the WAV it came from
    np.testing.assert_allclose(reader.read("speech_librivox_flac")[0], reader.read("speech_librivox")[0], atol=0)
    reader.close()


@pytest.mark.real_data
def test_reader_pickles_as_its_path(noise_lmdb):
    path, entries = noise_lmdb
    reader = NoiseLmdb(str(path))
    reader.keys()  # opened here
    copy = pickle.loads(pickle.dumps(reader))  # a worker's copy opens its own environment
    assert copy.path == str(path) and copy.keys() == sorted(entries)


def test_speech_prefix_rule():
    assert noise_snr_range("speech_babble_001") == SPEECH_SNR_DB == (10.0, 30.0)
    assert noise_snr_range("speech") == SPEECH_SNR_DB
    assert noise_snr_range("airplane") == NOISE_SNR_DB == (-5.0, 25.0)
    assert noise_snr_range("Speech_upper") == NOISE_SNR_DB  # WeSep's startswith is case-sensitive
    assert noise_snr_range("noise_speech") == NOISE_SNR_DB


def test_reader_errors(tmp_path):
    with pytest.raises(NoiseLmdbError, match="no such noise LMDB"):
        NoiseLmdb(str(tmp_path / "absent")).keys()
    only_keys = tmp_path / "only_keys.lmdb"
    make_lmdb(only_keys, {})
    with pytest.raises(NoiseLmdbError, match="holds no noise entries"):
        NoiseLmdb(str(only_keys)).keys()
    with pytest.raises(NoiseLmdbError, match="no noise 'nothing'"):
        NoiseLmdb(str(only_keys)).raw("nothing")
    with pytest.raises(NoiseLmdbError, match="noise 'junk': cannot decode audio"):
        decode_noise(b"not audio at all", "junk")


def _build(*args: str):
    return CliRunner().invoke(main, ["build", "audio-bank", "--no-progress", *args], catch_exceptions=False)


@pytest.mark.real_data
def test_lmdb_converts_into_a_valid_noise_pack(noise_lmdb, tmp_path):
    _, entries = noise_lmdb
    # __keys__ holds a pickle that creates a directory when loaded, in whatever process loads it
    tripwire = tmp_path / "unpickled"
    path = tmp_path / "trapped.lmdb"
    make_lmdb(path, entries, keys_pickle=pickle.dumps(_Tripwire(str(tripwire))))
    out = tmp_path / "pack"
    result = _build("--kind", "noise", "--lmdb", str(path), "--out", str(out), "--workers", "2")
    assert result.exit_code == 0, result.output
    assert f"packed {len(entries)} samples" in result.output
    report = validate_pack(str(out))
    assert report.ok, report.describe()
    pack = open_pack(out)
    assert pack.kind == KIND_NOISE
    assert list(pack.keys) == sorted(entries)  # LMDB keys kept as sample keys
    # so the SNR rule still applies from the pack
    assert [noise_snr_range(k) == SPEECH_SNR_DB for k in pack.keys] == [k.startswith("speech") for k in pack.keys]
    table = pack.streams[STREAM_AUDIO]
    for index, key in enumerate(pack.keys):
        expected = _expected(entries[key], 16000)
        got = pack.sample(index).targets
        assert got.shape == expected.shape, key
        step = float(table.scale[pack.segments_of(STREAM_AUDIO, index)[0]]) / FULL_SCALE
        np.testing.assert_allclose(got, expected, rtol=0, atol=0.5 * step + 1e-6, err_msg=key)
    assert dict(zip(pack.keys, pack.orig_sample_rate))["xun"] == 96000
    assert not tripwire.exists()


@pytest.mark.real_data
def test_a_corrupt_entry_is_named_and_can_be_skipped(noise_lmdb, tmp_path):
    path, entries = noise_lmdb
    entries = dict(entries, broken_fan=b"RIFF\x10\x00\x00\x00WAVEjunk" + bytes(64), empty_hum=b"")
    broken = tmp_path / "broken.lmdb"
    make_lmdb(broken, entries)
    out = tmp_path / "pack"
    result = _build("--kind", "noise", "--lmdb", str(broken), "--out", str(out))
    assert result.exit_code == 1
    assert "key 'broken_fan'" in result.output and "key 'empty_hum'" in result.output
    assert "cannot decode audio" in result.output
    assert not out.exists()  # no half-written pack
    result = _build("--kind", "noise", "--lmdb", str(broken), "--out", str(out), "--skip-bad")
    assert result.exit_code == 0, result.output
    skipped = json.loads((out / SKIPPED_NAME).read_text())["skipped"]
    assert sorted(entry["key"] for entry in skipped) == ["broken_fan", "empty_hum"]
    assert sorted(open_pack(out).keys) == sorted(k for k in entries if k not in ("broken_fan", "empty_hum"))
    assert validate_pack(str(out)).ok


def test_lmdb_usage_errors(tmp_path):
    make_lmdb(tmp_path / "x.lmdb", {})
    lmdb_path = str(tmp_path / "x.lmdb")
    assert _build("--kind", "rir", "--lmdb", lmdb_path, "--out", str(tmp_path / "o")).exit_code == 2
    assert _build("--kind", "noise", str(tmp_path), "--lmdb", lmdb_path, "--out", str(tmp_path / "o")).exit_code == 2
    result = _build("--kind", "noise", "--lmdb", lmdb_path, "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "holds no noise entries" in result.output
    not_lmdb = tmp_path / "plain"
    not_lmdb.mkdir()
    result = _build("--kind", "noise", "--lmdb", str(not_lmdb), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "cannot open as an LMDB" in result.output


def _one_hertz(path: str) -> bytes:
    """A real recording's first 3 samples in a WAV whose header says 1 Hz (a wrong rate in a real header)."""
    data, _rate = soundfile.read(path, dtype="int16")
    buffer = io.BytesIO()
    soundfile.write(buffer, data[:3], 1, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


@pytest.mark.real_data
def test_a_1_hz_entry_is_refused_online_by_key_before_resampling(noise_lmdb, tmp_path):
    import time

    path, entries = noise_lmdb
    slow = dict(entries, slow_hum=_one_hertz(RECORDINGS["alsa_noise"][1]))
    make_lmdb(tmp_path / "slow.lmdb", slow)
    reader = NoiseLmdb(str(tmp_path / "slow.lmdb"))
    started = time.monotonic()
    with pytest.raises(NoiseLmdbError, match=r"noise 'slow_hum': cannot resample from 1 Hz to 16000 Hz: the ratio is "
                                             r"beyond 1:1024"):
        reader.read("slow_hum", 16000)
    assert time.monotonic() - started < 2.0  # soxr never saw it (it took 12 s and 6.5 GB per draw)
    assert reader.read("slow_hum")[1] == 1  # read at its own rate it is what it is
    assert reader.read("airplane", 16000)[1] == 16000  # the others resample as before


@pytest.mark.real_data
def test_a_1_hz_entry_is_a_named_problem_of_the_build_and_can_be_skipped(noise_lmdb, tmp_path):
    _path, entries = noise_lmdb
    slow = dict(entries, slow_hum=_one_hertz(RECORDINGS["alsa_noise"][1]))
    make_lmdb(tmp_path / "slow.lmdb", slow)
    out = tmp_path / "pack"
    result = _build("--kind", "noise", "--lmdb", str(tmp_path / "slow.lmdb"), "--out", str(out))
    assert result.exit_code == 1
    assert "key 'slow_hum'" in result.output and "cannot resample from 1 Hz to 16000 Hz" in result.output
    assert not out.exists()
    result = _build("--kind", "noise", "--lmdb", str(tmp_path / "slow.lmdb"), "--out", str(out), "--skip-bad")
    assert result.exit_code == 0, result.output
    skipped = json.loads((out / SKIPPED_NAME).read_text())["skipped"]
    assert [entry["key"] for entry in skipped] == ["slow_hum"]
    assert sorted(open_pack(out).keys) == sorted(entries)


@pytest.mark.real_data
def test_an_entry_empty_after_resampling_is_named_as_any_adapter_names_it(noise_lmdb, tmp_path):
    """One sample at 48 kHz is none at 16 kHz: the build's problem says so in the words every adapter's plan uses
    (``packer.audio.store.resampled_frames``)."""
    _path, entries = noise_lmdb
    data, _rate = soundfile.read(RECORDINGS["alsa_noise"][1], dtype="int16")
    buffer = io.BytesIO()
    soundfile.write(buffer, data[:1], 48000, format="WAV", subtype="PCM_16")
    make_lmdb(tmp_path / "tiny.lmdb", dict(entries, tick=buffer.getvalue()))
    result = _build("--kind", "noise", "--lmdb", str(tmp_path / "tiny.lmdb"), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 1
    assert "key 'tick'" in result.output
    assert "empty after resampling: 1 sample(s) at 48000 Hz are 0 at 16000 Hz" in result.output
