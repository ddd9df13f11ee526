"""Omnilingual ASR's own data pipeline and speechpack's ``task: asr`` side by side, on one parquet dataset of real
recordings (docs/asr.md, "Side by side with Omnilingual's pipeline").

    python bench/omnilingual_side_by_side.py data --work DIR             # any venv with pyarrow and soundfile
    SEED_VENV/bin/python bench/omnilingual_side_by_side.py seed --work DIR   # omnilingual-asr 0.2.0, fairseq2 0.6
    python bench/omnilingual_side_by_side.py speechpack --work DIR       # speechpack's venv
    python bench/omnilingual_side_by_side.py compare --work DIR          # either (numpy only)

``seed`` needs libsndfile where fairseq2n looks for it (``libsndfile.so.1``; soundfile's wheel ships one, which
``LD_LIBRARY_PATH`` can point at through a symlink of that name).  Each step reads only files the earlier ones wrote,
and imports only its own side's packages, so the seed's pins (torch 2.8) never meet speechpack's venv.

**Data** (``data``): the five LibriVox clips of ``pocketsphinx-testdata`` (16 kHz), as FLAC bytes in
Omnilingual's layout ``data/version=0/corpus=C/split=S/language=L/part-0.parquet`` (LangASRSchema columns), four
partitions of unequal size, plus ``language_distribution_0.tsv`` (corpus, language, hours).  Rows are spans of
0.8-7 s (below 2 s: too short for the recipe), concatenations of 2-3 clips (too long), transcripts of their words
with, in the ``fr`` partitions, a French word whose accented letters the English vocabulary lacks (unknown tokens),
rows of unknown characters only, of text too fast for the audio, one empty and one blank transcript.  Every
``audio_size`` is distinct: the seed's batches carry no key, so rows are matched by length.

**Runs** (the recipe ``dataset:`` block below; one per question, the same on both sides): ``epoch`` (train split,
``sync_mode: UNTIL_LAST``, no betas: the seed reads every row once), ``epoch_drop`` (the same with
``drop_remainder``), ``dev`` (valid split, waveforms normalised), ``static`` (dev, STATIC batches of 4), ``fbank`` (dev, ``use_fbank``), ``specaug`` (dev
rows, ``spec_aug_p: 1``; speechpack masks train batches only, so its run reads the dev pack as train),
``fbank_specaug`` and ``weighted`` (train, ``UNTIL_FIRST``, betas 0.5 and the TSV: the seed streams,
``WEIGHTED_EPOCHS`` epochs' worth of rows are counted).  ``seed`` also records probes: what the seed does with
``remove_unknown`` and ``example_shuffle_window: 0``, and where its SpecAugment masks land.  Each side writes
``<side>.json`` (per run: the batches' rows, lengths, keys by length, groups) and ``<side>.npz`` (per run and
length: the row's ``source_seqs``), which ``compare`` reads.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.recordings import librivox  # noqa: E402  (the five LibriVox clips and their transcripts)

RATE = 16000
#: (corpus, language) -> (train rows, dev rows): unequal hours, so beta weighting changes the shares.
PARTITIONS = {("librivox", "en"): (48, 6), ("librivox", "fr"): (16, 6), ("austen", "en"): (24, 6),
              ("austen", "fr"): (8, 6)}
FRENCH = ("été", "déjà", "garçon", "où", "très", "français")
UNKNOWN_ONLY = "àéèùç"
LONG_TEXT = 90
#: Epochs' worth of rows the weighted (endless) seed stream is read for.
WEIGHTED_EPOCHS = 20

RECIPE = {
    "dataset": {
        "name": "side_by_side", "train_split": "train", "valid_split": "dev",
        "storage_mode": "MIXTURE_PARQUET", "task_mode": "ASR",
        "mixture_parquet_storage_config": {"sync_mode": "UNTIL_LAST"},
        "asr_task_config": {
            "min_audio_len": 32_000, "max_audio_len": 160_000,
            "max_num_elements": 720_000,  # not a multiple of max_audio_len: fairseq2 rounds it down
            "num_seqs_multiple_of": 8, "filter_long_text_threshold": LONG_TEXT,  # remove_unknown: the seed crashes
            "normalize_audio": True, "example_shuffle_window": 1, "batch_shuffle_window": 1,
        },
    },
}
RUNS = {
    "epoch": ("train", {}, {}),
    "epoch_drop": ("train", {"drop_remainder": True}, {}),
    "dev": ("dev", {}, {}),
    "static": ("dev", {"batching_strategy": "STATIC", "batch_size": 4}, {}),
    "fbank": ("dev", {"use_fbank": True}, {}),
    "specaug": ("dev", {"spec_aug_p": 1.0, "spec_aug_freq_mask_param": 60, "spec_aug_time_mask_param": 30}, {}),
    "fbank_specaug": ("dev", {"use_fbank": True, "spec_aug_p": 1.0, "spec_aug_freq_mask_param": 27,
                              "spec_aug_time_mask_param": 30}, {}),
    "weighted": ("train", {}, {"sync_mode": "UNTIL_FIRST", "beta_corpus": 0.5, "beta_language": 0.5}),
}


def recipe(run: str, work: str) -> tuple[str, dict]:
    """(split, recipe) of ``run``: the base recipe with the run's task and storage keys."""
    split, task, storage = RUNS[run]
    config = copy.deepcopy(RECIPE)
    config["dataset"]["asr_task_config"].update(task)
    config["dataset"]["mixture_parquet_storage_config"].update(storage)
    if "beta_corpus" in storage:
        config["dataset"]["mixture_parquet_storage_config"]["dataset_summary_path"] = summary_path(work)
    return split, config


def summary_path(work: str) -> str:
    return os.path.join(work, "language_distribution_0.tsv")


# --- data -------------------------------------------------------------------------------------------------------

def make_rows(seed: int = 0) -> dict:
    """{(corpus, language, split): [(int16 audio, text)]} (module docstring)."""
    clips = [(audio, text.lower()) for audio, text in librivox()]
    rng = np.random.default_rng(seed)
    used: set[int] = set()
    out = {}
    i = 0
    for (corpus, language), counts in PARTITIONS.items():
        for split, count in zip(("train", "dev"), counts):
            rows = []
            for r in range(count):
                i += 1
                audio, text = clips[i % len(clips)]
                kind = r % 12
                if kind == 11:  # 2-3 whole clips: longer than max_audio_len
                    parts = [clips[(i + k) % len(clips)] for k in range(2 + r % 2)]
                    audio = np.concatenate([p[0] for p in parts])
                    words = " ".join(p[1] for p in parts).split()
                    n = len(audio)
                else:
                    n = int(rng.uniform(0.8, min(7.0, len(audio) / RATE)) * RATE)
                    words = text.split()
                while n in used or n > len(audio):
                    n -= 1
                used.add(n)
                start = int(rng.integers(0, len(audio) - n + 1))
                keep = max(1, round(len(words) * n / len(audio)))
                line = " ".join(words[:keep])
                if kind == 3:
                    line = " ".join([text] * 3)  # far more characters than the audio can speak: too fast
                if language == "fr" and kind not in (3, 11):
                    line = f"{line} {FRENCH[r % len(FRENCH)]}"
                if language == "fr" and kind == 5:
                    line = UNKNOWN_ONLY  # unknown characters only
                if language == "fr" and kind == 7:  # LONG_TEXT + 2 characters, 2 of them unknown: too long
                    line = " ".join([text] * 2)[:LONG_TEXT - 2] + " été"
                if (corpus, language, split, r) == ("librivox", "en", "train", 4):
                    line = ""  # empty: the seed filters it, speechpack's build refuses it (--skip-bad)
                if (corpus, language, split, r) == ("austen", "en", "train", 4):
                    line = " "  # blank: the seed trains on it, speechpack's build refuses it
                rows.append((audio[start:start + n], line))
            out[(corpus, language, split)] = rows
    return out


def write_data(work: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import soundfile

    data = os.path.join(work, "data")
    hours: dict = {}
    for (corpus, language, split), rows in make_rows().items():
        folder = os.path.join(data, "version=0", f"corpus={corpus}", f"split={split}", f"language={language}")
        os.makedirs(folder, exist_ok=True)
        table = {"audio_bytes": [], "audio_size": [], "text": []}
        for audio, text in rows:
            buffer = io.BytesIO()
            soundfile.write(buffer, audio, RATE, format="FLAC")
            table["audio_bytes"].append(buffer.getvalue())
            table["audio_size"].append(len(audio))
            table["text"].append(text)
            if split == "train":
                hours[(corpus, language)] = hours.get((corpus, language), 0.0) + len(audio) / RATE / 3600
        pq.write_table(pa.table(table), os.path.join(folder, "part-0.parquet"), row_group_size=16)
    with open(summary_path(work), "w", encoding="utf-8") as fp:
        fp.write("corpus\tlanguage\thours\n")
        fp.writelines(f"{c}\t{l}\t{h:.9f}\n" for (c, l), h in sorted(hours.items()))
    # The vocabulary both sides use: the characters of the English train rows (the fr rows' accents are unknown).
    chars = sorted({ch for (corpus, language, split), rows in make_rows().items() if language == "en"
                    and split == "train" for _, text in rows for ch in text})
    with open(os.path.join(work, "vocab.json"), "w", encoding="utf-8") as fp:
        json.dump(chars, fp)
    return data


# --- shared output ----------------------------------------------------------------------------------------------

class Recorder:
    """Per run: batches (rows, padded length, per-row lengths, corpus, language, valid) and the rows' arrays."""

    def __init__(self):
        self.runs: dict = {}
        self.arrays: dict = {}

    def batch(self, run: str, lengths, source_lens, corpus, language, valid, source, targets, target_lens,
              keep_arrays: bool):
        lengths = [int(x) for x in lengths]
        self.runs.setdefault(run, []).append({
            "rows": len(lengths), "padded": int(source.shape[1]), "lengths": lengths,
            "source_lens": [int(x) for x in source_lens], "corpus": list(corpus), "language": list(language),
            "valid": [bool(v) for v in valid],
            "targets": [[int(t) for t in targets[r][:int(target_lens[r])]] for r in range(len(lengths))]})
        if keep_arrays:
            for r, n in enumerate(lengths):
                if valid[r]:
                    self.arrays[f"{run}/{n}"] = np.asarray(source[r][:int(source_lens[r])], dtype=np.float32)

    def save(self, work: str, side: str, extra: dict):
        with open(os.path.join(work, f"{side}.json"), "w", encoding="utf-8") as fp:
            json.dump({"runs": self.runs, **extra}, fp)
        np.savez(os.path.join(work, f"{side}.npz"), **self.arrays)


def kept_rows(work: str, run: str) -> int:
    """Rows the epoch run kept (speechpack's count): the weighted stream is read for that many per epoch."""
    with open(os.path.join(work, "speechpack.json"), encoding="utf-8") as fp:
        return int(json.load(fp)["kept"][run])


# --- the seed ---------------------------------------------------------------------------------------------------

class CharTokenizer:
    """The comparison's vocabulary for fairseq2 (``vocab.json``, ids as speechpack's built-in char tokenizer
    assigns them: 0 pad, 1 unk, 2 bos, 3 eos, then the characters in code-point order)."""

    def __init__(self, chars: list[str]):
        from types import SimpleNamespace

        self.ids = {c: i + 4 for i, c in enumerate(chars)}
        self.vocab_info = SimpleNamespace(pad_idx=0, unk_idx=1, bos_idx=2, eos_idx=3, size=len(chars) + 4)

    def create_encoder(self, **_):
        import torch

        ids = self.ids
        return lambda text: torch.tensor([ids.get(c, 1) for c in text], dtype=torch.int64)


def run_seed(work: str) -> None:
    import random

    import torch
    from fairseq2.data.parquet import FragmentLoadingConfig, FragmentStreamingConfig, NamedColumns
    from fairseq2.datasets import SyncMode
    from fairseq2.gang import create_fake_gangs
    from omnilingual_asr.datasets.storage.mixture_parquet_storage import (MixtureParquetStorage,
                                                                          MixtureParquetStorageConfig)
    from omnilingual_asr.datasets.tasks.asr_task import AsrTask, AsrTaskConfig
    from omnilingual_asr.datasets.utils.batching import BatchingStrategy

    with open(os.path.join(work, "vocab.json"), encoding="utf-8") as fp:
        tokenizer = CharTokenizer(json.load(fp))
    gangs = create_fake_gangs(torch.device("cpu"))
    random.seed(0)  # the seed's SpecAugment draws from Python's global generator
    out = Recorder()
    for run in RUNS:
        split, config = recipe(run, work)
        storage_keys = dict(config["dataset"]["mixture_parquet_storage_config"])
        storage_keys["sync_mode"] = SyncMode[storage_keys["sync_mode"]]
        storage_config = MixtureParquetStorageConfig(**storage_keys)
        task_keys = dict(config["dataset"]["asr_task_config"])
        task_keys["batching_strategy"] = BatchingStrategy[task_keys.get("batching_strategy", "LENGTH")]
        task_config = AsrTaskConfig(**task_keys)
        storage = MixtureParquetStorage(path=os.path.join(work, "data"), config=storage_config)
        builder = storage.create_raw_data_pipeline(split, gangs)
        builder = AsrTask(task_config).apply_processing_pipeline(builder, gangs, tokenizer=tokenizer,
                                                                 dtype=torch.float32)
        pipeline = builder.and_return()
        budget = None if run != "weighted" else WEIGHTED_EPOCHS * kept_rows(work, "epoch")
        seen = 0
        for batch in pipeline:
            ex = batch.example
            lengths = _list(ex["length"])
            out.batch(run, lengths, _list(batch.source_seq_lens), ex["corpus"], ex["lang"],
                      [True] * len(lengths), batch.source_seqs.float().numpy(), batch.target_seqs.numpy(),
                      _list(batch.target_seq_lens), keep_arrays=run not in ("epoch", "epoch_drop", "weighted"))
            seen += len(lengths)
            if budget is not None and seen >= budget:
                break
        print(f"seed {run}: {len(out.runs.get(run, []))} batches, {seen} rows", flush=True)
    out.save(work, "seed", {"probes": seed_probes(work, tokenizer, gangs)})


def seed_probes(work: str, tokenizer, gangs) -> dict:
    """What the seed does with settings the runs avoid, and where its SpecAugment masks land: the masks drawn on a
    spectrogram of ones ``[201 bins, 300 frames]``, as ``apply_spec_augment`` calls them on a mono waveform."""
    import random

    import torch
    from omnilingual_asr.datasets.storage.mixture_parquet_storage import (MixtureParquetStorage,
                                                                          MixtureParquetStorageConfig)
    from omnilingual_asr.datasets.tasks.asr_task import AsrTask, AsrTaskConfig
    from omnilingual_asr.datasets.utils.audio import apply_freq_mask, apply_time_mask

    probes = {}
    for name, keys in (("remove_unknown", {"remove_unknown": True, "example_shuffle_window": 1}),
                       ("example_shuffle_window_0",
                                                                       {"example_shuffle_window": 0})):
        storage = MixtureParquetStorage(path=os.path.join(work, "data"), config=MixtureParquetStorageConfig())
        try:
            builder = storage.create_raw_data_pipeline("dev", gangs)
            AsrTask(AsrTaskConfig(**keys)).apply_processing_pipeline(builder, gangs, tokenizer=tokenizer,
                                                                     dtype=torch.float32)
            probes[name] = "ok"
        except Exception as err:  # the seed's own error, recorded as it is
            probes[name] = f"{type(err).__name__}: {err}"
    random.seed(1)
    rows, cols, widths = [], [], []
    for _ in range(200):
        spec = torch.ones(201, 300)
        masked = apply_time_mask(apply_freq_mask(spec, freq_mask_param=60), time_mask_param=30)
        rows.append(int((masked == 0).all(dim=1).sum()))
        cols.append(int((masked == 0).all(dim=0).sum()))
        first = apply_freq_mask(torch.ones(201, 300), freq_mask_param=60)
        zeroed = (first == 0).all(dim=0).nonzero().flatten().tolist()
        widths.append((min(zeroed), max(zeroed)) if zeroed else None)
    probes["masks"] = {"bins_zeroed_max": max(rows), "frames_zeroed_mean": float(np.mean(cols)),
                       "frames_zeroed_max": max(cols),
                       "freq_mask_frames_span": [min(w[0] for w in widths if w), max(w[1] for w in widths if w)]}
    return probes


def _list(values) -> list[int]:
    """A tensor or a list of ints as a list of ints."""
    return [int(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]


# --- speechpack -------------------------------------------------------------------------------------------------

def run_speechpack(work: str) -> None:
    from speechpack.loader import build_loader
    from speechpack.loader.asr.args import from_recipe

    packs = {}
    for split in ("train", "dev"):
        out = os.path.join(work, "packs", split)
        if not os.path.isdir(out):
            subprocess.run(["speechpack", "build", "parquet", "--path", os.path.join(work, "data"), "--split", split,
                            "--out", out, "--skip-bad"], check=True)
        packs[split] = out
    vocab = os.path.join(work, "packs", "vocab")
    if not os.path.isdir(vocab):  # a pack of the English train rows: the character vocabulary both sides use
        lines = os.path.join(work, "vocab.jsonl")
        with open(os.path.join(work, "vocab.json"), encoding="utf-8") as fp:
            chars = json.load(fp)
        import soundfile

        wav = os.path.join(work, "vocab.wav")
        soundfile.write(wav, np.zeros(RATE, np.int16), RATE)
        with open(lines, "w", encoding="utf-8") as fp:
            fp.write(json.dumps({"audio_filepath": wav, "text": "".join(chars), "language": "en",
                                 "corpus": "vocab"}) + "\n")
        subprocess.run(["speechpack", "build", "asr-jsonl", "--list", lines, "--out", vocab], check=True)
    out = Recorder()
    kept, reports = {}, {}
    for run in RUNS:
        split, config = recipe(run, work)
        state = "train" if split == "train" or "specaug" in run else "val"
        config["packs"] = [{"path": packs[split]}]
        if state == "train" and split == "dev":  # SpecAugment is train-only in speechpack: the dev rows as train
            config["dataset"]["train_split"] = "dev"
        loader_config = from_recipe(config)
        loader_config["dataset_args"]["tokenizer"] = {"char": vocab}
        loader = build_loader(loader_config, state, seed=0)
        report = loader.report()
        kept[run] = report.items
        reports[run] = {"filter_report": report.filter_report, "items": report.items,
                        "padded": report.padded_items, "dropped": report.dropped_items,
                        "weighting": report.weighting}
        for epoch in range(WEIGHTED_EPOCHS if run == "weighted" else 1):
            loader.set_epoch(epoch)
            for batch in loader:
                out.batch(run, _lengths(loader, batch), batch["source_seq_lens"].tolist(), batch["corpus"], batch["language"],
                      batch["valid"].tolist(), batch["source_seqs"].numpy(), batch["target_seqs"].numpy(),
                      batch["target_seq_lens"].tolist(), keep_arrays=run not in ("epoch", "epoch_drop", "weighted"))
        print(f"speechpack {run}: {len(out.runs.get(run, []))} batches, {report.items} items", flush=True)
    from speechpack.loader import open_pack

    pack = open_pack(packs["train"])
    groups = [f"{c}/{l}" for c, l in zip(pack.attrs["corpus"], pack.attrs["language"])]
    rows = {g: groups.count(g) for g in sorted(set(groups))}
    out.save(work, "speechpack", {"kept": kept, "reports": reports, "group_rows": rows})


def _lengths(loader, batch) -> list[int]:
    """Samples per row (``source_seq_lens`` counts frames with fbank): from the pack, by key."""
    pack = loader.builder.packs[0]
    index = {k: i for i, k in enumerate(pack.keys.tolist())}
    return [int(pack.num_frames[index[k]]) for k in batch["key"]]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("data", "seed", "speechpack", "compare"))
    parser.add_argument("--work", required=True)
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    if args.step == "data":
        print(write_data(args.work))
    elif args.step == "seed":
        run_seed(args.work)
    elif args.step == "speechpack":
        run_speechpack(args.work)
    else:
        compare(args.work)


def _load(work: str, side: str) -> tuple[dict, dict]:
    with open(os.path.join(work, f"{side}.json"), encoding="utf-8") as fp:
        summary = json.load(fp)
    with np.load(os.path.join(work, f"{side}.npz")) as arrays:
        return summary, {k: arrays[k] for k in arrays.files}


def _rows(batches: list) -> dict[int, dict]:
    """Valid rows by length: {length: {targets, corpus, language}} (a length appears once per epoch run)."""
    out = {}
    for b in batches:
        for r, n in enumerate(b["lengths"]):
            if b["valid"][r]:
                out[n] = {"targets": b["targets"][r], "group": (b["corpus"][r], b["language"][r]),
                          "source_len": b["source_lens"][r]}
    return out


def _batching(batches: list) -> str:
    sizes = [(sum(b["valid"]), b["rows"], b["padded"]) for b in batches]
    elements = [rows * padded for _, rows, padded in sizes]
    audio = sum(sum(n for n, v in zip(b["lengths"], b["valid"]) if v) for b in batches)
    return (f"{len(batches)} batches, rows {sorted(r for _, r, _ in sizes)}, valid rows {sum(v for v, _, _ in sizes)}, "
            f"elements max {max(elements)} total {sum(elements)}, padding {1 - audio / sum(elements):.1%}")


def _stft_power(wave: np.ndarray, frames: int) -> np.ndarray:
    """``[frames, 201]`` power of a 400-point Hann STFT, hop 200 (the masks' grid), over the first frames."""
    padded = np.pad(wave, (200, 200 + max(0, 200 * frames - len(wave))))
    window = np.hanning(401)[:-1]
    chunks = np.lib.stride_tricks.sliding_window_view(padded, 400)[::200][:frames] * window
    return np.abs(np.fft.rfft(chunks, axis=1)) ** 2


def _masked(aug: np.ndarray, clean: np.ndarray) -> tuple[float, float]:
    """Fractions of STFT frames and of frequency bins whose energy the augmentation cut by over 90 %."""
    frames = min(len(aug), len(clean)) // 200
    a, c = _stft_power(aug, frames), _stft_power(clean, frames)
    return float((a.sum(axis=1) < 0.1 * c.sum(axis=1)).mean()), float((a.sum(axis=0) < 0.1 * c.sum(axis=0)).mean())


def compare(work: str) -> None:
    seed, seed_arrays = _load(work, "seed")
    ours, our_arrays = _load(work, "speechpack")
    for run in ("epoch", "epoch_drop", "dev", "static"):
        a, b = _rows(seed["runs"].get(run, [])), _rows(ours["runs"].get(run, []))
        print(f"[{run}] kept: seed {len(a)}, speechpack {len(b)}; only seed {sorted(set(a) - set(b))}, "
              f"only speechpack {sorted(set(b) - set(a))}; speechpack's filter report "
              f"{ours['reports'][run]['filter_report']}")
        same = [n for n in a if n in b]
        print(f"[{run}] targets equal for {sum(a[n]['targets'] == b[n]['targets'] for n in same)}/{len(same)}, "
              f"groups equal for {sum(a[n]['group'] == tuple(b[n]['group']) for n in same)}/{len(same)}")
        for side, summary in (("seed", seed), ("speechpack", ours)):
            batches = summary["runs"].get(run, [])
            print(f"[{run}] batching: {side} {_batching(batches) if batches else 'no batch'}")
    for run, what in (("dev", "normalised waveforms"), ("fbank", "fbank")):
        diffs, shapes = [], 0
        for key, x in seed_arrays.items():
            if key.startswith(run + "/") and key in our_arrays:
                y = our_arrays[key]
                shapes += x.shape == y.shape
                if x.shape == y.shape:
                    diffs.append(float(np.abs(x - y).max()))
        print(f"[{run}] {what}: {shapes} rows of equal shape, max |seed - speechpack| {max(diffs):.2e}, "
              f"median {np.median(diffs):.2e}, range of values {min(float(v.min()) for k, v in seed_arrays.items() if k.startswith(run + '/')):.1f}"
              f"..{max(float(v.max()) for k, v in seed_arrays.items() if k.startswith(run + '/')):.1f}")
    for side, arrays in (("seed", seed_arrays), ("speechpack", our_arrays)):
        short, changed, energy, frames, bins, n = [], [], [], [], [], 0
        for key, aug in arrays.items():
            if not key.startswith("specaug/"):
                continue
            clean = arrays["dev/" + key.split("/")[1]]
            n += 1
            short.append(len(clean) - len(aug))
            m = min(len(clean), len(aug))
            changed.append(float((np.abs(aug[:m] - clean[:m]) > 1e-3).mean()))
            energy.append(1 - float(np.square(aug).sum() / np.square(clean).sum()))
            f, k = _masked(aug, clean)
            frames.append(f)
            bins.append(k)
        print(f"[specaug] {side}: {n} rows; samples cut off: {sorted(short)}; samples changed {np.mean(changed):.1%}; "
              f"energy removed {np.mean(energy):.1%}; STFT frames zeroed {np.mean(frames):.1%}, "
              f"frequency bins zeroed {np.mean(bins):.1%}")
        same = [float(np.abs(v - arrays['fbank/' + k.split('/')[1]]).max()) for k, v in arrays.items()
                if k.startswith("fbank_specaug/")]
        zero = [float((v == 0).mean()) for k, v in arrays.items() if k.startswith("fbank_specaug/")]
        print(f"[fbank_specaug] {side}: max |masked - clean| {max(same):.2f}, cells at 0 {np.mean(zero):.1%}")
    for side, summary in (("seed", seed), ("speechpack", ours)):
        counts: dict = {}
        for b in summary["runs"]["weighted"]:
            for r, v in enumerate(b["valid"]):
                if v:
                    g = f"{b['corpus'][r]}/{b['language'][r]}"
                    counts[g] = counts.get(g, 0) + 1
        total = sum(counts.values())
        print(f"[weighted] {side}: {total} rows, shares " +
              ", ".join(f"{g} {c / total:.3f}" for g, c in sorted(counts.items())))
    weights = expected_shares(work)
    print("[weighted] weights (TSV hours, betas 0.5): " + ", ".join(f"{g} {w:.3f}" for g, w in sorted(weights.items())))
    kept = {}
    for b in ours["runs"]["epoch"]:
        for r, v in enumerate(b["valid"]):
            if v:
                g = f"{b['corpus'][r]}/{b['language'][r]}"
                kept[g] = kept.get(g, 0) + 1
    rate = {g: weights[g] * kept.get(g, 0) / n for g, n in ours["group_rows"].items()}
    print("[weighted] weights x fraction kept: " + ", ".join(f"{g} {w / sum(rate.values()):.3f}"
                                                             for g, w in sorted(rate.items())))
    print(f"[seed probes] {json.dumps(seed['probes'])}")


def expected_shares(work: str) -> dict:
    hours = {}
    with open(summary_path(work), encoding="utf-8") as fp:
        next(fp)
        for line in fp:
            corpus, language, h = line.split("\t")
            hours[(corpus, language)] = float(h)
    corpora = {c: sum(h for (cc, _), h in hours.items() if cc == c) for c, _ in hours}
    total = sum(corpora.values())
    cw = {c: (h / total) ** 0.5 for c, h in corpora.items()}
    cw = {c: w / sum(cw.values()) for c, w in cw.items()}
    out = {}
    for (c, l), h in hours.items():
        lw = {ll: (hh / corpora[c]) ** 0.5 for (cc, ll), hh in hours.items() if cc == c}
        out[f"{c}/{l}"] = cw[c] * lw[l] / sum(lw.values())
    return out


if __name__ == "__main__":
    main()
