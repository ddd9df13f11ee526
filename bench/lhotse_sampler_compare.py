"""The same corpus, the same batches: Lhotse's own sampler and collation against the speechpack ASR loader on the
pack ``speechpack build lhotse`` made from the corpus' manifest.

    python bench/lhotse_sampler_compare.py [--utterances 600] [--max-duration 60] [--repeats 5] [--tmp-dir DIR]
                                           [--keep]

One process, one torch thread (what a DataLoader worker gets), warm page cache (one untimed epoch of each job).

**Corpus.**  Real speech: spans of 1-6 s (random start, seeded) of the five LibriVox clips of
``pocketsphinx-testdata`` (16 kHz), each written as its own PCM_16 WAV with its clip's transcript, ``--utterances``
of them; a CutSet made with Lhotse's own API (``Recording.from_file``, one ``SupervisionSegment`` per cut, text,
speaker, language) saved to ``cuts.jsonl.gz`` as a recipe would, and packed by ``build lhotse`` from that file.

**Batches.**  Lhotse's ``DynamicBucketingSampler(max_duration, num_buckets=10, shuffle=True, seed=0)`` over the
cuts makes one epoch's batches; both jobs deliver exactly those batches (the same cut ids, in the same order):

- **Lhotse**: per batch, what a plain Lhotse audio dataset does, ``collate_audio(cuts)`` (soundfile reads each
  WAV; float32 ``[B, T]`` zero-padded, and the lengths).  Timed twice: the collation alone, and with the sampler
  (the epoch's iteration of a fresh ``DynamicBucketingSampler``) included, as a training loop pays it.
- **speechpack**: ``build_loader`` with ``task: asr`` on the pack (tokenizer, items, filters), then per batch the
  loader's batch builder (``AsrBatchBuilder.build``) on the batch's items: ``source_seqs`` float32 ``[B, T]``
  zero-padded, lengths, and the transcripts as padded token ids (``target_seqs``), which the Lhotse job does not
  make (``min_samples_per_char: 1``: the spans keep their whole clip's transcript, so no utterance is
  filtered).  Its own epoch plan is not used (it would make different batches); that plan's cost is in
  ``bench/plan_throughput.py``.

The first batch of both is checked equal (audio bit for bit) before timing.  Unit: batches per second of wall time
(and CPU seconds per epoch); median of ``--repeats`` alternating epochs.  The ratio printed is speechpack / Lhotse
(above 1: speechpack is faster).  Figures and their reading: docs/performance.md, "Lhotse sampler, same batches".
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import numpy as np
import soundfile
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.workdir import bench_workdir  # noqa: E402
from speechpack.loader import build_loader  # noqa: E402
from speechpack.packer.adapters.lhotse import build_lhotse  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402
from bench.recordings import librivox  # noqa: E402  (the five LibriVox clips and their transcripts)

RATE = 16000
NUM_BUCKETS = 10


def make_cuts(work: str, utterances: int) -> str:
    """The corpus as WAV files and a ``cuts.jsonl.gz`` written with Lhotse's API; returns the manifest path."""
    from lhotse import CutSet, Recording, SupervisionSegment

    rng = random.Random(0)
    clips = librivox()
    folder = os.path.join(work, "wav")
    os.makedirs(folder, exist_ok=True)
    cuts = []
    for n in range(utterances):
        audio, text = clips[n % len(clips)]
        length = min(len(audio), int(rng.uniform(1.0, 6.0) * RATE))
        start = rng.randrange(0, len(audio) - length + 1)
        path = os.path.join(folder, f"utt-{n:06d}.wav")
        soundfile.write(path, audio[start:start + length], RATE, subtype="PCM_16")
        cut = Recording.from_file(path).to_cut()
        cut.supervisions = [SupervisionSegment(cut.id, cut.recording_id, 0.0, cut.duration, text=text,
                                               speaker=f"spk{n % len(clips)}", language="en")]
        cuts.append(cut)
    manifest = os.path.join(work, "librivox_cuts_train.jsonl.gz")
    CutSet.from_cuts(cuts).to_file(manifest)
    return manifest


def lhotse_batches(cuts, max_duration: float) -> list:
    """One epoch of the sampler: a CutSet per batch."""
    from lhotse.dataset import DynamicBucketingSampler

    sampler = DynamicBucketingSampler(cuts, max_duration=max_duration, num_buckets=NUM_BUCKETS, shuffle=True,
                                      seed=0)
    sampler.set_epoch(0)
    return list(sampler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utterances", type=int, default=600)
    parser.add_argument("--max-duration", type=float, default=60.0, help="seconds of audio per batch (Lhotse)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tmp-dir")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    from lhotse import CutSet
    from lhotse.dataset.collation import collate_audio

    torch.set_num_threads(1)
    with bench_workdir("speechpack-lhotse-sampler-", args.tmp_dir, args.keep) as work:
        manifest = make_cuts(work, args.utterances)
        pack = build_lhotse(BuildOptions(out=os.path.join(work, "pack"), progress=False), cuts=manifest).out
        cuts = CutSet.from_jsonl_lazy(manifest)  # what Lhotse recommends for its dynamic samplers
        batches = lhotse_batches(cuts, args.max_duration)
        loader = build_loader({"task": "asr", "packs": [{"path": pack}],
                               "dataset_args": {"batching_strategy": "STATIC", "batch_size": 1,
                                                "min_samples_per_char": 1}}, "train", seed=0)
        builder = loader.builder
        keys = builder.packs[0].keys
        item_of = {keys[int(sample)]: item for item, sample in enumerate(builder.items.sample.tolist())}
        plan = [np.array([item_of[cut.id] for cut in batch], dtype=np.int64) for batch in batches]
        seconds = sum(cut.duration for batch in batches for cut in batch)

        ours = builder.build(plan[0], np.ones(len(plan[0]), dtype=bool), 0, 0)
        theirs, _ = collate_audio(batches[0])
        np.testing.assert_array_equal(ours["source_seqs"], theirs.numpy())
        assert ours["key"] == [cut.id for cut in batches[0]]

        def run_lhotse() -> None:
            for batch in batches:
                collate_audio(batch)

        def run_lhotse_sampler() -> None:
            for batch in lhotse_batches(cuts, args.max_duration):
                collate_audio(batch)

        def run_speechpack() -> None:
            for b, items in enumerate(plan):
                builder.build(items, np.ones(len(items), dtype=bool), 0, b)

        jobs = {"speechpack": run_speechpack, "lhotse collate": run_lhotse, "lhotse sampler+collate":
                run_lhotse_sampler}
        wall = {job: [] for job in jobs}
        cpu = {job: [] for job in jobs}
        for fn in jobs.values():
            fn()  # warm-up: page cache, allocator
        for _ in range(args.repeats):
            for job, fn in jobs.items():
                start, start_cpu = time.perf_counter(), time.process_time()
                fn()
                wall[job].append(time.perf_counter() - start)
                cpu[job].append(time.process_time() - start_cpu)
        print(f"corpus: {args.utterances} utterances, {seconds / 60:.1f} min; {len(batches)} batches of <= "
              f"{args.max_duration:g} s (DynamicBucketingSampler, {NUM_BUCKETS} buckets); load "
              f"{open('/proc/loadavg').read().split()[0]}")
        for job in jobs:
            w, c = statistics.median(wall[job]), statistics.median(cpu[job])
            print(f"{job:24s} {len(batches) / w:9.1f} batches/s  {seconds / w:9.0f} audio s/s  "
                  f"wall {w:.3f} s  cpu {c:.3f} s per epoch")
        ours_w = statistics.median(wall["speechpack"])
        for job in ("lhotse collate", "lhotse sampler+collate"):
            print(f"ratio speechpack / {job}: {statistics.median(wall[job]) / ours_w:.2f}x wall, "
                  f"{statistics.median(cpu[job]) / statistics.median(cpu['speechpack']):.2f}x cpu")


if __name__ == "__main__":
    main()
