"""Training-loader throughput, worker memory and time to first batch, against a WeSep-style raw baseline.

    python bench/loader_throughput.py throughput [--lines 640] [--batch-size 16] [--repeats 5] [--profile]
    python bench/loader_throughput.py memory [--samples 1000000] [--big-pack DIR] [--gc-freeze parent|worker]
    python bench/loader_throughput.py first-batch [--samples 1000000] [--big-pack DIR] [--profile]
    python bench/loader_throughput.py all            # the three above, sharing the packs

Warm page cache throughout (every file is read once before timing).  Measured figures and their
reading: ``docs/performance.md``.

**throughput** (one process, num_workers=0, 4 s chunks, state ``train``, collated float32 batches).  The corpus
is built from real recordings installed by Debian packages (``pocketsphinx-testdata``, ``codec2-examples``,
``alsa-utils``): LibriVox clips (16 kHz), codec2 speech (8 kHz) and the ALSA voice prompts (48 kHz) are brought to
16 kHz with soxr, cut into pieces of 8-12 s (``--piece-seconds``) and paired across recordings into 2-speaker
mixtures (SIR in [-5, 5] dB), each mixture and its two sources written as PCM_16 16 kHz WAV.  A WeSep raw list
repeats those mixtures under distinct keys (``--lines``, rounded up to whole batches) and
``packer.adapters.wesep.build_wesep`` packs it.  The jobs deliver the same thing, an epoch of batches ``wav_mix`` and
``wav_target`` of shape ``[2 * batch_size, 1, 64000]`` (float32, one row per target, mixture-major), and are timed
alternately, one epoch per run, after an untimed warm-up run of each:

- speechpack: ``loader.build_loader(config, "train", num_workers=0, seed=0)`` built once, one epoch per run
  (``set_epoch``), every batch consumed;
- (a) WeSep raw: WeSep's per-sample pipeline in plain Python: the list shuffled per epoch, ``json.loads`` of each
  line, the mixture and both source files read whole (``soundfile.read(dtype="float32")``, what
  ``torchaudio.load`` returns) into ``[1, T]`` tensors, the strict same-length check, a shuffle buffer, WeSep's
  ``random_chunk`` (one random 4 s window shared by mixture and targets, re-drawn while the mixture chunk is all
  zero, each chunk cloned) and ``tse_collate_fn`` (rows per target, ``torch.stack`` of the per-row tensors);
- (b) the limit: the windows speechpack delivered in the warm-up epoch (checked to reproduce its first batch bit
  for bit), copied straight from the pack's stream files (``np.load(mmap_mode="r")``) into one preallocated
  float32 batch with one ``np.multiply(int16_view, factor, out=row, casting="unsafe")`` per output row;
- (b') for reference, the same copy into ``wav_mix``/``wav_target`` arrays allocated per batch (``np.empty``)
  while the previous batch is still referenced: what a loader that hands its batches out can reach.

Unit: **audio seconds per second = mixtures delivered x 4 s / wall seconds** (a mixture delivers its 4 s chunk
once, whatever its number of targets; rows/s is twice that here).  Targets: speechpack >= 15x (a) and >= 0.5x (b),
on the best of ``--repeats`` runs (medians printed too).  ``--profile`` adds cProfile's top functions of one
speechpack epoch.

**memory** (num_workers=1, in a fresh interpreter): a synthetic ``sources`` pack of ``--samples`` tiny samples
(0.02 s each) is written directly with ``packer.build.writer.PackWriter`` from in-memory ``PackedSample`` objects (1000
short random arrays quantised once and reused under distinct keys; no WAV files).  One epoch (``--fraction`` of
it) is iterated with ``chunk_len`` 64000 and ``chunk_short_policy: keep`` (rows stay 0.02 s), and the worker's
private memory (Private_Clean + Private_Dirty, ``/proc/<pid>/smaps``) is read at the first batch, after 10, 100
and 1000 batches, at every tenth of the epoch and at the end.  It is split into the pack's mapped files (clean
page-cache pages only the worker maps; the kernel drops them under pressure) and the rest, which the target (at
most 1 MB of growth per 1M samples) is about.  Pages can turn private in the worker because the *parent* wrote its
own copy of a page they shared since the fork, so ``/proc/<pid>/pagemap`` (frame numbers; needs root) is compared
between the first batch and the end to say which process made each page private.  ``--gc-freeze`` is a what-if:
``gc.freeze()`` in the parent before the fork, or in the worker (``worker_init_fn``).

**first-batch** (num_workers=2, in a fresh interpreter): wall time from the ``build_loader()`` call to the first
batch in hand, on the big synthetic pack and on the throughput pack (best and median of ``--repeats``, target
<= 1 s), with ``build_loader`` and ``open_pack`` alone; ``--profile`` adds cProfile's top functions of
``build_loader`` and the first batch on the big pack.

Missing a target prints ``BELOW TARGET`` and still exits 0; only errors exit non-zero.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import glob
import inspect
import io
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import time

import numpy as np
import soundfile
import soxr
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import speechpack.packer.audio as audio_module  # noqa: E402
import speechpack.packer.build.plan as sample_module  # noqa: E402
from speechpack.loader import build_loader, open_pack  # noqa: E402
from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402
from speechpack.packer.build.plan import PackedSample  # noqa: E402
from workdir import bench_workdir  # noqa: E402
from speechpack.packer.build.writer import PackWriter  # noqa: E402
from speechpack.schemas.constants import DEFAULT_SHARD_BYTES, KIND_SOURCES, STREAM_MIX, STREAM_SOURCE, STREAM_TARGET  # noqa: E402

RATE = 16000
CHUNK_SECONDS = 4
CHUNK_LEN = CHUNK_SECONDS * RATE
TARGET_VS_WESEP = 15.0
TARGET_VS_LIMIT = 0.5
TARGET_MB_PER_1M = 1.0
TARGET_FIRST_BATCH_S = 1.0
#: (glob, what); every recording is resampled to 16 kHz and cut into 8-12 s pieces.
SOURCE_GLOBS = (
    ("/usr/share/pocketsphinx/test/data/librivox/*.wav", "16 kHz LibriVox, one reader (concatenated)"),
    ("/usr/share/codec2/wav/*.wav", "8 kHz codec2 speech (files under 8 s concatenated)"),
    ("/usr/share/sounds/alsa/*.wav", "48 kHz ALSA voice prompts, one voice (concatenated, Noise.wav left out)"),
)
PIECE_SECONDS = (8.0, 12.0)  # --piece-seconds
#: Tiny samples of the memory pack: 0.02 s at 16 kHz.
TINY_FRAMES = 320
TINY_DISTINCT = 1000
WESEP_SHUFFLE_SIZE = 2500  # WeSep's shuffle_args.shuffle_size default
WESEP_ZERO_REDRAWS = 3


def _log(text: str) -> None:
    print(text, flush=True)


# ------------------------------------------------------------------------------------------ throughput corpus

def _read_16k(path: str) -> np.ndarray:
    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    mono = np.ascontiguousarray(data[:, 0])
    if rate != RATE:
        mono = soxr.resample(mono, rate, RATE).astype(np.float32)
    return mono


def speaker_streams(min_seconds: float) -> list[tuple[str, np.ndarray]]:
    """One 16 kHz stream per recording of ``min_seconds`` or more; shorter ones of a directory are concatenated."""
    streams = []
    for pattern, _what in SOURCE_GLOBS:
        paths = sorted(p for p in glob.glob(pattern) if os.path.basename(p) != "Noise.wav")
        if not paths:
            raise SystemExit(f"no recordings match {pattern}; install pocketsphinx-testdata, codec2-examples and "
                             f"alsa-utils (apt-get install -y --no-install-recommends ...)")
        short = []
        for path in paths:
            audio = _read_16k(path)
            if len(audio) >= min_seconds * RATE:
                streams.append((os.path.splitext(os.path.basename(path))[0], audio))
            else:
                short.append(audio)
        if short:
            name = os.path.basename(os.path.dirname(pattern))
            streams.append((f"{name}-short", np.concatenate(short)))
    return streams


def build_corpus(workdir: str, lines: int, seed: int, piece_seconds=PIECE_SECONDS) -> tuple[str, dict]:
    """Write unique 2-speaker mixtures as PCM_16 WAV and a WeSep raw list of ``lines`` lines reusing them."""
    rng = np.random.default_rng(seed)
    streams = speaker_streams(piece_seconds[0])
    pieces = []  # (speaker, audio)
    for name, audio in streams:
        start = 0
        while True:
            length = int(rng.uniform(*piece_seconds) * RATE)
            if start + length > len(audio):
                break
            pieces.append((name, audio[start:start + length]))
            start += length
    if len({speaker for speaker, _ in pieces}) < 2:
        raise SystemExit("need pieces from at least two recordings")
    wav_dir = os.path.join(workdir, "wav")
    os.makedirs(wav_dir)
    mixtures = []  # (mix, s1, s2 paths), (spk1, spk2), seconds
    for i, (spk1, a) in enumerate(pieces):
        for step in (1, len(pieces) // 2):  # two partners per piece, from other recordings
            j = (i + step) % len(pieces)
            while pieces[j][0] == spk1:
                j = (j + 1) % len(pieces)
            spk2, b = pieces[j]
            n = min(len(a), len(b))
            s1, s2 = a[:n], b[len(b) - n:]
            gain = 10 ** (rng.uniform(-5, 5) / 20)
            s1, s2 = s1 / (1 + gain), s2 * (gain / (1 + gain))
            peak = max(float(np.abs(s1 + s2).max()), 1e-9)
            if peak > 0.99:
                s1, s2 = s1 * (0.99 / peak), s2 * (0.99 / peak)
            stem = os.path.join(wav_dir, f"m{len(mixtures):03d}")
            files = []
            for role, signal in (("mix", s1 + s2), ("s1", s1), ("s2", s2)):
                path = f"{stem}-{role}.wav"
                soundfile.write(path, np.clip(signal, -1.0, 32767 / 32768), RATE, subtype="PCM_16")
                files.append(path)
            mixtures.append((files, (spk1, spk2), n / RATE))
    list_path = os.path.join(workdir, "raw.list")
    seconds = 0.0
    with open(list_path, "w", encoding="utf-8") as fp:
        for k in range(lines):
            (mix, p1, p2), (spk1, spk2), duration = mixtures[k % len(mixtures)]
            fp.write(json.dumps({"key": f"mix-{k:06d}", "spk": [spk1, spk2], "mix": {"default": [mix]},
                                 "src": {spk1: [p1], spk2: [p2]}}) + "\n")
            seconds += duration
    return list_path, {
        "recordings": sum(1 for p, _ in SOURCE_GLOBS for f in glob.glob(p) if os.path.basename(f) != "Noise.wav"),
        "streams": len(streams),
        "pieces": len(pieces), "unique_mixtures": len(mixtures), "lines": lines, "hours": seconds / 3600,
        "min_s": min(m[2] for m in mixtures), "max_s": max(m[2] for m in mixtures),
        "wav_bytes": sum(os.path.getsize(p) for p in glob.glob(os.path.join(wav_dir, "*.wav"))),
    }


def warm_files(paths) -> int:
    total = 0
    for path in sorted(set(paths)):
        with open(path, "rb") as fp:
            while block := fp.read(1 << 22):
                total += len(block)
    return total


def pack_files(pack: str) -> list[str]:
    return [p for p in glob.glob(os.path.join(pack, "**", "*"), recursive=True) if os.path.isfile(p)]


def loader_config(pack: str, batch_size: int, **extra) -> dict:
    return {"packs": [{"path": pack}],
            "dataset_args": {"chunk_len": CHUNK_LEN, "batch_size": batch_size, "shuffle": True,
                             "shuffle_args": {"shuffle_size": WESEP_SHUFFLE_SIZE}, **extra}}


# ------------------------------------------------------------------------------------------ the three jobs

def speechpack_epoch(loader, epoch: int, record: list | None = None) -> int:
    """One epoch of the speechpack loader; returns the mixtures delivered."""
    loader.set_epoch(epoch)
    mixtures = 0
    for batch in loader:
        keys = batch["key"]  # rows are mixture-major: a mixture is a run of rows with its key
        mixtures += sum(1 for i, key in enumerate(keys) if i == 0 or key != keys[i - 1])
        if record is not None:
            if set(batch["num_speaker"]) != {2}:
                raise SystemExit("the benchmark corpus has two speakers per mixture")
            # the windows only (and the first batch whole, to check the limit job against it)
            record.append({"key": batch["key"], "chunk_ratio": batch["chunk_ratio"],
                           "audio": None if record else torch.cat([batch["wav_mix"], batch["wav_target"]])})
    return mixtures


def _load(path: str) -> tuple[torch.Tensor, int]:
    """What WeSep's ``torchaudio.load`` returns: float32 ``[C, T]`` in [-1, 1), and the rate."""
    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.T)), rate


def _wesep_parse_raw(lines: list[str], order: list[int]):
    """WeSep ``parse_raw`` (offline mixtures, strict policy)."""
    for index in order:
        obj = json.loads(lines[index])
        mixes = [_load(p) for p in obj["mix"]["default"]]
        wav_mix = mixes[0][0] if len(mixes) == 1 else torch.cat([m[0] for m in mixes], dim=0)
        sample_rate = mixes[0][1]
        sample = {"key": obj["key"], "num_speaker": len(obj["spk"]), "wav_mix": wav_mix, "sample_rate": sample_rate}
        for i, spk in enumerate(obj["spk"], start=1):
            wav, rate = _load(obj["src"][spk][0])
            if rate != sample_rate or wav.shape[-1] != wav_mix.shape[-1]:
                raise RuntimeError(f"{obj['key']}: source {spk} does not match the mixture")
            sample[f"spk{i}"] = spk
            sample[f"wav_spk{i}"] = wav[:1]
        yield sample


def _wesep_shuffle(data, size: int):
    buf = []
    for sample in data:
        buf.append(sample)
        if len(buf) >= size:
            random.shuffle(buf)
            yield from buf
            buf = []
    random.shuffle(buf)
    yield from buf


def _wesep_resample(data, rate: int):
    for sample in data:
        if sample["sample_rate"] != rate:
            raise RuntimeError("the benchmark corpus is at the training rate; WeSep would resample here")
        yield sample


def _wesep_random_chunk(data, chunk_len: int):
    """WeSep ``random_chunk``: one window shared by every wav key, re-drawn while the mixture chunk is silent."""
    for sample in data:
        wav_keys = [key for key in sample if "wav" in key]
        total = sample["wav_mix"].shape[-1]
        if total >= chunk_len:
            start = random.randint(0, total - chunk_len)
            for _ in range(WESEP_ZERO_REDRAWS):
                if torch.any(sample["wav_mix"][:, start:start + chunk_len]):
                    break
                start = random.randint(0, total - chunk_len)
            for key in wav_keys:
                sample[key] = sample[key][:, start:start + chunk_len].clone()
            sample["chunk_ratio"] = {"start_ratio": start / total, "end_ratio": (start + chunk_len) / total,
                                     "orig_len": total, "chunk_len": chunk_len}
        else:
            for key in wav_keys:
                sample[key] = torch.nn.functional.pad(sample[key], (0, chunk_len - total))
            sample["chunk_ratio"] = {"start_ratio": 0.0, "end_ratio": chunk_len / total, "orig_len": total,
                                     "chunk_len": chunk_len}
        yield sample


def _wesep_batch(data, batch_size: int):
    buf = []
    for sample in data:
        buf.append(sample)
        if len(buf) >= batch_size:
            yield buf
            buf = []
    if buf:
        yield buf


def _align_max(rows: list[torch.Tensor]) -> list[torch.Tensor]:
    target = max(row.shape[-1] for row in rows)
    return [row if row.shape[-1] == target else
            torch.cat([row, row.new_zeros(*row.shape[:-1], target - row.shape[-1])], dim=-1) for row in rows]


def wesep_collate(batch: list[dict]) -> dict:
    """WeSep ``tse_collate_fn`` for the audio fields: one row per target, mixture-major, aligned, stacked."""
    wav_mix, wav_target, spk, key, num_speaker, chunk_ratio = [], [], [], [], [], []
    for sample in batch:
        for i in range(sample["num_speaker"]):
            wav_mix.append(sample["wav_mix"])
            wav_target.append(sample[f"wav_spk{i + 1}"])
            spk.append(sample[f"spk{i + 1}"])
            key.append(sample["key"])
            num_speaker.append(sample["num_speaker"])
            chunk_ratio.append(sample["chunk_ratio"])
    return {
        "wav_mix": torch.stack(_align_max(wav_mix)),
        "wav_target": torch.stack(_align_max(wav_target)),
        "spk": spk, "key": key, "num_speaker": num_speaker,
        "speaker_label": torch.full((len(spk),), -100, dtype=torch.long),
        "chunk_ratio": chunk_ratio,
    }


def wesep_epoch(lines: list[str], batch_size: int, epoch: int) -> int:
    """(a) One epoch of WeSep's raw pipeline in this process; returns the mixtures delivered."""
    order = list(range(len(lines)))
    random.Random(epoch).shuffle(order)  # DataList / DistributedSampler
    random.seed(epoch)
    data = _wesep_parse_raw(lines, order)
    data = _wesep_shuffle(data, WESEP_SHUFFLE_SIZE)
    data = _wesep_resample(data, RATE)
    data = _wesep_random_chunk(data, CHUNK_LEN)
    mixtures = 0
    for group in _wesep_batch(data, batch_size):
        batch = wesep_collate(group)
        mixtures += len(group)
        assert batch["wav_mix"].shape == (2 * len(group), 1, CHUNK_LEN)
    return mixtures


class Limit:
    """(b) The copy limit: the recorded windows, int16 straight from the mapped stream files into float32."""

    def __init__(self, pack_path: str, recorded: list[dict], batch_size: int):
        pack = open_pack(pack_path)
        self.arrays = {}
        index_of = {str(k): i for i, k in enumerate(pack.keys)}
        self.batches = []  # per batch: list of (array, start element, factor) per row, wav_mix rows then targets
        for batch in recorded:
            mix_rows, target_rows = [], []
            keys, ratios = batch["key"], batch["chunk_ratio"]
            for row in range(0, len(keys), 2):
                sample = index_of[keys[row]]
                start = int(round(ratios[row]["start_ratio"] * ratios[row]["orig_len"]))
                mix_seg = pack.segments_of(STREAM_MIX, sample)[0]
                mix = self._source(pack, STREAM_MIX, mix_seg, start)
                mix_rows += [mix, mix]
                target_rows += [self._source(pack, STREAM_TARGET, j, start)
                                for j in pack.segments_of(STREAM_TARGET, sample)]
            self.batches.append(mix_rows + target_rows)
        rows = 2 * batch_size
        self.out = np.zeros((2, rows, 1, CHUNK_LEN), dtype=np.float32)

    def _source(self, pack, stream: str, segment: int, start: int) -> tuple[np.ndarray, int, np.float32]:
        table = pack.streams[stream]
        shard = int(table.shard[segment])
        if (shard, stream) not in self.arrays:
            path = os.path.join(pack.path, pack.manifest.shards[shard].directory, f"{stream}.npy")
            self.arrays[(shard, stream)] = np.load(path, mmap_mode="r")
        if int(table.channels[segment]) != 1:
            raise SystemExit("the limit job expects mono segments")
        factor = np.float32(table.scale[segment] / 32768.0)
        return self.arrays[(shard, stream)], int(table.offset[segment]) + start, factor

    def epoch(self, fresh: bool = False) -> int:
        """Copy every recorded batch into one preallocated output (the limit).

        With ``fresh``, allocate ``wav_mix`` and ``wav_target`` per batch (``np.empty``) while the previous batch
        is still referenced, as a loader that hands its batches out must (and as the consumer loop of
        ``speechpack_epoch`` does): the destination is then cold memory, not a buffer the cache already holds.
        """
        mixtures = 0
        out = self.out
        held = None
        for rows in self.batches:
            if fresh:
                out = tuple(np.empty(self.out.shape[1:], dtype=np.float32) for _ in range(2))
            half = len(rows) // 2
            for r, (array, start, factor) in enumerate(rows):
                dest = out[0 if r < half else 1][r % half, 0]
                np.multiply(array[start:start + CHUNK_LEN], factor, out=dest, casting="unsafe")
            held = out  # noqa: F841 (the consumer's reference to the last batch)
            mixtures += len(rows) // 4
        return mixtures

    def first_batch(self) -> np.ndarray:
        rows = self.batches[0]
        out = np.zeros((len(rows), CHUNK_LEN), dtype=np.float32)
        for r, (array, start, factor) in enumerate(rows):
            np.multiply(array[start:start + CHUNK_LEN], factor, out=out[r], casting="unsafe")
        return out


def cmd_throughput(args, workdir: str) -> str:
    lines = -(-args.lines // args.batch_size) * args.batch_size  # whole batches: no tail padding to count
    started = time.perf_counter()
    list_path, corpus = build_corpus(workdir, lines, args.seed, tuple(args.piece_seconds))
    corpus_s = time.perf_counter() - started
    pack_path = os.path.join(workdir, "pack")
    started = time.perf_counter()
    summary = build_wesep(list_path, BuildOptions(out=pack_path, workers=args.pack_workers, progress=False))
    pack_s = time.perf_counter() - started
    pack_bytes = sum(os.path.getsize(p) for p in pack_files(pack_path))
    _log(f"corpus: {corpus['lines']} lines ({corpus['hours'] * 60:.1f} min of mixtures, "
         f"{corpus['min_s']:.1f}-{corpus['max_s']:.1f} s each) reusing {corpus['unique_mixtures']} unique 16 kHz "
         f"2-speaker mixtures cut from {corpus['streams']} streams of {corpus['recordings']} real recordings; "
         f"{corpus['wav_bytes'] / 1e6:.1f} MB of WAV, built in {corpus_s:.1f} s")
    _log(f"pack: {summary.manifest.totals['samples']} samples, {pack_bytes / 1e6:.0f} MB, packed in {pack_s:.1f} s "
         f"(workers={args.pack_workers})")
    _log(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, numpy {np.__version__}, "
         f"torch {torch.__version__}, soundfile {soundfile.__version__} "
         f"(libsndfile {soundfile.__libsndfile_version__})")

    with open(list_path, encoding="utf-8") as fp:
        list_lines = [text for text in fp.read().splitlines() if text.strip()]
    wav_paths = glob.glob(os.path.join(workdir, "wav", "*.wav"))
    warm_files(wav_paths + pack_files(pack_path))

    config = loader_config(pack_path, args.batch_size)
    loader = build_loader(config, "train", num_workers=0, seed=0)
    recorded: list[dict] = []
    expected = speechpack_epoch(loader, 0, record=recorded)  # warm-up; its windows feed the limit job
    limit = Limit(pack_path, recorded, args.batch_size)
    got = recorded[0]["audio"].reshape(-1, CHUNK_LEN).numpy()
    if not np.array_equal(got, limit.first_batch()):
        raise SystemExit("the limit job does not reproduce speechpack's first batch bit for bit")
    if wesep_epoch(list_lines, args.batch_size, 0) != expected or limit.epoch() != expected:
        raise SystemExit("the jobs deliver different numbers of mixtures")
    limit.epoch(fresh=True)
    del recorded, got

    jobs = {
        "speechpack": lambda e: speechpack_epoch(loader, e),
        "(a) WeSep raw (soundfile)": lambda e: wesep_epoch(list_lines, args.batch_size, e),
        "(b) limit (int16 mmap -> f32)": lambda e: limit.epoch(),
        "(b') limit, fresh arrays per batch": lambda e: limit.epoch(fresh=True),
    }
    seconds = {name: [] for name in jobs}
    for repeat in range(args.repeats):
        names = list(jobs) if repeat % 2 == 0 else list(reversed(jobs))
        for name in names:
            started = time.perf_counter()
            mixtures = jobs[name](repeat + 1)
            seconds[name].append(time.perf_counter() - started)
            if mixtures != expected:
                raise SystemExit(f"{name} delivered {mixtures} mixtures, expected {expected}")
    audio = expected * CHUNK_SECONDS
    _log(f"\none epoch = {expected} mixtures x {CHUNK_SECONDS} s = {audio} audio-s, "
         f"batches of {args.batch_size} mixtures = {2 * args.batch_size} rows x 1 x {CHUNK_LEN} float32 "
         f"(wav_mix and wav_target); {args.repeats} timed epochs per job, alternating, after one warm-up each\n")
    _log(f"  {'job':<36} {'best s':>8} {'median s':>9} {'best audio-s/s':>15} {'median audio-s/s':>17}")
    best = {}
    for name, times in seconds.items():
        best[name] = audio / min(times)
        _log(f"  {name:<36} {min(times):8.4f} {statistics.median(times):9.4f} {best[name]:15,.0f} "
             f"{audio / statistics.median(times):17,.0f}")
    sp, base, lim = (seconds[n] for n in ("speechpack", "(a) WeSep raw (soundfile)", "(b) limit (int16 mmap -> f32)"))
    ratio_a = min(base) / min(sp)
    ratio_b = min(lim) / min(sp)
    ratio_b2 = min(seconds["(b') limit, fresh arrays per batch"]) / min(sp)
    _log("")
    median_a = statistics.median(base) / statistics.median(sp)
    _log(f"  speechpack / (a) WeSep raw: {ratio_a:6.1f}x  (median {median_a:.1f}x)"
         f"   target >= {TARGET_VS_WESEP:g}x: {'PASS' if ratio_a >= TARGET_VS_WESEP else 'BELOW TARGET'}")
    _log(f"  speechpack / (b) limit:     {ratio_b:6.2f}   (median {statistics.median(lim) / statistics.median(sp):.2f})"
         f"   target >= {TARGET_VS_LIMIT:g}: {'PASS' if ratio_b >= TARGET_VS_LIMIT else 'BELOW TARGET'}")
    _log(f"  speechpack / (b') limit with fresh output arrays per batch, previous batch held: {ratio_b2:.2f} "
         f"(for reference: what a loader that hands batches out can reach)")
    _log(f"  realtime factor of speechpack in one process: {best['speechpack']:,.0f}x")

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        speechpack_epoch(loader, args.repeats + 1)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
        _log("\ncProfile of one speechpack epoch (num_workers=0), top 25 by own time:")
        _log(text.getvalue())
    return pack_path


# ------------------------------------------------------------------------------------------ memory

def _stored(data: np.ndarray):
    """What a PackedSample holds per segment, for either writer API (``to_segment`` before the shard-plan writer,
    ``to_stored`` after it)."""
    if hasattr(audio_module, "to_segment"):
        return audio_module.to_segment(data)
    return audio_module.to_stored(audio_module.Audio(data, RATE))


def _tiny_writer(out: str, samples: int, shard_bytes: int = DEFAULT_SHARD_BYTES, digests: bool = False):
    """A PackWriter for ``samples`` tiny samples: planned up front where the writer takes shard plans; ``digests``:
    with block digests (format 1.4: read from a store by ranges)."""
    if "shard_plans" not in inspect.signature(PackWriter).parameters:
        return PackWriter(out, KIND_SOURCES, RATE, shard_bytes)
    from speechpack.packer.build.plan import plan_shards

    plans = [sample_module.SamplePlan(line=i + 1, key=_tiny_key(i), num_frames=TINY_FRAMES,
                                      elements={STREAM_SOURCE: TINY_FRAMES}) for i in range(samples)]
    from speechpack.packer.build.encoding import Encoding

    shards = plan_shards([2 * TINY_FRAMES] * samples, shard_bytes)
    return PackWriter(out, KIND_SOURCES, RATE, [plans[r.start:r.stop] for r in shards],
                      encoding=Encoding.of("pcm16", RATE, digests=digests))


def _tiny_key(i: int) -> str:
    return f"utt-{i:08d}"


def build_tiny_pack(out: str, samples: int, seed: int, shard_bytes: int = DEFAULT_SHARD_BYTES,
                    digests: bool = False) -> float:
    """A ``sources`` pack of ``samples`` 0.02 s samples, written directly with PackWriter (no WAV files), in shards
    of ``shard_bytes``; each sample one of ``TINY_DISTINCT`` segments drawn at random, so that no two shards hold
    the same bytes (a cache would share their entries, as no real corpus lets it)."""
    rng = np.random.default_rng(seed)
    segments = [_stored((rng.standard_normal((1, TINY_FRAMES)) * 0.1).astype(np.float32))
                for _ in range(TINY_DISTINCT)]
    drawn = rng.integers(0, TINY_DISTINCT, samples).tolist()
    started = time.perf_counter()
    os.makedirs(out)
    with _tiny_writer(out, samples, shard_bytes, digests) as writer:
        for i in range(samples):
            writer.add(PackedSample(key=_tiny_key(i), speakers=(f"spk{i % 997:03d}",), line=i + 1,
                                    orig_sample_rate=RATE, num_frames=TINY_FRAMES, provenance={},
                                    streams={STREAM_SOURCE: [segments[drawn[i]]]}))
        writer.finish(provenance={"input": {"path": "synthetic", "sha256": "0" * 64}, "tool": "speechpack",
                                  "tool_version": "bench", "command": "bench/loader_throughput.py memory",
                                  "options": {"samples": samples}}, skipped=[])
    return time.perf_counter() - started


def ensure_big_pack(args, workdir: str) -> str:
    if args.big_pack:
        if not os.path.isfile(os.path.join(args.big_pack, "dataset.json")):
            out = args.big_pack
            seconds = build_tiny_pack(out, args.samples, args.seed)
            _log(f"big pack: wrote {args.samples:,} samples to {out} in {seconds:.1f} s (kept)")
        else:
            _log(f"big pack: reusing {args.big_pack}")
        return args.big_pack
    out = os.path.join(workdir, "big-pack")
    if not os.path.isdir(out):
        seconds = build_tiny_pack(out, args.samples, args.seed)
        size = sum(os.path.getsize(p) for p in pack_files(out))
        _log(f"big pack: {args.samples:,} samples of {TINY_FRAMES / RATE:.2f} s ({TINY_DISTINCT} distinct segments "
             f"under distinct keys), {size / 1e6:.0f} MB, written with PackWriter in {seconds:.1f} s")
    return out


def _children(pid: int) -> list[int]:
    kids = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        with open(task) as fp:
            kids += [int(x) for x in fp.read().split()]
    return sorted(set(kids))


def private_kb(pid: int, pack_dir: str) -> dict[str, int]:
    """Private_Clean + Private_Dirty of ``pid`` in kB: total, the pack's mapped files, and the rest."""
    pack_dir = os.path.realpath(pack_dir) + os.sep
    totals = {"total": 0, "pack_files": 0, "rest": 0, "rest_dirty": 0, "anonymous": 0}
    in_pack = False
    with open(f"/proc/{pid}/smaps") as fp:
        for line in fp:
            head = line.split(None, 1)[0]
            if not head.endswith(":"):  # a mapping header: "start-end perms offset dev inode [path]"
                parts = line.split(None, 5)
                in_pack = len(parts) == 6 and parts[5].strip().startswith(pack_dir)
                continue
            if head in ("Private_Clean:", "Private_Dirty:"):
                kb = int(line.split()[1])
                totals["total"] += kb
                totals["pack_files" if in_pack else "rest"] += kb
                if head == "Private_Dirty:" and not in_pack:
                    totals["rest_dirty"] += kb
            elif head == "Anonymous:":
                totals["anonymous"] += int(line.split()[1])
    return totals


def _run_child(command: str, args, **paths: str) -> None:
    """Run a measurement in a fresh interpreter, so that what this process did before (building packs, the
    throughput jobs) leaves nothing in the heap the DataLoader workers are forked from."""
    argv = [sys.executable, os.path.abspath(__file__), command, "--batch-size", str(args.batch_size),
            "--repeats", str(args.repeats), "--memory-batch-size", str(args.memory_batch_size),
            "--fraction", str(args.fraction), "--samples", str(args.samples)]
    for name, value in paths.items():
        argv += [f"--{name.replace('_', '-')}", value]
    if args.profile:
        argv.append("--profile")
    if args.gc_freeze:
        argv += ["--gc-freeze", args.gc_freeze]
    sys.stdout.flush()
    subprocess.run(argv, check=True)


_PAGE = os.sysconf("SC_PAGE_SIZE")
_PFN_MASK = (1 << 55) - 1


def page_snapshot(pid: int, pack_dir: str) -> dict[str, np.ndarray] | None:
    """Every present page of ``pid`` outside the pack's stream files: virtual page number, frame number, whether
    it is mapped by this process only (``/proc/<pid>/pagemap`` bit 56) and whether it is anonymous.

    Comparing two snapshots tells who made a page private: a page that was shared and is now private with the
    same frame was copied by the *other* process (the parent wrote its copy); a new frame means this process
    wrote it (copy-on-write) or allocated it.  Frame numbers need root; returns None without them.
    """
    pack_dir = os.path.realpath(pack_dir) + os.sep
    vpages, entries, anon = [], [], []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pagemap:
        for line in maps:
            parts = line.split(None, 5)
            path = parts[5].strip() if len(parts) == 6 else ""
            if path.startswith(pack_dir) or parts[1].startswith("---") or path == "[vsyscall]":
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if end - start > 64 << 30:
                continue  # address-space reservations, never touched
            pagemap.seek(start // _PAGE * 8)
            raw = np.frombuffer(pagemap.read((end - start) // _PAGE * 8), dtype=np.uint64)
            present = (raw >> np.uint64(63)) & np.uint64(1) == 1
            vpages.append(np.nonzero(present)[0].astype(np.int64) + start // _PAGE)
            entries.append(raw[present])
            anon.append(np.full(int(present.sum()), not path or path.startswith("["), dtype=bool))
    entry = np.concatenate(entries)
    pfn = entry & np.uint64(_PFN_MASK)
    if len(pfn) and not pfn.any():
        return None
    order = np.argsort(np.concatenate(vpages), kind="stable")
    return {"vpage": np.concatenate(vpages)[order], "pfn": pfn[order],
            "exclusive": ((entry >> np.uint64(56)) & np.uint64(1) == 1)[order], "anon": np.concatenate(anon)[order]}


def attribute_growth(first: dict, last: dict) -> dict[str, float]:
    """MB of pages private at the end but not at first, split by who caused it; and MB released."""
    mb = _PAGE / 2**20
    common, i_first, i_last = np.intersect1d(first["vpage"], last["vpage"], assume_unique=True, return_indices=True)
    was_private = np.zeros(len(last["vpage"]), dtype=bool)
    same_frame = np.zeros(len(last["vpage"]), dtype=bool)
    was_private[i_last] = first["exclusive"][i_first]
    same_frame[i_last] = first["pfn"][i_first] == last["pfn"][i_last]
    newly = last["exclusive"] & ~was_private
    by_parent = newly & same_frame
    by_worker = newly & ~same_frame
    still = np.zeros(len(first["vpage"]), dtype=bool)
    still[i_first] = last["exclusive"][i_last]
    released = first["exclusive"] & ~still
    return {"worker_anon": float((by_worker & last["anon"]).sum() * mb),
            "worker_file": float((by_worker & ~last["anon"]).sum() * mb),
            "parent": float(by_parent.sum() * mb), "released": float(released.sum() * mb)}


def _freeze_gc(_worker_id: int) -> None:
    gc.freeze()  # what-if: the worker's collector never walks (and so never writes to) the objects it inherited


def cmd_memory(args, big_pack: str) -> None:
    """The worker's private memory over an epoch of the big pack (run in a fresh interpreter: ``memory-child``)."""
    warm_files(pack_files(big_pack))
    batch_size = args.memory_batch_size
    config = loader_config(big_pack, batch_size, chunk_short_policy="keep")
    loader = build_loader(config, "train", num_workers=1, seed=0)
    total_batches = len(loader)
    stop = max(1, int(total_batches * args.fraction))
    marks = {m for m in (10, 100, 1000) if m < stop} | {max(1, int(stop * k / 10)) for k in range(1, 11)}
    before = set(_children(os.getpid()))
    if args.gc_freeze == "parent":
        gc.collect()
        gc.freeze()
    elif args.gc_freeze == "worker":
        loader.dataloader.worker_init_fn = _freeze_gc
    iterator = iter(loader)
    next(iterator)
    workers = sorted(set(_children(os.getpid())) - before)
    if len(workers) != 1:
        raise SystemExit(f"expected one new child process (the DataLoader worker), found {workers}")
    worker = workers[0]
    first = private_kb(worker, big_pack)
    first_pages = page_snapshot(worker, big_pack)
    tenth_mark, tenth_pages = max(1, int(stop / 10)), None
    curve = [(1, first)]
    started = time.perf_counter()
    done = 1
    for _batch in iterator:
        done += 1
        if done in marks:
            curve.append((done, private_kb(worker, big_pack)))
        if done == tenth_mark:
            tenth_pages = page_snapshot(worker, big_pack)
        if done >= stop:
            break
    seconds = time.perf_counter() - started
    last_pages = page_snapshot(worker, big_pack)
    if curve[-1][0] != done:
        curve.append((done, private_kb(worker, big_pack)))
    iterator.close()
    _shutdown(loader)
    last = curve[-1][1]
    samples = (done - 1) * batch_size
    freeze = f", gc.freeze() in the {args.gc_freeze}" if args.gc_freeze else ""
    _log(f"\nworker memory (num_workers=1, batch_size {batch_size}, chunk_len {CHUNK_LEN} with chunk_short_policy "
         f"keep{freeze}, pid {worker}): {done:,} of {total_batches:,} batches ({done * batch_size:,} samples) in "
         f"{seconds:.1f} s after the first")
    _log(f"  {'batches':>9} {'samples':>11} {'private':>9} {'pack files':>11} {'rest':>8} {'rest dirty':>11} "
         f"{'rest clean':>11} {'anonymous':>10}   (MB; private = Private_Clean + Private_Dirty)")
    for batches, kb in curve:
        _log(f"  {batches:9,} {batches * batch_size:11,} {kb['total'] / 1024:9.2f} {kb['pack_files'] / 1024:11.2f} "
             f"{kb['rest'] / 1024:8.2f} {kb['rest_dirty'] / 1024:11.2f} {(kb['rest'] - kb['rest_dirty']) / 1024:11.2f} "
             f"{kb['anonymous'] / 1024:10.2f}")

    def per_million(key: str, a: dict, b: dict, n: int) -> tuple[float, float]:
        grown = (b[key] - a[key]) / 1024
        return grown, grown * 1e6 / n

    scale = "" if done * batch_size >= 1_000_000 else ", per 1M extrapolated linearly"
    _log(f"\n  growth from the first batch to the end ({samples:,} samples{scale}):")
    grown, per_m = per_million("rest", first, last, samples)
    _log(f"    private memory without the pack's mapped stream files: {grown:+.2f} MB = {per_m:+.2f} MB per 1M samples"
         f"   target <= {TARGET_MB_PER_1M:g} MB: {'PASS' if per_m <= TARGET_MB_PER_1M else 'BELOW TARGET'}")
    for key, what in (("rest_dirty", "  of which Private_Dirty (heap, copy-on-write breaks)"),
                      ("anonymous", "anonymous memory (new allocations only, shared or not)"),
                      ("total", "all private memory, stream file pages included")):
        grown, per_m = per_million(key, first, last, samples)
        _log(f"    {what:<55}{grown:+.2f} MB = {per_m:+.2f} MB per 1M samples")
    if first_pages is None or last_pages is None:
        _log("    (who made pages private: needs page frame numbers in /proc/<pid>/pagemap, i.e. root)")
    else:
        who = attribute_growth(first_pages, last_pages)
        worker_net = who["worker_anon"] + who["worker_file"] - who["released"]
        _log("  which process made those pages private (from /proc/<pid>/pagemap frame numbers):")
        _log(f"    the worker, new or copied-on-write anonymous pages:  {who['worker_anon']:+.2f} MB")
        _log(f"    the worker, first touch of file pages (library code): {who['worker_file']:+.2f} MB")
        _log(f"    the worker, pages released:                           {-who['released']:+.2f} MB")
        _log(f"    the parent, writing its copy of a shared page:        {who['parent']:+.2f} MB")
        _log(f"    worker-caused net growth: {worker_net:+.2f} MB = {worker_net * 1e6 / samples:+.2f} MB per 1M samples"
             f"   target <= {TARGET_MB_PER_1M:g} MB: "
             f"{'PASS' if worker_net * 1e6 / samples <= TARGET_MB_PER_1M else 'BELOW TARGET'}")
    tenth = next(((b, kb) for b, kb in curve if b == tenth_mark), None)
    if tenth is not None and tenth_mark < done:
        n = (done - tenth_mark) * batch_size
        grown, per_m = per_million("rest", tenth[1], last, n)
        _log(f"  after warm-up, from batch {tenth_mark:,} (a tenth of the run) to the end ({n:,} samples):")
        _log(f"    private memory without the pack's mapped stream files: {grown:+.2f} MB = {per_m:+.2f} MB per 1M "
             f"samples   target <= {TARGET_MB_PER_1M:g} MB: {'PASS' if per_m <= TARGET_MB_PER_1M else 'BELOW TARGET'}")
        if tenth_pages is not None and last_pages is not None:
            who = attribute_growth(tenth_pages, last_pages)
            worker_net = who["worker_anon"] + who["worker_file"] - who["released"]
            _log(f"    worker-caused net growth: {worker_net:+.2f} MB = {worker_net * 1e6 / n:+.2f} MB per 1M samples; "
                 f"parent-caused {who['parent']:+.2f} MB")


# ------------------------------------------------------------------------------------------ first batch

def _shutdown(loader) -> None:
    inner = getattr(loader.dataloader, "_iterator", None)
    if inner is not None and hasattr(inner, "_shutdown_workers"):
        inner._shutdown_workers()
    loader.dataloader._iterator = None


def time_to_first_batch(pack: str, batch_size: int, repeats: int) -> dict[str, list[float]]:
    """Seconds from the ``build_loader()`` call to the first batch, split at the return of ``build_loader``."""
    config = loader_config(pack, batch_size)
    times: dict[str, list[float]] = {"first": [], "build": [], "open": []}
    for _ in range(repeats):
        started = time.perf_counter()
        open_pack(pack)
        times["open"].append(time.perf_counter() - started)
        started = time.perf_counter()
        loader = build_loader(config, "train", num_workers=2, seed=0)
        built = time.perf_counter()
        iterator = iter(loader)
        batch = next(iterator)
        times["first"].append(time.perf_counter() - started)
        times["build"].append(built - started)
        if batch["wav_mix"].shape[0] not in (batch_size, 2 * batch_size):
            raise SystemExit(f"unexpected first batch of {batch['wav_mix'].shape[0]} rows")
        iterator.close()
        _shutdown(loader)
        del iterator, loader, batch
    return times


def cmd_first_batch(args, packs: list[tuple[str, str]]) -> None:
    """Time to first batch on each pack (run in a fresh interpreter: ``first-batch-child``)."""
    _log(f"\ntime to first batch (num_workers=2, batch_size {args.batch_size}, from the build_loader() call to the "
         f"first batch in hand; {args.repeats} runs, warm page cache, torch already imported)")
    _log(f"  {'pack':<40} {'best s':>7} {'median s':>9} {'build_loader s':>15} {'open_pack s':>12}   "
         f"target <= {TARGET_FIRST_BATCH_S:g} s")
    for name, pack in packs:
        warm_files(pack_files(pack))
        times = time_to_first_batch(pack, args.batch_size, args.repeats)
        verdict = "PASS" if min(times["first"]) <= TARGET_FIRST_BATCH_S else "BELOW TARGET"
        _log(f"  {name:<40} {min(times['first']):7.3f} {statistics.median(times['first']):9.3f} "
             f"{statistics.median(times['build']):15.3f} {statistics.median(times['open']):12.3f}   {verdict}")


def profile_first_batch(pack: str, batch_size: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    loader = build_loader(loader_config(pack, batch_size), "train", num_workers=2, seed=0)
    iterator = iter(loader)
    next(iterator)
    profiler.disable()
    iterator.close()
    _shutdown(loader)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
    _log(f"\ncProfile of build_loader + first batch on {pack} (main process), top 20 by own time:")
    _log(text.getvalue())


# ------------------------------------------------------------------------------------------ main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="all",
                        choices=("all", "throughput", "memory", "first-batch", "memory-child", "first-batch-child"),
                        help="what to measure (the *-child commands are internal: one measurement, given packs)")
    parser.add_argument("--lines", type=int, default=640, help="mixture lines in the list (default 640)")
    parser.add_argument("--batch-size", type=int, default=16, help="mixtures per batch (default 16)")
    parser.add_argument("--piece-seconds", type=float, nargs=2, default=list(PIECE_SECONDS), metavar=("MIN", "MAX"),
                        help="length range of the mixtures in seconds (default 8 12)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per job (default 5)")
    parser.add_argument("--pack-workers", type=int, default=min(4, os.cpu_count() or 1),
                        help="build_wesep workers for the throughput pack (does not change the pack)")
    parser.add_argument("--samples", type=int, default=1_000_000, help="samples of the big pack (default 1M)")
    parser.add_argument("--fraction", type=float, default=1.0, help="share of the epoch the memory run iterates")
    parser.add_argument("--memory-batch-size", type=int, default=16, help="batch size of the memory run")
    parser.add_argument("--big-pack", default=None, help="where to keep (or reuse) the big pack")
    parser.add_argument("--gc-freeze", choices=("parent", "worker"), default=None,
                        help="memory what-if: gc.collect(); gc.freeze() in the parent before the worker forks, or "
                             "gc.freeze() first thing in the worker (worker_init_fn)")
    parser.add_argument("--small-pack", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir", default=None, help="where corpus and packs go (default: system temp)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.lines < 1 or args.batch_size < 1 or args.samples < 1 or not 0 < args.fraction <= 1:
        parser.error("--repeats, --lines, --batch-size and --samples must be at least 1, --fraction in (0, 1]")
    if args.command == "memory-child":
        cmd_memory(args, args.big_pack)
        return 0
    if args.command == "first-batch-child":
        cmd_first_batch(args, [(f"big synthetic pack ({len(open_pack(args.big_pack)):,} samples)", args.big_pack),
                               ("throughput pack (real mixtures)", args.small_pack)])
        if args.profile:
            profile_first_batch(args.big_pack, args.batch_size)
        return 0

    with bench_workdir("speechpack-loader-bench-", args.tmp_dir, args.keep, _log) as workdir:
        small = None
        if args.command in ("all", "throughput"):
            small = cmd_throughput(args, workdir)
        elif args.command == "first-batch":
            small = build_small_only(args, workdir)
        if args.command in ("all", "memory", "first-batch"):
            big = ensure_big_pack(args, workdir)
            if args.command in ("all", "memory"):
                _run_child("memory-child", args, big_pack=big)
            if args.command in ("all", "first-batch"):
                _run_child("first-batch-child", args, big_pack=big, small_pack=small)
    return 0


def build_small_only(args, workdir: str) -> str:
    lines = -(-args.lines // args.batch_size) * args.batch_size
    list_path, _ = build_corpus(workdir, lines, args.seed, tuple(args.piece_seconds))
    pack_path = os.path.join(workdir, "pack")
    build_wesep(list_path, BuildOptions(out=pack_path, workers=args.pack_workers, progress=False))
    return pack_path


if __name__ == "__main__":
    sys.exit(main())
