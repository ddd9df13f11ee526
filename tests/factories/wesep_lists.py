"""WeSep raw lists of real recordings: the line specs (``Mix``, ``Source``), what each line should pack to, and the
writers behind the ``wesep_list`` fixture (tests/conftest.py); plus hand-made list lines.

The audio is cropped from real recordings (factories.recordings) into the test's ``tmp_path``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile

from factories.recordings import FULL_SCALE


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


def write_mixture(spec: Mix, folder: Path, number: int) -> ExpectedLine:
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


def write_source(spec: Source, folder: Path, number: int) -> ExpectedLine:
    folder.mkdir(parents=True)
    crop, rate = _crop_int16(spec.path, spec.seconds, spec.start)
    path = folder / "source.wav"
    soundfile.write(path, crop, rate, subtype="PCM_16")
    speaker = _speaker_name(spec.path)
    record = {"key": spec.key, "spk": [speaker], "src": {speaker: [str(path)]}}
    return ExpectedLine(line=number, key=spec.key, speakers=[speaker], rate=rate,
                        targets=crop[None, :].astype(np.float64) / FULL_SCALE, mix=None, record=record)


def mixture_line(key: str, mix: list[str], src: dict[str, list[str]], spk: list[str] | None = None) -> dict:
    """A hand-made mixture line (WeSep's raw-list JSON); ``spk`` defaults to ``src``'s speakers, in order."""
    return {"key": key, "spk": list(src) if spk is None else spk, "mix": {"default": mix}, "src": src}


def source_line(key: str, spk: str, path: str) -> dict:
    """A hand-made single-speaker line (no ``mix``)."""
    return {"key": key, "spk": [spk], "src": {spk: [path]}}
