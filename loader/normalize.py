"""Audio normalisation for every task: one vocabulary (``normalize: none|muvap|utterance``) and MuVAP's gain.

Every task's ``dataset_args.normalize`` takes the same words, and each task supports the ones it builds:

=============  =======================================================================  ===========
value          what the loader does                                                     tasks
=============  =======================================================================  ===========
``none``       the stored audio, as packed                                              all
``muvap``      MuVAP's loudness gain from whole-recording statistics (below)            tse, asd
``utterance``  zero mean, unit variance over each whole utterance (Omnilingual's        asr
               ``normalize_audio``; ``loader.asr.features.normalize_rows``)
=============  =======================================================================  ===========

Spellings accepted everywhere: ``false``/``null`` mean ``none``; ``true`` means the task's own normalisation
(``muvap`` for tse and asd, ``utterance`` for asr); ``{type: <value>}`` means ``<value>``.  A seed system's own key
stays an alias where a drop-in needs it: ASR's ``normalize_audio: true|false`` (Omnilingual's key).

MuVAP's gain (docs/asd.md and docs/loader.md, ``normalize``): with the recording's mean ``mu``, DC-free rms
``sigma`` and DC-free peak ``p`` (all stored in the pack): ``g = 1`` if ``sigma`` or ``p`` is below 1e-8, else
``g = min(10**(-25/20) / sigma, 10**(20/20), 0.99 / p)``, and ``y = (x - mu) * g``.  Because the statistics
describe the whole recording, a chunk gets the same gain as its recording would: gain computed from the chunk
alone would drift with the chunk's content.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from speechpack.loader.config_checks import ConfigError
from speechpack.schemas.documents import key_list

#: MuVAP's loudness normalisation: target RMS (dBFS), gain cap (dB), peak cap (linear); below ``_SILENCE`` (rms
#: or peak) the gain is 1.
NORMALIZE_TARGET_RMS_DBFS = -25.0
NORMALIZE_MAX_GAIN_DB = 20.0
NORMALIZE_PEAK_LIMIT = 0.99
_SILENCE = 1e-8

#: Every ``normalize`` value any task knows (the table above).
NONE, MUVAP, UTTERANCE = "none", "muvap", "utterance"
NORMALIZATIONS = (NONE, MUVAP, UTTERANCE)


def parse_normalize(value: Any, where: str, supported: tuple[str, ...], default_on: str) -> str:
    """A ``normalize`` value in the one vocabulary: one of ``supported`` (the task's, in the order its errors list
    them); ``true`` is ``default_on``, ``false``/``null`` is ``none``, ``{type: X}`` is ``X``."""
    if value is None or value is False:
        value = NONE
    elif value is True:
        value = default_on
    elif isinstance(value, dict):
        unknown = set(value) - {"type"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {key_list(unknown)} (known: type)")
        value = value.get("type", default_on)
    if value not in supported:
        built = (f" ({value} is not built for this task)" if isinstance(value, str) and value in NORMALIZATIONS
                 else "")
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(supported)}{built}")
    return value


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


class Normalizer:
    """A normalisation that works from a recording's stored statistics (``rms``, ``peak``, ``mean``), chosen once
    from ``normalize`` (``normalizer``) and used by every decode path of a task (``loader.samples``), so a new
    one reaches every path or none.  ``gains(rms, peak)``: the gain per recording (None: gain 1, nothing read);
    ``centres``: whether ``mean * gain`` is subtracted."""

    def __init__(self, name: str, gains=None, centres: bool = False):
        self.name = name
        self.gains = gains
        self.centres = centres

    def __repr__(self) -> str:
        return f"Normalizer({self.name!r})"


#: The stored-statistics normalisations, by ``normalize`` value (``utterance`` works on the decoded utterance
#: instead: ``loader.asr.features.normalize_rows``).
NORMALIZERS = {NONE: Normalizer(NONE), MUVAP: Normalizer(MUVAP, muvap_gain, centres=True)}


def normalizer(name: str) -> Normalizer:
    """The ``Normalizer`` of ``normalize: name`` (an already parsed value)."""
    if name not in NORMALIZERS:
        raise ConfigError(f"normalize: {name!r} is not one of {', '.join(NORMALIZERS)} (decoded from stored "
                          f"statistics)")
    return NORMALIZERS[name]
