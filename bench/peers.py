"""speechpack side by side with the pack-based peers on the same corpus, the same chunks and the same batches.

    python bench/peers.py [--variants short long] [--workers 0 2] [--modes warm cold] [--repeats 3]
                          [--epochs 3] [--jobs ...] [--tmp-dir DIR] [--keep]

The peers are installed for this benchmark only; speechpack never imports them (``pyproject.toml`` has no extra for
them).  Installed beside torch 2.13.0 without replacing it (``pip install --dry-run`` showed that
``mosaicml-streaming`` and ``litdata`` pull torch 2.14 through ``torchvision``, and streaming pins numpy < 2.2)::

    pip install webdataset==1.0.2 lhotse==1.33.0 'transformers>=4.21.3,<5'
    pip install --no-deps mosaicml-streaming==0.13.0 litdata==0.2.76
    pip install xxhash zstd Brotli python-snappy catalogue tifffile obstore

Streaming's package ``__init__`` imports ``streaming.vision``, which imports torchvision; the only torchvision wheel
for torch 2.13.0 here is a CUDA build that cannot load beside the CPU torch, so when torchvision is missing this
script registers an empty stand-in module before importing streaming (the vision datasets are never used).

**Corpus** (``build_corpus`` of ``bench/loader_throughput.py``: real recordings, 16 kHz, two speakers per
mixture): ``short`` = dialogue lines of 2-5 s, ``long`` = utterances of 8-12 s.  Every system stores the same
int16 samples of each line (mixture and both sources) in its own format:

- **speechpack**: ``build_wesep`` of the WeSep list (``tse`` pack).
- **MDS** (MosaicML Streaming): ``MDSWriter``, columns ``key: str``, ``mix``/``s1``/``s2``: ``bytes`` (raw int16).
- **LitData**: ``litdata.optimize`` of dicts ``{key, mix, s1, s2}`` (int16 ndarrays), 64 MB chunks.
- **WebDataset**: ``ShardWriter`` tar shards, members ``<key>.mix.i16`` etc. (raw int16), 8 shards.
- **Lhotse Shar**: a ``CutSet`` of the mixture ``Recording`` with the sources as custom ``Recording`` fields,
  ``to_shar(fields={"recording": "wav", "s1": "wav", "s2": "wav"})``.

**Reading** (every job): one epoch reads every mixture once in a shuffled order, cuts one random 2 s window shared
by the mixture and its sources, and delivers batches of 8 mixtures as speechpack's TSE collate defines them:
``wav_mix`` and ``wav_target`` ``[16, 1, 32000]`` float32 (the mixture once per target row).  The peers use the
leanest code a user would write: their dataset yields int16 window views, and one collate function converts them
straight into the batch (no per-row float arrays); torch ``DataLoader`` with ``batch_size=8`` (WebDataset and
Shar are iterable: ``split_by_worker`` / ``split_for_dataloading``), ``persistent_workers`` and
``prefetch_factor=2`` as speechpack's loader.  **bare numpy** is the limit: the same windows read from
speechpack's own mapped shards with offsets precomputed into arrays, copied into fresh ``np.empty`` batches in a
plain loop (each window a cast copy then an in-place multiply, the faster of numpy's two ways; a mixture decoded
once and copied to its second row).  The peers' collate uses the same two steps.  **bare reuse** is the stricter
limit of the copies alone, the cache-hot int16 -> float copy of the same bytes: the same loop writing every batch
into two arrays allocated once, so no batch pays for faulting in fresh memory or writing into memory gone cold (speechpack recycles its batch arrays once the training loop drops them,
``loader/tse/buffers.py``; the peers and ``bare numpy`` allocate per batch).

**Modes.** ``warm``: the job's files read once, one untimed epoch, then ``--epochs`` timed epochs (median).  ``cold``:
the reader is built, the job's files are dropped from the page cache with ``posix_fadvise(POSIX_FADV_DONTNEED)``
(root's ``drop_caches`` is not needed: the files are not mapped by anyone at that moment), then one epoch is timed.
Every measurement runs in a fresh child process (so no job inherits another's mappings or workers); the jobs
alternate and each is repeated ``--repeats`` times; the table gives medians, and ratios are taken between jobs of
the same repeat; each child also reports its process CPU time, whose ratios read through a shared machine's load
(the main process only: with workers they leave the workers' work out).  Figures and their reading:
``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import glob
import importlib.machinery
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time
import types

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

RATE = 16000
CHUNK_SECONDS = 2
CHUNK = CHUNK_SECONDS * RATE
BATCH = 8  # mixtures per batch
SPEAKERS = 2  # per mixture in build_corpus
PREFETCH = 2  # as loader.torch.PREFETCH_PER_WORKER
SHARD_BYTES = 64 << 20  # MDS and LitData shard size (both libraries' default order of magnitude)
WDS_SHARDS = 8
VARIANTS = {"short": ((2.0, 5.0), 960), "long": ((8.0, 12.0), 320)}  # piece seconds, lines
JOBS = ("speechpack", "bare-numpy", "bare-reuse", "mds", "litdata", "webdataset", "shar")
BARE = ("bare-numpy", "bare-reuse")  # the limits: one process only, on speechpack's shards
PEERS = ("mds", "litdata", "webdataset", "shar")
INT16_SCALE = np.float32(1 / 32768)


def _log(text: str) -> None:
    print(text, flush=True)


def _stub_torchvision() -> None:
    """Streaming imports torchvision at package import for its vision datasets, which this benchmark never uses."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # noqa: BLE001 - a missing or unloadable (CUDA-only) torchvision alike
        pass
    modules = {}
    for name in ("torchvision", "torchvision.datasets", "torchvision.transforms", "torchvision.transforms.functional"):
        modules[name] = types.ModuleType(name)
        modules[name].__spec__ = importlib.machinery.ModuleSpec(name, None)
    modules["torchvision.datasets"].VisionDataset = type("VisionDataset", (), {})
    modules["torchvision.transforms.functional"].to_tensor = None
    sys.modules.update(modules)


# ------------------------------------------------------------------------------------------ corpus and formats

def read_corpus(list_path: str) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """The WeSep list's lines as (key, mix, s1, s2) int16 arrays, exactly the samples every format stores."""
    import soundfile
    items = []
    with open(list_path, encoding="utf-8") as fp:
        for line in fp:
            obj = json.loads(line)
            spk1, spk2 = obj["spk"]
            paths = (obj["mix"]["default"][0], obj["src"][spk1][0], obj["src"][spk2][0])
            items.append((obj["key"], *(soundfile.read(p, dtype="int16")[0] for p in paths)))
    return items


def write_speechpack(list_path: str, out: str, shard_bytes: int | None = None) -> None:
    from speechpack.packer.adapters.wesep import build_wesep
    from speechpack.packer.build.run import BuildOptions
    sizes = {} if shard_bytes is None else {"shard_bytes": shard_bytes}
    build_wesep(list_path, BuildOptions(out=out, workers=1, progress=False, **sizes))


def write_mds(items, out: str, shard_bytes: int = SHARD_BYTES) -> None:
    _stub_torchvision()
    from streaming import MDSWriter
    columns = {"key": "str", "mix": "bytes", "s1": "bytes", "s2": "bytes"}
    with MDSWriter(out=out, columns=columns, size_limit=shard_bytes) as writer:
        for key, mix, s1, s2 in items:
            writer.write({"key": key, "mix": mix.tobytes(), "s1": s1.tobytes(), "s2": s2.tobytes()})


def _litdata_item(item):
    key, mix, s1, s2 = item
    return {"key": key, "mix": mix, "s1": s1, "s2": s2}


def write_litdata(items, out: str, shard_bytes: int = SHARD_BYTES) -> None:
    import litdata
    litdata.optimize(fn=_litdata_item, inputs=items, output_dir=out, chunk_bytes=shard_bytes, num_workers=1,
                     mode="overwrite")


def write_webdataset(items, out: str) -> None:
    import webdataset as wds
    os.makedirs(out)
    per_shard = -(-len(items) // WDS_SHARDS)
    with wds.ShardWriter(os.path.join(out, "shard-%04d.tar"), maxcount=per_shard, verbose=0) as sink:
        for key, mix, s1, s2 in items:
            sink.write({"__key__": key, "mix.i16": mix.tobytes(), "s1.i16": s1.tobytes(), "s2.i16": s2.tobytes()})


def write_shar(list_path: str, out: str) -> None:
    from lhotse import CutSet, Recording
    cuts = []
    with open(list_path, encoding="utf-8") as fp:
        for line in fp:
            obj = json.loads(line)
            spk1, spk2 = obj["spk"]
            rec = Recording.from_file(obj["mix"]["default"][0], recording_id=obj["key"])
            cut = rec.to_cut()
            cut.s1 = Recording.from_file(obj["src"][spk1][0], recording_id=obj["key"] + "-s1")
            cut.s2 = Recording.from_file(obj["src"][spk2][0], recording_id=obj["key"] + "-s2")
            cuts.append(cut)
    os.makedirs(out)
    CutSet.from_cuts(cuts).to_shar(out, fields={"recording": "wav", "s1": "wav", "s2": "wav"},
                                   shard_size=-(-len(cuts) // WDS_SHARDS))


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "**", "*"), recursive=True)
               if os.path.isfile(p))


def job_files(workdir: str, job: str) -> list[str]:
    folder = os.path.join(workdir, "speechpack" if job in BARE else job)
    return [p for p in glob.glob(os.path.join(folder, "**", "*"), recursive=True) if os.path.isfile(p)]


# ------------------------------------------------------------------------------------------ peer readers

def collate(rows: list) -> dict:
    """Rows of (key, mix int16 window, [target int16 windows]) into speechpack's TSE batch layout."""
    import torch
    count = sum(len(targets) for _, _, targets in rows)
    mix = np.empty((count, 1, CHUNK), dtype=np.float32)
    target = np.empty((count, 1, CHUNK), dtype=np.float32)
    keys, r = [], 0
    for key, window, targets in rows:
        first = r
        for t in targets:
            if r == first:
                row = mix[r, 0]
                row[...] = window
                row *= INT16_SCALE
            else:
                mix[r, 0] = mix[first, 0]
            row = target[r, 0]
            row[...] = t
            row *= INT16_SCALE
            keys.append(key)
            r += 1
    return {"key": keys, "wav_mix": torch.from_numpy(mix), "wav_target": torch.from_numpy(target)}


def collate_float(rows: list) -> dict:
    """As ``collate`` for rows that are already float32 (Lhotse decodes to float32 itself)."""
    import torch
    keys = [key for key, _, targets in rows for _ in targets]
    mix = np.stack([window for _, window, targets in rows for _ in targets])[:, None]
    target = np.stack([t for _, _, targets in rows for t in targets])[:, None]
    return {"key": keys, "wav_mix": torch.from_numpy(mix), "wav_target": torch.from_numpy(target)}


def _window(rng: random.Random, mix: np.ndarray, sources) -> tuple:
    start = rng.randrange(len(mix) - CHUNK + 1)
    return mix[start:start + CHUNK], [s[start:start + CHUNK] for s in sources]


def _worker_rng(seed: int) -> random.Random:
    import torch.utils.data as tud
    info = tud.get_worker_info()
    return random.Random(seed * 1000 + (info.id if info else 0) + 17)


def make_mds(folder: str, seed: int, **options):
    """``options``: more ``StreamingDataset`` arguments (``remote=``, ``cache_limit=`` to stream into ``folder``)."""
    _stub_torchvision()
    from streaming import StreamingDataset

    class Windows(StreamingDataset):
        def __getitem__(self, index):
            sample = super().__getitem__(index)
            if not hasattr(self, "_rng"):
                self._rng = _worker_rng(seed)
            mix, targets = _window(self._rng, np.frombuffer(sample["mix"], np.int16),
                                   [np.frombuffer(sample[s], np.int16) for s in ("s1", "s2")])
            return sample["key"], mix, targets

    return Windows(local=folder, shuffle=True, shuffle_seed=seed, batch_size=BATCH, **options), collate


def make_litdata(folder: str, seed: int, **options):
    """``options``: more ``StreamingDataset`` arguments (``input_dir=`` a URL, ``cache_dir=``, ``max_cache_size=``)."""
    import litdata

    class Windows(litdata.StreamingDataset):
        def __getitem__(self, index):
            sample = super().__getitem__(index)
            if not hasattr(self, "_rng"):
                self._rng = _worker_rng(seed)
            mix, targets = _window(self._rng, sample["mix"], [sample["s1"], sample["s2"]])
            return sample["key"], mix, targets

    return Windows(input_dir=options.pop("input_dir", folder), shuffle=True, seed=seed, **options), collate


def make_webdataset(folder: str, seed: int):
    import webdataset as wds
    urls = sorted(glob.glob(os.path.join(folder, "*.tar")))

    class Cut:
        def __init__(self):
            self.rng = None

        def __call__(self, sample):
            if self.rng is None:
                self.rng = _worker_rng(seed)
            mix, targets = _window(self.rng, np.frombuffer(sample["mix.i16"], np.int16),
                                   [np.frombuffer(sample[s], np.int16) for s in ("s1.i16", "s2.i16")])
            return sample["__key__"], mix, targets

    dataset = (wds.WebDataset(urls, shardshuffle=len(urls), seed=seed, nodesplitter=None, empty_check=False)
               .shuffle(100).map(Cut()))
    return dataset, collate


def make_shar(folder: str, seed: int):
    import torch.utils.data as tud
    from lhotse import CutSet

    class Shar(tud.IterableDataset):
        def __init__(self):
            self.passes = 0

        def __iter__(self):
            self.passes += 1
            rng = _worker_rng(seed + self.passes)
            cuts = CutSet.from_shar(in_dir=folder, shuffle_shards=True, seed=seed + self.passes,
                                    split_for_dataloading=True).shuffle(buffer_size=100, rng=rng)
            for cut in cuts:
                offset = rng.randrange(cut.num_samples - CHUNK + 1) / RATE
                window = cut.truncate(offset=offset, duration=CHUNK_SECONDS, preserve_id=True)
                mix = window.load_audio()[0, :CHUNK]
                targets = [window.load_s1()[0, :CHUNK], window.load_s2()[0, :CHUNK]]
                if len(mix) != CHUNK or any(len(t) != CHUNK for t in targets):
                    raise SystemExit(f"Lhotse gave a window of {len(mix)} samples for {cut.id}, expected {CHUNK}")
                yield cut.id, mix, targets

    return Shar(), collate_float


def peer_dataloader(job: str, folder: str, workers: int, seed: int, **options):
    """The torch ``DataLoader`` of one peer; ``options`` go to its dataset (MDS and LitData: streaming settings)."""
    import torch.utils.data as tud
    dataset, collate_fn = {"mds": make_mds, "litdata": make_litdata, "webdataset": make_webdataset,
                           "shar": make_shar}[job](folder, seed, **options)
    return tud.DataLoader(dataset, batch_size=BATCH, collate_fn=collate_fn, num_workers=workers,
                          persistent_workers=workers > 0, prefetch_factor=PREFETCH if workers else None)


def peer_loader(job: str, folder: str, workers: int, seed: int):
    loader = peer_dataloader(job, folder, workers, seed)

    def epoch(_number: int) -> int:
        return sum(len(batch["key"]) for batch in loader) // SPEAKERS
    return epoch


# ------------------------------------------------------------------------------------------ speechpack and the limit

def speechpack_config(location: str) -> dict:
    """The loader config every speechpack job reads with (a pack directory or URL)."""
    return {"packs": [{"path": location}], "dataset_args": {"chunk_len": CHUNK, "batch_size": BATCH, "shuffle": True}}


def speechpack_loader(folder: str, workers: int, seed: int):
    from speechpack.loader import build_loader
    loader = build_loader(speechpack_config(folder), "train", num_workers=workers, seed=seed)

    def epoch(number: int) -> int:
        loader.set_epoch(number)
        return sum(len(batch["key"]) for batch in loader) // SPEAKERS
    return epoch


class BareNumpy:
    """The limit: speechpack's mapped shards, offsets precomputed as arrays, every window copied in a plain loop into
    fresh ``np.empty`` batches (``bare-numpy``), or into two arrays allocated once and overwritten for every batch
    (``bare-reuse``: the copies alone, no page faults for new memory)."""

    def __init__(self, folder: str, seed: int, reuse: bool = False):
        from speechpack.loader import open_pack
        from speechpack.schemas.constants import STREAM_MIX, STREAM_TARGET
        pack = open_pack(folder)
        self.seed = seed
        self.reuse = reuse
        arrays = {}
        mix_ref, target_ref = [], []  # per sample: (array id, start element, scale), targets flattened 2 per sample
        self.arrays = []

        def ref(stream, segment):
            table = pack.streams[stream]
            shard = int(table.shard[segment])
            if (shard, stream) not in arrays:
                path = os.path.join(pack.path, pack.manifest.shards[shard].directory, f"{stream}.npy")
                arrays[(shard, stream)] = len(self.arrays)
                self.arrays.append(np.load(path, mmap_mode="r"))
            return arrays[(shard, stream)], int(table.offset[segment]), float(table.scale[segment] / 32768.0)

        lengths = []
        for sample in range(len(pack.keys)):
            mix_seg = pack.segments_of(STREAM_MIX, sample)[0]
            mix_ref.append(ref(STREAM_MIX, mix_seg))
            target_ref += [ref(STREAM_TARGET, j) for j in pack.segments_of(STREAM_TARGET, sample)]
            lengths.append(int(pack.streams[STREAM_MIX].length[mix_seg]))
        self.mix = np.array(mix_ref, dtype=np.float64)
        self.target = np.array(target_ref, dtype=np.float64).reshape(len(mix_ref), SPEAKERS, 3)
        self.lengths = np.array(lengths, dtype=np.int64)

    def epoch(self, number: int) -> int:
        import torch
        rng = np.random.default_rng((self.seed, number))
        order = rng.permutation(len(self.lengths))
        starts = rng.integers(0, self.lengths[order] - CHUNK + 1)
        mix_a, mix_o, mix_s = self.mix[order].T
        mix_a, mix_o = mix_a.astype(np.int64).tolist(), (mix_o.astype(np.int64) + starts).tolist()
        tgt = self.target[order]
        tgt_a = tgt[..., 0].astype(np.int64).tolist()
        tgt_o = (tgt[..., 1].astype(np.int64) + starts[:, None]).tolist()
        mix_s, tgt_s = mix_s.astype(np.float32).tolist(), tgt[..., 2].astype(np.float32).tolist()
        arrays = self.arrays
        mixtures = 0
        kept = (np.empty((SPEAKERS * BATCH, 1, CHUNK), dtype=np.float32),
                np.empty((SPEAKERS * BATCH, 1, CHUNK), dtype=np.float32))
        for first in range(0, len(order), BATCH):
            rows = SPEAKERS * min(BATCH, len(order) - first)
            if self.reuse:
                mix, target = kept[0][:rows], kept[1][:rows]
            else:
                mix = np.empty((rows, 1, CHUNK), dtype=np.float32)
                target = np.empty((rows, 1, CHUNK), dtype=np.float32)
            r = 0
            for i in range(first, min(first + BATCH, len(order))):
                row = mix[r, 0]  # decoded once (a cast copy, then an in-place multiply), then copied per target
                row[...] = arrays[mix_a[i]][mix_o[i]:mix_o[i] + CHUNK]
                row *= np.float32(mix_s[i])
                for k in range(SPEAKERS):
                    if k:
                        mix[r, 0] = row
                    dest = target[r, 0]
                    dest[...] = arrays[tgt_a[i][k]][tgt_o[i][k]:tgt_o[i][k] + CHUNK]
                    dest *= np.float32(tgt_s[i][k])
                    r += 1
            batch = {"wav_mix": torch.from_numpy(mix), "wav_target": torch.from_numpy(target)}
            mixtures += len(batch["wav_mix"]) // SPEAKERS
        return mixtures


# ------------------------------------------------------------------------------------------ one measurement (child)

def warm(paths: list[str]) -> None:
    for path in paths:
        with open(path, "rb") as fp:
            while fp.read(1 << 22):
                pass


def child(args) -> None:
    import torch
    torch.set_num_threads(1)
    workers = args.workers[0]
    folder = os.path.join(args.dir, "speechpack" if args.child in BARE else args.child)
    files = job_files(args.dir, args.child)
    expected = args.expected
    if args.mode == "warm":
        warm(files)
    if args.child == "speechpack":
        epoch = speechpack_loader(folder, workers, args.seed)
    elif args.child in BARE:
        epoch = BareNumpy(folder, args.seed, reuse=args.child == "bare-reuse").epoch
    else:
        epoch = peer_loader(args.child, folder, workers, args.seed)
    times, cpu = [], []
    if args.mode == "cold":
        from workdir import drop_page_cache

        drop_page_cache(files)
        started, used = time.perf_counter(), time.process_time()
        got = epoch(1)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - used)
        if got != expected:
            raise SystemExit(f"{args.child} delivered {got} mixtures in an epoch, expected {expected}")
    else:
        for number in range(args.epochs + 1):
            started, used = time.perf_counter(), time.process_time()
            got = epoch(number + 1)
            if number:
                times.append(time.perf_counter() - started)
                cpu.append(time.process_time() - used)
            if got != expected:
                raise SystemExit(f"{args.child} delivered {got} mixtures in epoch {number}, expected {expected}")
    print("RESULT " + json.dumps({"seconds": statistics.median(times), "cpu": statistics.median(cpu)}), flush=True)
    os._exit(0)  # skip the peers' atexit clean-ups (shared memory, worker joins), which are not timed anyway


def measure(args, workdir: str, job: str, workers: int, mode: str, expected: int) -> dict:
    """``{"seconds", "cpu"}`` of one child: median wall and process CPU seconds per timed epoch (the CPU time of
    the main process only: with workers it leaves their work out)."""
    command = [sys.executable, os.path.abspath(__file__), "--child", job, "--dir", workdir, "--workers",
               str(workers), "--mode", mode, "--epochs", str(args.epochs), "--seed", str(args.seed),
               "--expected", str(expected)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200)
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not results:
        raise SystemExit(f"{job} (workers {workers}, {mode}) failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(results[-1][len("RESULT "):])


# ------------------------------------------------------------------------------------------ driver

def prepare(args, workdir: str, variant: str) -> tuple[int, dict]:
    from loader_throughput import build_corpus
    piece_seconds, lines = VARIANTS[variant]
    lines = args.lines or lines
    lines -= lines % BATCH  # whole batches only
    list_path, corpus = build_corpus(workdir, lines, args.seed, piece_seconds)
    _log(f"[{variant}] corpus: {corpus['lines']} lines of 2 speakers, {corpus['min_s']:.1f}-{corpus['max_s']:.1f} s "
         f"({corpus['hours'] * 60:.1f} min of mixtures; {corpus['unique_mixtures']} unique mixtures of "
         f"{corpus['recordings']} real recordings)")
    items = read_corpus(list_path)
    writers = {"speechpack": lambda out: write_speechpack(list_path, out), "mds": lambda out: write_mds(items, out),
               "litdata": lambda out: write_litdata(items, out),
               "webdataset": lambda out: write_webdataset(items, out), "shar": lambda out: write_shar(list_path, out)}
    sizes = {}
    for name, write in writers.items():
        if name not in args.jobs and not (name == "speechpack" and set(BARE) & set(args.jobs)):
            continue
        started = time.perf_counter()
        write(os.path.join(workdir, name))
        sizes[name] = (dir_bytes(os.path.join(workdir, name)), time.perf_counter() - started)
        _log(f"[{variant}]   {name:<11} {sizes[name][0] / 1e6:8.1f} MB written in {sizes[name][1]:6.1f} s")
    return len(items), sizes


def run_variant(args, workdir: str, variant: str) -> list[dict]:
    mixtures, _sizes = prepare(args, workdir, variant)
    rows = []
    for mode in args.modes:
        for workers in args.workers:
            jobs = [j for j in args.jobs if not (j in BARE and workers)]
            seconds = {j: [] for j in jobs}
            cpu = {j: [] for j in jobs}
            for repeat in range(args.repeats):
                for job in (jobs if repeat % 2 == 0 else list(reversed(jobs))):
                    got = measure(args, workdir, job, workers, mode, mixtures)
                    seconds[job].append(got["seconds"])
                    cpu[job].append(got["cpu"])
            load = os.getloadavg()
            for job in jobs:
                sp, sp_cpu = seconds.get("speechpack"), cpu.get("speechpack")
                ratios = [s / t for s, t in zip(seconds[job], sp)] if sp else []
                cpu_ratios = [s / t for s, t in zip(cpu[job], sp_cpu)] if sp_cpu else []
                rows.append({"variant": variant, "mode": mode, "workers": workers, "job": job,
                             "mixtures_s": mixtures / statistics.median(seconds[job]),
                             "speechpack_x": statistics.median(ratios) if ratios else float("nan"),
                             "speechpack_cpu_x": statistics.median(cpu_ratios) if cpu_ratios else float("nan"),
                             "load": load[0]})
                row = rows[-1]
                _log(f"[{variant}] {mode:<4} workers={workers} {job:<11} {row['mixtures_s']:9,.0f} mixtures/s "
                     f"{SPEAKERS * row['mixtures_s']:9,.0f} rows/s  speechpack is {row['speechpack_x']:5.2f}x "
                     f"(CPU time {row['speechpack_cpu_x']:5.2f}x; per-repeat s: "
                     f"{', '.join(f'{s:.3f}' for s in seconds[job])}; load {load[0]:.1f})")
    return rows


def table(rows: list[dict]) -> str:
    out = io.StringIO()
    out.write("| corpus | cache | workers | job | mixtures/s | rows/s | speechpack / job | in CPU time | load avg |\n")
    out.write("|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        out.write(f"| {r['variant']} | {r['mode']} | {r['workers']} | {r['job']} | {r['mixtures_s']:,.0f} | "
                  f"{SPEAKERS * r['mixtures_s']:,.0f} | {r['speechpack_x']:.2f}x | {r['speechpack_cpu_x']:.2f}x | "
                  f"{r['load']:.1f} |\n")
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["short", "long"])
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 2])
    parser.add_argument("--modes", nargs="+", choices=["warm", "cold"], default=["warm", "cold"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="timed warm epochs per measurement (median)")
    parser.add_argument("--lines", type=int, default=0, help="lines per corpus (default: 960 short, 320 long)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--child", choices=JOBS, help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["warm", "cold"], help=argparse.SUPPRESS)
    parser.add_argument("--expected", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    from workdir import bench_workdir
    _log(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    rows = []
    for variant in args.variants:
        with bench_workdir(f"peers-{variant}-", args.tmp_dir, args.keep, _log) as workdir:
            rows += run_variant(args, workdir, variant)
    _log("\n" + table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
