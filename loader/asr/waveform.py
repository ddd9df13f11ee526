"""Waveform processing of ASR batches, in torch over a padded batch: mono by channel mean, and Omnilingual's
``normalize_audio``.

``normalize_rows`` is ``layer_norm`` over each whole utterance, as Omnilingual applies it
(``layer_norm(waveform, waveform.shape)``): subtract the mean, divide by ``sqrt(var + 1e-5)`` with the biased
variance, over the row's valid samples only (padding stays zero and does not count).
"""

from __future__ import annotations

import numpy as np
import torch

#: ``torch.nn.functional.layer_norm``'s default epsilon, which Omnilingual's normalisation inherits.
LAYER_NORM_EPS = 1e-5


def to_mono(audio: np.ndarray) -> np.ndarray:
    """``[C, T]`` to ``[T]`` by the mean over channels (a mono signal is returned as its single row)."""
    return audio[0] if audio.shape[0] == 1 else audio.mean(axis=0, dtype=np.float32)


def valid_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """``[B, width]`` True on each row's first ``lengths[b]`` positions."""
    return torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]


def normalize_rows(waves: torch.Tensor, lengths: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Zero mean, unit variance per row over its valid samples (module docstring); padding stays zero.  ``out``
    (the shape of ``waves``) receives the result, so a batch can be written straight into its destination."""
    lengths = torch.as_tensor(lengths, device=waves.device)
    valid = valid_mask(lengths, waves.shape[1]).to(waves.dtype)
    count = lengths.to(waves.dtype).clamp_min(1)[:, None]
    mean = (waves * valid).sum(dim=1, keepdim=True) / count
    centred = (waves - mean) * valid
    var = centred.square().sum(dim=1, keepdim=True) / count
    return torch.div(centred, torch.sqrt(var + LAYER_NORM_EPS), out=out)


__all__ = ["LAYER_NORM_EPS", "normalize_rows", "to_mono", "valid_mask"]
