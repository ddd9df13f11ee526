"""Shared fixtures: real recordings from Debian packages, WeSep raw-list factories, generated audio.

Real speech comes from installed Debian packages (see docs/testing.md, "Real recordings"); it is read from
its installed path and cropped into ``tmp_path``, never copied into the repository.  When a recording is missing
a test skips locally and fails in CI (``CI`` set), naming the package to install.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr

#: Full scale of the pack's int16 storage (a stored value v decodes to v / 32768 * scale).
FULL_SCALE = 32768.0

_LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-{}.wav"

#: corpus -> (Debian package, sample rate, recordings).  Every file was checked: mono, at the stated rate.
REAL_CORPORA: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "pocketsphinx": (
        "pocketsphinx-testdata",
        16000,
        tuple(_LIBRIVOX.format(n) for n in ("0870", "0890", "0920", "0930", "0880")),
    ),
    "alsa": (
        "alsa-utils",
        48000,
        tuple(f"/usr/share/sounds/alsa/{n}.wav"
              for n in ("Front_Center", "Rear_Left", "Side_Right", "Front_Right", "Noise")),
    ),
    "codec2": (
        "codec2-examples",
        8000,
        # cross.wav is mu-law: libsndfile decodes it to 16-bit values, so it crops into PCM_16 exactly.
        tuple(f"/usr/share/codec2/wav/{n}.wav" for n in ("hts1a", "mmt1", "cross", "hts2a", "morig")),
    ),
}


def _missing(path: str, package: str) -> None:
    message = (f"real recording {path} is missing: install the Debian package {package} "
               f"(apt-get install -y --no-install-recommends {package})")
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Mark every test that uses real recordings ``real_data`` (before ``-m`` selects), wherever it lives."""
    for item in items:
        if "real_audio" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_data)


@pytest.fixture
def real_audio():
    """``real_audio(corpus, count=None)``: paths of installed real recordings of ``corpus`` (see ``REAL_CORPORA``).

    A missing recording fails the test in CI and skips it elsewhere; either way the message names the package.
    """

    def get(corpus: str, count: int | None = None) -> list[str]:
        package, _rate, paths = REAL_CORPORA[corpus]
        chosen = list(paths if count is None else paths[:count])
        if count is not None and count > len(paths):
            raise ValueError(f"{corpus} has {len(paths)} configured recordings, asked for {count}")
        for path in chosen:
            if not os.path.isfile(path):
                _missing(path, package)
        return chosen

    return get


def corpus_rate(corpus: str) -> int:
    return REAL_CORPORA[corpus][1]


# ---------------------------------------------------------------------------------------------------------------
# WeSep raw lists built from real recordings
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mix:
    """A mixture line: crops of ``sources`` (one real recording per speaker), summed into a mixture.

    ``layout``: ``"mono"`` (one mixture file), ``"two_files"`` (two mono mixture files, concatenated by the
    packer along channels) or ``"stereo"`` (one 2-channel file).  Channel 0 is the plain sum; channel 1, where
    there is one, is a different weighting (``s0 - s1 - ...``; integer weights keep a ``FLOAT`` mixture on
    the int16 grid, so it stores exactly).  ``subtype`` is the mixture's WAV subtype:
    ``FLOAT`` keeps sums above full scale; ``PCM_16`` mixtures are scaled to fit.  ``gain`` multiplies a
    ``FLOAT`` mixture (``gain > 1`` pushes it past 1.0).  ``src_stereo`` writes every source as a 2-channel file
    (channel 1 a reversed copy) followed by a second, unused file, to check that the target is the first channel
    of the first file.
    """

    key: str
    sources: tuple[str, ...]
    seconds: float = 1.5
    start: float = 0.25
    layout: str = "mono"
    subtype: str = "FLOAT"
    gain: float = 1.0
    src_stereo: bool = False


@dataclass(frozen=True)
class Source:
    """A single-speaker line (no ``mix``): one mono crop of a real recording."""

    key: str
    path: str
    seconds: float = 1.5
    start: float = 0.25


@dataclass
class ExpectedLine:
    """What one written line should pack to, at the recordings' original rate."""

    line: int
    key: str
    speakers: list[str]
    rate: int
    targets: np.ndarray  # [N, T] float64: the first channel of the first src file, as soundfile decodes it
    mix: np.ndarray | None  # [C, T] float64: the mixture channels as soundfile decodes them (None for a source)
    record: dict  # the JSON object written to the list


@dataclass
class WesepCase:
    list_path: Path
    lines: list[ExpectedLine] = field(default_factory=list)

    def by_key(self) -> dict[str, ExpectedLine]:
        return {line.key: line for line in self.lines}


def _crop_int16(path: str, seconds: float, start: float) -> tuple[np.ndarray, int]:
    data, rate = soundfile.read(path, dtype="int16", always_2d=True)
    first = int(round(start * rate))
    length = int(round(seconds * rate))
    crop = data[first:first + length, 0]
    if len(crop) != length:
        raise ValueError(f"{path} is too short for a {seconds} s crop at {start} s")
    return crop, rate


def _speaker_name(path: str) -> str:
    return "spk-" + Path(path).stem.replace("sense_and_sensibility_01_austen_64kb-", "librivox")


@pytest.fixture
def wesep_list(tmp_path):
    """``wesep_list(items, name="raw.list") -> WesepCase``: write a WeSep raw list and its audio into tmp_path.

    ``items`` are ``Mix`` or ``Source`` (audio is cropped from real recordings and written here), ``dict``
    (dumped as one JSON line, verbatim) or ``str`` (written as the line, verbatim: blank or broken lines).
    Line numbers in the returned case are 1-based, as an editor shows them.
    """
    counter = {"n": 0}

    def make(items, name: str = "raw.list") -> WesepCase:
        counter["n"] += 1
        audio_dir = tmp_path / f"audio{counter['n']}"
        audio_dir.mkdir()
        case = WesepCase(list_path=tmp_path / name)
        texts = []
        for number, item in enumerate(items, start=1):
            if isinstance(item, str):
                texts.append(item)
                continue
            if isinstance(item, dict):
                texts.append(json.dumps(item))
                continue
            if isinstance(item, Mix):
                expected = _write_mixture(item, audio_dir / item.key, number)
            elif isinstance(item, Source):
                expected = _write_source(item, audio_dir / item.key, number)
            else:
                raise TypeError(f"cannot write {item!r} as a list line")
            case.lines.append(expected)
            texts.append(json.dumps(expected.record))
        case.list_path.write_text("".join(t if t.endswith("\n") else t + "\n" for t in texts), encoding="utf-8")
        return case

    return make


def _write_mixture(spec: Mix, folder: Path, number: int) -> ExpectedLine:
    folder.mkdir(parents=True)
    crops, rates = zip(*(_crop_int16(p, spec.seconds, spec.start) for p in spec.sources))
    if len(set(rates)) != 1:
        raise ValueError(f"{spec.key}: sources have different rates {rates}")
    rate = rates[0]
    speakers = [f"{_speaker_name(p)}" for p in spec.sources]
    if len(set(speakers)) != len(speakers):
        speakers = [f"{s}-{i}" for i, s in enumerate(speakers)]
    src: dict[str, list[str]] = {}
    for i, (spk, crop) in enumerate(zip(speakers, crops)):
        path = folder / f"src{i}.wav"
        if spec.src_stereo:
            soundfile.write(path, np.stack([crop, crop[::-1]], axis=1), rate, subtype="PCM_16")
            unused = folder / f"src{i}-unused.wav"
            soundfile.write(unused, crop[::-1], rate, subtype="PCM_16")
            src[spk] = [str(path), str(unused)]
        else:
            soundfile.write(path, crop, rate, subtype="PCM_16")
            src[spk] = [str(path)]
    ints = np.stack(crops).astype(np.int64)  # [N, T]
    # Channel 0 is the plain sum; channel 1 weights the speakers differently (a second "microphone").
    # Integer weights: a FLOAT sum of int16 values stays an exact multiple of 1/32768.
    weights = [np.ones(len(crops)), np.array([1.0] + [-1.0] * (len(crops) - 1))]
    channels = 1 if spec.layout == "mono" else 2
    if spec.subtype == "PCM_16":
        sums = [np.rint(w @ ints) for w in weights[:channels]]
        peak = max(np.abs(s).max() for s in sums)
        factor = min(1.0, 32000.0 / peak)
        mix_int = np.stack([np.rint(s * factor) for s in sums]).astype(np.int16)
        mix = mix_int.astype(np.float64) / FULL_SCALE
        to_write = mix_int
    elif spec.subtype == "FLOAT":
        mix = np.stack([(w @ ints) / FULL_SCALE * spec.gain for w in weights[:channels]])
        to_write = mix.astype(np.float32)
        mix = to_write.astype(np.float64)
    else:
        raise ValueError(f"unsupported mixture subtype {spec.subtype!r}")
    if spec.layout == "mono":
        paths = [folder / "mix.wav"]
        soundfile.write(paths[0], to_write[0], rate, subtype=spec.subtype)
    elif spec.layout == "two_files":
        paths = [folder / "mix-ch0.wav", folder / "mix-ch1.wav"]
        for path, channel in zip(paths, to_write):
            soundfile.write(path, channel, rate, subtype=spec.subtype)
    elif spec.layout == "stereo":
        paths = [folder / "mix-stereo.wav"]
        soundfile.write(paths[0], to_write.T, rate, subtype=spec.subtype)
    else:
        raise ValueError(f"unknown layout {spec.layout!r}")
    record = {"key": spec.key, "spk": speakers, "mix": {"default": [str(p) for p in paths]}, "src": src}
    targets = np.stack(crops).astype(np.float64) / FULL_SCALE
    return ExpectedLine(line=number, key=spec.key, speakers=speakers, rate=rate, targets=targets, mix=mix,
                        record=record)


def _write_source(spec: Source, folder: Path, number: int) -> ExpectedLine:
    folder.mkdir(parents=True)
    crop, rate = _crop_int16(spec.path, spec.seconds, spec.start)
    path = folder / "source.wav"
    soundfile.write(path, crop, rate, subtype="PCM_16")
    speaker = _speaker_name(spec.path)
    record = {"key": spec.key, "spk": [speaker], "src": {speaker: [str(path)]}}
    return ExpectedLine(line=number, key=spec.key, speakers=[speaker], rate=rate,
                        targets=crop[None, :].astype(np.float64) / FULL_SCALE, mix=None, record=record)


def at_rate(audio: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """``[C, T]`` audio as the packer resamples it (soxr HQ on float32 ``[T, C]``), returned as float64."""
    if rate == target_rate:
        return audio.astype(np.float64)
    resampled = soxr.resample(np.ascontiguousarray(audio.T, dtype=np.float32), rate, target_rate)
    return np.asarray(resampled, dtype=np.float64).T


# ---------------------------------------------------------------------------------------------------------------
# Generated audio for quick unit tests
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def make_wav(tmp_path):
    """``make_wav(name, seconds=0.5, rate=16000, channels=1, subtype="PCM_16", kind="sine", ...) -> str``.

    Writes a sine (``kind="sine"``, ``freq`` Hz) or seeded white noise (``kind="noise"``) at ``amplitude`` into
    ``tmp_path/gen/name``; or ``data`` (``[T]`` or ``[T, C]``) verbatim.  PCM_16 audio is rounded to int16 first,
    so the file decodes to exactly the values generated.  Returns the path as a string.
    """
    folder = tmp_path / "gen"
    folder.mkdir(exist_ok=True)

    def make(name: str, seconds: float = 0.5, rate: int = 16000, channels: int = 1, subtype: str = "PCM_16",
             kind: str = "sine", freq: float = 440.0, amplitude: float = 0.5, seed: int = 0,
             data: np.ndarray | None = None) -> str:
        path = folder / name
        if data is None:
            frames = int(round(seconds * rate))
            t = np.arange(frames) / rate
            columns = []
            for c in range(channels):
                if kind == "sine":
                    columns.append(amplitude * np.sin(2 * np.pi * freq * (c + 1) * t))
                elif kind == "noise":
                    columns.append(amplitude * np.random.default_rng(seed + c).uniform(-1, 1, frames))
                else:
                    raise ValueError(f"unknown kind {kind!r}")
            data = np.stack(columns, axis=1) if columns else np.zeros((frames, 0))
            if subtype == "PCM_16":
                data = np.clip(np.rint(data * FULL_SCALE), -32768, 32767).astype(np.int16)
            else:
                data = data.astype(np.float32 if subtype == "FLOAT" else np.float64)
        soundfile.write(path, data, rate, subtype=subtype)
        return str(path)

    return make


@pytest.fixture
def write_list(tmp_path):
    """``write_list(lines, name="raw.list") -> Path``: ``dict`` lines are dumped as JSON, ``str`` lines verbatim."""

    def write(lines, name: str = "raw.list") -> Path:
        path = tmp_path / name
        path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
                        encoding="utf-8")
        return path

    return write


def mixture_line(key: str, mix: list[str], src: dict[str, list[str]], spk: list[str] | None = None) -> dict:
    return {"key": key, "spk": list(src) if spk is None else spk, "mix": {"default": mix}, "src": src}


def source_line(key: str, spk: str, path: str) -> dict:
    return {"key": key, "spk": [spk], "src": {spk: [path]}}


def pack_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
