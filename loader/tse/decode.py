"""Audio of a TSE batch: stored int16 segments decoded straight from the mapping into the batch's rows.

A segment is first described (``Audio``: the mapped view, its scale, and the normalisation's mean and gain), then
decoded once, into its destination: the decode, the scaling and MuVAP's normalisation are one pass, and a
mixture repeated for each of its targets is decoded once and copied.  Packs at another rate than the loader's
are resampled with soxr when described (slow; the loader warns).  MuVAP's gain comes from the mixture's
whole-recording statistics (``loader.normalize``), shared by its targets so the mixture stays their sum.

Segment by segment is how online mixing reads its sources and how pre-mixed packs resampled at load time are read;
pre-mixed batches at the loader's rate go through ``loader.tse.table``, which gives the same floats for a whole
batch at once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import soxr

from speechpack.loader.transport import batch_arrays
from speechpack.loader.normalize import MUVAP, muvap_gain
from speechpack.loader.pack import Pack
from speechpack.loader.pack.readahead import will_need_views
from speechpack.loader.tse.windows import Window


class Audio(NamedTuple):
    """One segment ready to decode: ``data`` ``[C, T]`` (an int16 view of the mapping, or float32 when
    resampled), ``factor`` (int16 to float), and the normalisation's ``mean`` and ``gain`` (0 and 1: none)."""

    data: np.ndarray
    factor: float
    mean: float
    gain: float


class Decoder:
    """Describes segments of ``packs`` at the loader's ``rate`` under ``normalize`` (``none`` or ``muvap``)."""

    def __init__(self, packs: list[Pack], rate: int, normalize: str):
        self.packs = packs
        self.rate = rate
        self.muvap = normalize == MUVAP

    def gain(self, pack: Pack, stream: str, segment: int) -> float:
        """MuVAP's gain of a recording from its stored statistics (1 without normalisation)."""
        if not self.muvap:
            return 1.0
        table = pack.streams[stream]
        return float(muvap_gain(table.rms[segment], table.peak[segment]))

    def audio(self, pack: Pack, stream: str, segment: int, gain: float) -> Audio:
        stored, factor = pack.stored_segment(stream, segment)
        mean = float(pack.streams[stream].mean[segment]) if self.muvap else 0.0
        if pack.sample_rate != self.rate:
            decoded = soxr.resample(np.ascontiguousarray((stored * np.float32(factor)).T), pack.sample_rate, self.rate)
            return Audio(np.ascontiguousarray(decoded.T, dtype=np.float32), 1.0, mean, gain)
        return Audio(stored, factor, mean, gain)

    def sample(self, pack_id: int, sample: int, slot: int, mix_stream: str, target_stream: str
               ) -> tuple[Audio, list[Audio], list[str], str]:
        """(mix, [targets], speakers, key) of a sample; only target ``slot`` when ``slot >= 0``."""
        pack = self.packs[pack_id]
        mix_seg = pack.segments_of(mix_stream, sample)[0]
        target_segs = list(pack.segments_of(target_stream, sample))
        speakers = list(pack.speakers_of(sample))
        if slot >= 0:
            target_segs, speakers = [target_segs[slot]], [speakers[slot]]
        # Mixture and targets share the mixture's gain, so the mixture stays the sum of its targets.
        gain = self.gain(pack, mix_stream, mix_seg)
        mix = self.audio(pack, mix_stream, mix_seg, gain)
        targets = [self.audio(pack, target_stream, j, gain) for j in target_segs]
        return mix, targets, speakers, str(pack.keys[sample])


class Row(NamedTuple):
    """One row of a batch (one target speaker of one mixture): ``item`` is the mixture's position in the batch
    (rows are mixture-major), ``mix``/``target`` its audio (``None`` for an online mixture, rendered elsewhere),
    ``num_speaker`` the mixture's speakers, ``window`` where its samples come from, ``pack`` the pack's index."""

    item: int
    mix: Audio | None
    target: Audio | None
    speaker: str
    key: str
    num_speaker: int
    window: Window
    pack: int


def aligned_length(lengths: np.ndarray, align: str) -> int:
    """A batch field's row length from its rows' lengths: the longest (``max``) or the shortest (``min``)."""
    if not len(lengths):
        return 0
    return int(lengths.max() if align == "max" else lengths.min())


def collate_rows(sources: list[Audio], windows: list[Window], lengths: np.ndarray, align: str,
                 mixture_of: list[int] | None = None) -> np.ndarray:
    """Decode every row once into a ``[rows, C, T]`` float32 array (T by ``align``), zero-padded on the right.
    ``mixture_of``: each row's mixture; a row repeating the previous row's mixture is copied, not decoded."""
    out_len = aligned_length(lengths, align)
    channels = sources[0][0].shape[0] if sources else 1
    out = batch_arrays.empty((len(sources), channels, out_len), np.float32)
    # Cold cache: the batch's ranges announced at once, in one system call (a repeated mixture is copied).
    will_need_views([audio[:, window.start:window.start + min(window.take, out_len)]
                     for r, ((audio, *_scaling), window) in enumerate(zip(sources, windows))
                     if mixture_of is None or r == 0 or mixture_of[r] != mixture_of[r - 1]])
    previous = None
    for r, ((audio, factor, mean, gain), window) in enumerate(zip(sources, windows)):
        if mixture_of is not None and previous is not None and mixture_of[r] == mixture_of[r - 1]:
            out[r] = out[r - 1]  # the same mixture repeated for its next target
            continue
        take = min(window.take, out_len)
        dest = out[r, :, :take]
        # A cast copy, then an in-place multiply: the same floats as one mixed-type multiply (which numpy runs
        # through a cast buffer), about 1.5x faster.
        dest[...] = audio[:, window.start:window.start + take]
        dest *= np.float32(factor * gain)
        if mean and gain:
            dest -= np.float32(mean * gain)
        out[r, :, take:] = 0.0  # zero only the padding: the rest is written once
        previous = r
    return out


def decode_into(row: np.ndarray, audio: Audio, window: Window) -> None:
    """Channel 0 of ``audio``'s window decoded into ``row`` (int16 to float32, scaled, normalised), zero-padded to
    the row's length.  A cast copy then an in-place multiply: the same floats as one mixed-type multiply, which
    numpy runs through a cast buffer, and faster."""
    data, factor, mean, gain = audio
    take = window.take
    signal = row[:take]
    signal[...] = data[0, window.start:window.start + take]
    signal *= np.float32(factor * gain)
    if mean and gain:
        signal -= np.float32(mean * gain)
    if take < len(row):
        row[take:] = 0.0


__all__ = ["Audio", "Decoder", "Row", "aligned_length", "collate_rows", "decode_into"]
