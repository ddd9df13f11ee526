"""Peak memory of reading and packing a Lhotse Shar directory: streaming tar members against holding the audio.

    python bench/shar_memory.py [--cuts 1000] [--shard-size 200] [--workers 1] [--tmp-dir DIR] [--keep]

**Corpus.** The five real librivox clips of pocketsphinx-testdata (16 kHz, 5-7 s), each repeated under new cut ids
until ``--cuts`` cuts, written by Lhotse's own ``CutSet.to_shar(fields={"recording": "wav"})`` in shards of
``--shard-size`` cuts (1000 cuts: about 150 MB of tars).

**Jobs**, each in a fresh Python process whose peak resident memory (``ru_maxrss`` from ``wait4``) is reported:

- ``imports``    import Lhotse and speechpack's Lhotse adapter, nothing read: the floor every job stands on;
- ``from-shar``  ``list(CutSet.from_shar(...))``: every cut with its audio bytes attached, what ``build lhotse
                 --shar`` held before it streamed;
- ``read-shar``  ``packer.adapters.lhotse_shar.read_shar`` and ``make_items``: what a build now holds for the
                 whole directory (cuts and tar members, no audio);
- ``build``      the whole ``build lhotse --shar`` with ``--workers`` (the driver's peak; a worker holds the cuts it is
                 decoding).

Printed: each job's peak, its growth over ``imports``, and the ratio of ``from-shar``'s growth to ``read-shar``'s
(how much less the reader holds) and the tars' size.  The figures depend on the corpus size, not on the machine's
speed: no timing is involved.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workdir import bench_workdir  # noqa: E402

#: The real clips the corpus repeats (pocketsphinx-testdata).
CLIPS = tuple(f"/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-{n}.wav"
              for n in ("0870", "0890", "0920", "0930", "0880"))
JOBS = ("imports", "from-shar", "read-shar", "build")
MB = 1 << 20


def write_corpus(shar_dir: str, cuts: int, shard_size: int) -> int:
    """The Shar corpus (see the module doc); returns the total size of its recording tars."""
    from lhotse import CutSet, Recording, SupervisionSegment

    missing = [p for p in CLIPS if not os.path.isfile(p)]
    if missing:
        raise SystemExit(f"{missing[0]} is missing: apt-get install pocketsphinx-testdata")
    base = []
    for path in CLIPS:
        cut = Recording.from_file(path).to_cut()
        cut.supervisions = [SupervisionSegment(cut.id, cut.recording_id, 0.0, cut.duration, text="librivox",
                                               speaker="narrator", language="en")]
        base.append(cut)
    repeated = CutSet.from_cuts(base[i % len(base)].with_id(f"{base[i % len(base)].id}-{i:06d}")
                                for i in range(cuts))
    os.makedirs(shar_dir)
    repeated.to_shar(shar_dir, fields={"recording": "wav"}, shard_size=shard_size)
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(shar_dir, "recording.*.tar")))


def run_job(job: str, shar_dir: str, out: str, workers: int) -> None:
    """One job, in this (fresh) process."""
    import lhotse
    from speechpack.packer.adapters import lhotse as adapter
    from speechpack.packer.adapters.lhotse_shar import read_shar

    if job == "from-shar":
        held = list(lhotse.CutSet.from_shar(in_dir=shar_dir))
        print(len(held))
    elif job == "read-shar":
        read = read_shar(shar_dir)
        items, _ = adapter.make_items(read.cuts, "asr", corpus="librivox")
        print(len(items))
    elif job == "build":
        from speechpack.packer.build.run import BuildOptions

        adapter.build_lhotse(BuildOptions(out=out, workers=workers, progress=False), shar=shar_dir,
                             corpus="librivox")


def peak_rss(job: str, shar_dir: str, out: str, workers: int) -> int:
    """The peak resident memory in bytes of ``job`` run in a fresh process."""
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--job", job, "--shar", shar_dir,
                                "--out", out, "--workers", str(workers)], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"job {job} failed (wait status {status})")
    return usage.ru_maxrss * 1024  # kilobytes on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuts", type=int, default=1000, help="cuts in the corpus (default 1000, about 150 MB)")
    parser.add_argument("--shard-size", type=int, default=200, help="cuts per Shar shard (default 200)")
    parser.add_argument("--workers", type=int, default=1, help="--workers of the build job (default 1)")
    parser.add_argument("--tmp-dir", default=None, help="where the corpus and the pack go (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    parser.add_argument("--job", choices=JOBS, help=argparse.SUPPRESS)
    parser.add_argument("--shar", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        run_job(args.job, args.shar, args.out, args.workers)
        return
    with bench_workdir("shar-memory-", args.tmp_dir, args.keep) as workdir:
        shar_dir, out = os.path.join(workdir, "shar"), os.path.join(workdir, "pack")
        tar_bytes = write_corpus(shar_dir, args.cuts, args.shard_size)
        print(f"corpus: {args.cuts} cuts, recording tars {tar_bytes / MB:.1f} MB")
        peaks = {job: peak_rss(job, shar_dir, out, args.workers) for job in JOBS}
        floor = peaks["imports"]
        for job in JOBS:
            print(f"{job:>10}: peak RSS {peaks[job] / MB:8.1f} MB, +{(peaks[job] - floor) / MB:7.1f} MB over imports")
        held, streamed = peaks["from-shar"] - floor, max(peaks["read-shar"] - floor, 1)
        print(f"from-shar holds {held / streamed:.1f}x what read-shar holds "
              f"(from-shar growth / tar bytes {held / tar_bytes:.2f}; read-shar growth / tar bytes "
              f"{streamed / tar_bytes:.3f}; build growth / tar bytes {(peaks['build'] - floor) / tar_bytes:.3f})")


if __name__ == "__main__":
    main()
