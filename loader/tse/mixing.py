"""Online mixing (WeSep's mix layer, ``wesep/dataset/processor.py`` in github.com/wenet-e2e/wesep; docs/loader.md,
"Online mixing"), as pure numpy functions.

The plan's items are the source utterances: each is the target (speaker 0) of one mixture per epoch.  Its
interferers, timeline, SNRs and gain are drawn from ``item_rng(seed, epoch, batch, position)``, a counter-based
generator of its own, so a mixture depends on neither the worker that builds it nor the other items' draws.

- ``SpeakerIndex`` / ``choose_group``: the plan-level choice of a group (number of speakers, then distinct
  interfering speakers, then one utterance of each);
- ``make_timeline`` / ``timeline_masks``: WeSep's ``timeline`` generator and ``apply_timeline``;
- ``mix_sources`` / ``snr_mix``: WeSep's ``snr_mixer`` for one group (in caller-owned buffers) / a batch of groups;
- ``fit_noise`` / ``add_noise``: WeSep's ``add_noise`` (the mixture only), noise from a bank pack;

Elsewhere, each with one job: the random streams (``loader.rng``), reverberation as batched FFT convolution
(``loader.tse.convolve``; the rooms ``loader.tse.room_sim``, a batch's reverberation
``loader.tse.augment.Reverberator``) and the mixer's reused memory (``loader.tse.buffers``).

``MixError``, the error of online mixing, is defined here: every ``loader.tse`` module that raises it (the
mixer, the augmentation sources) imports it from the mixer's module.
"""

from __future__ import annotations

from dataclasses import dataclass
import bisect
import functools

import numpy as np

from speechpack.loader.tse.mix_args import MixArgs, TimelineArgs
from speechpack.schemas.errors import SpeechpackError


#: A source with energy at or below this is silent (WeSep drops such groups; we redraw them).
MIN_ENERGY = 1e-12
#: Attempts at drawing a group whose sources all have energy, before giving up with ``MixError``.
GROUP_ATTEMPTS = 10
#: Timeline boundaries are kept to this many decimals (WeSep's ``timeline_spk{i}``).
TIMELINE_DECIMALS = 3


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


@functools.lru_cache(maxsize=64)
def _bucket_cdf(distribution: tuple[float, ...]) -> list[float]:
    """The speaker-count buckets' cumulative probabilities, computed once per distribution (not per mixture)."""
    return (np.cumsum(distribution) / np.sum(distribution)).tolist()


def draw_num_speakers(rng: np.random.Generator, args: MixArgs, available: int) -> int:
    """WeSep's bucket draw: 1, 2, or ``randint(3, max_speakers)``; clamped to the speakers available."""
    cumulative = _bucket_cdf(tuple(args.distribution))
    bucket = min(bisect.bisect_right(cumulative, rng.random()), 2)  # rng.choice(3, p=...), faster
    count = bucket + 1 if bucket < 2 else int(rng.integers(3, args.max_speakers + 1))
    return max(1, min(count, available))


def choose_group(rng: np.random.Generator, target: int, index: SpeakerIndex, args: MixArgs) -> np.ndarray:
    """Item ids of one group: ``target`` first, then one utterance of each of the other, distinct speakers."""
    count = draw_num_speakers(rng, args, index.num_speakers)
    own = int(index.code[target])
    if count == 2:  # the common case in scalars, a third of the array path's cost; the same draws, same values
        speaker = int(rng.integers(index.num_speakers - 1))
        speaker += speaker >= own
        pick = int(rng.random() * int(index.count[speaker]))
        return np.array([target, index.order[index.first[speaker] + pick]], dtype=np.int64)
    if count == 1:
        return np.array([target], dtype=np.int64)
    others = rng.choice(index.num_speakers - 1, size=count - 1, replace=False)
    speakers = others + (others >= own)
    picks = (rng.random(count - 1) * index.count[speakers]).astype(np.int64)
    return np.concatenate([[target], index.order[index.first[speakers] + picks]]).astype(np.int64)


@functools.lru_cache(maxsize=None)
def _whole_segments(count: int) -> np.ndarray:
    """``count`` speakers active over the whole group: made once per count and shared, so read-only."""
    segments = np.array([[0.0, 1.0]] * count)
    segments.flags.writeable = False
    return segments


def make_timeline(rng: np.random.Generator, count: int, conf: TimelineArgs | None) -> np.ndarray:
    """``[count, 2]`` activity segments (fractions of the group length, 3 decimals); ``[0, 1]`` without a timeline.

    Two speakers overlap by ``r ~ U(overlap_ratio)``, placed at the head (both start at 0, the inner one ends at r,
    the outer at ``U(max(0.9, r), 1)``), the tail (mirror image) or the middle (containment: outer ``[0, 1]``,
    inner ``[u, u + r]``; crossing: ``[0, e]`` and ``[e - r, 1]``, ``e ~ U(r, 1)``).  Which speaker is inner (or
    first) is a coin flip, so the target can be the inner one.  Speakers 3 and later get one segment of length
    ``U(extra_speaker_activity)`` at a uniform position.
    """
    if conf is None or count < 2:
        return _whole_segments(count)
    segments = np.array([[0.0, 1.0]] * count)
    r = float(rng.uniform(*conf.overlap_ratio))
    weights = np.asarray(conf.overlap_position, dtype=np.float64)
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


def apply_timeline(sources: np.ndarray, segments: np.ndarray) -> None:
    """Zero each source outside ``[round(s * T), round(e * T))``, in place: what multiplying by
    ``timeline_masks`` does, without building the masks (and nothing at all for whole-length segments)."""
    length = sources.shape[-1]
    for source, (start, end) in zip(sources, segments):
        first, last = int(np.round(start * length)), int(np.round(end * length))
        source[:max(first, 0)] = 0.0
        source[max(last, 0):] = 0.0


def energies(sources: np.ndarray) -> np.ndarray:
    """Σ s² over the last axis.  ``einsum`` and not ``dot``: no BLAS threads competing with the loader."""
    return np.einsum("...t,...t->...", sources, sources).astype(np.float64)


def snr_scales(energy: np.ndarray, snr_db: np.ndarray) -> np.ndarray:
    """WeSep's interferer scaling: source 0 (the target) as is, source i scaled to the target's energy over the
    whole length and ``snr_db[i]`` below it (``snr_db[0]`` is unused)."""
    scale = np.ones(len(energy), dtype=np.float64)
    scale[1:] = np.sqrt(energy[0] / energy[1:]) * 10.0 ** (-np.asarray(snr_db[1:], dtype=np.float64) / 20.0)
    return scale


def mix_sources(sources: np.ndarray, scale: np.ndarray, gain_db: float, out: np.ndarray | None = None,
                work: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """WeSep's ``snr_mixer`` for one group: ``mix = Σ scale_i s_i``, then everything divided by
    ``max(|mix|, |scale_i s_i|)`` and multiplied by ``10 ** (gain / 20)``.

    ``sources`` ``[N, T]`` float32 (every source with energy above ``MIN_ENERGY``; ``scale`` from
    :func:`snr_scales`, so ``scale[0]`` is 1).  Returns ``(mix [T] float32, factors [N])``: the target rows are
    ``sources[i] * factors[i]`` (or a dry copy times the same factor).  The mixture is computed in ``out`` (``[T]``
    float32) when given, and the third and later interferers are scaled in ``work`` (``[T]`` float32): with both
    reused by the caller, mixing allocates nothing and every pass stays in cache.

    The sum is ``(scale_0 s_0 + scale_1 s_1) + scale_2 s_2 + ...`` in float32, in that order: the second product
    is written to ``out`` and ``s_0`` added to it (float addition commutes exactly), so with ``scale_0 = 1`` no copy
    of ``s_0`` is made.
    """
    if out is None:
        out = np.empty(sources.shape[1], dtype=np.float32)
    if len(sources) == 1:
        np.multiply(sources[0], np.float32(scale[0]), out=out)
    else:
        product = work
        if product is None and (len(sources) > 2 or scale[0] != 1.0):
            product = np.empty_like(out)
        np.multiply(sources[1], np.float32(scale[1]), out=out)
        np.add(out, sources[0] if scale[0] == 1.0 else np.multiply(sources[0], np.float32(scale[0]), out=product),
               out=out)
        for source, s in zip(sources[2:], scale[2:]):
            out += np.multiply(source, np.float32(s), out=product)
    # ufunc reductions called directly: ndarray.max/min add a layer of Python per call
    source_peaks = np.maximum(np.maximum.reduce(sources, axis=1), -np.minimum.reduce(sources, axis=1))
    source_peaks = source_peaks.astype(np.float64) * scale
    peak = max(float(np.maximum.reduce(out)), -float(np.minimum.reduce(out)), float(source_peaks.max()))
    factor = 10.0 ** (float(gain_db) / 20.0) / peak
    out *= np.float32(factor)
    return out, scale * factor


def snr_mix(sources: np.ndarray, present: np.ndarray, snr_db: np.ndarray, gain_db: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`mix_sources` over a batch of groups ``[G, N, T]`` (absent speakers, ``present`` False, are zero):
    returns ``(mix [G, T], scaled [G, N, T], factor [G, N])``.  A reference for tests; the loader mixes group by
    group straight into the batch."""
    mixes, scaled, factors = [], [], []
    for group, here, snr, gain in zip(sources, present, snr_db, gain_db):
        members = np.ascontiguousarray(group[here], dtype=np.float32)
        e = energies(members)
        if np.any(e <= MIN_ENERGY):
            raise MixError("snr_mix: a present source has no energy")
        mix, factor = mix_sources(members, snr_scales(e, snr[here]), gain)
        full = np.zeros(here.shape, dtype=np.float64)
        full[here] = factor
        mixes.append(mix)
        factors.append(full)
        scaled.append(group * full[:, None])
    return np.stack(mixes), np.stack(scaled), np.stack(factors)


def fit_noise(noise: np.ndarray, length: int, offset_draw: float) -> np.ndarray:
    """``noise`` (1-D) wrapped (tiled) when shorter than ``length``, else a crop starting at a drawn offset."""
    if len(noise) < length:
        return np.resize(noise, length)
    start = int(offset_draw * (len(noise) - length + 1))
    return noise[start:start + length]


def add_noise(mix: np.ndarray, noise: np.ndarray, snr_db: float, in_place: bool = False) -> np.ndarray:
    """``mix + noise`` with the noise scaled to ``snr_db`` below the mixture's energy; a silent noise adds nothing.
    ``in_place`` adds it into ``mix`` itself (the caller's work row) instead of a new array."""
    e_noise = float(energies(noise))
    if e_noise <= MIN_ENERGY:
        return mix
    factor = np.sqrt(float(energies(mix)) / (e_noise * 10.0 ** (snr_db / 10.0)))
    scaled = noise.astype(mix.dtype, copy=False) * mix.dtype.type(factor)
    return np.add(mix, scaled, out=mix if in_place else None)


class MixError(SpeechpackError):
    """An online mixture cannot be made (no energy after every attempt, multichannel sources, a bad stream key)."""


__all__ = ["GROUP_ATTEMPTS", "MIN_ENERGY", "TIMELINE_DECIMALS", "MixError", "SpeakerIndex", "add_noise",
           "apply_timeline", "choose_group", "draw_num_speakers", "energies", "fit_noise", "make_timeline",
           "mix_sources", "snr_mix", "snr_scales", "timeline_masks"]
