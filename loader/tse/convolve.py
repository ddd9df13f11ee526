"""Reverberation as FFT convolution: each source convolved with its own room impulse response (RIR), "full" and
cropped to the source's length (WeSep's ``add_reverb``), for a whole batch of sources at once.

Why batched, in single precision, and with trimmed kernels (docs/performance.md, "WeSep augmentation"):

- **One FFT size per batch.**  Every source of a batch is zero-padded to the batch's longest and every RIR to the
  longest, and all rows go through one real FFT call each way.  Zero padding changes nothing: the first ``T``
  output samples of a convolution depend only on the first ``T`` input samples, and any FFT size of at least
  ``T + L - 1`` gives the linear convolution.  One call per batch instead of one per group spares the per-call
  overhead and lets the FFT library vectorise across rows.
- **Single precision.**  ``scipy.fft`` (the ``wesep`` extra) transforms float32 as float32; numpy's pocketfft
  computes every transform in double.  The float32 round-off (about 1e-7 of the signal) is far below anything a
  model hears; the whole-batch result agrees with the float64 convolution to more than 100 dB SNR.
- **Trimmed kernels.**  A RIR is cut where the energy left after it is ``RIR_TRIM_DB`` (60 dB) below its total
  (Schroeder backward integration, as RT60 is measured): the rest would change the convolution by less than a
  millionth of its energy, and the FFT size follows the kept length.

Only ``fast_fft_size`` is needed without scipy; ``convolve_rows`` then falls back to ``numpy.fft`` (double).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

#: dB: a RIR is cut where the energy left after it is this far below its total energy.
RIR_TRIM_DB = 60.0
#: Threads per FFT call.  One: the loader runs in DataLoader workers, one per core; a second FFT thread per worker
#: only competes with the other workers (bench/reverb_throughput.py measures ``workers=-1`` against one).
FFT_WORKERS = 1


def fast_fft_size(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= ``n``: an FFT size pocketfft (numpy's and scipy's) handles fast, often much
    smaller than the next power of two (80,000 instead of 131,072 for a 4 s chunk and a 1 s RIR)."""
    best = 1 << max(int(np.ceil(np.log2(max(n, 1)))), 0)
    power5 = 1
    while power5 < best:
        power35 = power5
        while power35 < best:
            size = power35
            while size < n:
                size *= 2
            best = min(best, size)
            power35 *= 3
        power5 *= 5
    return best


def fft_module():
    """``scipy.fft`` when installed (the ``wesep`` extra): float32 stays single precision, faster than numpy's
    pocketfft here, which computes in double; else ``numpy.fft``."""
    try:
        import scipy.fft as fft
    except ImportError:  # pragma: no cover - scipy comes with the wesep extra
        return np.fft
    return fft


def real_fft(rows: np.ndarray, size: int, inverse: bool = False) -> np.ndarray:
    """One real FFT call (``inverse``: its inverse, ``size`` real outputs) over ``rows`` (last axis), with
    :func:`fft_module`, ``FFT_WORKERS`` threads where the library takes them; with scipy, float32 stays single
    precision and float64 double."""
    fft = fft_module()
    function = fft.irfft if inverse else fft.rfft
    if fft is np.fft:
        return function(rows, size, axis=-1)
    return function(rows, size, axis=-1, workers=FFT_WORKERS)


def trim_length(rirs: np.ndarray, trim_db: float = RIR_TRIM_DB) -> np.ndarray:
    """Per row of ``rirs`` ``[n, L]``: how many samples to keep so that the energy after them is ``trim_db`` or
    more below the row's total (Schroeder backward integration, in float64); at least one."""
    energy = np.square(np.atleast_2d(rirs), dtype=np.float64)
    remaining = np.cumsum(energy[:, ::-1], axis=1, out=energy[:, ::-1])[:, ::-1]  # in place: one float64 copy
    threshold = remaining[:, :1] * 10.0 ** (-trim_db / 10.0)
    return np.maximum(np.count_nonzero(remaining > threshold, axis=1), 1)


def trim_rir(rir: np.ndarray, trim_db: float = RIR_TRIM_DB) -> np.ndarray:
    """``rir`` (1-D) cut after the last sample whose remaining energy is still above ``trim_db`` below the total:
    what follows cannot be heard over the rest."""
    return rir[:int(trim_length(rir, trim_db)[0])]


def kernel_rows(rirs: list[np.ndarray]) -> np.ndarray:
    """1-D RIRs as one float32 ``[n, longest]`` array, each row zero past its RIR."""
    kernels = np.zeros((len(rirs), max(len(r) for r in rirs)), dtype=np.float32)
    for row, rir in zip(kernels, rirs):
        row[:len(rir)] = rir
    return kernels


def convolution_size(length: int, kernel_length: int) -> int:
    """The FFT size of a linear convolution of ``length`` samples with a ``kernel_length`` kernel."""
    return fast_fft_size(length + kernel_length - 1)


def kernel_spectra(kernels: np.ndarray, size: int) -> np.ndarray:
    """The real FFTs of ``kernels`` ``[n, L]`` at ``size``, single precision (what :func:`convolve_rows` takes as
    ``spectra``; a caller whose kernels repeat keeps them)."""
    return real_fft(np.asarray(kernels, dtype=np.float32), size)


def convolve_rows(sources: np.ndarray, kernels: np.ndarray | None = None, spectra: list[np.ndarray] | None = None,
                  size: int | None = None) -> np.ndarray:
    """Row ``i`` of ``sources`` ``[n, T]`` convolved with row ``i`` of ``kernels`` ``[n, L]`` ("full", cropped to
    ``T``): float32, every row in one real FFT call each way at one size.  The result is a view of the inverse
    transform's rows (each row contiguous, the whole not): copying it out would cost a pass over the batch.

    ``spectra`` (one ``[size // 2 + 1]`` row per source, from :func:`kernel_spectra` at ``size``) replaces
    ``kernels`` when the caller has them already (bank RIRs drawn again and again): then only the sources are
    transformed, and each source's spectrum is multiplied by its kernel's in place (no stacked copy)."""
    if sources.ndim != 2:
        raise ValueError(f"convolve_rows needs [n, T] sources, got {sources.shape}")
    length = sources.shape[1]
    if spectra is None:
        if kernels is None or kernels.ndim != 2 or kernels.shape[0] != sources.shape[0]:
            raise ValueError(f"convolve_rows needs one [L] kernel per source row, got "
                             f"{None if kernels is None else kernels.shape} for {sources.shape}")
        size = convolution_size(length, kernels.shape[1])
    elif size is None or len(spectra) != sources.shape[0] or any(s.shape != (size // 2 + 1,) for s in spectra):
        raise ValueError(f"convolve_rows: {len(spectra)} spectra do not match {sources.shape[0]} rows at size {size}")
    transformed = real_fft(np.asarray(sources, dtype=np.float32), size)
    if spectra is None:
        transformed *= real_fft(np.asarray(kernels, dtype=np.float32), size)
    else:
        for row, spectrum in zip(transformed, spectra):
            row *= spectrum
    wet = real_fft(transformed, size, inverse=True)[:, :length]  # rows contiguous, the array not (no copy)
    return wet if wet.dtype == np.float32 else wet.astype(np.float32)


def convolve_same(signal: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """Every row of ``signal`` ``[C, T]`` convolved with the one ``rir`` ("full", cropped to ``T``)."""
    return convolve_rows(signal, np.broadcast_to(np.asarray(rir, dtype=np.float32), (signal.shape[0], len(rir))))


def cached_spectra(keys: list, kernels: Callable[[int], np.ndarray], size: int,
                   cache_get: Callable[[object, Callable[[], np.ndarray]], np.ndarray]) -> list[np.ndarray]:
    """Kernel spectra for :func:`convolve_rows`: row ``i`` the spectrum of ``kernels(i)`` at ``size``, looked up
    under ``(keys[i], size)`` with ``cache_get(key, make)`` (a ``ByteBudgetCache``'s ``get``), made on a miss."""
    return [cache_get(("spectrum", key, size), lambda i=i: kernel_spectra(kernels(i)[None, :], size)[0])
            for i, key in enumerate(keys)]


__all__ = ["FFT_WORKERS", "RIR_TRIM_DB", "cached_spectra", "convolution_size", "convolve_rows", "convolve_same",
           "fast_fft_size", "fft_module", "kernel_rows", "kernel_spectra", "real_fft", "trim_length", "trim_rir"]
