"""The one decode path of the loader's audio: where a stream's stored samples become float32 samples, scaled and
normalised.  In the generic loader (no task's code), so every task reads through it: TSE, ASD and ASR.

Every window a TSE batch holds passes here: the pre-mixed table (``loader.tse.table``, a whole batch's segments
at once), the item-by-item rows of packs resampled at load time and the sources of online mixing (both through
``loader.tse.decode.Decoder``), and the entries of noise and RIR banks (``decoded``, not normalised).  ASD's rows and
donor voices and ASR's utterances are windows read by ``read_window`` (ASD with the gain and shift of
``normalization``, under the normaliser its ``normalize`` chose; ASR as stored, normalised per utterance later).
Four things are decided here and nowhere else:

- ``scaling``: a segment's float32 multiplier (``scale / 32768``, times the normalisation's gain) and subtrahend
  (``mean * gain``), from the stored statistics, under the ``loader.normalize.Normalizer`` chosen once per loader;
  a mixture's targets take their mixture's gain, so the mixture stays their sum;
- ``copy_window``: the samples written into their batch row (a cast copy, an in-place multiply, a subtraction);
- ``decode_window``: a mono window written into its row in one pass (channels mixed down by their mean, one
  float32 multiplier, a subtraction), clamped to the stored length and zero past it;
- ``check_one_channel_count``: the refusal of a batch whose mixtures have different channel counts.

``stored_audio`` and ``read_window`` are where a segment's stored samples are read (``stored_audio`` resampling them
with soxr when the pack is at another rate than the loader's).  A compressed stream's stored samples
(``loader.pack.blocks.BlockSamples``, from ``Pack.stored_segment``) are sliced exactly like a pcm16 segment's int16
view and decode only the blocks under the slice, to the int16 values a pcm16 pack would hold (FLAC): every path
below then does the same float math on them, so a FLAC pack's batches are bit-identical to its pcm16 pack's.
No task module reads a stream's stored audio itself (tests/loader/test_samples.py checks ASD's and ASR's).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import soxr

from speechpack.loader.normalize import NONE, NORMALIZERS, Normalizer
from speechpack.loader.pack import Pack
from speechpack.schemas.constants import AUDIO_FULL_SCALE
from speechpack.schemas.errors import SpeechpackError


class MixedChannels(SpeechpackError):
    """A batch holds mixtures with different channel counts, which the loader refuses."""


def scaling(normalizer: Normalizer, take: Callable[[str], np.ndarray], gain: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(scale, shift, gain)`` of segments whose stored columns ``take(name)`` gives (``scale``, and ``rms``,
    ``peak``, ``mean`` only when the normalisation reads them): ``scale`` the float32 multiplier, ``shift`` the
    float32 subtrahend (None: nothing to subtract), ``gain`` the normalisation's (None: 1), given for targets that
    share their mixture's.  A gain of 1 changes no float (``factor * 1.0 == factor``), so none is applied."""
    factor = take("scale") / AUDIO_FULL_SCALE
    gain, shift = normalization(normalizer, take, gain)
    if normalizer.gains is not None:
        factor = factor * gain
    return factor.astype(np.float32), shift, gain


def normalization(normalizer: Normalizer, take: Callable[[str], np.ndarray], gain: np.ndarray | None = None
                  ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(gain, shift)`` of segments whose stored columns ``take(name)`` gives: the normalisation's float64 gain
    (``gain`` when given; None: 1) and float32 subtrahend ``mean * gain`` (None: nothing to subtract), what
    ``scaling`` folds into its multiplier and what ``read_window`` takes."""
    shift = None
    if normalizer.gains is not None:
        if gain is None:
            gain = normalizer.gains(take("rms"), take("peak"))
        if normalizer.centres:
            mean = take("mean")
            shift = np.where((mean != 0) & (gain != 0), mean * gain, 0.0).astype(np.float32)
    return gain, shift


class Audio(NamedTuple):
    """One segment ready to decode: ``data`` ``[C, T]`` (an int16 view of the mapping, or float32 when
    resampled), its float32 ``scale`` and ``shift`` (``copy_window``; 1 and 0: nothing to do)."""

    data: np.ndarray
    scale: float
    shift: float


def segment_audio(normalizer: Normalizer, pack: Pack, stream: str, segment: int, rate: int,
                  gain: np.ndarray | None = None) -> tuple[Audio, np.ndarray | None]:
    """Segment ``segment`` of ``stream`` ready to decode at ``rate`` (``stored_audio``) and its gain (``scaling``;
    ``gain``: the mixture's, for its targets).  Resampled samples are already float: their scale is the gain."""
    table = pack.streams[stream]
    data, is_float = stored_audio(pack, stream, segment, rate)

    def take(name: str) -> np.ndarray:
        column = getattr(table, name)[segment:segment + 1]
        return np.full(1, AUDIO_FULL_SCALE, dtype=np.float64) if is_float and name == "scale" else column

    scale, shift, gain = scaling(normalizer, take, gain)
    return Audio(data, float(scale[0]), 0.0 if shift is None else float(shift[0])), gain


def stored_audio(pack: Pack, stream: str, segment: int, rate: int) -> tuple[np.ndarray, bool]:
    """Segment ``segment`` of ``stream`` as ``[C, T]`` samples at ``rate``: the stored int16 view (no copy; a
    compressed segment's ``BlockSamples``, decoded when sliced), or, for a pack at another rate, float32 resampled
    whole with soxr (slow; the loader warns).  The flag says whether the samples are already float (scaled by the
    pack's factor; the gain still to apply)."""
    stored, factor = pack.stored_segment(stream, segment)
    if pack.sample_rate == rate:
        return stored, False
    decoded = soxr.resample(np.ascontiguousarray((np.asarray(stored) * np.float32(factor)).T), pack.sample_rate,
                            rate)
    return np.ascontiguousarray(decoded.T, dtype=np.float32), True


def copy_window(dest: np.ndarray, source: np.ndarray, scale: float, shift: float) -> None:
    """``source`` (stored int16, or float) decoded into ``dest`` (same shape, float32).  A cast copy, then an
    in-place multiply: the same floats as one mixed-type multiply (which numpy runs through a cast buffer), about
    1.5x faster; ``scale`` and ``shift`` are float32 values (a Python float holds one exactly, and numpy keeps
    float32 arithmetic with it)."""
    dest[...] = source
    dest *= scale
    if shift:
        dest -= shift


def read_window(out: np.ndarray, pack: Pack, stream: str, segment: int, start: int = 0, gain: float = 1.0,
                shift: float = 0.0) -> None:
    """Samples ``[start, start + len(out))`` of segment ``segment`` of ``stream`` decoded into the float32 row
    ``out``, mono (``decode_window``): the one place a window of a segment's stored samples is read at the pack's
    rate (a compressed segment decodes the blocks under the window only)."""
    stored, factor = pack.stored_segment(stream, segment)
    decode_window(out, stored, factor, start, gain, shift)


def decode_window(out: np.ndarray, stored: np.ndarray, factor: float, start: int = 0, gain: float = 1.0,
                  shift: float = 0.0) -> None:
    """Samples ``[start, start + len(out))`` of ``stored`` (int16 ``[C, T]``, decode factor ``factor``) into the
    float32 row ``out`` in one pass: channels mixed down by their mean, times one float32 multiplier
    (``factor * gain / C``), minus ``shift`` (float32; 0: nothing subtracted).  Reads are clamped to ``T`` and
    the rest of ``out`` is zero: normalising before padding keeps the padding at 0."""
    channels, length = stored.shape
    take = max(0, min(start + len(out), length) - start)
    dest = out[:take]
    multiplier = np.float32(factor * gain / channels)
    if channels == 1:
        np.multiply(stored[0, start:start + take], multiplier, out=dest, casting="unsafe")
    else:  # mono by channel mean, scaled in the same pass
        np.multiply(stored[:, start:start + take].sum(axis=0, dtype=np.float32), multiplier, out=dest)
    if shift:
        dest -= np.float32(shift)
    out[take:] = 0.0


def decoded(pack: Pack, stream: str, segment: int) -> np.ndarray:
    """Segment ``segment`` of ``stream`` decoded whole, at the pack's rate and not normalised: float32 ``[C, T]``
    (what a noise or RIR bank entry is read as, ``loader.tse.augment.Bank``)."""
    stored, _ = stored_audio(pack, stream, segment, pack.sample_rate)
    pack.will_need(stream, segment, 0, stored.shape[1])
    scale, _, _ = scaling(NORMALIZERS[NONE], lambda name: getattr(pack.streams[stream], name)[segment:segment + 1])
    out = np.empty(stored.shape, dtype=np.float32)
    copy_window(out, np.asarray(stored), float(scale[0]), 0.0)
    return out


def check_one_channel_count(channels: list[int], keys: list[str]) -> None:
    """Raise ``MixedChannels`` when a batch's mixtures (their ``channels``, ``keys``) have different channel
    counts: their rows cannot share one ``[rows, C, T]`` array."""
    if len(set(channels)) > 1:
        named = sorted(set(keys))
        raise MixedChannels(f"mixtures with different channel counts {sorted(set(channels))} in one batch "
                            f"({', '.join(named[:4])}...): pack them separately")


__all__ = ["Audio", "MixedChannels", "check_one_channel_count", "copy_window", "decode_window", "decoded",
           "normalization", "read_window", "scaling", "segment_audio", "stored_audio"]
