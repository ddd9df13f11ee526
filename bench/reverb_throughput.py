"""Same-room reverberation throughput: the vectorised simulator + batched FFT convolution against a WeSep-style
per-source path, in the same run.

    python bench/reverb_throughput.py [--mixtures 48] [--speakers 2] [--batch-size 8] [--seconds 4] [--repeats 3]

Each mixture is ``--speakers`` real recordings (LibriVox clips of Debian's pocketsphinx-testdata, 16 kHz), cut to
``--seconds``, reverberated in one simulated room (WeSep's ``reverb_conf`` defaults: rooms 3 x 3 x 2.5 to
10 x 6 x 4 m, RT60 0.1-0.7 s, source-microphone distance 0.2-5 m), one RIR per source:

- **vectorised** (the loader's path, ``Reverberator`` in ``loader/tse/augment.py``): per batch of ``--batch-size``
  mixtures, every room simulated in one call (``RirSource.rooms``: every source and virtual source of the batch in
  one set of numpy operations, taps placed at the output rate, RIRs trimmed at 60 dB), then one ``convolve_rows``
  (every source of the batch in one float32 real FFT call each way, one FFT size);
- **per source** (what WeSep's online ``add_reverb`` does, written here after the published FRA-RIR recipe, not
  taken from it): for every source on its own, a FRA-RIR-style RIR (a random count of 1024-4096 virtual sources at
  random distances, reflection counts from distance with a random perturbation, impulses placed at 64 times the
  output rate, brought down in two polyphase resampling stages of 8, high-passed at 80 Hz), then
  ``scipy.signal.fftconvolve`` ("full", cropped to the source length), in float64.

Both run over the same mixtures, alternating, ``--repeats`` times after an untimed warm-up; each mixture's room
comes from its own counter-based generator (Philox keyed by one uniform draw, as the loader's
``loader.rng.room_generator``).  Unit: **mixtures per second** (best run; medians printed too), wall and CPU time.
Target: vectorised >= 3x per source; missing it prints ``BELOW TARGET`` and exits 0.  Needs scipy (installed with
the ``wesep`` and ``rir`` extras) for the per-source path.

Then, for information, the batch's convolution alone (the sources of ``--batch-size`` mixtures with the first
batch's RIRs, one FFT size) with each FFT library: ``scipy.fft`` with one thread (the loader's) and with
``workers=-1``, ``numpy.fft`` (double precision) and ``torch.fft`` with one thread and with torch's default.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import numpy as np
import soundfile
import soxr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from speechpack.loader.rng import room_generator  # noqa: E402
from speechpack.loader.tse.augment import RirSource  # noqa: E402
from speechpack.loader.tse.mix_args import AugmentArgs  # noqa: E402
from speechpack.loader.tse.convolve import convolution_size, convolve_rows  # noqa: E402
from speechpack.loader.tse.room_sim import HIGHPASS_HZ, SPEED_OF_SOUND, RoomConfig, draw_room  # noqa: E402

TARGET_SPEEDUP = 3.0
RATE = 16000
LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-{}.wav"
CLIPS = ("0870", "0880", "0890", "0920", "0930")
#: The published FRA-RIR recipe's constants: virtual sources per RIR, oversampling, reflection perturbation.
IMAGES = (1024, 4097)
OVERSAMPLE = 64
PERTURB = (-2.0, 2.0, 0.25)


def load_sources(count: int, seconds: float) -> np.ndarray:
    """``count`` real speech excerpts of ``seconds`` (float32 ``[count, T]``), cut round-robin from the clips."""
    clips = []
    for name in CLIPS:
        path = LIBRIVOX.format(name)
        if not os.path.isfile(path):
            sys.exit(f"missing real recording {path}: apt-get install -y --no-install-recommends pocketsphinx-testdata")
        data, rate = soundfile.read(path, dtype="float32")
        clips.append(data if rate == RATE else soxr.resample(data, rate, RATE).astype(np.float32))
    length = int(seconds * RATE)
    out = np.zeros((count, length), dtype=np.float32)
    for i in range(count):
        clip = clips[i % len(clips)]
        start = (i // len(clips)) * RATE // 2 % max(len(clip) - length, 1)
        piece = clip[start:start + length]
        out[i, :len(piece)] = piece
    return out


def mixture_draws(mixtures: int) -> np.ndarray:
    """One uniform draw per mixture, the key of its room (as ``OnlineMixer.draft``'s first RIR draw)."""
    return np.random.default_rng(7).random(mixtures)


def batch_rirs(draws: np.ndarray, speakers: int, config: RoomConfig) -> np.ndarray:
    """The trimmed RIRs of one room per draw, ``speakers`` per room, as the loader makes a batch's."""
    source = RirSource(AugmentArgs(reverb_prob=1.0, reverb_conf=config))
    return source.rooms([float(d) for d in draws], [speakers] * len(draws), RATE)[0]


def vectorised(sources: np.ndarray, speakers: int, batch_size: int, config: RoomConfig) -> np.ndarray:
    """Every mixture's sources reverberated: per batch, one call for the rooms and one for the convolution."""
    mixtures = sources.shape[0] // speakers
    draws = mixture_draws(mixtures)
    out = np.empty_like(sources)
    for first in range(0, mixtures, batch_size):
        last = min(first + batch_size, mixtures)
        rows = slice(first * speakers, last * speakers)
        out[rows] = convolve_rows(sources[rows], batch_rirs(draws[first:last], speakers, config))
    return out


def fra_rir_one(rng: np.random.Generator, size: np.ndarray, rt60: float, distance: float) -> np.ndarray:
    """One source's RIR the way the published FRA-RIR recipe makes it (our reading of the paper): virtual-source
    distances as ratios of the direct distance up to c * RT60, drawn with a linearly rising probability; reflection
    counts linear in distance, calibrated so the amplitude falls to 1e-3 at c * RT60, perturbed by
    ``U(-2, 2) * ratio^0.25``; a reflection coefficient from Sabine's formula; impulses at ``OVERSAMPLE`` times the
    rate, resampled down in two stages, high-passed at 80 Hz."""
    from scipy.signal import butter, resample_poly, sosfilt

    fine = RATE * OVERSAMPLE
    images = int(rng.integers(*IMAGES))
    mean_free = 1.0 / (2.0 * float(np.sum(1.0 / size)))  # V / S
    beta = math.sqrt(1.0 - (1.0 - math.exp(-0.16 * mean_free / rt60)) ** 2)
    reach = SPEED_OF_SOUND * rt60
    length = int(math.ceil(fine * rt60))
    grid = np.linspace(1.0, max(reach / distance - 1.0, 1.0), length)
    weights = np.linspace(0.0, 1.0, length)
    ratio = grid[rng.choice(length, size=images, p=weights / weights.sum())]
    dist = np.sqrt((ratio * distance) ** 2 + 1e-3)
    most = (math.log10(reach) - 3.0) / math.log10(beta)
    count = dist / reach * (most - 1.0) + 1.0
    count = np.maximum(count + rng.uniform(PERTURB[0], PERTURB[1], images) * ratio ** PERTURB[2], 1.0)
    dist = np.concatenate([[distance], dist])
    count = np.concatenate([[0.0], count])
    index = np.minimum(np.ceil(dist * fine / SPEED_OF_SOUND), length - 1).astype(np.int64)
    rir = np.zeros(length)
    np.add.at(rir, index, beta ** count / dist)
    step = int(math.isqrt(OVERSAMPLE))
    rir = resample_poly(rir, 1, step)
    rir = sosfilt(butter(2, HIGHPASS_HZ, btype="highpass", fs=fine // step, output="sos"), rir)
    return resample_poly(rir, 1, OVERSAMPLE // step)


def per_source(sources: np.ndarray, speakers: int, config: RoomConfig) -> np.ndarray:
    """WeSep-style: every source's RIR simulated and convolved on its own (scipy ``fftconvolve``, float64)."""
    from scipy.signal import fftconvolve

    out = np.empty_like(sources)
    length = sources.shape[1]
    draws = mixture_draws(sources.shape[0] // speakers)
    for m in range(sources.shape[0] // speakers):
        rng = room_generator(float(draws[m]))
        room = draw_room(rng, config, speakers)  # the same rooms as the vectorised path
        for s in range(speakers):
            rir = fra_rir_one(rng, room.size, room.rt60, float(room.distances[s]))
            row = m * speakers + s
            out[row] = fftconvolve(sources[row].astype(np.float64), rir)[:length]
    return out


def fft_libraries(sources: np.ndarray, kernels: np.ndarray, repeats: int) -> dict[str, tuple[float, float]]:
    """The batch's convolution (rfft of sources and kernels, product, irfft) with each library: median (wall s,
    CPU s) over ``repeats`` after a warm-up."""
    import scipy.fft
    import torch

    size = convolution_size(sources.shape[1], kernels.shape[1])
    threads = torch.get_num_threads()

    def scipy_run(workers):
        spectra = scipy.fft.rfft(sources, size, axis=-1, workers=workers)
        spectra *= scipy.fft.rfft(kernels, size, axis=-1, workers=workers)
        return scipy.fft.irfft(spectra, size, axis=-1, workers=workers)

    def numpy_run():
        return np.fft.irfft(np.fft.rfft(sources, size, axis=-1) * np.fft.rfft(kernels, size, axis=-1), size, axis=-1)

    def torch_run(n):
        torch.set_num_threads(n)
        x, h = torch.from_numpy(sources), torch.from_numpy(kernels)
        return torch.fft.irfft(torch.fft.rfft(x, size, dim=-1) * torch.fft.rfft(h, size, dim=-1), size, dim=-1)

    jobs = {"scipy.fft, 1 thread (loader)": lambda: scipy_run(1), "scipy.fft, workers=-1": lambda: scipy_run(-1),
            "numpy.fft (double)": numpy_run, "torch.fft, 1 thread": lambda: torch_run(1),
            f"torch.fft, {threads} threads": lambda: torch_run(threads)}
    results = {}
    for name, job in jobs.items():
        job()
        walls, cpus = [], []
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            job()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        results[name] = (statistics.median(walls), statistics.median(cpus))
    torch.set_num_threads(threads)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixtures", type=int, default=48)
    parser.add_argument("--speakers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = RoomConfig()
    sources = load_sources(args.mixtures * args.speakers, args.seconds)
    paths = {
        "vectorised": lambda: vectorised(sources, args.speakers, args.batch_size, config),
        "per source": lambda: per_source(sources, args.speakers, config),
    }
    for run in paths.values():  # warm-up (imports, FFT plans), untimed
        run()
    rates = {name: [] for name in paths}
    cpu_rates = {name: [] for name in paths}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for name, run in paths.items():
            started, cpu = time.perf_counter(), time.process_time()
            run()
            rates[name].append(args.mixtures / (time.perf_counter() - started))
            cpu_rates[name].append(args.mixtures / (time.process_time() - cpu))
    print(f"{args.mixtures} mixtures x {args.speakers} sources x {args.seconds:g} s at {RATE} Hz, "
          f"reverb_prob 1, WeSep reverb_conf defaults; batches of {args.batch_size}; load average "
          f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    for name, values in rates.items():
        print(f"  {name:>10}: best {max(values):8.1f} mixtures/s, median {statistics.median(values):8.1f}, "
              f"median per CPU-s {statistics.median(cpu_rates[name]):8.1f}")
    best = max(rates["vectorised"]) / max(rates["per source"])
    median = statistics.median(rates["vectorised"]) / statistics.median(rates["per source"])
    cpu = statistics.median(cpu_rates["vectorised"]) / statistics.median(cpu_rates["per source"])
    verdict = "" if best >= TARGET_SPEEDUP else "  BELOW TARGET"
    print(f"  speed-up: {best:.2f}x best, {median:.2f}x median, {cpu:.2f}x CPU time (target >= {TARGET_SPEEDUP:g}x)"
          f"{verdict}")
    rows = args.batch_size * args.speakers
    kernels = batch_rirs(mixture_draws(args.batch_size), args.speakers, config)
    print(f"\nconvolution of one batch ({rows} rows of {args.seconds:g} s, RIRs up to {kernels.shape[1]} taps, "
          f"FFT size {convolution_size(sources.shape[1], kernels.shape[1])}), median of {max(args.repeats, 5)}:")
    for name, (wall, cpu) in fft_libraries(sources[:rows], kernels, max(args.repeats, 5)).items():
        print(f"  {name:<32} wall {wall * 1e3 / args.batch_size:6.2f} ms, CPU {cpu * 1e3 / args.batch_size:6.2f} ms "
              f"per mixture")


if __name__ == "__main__":
    main()
