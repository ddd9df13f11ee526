"""A batch's reverberation for online mixing (WeSep's ``add_reverb``: each source of a mixture convolved with its
own RIR, the reverberant sources replacing the dry ones), made for every reverberated group of the batch at once.

Per 2-source mixture the room simulation and the three FFTs per source are most of the cost of online mixing with
``reverb_prob: 1`` (docs/performance.md, "WeSep augmentation"), so the batch builder first decodes every
reverberated group's sources into one zero-padded ``[M, T]`` array, then simulates all rooms in one vectorised
call (``RirSource.rooms``: one room per group, keyed by the group's first RIR draw, as before) and convolves all
``M`` rows in one real FFT call each way at one size (``loader.tse.convolve``).  Bank RIRs are decoded, trimmed
and transformed once per process and FFT size (the mixer's ``ByteBudgetCache``); simulated rooms never repeat,
so their spectra are not kept.

The draws are the groups' own (made in ``OnlineMixer.draft`` before any decoding), so which rows share a batch
changes only float32 round-off, never a draw; a batch is still a pure function of (seed, epoch, batch).
"""

from __future__ import annotations

import numpy as np

from speechpack.loader.tse.augment import RirSource
from speechpack.loader.tse.buffers import ByteBudgetCache
from speechpack.loader.tse.convolve import cached_spectra, convolution_size, convolve_rows, kernel_rows


class Reverberator:
    """Convolves a batch's source rows with their RIRs: simulated rooms (one per group) or bank entries (one per
    source, kept in ``cache``)."""

    def __init__(self, rirs: RirSource, rate: int, cache: ByteBudgetCache):
        self.rirs = rirs
        self.rate = rate
        self.cache = cache

    def wet(self, sources: np.ndarray, draws: list[np.ndarray]) -> np.ndarray:
        """``sources`` ``[M, T]`` float32, group ``g``'s ``len(draws[g])`` rows one after another, convolved with
        the RIRs ``draws`` pick ("full", cropped to ``T``; rows zero past a group's length stay right, since the
        first samples of a convolution depend only on the first samples of its input)."""
        if sum(len(d) for d in draws) != sources.shape[0]:
            raise ValueError(f"{sources.shape[0]} source rows for {sum(len(d) for d in draws)} RIR draws")
        if self.rirs.simulated:
            kernels, _lengths = self.rirs.rooms([float(d[0]) for d in draws], [len(d) for d in draws], self.rate)
            return convolve_rows(sources, kernels)
        bank = self.rirs.bank
        entries = [bank.entry(float(x)) for d in draws for x in d]
        rirs = [self.cache.get(("rir", e), lambda e=e: self.rirs.bank_rir(e, self.rate)) for e in entries]
        size = convolution_size(sources.shape[1], max(len(r) for r in rirs))
        return convolve_rows(sources, spectra=cached_spectra(entries, lambda i: rirs[i], size, self.cache.get),
                             size=size)

    def kernels(self, draws: list[np.ndarray]) -> np.ndarray:
        """The RIRs ``draws`` pick, one float32 row per source (group ``g``'s ``len(draws[g])`` rows one after
        another), each zero past its RIR: what ``wet`` convolves with, for a batch reverberated where training runs
        (``augment_on: batch``, ``loader.tse.batch_records``)."""
        if self.rirs.simulated:
            return self.rirs.rooms([float(d[0]) for d in draws], [len(d) for d in draws], self.rate)[0]
        entries = [self.rirs.bank.entry(float(x)) for d in draws for x in d]
        return kernel_rows([self.cache.get(("rir", e), lambda e=e: self.rirs.bank_rir(e, self.rate))
                            for e in entries])


__all__ = ["Reverberator"]
