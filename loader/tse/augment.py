"""Where noise and RIRs come from, and the augmentations that use them: noise on pre-mixed mixtures, enrollment
reverberation and noise, and a batch's reverberation for online mixing.

WeSep adds noise to the mixture only (``noise_prob``), in pre-mixed (offline) training as in online mixing,
reverberates each source of an online mixture with its own RIR (``add_reverb``), and augments waveform enrollments
(``cue_processing.audio.{reverb_enroll_prob, noise_enroll_prob}``).  The sources:

- noise: the user's WeSep noise LMDB as it is (``noise_lmdb_file``; keys by cursor, entries decoded and resampled
  at each draw) or noise packs (``noise_banks``, e.g. the LMDB converted once with ``speechpack build audio-bank
  --kind noise --lmdb``: mapped int16, nothing to decode).  Either way the SNR follows WeSep's key rule
  (``media.noise_lmdb``: ``speech*`` keys U[10, 30] dB, others U[-5, 25]; enrollments U[0, 25] for non-speech),
  unless ``noise_snr`` fixes one range;
- RIRs: one simulated room per mixture (``reverb_conf``, ``loader.tse.room_sim``), its generator keyed by one
  uniform draw of the mixture's stream, or RIR packs (``rir_banks``).  Simulated RIRs are cut where their
  remaining energy is ``RIR_TRIM_DB`` (60 dB) below the total (``loader.tse.convolve.trim_length``), so FFTs stay short;
  ``RirSource.rooms`` simulates the rooms of a whole batch in one call.  Bank RIRs are used whole: on real speech
  a 60 dB cut changes the reverberant signal by -52 to -59 dB (docs/wesep.md), more than we let an optimisation
  change the user's own RIRs, and their spectra are cached, so their length costs little.

Online reverberation is made for a whole batch (``Reverberator``): per 2-source mixture the room simulation and the
three FFTs per source are most of the cost with ``reverb_prob: 1`` (docs/performance.md, "WeSep augmentation"), so
every reverberated group's sources are decoded into one zero-padded ``[M, T]`` array, all rooms simulated in one
call (one per group, keyed by its first RIR draw) and all ``M`` rows convolved in one real FFT call each way at one
size (``loader.tse.convolve``).  Bank RIRs are decoded, trimmed and transformed once per process and FFT size (the
mixer's ``ByteBudgetCache``); simulated rooms never repeat, so their spectra are not kept.

Every draw comes from a counter-based stream (``loader.rng.item_rng`` / ``augment_rng``), in a fixed count
per row and made before any decoding, so batches are the same for any worker count and after a resume, and which
rows share a batch changes only float32 round-off, never a draw.
"""

from __future__ import annotations

import numpy as np
import soxr

from speechpack.loader.cache import CacheSettings, open_cached_pack
from speechpack.loader.pack import Pack
from speechpack.loader.tse.mix_args import AugmentArgs
from speechpack.loader.rng import room_generator
from speechpack.loader.tse.buffers import ByteBudgetCache
from speechpack.loader.tse.convolve import (
    cached_spectra,
    convolution_size,
    convolve_rows,
    convolve_same,
    kernel_rows,
    trim_length,
)
from speechpack.loader.tse.mixing import MixError
from speechpack.loader.tse.mixing import energies, fit_noise
from speechpack.loader.tse.room_sim import draw_room, rooms_rirs
from speechpack.loader.samples import decoded
from speechpack.schemas.constants import KIND_NOISE, KIND_RIR, STREAM_AUDIO
from speechpack.media.noise_lmdb import NoiseLmdb, enroll_noise_snr_range, noise_snr_range

#: WeSep peak-normalises a reverberated enrollment to this.
ENROLL_PEAK = 0.9
#: Uniform draws per mixture for offline noise: on/off, entry, offset, SNR.
NOISE_DRAWS = 4
#: Uniform draws per enrollment: reverb on/off, RIR (or room key), noise on/off, entry, offset, SNR.
ENROLL_DRAWS = 6


class Bank:
    """A noise or RIR bank: its packs and its entries as ``[(pack, audio segment, sample)]`` rows (channel 0)."""

    def __init__(self, paths: tuple[str, ...], kind: str, cache: CacheSettings | None = None):
        self.packs: list[Pack] = []
        entries = []
        for path in paths:
            pack = open_cached_pack(path, cache)  # a bank by URL through the loader's node cache
            if pack.kind != kind:
                raise MixError(f"{path}: a {kind} bank is needed here, this pack is {pack.kind}")
            table = pack.streams[STREAM_AUDIO]
            first = np.asarray(table.first, dtype=np.int64)
            entries.append(np.stack([np.full(len(pack), len(self.packs), dtype=np.int64), first,
                                     np.arange(len(pack), dtype=np.int64)], axis=1))
            self.packs.append(pack)
        self.rows = np.concatenate(entries) if entries else np.zeros((0, 3), np.int64)
        if paths and not len(self.rows):
            raise MixError(f"the {kind} banks {list(paths)} are empty")

    def __len__(self) -> int:
        return len(self.rows)

    def entry(self, draw: float) -> int:
        """The entry a uniform ``draw`` in [0, 1) picks."""
        return min(int(draw * len(self.rows)), len(self.rows) - 1)

    def key(self, entry: int) -> str:
        """The sample key of ``entry`` (a converted LMDB keeps WeSep's keys, so the ``speech`` rule holds)."""
        pack_id, _, sample = self.rows[entry]
        return str(self.packs[int(pack_id)].keys[int(sample)])

    def read(self, entry: int, rate: int) -> np.ndarray:
        """Channel 0 of entry ``entry``, float64 at ``rate``."""
        pack_id, segment, _ = self.rows[entry]
        pack = self.packs[int(pack_id)]
        audio = decoded(pack, STREAM_AUDIO, int(segment))[0].astype(np.float64)  # the one decode path
        if pack.sample_rate != rate:
            audio = soxr.resample(audio, pack.sample_rate, rate)
        return audio


class NoiseSource:
    """Noise from a WeSep LMDB (``noise_lmdb_file``) or noise packs (``noise_banks``); ``draw`` gives a noise
    fitted to a length and its SNR.  The LMDB's key list is read by cursor once per process (pickles as paths)."""

    def __init__(self, augment: AugmentArgs, cache: CacheSettings | None = None):
        self.lmdb = NoiseLmdb(augment.noise_lmdb_file) if augment.noise_lmdb_file is not None else None
        self.bank = Bank(augment.noise_banks, KIND_NOISE, cache)
        self.snr = augment.noise_snr
        self._keys: list[str] | None = None
        if self.lmdb is not None:
            len(self)  # a missing or empty LMDB is named when the loader is built, not in a worker

    def __bool__(self) -> bool:
        return self.lmdb is not None or len(self.bank) > 0

    def _lmdb_keys(self) -> list[str]:
        if self._keys is None:
            self._keys = self.lmdb.keys()
        return self._keys

    def __len__(self) -> int:
        return len(self._lmdb_keys()) if self.lmdb is not None else len(self.bank)

    def key(self, entry: int) -> str:
        return self._lmdb_keys()[entry] if self.lmdb is not None else self.bank.key(entry)

    def read(self, entry: int, rate: int) -> np.ndarray:
        """Channel 0 of ``entry``, float64 at ``rate``."""
        if self.lmdb is None:
            return self.bank.read(entry, rate)
        audio, _ = self.lmdb.read(self._lmdb_keys()[entry], rate)
        return audio[0].astype(np.float64)

    def draw(self, draws: np.ndarray, rate: int, length: int, enroll: bool = False) -> tuple[np.ndarray, float]:
        """``draws`` (3 uniforms: entry, offset, SNR) to a noise of ``length`` (wrapped or cropped) and its SNR
        in dB, from ``noise_snr`` or WeSep's rule for the entry's key (mixture or enrollment ranges)."""
        count = len(self)
        entry = min(int(draws[0] * count), count - 1)
        key = self.key(entry)
        low, high = self.snr or (enroll_noise_snr_range(key) if enroll else noise_snr_range(key))
        return fit_noise(self.read(entry, rate), length, float(draws[1])), float(low + draws[2] * (high - low))

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_keys": None}


class RirSource:
    """RIRs from simulated rooms (``reverb_conf``, trimmed at ``RIR_TRIM_DB``) or RIR packs (``rir_banks``)."""

    def __init__(self, augment: AugmentArgs, cache: CacheSettings | None = None):
        self.room = augment.reverb_conf
        self.bank = Bank(augment.rir_banks, KIND_RIR, cache)

    @property
    def simulated(self) -> bool:
        return self.room is not None

    def rooms(self, draws: list[float], counts: list[int], rate: int) -> tuple[np.ndarray, np.ndarray]:
        """One room per uniform draw (its generator keyed by the draw), ``counts[i]`` RIRs in room ``i`` (one per
        source): trimmed float32 ``[sum(counts), L]`` rows, each zero past its length, and the lengths."""
        rngs = [room_generator(draw) for draw in draws]
        rooms = [draw_room(rng, self.room, count) for rng, count in zip(rngs, counts)]
        rirs, _lengths = rooms_rirs(rooms, rngs, rate)
        kept = trim_length(rirs)
        rirs = rirs[:, :int(kept.max())]
        for row, end in zip(rirs, kept.tolist()):
            row[end:] = 0.0
        return rirs, kept

    def room_rirs(self, draw: float, count: int, rate: int) -> list[np.ndarray]:
        """``count`` trimmed RIRs of one room (one per source), the room's generator keyed by the uniform ``draw``."""
        rirs, kept = self.rooms([draw], [count], rate)
        return [row[:n] for row, n in zip(rirs, kept)]

    def bank_rir(self, entry: int, rate: int) -> np.ndarray:
        """Bank entry ``entry`` as a float32 RIR (whole)."""
        return self.bank.read(entry, rate).astype(np.float32)


def add_scaled_noise(signal: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    """``signal`` ``[C, T]`` plus ``noise`` ``[T]`` (on every channel) at ``snr_db`` below the signal's energy
    (over all channels, per channel); a silent signal or noise is left as it is."""
    e_noise = float(energies(noise))
    e_signal = float(energies(signal).sum()) / signal.shape[0]
    if e_noise <= 0.0 or e_signal <= 0.0:
        return signal
    factor = np.float32(np.sqrt(e_signal / (e_noise * 10.0 ** (snr_db / 10.0))))
    return signal + noise.astype(np.float32) * factor


def noisy_mixture(mix: np.ndarray, draws: np.ndarray, noise: NoiseSource, prob: float, rate: int) -> np.ndarray | None:
    """WeSep's ``add_noise`` on a pre-mixed chunk ``[C, L]``: with probability ``prob`` (``draws[0]``) the noisy
    mixture, else ``None``.  ``draws``: ``NOISE_DRAWS`` uniforms."""
    if not draws[0] < prob:
        return None
    sample, snr = noise.draw(draws[1:], rate, mix.shape[-1])
    return add_scaled_noise(mix, sample, snr)


class EnrollAugment:
    """``cue_processing.audio``: reverberate (then peak-normalise to ``ENROLL_PEAK``, as WeSep) and/or add noise
    to a waveform enrollment, from the same rooms or banks and noise sources as the mixtures."""

    def __init__(self, augment: AugmentArgs, rate: int, cache: CacheSettings | None = None):
        self.reverb_prob = augment.reverb_enroll_prob
        self.noise_prob = augment.noise_enroll_prob
        self.rate = rate
        self.rirs = RirSource(augment, cache) if self.reverb_prob > 0 else None
        self.noise = NoiseSource(augment, cache) if self.noise_prob > 0 else None

    def __call__(self, audio: np.ndarray, draws: np.ndarray) -> np.ndarray:
        """``audio`` ``[C, T]`` float32 augmented by ``draws`` (``ENROLL_DRAWS`` uniforms)."""
        out = audio
        if draws[0] < self.reverb_prob:
            if self.rirs.simulated:
                rir = self.rirs.room_rirs(float(draws[1]), 1, self.rate)[0]
            else:
                rir = self.rirs.bank.read(self.rirs.bank.entry(float(draws[1])), self.rate)
            out = convolve_same(out, rir)
            peak = float(np.abs(out).max())
            if peak > 0:
                out = out * np.float32(ENROLL_PEAK / peak)
        if draws[2] < self.noise_prob:
            sample, snr = self.noise.draw(draws[3:], self.rate, out.shape[-1], enroll=True)
            out = add_scaled_noise(out, sample, snr)
        return np.asarray(out, dtype=np.float32)


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


__all__ = ["Bank", "ENROLL_DRAWS", "ENROLL_PEAK", "EnrollAugment", "NOISE_DRAWS", "NoiseSource", "Reverberator",
           "RirSource", "add_scaled_noise", "noisy_mixture"]
