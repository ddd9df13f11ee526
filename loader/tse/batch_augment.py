"""Online mixtures reverberated, noised and mixed where training runs (``augment_on: batch``; docs/loader.md,
"Augmentation where training runs"): the collated batch's dry sources and draw records
(``loader.tse.batch_records``) made into ``wav_mix`` and ``wav_target`` in torch, on whatever device the batch's
tensors are on.

Why here: with ``reverb_prob: 1`` the FFT convolution is most of a worker's time (docs/performance.md, "WeSep
augmentation"); on an accelerator the whole batch is three batched FFT calls.  The worker has made every draw
(rooms and their RIRs, SNRs, gain, noise segments) from the same counter-based streams as ``augment_on: worker``,
so a seed gives the same rooms, SNRs and noise segments on either side, and the batches agree within float32
round-off (tests/loader/tse/test_batch_augment.py).

What is computed is WeSep's, as ``loader.tse.online.OnlineMixer.render`` computes it, vectorised over the batch:

- each reverberated row convolved with its RIR ("full", cropped to its group's length; one real FFT size for the
  batch, ``loader.tse.convolve.fast_fft_size``);
- per group, WeSep's SNR mixer: interferers scaled to the target's energy and their SNR below it, the mixture
  divided by the largest peak of it and its scaled sources and multiplied by the gain;
- the group's noise added to the mixture at its SNR below the mixture's energy (targets get none);
- the targets: each (reverberant, or dry with ``reverb_keep_dry``) source times its factor in the mixture.

Groups are laid out ``[G, N, T]`` (``N`` the largest group, absent speakers zero) for the per-group sums and peaks:
plain indexing and reductions, so results do not depend on the order of atomic additions on an accelerator.
"""

from __future__ import annotations

import torch

from speechpack.loader.tse.batch_records import DRY_FIELD, RECORD_PREFIX
from speechpack.loader.tse.convolve import fast_fft_size
from speechpack.loader.tse.mixing import MIN_ENERGY


def augment_batch(batch: dict) -> dict:
    """``batch`` with ``wav_mix`` and ``wav_target`` made from its records (in the place the records held), the
    records removed; a batch without them (validation, ``augment_on: worker``) is returned as it is."""
    if DRY_FIELD not in batch:
        return batch
    device = torch.as_tensor(batch[DRY_FIELD]).device
    records = {name: torch.as_tensor(value).to(device) for name, value in batch.items()
               if name.startswith(RECORD_PREFIX)}
    wav_mix, wav_target = mix_records(records)
    out = {}
    for name, value in batch.items():
        if name == DRY_FIELD:
            out["wav_mix"], out["wav_target"] = wav_mix, wav_target
        elif not name.startswith(RECORD_PREFIX):
            out[name] = value
    return out


def reverberate(dry: torch.Tensor, rirs: torch.Tensor, rows: torch.Tensor, row_len: torch.Tensor | None
                ) -> torch.Tensor:
    """``dry`` ``[R, T]`` with the rows ``rows`` convolved with theirs of ``rirs`` ``[R, L]`` ("full", cropped to
    ``T``; zero from ``row_len`` on, unless ``row_len`` is None: every row ``T`` long): one real FFT call each way
    at one size.  With every row reverberated the result is a view of the inverse transform (no copy)."""
    if rows.numel() == 0:
        return dry
    length = dry.shape[1]
    every = rows.numel() == dry.shape[0]
    sources, kernels = (dry, rirs) if every else (dry[rows], rirs[rows])
    size = fast_fft_size(length + kernels.shape[1] - 1)
    spectra = torch.fft.rfft(sources, size)
    spectra *= torch.fft.rfft(kernels, size)
    wet = torch.fft.irfft(spectra, size)[:, :length]
    if row_len is not None:
        ends = row_len if every else row_len[rows]
        wet = wet.masked_fill(torch.arange(length, device=dry.device) >= ends[:, None], 0.0)
    if every:
        return wet
    out = dry.clone()
    out[rows] = wet
    return out


class _Groups:
    """How the batch's rows (mixture-major, one per source) fall into groups: each row's group and position in
    it, and a ``[G, N, ...]`` layout of per-row values (a view when every group has ``N`` rows)."""

    def __init__(self, group: torch.Tensor, groups: int):
        counts = torch.bincount(group, minlength=groups)
        self.group, self.groups, self.counts = group, groups, counts
        self.first = (torch.cumsum(counts, 0) - counts)[group]  # each row's group's first row (its target)
        self.position = torch.arange(len(group), device=group.device) - self.first
        self.widest = int(counts.max())
        self.uniform = self.widest * groups == len(group)

    def laid(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` ``[R, ...]`` as ``[G, N, ...]``, absent rows zero."""
        if self.uniform:
            return values.view(self.groups, self.widest, *values.shape[1:])
        out = values.new_zeros((self.groups, self.widest, *values.shape[1:]))
        out[self.group, self.position] = values
        return out

    def rows(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group ``values`` ``[G, ...]`` repeated for each row of the group: ``[R, ...]``."""
        if self.uniform:
            return values.unsqueeze(1).expand(self.groups, self.widest, *values.shape[1:]).reshape(-1, *values.shape[1:])
        return values.repeat_interleave(self.counts, dim=0)


def _peaks(rows: torch.Tensor) -> torch.Tensor:
    """``max |x|`` per row, float64, without a temporary (WeSep's exact peak): ``amax`` and ``amin`` (vectorised
    reductions, five times faster on CPU than one ``aminmax`` pass or ``abs().amax()``)."""
    return torch.maximum(rows.amax(dim=1), -rows.amin(dim=1)).double()


def mix_records(records: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``(wav_mix, wav_target)`` ``[R, 1, T_mix]``, ``[R, 1, T_target]`` float32 from the record fields
    (``loader.tse.batch_records``), as tensors on one device."""
    dry, group_len = records["aug_dry"], records["aug_group_len"]
    length = dry.shape[1]
    layout = _Groups(records["aug_group"], group_len.shape[0])
    full_length = bool((group_len == length).all())  # train chunks: no row to cut short
    row_len = None if full_length else group_len[layout.group]
    wet = reverberate(dry, records["aug_rir"], torch.nonzero(records["aug_reverb"]).squeeze(1), row_len)

    # WeSep's SNR mixer, per group: interferers to the target's energy and their SNR below it, the mixture divided
    # by the largest peak of it and its scaled sources, times the gain (loader.tse.mixing.mix_sources)
    energy = torch.linalg.vecdot(wet, wet).double()
    scale = torch.where(layout.position == 0, torch.ones_like(energy),
                        torch.sqrt(energy[layout.first] / energy) * torch.pow(10.0, -records["aug_snr"] / 20.0))
    mix = torch.matmul(layout.laid(scale.to(dry.dtype)).unsqueeze(1), layout.laid(wet)).squeeze(1)
    peak = torch.maximum(_peaks(mix), layout.laid(_peaks(wet) * scale).amax(dim=1))
    factor = torch.pow(10.0, records["aug_gain"] / 20.0) / peak
    mix *= factor.to(dry.dtype)[:, None]

    # the mixture's noise at its SNR below the mixture's energy (loader.tse.mixing.add_noise); targets get none
    noise = records["aug_noise"]
    noise_energy = torch.linalg.vecdot(noise, noise).double()
    wanted = torch.linalg.vecdot(mix, mix).double() / (noise_energy.clamp_min(MIN_ENERGY)
                                                      * torch.pow(10.0, records["aug_noise_snr"] / 10.0))
    noisy = records["aug_noise_on"] & (noise_energy > MIN_ENERGY)
    mix.addcmul_(noise, torch.where(noisy, torch.sqrt(wanted), torch.zeros_like(wanted)).to(dry.dtype)[:, None])

    mix_len, target_len = (int(n) for n in records["aug_out_len"].tolist())
    sources = dry if bool(records["aug_keep_dry"][0]) else wet
    row_factor = (scale * layout.rows(factor)).to(dry.dtype)[:, None]
    wav_target = (sources[:, :target_len] * row_factor).unsqueeze(1)
    wav_mix = layout.rows(mix[:, :mix_len]).unsqueeze(1)
    return wav_mix, wav_target


__all__ = ["augment_batch", "mix_records", "reverberate"]
