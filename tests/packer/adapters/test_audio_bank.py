"""``speechpack build audio-bank``: noise and RIR banks from real recordings (Debian qabcs-data, alsa-utils,
jconvolver-config-files), corrupt input, and simulated RIRs."""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest
import soundfile
import soxr
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader import open_pack
from speechpack.packer.adapters.audio_bank import SimulationOptions, draw_rooms
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.constants import KIND_NOISE, KIND_RIR, MANIFEST_NAME, SKIPPED_NAME, STREAM_AUDIO
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.format import MINOR_BANKS

FULL_SCALE = 32768.0
_QABCS = "/usr/share/qabcs/abcs/all/noises/{}.ogg"
#: Real noises: (package, path).  qabcs-data's .ogg clips cover 11.025 to 96 kHz, mono and stereo.
NOISES = {
    "moose.ogg": ("qabcs-data", _QABCS.format("moose")),  # 11025 Hz mono
    "animals/dolphin.ogg": ("qabcs-data", _QABCS.format("dolphin")),  # 22050 Hz stereo
    "animals/glove.ogg": ("qabcs-data", _QABCS.format("glove")),  # 32000 Hz stereo
    "xun.ogg": ("qabcs-data", _QABCS.format("xun")),  # 96000 Hz mono
    "alsa/Noise.wav": ("alsa-utils", "/usr/share/sounds/alsa/Noise.wav"),  # 48000 Hz mono PCM_16
}
_REVERBS = "/usr/share/jconvolver/config-files/demo-reverbs"
#: A real impulse-response pair (48 kHz mono float WAV each).
STREET2 = [("jconvolver-config-files", f"{_REVERBS}/street2-L.wav"),
           ("jconvolver-config-files", f"{_REVERBS}/street2-R.wav")]

def _require(package: str, path: str) -> str:
    """A real file: skip when missing locally, fail in CI (``CI`` set), naming the package (as ``real_audio``)."""
    if not os.path.isfile(path):
        message = (f"real recording {path} is missing: install the Debian package {package} "
                   f"(apt-get install -y --no-install-recommends {package})")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def _build(*args: str):
    return CliRunner().invoke(main, ["build", "audio-bank", "--no-progress", *args], catch_exceptions=False)


def _expected(path: str, rate: int) -> np.ndarray:
    """The source as the pack should hold it: decoded, soxr-resampled, ``[C, T]``."""
    data, orig = soundfile.read(path, dtype="float32", always_2d=True)
    if orig != rate:
        data = soxr.resample(data, orig, rate)
    return np.ascontiguousarray(data.T, dtype=np.float32)


def _assert_reads_back(pack, sources: dict[str, str], rate: int) -> None:
    """Every sample equals its resampled source within int16 quantisation (half a step, times the decode scale)."""
    table = pack.streams[STREAM_AUDIO]
    for index, key in enumerate(pack.keys):
        sample = pack.sample(index)
        expected = _expected(sources[key], rate)
        assert sample.mix is None
        assert sample.targets.shape == expected.shape, key
        step = float(table.scale[pack.segments_of(STREAM_AUDIO, index)[0]]) / FULL_SCALE
        np.testing.assert_allclose(sample.targets, expected, rtol=0, atol=0.5 * step + 1e-6, err_msg=key)


@pytest.fixture
def noise_dir(tmp_path):
    """A directory of real noises, some in sub-directories; returns (directory, key -> source path)."""
    root = tmp_path / "noises"
    sources = {}
    for key, (package, path) in NOISES.items():
        target = root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_require(package, path), target)
        sources[key] = path
    (root / "README.txt").write_text("not audio: left out of the scan\n")
    return root, sources


@pytest.mark.real_data
def test_noise_bank_from_a_directory(noise_dir, tmp_path):
    root, sources = noise_dir
    out = tmp_path / "bank"
    result = _build("--kind", "noise", str(root), "--out", str(out), "--workers", "2")
    assert result.exit_code == 0, result.output
    assert "packed 5 samples" in result.output
    pack = open_pack(out)
    assert pack.kind == KIND_NOISE and pack.manifest.format_minor == MINOR_BANKS
    assert list(pack.keys) == sorted(sources)  # relative, /-separated, sorted; README.txt left out
    assert all(pack.speakers_of(i) == (KIND_NOISE,) for i in range(len(pack)))
    _assert_reads_back(pack, sources, 16000)
    channels = dict(zip(pack.keys, pack.streams[STREAM_AUDIO].channels))
    assert channels["animals/dolphin.ogg"] == 2 and channels["moose.ogg"] == 1  # all channels kept
    assert dict(zip(pack.keys, pack.orig_sample_rate))["xun.ogg"] == 96000
    report = validate_pack(str(out))
    assert report.ok, report.describe()
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["provenance"]["options"]["kind"] == KIND_NOISE
    assert manifest["provenance"]["input"]["path"] == str(root)


@pytest.mark.real_data
def test_bank_is_byte_identical_whatever_the_workers(noise_dir, tmp_path):
    root, _ = noise_dir
    for workers in ("1", "3"):
        assert _build("--kind", "noise", str(root), "--out", str(tmp_path / workers), "--workers", workers,
                      "--sample-rate", "8000").exit_code == 0
    for name in (MANIFEST_NAME, "shard-000000/audio.npy", "shard-000000/index.json"):
        assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "3" / name).read_bytes(), name


@pytest.mark.real_data
def test_rir_bank_from_a_list_keeps_the_responses_as_decoded(tmp_path):
    paths = [_require(package, path) for package, path in STREET2]
    stereo = tmp_path / "street2-stereo.wav"  # the pair as one 2-channel response
    left, rate = soundfile.read(paths[0], dtype="float32")
    right, _ = soundfile.read(paths[1], dtype="float32")
    soundfile.write(stereo, np.stack([left, right], axis=1), rate, subtype="FLOAT")
    listed = [*paths, str(stereo)]
    list_path = tmp_path / "rirs.list"
    list_path.write_text("# the street2 pair\n" + "\n".join(listed) + "\n\n")
    out = tmp_path / "rirs"
    result = _build("--kind", "rir", str(list_path), "--out", str(out), "--sample-rate", "16000")
    assert result.exit_code == 0, result.output
    pack = open_pack(out)
    assert pack.kind == KIND_RIR and list(pack.keys) == listed  # keys exactly as listed, in list order
    assert [int(line) for line in np.load(out / "columns" / "samples.npy")["line"]] == [2, 3, 4]
    assert all(pack.speakers_of(i) == (KIND_RIR,) for i in range(len(pack)))
    _assert_reads_back(pack, dict(zip(listed, listed)), 16000)
    assert pack.sample(2).targets.shape[0] == 2
    # Not normalised: the statistics describe the response as decoded (peak of the resampled source).
    table = pack.streams[STREAM_AUDIO]
    expected_peak = np.abs(_expected(paths[0], 16000) - _expected(paths[0], 16000).mean()).max()
    assert table.peak[0] == pytest.approx(expected_peak, abs=1.0 / FULL_SCALE * table.scale[0])
    assert expected_peak < 0.9  # a real IR far from full scale stays so
    assert validate_pack(str(out)).ok


@pytest.mark.real_data
def test_a_corrupt_file_fails_the_build_or_is_skipped(noise_dir, tmp_path):
    root, sources = noise_dir
    (root / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk" + bytes(64))
    out = tmp_path / "bank"
    result = _build("--kind", "noise", str(root), "--out", str(out))
    assert result.exit_code == 1
    assert "broken.wav" in result.output and "cannot decode audio" in result.output
    assert not out.exists()  # nothing half-written looks like a pack
    result = _build("--kind", "noise", str(root), "--out", str(out), "--skip-bad")
    assert result.exit_code == 0, result.output
    pack = open_pack(out)
    assert list(pack.keys) == sorted(sources)
    skipped = json.loads((out / SKIPPED_NAME).read_text())["skipped"]
    assert [entry["key"] for entry in skipped] == ["broken.wav"]
    assert validate_pack(str(out)).ok


@pytest.mark.real_data
def test_missing_listed_file_and_duplicates_are_reported_by_line(tmp_path):
    good = _require(*STREET2[0])
    list_path = tmp_path / "rirs.list"
    list_path.write_text(f"{good}\n{tmp_path}/absent.wav\n{good}\n")
    result = _build("--kind", "rir", str(list_path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "line 2" in result.output and "file not found" in result.output
    assert "line 3" in result.output and "duplicate path (first on line 1)" in result.output


def test_usage_errors(tmp_path):
    assert _build("--kind", "noise", "--out", str(tmp_path / "o")).exit_code == 2  # neither input
    assert _build("--kind", "noise", "--simulate", "2", "--out", str(tmp_path / "o")).exit_code == 2
    assert _build("--kind", "rir", str(tmp_path), "--simulate", "2", "--out", str(tmp_path / "o")).exit_code == 2
    assert _build("--kind", "rir", str(tmp_path), "--rt60", "0.1", "0.2", "--out", str(tmp_path / "o")).exit_code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _build("--kind", "noise", str(empty), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "holds no audio files" in result.output
    with pytest.raises(SpeechpackError, match="exceeds"):
        SimulationOptions(count=1, rt60=(0.5, 0.2))


@pytest.mark.parametrize("seed", [0, 7])
def test_room_draws_are_a_function_of_the_seed(seed):
    options = SimulationOptions(count=20, seed=seed, room_min=(2.0, 2.0, 2.0), room_max=(4.0, 3.0, 2.5),
                                distance=(1.0, 5.0))
    rooms = draw_rooms(options)
    assert rooms == draw_rooms(options) and len(rooms) == 20
    assert [r.key for r in rooms] == sorted(r.key for r in rooms)
    for room in rooms:
        assert all(2.0 <= d <= 4.0 for d in room.room)
        for point in (room.source, room.microphone):  # both inside the room, off the walls
            assert all(0.3 - 1e-3 <= p <= d - 0.3 + 1e-3 for p, d in zip(point, room.room))
        assert 0.0 < room.describe()["distance"] <= 5.0 + 1e-2


def _require_pyroomacoustics() -> None:
    """The optional ``rir`` extra: skip without it locally, fail in CI (scripts/test.sh installs it)."""
    try:
        import pyroomacoustics  # noqa: F401
    except ImportError:
        message = "pyroomacoustics is missing: pip install 'speechpack[rir]'"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_simulated_rirs_are_deterministic(tmp_path):
    _require_pyroomacoustics()
    args = ["--kind", "rir", "--simulate", "3", "--rt60", "0.15", "0.3", "--room-min", "3", "3", "2.5",
            "--room-max", "5", "4", "3", "--sample-rate", "8000"]
    for name, extra in (("a", ["--seed", "5"]), ("b", ["--seed", "5", "--workers", "2"]), ("c", ["--seed", "6"])):
        result = _build(*args, *extra, "--out", str(tmp_path / name))
        assert result.exit_code == 0, result.output
    pack = open_pack(tmp_path / "a")
    assert len(pack) == 3 and pack.kind == KIND_RIR and pack.manifest.format_minor == MINOR_BANKS
    assert list(pack.keys) == ["sim-000000", "sim-000001", "sim-000002"]
    for name in (MANIFEST_NAME, "shard-000000/audio.npy"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    audio = "shard-000000/audio.npy"
    assert (tmp_path / "a" / audio).read_bytes() != (tmp_path / "c" / audio).read_bytes()  # another seed
    rir = pack.sample(0).targets
    assert rir.shape[0] == 1 and np.abs(rir).max() > 0.01  # a direct path, not silence
    index = json.loads((tmp_path / "a" / "shard-000000" / "index.json").read_text())
    assert index["samples"][0]["provenance"]["simulated"]["rt60"] <= 0.3
    assert validate_pack(str(tmp_path / "a")).ok


def test_each_room_is_simulated_once(tmp_path, monkeypatch):
    """Sizing a simulated RIR needs the RIR; the one simulated while planning is the one packed."""
    _require_pyroomacoustics()
    from speechpack.packer.adapters import audio_bank

    simulated = []
    original = audio_bank.simulate_rir

    def counted(room, sample_rate):
        simulated.append(room.key)
        return original(room, sample_rate)

    monkeypatch.setattr(audio_bank, "simulate_rir", counted)  # one worker: planning and packing run in this process
    result = _build("--kind", "rir", "--simulate", "4", "--sample-rate", "8000", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert sorted(simulated) == [f"sim-{i:06d}" for i in range(4)]
    assert validate_pack(str(tmp_path / "o")).ok


def test_simulation_without_pyroomacoustics_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyroomacoustics", None)  # import raises ImportError
    result = _build("--kind", "rir", "--simulate", "2", "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert "pyroomacoustics" in result.output and "speechpack[rir]" in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.real_data
def test_validate_requires_the_kind_as_the_one_speaker(noise_dir, tmp_path):
    from speechpack.packer.validate.pack import _check_record_shape
    from speechpack.packer.validate.report import PackReport

    root, _ = noise_dir
    out = tmp_path / "bank"
    assert _build("--kind", "noise", str(root), "--out", str(out)).exit_code == 0
    pack = open_pack(out)
    record = json.loads((out / "shard-000000" / "index.json").read_text())["samples"][0]
    report = PackReport(str(out))
    _check_record_shape(record, pack.manifest, "at", report)
    assert report.ok
    for bad in ({**record, "speakers": ["spk1"]},
                {**record, "streams": {STREAM_AUDIO: record["streams"][STREAM_AUDIO] * 2}}):
        report = PackReport(str(out))
        _check_record_shape(bad, pack.manifest, "at", report)
        assert not report.ok and "needs the one speaker 'noise' and one audio segment" in str(report.errors[0])
