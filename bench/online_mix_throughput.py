"""Online-mixing loader throughput against reading pre-mixed packed mixtures, in the same run.

    python bench/online_mix_throughput.py [--lines 640] [--batch-size 16] [--repeats 5] [--profile]

The corpus comes from ``bench/loader_throughput.py`` (``build_corpus``: real recordings installed by Debian
packages, LibriVox 16 kHz, codec2 8 kHz and the ALSA prompts 48 kHz, brought to 16 kHz with soxr and cut into 8-12 s
pieces, paired across recordings into 2-speaker mixtures).  From the same audio two packs are built with
``packer.adapters.wesep.build_wesep``:

- the **tse pack**: the WeSep raw list of ``--lines`` pre-mixed 2-speaker mixtures (mixture + both sources);
- the **sources pack**: one single-speaker line per mixture line, its first source (the same samples, the same
  length, the recording's stream as speaker), so an online mixture of it has the length of the pre-mixed one.

Both loaders deliver the same thing per mixture, ``wav_mix`` and ``wav_target`` rows ``[2, 1, 64000]`` (4 s at
16 kHz, one row per speaker), in batches of ``--batch-size`` mixtures:

- **online**: ``build_loader`` on the sources pack, ``online_mix: true``, ``num_speakers: {distribution: [0, 1, 0]}``
  (always 2 speakers), ``mix_snr`` defaults, no timeline, no reverberation, no noise;
- **pre-mixed**: ``build_loader`` on the tse pack.

One process (``num_workers=0``), state ``train``, warm page cache (every pack file is read once first), one untimed
warm-up epoch of each, then ``--repeats`` epochs of each, alternating.  Unit: **audio seconds per second = mixtures
delivered x 4 s / wall seconds**.  Target: online >= 0.5x pre-mixed on the best run (medians printed too).
For information, the online loader is also timed with ``reverb_prob: 1.0`` and ``noise_prob: 1.0`` over small banks
built with ``packer.adapters.audio_bank.build_audio_bank`` / ``build_simulated_rirs`` (``speechpack build audio-bank``): real
noises (``/usr/share/qabcs/abcs/all/noises/*.ogg``, every ``--noise-stride``-th, and the ALSA ``Noise.wav``), a real
impulse response (jconvolver's ``street2-L.wav``) and ``--simulated-rirs`` pyroomacoustics rooms.  ``--profile``
prints cProfile's top functions of one online epoch.  Missing the target prints ``BELOW TARGET`` and exits 0.
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import io
import json
import os
import pstats
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loader_throughput import (CHUNK_LEN, CHUNK_SECONDS, PIECE_SECONDS, _log, build_corpus,  # noqa: E402
                               loader_config, pack_files, speechpack_epoch, warm_files)
from workdir import bench_workdir  # noqa: E402
from speechpack.loader import build_loader  # noqa: E402
from speechpack.packer.adapters.audio_bank import SimulationOptions  # noqa: E402
from speechpack.packer.adapters.audio_bank import build_audio_bank, build_simulated_rirs  # noqa: E402
from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402

TARGET_VS_PREMIXED = 0.5
NOISE_GLOB = "/usr/share/qabcs/abcs/all/noises/*.ogg"
ALSA_NOISE = "/usr/share/sounds/alsa/Noise.wav"
REAL_RIR = "/usr/share/jconvolver/config-files/demo-reverbs/street2-L.wav"


def sources_list(raw_list: str, out_path: str) -> int:
    """One single-speaker line per mixture line of ``raw_list``: its first source, under a key of its own."""
    count = 0
    with open(raw_list, encoding="utf-8") as fp, open(out_path, "w", encoding="utf-8") as out:
        for text in fp:
            if not text.strip():
                continue
            obj = json.loads(text)
            spk = obj["spk"][0]
            out.write(json.dumps({"key": f"src-{count:06d}", "spk": [spk], "src": {spk: obj["src"][spk]}}) + "\n")
            count += 1
    return count


def build_banks(workdir: str, args) -> tuple[str, list[str], dict]:
    noises = sorted(glob.glob(NOISE_GLOB))[::args.noise_stride]
    missing = [p for p in (ALSA_NOISE, REAL_RIR) if not os.path.isfile(p)]
    if not noises or missing:
        raise SystemExit(f"missing bank audio ({NOISE_GLOB} or {missing}); install qabcs-data, alsa-utils and "
                         f"jconvolver (apt-get install -y --no-install-recommends ...)")
    noise_list = os.path.join(workdir, "noises.list")
    with open(noise_list, "w", encoding="utf-8") as fp:
        fp.write("\n".join(noises + [ALSA_NOISE]) + "\n")
    rir_list = os.path.join(workdir, "rirs.list")
    with open(rir_list, "w", encoding="utf-8") as fp:
        fp.write(REAL_RIR + "\n")
    noise_pack, real_rir, sim_rir = (os.path.join(workdir, name) for name in ("noise-bank", "rir-real", "rir-sim"))
    noise = build_audio_bank(noise_list, "noise", BuildOptions(out=noise_pack, progress=False))
    real = build_audio_bank(rir_list, "rir", BuildOptions(out=real_rir, progress=False))
    sim = build_simulated_rirs(SimulationOptions(count=args.simulated_rirs, seed=args.seed),
                               BuildOptions(out=sim_rir, progress=False))
    info = {"noises": noise.manifest.totals["samples"], "noise_s": noise.manifest.totals["hours"] * 3600,
            "rirs": real.manifest.totals["samples"] + sim.manifest.totals["samples"],
            "rir_s": (real.manifest.totals["hours"] + sim.manifest.totals["hours"]) * 3600}
    return noise_pack, [real_rir, sim_rir], info


def timed(loader, epoch: int) -> tuple[float, int]:
    started = time.perf_counter()
    mixtures = speechpack_epoch(loader, epoch)
    return time.perf_counter() - started, mixtures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=640, help="mixtures (and source utterances), default 640")
    parser.add_argument("--batch-size", type=int, default=16, help="mixtures per batch (default 16)")
    parser.add_argument("--piece-seconds", type=float, nargs=2, default=list(PIECE_SECONDS), metavar=("MIN", "MAX"),
                        help="length range of the utterances in seconds (default 8 12)")
    parser.add_argument("--repeats", type=int, default=5, help="timed epochs per job (default 5)")
    parser.add_argument("--augment-repeats", type=int, default=3, help="timed epochs with reverb + noise (default 3)")
    parser.add_argument("--noise-stride", type=int, default=10, help="every N-th qabcs noise goes in the bank")
    parser.add_argument("--simulated-rirs", type=int, default=8, help="pyroomacoustics RIRs in the bank (default 8)")
    parser.add_argument("--pack-workers", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir", default=None, help="where corpus and packs go (default: system temp)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top 10 functions of an online epoch")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    if min(args.repeats, args.lines, args.batch_size, args.noise_stride, args.simulated_rirs) < 1 \
            or args.augment_repeats < 0:
        parser.error("--repeats, --lines, --batch-size, --noise-stride and --simulated-rirs must be at least 1")
    with bench_workdir("speechpack-online-mix-bench-", args.tmp_dir, args.keep, _log) as workdir:
        run(args, workdir)
    return 0


def run(args, workdir: str) -> None:
    lines = -(-args.lines // args.batch_size) * args.batch_size  # whole batches: no tail padding to count
    started = time.perf_counter()
    raw_list, corpus = build_corpus(workdir, lines, args.seed, tuple(args.piece_seconds))
    src_list = os.path.join(workdir, "sources.list")
    sources_list(raw_list, src_list)
    corpus_s = time.perf_counter() - started
    tse_pack, src_pack = os.path.join(workdir, "tse"), os.path.join(workdir, "sources")
    started = time.perf_counter()
    tse = build_wesep(raw_list, BuildOptions(out=tse_pack, workers=args.pack_workers, progress=False))
    src = build_wesep(src_list, BuildOptions(out=src_pack, workers=args.pack_workers, progress=False))
    noise_pack, rir_packs, banks = build_banks(workdir, args)
    pack_s = time.perf_counter() - started
    mb = {p: sum(os.path.getsize(f) for f in pack_files(p)) / 1e6 for p in (tse_pack, src_pack)}
    _log(f"corpus: {lines} 2-speaker mixtures ({corpus['hours'] * 60:.1f} min, {corpus['min_s']:.1f}-"
         f"{corpus['max_s']:.1f} s each; {corpus['unique_mixtures']} unique) from {corpus['streams']} streams of "
         f"{corpus['recordings']} real recordings, built in {corpus_s:.1f} s")
    _log(f"packs: tse {tse.manifest.totals['samples']} samples {mb[tse_pack]:.0f} MB; sources "
         f"{src.manifest.totals['samples']} samples ({src.manifest.totals['speakers']} speakers) {mb[src_pack]:.0f} MB; "
         f"banks {banks['noises']} noises ({banks['noise_s']:.0f} s), {banks['rirs']} RIRs ({banks['rir_s']:.1f} s); "
         f"all packed in {pack_s:.1f} s")
    _log(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, numpy {np.__version__}, "
         f"torch {torch.__version__}")
    warm_files(pack_files(tse_pack) + pack_files(src_pack) + pack_files(noise_pack)
               + [f for p in rir_packs for f in pack_files(p)])

    mix_args = {"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}}
    loaders = {
        "online": build_loader(loader_config(src_pack, args.batch_size, **mix_args), "train", num_workers=0, seed=0),
        "pre-mixed": build_loader(loader_config(tse_pack, args.batch_size), "train", num_workers=0, seed=0),
    }
    augmented = build_loader(loader_config(src_pack, args.batch_size, **mix_args, reverb_prob=1.0, noise_prob=1.0,
                                           rir_banks=[{"path": p} for p in rir_packs],
                                           noise_banks=[{"path": noise_pack}]), "train", num_workers=0, seed=0)
    # warm-up (untimed) and checks: the same mixtures, the same batch shape
    first = {}
    for name, ld in (*loaders.items(), ("augmented", augmented)):
        ld.set_epoch(0)
        batch = next(iter(ld))
        first[name] = tuple(batch["wav_mix"].shape)
        if set(batch["num_speaker"]) != {2} or first[name] != (2 * args.batch_size, 1, CHUNK_LEN):
            raise SystemExit(f"{name}: unexpected first batch {first[name]}, num_speaker {set(batch['num_speaker'])}")
        if speechpack_epoch(ld, 0) != lines:
            raise SystemExit(f"{name}: an epoch did not deliver {lines} mixtures")

    times = {name: [] for name in loaders}
    for r in range(args.repeats):
        for name, ld in loaders.items():
            seconds, mixtures = timed(ld, r + 1)
            if mixtures != lines:
                raise SystemExit(f"{name}: epoch {r + 1} delivered {mixtures} mixtures, not {lines}")
            times[name].append(seconds)
    aug_times = [timed(augmented, r + 1)[0] for r in range(args.augment_repeats)]

    def rate(seconds: float) -> float:
        return lines * CHUNK_SECONDS / seconds

    _log(f"\nthroughput (one process, num_workers=0, train, {CHUNK_SECONDS} s chunks, batch {args.batch_size} "
         f"mixtures = [{2 * args.batch_size}, 1, {CHUNK_LEN}] float32, {lines // args.batch_size} batches/epoch, "
         f"{args.repeats} epochs each, alternating; audio-s/s = mixtures x {CHUNK_SECONDS} s / wall s)")
    _log(f"  {'job':<46} {'best s':>7} {'median s':>9} {'best audio-s/s':>15} {'median audio-s/s':>17}")
    rows = [("online mix (2 speakers, mix_snr defaults)", times["online"]),
            ("pre-mixed tse pack", times["pre-mixed"])]
    if aug_times:
        rows.append(("online mix + reverb 1.0 + noise 1.0 (info)", aug_times))
    for name, ts in rows:
        _log(f"  {name:<46} {min(ts):7.3f} {statistics.median(ts):9.3f} {rate(min(ts)):15,.0f} "
             f"{rate(statistics.median(ts)):17,.0f}")
    ratio = min(times["pre-mixed"]) / min(times["online"])
    median_ratio = statistics.median(times["pre-mixed"]) / statistics.median(times["online"])
    verdict = "PASS" if ratio >= TARGET_VS_PREMIXED else "BELOW TARGET"
    _log(f"\nonline / pre-mixed = {ratio:.2f} best (median {median_ratio:.2f})   target >= {TARGET_VS_PREMIXED:g}: "
         f"{verdict}")
    if aug_times:
        _log(f"online + reverb + noise / pre-mixed = {min(times['pre-mixed']) / min(aug_times):.2f} best (median "
             f"{statistics.median(times['pre-mixed']) / statistics.median(aug_times):.2f})   (information only)")

    if args.profile:
        for name, ld in (("online", loaders["online"]), ("online + reverb + noise", augmented)):
            profiler = cProfile.Profile()
            profiler.enable()
            speechpack_epoch(ld, 100)
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(10)
            _log(f"\ncProfile of one {name} epoch, top 10 by own time:")
            _log(text.getvalue())


if __name__ == "__main__":
    sys.exit(main())
