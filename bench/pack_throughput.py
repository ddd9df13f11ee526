"""Packing throughput: a build's time against its I/O limit, measured in the same run.

    python bench/pack_throughput.py [--minutes 15] [--repeats 5] [--workers 1] [--format flac] [--rates 16000]
    python bench/pack_throughput.py --corpus short-lines [--lines 1440] [--repeats 3]

The corpus is built from real recordings installed by Debian packages (see
docs/testing.md, "Real recordings")::

    apt-get install -y --no-install-recommends pocketsphinx-testdata alsa-utils codec2-examples

16 kHz LibriVox/cards clips, 48 kHz ALSA voice prompts and 8 kHz codec2 speech are cut into pieces of at most
``--max-piece`` seconds; pieces of the same rate are paired, cropped to a common length and mixed, and every
mixture and its two sources are written as PCM_16 WAV to a temporary directory.  A WeSep raw list then repeats
those mixtures under distinct keys until each rate holds a third of ``--minutes`` of mixture audio, so packing
to 16 kHz resamples 8 kHz and 48 kHz input (and passes 16 kHz input through).

``--rates`` keeps only some of the three rates (``--rates 16000``: nothing is resampled, decoding 16-bit WAV is
almost a memcpy, and the build is bound by writing).

``--corpus short-lines`` builds the corpus of many short files instead: two-speaker dialogue lines of 2-5 s cut
from the same recordings at 16 kHz (``build_corpus`` of ``bench/loader_throughput.py``, the corpus
``bench/peers.py`` reads), ``--lines`` lines of three 16-bit WAV files each (the recordings give about 150
distinct mixtures; the list repeats them under distinct keys, as the mixed corpus does).  Nothing is resampled and each file is 64-160 KB, so what a build spends per file (opening, probing,
headers, statistics, hashing, Python per sample) weighs most against the decode and write jobs.

Three jobs run on the same list, alternating, after one untimed warm-up of each (page cache, imports):

- decode: for every line, ``soundfile.read(path, dtype="float32", always_2d=True)`` of the mixture and both
  sources and ``soxr.resample(data, rate, 16000)`` of each: the decode and resample work a pack has to do;
- write: the bytes of the warm-up's pack (every file of it, read into memory before timing) written to as many
  new files, one ``fsync`` per file: the disk work a pack has to do;
- pack: ``packer.adapters.wesep.build_wesep(list, BuildOptions(out=..., workers=N, progress=False))``, probing,
  statistics, hashing, fsync and the commit included.

The I/O limit of a run is the larger of decode and write (a build can at best overlap them); the target is pack time
<= 1.25 x that limit (2 x on ``--corpus short-lines``), judged on the median of the per-run ratios (the disk's speed
varies between moments, so each pack run is paired with the decode and write runs next to it).  The older figure,
pack throughput against decode throughput (target >= 0.8), is printed too.  With ``--workers N > 1`` the decode
job runs in a pool of N forkserver processes too.  Missing the target prints ``BELOW TARGET`` and still exits 0;
only errors exit non-zero.  ``--sha`` prints the SHA-256 of every file of the last pack (to check that a change
to the packer left every byte as it was).

Finally each phase of a build runs alone, one after the other, to show where the time goes (``--profile``
also prints cProfile's top functions for one more run).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import glob
import hashlib
import io
import json
import multiprocessing
import os
import pstats
import shutil
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import soundfile
import soxr

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402

from speechpack.packer.build.run import BuildOptions  # noqa: E402
from workdir import bench_workdir  # noqa: E402

TARGET_RATIO = 0.8
#: Pack time at most this many times the I/O limit (issue 18, item 3).
TARGET_IO_RATIO = 1.25
#: The same for ``--corpus short-lines``, where per-file costs weigh most (issue 27, item 2).
TARGET_SHORT_IO_RATIO = 2.0
PACK_RATE = 16000
SOURCE_GLOBS = (
    "/usr/share/pocketsphinx/test/data/librivox/*.wav",  # 16 kHz, LibriVox readers
    "/usr/share/pocketsphinx/test/data/cards/*.wav",  # 16 kHz
    "/usr/share/codec2/raw/speech_orig_16k.wav",  # 16 kHz
    "/usr/share/sounds/alsa/*.wav",  # 48 kHz, one voice (and Noise.wav)
    "/usr/share/codec2/wav/*.wav",  # 8 kHz (one mu-law file; wia_16kHz.wav is 16 kHz)
)
RATES = (8000, 16000, 48000)


# ---------------------------------------------------------------------------------------------------- corpus

def _pieces(paths: list[str], max_seconds: float, min_seconds: float) -> dict[int, list[tuple[str, np.ndarray]]]:
    """Every recording cut into consecutive pieces of at most ``max_seconds``, grouped by sample rate."""
    by_rate: dict[int, list[tuple[str, np.ndarray]]] = collections.defaultdict(list)
    for path in paths:
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
        mono = data[:, 0]
        step = int(max_seconds * rate)
        for index, start in enumerate(range(0, len(mono), step)):
            piece = mono[start:start + step]
            if len(piece) >= min_seconds * rate:
                name = f"{os.path.splitext(os.path.basename(path))[0]}-{index:02d}"
                by_rate[rate].append((name, piece))
    return by_rate


def build_corpus(workdir: str, minutes: float, max_piece: float, seed: int, audio_format: str = "wav",
                 rates: tuple[int, ...] = RATES) -> tuple[str, dict]:
    """Write the audio files (16-bit WAV or FLAC) and the WeSep list (``minutes`` of mixtures split evenly over
    ``rates``); return the list path and a description."""
    paths = sorted(p for pattern in SOURCE_GLOBS for p in glob.glob(pattern))
    if not paths:
        raise SystemExit("no source recordings found; install pocketsphinx-testdata, alsa-utils, codec2-examples")
    by_rate = _pieces(paths, max_piece, min_seconds=1.0)
    missing = [rate for rate in rates if len(by_rate.get(rate, ())) < 2]
    if missing:
        raise SystemExit(f"need at least two recordings at {missing} Hz; see the module docstring")
    rng = np.random.default_rng(seed)
    wav_dir = os.path.join(workdir, "wav")
    os.makedirs(wav_dir)
    lines = []
    described = {"source_files": len(paths), "rates": {}}
    per_rate_seconds = minutes * 60.0 / len(rates)
    for rate in rates:
        pieces = by_rate[rate]
        mixtures = []  # ([mix, s1, s2 paths], (piece 1, piece 2), seconds)
        half = max(1, len(pieces) // 2)
        for i, (name1, a) in enumerate(pieces):
            name2, b = pieces[(i + half) % len(pieces)]
            if name2 == name1:
                continue
            n = min(len(a), len(b))
            a = a[:n]
            b = b[len(b) - n:]  # crop the other from its end: different phonetic content per pair
            gain = 10 ** (rng.uniform(-5, 5) / 20)  # SIR in [-5, 5] dB
            s1, s2 = a / (1 + gain), b * (gain / (1 + gain))  # the mixture's peak stays below full scale
            stem = f"{rate // 1000}k-{i:03d}"
            files = []
            for role, signal in (("mix", s1 + s2), ("s1", s1), ("s2", s2)):
                path = os.path.join(wav_dir, f"{stem}-{role}.{audio_format}")
                soundfile.write(path, np.clip(signal, -1.0, 32767 / 32768), rate, subtype="PCM_16")
                files.append(path)
            mixtures.append((files, (name1, name2), n / rate))
        seconds = 0.0
        count = 0
        while seconds < per_rate_seconds:
            (mix_path, s1_path, s2_path), (spk1, spk2), duration = mixtures[count % len(mixtures)]
            key = f"{rate // 1000}k-{count:05d}"
            spk1, spk2 = spk1.rsplit("-", 1)[0], spk2.rsplit("-", 1)[0]
            if spk1 == spk2:
                spk2 += "-b"
            lines.append({"key": key, "spk": [spk1, spk2], "mix": {"default": [mix_path]},
                          "src": {spk1: [s1_path], spk2: [s2_path]}, "_seconds": duration})
            seconds += duration
            count += 1
        described["rates"][rate] = {"unique_mixtures": len(mixtures), "lines": count, "seconds": seconds}
    # Interleave rates so that neither job sees all the cheap or all the expensive lines at once.
    lines.sort(key=lambda obj: (int(obj["key"].split("-")[1]), obj["key"]))
    list_path = os.path.join(workdir, "raw.list")
    with open(list_path, "w", encoding="utf-8") as fp:
        for obj in lines:
            obj = dict(obj)
            obj.pop("_seconds")
            fp.write(json.dumps(obj) + "\n")
    described["lines"] = len(lines)
    described["hours"] = sum(obj["_seconds"] for obj in lines) / 3600.0
    described["wav_bytes"] = sum(os.path.getsize(p) for p in glob.glob(os.path.join(wav_dir, f"*.{audio_format}")))
    return list_path, described


#: Seconds of each dialogue line of ``--corpus short-lines`` (uniform between the two).
SHORT_LINE_SECONDS = (2.0, 5.0)


def build_short_lines(workdir: str, lines: int, seed: int) -> tuple[str, dict]:
    """The short-lines corpus (see the module docstring): ``lines`` 16 kHz mixture lines of 2-5 s, three WAV
    files each, and their WeSep list; return the list path and a description in ``build_corpus``'s terms."""
    from loader_throughput import build_corpus as build_dialogue  # imported here: it imports torch

    list_path, info = build_dialogue(workdir, lines, seed, SHORT_LINE_SECONDS)
    return list_path, {"source_files": info["recordings"], "lines": lines, "hours": info["hours"],
                       "wav_bytes": info["wav_bytes"],
                       "rates": {PACK_RATE: {"unique_mixtures": info["unique_mixtures"], "lines": lines,
                                             "seconds": info["hours"] * 3600}}}


def read_list(list_path: str) -> list[list[str]]:
    """The files of every line in the order the packer reads them: mixture files, then one source per speaker."""
    out = []
    with open(list_path, encoding="utf-8") as fp:
        for text in fp:
            obj = json.loads(text)
            out.append(list(obj["mix"]["default"]) + [obj["src"][spk][0] for spk in obj["spk"]])
    return out


# ---------------------------------------------------------------------------------------------------- the jobs

def decode_and_resample(files: list[str], sample_rate: int = PACK_RATE) -> int:
    """The baseline for one line: decode every file to float32 and resample it to ``sample_rate``."""
    frames = 0
    for path in files:
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
        if rate != sample_rate:
            data = soxr.resample(data, rate, sample_rate)
        frames += data.shape[0]
    return frames


def run_baseline(lines: list[list[str]], workers: int) -> float:
    started = time.perf_counter()
    if workers == 1:
        for files in lines:
            decode_and_resample(files)
    else:
        context = multiprocessing.get_context("forkserver")  # what packer.build.run uses
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            for _ in pool.map(decode_and_resample, lines, chunksize=1):
                pass
    return time.perf_counter() - started


def pack_options(out: str, workers: int, shard_bytes: int | None = None) -> BuildOptions:
    extra = {} if shard_bytes is None else {"shard_bytes": shard_bytes}
    return BuildOptions(out=out, workers=workers, progress=False, **extra)


def run_pack(list_path: str, out: str, workers: int, expect_samples: int, shard_bytes: int | None = None) -> float:
    if os.path.exists(out):
        shutil.rmtree(out)
    started = time.perf_counter()
    summary = build_wesep(list_path, pack_options(out, workers, shard_bytes))
    seconds = time.perf_counter() - started
    if summary.manifest.totals["samples"] != expect_samples:
        raise RuntimeError(f"packed {summary.manifest.totals['samples']} samples, expected {expect_samples}")
    return seconds


def pack_files(pack_dir: str) -> list[str]:
    """Every file of a pack, sorted (relative to ``pack_dir``)."""
    return sorted(os.path.relpath(p, pack_dir) for p in glob.glob(os.path.join(pack_dir, "**", "*"), recursive=True)
                  if os.path.isfile(p))


def read_pack(pack_dir: str) -> list[bytes]:
    """The contents of every file of a pack, for the write job."""
    out = []
    for name in pack_files(pack_dir):
        with open(os.path.join(pack_dir, name), "rb") as fp:
            out.append(fp.read())
    return out


def run_write(contents: list[bytes], directory: str) -> float:
    """Write ``contents`` to as many new files in ``directory``, one fsync per file (and one of the directory):
    the disk work of a pack of the same bytes.  The files are removed afterwards (not timed)."""
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.makedirs(directory)
    started = time.perf_counter()
    for index, data in enumerate(contents):
        fd = os.open(os.path.join(directory, f"{index:06d}.bin"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(directory, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    seconds = time.perf_counter() - started
    shutil.rmtree(directory)
    return seconds


def pack_sha256(pack_dir: str) -> list[tuple[str, str]]:
    """``(file, sha256)`` of every file of a pack."""
    out = []
    for name in pack_files(pack_dir):
        with open(os.path.join(pack_dir, name), "rb") as fp:
            out.append((name, hashlib.file_digest(fp, "sha256").hexdigest()))
    return out


def warm_page_cache(lines: list[list[str]]) -> None:
    for path in sorted({p for files in lines for p in files}):
        with open(path, "rb") as fp:
            while fp.read(1 << 20):
                pass


# ---------------------------------------------------------------------------------------------------- stages

def phase_breakdown(list_path: str, out: str, lines: list[list[str]], shard_bytes: int | None) -> None:
    """Each phase of a build run alone, one after the other, in this process (workers=1).

    A real build overlaps the writer thread with decoding, so its wall time is less than the sum printed here.
    """
    from speechpack.packer.adapters.wesep_lines import load_wesep_sample, plan_wesep_sample, read_wesep_list
    from speechpack.packer.build.plan import plan_shards
    from speechpack.packer.build.writer import PackWriter

    rows = []
    clock = time.perf_counter()
    for files in lines:
        decode_and_resample(files)
    rows.append(("baseline: soundfile.read + soxr.resample", time.perf_counter() - clock))
    clock = time.perf_counter()
    parsed = read_wesep_list(list_path)
    rows.append(("parse the list", time.perf_counter() - clock))
    clock = time.perf_counter()
    plans = [plan_wesep_sample(line, PACK_RATE) for line in parsed.lines]
    rows.append(("probe headers, check lines, size samples", time.perf_counter() - clock))
    clock = time.perf_counter()
    samples = [load_wesep_sample(line, PACK_RATE) for line in parsed.lines]
    rows.append(("decode + resample + quantise (load_wesep_sample)", time.perf_counter() - clock))
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    shard_plans = [[plans[i] for i in shard]
                   for shard in plan_shards([p.nbytes for p in plans], shard_bytes or pack_options(out, 1).shard_bytes)]
    clock = time.perf_counter()
    with PackWriter(out, parsed.kind, PACK_RATE, shard_plans) as writer:
        for sample in samples:
            writer.add(sample)
        writer.finish(provenance={"input": {}, "tool": "bench", "tool_version": "", "command": "", "options": {}},
                      skipped=[])
    rows.append(("write: statistics, .npy, sha256, fsync, index (writer thread)", time.perf_counter() - clock))
    baseline = rows[0][1]
    print("\nphases run alone, one after the other (workers=1; a build overlaps the writer with decoding):")
    for name, seconds in rows:
        print(f"  {name:<66} {seconds:7.3f} s  {seconds / baseline:6.2f}x baseline")


# ---------------------------------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", choices=("mixed", "short-lines"), default="mixed",
                        help="mixed: pieces of up to --max-piece s at --rates (default); short-lines: 2-5 s "
                             "dialogue lines at 16 kHz, --lines of them, each its own three WAV files")
    parser.add_argument("--lines", type=int, default=1440, help="lines of --corpus short-lines (default 1440)")
    parser.add_argument("--minutes", type=float, default=15.0, help="mixture audio in the list (default 15)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each job, alternating (default 5)")
    parser.add_argument("--workers", type=int, default=1, help="packer workers, and baseline processes (default 1)")
    parser.add_argument("--max-piece", type=float, default=10.0, help="longest mixture in seconds (default 10)")
    parser.add_argument("--shard-bytes", type=int, default=None,
                        help="shard size in bytes (default: the packer's, 1 GB: one shard for this corpus)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", dest="audio_format", choices=("wav", "flac"), default="wav",
                        help="how the corpus is stored: 16-bit WAV (cheapest decode: the hardest case for the "
                             "ratio) or FLAC (as LibriSpeech-derived corpora are)")
    parser.add_argument("--rates", default=",".join(map(str, RATES)),
                        help=f"sample rates of the corpus, comma-separated, among {RATES} (default: all three; "
                             f"16000 alone: nothing is resampled)")
    parser.add_argument("--sha", action="store_true", help="print the SHA-256 of every file of the last pack")
    parser.add_argument("--tmp-dir", default=None, help="where corpus and packs go (default: system temp; "
                                                        "fsync makes the file system matter)")
    parser.add_argument("--no-stages", action="store_true", help="skip the stage breakdown")
    parser.add_argument("--profile", action="store_true", help="also print cProfile's top functions of one pack")
    parser.add_argument("--keep", action="store_true", help="keep the corpus and the last pack")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.workers < 1 or args.minutes <= 0 or args.lines < 1:
        parser.error("--repeats, --workers and --lines must be at least 1, --minutes positive")
    try:
        rates = tuple(sorted({int(rate) for rate in args.rates.split(",")}))
    except ValueError:
        parser.error(f"--rates: expected comma-separated integers, got {args.rates!r}")
    if not rates or not set(rates) <= set(RATES):
        parser.error(f"--rates: choose among {RATES}, got {args.rates!r}")

    with bench_workdir("speechpack-bench-", args.tmp_dir, args.keep) as workdir:
        if args.corpus == "short-lines":
            list_path, corpus = build_short_lines(workdir, args.lines, args.seed)
        else:
            list_path, corpus = build_corpus(workdir, args.minutes, args.max_piece, args.seed, args.audio_format,
                                              rates)
        lines = read_list(list_path)
        hours = corpus["hours"]
        out = os.path.join(workdir, "pack")
        print(f"corpus: {corpus['lines']} mixture lines x 3 files, {hours * 60:.1f} min of mixtures "
              f"({hours:.4f} h), from {corpus['source_files']} recordings; "
              f"{corpus['wav_bytes'] / 1e6:.1f} MB of unique {args.audio_format.upper()} in {workdir}")
        for rate, info in corpus["rates"].items():
            print(f"  {rate:>5} Hz: {info['unique_mixtures']:3d} unique mixtures, {info['lines']:4d} lines, "
                  f"{info['seconds'] / 60:5.1f} min")
        print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, numpy {np.__version__}, "
              f"soundfile {soundfile.__version__} (libsndfile {soundfile.__libsndfile_version__}), "
              f"soxr {soxr.__version__}; workers={args.workers}")

        warm_page_cache(lines)
        run_baseline(lines, args.workers)  # warm-up, untimed
        run_pack(list_path, out, args.workers, len(lines), args.shard_bytes)
        contents = read_pack(out)
        pack_bytes = sum(len(data) for data in contents)
        with open(os.path.join(out, "dataset.json"), encoding="utf-8") as fp:
            manifest = json.load(fp)
        manifest_hours, shard_count = manifest["totals"]["hours"], len(manifest["shards"])
        write_dir = os.path.join(workdir, "write")
        run_write(contents, write_dir)  # warm-up, untimed

        times: dict[str, list[float]] = {"decode": [], "write": [], "pack": []}
        jobs = {"decode": lambda: run_baseline(lines, args.workers),
                "write": lambda: run_write(contents, write_dir),
                "pack": lambda: run_pack(list_path, out, args.workers, len(lines), args.shard_bytes)}
        cpu: dict[str, list[float]] = {job: [] for job in times}  # this process's CPU time (all its threads)
        for repeat in range(args.repeats):
            order = ("decode", "write", "pack") if repeat % 2 == 0 else ("pack", "write", "decode")
            for job in order:
                started_cpu = time.process_time()
                times[job].append(jobs[job]())
                cpu[job].append(time.process_time() - started_cpu)
        del contents
        load = os.getloadavg()

        print(f"\npack: {pack_bytes / 1e6:.1f} MB in {len(pack_files(out))} files, {shard_count} shard(s), "
              f"written per run (manifest says {manifest_hours:.4f} h at {PACK_RATE} Hz)")
        print(f"{args.repeats} timed runs of each, alternating; hours = {hours:.4f} h of mixtures for every job; "
              f"load average after the runs {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
        print(f"  {'':<34} {'best s':>8} {'median s':>9} {'best h/s':>9} {'median h/s':>11} {'median CPU s':>13}")
        names = {"decode": "decode (soundfile+soxr)", "write": "write (same bytes, fsync per file)",
                 "pack": "pack (build_wesep)"}
        for job in ("decode", "write", "pack"):
            best, median = min(times[job]), statistics.median(times[job])
            print(f"  {names[job]:<34} {best:8.3f} {median:9.3f} {hours / best:9.3f} {hours / median:11.3f} "
                  f"{statistics.median(cpu[job]):13.3f}")
        baseline_s, pack_s = times["decode"], times["pack"]
        limits = [max(d, w) for d, w in zip(times["decode"], times["write"])]
        io_ratios = [p / limit for p, limit in zip(pack_s, limits)]
        io_median = statistics.median(io_ratios)
        io_best = min(pack_s) / max(min(times["decode"]), min(times["write"]))
        bound = "decode" if statistics.median(times["decode"]) >= statistics.median(times["write"]) else "write"
        print(f"\n  I/O limit (larger of decode and write, per run): median {statistics.median(limits):.3f} s "
              f"({bound}-bound)")
        print(f"  pack / I/O limit: median of paired runs {io_median:.3f} "
              f"(runs: {', '.join(f'{r:.2f}' for r in io_ratios)}), best-of-{args.repeats} {io_best:.3f}")
        target = TARGET_SHORT_IO_RATIO if args.corpus == "short-lines" else TARGET_IO_RATIO
        verdict = "PASS" if io_median <= target else "BELOW TARGET"
        print(f"  target pack <= {target} x I/O limit (median): {verdict}")
        if args.workers == 1:  # pool workers' CPU is not this process's
            print(f"  CPU time, pack / decode: median {statistics.median(cpu['pack']) / statistics.median(cpu['decode']):.3f} "
                  f"(what the build costs when no second core is free: the machine's load average says how "
                  f"free they were)")
        ratio_best = min(baseline_s) / min(pack_s)
        ratio_median = statistics.median(baseline_s) / statistics.median(pack_s)
        paired = statistics.median(b / p for b, p in zip(baseline_s, pack_s))
        print(f"\n  ratio pack/decode throughput: best-of-{args.repeats} {ratio_best:.3f}, "
              f"median {ratio_median:.3f}, median of paired runs {paired:.3f}")
        print(f"  realtime factor of the pack: {hours * 3600 / min(pack_s):.0f}x "
              f"(decode {hours * 3600 / min(baseline_s):.0f}x)")
        verdict = "PASS" if ratio_best >= TARGET_RATIO else "BELOW TARGET"
        print(f"  target >= {TARGET_RATIO} (best-of-{args.repeats}): {verdict}")
        if args.sha:
            print("\nSHA-256 of the last pack's files:")
            for name, digest in pack_sha256(out):
                print(f"  {digest}  {name}")

        if not args.no_stages:
            phase_breakdown(list_path, out, lines, args.shard_bytes)
        if args.profile:
            profiler = cProfile.Profile()
            if os.path.exists(out):
                shutil.rmtree(out)
            profiler.enable()
            build_wesep(list_path, pack_options(out, 1, args.shard_bytes))
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
            print("\ncProfile of one pack (workers=1), top 20 by own time:")
            print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
