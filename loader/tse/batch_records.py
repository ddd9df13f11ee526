"""What a worker sends when online mixtures are augmented where training runs (``augment_on: batch``): the dry
sources of every group and the small records of the draws that the worker made for them, as numeric arrays that
travel in the worker's shared-memory slot like any batch field (docs/loader.md, "Augmentation where training
runs").

Why the whole mix moves, not only the reverberation: WeSep's SNR mixer scales each interferer by the energy of the
*reverberant* sources and normalises the mixture by its peak, and the noise is scaled to the mixture's energy, so
nothing after the convolution can be done before it.  The worker makes every draw (speakers, windows, timeline,
rooms or bank RIRs, SNRs, gain, noise entry and offset) exactly as it does for ``augment_on: worker``, simulates the
rooms (their RIRs are short, and the draws are numpy's counter-based streams) and reads the noise segments; the
batch side (``loader.tse.batch_augment``) only convolves, mixes and adds noise.

One difference in what is checked: a worker redraws a group while one of its sources is silent.  Here the check
is on the dry sources (the reverberant ones do not exist yet), which decides the same except for a source whose
only energy lies in its last samples, closer to its end than the direct path's delay: vanishingly rare in speech.

The fields (``R`` rows, one per source, mixture-major as the batch's rows; ``G`` groups; ``T`` the longest group;
``L`` the longest RIR):

==================  ===============  =====================================================================
field               shape, dtype     what
==================  ===============  =====================================================================
``aug_dry``         [R, T] float32   each group's dry sources (timeline applied), zero past its length
``aug_group``       [R] int64        the group of each row
``aug_group_len``   [G] int64        each group's length in samples
``aug_snr``         [R] float64      each source's SNR draw in dB (the first of a group, the target, unused)
``aug_gain``        [G] float64      each group's gain draw in dB
``aug_reverb``      [R] bool         whether the row is reverberated (its group's ``reverb_prob`` draw)
``aug_rir``         [R, L] float32   the row's RIR (trimmed simulated room or whole bank entry), zero past it
``aug_noise``       [G, T] float32   each group's noise segment (wrapped or cropped to its length)
``aug_noise_on``    [G] bool         whether the group gets noise (its ``noise_prob`` draw)
``aug_noise_snr``   [G] float64      the noise's SNR in dB (mixture over noise)
``aug_keep_dry``    [1] bool         ``reverb_keep_dry``: targets from the dry sources
``aug_out_len``     [2] int64        ``wav_mix``'s and ``wav_target``'s length (each field's ``align``)
==================  ===============  =====================================================================
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays

#: Every record field begins with this; the batch side removes them all once applied.
RECORD_PREFIX = "aug_"
#: The field whose presence says a batch still waits for its augmentation.
DRY_FIELD = "aug_dry"


def draw_records(groups: Sequence, kernels: np.ndarray | None, out_lengths: tuple[int, int],
                 keep_dry: bool, arrays: BatchArrays = NUMPY) -> dict[str, np.ndarray]:
    """The record fields of a batch's ``groups`` (``loader.tse.online.Group`` with dry ``sources``), in row
    order.  ``kernels``: one RIR row per source of the reverberated groups, in their order (``None`` when none
    is); ``out_lengths``: the lengths of ``wav_mix`` and ``wav_target``; ``arrays`` makes the fields
    (``loader.transport.batch_arrays``)."""
    sizes = np.asarray([g.size for g in groups], dtype=np.int64)
    lengths = np.asarray([g.draft.length for g in groups], dtype=np.int64)
    rows, count, longest = int(sizes.sum()), len(groups), int(lengths.max())
    dry = arrays.zeros((rows, longest), np.float32)
    snr = arrays.empty((rows,), np.float64)
    reverb = arrays.zeros((rows,), np.bool_)
    gain = arrays.empty((count,), np.float64)
    noise = arrays.zeros((count, longest), np.float32)
    noise_on = arrays.zeros((count,), np.bool_)
    noise_snr = arrays.zeros((count,), np.float64)
    rir = arrays.zeros((rows, 1 if kernels is None else kernels.shape[1]), np.float32)
    row = kernel_row = 0
    for g, group in enumerate(groups):
        size, length = group.size, group.draft.length
        dry[row:row + size, :length] = group.sources
        snr[row:row + size] = group.snr
        gain[g] = group.gain
        if group.draft.rir_draws is not None:
            reverb[row:row + size] = True
            rir[row:row + size] = kernels[kernel_row:kernel_row + size]
            kernel_row += size
        if group.noise is not None:
            segment, noise_snr[g] = group.noise
            noise[g, :length] = segment
            noise_on[g] = True
        row += size
    return {"aug_dry": dry, "aug_group": np.repeat(np.arange(count, dtype=np.int64), sizes),
            "aug_group_len": lengths, "aug_snr": snr, "aug_gain": gain, "aug_reverb": reverb, "aug_rir": rir,
            "aug_noise": noise, "aug_noise_on": noise_on, "aug_noise_snr": noise_snr,
            "aug_keep_dry": np.asarray([keep_dry]), "aug_out_len": np.asarray(out_lengths, dtype=np.int64)}


__all__ = ["DRY_FIELD", "RECORD_PREFIX", "draw_records"]
