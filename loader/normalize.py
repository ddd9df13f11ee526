"""MuVAP's loudness normalisation from whole-recording statistics (notes-muvap.md, section 2).

With the recording's mean ``mu``, DC-free rms ``sigma`` and DC-free peak ``p`` (all stored in the pack):
``g = 1`` if ``sigma`` or ``p`` is below 1e-8, else ``g = min(10**(-25/20) / sigma, 10**(20/20), 0.99 / p)``, and
``y = (x - mu) * g``.  Because the statistics describe the whole recording, a chunk gets the same gain as its
recording would: gain computed from the chunk alone would drift with the chunk's content.
"""

from __future__ import annotations

import numpy as np

#: ``normalize`` values of a TSE ``dataset_args`` (``false`` is off).
NORMALIZE_TYPES = ("muvap",)
#: MuVAP's loudness normalisation: target RMS (dBFS), gain cap (dB), peak cap (linear).
NORMALIZE_TARGET_RMS_DBFS = -25.0
NORMALIZE_MAX_GAIN_DB = 20.0
NORMALIZE_PEAK_LIMIT = 0.99

_SILENCE = 1e-8


def muvap_gain(rms: np.ndarray | float, peak: np.ndarray | float) -> np.ndarray:
    """Gain per recording; vectorised over arrays of statistics."""
    rms = np.asarray(rms, dtype=np.float64)
    peak = np.asarray(peak, dtype=np.float64)
    silent = (rms <= _SILENCE) | (peak <= _SILENCE)
    with np.errstate(divide="ignore"):
        gain = np.minimum.reduce([
            10 ** (NORMALIZE_TARGET_RMS_DBFS / 20) / np.where(silent, 1.0, rms),
            np.full_like(rms, 10 ** (NORMALIZE_MAX_GAIN_DB / 20)),
            NORMALIZE_PEAK_LIMIT / np.where(silent, 1.0, peak),
        ])
    return np.where(silent, 1.0, gain)
