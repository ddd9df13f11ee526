"""ASR loader throughput against Omnilingual's way of reading the same data: parquet rows whose audio bytes are
decoded with soundfile for every sample.

    python bench/asr_loader_throughput.py [--utterances 600] [--batch-size 16] [--repeats 3] [--fbank]
                                          [--tmp-dir DIR] [--keep]

One process, ``num_workers=0``, one torch thread (what a DataLoader worker gets), warm page cache (every file is
read once before timing).

**Corpus.**  Real speech: the five LibriVox clips of ``pocketsphinx-testdata`` (16 kHz, 3-7 s, with transcripts).
``--utterances`` spans of 1-6 s (random start), each re-encoded as FLAC bytes (what Omnilingual's parquet holds),
written as ``corpus=C/language=L/part-0.parquet`` for two corpora and two languages (row groups of 64 rows), with
the LangASRSchema columns; ``packer.adapters.asr_parquet.build_parquet`` packs it.

**Jobs** (the same delivery: the epoch's batches of ``--batch-size`` utterances in the loader's shuffled order,
``source_seqs`` float32 ``[B, T]`` zero-padded to the longest, ``target_seqs`` int64 ``[B, S]`` of character ids,
lengths, or with ``--fbank`` the standardised 80-bin features ``[B, F, 80]``):

- speechpack: ``loader.build_loader`` with ``task: asr``, STATIC batching, built once; one epoch per run;
- Omnilingual-style: the parquet files' row groups read with pyarrow (``audio_bytes`` and ``text``), then per
  sample ``soundfile.read(BytesIO(audio_bytes))``, mono, characters mapped to ids through a dict, collated with
  numpy padding; with ``--fbank``, kaldi-native-fbank per utterance (what fairseq2 calls) and fairseq2's
  standardisation.  It delivers the batches in the speechpack plan's order, so its first batch is checked to equal
  speechpack's (audio bit for bit; fbank within 1e-2) before timing.

Unit: **audio seconds per second** = seconds delivered / wall seconds, best of ``--repeats`` alternating runs.
The ratio speechpack / Omnilingual-style is printed; there is no pass/fail target (figures in
``docs/performance.md`` are the lead's to add).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time

import numpy as np
import soundfile
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.recordings import librivox  # noqa: E402
from bench.workdir import bench_workdir  # noqa: E402
from speechpack.loader import build_loader  # noqa: E402
from speechpack.packer.adapters.asr_parquet import build_parquet, parquet_files  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402

RATE = 16000
PARTITIONS = (("librivox", "en"), ("librivox", "fr"), ("austen", "en"), ("austen", "fr"))


def make_corpus(root: str, count: int, seed: int = 0) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    clips = librivox()
    rng = np.random.default_rng(seed)
    tables = {p: {"audio_bytes": [], "audio_size": [], "text": [], "split": []} for p in PARTITIONS}
    for i in range(count):
        audio, text = clips[i % len(clips)]
        n = int(rng.uniform(1.0, min(6.0, len(audio) / RATE)) * RATE)
        start = int(rng.integers(0, len(audio) - n + 1))
        words = text.split()
        keep = max(1, round(len(words) * n / len(audio)))
        buffer = io.BytesIO()
        soundfile.write(buffer, audio[start:start + n], RATE, format="FLAC")
        table = tables[PARTITIONS[i % len(PARTITIONS)]]
        for column, value in (("audio_bytes", buffer.getvalue()), ("audio_size", n),
                              ("text", " ".join(words[:keep])), ("split", "train")):
            table[column].append(value)
    data = os.path.join(root, "data")
    for (corpus, language), table in tables.items():
        folder = os.path.join(data, f"corpus={corpus}", f"language={language}")
        os.makedirs(folder)
        pq.write_table(pa.table(table), os.path.join(folder, "part-0.parquet"), row_group_size=64)
    return data


class OmnilingualStyle:
    """Parquet row groups + soundfile decode per sample, in the order of a given plan (module docstring)."""

    def __init__(self, data: str, vocabulary: dict[str, int], unk: int, fbank: bool):
        self.files = parquet_files(data)
        self.vocabulary, self.unk, self.fbank = vocabulary, unk, fbank

    def rows(self) -> dict[str, tuple[bytes, str]]:
        import pyarrow.parquet as pq

        out = {}
        for path in self.files:
            stem = os.path.splitext(os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.dirname(path)))))[0]
            parquet = pq.ParquetFile(path)
            row = 0
            for group in range(parquet.metadata.num_row_groups):
                table = parquet.read_row_group(group, columns=["audio_bytes", "text"]).to_pydict()
                for audio, text in zip(table["audio_bytes"], table["text"]):
                    out[f"{stem}:{row}"] = (audio, text)
                    row += 1
        return out

    def batches(self, plan_keys: list[list[str]]):
        rows = self.rows()
        for keys in plan_keys:
            waves, targets = [], []
            for key in keys:
                audio_bytes, text = rows[key]
                audio, _ = soundfile.read(io.BytesIO(audio_bytes), dtype="float32", always_2d=True)
                waves.append(audio.mean(axis=1) if audio.shape[1] > 1 else audio[:, 0])
                targets.append(np.array([self.vocabulary.get(c, self.unk) for c in text], dtype=np.int64))
            if self.fbank:
                feats = [_knf_fbank(w) for w in waves]
                source = np.zeros((len(feats), max(len(f) for f in feats), 80), dtype=np.float32)
                for i, f in enumerate(feats):
                    source[i, :len(f)] = f
            else:
                source = np.zeros((len(waves), max(len(w) for w in waves)), dtype=np.float32)
                for i, w in enumerate(waves):
                    source[i, :len(w)] = w
            target = np.zeros((len(targets), max(len(t) for t in targets)), dtype=np.int64)
            for i, t in enumerate(targets):
                target[i, :len(t)] = t
            yield {"source_seqs": source, "target_seqs": target, "seconds": sum(len(w) for w in waves) / RATE}


def _knf_fbank(wave: np.ndarray) -> np.ndarray:
    import kaldi_native_fbank as knf

    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.mel_opts.num_bins = 80
    computer = knf.OnlineFbank(opts)
    computer.accept_waveform(RATE, (wave * 32768.0).tolist())
    computer.input_finished()
    feats = np.stack([computer.get_frame(i) for i in range(computer.num_frames_ready)])
    return (feats - feats.mean(axis=0)) / feats.std(axis=0, ddof=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utterances", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fbank", action="store_true", help="deliver 80-bin fbank features instead of waveforms")
    parser.add_argument("--tmp-dir")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as in a DataLoader worker; the baseline is single-threaded too
    with bench_workdir("speechpack-asr-bench-", args.tmp_dir, args.keep) as work:
        data = make_corpus(work, args.utterances)
        pack = build_parquet(data, BuildOptions(out=os.path.join(work, "pack"), progress=False)).out
        config = {"task": "asr", "packs": [{"path": pack}],
                  "dataset_args": {"batching_strategy": "STATIC", "batch_size": args.batch_size,
                                   "use_fbank": args.fbank}}
        loader = build_loader(config, "train", seed=0)
        plan = loader.dataset.plan(0)
        keys = loader.builder.packs[0].keys
        plan_keys = [[keys[int(loader.builder.items.sample[i])] for i in plan.batch(b)[0]] for b in range(len(plan))]
        tokenizer = loader.tokenizer
        vocabulary = {c: i + 4 for i, c in enumerate(tokenizer.characters)}
        baseline = OmnilingualStyle(data, vocabulary, tokenizer.unk_id, args.fbank)
        ours, theirs = next(iter(loader)), next(baseline.batches(plan_keys[:1]))
        if args.fbank:
            np.testing.assert_allclose(ours["source_seqs"].numpy(), theirs["source_seqs"], atol=1e-2)
        else:
            np.testing.assert_array_equal(ours["source_seqs"].numpy(), theirs["source_seqs"])
        np.testing.assert_array_equal(ours["target_seqs"].numpy(), theirs["target_seqs"])
        total_seconds = float(loader.builder.items.num_frames[plan.items.reshape(-1)].sum()) / RATE

        def run_speechpack() -> float:
            for _ in loader:
                pass
            return total_seconds

        def run_baseline() -> float:
            return sum(batch["seconds"] for batch in baseline.batches(plan_keys))

        best = {"speechpack": 0.0, "omnilingual-style": 0.0}
        for job, fn in (("speechpack", run_speechpack), ("omnilingual-style", run_baseline)):
            fn()  # warm-up: page cache, torch kernels
        for _ in range(args.repeats):
            for job, fn in (("speechpack", run_speechpack), ("omnilingual-style", run_baseline)):
                start = time.perf_counter()
                seconds = fn()
                best[job] = max(best[job], seconds / (time.perf_counter() - start))
        what = "fbank [B, F, 80]" if args.fbank else "waveforms [B, T]"
        print(f"{args.utterances} utterances, {total_seconds:.0f} s of audio, batches of {args.batch_size}, {what}")
        for job, rate in best.items():
            print(f"  {job:18s} {rate:10.0f} audio s/s")
        print(f"  ratio speechpack / omnilingual-style: {best['speechpack'] / best['omnilingual-style']:.1f}x")


if __name__ == "__main__":
    main()
