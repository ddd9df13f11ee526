"""WeSep augmentation throughput: online mixing with same-room reverb and noise against the pre-mixed loader, and
noise read from a WeSep LMDB as it is against the same noise converted once into a pack, all in the same run.

    python bench/wesep_augment_throughput.py [--lines 160] [--batch-size 16] [--repeats 3] [--device cuda]

Corpus, packs and banks as ``bench/online_mix_throughput.py`` (real recordings, 2-speaker mixtures, 4 s chunks; the
noise bank from qabcs-data's noises and ALSA's ``Noise.wav``).  The noise LMDB is written the way WeSep's
``tools/make_lmdb.py`` writes one (each key -> the bytes of one noise file, ``__keys__`` -> the pickled key list)
from the same noise files, and converted with ``build_noise_lmdb`` (``speechpack build audio-bank --kind noise
--lmdb``).  Jobs, one process (``num_workers=0``), train, one untimed warm-up epoch each, ``--repeats`` epochs
each, alternating:

- **pre-mixed**: the tse pack (the baseline);
- **online + reverb_conf + noise**: ``reverb_prob: 1`` (WeSep's default ``reverb_conf``: one simulated room per
  mixture, one RIR per source) and ``noise_prob: 1`` from the converted pack.  Target: >= 0.25x pre-mixed;
- **online + noise (LMDB as is)** and **online + noise (converted pack)**: ``noise_prob: 1``, no reverb; the ratio
  says which to train from;
- **... augment_on: batch**: the reverb + noise job (and the same with ``rir_banks``, the bank of real and simulated
  RIRs, against its worker-side twin) with ``augment_on: batch``: every batch made by ``loader.augment(batch)``
  in torch in the same process (``--device``: moved there first, CPU by default; the epoch ends with a
  synchronisation), and the same loader without the call (what the data path costs when an accelerator mixes).
  Target: the batch-side job >= 0.25x pre-mixed on CPU.

Unit: audio seconds per second (mixtures x 4 s / wall s), best and median epoch; the ratios are also given in CPU
time (``time.process_time`` of each epoch: on a machine shared with other work it moves less than wall time), and
the load average before and after.  CPU ms per mixture are printed for each part: the workers' whole job, the
records only (draws, rooms, noise segments), the batch side's ``augment`` (the difference), and what the target
leaves a whole mixture.  Missing the target (in CPU time) prints ``BELOW TARGET`` and exits 0.  Needs the ``lmdb`` package (the ``wesep`` extra).
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loader_throughput import (CHUNK_SECONDS, PIECE_SECONDS, _log, build_corpus, loader_config,  # noqa: E402
                               pack_files, speechpack_epoch, warm_files)
from online_mix_throughput import build_banks, sources_list  # noqa: E402
from workdir import bench_workdir  # noqa: E402
from speechpack.loader import build_loader  # noqa: E402
from speechpack.packer.adapters.noise_lmdb import build_noise_lmdb  # noqa: E402
from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402

TARGET_VS_PREMIXED = 0.25
BASE, WORKER = "pre-mixed tse pack", "online + reverb_conf 1.0 + noise 1.0"
BATCH, BATCH_DATA = WORKER + ", augment_on: batch", WORKER + ", batch records only"
BANK_WORKER = "online + rir_banks 1.0 + noise 1.0"
BANK_BATCH, BANK_DATA = BANK_WORKER + ", augment_on: batch", BANK_WORKER + ", batch records only"
NOISE_ONLY = "online + noise 1.0 (converted pack)"


def augmented_epoch(loader, epoch: int, device: torch.device | None) -> int:
    """One epoch with every batch made where training runs (``loader.augment``, moved to ``device`` first);
    returns the mixtures delivered."""
    loader.set_epoch(epoch)
    mixtures = 0
    for batch in loader:
        batch = loader.augment(batch, device)
        if batch["wav_mix"].shape != batch["wav_target"].shape:
            raise SystemExit("augment_on: batch gave wav_mix and wav_target of different shapes")
        keys = batch["key"]
        mixtures += sum(1 for i, key in enumerate(keys) if i == 0 or key != keys[i - 1])
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return mixtures


def records_epoch(loader, epoch: int) -> int:
    """One epoch of an ``augment_on: batch`` loader without the batch side: what the data path costs when the
    mixing runs elsewhere (an accelerator)."""
    loader.set_epoch(epoch)
    mixtures = 0
    for batch in loader:
        keys = batch["key"]
        mixtures += sum(1 for i, key in enumerate(keys) if i == 0 or key != keys[i - 1])
    return mixtures


def write_lmdb(path: str, noise_list: str) -> int:
    """A make_lmdb.py LMDB of the files in ``noise_list`` (keys: file stems)."""
    import lmdb

    with open(noise_list, encoding="utf-8") as fp:
        files = [line.strip() for line in fp if line.strip()]
    env = lmdb.open(path, map_size=1 << 30)
    keys = []
    with env.begin(write=True) as txn:
        for name in files:
            key = os.path.splitext(os.path.basename(name))[0]
            with open(name, "rb") as fp:
                txn.put(key.encode("utf-8"), fp.read())
            keys.append(key)
        txn.put(b"__keys__", pickle.dumps(keys))
    env.sync()
    env.close()
    return len(keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=160, help="mixtures (and source utterances), default 160")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs per job (default 3)")
    parser.add_argument("--noise-stride", type=int, default=10, help="every N-th qabcs noise goes in the bank")
    parser.add_argument("--simulated-rirs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="where augment_on: batch mixes (default: the CPU, in place)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch's intra-op threads (default 1, as the worker side's FFTs; on a loaded 2-core "
                             "machine a second OpenMP thread spins: 4.5x the CPU time for the same batch)")
    parser.add_argument("--tmp-dir", default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    if min(args.repeats, args.lines, args.batch_size, args.noise_stride, args.simulated_rirs) < 1:
        parser.error("--repeats, --lines, --batch-size, --noise-stride and --simulated-rirs must be at least 1")
    with bench_workdir("speechpack-wesep-augment-bench-", args.tmp_dir, args.keep, _log) as workdir:
        run(args, workdir)
    return 0


def run(args, workdir: str) -> None:
    lines = -(-args.lines // args.batch_size) * args.batch_size
    raw_list, _corpus = build_corpus(workdir, lines, args.seed, tuple(PIECE_SECONDS))
    src_list = os.path.join(workdir, "sources.list")
    sources_list(raw_list, src_list)
    tse_pack, src_pack = os.path.join(workdir, "tse"), os.path.join(workdir, "sources")
    build_wesep(raw_list, BuildOptions(out=tse_pack, progress=False))
    build_wesep(src_list, BuildOptions(out=src_pack, progress=False))
    noise_pack, rir_banks, banks = build_banks(workdir, args)
    lmdb_path, converted = os.path.join(workdir, "noise.lmdb"), os.path.join(workdir, "noise-from-lmdb")
    count = write_lmdb(lmdb_path, os.path.join(workdir, "noises.list"))
    build_noise_lmdb(lmdb_path, BuildOptions(out=converted, progress=False))
    _log(f"corpus: {lines} mixtures; noise: {count} files ({banks['noise_s']:.0f} s) as LMDB "
         f"({sum(os.path.getsize(os.path.join(lmdb_path, f)) for f in os.listdir(lmdb_path)) / 1e6:.1f} MB) and "
         f"as a pack ({sum(os.path.getsize(f) for f in pack_files(converted)) / 1e6:.1f} MB)")
    warm_files(pack_files(tse_pack) + pack_files(src_pack) + pack_files(converted)
               + [os.path.join(lmdb_path, f) for f in os.listdir(lmdb_path)])
    online = {"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "cues": {"audio": {"use": False}}}
    reverb = {"reverb_prob": 1.0, "reverb_conf": {}, "noise_prob": 1.0, "noise_banks": [{"path": converted}]}
    bank = {**reverb, "reverb_conf": None, "rir_banks": [{"path": p} for p in rir_banks]}
    jobs = {
        BASE: loader_config(tse_pack, args.batch_size),
        WORKER: loader_config(src_pack, args.batch_size, **online, **reverb),
        BATCH: loader_config(src_pack, args.batch_size, **online, **reverb, augment_on="batch"),
        BATCH_DATA: loader_config(src_pack, args.batch_size, **online, **reverb, augment_on="batch"),
        BANK_WORKER: loader_config(src_pack, args.batch_size, **online, **bank),
        BANK_BATCH: loader_config(src_pack, args.batch_size, **online, **bank, augment_on="batch"),
        BANK_DATA: loader_config(src_pack, args.batch_size, **online, **bank, augment_on="batch"),
        "online + noise 1.0 (LMDB as is)": loader_config(src_pack, args.batch_size, **online, noise_prob=1.0,
                                                         noise_lmdb_file=lmdb_path),
        "online + noise 1.0 (converted pack)": loader_config(src_pack, args.batch_size, **online, noise_prob=1.0,
                                                             noise_banks=[{"path": converted}]),
    }
    loaders = {name: build_loader(config, "train", num_workers=0, seed=0) for name, config in jobs.items()}
    torch.set_num_threads(args.torch_threads)
    device = None if args.device is None else torch.device(args.device)

    def epoch_of(name: str, epoch: int) -> int:
        if name in (BATCH, BANK_BATCH):
            return augmented_epoch(loaders[name], epoch, device)
        if name in (BATCH_DATA, BANK_DATA):
            return records_epoch(loaders[name], epoch)
        return speechpack_epoch(loaders[name], epoch)

    for name in loaders:  # warm-up, and every epoch delivers every mixture
        if epoch_of(name, 0) != lines:
            raise SystemExit(f"{name}: an epoch did not deliver {lines} mixtures")
    times = {name: [] for name in loaders}
    cpu = {name: [] for name in loaders}
    load_before = os.getloadavg()
    for r in range(args.repeats):
        for name in loaders:
            started, cpu_started = time.perf_counter(), time.process_time()
            epoch_of(name, r + 1)
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - cpu_started)
    load_after = os.getloadavg()

    def rate(seconds: float) -> float:
        return lines * CHUNK_SECONDS / seconds

    _log(f"\nthroughput (one process, train, batch {args.batch_size} mixtures, {args.repeats} epochs each; "
         f"audio-s/s = mixtures x {CHUNK_SECONDS} s / wall s; load average {load_before[0]:.2f} before, "
         f"{load_after[0]:.2f} after; augment_on: batch on {device or 'cpu'}, torch {torch.__version__}, "
         f"{torch.get_num_threads()} intra-op threads)")
    _log(f"  {'job':<62} {'best s':>7} {'median s':>9} {'median CPU s':>13} {'best audio-s/s':>15}")
    for name, ts in times.items():
        _log(f"  {name:<62} {min(ts):7.3f} {statistics.median(ts):9.3f} {statistics.median(cpu[name]):13.3f} "
             f"{rate(min(ts)):15,.0f}")
    def ratios(job: str, base: str = BASE) -> str:
        return (f"{min(times[base]) / min(times[job]):.3f} best, "
                f"{statistics.median(times[base]) / statistics.median(times[job]):.3f} median, "
                f"{statistics.median(cpu[base]) / statistics.median(cpu[job]):.3f} CPU time")

    _log("")
    for job in (WORKER, BATCH, BATCH_DATA, BANK_WORKER, BANK_BATCH, BANK_DATA):
        verdict = ""
        if job in (WORKER, BATCH):
            ok = statistics.median(cpu[BASE]) / statistics.median(cpu[job]) >= TARGET_VS_PREMIXED
            verdict = f"   target >= {TARGET_VS_PREMIXED:g} (CPU time): {'PASS' if ok else 'BELOW TARGET'}"
        _log(f"{job} / pre-mixed = {ratios(job)}{verdict}")
    _log(f"batch side / worker side (reverb_conf) = {ratios(BATCH, WORKER)}")
    _log(f"batch side / worker side (rir_banks) = {ratios(BANK_BATCH, BANK_WORKER)}")
    per_mixture = {name: statistics.median(c) / lines * 1e3 for name, c in cpu.items()}
    _log(f"CPU ms per mixture: pre-mixed {per_mixture[BASE]:.2f}; online + noise {per_mixture[NOISE_ONLY]:.2f}; "
         f"reverb + noise in the workers {per_mixture[WORKER]:.2f}; batch records only (rooms simulated, no "
         f"convolution) {per_mixture[BATCH_DATA]:.2f}; the batch side's augment "
         f"{per_mixture[BATCH] - per_mixture[BATCH_DATA]:.2f}; with rir_banks: in the workers "
         f"{per_mixture[BANK_WORKER]:.2f}, records only {per_mixture[BANK_DATA]:.2f}, the batch side's augment "
         f"{per_mixture[BANK_BATCH] - per_mixture[BANK_DATA]:.2f}; what the target leaves a whole mixture "
         f"{per_mixture[BASE] / TARGET_VS_PREMIXED:.2f}")
    pack_vs_lmdb = min(times["online + noise 1.0 (LMDB as is)"]) / min(times[NOISE_ONLY])
    _log(f"noise from the converted pack / from the LMDB as is = {pack_vs_lmdb:.2f}x")

if __name__ == "__main__":
    sys.exit(main())
