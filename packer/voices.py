"""Synthetic speech-like voices for ``speechpack demo`` and tests: numpy only, no data, no downloads.

A classic source-filter model, crude but recognisably voice-like and, above all, made of *distinct* speakers:

- source: a Rosenberg glottal pulse train whose fundamental follows a slow intonation contour (declination plus
  smoothed random movement) with a little cycle-to-cycle jitter, plus aspiration noise gated by the glottis;
- filter: a cascade of five two-pole formant resonators per vowel, the vowel formants scaled by the voice's
  vocal-tract length factor (shorter tracts, as in women and children, have higher formants), and lip radiation;
- prosody: syllables of random vowels with smooth amplitude envelopes, noisy onsets and the odd pause.

Speakers differ in f0, tract length, open quotient (spectral tilt), breathiness, speaking rate and pitch range,
so mixtures of them are separable by ear and by simple measurements (f0, spectral centroid).

Recursive IIR filters cannot be vectorised in numpy and scipy is not a dependency, so the resonators are
applied in the frequency domain: the exact transfer function of the cascade is evaluated on a short FFT grid
and applied by overlap-add, once per vowel (the zero padding is long enough for every resonance to decay).
Vowel changes are crossfades between the per-vowel outputs.  Twenty seconds at 48 kHz take about 0.2 s.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

#: Formant frequencies (Hz) of five vowels for an average adult male tract (after Peterson & Barney, 1952);
#: F4 and F5 barely move between vowels.  A voice multiplies all of them by its ``tract_scale``.
VOWEL_FORMANTS: dict[str, tuple[float, ...]] = {
    "a": (730.0, 1090.0, 2440.0, 3300.0, 3750.0),
    "e": (530.0, 1840.0, 2480.0, 3300.0, 3750.0),
    "i": (270.0, 2290.0, 3010.0, 3500.0, 3900.0),
    "o": (570.0, 840.0, 2410.0, 3300.0, 3750.0),
    "u": (300.0, 870.0, 2240.0, 3300.0, 3750.0),
}
#: Formant bandwidths (Hz), F1..F5.
FORMANT_BANDWIDTHS = (70.0, 90.0, 120.0, 180.0, 250.0)

#: Peak level of a synthesised utterance: leaves headroom so that mixtures of a few voices stay below 0 dBFS.
DEFAULT_PEAK = 0.5


@dataclass(frozen=True)
class Voice:
    """One synthetic speaker.

    ``f0``: median fundamental in Hz.  ``tract_scale``: formant multiplier (1.0 an average adult male tract,
    ~1.15 female, ~1.3 child).  ``open_quotient``: open fraction of each glottal cycle (higher is softer, less
    high-frequency energy).  ``breathiness``: aspiration noise level relative to the voiced source.
    ``rate``: syllables per second.  ``intonation``: pitch movement in semitones.  ``jitter``: relative
    cycle-to-cycle f0 perturbation.
    """

    name: str
    f0: float
    tract_scale: float
    open_quotient: float = 0.6
    breathiness: float = 0.03
    rate: float = 4.5
    intonation: float = 3.0
    jitter: float = 0.01

    def describe(self) -> str:
        return (f"{self.name}: f0 {self.f0:.0f} Hz, vocal tract x{self.tract_scale:.2f}, "
                f"open quotient {self.open_quotient:.2f}, {self.rate:.1f} syllables/s")


def make_voices(n: int) -> list[Voice]:
    """``n`` clearly distinct voices, from a low male-like voice to a child-like one.

    f0 is spaced geometrically from 85 to 300 Hz (neighbours at least ~25% apart for n <= 6), and the tract
    scale rises with it as it does across men, women and children; the other parameters alternate so that
    neighbours also differ in timbre and tempo.  Deterministic: no randomness involved.
    """
    if n < 1:
        raise ValueError(f"need at least one voice, got {n}")
    voices = []
    for i in range(n):
        t = i / (n - 1) if n > 1 else 0.0
        voices.append(Voice(
            name=f"voice{i + 1}",
            f0=round(85.0 * (300.0 / 85.0) ** t, 1),
            tract_scale=round(0.9 + 0.4 * t + (0.03 if i % 2 else -0.03), 3),
            open_quotient=(0.5, 0.62, 0.7)[i % 3],
            breathiness=(0.02, 0.06, 0.035, 0.09)[i % 4],
            rate=(3.8, 5.2, 4.4, 5.8, 4.0)[i % 5],
            intonation=(2.0, 4.0, 3.0, 5.0)[i % 4],
            jitter=(0.008, 0.015, 0.01)[i % 3],
        ))
    return voices


def synthesize_utterance(voice: Voice, seconds: float, sample_rate: int, seed: int,
                         peak: float = DEFAULT_PEAK) -> np.ndarray:
    """``seconds`` of speech-like audio by ``voice``: float32 mono, peak ``peak`` (within [-1, 1)).

    Deterministic: the same voice, length, rate and seed give the same samples (the voice name is mixed into
    the seed, so two voices given one seed still say different things).
    """
    if seconds <= 0 or sample_rate <= 0:
        raise ValueError(f"need a positive length and sample rate, got {seconds} s at {sample_rate} Hz")
    if not 0 < peak < 1:
        raise ValueError(f"peak must lie in (0, 1), got {peak}")
    rng = np.random.default_rng([seed, zlib.crc32(voice.name.encode("utf-8"))])
    n = max(1, int(round(seconds * sample_rate)))
    sr = float(sample_rate)

    starts, stops, vowels = _syllable_plan(voice, n, sr, rng)
    envelope = np.zeros(n)
    vowel_of_sample = np.zeros(n, dtype=np.int64)
    onset_noise = np.zeros(n)
    for number, (start, stop, vowel) in enumerate(zip(starts, stops, vowels)):
        length = stop - start
        x = (np.arange(length) + 0.5) / length
        envelope[start:stop] = np.sin(np.pi * x) ** 0.7 * rng.uniform(0.6, 1.0)
        # The vowel is held through the following pause (and the first one through the lead-in): vowels change
        # only at syllable starts, which are further apart than a crossfade.
        held_from = 0 if number == 0 else start
        held_to = starts[number + 1] if number + 1 < len(starts) else n
        vowel_of_sample[held_from:held_to] = vowel
        burst = min(length, int(rng.uniform(0.015, 0.05) * sr))
        onset_noise[start:start + burst] = np.linspace(1.0, 0.0, burst) * rng.uniform(0.0, 0.25)

    f0 = _f0_contour(voice, n, sr, rng)
    phase = np.cumsum(f0 / sr)
    cycle = phase - np.floor(phase)
    glottal = _rosenberg(cycle, voice.open_quotient)
    noise = rng.standard_normal(n)
    gate = np.where(cycle < voice.open_quotient, 1.0, 0.4)
    source = (glottal + voice.breathiness * gate * noise) * envelope

    vowel_outputs = _formant_filter(source, voice.tract_scale, sr)
    speech = _crossfade(vowel_outputs, vowel_of_sample, int(0.03 * sr))
    # Fricative-like onsets: high-passed noise, not shaped by the vowel (it is made in front of the tract).
    hiss = np.diff(rng.standard_normal(n + 1)) * onset_noise
    speech += hiss * (np.max(np.abs(speech)) or 1.0) * 0.15

    speech -= speech.mean()
    top = np.max(np.abs(speech))
    if top > 0:
        speech *= peak / top
    return speech.astype(np.float32)


def _syllable_plan(voice: Voice, n: int, sr: float, rng: np.random.Generator):
    """Syllable start/stop samples and vowel indices: a short lead-in, then syllables with occasional pauses."""
    starts, stops, vowels = [], [], []
    t = int(rng.uniform(0.05, 0.2) * sr)
    while t < n:
        if starts and rng.random() < 0.15:
            t += int(rng.uniform(0.12, 0.35) * sr)
            continue
        length = int(max(rng.uniform(0.6, 1.4) / voice.rate, 0.05) * sr)  # longer than a vowel crossfade
        stop = min(n, t + length)
        starts.append(t)
        stops.append(stop)
        vowels.append(int(rng.integers(len(VOWEL_FORMANTS))))
        t = stop + int(rng.uniform(0.0, 0.04) * sr)
    return starts, stops, vowels


def _smooth_noise(n: int, sr: float, knots_per_second: float, rng: np.random.Generator) -> np.ndarray:
    """Unit-variance random values at ``knots_per_second``, linearly interpolated to ``n`` samples."""
    count = int(np.ceil(n / sr * knots_per_second)) + 2
    knots = rng.standard_normal(count)
    return np.interp(np.arange(n) / sr * knots_per_second, np.arange(count), knots)


def _f0_contour(voice: Voice, n: int, sr: float, rng: np.random.Generator) -> np.ndarray:
    """Per-sample f0: declination over the utterance, slow random intonation, fast small jitter."""
    semitones = np.linspace(0.4, -0.6, n) * voice.intonation / 2
    semitones += _smooth_noise(n, sr, 3.0, rng) * voice.intonation / 3
    jitter = _smooth_noise(n, sr, min(voice.f0, sr / 4), rng) * voice.jitter
    return voice.f0 * 2.0 ** (semitones / 12.0) * (1.0 + jitter)


def _rosenberg(cycle: np.ndarray, open_quotient: float) -> np.ndarray:
    """Rosenberg (1971) glottal flow over one cycle position in [0, 1): rising 60%, falling 40% of the open phase."""
    rise = 0.6 * open_quotient
    fall = 0.4 * open_quotient
    flow = np.zeros_like(cycle)
    opening = cycle < rise
    flow[opening] = 0.5 * (1.0 - np.cos(np.pi * cycle[opening] / rise))
    closing = (cycle >= rise) & (cycle < rise + fall)
    flow[closing] = np.cos(0.5 * np.pi * (cycle[closing] - rise) / fall)
    return flow - flow.mean()


def _formant_filter(source: np.ndarray, tract_scale: float, sr: float) -> np.ndarray:
    """``source`` through each vowel's formant cascade and lip radiation: ``[vowels, n]``.

    The cascade of two-pole resonators ``(1 - 2 r cos(th) + r^2) / (1 - 2 r cos(th) z^-1 + r^2 z^-2)`` (unit gain
    at DC, Klatt 1980) is evaluated exactly on the grid of a short FFT and applied by overlap-add: blocks of
    ``3 * tail`` samples padded with ``tail`` zeros, where ``tail`` (at least 50 ms) is ten time constants of the
    narrowest resonance of ``make_voices``' voices (bandwidth >= 60 Hz, time constant <= 5.3 ms), so what wraps
    around is below -80 dB.
    Short FFTs keep both the transform and the transfer function evaluation cheap for long utterances.
    """
    n = source.size
    tail = 1 << max(4, int(np.ceil(np.log2(0.05 * sr))))
    size = 4 * tail
    hop = size - tail
    blocks = -(-n // hop)
    padded = np.zeros(blocks * hop)
    padded[:n] = source
    spectra = np.fft.rfft(padded.reshape(blocks, hop), size, axis=1)
    z_inv = np.exp(-2j * np.pi * np.arange(size // 2 + 1) / size)
    z_inv2 = z_inv * z_inv
    radiation = 1.0 - z_inv  # lip radiation: a differentiator
    outputs = np.empty((len(VOWEL_FORMANTS), n))
    for index, formants in enumerate(VOWEL_FORMANTS.values()):
        response = radiation.copy()
        for frequency, bandwidth in zip(formants, FORMANT_BANDWIDTHS):
            frequency *= tract_scale
            if frequency >= 0.45 * sr:
                continue  # above what this rate can carry
            bandwidth *= tract_scale ** 0.5
            r = np.exp(-np.pi * bandwidth / sr)
            c = 2.0 * r * np.cos(2.0 * np.pi * frequency / sr)
            response *= (1.0 - c + r * r) / (1.0 - c * z_inv + r * r * z_inv2)
        filtered = np.fft.irfft(spectra * response, size, axis=1)
        joined = np.zeros((blocks + 1, hop))
        joined[:blocks] = filtered[:, :hop]
        joined[1:, :tail] += filtered[:, hop:]
        outputs[index] = joined.reshape(-1)[:n]
    return outputs


def _crossfade(outputs: np.ndarray, labels: np.ndarray, width: int) -> np.ndarray:
    """Pick ``outputs[labels[t], t]``, with a linear ``width``-sample crossfade centred on every label change.

    Label changes are at least a syllable apart (longer than ``width``), so the crossfades never overlap.
    """
    n = labels.size
    mixed = outputs[labels, np.arange(n)]
    half = width // 2
    for change in np.flatnonzero(labels[1:] != labels[:-1]) + 1:
        lo, hi = max(0, change - half), min(n, change - half + width)
        ramp = (np.arange(lo, hi) - (change - half) + 0.5) / width
        before, after = labels[change - 1], labels[change]
        mixed[lo:hi] = (1.0 - ramp) * outputs[before, lo:hi] + ramp * outputs[after, lo:hi]
    return mixed


__all__ = ["FORMANT_BANDWIDTHS", "VOWEL_FORMANTS", "Voice", "make_voices", "synthesize_utterance"]
