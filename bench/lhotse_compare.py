"""Side by side with Lhotse 1.33 on the same corpus: random 4 s chunks in batches, one process, warm page cache.

    python bench/lhotse_compare.py [--lines 640] [--batch-size 16] [--repeats 5] [--tmp-dir DIR] [--keep]

Lhotse is the community default for speech data, so it is the baseline a user would measure speechpack against.
It comes with speechpack's optional ``lhotse`` extra (``build lhotse`` / ``export lhotse``); speechpack's loader never
imports it, and without it the script says so and exits.

**Corpus.** ``build_corpus`` of ``bench/loader_throughput.py``: 16 kHz mixtures of 8-12 s cut from real recordings
(LibriVox, codec2, ALSA prompts); each line's mixture WAV (PCM_16, mono) is one utterance, ``--lines`` of them.

**Jobs** (each delivers, per batch of ``--batch-size`` utterances, a float32 batch of random 4 s windows; an epoch
reads every utterance once, in a shuffled order):

- **Lhotse, one WAV per cut**: a ``CutSet`` of the recordings (``Recording.from_file``, cuts saved to and loaded
  from ``cuts.jsonl.gz`` as a recipe would), ``SimpleCutSampler(max_cuts=B, shuffle=True)``, then per batch what
  Lhotse's datasets do: ``CutSet.truncate(max_duration=4, offset_type="random")`` and
  ``lhotse.dataset.collation.collate_audio`` (soundfile reads only the window).
- **Lhotse Shar**: the same cuts exported with ``to_shar(fields={"recording": "wav"})`` (tar shards of WAV plus
  cut JSONL), read back with ``CutSet.from_shar`` (shards shuffled per epoch), batched, truncated and collated the
  same way.
- **speechpack**: a ``sources`` pack of the same WAVs (``build_wesep`` of a one-speaker list), read with
  ``build_loader(..., num_workers=0)``, ``chunk_len`` 64000, ``batch_size`` B.  Its batch holds the window twice
  (``wav_mix`` and ``wav_target``: a sources sample is its own target), so it does twice the copying of the
  Lhotse jobs.

Both jobs run with ``torch.set_num_threads(1)``.  Time to first batch is measured too, from the manifest on disk
to the first batch in hand (fresh objects): Lhotse loading ``cuts.jsonl.gz`` and sampling, against
``build_loader``.  One untimed warm-up epoch of each job, then ``--repeats`` timed epochs of each, alternating;
wall time and CPU time per epoch.  Figures and their reading: ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from loader_throughput import CHUNK_LEN, CHUNK_SECONDS, _log, build_corpus, warm_files  # noqa: E402
from workdir import bench_workdir  # noqa: E402


def require_lhotse():
    """Import Lhotse, or exit with a clear message (it is an optional extra; the loader never needs it)."""
    try:
        import lhotse
    except ImportError:
        raise SystemExit("bench/lhotse_compare.py compares against Lhotse, which is not installed: "
                         "pip install -e '.[lhotse]' (the optional lhotse extra)") from None
    return lhotse


def utterance_paths(list_path: str) -> list[str]:
    """Each line's mixture WAV, in list order."""
    with open(list_path, encoding="utf-8") as fp:
        return [json.loads(line)["mix"]["default"][0] for line in fp]


def write_sources_list(paths: list[str], out: str) -> str:
    with open(out, "w", encoding="utf-8") as fp:
        for k, path in enumerate(paths):
            fp.write(json.dumps({"key": f"utt-{k:06d}", "spk": ["s"], "src": {"s": [path]}}) + "\n")
    return out


class LhotseJobs:
    """Lhotse's two storage layouts, read the way its datasets read them."""

    def __init__(self, paths: list[str], workdir: str, batch_size: int):
        lhotse = require_lhotse()
        from lhotse.dataset.collation import collate_audio
        from lhotse.dataset.sampling import SimpleCutSampler

        self._collate, self._sampler = collate_audio, SimpleCutSampler
        self.batch_size = batch_size
        recordings = lhotse.RecordingSet.from_recordings(
            lhotse.Recording.from_file(path, recording_id=f"utt-{k:06d}") for k, path in enumerate(paths))
        self.cuts_path = os.path.join(workdir, "cuts.jsonl.gz")
        lhotse.CutSet.from_manifests(recordings=recordings).to_file(self.cuts_path)
        self.cuts = lhotse.CutSet.from_file(self.cuts_path).to_eager()
        self.shar_dir = os.path.join(workdir, "shar")
        os.makedirs(self.shar_dir)
        self.cuts.to_shar(self.shar_dir, fields={"recording": "wav"}, shard_size=100)
        self.lhotse = lhotse

    def _batch(self, cuts, rng: random.Random) -> int:
        audio, _lengths = self._collate(cuts.truncate(max_duration=CHUNK_SECONDS, offset_type="random", rng=rng))
        if audio.shape[-1] != CHUNK_LEN:
            raise SystemExit(f"Lhotse delivered windows of {audio.shape[-1]} samples, expected {CHUNK_LEN}")
        return audio.shape[0]

    def wav_epoch(self, epoch: int, cuts=None) -> int:
        sampler = self._sampler(cuts if cuts is not None else self.cuts, max_cuts=self.batch_size, shuffle=True,
                                seed=0)
        sampler.set_epoch(epoch)
        rng = random.Random(epoch)
        return sum(self._batch(batch, rng) for batch in sampler)

    def shar_epoch(self, epoch: int) -> int:
        cuts = self.lhotse.CutSet.from_shar(in_dir=self.shar_dir, shuffle_shards=True, seed=epoch)
        rng = random.Random(epoch)
        delivered, batch = 0, []
        for cut in cuts:
            batch.append(cut)
            if len(batch) == self.batch_size:
                delivered += self._batch(self.lhotse.CutSet.from_cuts(batch), rng)
                batch = []
        if batch:
            delivered += self._batch(self.lhotse.CutSet.from_cuts(batch), rng)
        return delivered

    def first_batch_seconds(self) -> float:
        started = time.perf_counter()
        cuts = self.lhotse.CutSet.from_file(self.cuts_path)
        sampler = self._sampler(cuts, max_cuts=self.batch_size, shuffle=True, seed=0)
        self._batch(next(iter(sampler)), random.Random(0))
        return time.perf_counter() - started


class SpeechpackJob:
    def __init__(self, pack: str, batch_size: int):
        from speechpack.loader import build_loader

        self.build_loader = build_loader
        self.config = {"packs": [{"path": pack}], "dataset_args": {"chunk_len": CHUNK_LEN, "batch_size": batch_size}}
        self.loader = build_loader(self.config, "train", num_workers=0, seed=0)

    def epoch(self, epoch: int) -> int:
        self.loader.set_epoch(epoch)
        delivered = 0
        for batch in self.loader:
            if batch["wav_mix"].shape[-1] != CHUNK_LEN:
                raise SystemExit(f"speechpack delivered windows of {batch['wav_mix'].shape[-1]} samples")
            delivered += int(batch["valid"].sum())
        return delivered

    def first_batch_seconds(self) -> float:
        started = time.perf_counter()
        loader = self.build_loader(self.config, "train", num_workers=0, seed=0)
        next(iter(loader))
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=640, help="utterances (default 640)")
    parser.add_argument("--batch-size", type=int, default=16, help="utterances per batch (default 16)")
    parser.add_argument("--repeats", type=int, default=5, help="timed epochs per job (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir", default=None, help="where corpus, packs and manifests go (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    if min(args.lines, args.batch_size, args.repeats) < 1:
        parser.error("--lines, --batch-size and --repeats must be at least 1")
    lhotse = require_lhotse()
    import numpy
    import torch

    # One thread: torch's OpenMP workers spin while waiting for a descheduled sibling, which on a shared machine
    # multiplied Lhotse's CPU time per epoch by up to 6 (collate_audio pads with torch); neither job needs them.
    torch.set_num_threads(1)
    from speechpack.packer.adapters.wesep import build_wesep
    from speechpack.packer.build.run import BuildOptions

    with bench_workdir("speechpack-lhotse-bench-", args.tmp_dir, args.keep, _log) as workdir:
        list_path, corpus = build_corpus(workdir, args.lines, args.seed)
        paths = utterance_paths(list_path)
        pack = os.path.join(workdir, "pack")
        build_wesep(write_sources_list(paths, os.path.join(workdir, "sources.list")),
                    BuildOptions(out=pack, workers=2, progress=False))
        lhotse_jobs = LhotseJobs(paths, workdir, args.batch_size)
        speechpack = SpeechpackJob(pack, args.batch_size)
        warm_files(paths + [p for p in glob.glob(os.path.join(workdir, "**", "*"), recursive=True)
                            if os.path.isfile(p)])
        _log(f"corpus: {len(paths)} utterances of {corpus['min_s']:.1f}-{corpus['max_s']:.1f} s "
             f"({corpus['hours'] * 60:.1f} min), one 16 kHz PCM_16 WAV each; Lhotse {lhotse.__version__}, "
             f"numpy {numpy.__version__}, torch {torch.__version__} (1 thread); batches of {args.batch_size} random "
             f"{CHUNK_SECONDS:g} s windows, one process, warm page cache")
        jobs = {"Lhotse, one WAV per cut": lhotse_jobs.wav_epoch, "Lhotse Shar (tar shards)": lhotse_jobs.shar_epoch,
                "speechpack build_loader": speechpack.epoch}
        times: dict[str, list[float]] = {name: [] for name in jobs}
        cpu: dict[str, list[float]] = {name: [] for name in jobs}
        for name, run in jobs.items():
            if run(0) != len(paths):  # warm-up, and a check that every job reads every utterance once
                raise SystemExit(f"{name}: one epoch did not deliver {len(paths)} windows")
        for epoch in range(1, args.repeats + 1):
            for name, run in jobs.items():
                started, started_cpu = time.perf_counter(), time.process_time()
                delivered = run(epoch)
                times[name].append(time.perf_counter() - started)
                cpu[name].append(time.process_time() - started_cpu)
                if delivered != len(paths):
                    raise SystemExit(f"{name}: epoch {epoch} delivered {delivered} windows, not {len(paths)}")
        first = {"Lhotse, one WAV per cut": [lhotse_jobs.first_batch_seconds() for _ in range(3)],
                 "speechpack build_loader": [speechpack.first_batch_seconds() for _ in range(3)]}
        report(times, cpu, first, len(paths))
    return 0


def report(times: dict[str, list[float]], cpu: dict[str, list[float]], first: dict[str, list[float]],
           utterances: int) -> None:
    """Wall time and CPU time (``process_time``) per epoch: on a shared machine the CPU time is the steadier
    measure of the work each job does, the wall time what a training job waits."""
    audio = utterances * CHUNK_SECONDS
    for name, runs in times.items():
        _log(f"  {name}: epochs of {', '.join(f'{t:.3f}' for t in runs)} s wall")
    sp = "speechpack build_loader"
    _log(f"\n  {'job':<28} {'best s':>7} {'median s':>9} {'best audio-s/s':>15} {'best cpu s':>11} "
         f"{'median cpu s':>13}   speechpack is (best wall, median wall, best cpu, median cpu)")
    for name, runs in times.items():
        figures = (min(runs), statistics.median(runs), min(cpu[name]), statistics.median(cpu[name]))
        ours = (min(times[sp]), statistics.median(times[sp]), min(cpu[sp]), statistics.median(cpu[sp]))
        ratios = ", ".join(f"{mine / base:.1f}x" for mine, base in zip(figures, ours))
        _log(f"  {name:<28} {figures[0]:7.3f} {figures[1]:9.3f} {audio / figures[0]:15,.0f} {figures[2]:11.3f} "
             f"{figures[3]:13.3f}   {ratios}")
    _log("\n  time to first batch (manifest on disk to batch in hand), best of 3:")
    for name, runs in first.items():
        _log(f"  {name:<28} {min(runs):8.3f} s")


if __name__ == "__main__":
    sys.exit(main())
