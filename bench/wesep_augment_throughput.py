"""WeSep augmentation throughput: online mixing with same-room reverb and noise against the pre-mixed loader, and
noise read from a WeSep LMDB as it is against the same noise converted once into a pack, all in the same run.

    python bench/wesep_augment_throughput.py [--lines 160] [--batch-size 16] [--repeats 3]

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
  says which to train from.

Unit: audio seconds per second (mixtures x 4 s / wall s), best and median epoch; the ratios are also given in CPU
time (``time.process_time`` of each epoch: on a machine shared with other work it moves less than wall time), and
the load average before and after.  The reverb + noise job's extra cost per mixture over the noise-only job (the
reverberation: rooms and convolution) is printed in CPU ms.  Missing the target prints ``BELOW TARGET`` and
exits 0.  Needs the ``lmdb`` package (the ``wesep`` extra).
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time

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
    noise_pack, _rirs, banks = build_banks(workdir, args)
    lmdb_path, converted = os.path.join(workdir, "noise.lmdb"), os.path.join(workdir, "noise-from-lmdb")
    count = write_lmdb(lmdb_path, os.path.join(workdir, "noises.list"))
    build_noise_lmdb(lmdb_path, BuildOptions(out=converted, progress=False))
    _log(f"corpus: {lines} mixtures; noise: {count} files ({banks['noise_s']:.0f} s) as LMDB "
         f"({sum(os.path.getsize(os.path.join(lmdb_path, f)) for f in os.listdir(lmdb_path)) / 1e6:.1f} MB) and "
         f"as a pack ({sum(os.path.getsize(f) for f in pack_files(converted)) / 1e6:.1f} MB)")
    warm_files(pack_files(tse_pack) + pack_files(src_pack) + pack_files(converted)
               + [os.path.join(lmdb_path, f) for f in os.listdir(lmdb_path)])
    online = {"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "cues": {"audio": {"use": False}}}
    jobs = {
        "pre-mixed tse pack": loader_config(tse_pack, args.batch_size),
        "online + reverb_conf 1.0 + noise 1.0": loader_config(
            src_pack, args.batch_size, **online, reverb_prob=1.0, reverb_conf={}, noise_prob=1.0,
            noise_banks=[{"path": converted}]),
        "online + noise 1.0 (LMDB as is)": loader_config(src_pack, args.batch_size, **online, noise_prob=1.0,
                                                         noise_lmdb_file=lmdb_path),
        "online + noise 1.0 (converted pack)": loader_config(src_pack, args.batch_size, **online, noise_prob=1.0,
                                                             noise_banks=[{"path": converted}]),
    }
    loaders = {name: build_loader(config, "train", num_workers=0, seed=0) for name, config in jobs.items()}
    for name, ld in loaders.items():  # warm-up, and every epoch delivers every mixture
        if speechpack_epoch(ld, 0) != lines:
            raise SystemExit(f"{name}: an epoch did not deliver {lines} mixtures")
    times = {name: [] for name in loaders}
    cpu = {name: [] for name in loaders}
    load_before = os.getloadavg()
    for r in range(args.repeats):
        for name, ld in loaders.items():
            started, cpu_started = time.perf_counter(), time.process_time()
            speechpack_epoch(ld, r + 1)
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - cpu_started)
    load_after = os.getloadavg()

    def rate(seconds: float) -> float:
        return lines * CHUNK_SECONDS / seconds

    _log(f"\nthroughput (one process, train, batch {args.batch_size} mixtures, {args.repeats} epochs each; "
         f"audio-s/s = mixtures x {CHUNK_SECONDS} s / wall s; load average {load_before[0]:.2f} before, "
         f"{load_after[0]:.2f} after)")
    _log(f"  {'job':<40} {'best s':>7} {'median s':>9} {'median CPU s':>13} {'best audio-s/s':>15}")
    for name, ts in times.items():
        _log(f"  {name:<40} {min(ts):7.3f} {statistics.median(ts):9.3f} {statistics.median(cpu[name]):13.3f} "
             f"{rate(min(ts)):15,.0f}")
    base, job = "pre-mixed tse pack", "online + reverb_conf 1.0 + noise 1.0"
    ratio = min(times[base]) / min(times[job])
    median = statistics.median(times[base]) / statistics.median(times[job])
    cpu_ratio = statistics.median(cpu[base]) / statistics.median(cpu[job])
    verdict = "PASS" if ratio >= TARGET_VS_PREMIXED else "BELOW TARGET"
    _log(f"\nonline + reverb + noise / pre-mixed = {ratio:.3f} best, {median:.3f} median, {cpu_ratio:.3f} CPU time"
         f"   target >= {TARGET_VS_PREMIXED:g}: {verdict}")
    noise_only = "online + noise 1.0 (converted pack)"
    extra = (statistics.median(cpu[job]) - statistics.median(cpu[noise_only])) / lines * 1e3
    budget = (statistics.median(cpu[base]) / TARGET_VS_PREMIXED - statistics.median(cpu[noise_only])) / lines * 1e3
    _log(f"reverberation (rooms + convolution) per mixture: {extra:.2f} CPU ms; what the target leaves it: "
         f"{budget:.2f} CPU ms")
    pack_vs_lmdb = min(times["online + noise 1.0 (LMDB as is)"]) / min(times[noise_only])
    _log(f"noise from the converted pack / from the LMDB as is = {pack_vs_lmdb:.2f}x")

if __name__ == "__main__":
    sys.exit(main())
