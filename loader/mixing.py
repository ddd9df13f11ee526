"""Online mixing (WeSep's mix layer, notes-wesep.md section 2 step 4), as pure numpy functions.

The plan's items are the source utterances: each is the target (speaker 0) of one mixture per epoch.  Its
interferers, timeline, SNRs and gain are drawn from ``item_rng(seed, epoch, batch, position)``, a counter-based
generator of its own, so a mixture depends on neither the worker that builds it nor the other items' draws.

- ``SpeakerIndex`` / ``choose_group``: the plan-level choice of a group (number of speakers, then distinct
  interfering speakers, then one utterance of each);
- ``make_timeline`` / ``timeline_masks``: WeSep's ``timeline`` generator and ``apply_timeline``;
- ``reverberate``: each source convolved with its own RIR (WeSep's ``add_reverb``, RIRs from a bank pack);
- ``snr_mix``: WeSep's ``snr_mixer``, vectorised over the groups of a batch;
- ``fit_noise`` / ``add_noise``: WeSep's ``add_noise`` (the mixture only), noise from a bank pack.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loader.config import MixArgs, TimelineArgs
from schemas.errors import SpeechpackError

#: A source with energy at or below this is silent (WeSep drops such groups; we redraw them).
MIN_ENERGY = 1e-12
#: Attempts at drawing a group whose sources all have energy, before giving up with ``MixError``.
GROUP_ATTEMPTS = 10
#: Timeline boundaries are kept to this many decimals (WeSep's ``timeline_spk{i}``).
TIMELINE_DECIMALS = 3


class MixError(SpeechpackError):
    """An online mixture cannot be made (no energy after every attempt, multichannel sources)."""


def item_rng(seed: int, epoch: int, global_batch: int, position: int) -> np.random.Generator:
    """The generator of one item of one batch: Philox keyed by the seed, counter (0, position + 1, batch + 1, epoch).

    ``loader.plan.batch_rng`` uses word 1 = 0, so the streams never meet (each would need 2**64 draws)."""
    if seed < 0 or epoch < 0 or position < 0:
        raise MixError(f"seed, epoch and position must be non-negative, got {seed}, {epoch}, {position}")
    counter = np.array([0, position + 1, global_batch + 1, epoch], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=seed, counter=counter))


@dataclass(frozen=True)
class SpeakerIndex:
    """Items grouped by speaker: ``code[item]``, and speaker ``s``'s items ``order[first[s]:first[s] + count[s]]``."""

    code: np.ndarray
    order: np.ndarray
    first: np.ndarray
    count: np.ndarray

    @classmethod
    def from_speakers(cls, speakers: np.ndarray) -> "SpeakerIndex":
        """``speakers``: one speaker id (any comparable dtype) per item."""
        names, code = np.unique(speakers, return_inverse=True)
        order = np.argsort(code, kind="stable")
        count = np.bincount(code, minlength=len(names))
        first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        return cls(code.astype(np.int64), order.astype(np.int64), first, count.astype(np.int64))

    @property
    def num_speakers(self) -> int:
        return len(self.count)


def draw_num_speakers(rng: np.random.Generator, args: MixArgs, available: int) -> int:
    """WeSep's bucket draw: 1, 2, or ``randint(3, max_speakers)``; clamped to the speakers available."""
    bucket = int(rng.choice(3, p=np.asarray(args.distribution) / np.sum(args.distribution)))
    count = bucket + 1 if bucket < 2 else int(rng.integers(3, args.max_speakers + 1))
    return max(1, min(count, available))


def choose_group(rng: np.random.Generator, target: int, index: SpeakerIndex, args: MixArgs) -> np.ndarray:
    """Item ids of one group: ``target`` first, then one utterance of each of the other, distinct speakers."""
    count = draw_num_speakers(rng, args, index.num_speakers)
    own = int(index.code[target])
    others = rng.choice(index.num_speakers - 1, size=count - 1, replace=False)
    speakers = others + (others >= own)
    picks = (rng.random(count - 1) * index.count[speakers]).astype(np.int64)
    return np.concatenate([[target], index.order[index.first[speakers] + picks]]).astype(np.int64)


def make_timeline(rng: np.random.Generator, count: int, conf: TimelineArgs | None) -> np.ndarray:
    """``[count, 2]`` activity segments (fractions of the group length, 3 decimals); ``[0, 1]`` without a timeline.

    Two speakers overlap by ``r ~ U(overlap_ratio)``, placed at the head (both start at 0, the inner one ends at r,
    the outer at ``U(max(0.9, r), 1)``), the tail (mirror image) or the middle (containment: outer ``[0, 1]``,
    inner ``[u, u + r]``; crossing: ``[0, e]`` and ``[e - r, 1]``, ``e ~ U(r, 1)``).  Which speaker is inner (or
    first) is a coin flip, so the target can be the inner one.  Speakers 3 and later get one segment of length
    ``U(extra_speaker_activity)`` at a uniform position.
    """
    segments = np.tile(np.array([[0.0, 1.0]]), (count, 1))
    if conf is None or count < 2:
        return segments
    r = float(rng.uniform(*conf.overlap_ratio))
    weights = np.asarray(conf.position_weights, dtype=np.float64)
    position = int(rng.choice(3, p=weights / weights.sum()))
    swap = bool(rng.random() < 0.5)
    if position == 0:  # head
        inner, outer = [0.0, r], [0.0, float(rng.uniform(max(0.9, r), 1.0))]
    elif position == 2:  # tail
        inner, outer = [1.0 - r, 1.0], [float(rng.uniform(0.0, min(0.1, 1.0 - r))), 1.0]
    elif rng.random() < conf.containment_prob:
        u = float(rng.uniform(0.0, 1.0 - r))
        inner, outer = [u, u + r], [0.0, 1.0]
    else:
        e = float(rng.uniform(r, 1.0))
        inner, outer = [0.0, e], [e - r, 1.0]
    segments[0], segments[1] = (outer, inner) if swap else (inner, outer)
    for i in range(2, count):
        length = float(rng.uniform(*conf.extra_speaker_activity))
        start = float(rng.uniform(0.0, 1.0 - length))
        segments[i] = [start, start + length]
    return np.round(np.clip(segments, 0.0, 1.0), TIMELINE_DECIMALS)


def timeline_masks(segments: np.ndarray, length: int) -> np.ndarray:
    """``[count, length]`` 0/1 masks: 1 over ``[round(s * T), round(e * T))`` (WeSep's ``apply_timeline``)."""
    starts = np.round(segments[:, 0] * length).astype(np.int64)
    ends = np.round(segments[:, 1] * length).astype(np.int64)
    t = np.arange(length)
    return ((t >= starts[:, None]) & (t < ends[:, None])).astype(np.float64)


def energies(sources: np.ndarray) -> np.ndarray:
    """Σ s² over the last axis (float64)."""
    return np.einsum("...t,...t->...", sources, sources, dtype=np.float64)


def snr_mix(sources: np.ndarray, present: np.ndarray, snr_db: np.ndarray, gain_db: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """WeSep's ``snr_mixer`` over a batch of groups.

    ``sources`` ``[G, N, T]`` float64 (absent speakers and padding zero), ``present`` ``[G, N]`` bool, ``snr_db``
    ``[G, N]`` (column 0 unused), ``gain_db`` ``[G]``.  Interferer i is scaled to the target's energy (over the
    whole length) and SNR ``snr_db[:, i]``; the mixture is the sum; everything is divided by
    ``max(|mix|, |s_i|)`` and multiplied by ``10 ** (gain / 20)``.  Returns ``(mix [G, T], scaled [G, N, T],
    factor [G, N])`` with ``scaled = sources * factor`` (``factor`` also scales dry copies of reverberant sources).
    Every present source must have energy above ``MIN_ENERGY`` (the caller redraws groups that do not).
    """
    e = energies(sources)
    if np.any(e[present] <= MIN_ENERGY):
        raise MixError("snr_mix: a present source has no energy")
    scale = np.zeros(e.shape, dtype=np.float64)
    scale[:, 0] = 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        scale[:, 1:] = np.sqrt(e[:, :1] / e[:, 1:]) * 10.0 ** (-snr_db[:, 1:] / 20.0)
    scale[~present] = 0.0
    scaled = sources * scale[:, :, None]
    mix = scaled.sum(axis=1)
    peak = np.maximum(np.abs(mix).max(axis=-1), np.abs(scaled).max(axis=(1, 2)))
    factor = 10.0 ** (np.asarray(gain_db, dtype=np.float64) / 20.0) / peak
    return mix * factor[:, None], scaled * factor[:, None, None], scale * factor[:, None]


def reverberate(sources: np.ndarray, rirs: list[np.ndarray]) -> np.ndarray:
    """Each source ``[N, T]`` convolved with its own RIR (``rirs[i]`` 1-D), "full" then cropped to ``T`` (FFT)."""
    length = sources.shape[1]
    longest = max(len(h) for h in rirs)
    size = 1 << int(np.ceil(np.log2(max(length + longest - 1, 1))))
    spectra = np.fft.rfft(sources, size, axis=-1)
    kernels = np.stack([np.fft.rfft(np.asarray(h, dtype=np.float64), size) for h in rirs])
    return np.fft.irfft(spectra * kernels, size, axis=-1)[:, :length]


def fit_noise(noise: np.ndarray, length: int, offset_draw: float) -> np.ndarray:
    """``noise`` (1-D) wrapped (tiled) when shorter than ``length``, else a crop starting at a drawn offset."""
    if len(noise) < length:
        return np.resize(noise, length)
    start = int(offset_draw * (len(noise) - length + 1))
    return noise[start:start + length]


def add_noise(mix: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """``mix + noise`` with the noise scaled to ``snr_db`` below the mixture's energy; a silent noise adds nothing."""
    e_noise = float(energies(noise))
    if e_noise <= MIN_ENERGY:
        return mix
    return mix + noise * np.sqrt(float(energies(mix)) / (e_noise * 10.0 ** (snr_db / 10.0)))


__all__ = ["GROUP_ATTEMPTS", "MixError", "SpeakerIndex", "add_noise", "choose_group", "draw_num_speakers",
           "energies", "fit_noise", "item_rng", "make_timeline", "reverberate", "snr_mix", "timeline_masks"]
