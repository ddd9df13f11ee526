"""Compressed packs on real speech: bytes per hour, loader throughput against the decode limit and the peers that
read the same FLAC or Opus audio, and build and convert time against the encode limit.

    python bench/codec_throughput.py [--quick] [--workers 0 2] [--repeats 3] [--short-lines N] [--long-lines N]
                                     [--codecs flac [opus]] [--block-seconds S] [--tmp-dir DIR] [--keep]

The peers are benchmark-only installs, as for ``bench/peers.py``: ``pip install webdataset==1.0.2 lhotse==1.33.0``
(Lhotse is also speechpack's optional ``lhotse`` extra); speechpack never imports them.

``--quick`` (about a minute): a small corpus, one repeat, ``num_workers=0`` only, and no Opus on the long lines
(libsndfile encodes Opus at 15-40x real time on one core, so Opus dominates the run's time).  Every ratio is taken
against a baseline measured in the same run, on the same audio.

**Corpus** (every recording ``bench/loader_throughput.py`` reads: LibriVox, codec2, ALSA prompts, 308 s of
speech, resampled to 16 kHz; each speaker's recordings joined into one tape, repeated where a line is longer):
two-speaker mixtures, mixture and both sources stored (a ``tse`` pack), PCM_16 WAV files as the source corpus.
``short`` = lines of 2-5 s, ``long`` = lines of 60 s.

**Packs**: ``speechpack build wesep`` with ``--codec pcm16`` (the default), then ``speechpack convert`` of it to
``flac`` and ``opus`` (``--block-seconds``: the codecs' default unless given; opus at the default bit rate),
timed; and, where the build writes codecs, ``build wesep --codec C`` timed too.  **Encode limit**: soundfile
encoding the same segments alone, cut into the same blocks, into memory (one process; what a build cannot beat).

**Loader jobs** (an epoch reads every mixture once in a shuffled order, one random 2 s window shared by the mixture
and its sources, batches of 8 mixtures; ``--workers`` DataLoader workers):

- **speechpack** ``build_loader`` (TSE ``chunk_len`` 32000, ``batch_size`` 8) on the pcm16, flac and opus packs.
- **decode limit** (one process): soundfile decoding, for the same number of random windows of the same
  segments, exactly the part of each block of the compressed pack under each window (mixture and both sources; a
  FLAC block sought to the window's first frame, every block read to the window's end with libsndfile's
  ``sf_readf_short`` as the loader reads), scaled into a float32 batch.  What any reader of that pack must at least
  do.  (The peers read through ``soundfile.read``, as their users do, which after each read seeks a FLAC file
  back to where the read ended: a libFLAC seek.)
- **Lhotse Shar** FLAC and Opus: the same mixtures as ``to_shar(fields={"recording": C, "s1": C, "s2": C})``, read
  as ``bench/peers.py`` reads Shar (``CutSet.from_shar``, ``truncate``, ``load_audio``).
- **WebDataset** tars of FLAC files (members ``KEY.mix.flac``, ``KEY.s1.flac``, ``KEY.s2.flac``), each window read
  with ``soundfile.read(BytesIO(member), start=, stop=)`` (libsndfile seeks inside the FLAC).
- **per-file FLAC**: one FLAC file per stream per line, ``soundfile.read(path, start=, stop=)``.

Every job's batch is speechpack's TSE batch layout (``wav_mix``, ``wav_target`` ``[16, 1, 32000]`` float32).
**ASR**: waveform batches of whole utterances (the short corpus' mixtures as an ``asr`` pack, STATIC batches of
16) per codec, against soundfile decoding every block of them alone.

Jobs alternate within each repeat; the table gives medians of wall time per epoch (and CPU time of the main
process).  Figures and their reading: docs/performance.md ("Compressed packs").
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import random
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from loader_throughput import speaker_streams, warm_files  # noqa: E402
from peers import BATCH, CHUNK, RATE, collate, collate_float  # noqa: E402
from workdir import bench_workdir  # noqa: E402

CODECS = ("pcm16", "flac", "opus")
COMPRESSED = ("flac", "opus")
BLOCK_SECONDS = 1.0  # the codecs' default (media.codecs.DEFAULT_BLOCK_SECONDS) unless --block-seconds, set in main
ASR_BATCH = 8
#: Targets of issue 32 (docs/performance.md).
TARGET_FLAC_BYTES = 0.6  # FLAC pack bytes at most this of pcm16
TARGET_VS_LIMIT = 0.8  # FLAC loader at least this of its decode limit
TARGET_VS_PEER = 2.0  # FLAC loader at least this of the best peer reading the same FLAC audio
TARGET_WINDOW_COST = 0.1  # a 2 s window of a 60 s utterance at most this of decoding the whole utterance
TARGET_BUILD = 1.5  # build (and convert) at most this of the encode limit


def _log(text: str = "") -> None:
    print(text, flush=True)


# ------------------------------------------------------------------------------------------ corpus

def speaker_tapes() -> list[tuple[str, np.ndarray]]:
    """Each speaker's real recordings at 16 kHz, joined (``speaker_streams``)."""
    return [(name, audio) for name, audio in speaker_streams(0.0) if len(audio) >= CHUNK]


def make_corpus(workdir: str, name: str, lines: int, seconds: tuple[float, float], seed: int) -> dict:
    """``lines`` two-speaker mixtures of ``seconds`` (uniform), PCM_16 WAV, and their WeSep raw list."""
    import soundfile
    rng = np.random.default_rng(seed)
    tapes = speaker_tapes()
    wav_dir = os.path.join(workdir, f"{name}-wav")
    os.makedirs(wav_dir)
    rows = []
    for k in range(lines):
        n = int(rng.uniform(*seconds) * RATE)
        a, b = rng.choice(len(tapes), size=2, replace=False)
        signals = []
        for which in (a, b):
            tape = tapes[which][1]
            tape = np.tile(tape, -(-(2 * n) // len(tape)) + 1)
            start = int(rng.integers(0, len(tape) - n))
            signals.append(tape[start:start + n].astype(np.float64))
        gain = 10 ** (rng.uniform(-5, 5) / 20)
        s1, s2 = signals[0] / (1 + gain), signals[1] * (gain / (1 + gain))
        peak = max(float(np.abs(s1 + s2).max()), 1e-9)
        if peak > 0.99:
            s1, s2 = s1 * (0.99 / peak), s2 * (0.99 / peak)
        paths = []
        for role, signal in (("mix", s1 + s2), ("s1", s1), ("s2", s2)):
            path = os.path.join(wav_dir, f"{name}{k:05d}-{role}.wav")
            soundfile.write(path, np.clip(signal, -1.0, 32767 / 32768), RATE, subtype="PCM_16")
            paths.append(path)
        spk1, spk2 = tapes[a][0], tapes[b][0]
        rows.append({"key": f"{name}{k:05d}", "spk": [spk1, spk2], "mix": {"default": [paths[0]]},
                     "src": {spk1: [paths[1]], spk2: [paths[2]]}, "frames": n})
    list_path = os.path.join(workdir, f"{name}.list")
    with open(list_path, "w", encoding="utf-8") as fp:
        for row in rows:
            fp.write(json.dumps({k: v for k, v in row.items() if k != "frames"}) + "\n")
    wavs = glob.glob(os.path.join(wav_dir, "*.wav"))
    return {"name": name, "list": list_path, "rows": rows, "wav_bytes": sum(os.path.getsize(p) for p in wavs),
            "stored_hours": 3 * sum(r["frames"] for r in rows) / RATE / 3600,
            "mix_hours": sum(r["frames"] for r in rows) / RATE / 3600}


def row_paths(row: dict) -> list[str]:
    spk1, spk2 = row["spk"]
    return [row["mix"]["default"][0], row["src"][spk1][0], row["src"][spk2][0]]


# ------------------------------------------------------------------------------------------ packs and the encode limit

def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "**", "*"), recursive=True)
               if os.path.isfile(p))


def build_pack(list_path: str, out: str, codec: str | None = None) -> float:
    """``build wesep`` (with ``--codec`` when given); seconds."""
    from speechpack.packer.adapters.wesep import build_wesep
    from speechpack.packer.build.run import BuildOptions
    extra = {} if codec is None else {"codec": codec, "block_seconds": BLOCK_SECONDS}
    started = time.perf_counter()
    build_wesep(list_path, BuildOptions(out=out, workers=1, progress=False, **extra))
    return time.perf_counter() - started


def build_writes_codecs() -> bool:
    import dataclasses
    from speechpack.packer.build.run import BuildOptions
    return "codec" in {f.name for f in dataclasses.fields(BuildOptions)}


def convert(source: str, out: str, codec: str) -> float:
    from speechpack.packer.convert import ConvertOptions, convert_pack
    started = time.perf_counter()
    convert_pack(source, ConvertOptions(out=out, codec=codec, block_seconds=BLOCK_SECONDS, workers=1,
                                        progress=False))
    return time.perf_counter() - started


def encode_limit(corpus: dict, codec: str) -> float:
    """Seconds soundfile takes to encode every stored segment of ``corpus`` in blocks of ``BLOCK_SECONDS``."""
    import soundfile
    from speechpack.media.codecs import DEFAULT_OPUS_BITRATE, opus_compression_level
    block = int(round(BLOCK_SECONDS * RATE))
    fmt, subtype, level = {"flac": ("FLAC", "PCM_16", None),
                           "opus": ("OGG", "OPUS", opus_compression_level(DEFAULT_OPUS_BITRATE))}[codec]
    audio = [soundfile.read(p, dtype="int16")[0] for row in corpus["rows"] for p in row_paths(row)]
    started = time.perf_counter()
    for signal in audio:
        for first in range(0, len(signal), block):
            with soundfile.SoundFile(io.BytesIO(), "w", samplerate=RATE, channels=1, format=fmt, subtype=subtype,
                                     compression_level=level) as sound:
                sound.write(signal[first:first + block])
    return time.perf_counter() - started


# ------------------------------------------------------------------------------------------ peers' copies

def write_flac_files(corpus: dict, out: str) -> list[tuple[str, list[str]]]:
    """One FLAC file per stream per line: (key, [mix, s1, s2] paths)."""
    import soundfile
    os.makedirs(out)
    lines = []
    for row in corpus["rows"]:
        paths = []
        for role, path in zip(("mix", "s1", "s2"), row_paths(row)):
            flac = os.path.join(out, f"{row['key']}.{role}.flac")
            soundfile.write(flac, soundfile.read(path, dtype="int16")[0], RATE, format="FLAC", subtype="PCM_16")
            paths.append(flac)
        lines.append((row["key"], paths))
    return lines


def write_flac_tars(files: list[tuple[str, list[str]]], out: str, shards: int = 8) -> None:
    import webdataset as wds
    os.makedirs(out)
    per_shard = -(-len(files) // shards)
    with wds.ShardWriter(os.path.join(out, "shard-%04d.tar"), maxcount=per_shard, verbose=0) as sink:
        for key, paths in files:
            sample = {"__key__": key}
            for role, path in zip(("mix", "s1", "s2"), paths):
                with open(path, "rb") as fp:
                    sample[f"{role}.flac"] = fp.read()
            sink.write(sample)


def write_shar(corpus: dict, out: str, fmt: str, shards: int = 8) -> None:
    from lhotse import CutSet, Recording
    cuts = []
    for row in corpus["rows"]:
        mix, s1, s2 = row_paths(row)
        cut = Recording.from_file(mix, recording_id=row["key"]).to_cut()
        cut.s1 = Recording.from_file(s1, recording_id=row["key"] + "-s1")
        cut.s2 = Recording.from_file(s2, recording_id=row["key"] + "-s2")
        cuts.append(cut)
    os.makedirs(out)
    CutSet.from_cuts(cuts).to_shar(out, fields={"recording": fmt, "s1": fmt, "s2": fmt},
                                   shard_size=-(-len(cuts) // shards))


# ------------------------------------------------------------------------------------------ readers

def _rng(seed: int) -> random.Random:
    import torch.utils.data as tud
    info = tud.get_worker_info()
    return random.Random(seed * 1000 + (info.id if info else 0) + 17)


def flac_files_dataset(files: list[tuple[str, list[str]]], frames: dict[str, int], seed: int):
    import soundfile
    import torch.utils.data as tud

    class Files(tud.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, index):
            if not hasattr(self, "rng"):
                self.rng = _rng(seed)
            key, paths = files[index]
            start = self.rng.randrange(frames[key] - CHUNK + 1)
            mix, s1, s2 = (soundfile.read(p, start=start, stop=start + CHUNK, dtype="int16")[0] for p in paths)
            return key, mix, [s1, s2]

    return Files(), {"shuffle": True}


def flac_tars_dataset(folder: str, frames: dict[str, int], seed: int):
    import soundfile
    import webdataset as wds
    urls = sorted(glob.glob(os.path.join(folder, "*.tar")))

    class Cut:
        def __init__(self):
            self.rng = None

        def __call__(self, sample):
            if self.rng is None:
                self.rng = _rng(seed)
            key = sample["__key__"]
            start = self.rng.randrange(frames[key] - CHUNK + 1)
            mix, s1, s2 = (soundfile.read(io.BytesIO(sample[f"{role}.flac"]), start=start, stop=start + CHUNK,
                                          dtype="int16")[0] for role in ("mix", "s1", "s2"))
            return key, mix, [s1, s2]

    dataset = (wds.WebDataset(urls, shardshuffle=len(urls), seed=seed, nodesplitter=None, empty_check=False,
                              workersplitter=wds.split_by_worker).shuffle(100).map(Cut()))
    return dataset, {}


def shar_dataset(folder: str, seed: int):
    from peers import make_shar
    dataset, _collate = make_shar(folder, seed)
    return dataset, {}


def peer_epoch(dataset, loader_args: dict, workers: int, float_rows: bool):
    import torch.utils.data as tud
    loader = tud.DataLoader(dataset, batch_size=BATCH, collate_fn=collate_float if float_rows else collate,
                            num_workers=workers, persistent_workers=workers > 0,
                            prefetch_factor=2 if workers else None, **loader_args)

    def epoch(_number: int) -> int:
        return sum(len(batch["key"]) for batch in loader) // 2
    return epoch


def speechpack_epoch(pack: str, workers: int, seed: int = 0):
    from speechpack.loader import build_loader
    config = {"packs": [{"path": pack}], "dataset_args": {"chunk_len": CHUNK, "batch_size": BATCH, "shuffle": True}}
    loader = build_loader(config, "train", num_workers=workers, seed=seed)

    def epoch(number: int) -> int:
        loader.set_epoch(number)
        return sum(int(batch["valid"].sum()) for batch in loader) // 2  # rows filling a short last batch are not
    return epoch


class DecodeLimit:
    """soundfile decoding, per random window, only the part of each block of a compressed pack under it (mixture
    and both sources; a FLAC block sought to the window's first frame, an Opus block from its start, each read to
    the window's end with libsndfile's ``sf_readf_short``, as the loader does: ``media.codecs.read_int16``),
    scaled into float32 batches: the least any reader of that pack does."""

    def __init__(self, pack_dir: str, seed: int = 0):
        from speechpack.loader.pack import open_pack
        from speechpack.media.codecs import codec as codec_row
        from speechpack.schemas.constants import STREAM_MIX, STREAM_TARGET
        pack = open_pack(pack_dir)
        self.seed = seed
        self.blocks = {s: pack.blocks[s] for s in (STREAM_MIX, STREAM_TARGET)}
        self.seeks = {s: codec_row(pack.blocks[s].codec).seeks for s in (STREAM_MIX, STREAM_TARGET)}
        self.arrays = {(k, s): np.asarray(pack.stream_array(k, s)) for k in range(len(pack.manifest.shards))
                       for s in (STREAM_MIX, STREAM_TARGET)}
        self.samples = []  # per sample: [(stream, segment, shard, scale)] mixture first
        for i in range(len(pack)):
            refs = []
            for stream in (STREAM_MIX, STREAM_TARGET):
                table = pack.streams[stream]
                for j in pack.segments_of(stream, i):
                    refs.append((stream, j, int(table.shard[j]), float(table.scale[j]) / 32768.0))
            self.samples.append((int(pack.num_frames[i]), refs))

    def window(self, stream: str, segment: int, shard: int, start: int) -> np.ndarray:
        import soundfile
        from speechpack.media.codecs import read_int16
        table = self.blocks[stream]
        rows = table.blocks_of(segment, start, start + CHUNK)
        data = self.arrays[(shard, stream)]
        size = table.block_frames
        origin = (rows.start - int(table.first[segment])) * size
        pieces = []
        for b in rows:  # the part of each block under the window: sought to its first frame where the codec seeks
            first, last = max(start - origin, 0), min(start + CHUNK - origin, size)
            with soundfile.SoundFile(io.BytesIO(data[int(table.start[b]):int(table.start[b] + table.size[b])]
                                                .tobytes())) as sound:
                if first and self.seeks[stream]:
                    sound.seek(first)
                else:
                    first = 0
                pieces.append(read_int16(sound, 1, last - first)[max(start - origin, 0) - first:, 0])
            origin += size
        return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]

    def epoch(self, number: int) -> int:
        rng = np.random.default_rng((self.seed, number))
        order = rng.permutation(len(self.samples))
        for first in range(0, len(order), BATCH):
            chosen = order[first:first + BATCH]
            mix = np.empty((2 * len(chosen), 1, CHUNK), dtype=np.float32)
            target = np.empty((2 * len(chosen), 1, CHUNK), dtype=np.float32)
            for r, i in enumerate(chosen):
                frames, refs = self.samples[i]
                start = int(rng.integers(0, frames - CHUNK + 1))
                stream, segment, shard, scale = refs[0]
                row = mix[2 * r, 0]
                row[...] = self.window(stream, segment, shard, start)
                row *= np.float32(scale)
                mix[2 * r + 1, 0] = row
                for k, (stream, segment, shard, scale) in enumerate(refs[1:3]):
                    dest = target[2 * r + k, 0]
                    dest[...] = self.window(stream, segment, shard, start)
                    dest *= np.float32(scale)
        return len(order)



def window_cost(pack_dir: str, repeats: int = 5) -> tuple[float, float]:
    """(best seconds to read one 60 s mixture whole, best seconds to read a 2 s window of it) through the reader
    (``Pack.read_segment``: the blocks under the window, decoded and scaled), a fresh segment view each time."""
    from speechpack.loader.pack import open_pack
    from speechpack.schemas.constants import STREAM_MIX
    pack = open_pack(pack_dir)
    frames = int(pack.streams[STREAM_MIX].length[0])
    start = (frames - CHUNK) // 2
    pack.read_segment(STREAM_MIX, 0)  # the stream file mapped and content-checked first
    whole, window = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        pack.read_segment(STREAM_MIX, 0)
        whole.append(time.perf_counter() - started)
        started = time.perf_counter()
        pack.read_segment(STREAM_MIX, 0, start, start + CHUNK)
        window.append(time.perf_counter() - started)
    return min(whole), min(window)


# ------------------------------------------------------------------------------------------ ASR

def build_asr_pack(corpus: dict, workdir: str) -> str:
    from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl
    from speechpack.packer.build.run import BuildOptions
    manifest = os.path.join(workdir, "asr.jsonl")
    with open(manifest, "w", encoding="utf-8") as fp:
        for row in corpus["rows"]:
            fp.write(json.dumps({"key": row["key"], "audio_filepath": row["mix"]["default"][0],
                                 "duration": row["frames"] / RATE, "text": "a b c", "language": "en",
                                 "corpus": "bench"}) + "\n")
    return build_asr_jsonl(manifest, BuildOptions(out=os.path.join(workdir, "asr-pcm16"), progress=False)).out


def asr_epoch(pack: str, workers: int):
    from speechpack.loader import build_loader
    config = {"task": "asr", "packs": [{"path": pack}],
              "dataset_args": {"batching_strategy": "STATIC", "batch_size": ASR_BATCH}}
    loader = build_loader(config, "train", num_workers=workers, seed=0)

    def epoch(number: int) -> int:
        loader.set_epoch(number)
        return sum(int(batch["source_seqs"].shape[0]) for batch in loader)  # STATIC batches of whole lines
    return epoch


def asr_limit_epoch(pack_dir: str):
    """soundfile decoding every block of every utterance, into padded float32 batches of ``ASR_BATCH``."""
    import soundfile
    from speechpack.media.codecs import read_int16
    from speechpack.loader.pack import open_pack
    from speechpack.schemas.constants import STREAM_AUDIO
    pack = open_pack(pack_dir)
    table, blocks = pack.streams[STREAM_AUDIO], pack.blocks[STREAM_AUDIO]
    arrays = {k: np.asarray(pack.stream_array(k, STREAM_AUDIO)) for k in range(len(pack.manifest.shards))}

    def epoch(number: int) -> int:
        order = np.random.default_rng(number).permutation(len(pack))
        for first in range(0, len(order), ASR_BATCH):
            chosen = order[first:first + ASR_BATCH]
            longest = int(pack.num_frames[chosen].max())
            batch = np.zeros((len(chosen), longest), dtype=np.float32)
            for r, i in enumerate(chosen):
                j = pack.segments_of(STREAM_AUDIO, int(i))[0]
                data = arrays[int(table.shard[j])]
                parts = []
                for b in range(int(blocks.first[j]), int(blocks.first[j + 1])):
                    with soundfile.SoundFile(io.BytesIO(data[int(blocks.start[b]):int(blocks.start[b] + blocks.size[b])]
                                                        .tobytes())) as sound:
                        parts.append(read_int16(sound, 1, sound.frames)[:, 0])
                signal = np.concatenate(parts)
                batch[r, :len(signal)] = signal
                batch[r, :len(signal)] *= np.float32(float(table.scale[j]) / 32768.0)
        return len(order)
    return epoch


# ------------------------------------------------------------------------------------------ measuring

def measure(jobs: dict, repeats: int, expected: int) -> dict[str, tuple[float, float]]:
    """Median (wall, cpu) seconds per epoch of each job, alternating; one untimed epoch each first."""
    for name, run in jobs.items():
        got = run(0)
        if got != expected:
            raise SystemExit(f"{name}: an epoch delivered {got}, expected {expected}")
    wall = {name: [] for name in jobs}
    cpu = {name: [] for name in jobs}
    for epoch in range(1, repeats + 1):
        for name, run in jobs.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            run(epoch)
            wall[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - started_cpu)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in jobs}


def table(title: str, times: dict[str, tuple[float, float]], units: float, unit: str, base: str | None) -> None:
    _log(f"\n  {title}")
    _log(f"  {'job':<34} {'s/epoch':>8} {'cpu s':>7} {unit:>12}" + (f"   vs {base}" if base else ""))
    for name, (wall, cpu) in times.items():
        ratio = f"   {times[base][0] / wall:5.2f}x" if base and base in times else ""
        _log(f"  {name:<34} {wall:8.3f} {cpu:7.3f} {units / wall:12,.1f}{ratio}")


def verdict(ok: bool) -> str:
    return "meets" if ok else "misses"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small corpus, one repeat, num_workers 0 (<1 min)")
    parser.add_argument("--workers", type=int, nargs="+", default=None, help="DataLoader workers (default 0 2)")
    parser.add_argument("--repeats", type=int, default=None, help="timed epochs per job (default 3; 1 with --quick)")
    parser.add_argument("--short-lines", type=int, default=None, help="2-5 s lines (default 160; 8 with --quick)")
    parser.add_argument("--long-lines", type=int, default=None, help="60 s lines (default 8)")
    parser.add_argument("--codecs", nargs="+", choices=COMPRESSED, default=None,
                        help="compressed codecs measured (default flac opus; --codecs flac skips Opus's slow encode)")
    parser.add_argument("--block-seconds", type=float, default=None,
                        help="--block-seconds of the compressed packs (default: the codecs' default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir", default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    global BLOCK_SECONDS
    from speechpack.media.codecs import DEFAULT_BLOCK_SECONDS
    BLOCK_SECONDS = DEFAULT_BLOCK_SECONDS if args.block_seconds is None else args.block_seconds
    workers = args.workers if args.workers is not None else ([0] if args.quick else [0, 2])
    repeats = args.repeats or (1 if args.quick else 3)
    short_lines = args.short_lines or (8 if args.quick else 160)
    long_lines = args.long_lines or 8
    chosen = tuple(args.codecs or COMPRESSED)
    if "flac" not in chosen:
        parser.error("--codecs: flac is measured always (every ratio is taken against it)")
    compressed = {"short": chosen, "long": tuple(c for c in chosen if c == "flac" or not args.quick)}
    import soundfile
    import torch
    torch.set_num_threads(1)
    figures: dict[str, object] = {}
    with bench_workdir("speechpack-codec-bench-", args.tmp_dir, args.keep, _log) as work:
        corpora = {"short": make_corpus(work, "short", short_lines, (2.0, 5.0), args.seed),
                   "long": make_corpus(work, "long", long_lines, (60.0, 60.0), args.seed + 1)}
        _log(f"corpus: real speech (LibriVox, codec2, ALSA prompts) at 16 kHz, two-speaker mixtures; short = "
             f"{short_lines} lines of 2-5 s ({corpora['short']['mix_hours'] * 60:.1f} min), long = {long_lines} "
             f"lines of 60 s ({corpora['long']['mix_hours'] * 60:.1f} min); libsndfile "
             f"{soundfile.__libsndfile_version__}, torch {torch.__version__} (1 thread); workers {workers}, "
             f"{repeats} repeat(s); {BLOCK_SECONDS:g} s blocks; load average {os.getloadavg()[0]:.1f}")
        packs: dict[tuple[str, str], str] = {}
        timing: dict[str, float] = {}
        for name, corpus in corpora.items():
            packs[(name, "pcm16")] = os.path.join(work, f"{name}-pcm16")
            timing[f"{name} build pcm16"] = build_pack(corpus["list"], packs[(name, "pcm16")])
            for codec in compressed[name]:
                packs[(name, codec)] = os.path.join(work, f"{name}-{codec}")
                timing[f"{name} convert pcm16->{codec}"] = convert(packs[(name, "pcm16")], packs[(name, codec)],
                                                                   codec)
                timing[f"{name} encode limit {codec}"] = encode_limit(corpus, codec)
                if name == "short" and build_writes_codecs():
                    timing[f"{name} build {codec}"] = build_pack(corpus["list"],
                                                                 os.path.join(work, f"{name}-{codec}-built"), codec)

        # ---- bytes per hour of stored audio
        _log("\n  pack bytes per hour of stored audio (mixture and both sources)")
        peer_dirs = {}
        for name, corpus in corpora.items():
            files = write_flac_files(corpus, os.path.join(work, f"{name}-files"))
            peer_dirs[(name, "files")] = files
            write_flac_tars(files, os.path.join(work, f"{name}-wds"))
            for fmt in compressed[name]:
                write_shar(corpus, os.path.join(work, f"{name}-shar-{fmt}"), fmt)
            hours = corpus["stored_hours"]
            sizes = {"source WAV (PCM_16)": corpus["wav_bytes"]}
            sizes.update({f"speechpack {c}": dir_bytes(packs[(name, c)]) for c in ("pcm16", *compressed[name])})
            sizes["per-file FLAC"] = dir_bytes(os.path.join(work, f"{name}-files"))
            sizes.update({f"Lhotse Shar {fmt}": dir_bytes(os.path.join(work, f"{name}-shar-{fmt}"))
                          for fmt in compressed[name]})
            _log(f"  {name}:")
            for label, size in sizes.items():
                _log(f"    {label:<24} {size / hours / 1e6:8.1f} MB/h   {size / sizes['speechpack pcm16']:5.3f}x pcm16")
            figures[f"{name}_bytes"] = {k: v / hours for k, v in sizes.items()}

        # ---- build and convert against the encode limit
        _log("\n  build and convert time, against the encode limit (soundfile encoding the same blocks alone)")
        for name in corpora:
            for codec in compressed[name]:
                limit = timing[f"{name} encode limit {codec}"]
                for what in (f"convert pcm16->{codec}", f"build {codec}"):
                    if f"{name} {what}" in timing:
                        seconds = timing[f"{name} {what}"]
                        _log(f"    {name} {what:<22} {seconds:7.2f} s, encode limit {limit:6.2f} s: "
                             f"{seconds / limit:5.2f}x (target <= {TARGET_BUILD}x: {verdict(seconds / limit <= TARGET_BUILD)})")
                        figures[f"{name} {what}"] = (seconds, limit)
            _log(f"    {name} build pcm16            {timing[f'{name} build pcm16']:7.2f} s")

        # ---- the window cost on 60 s utterances
        whole, window = window_cost(packs[("long", "flac")])
        _log(f"\n  a 2 s window of a 60 s FLAC utterance through the reader (Pack.read_segment): {window * 1e3:.2f} "
             f"ms, the whole utterance {whole * 1e3:.2f} ms: {window / whole:.3f}x (target <= {TARGET_WINDOW_COST}: "
             f"{verdict(window / whole <= TARGET_WINDOW_COST)})")
        figures["window_cost"] = (window, whole)

        # ---- TSE loader throughput
        for name, corpus in corpora.items():
            frames = {row["key"]: row["frames"] for row in corpus["rows"]}
            count = len(corpus["rows"])
            warm_files([p for p in glob.glob(os.path.join(work, "**", "*"), recursive=True)
                        if os.path.isfile(p) and f"{name}-" in os.path.basename(os.path.dirname(p)) + "/"])
            for n_workers in workers:
                jobs = {f"speechpack {c}": speechpack_epoch(packs[(name, c)], n_workers)
                        for c in ("pcm16", *compressed[name])}
                if n_workers == 0:
                    for codec in compressed[name]:
                        jobs[f"decode limit {codec}"] = DecodeLimit(packs[(name, codec)]).epoch
                for fmt in compressed[name]:
                    jobs[f"Lhotse Shar {fmt}"] = peer_epoch(*shar_dataset(os.path.join(work, f"{name}-shar-{fmt}"),
                                                                          args.seed), n_workers, float_rows=True)
                jobs["WebDataset FLAC tars"] = peer_epoch(*flac_tars_dataset(os.path.join(work, f"{name}-wds"),
                                                                             frames, args.seed), n_workers, False)
                jobs["per-file FLAC"] = peer_epoch(*flac_files_dataset(peer_dirs[(name, "files")], frames, args.seed),
                                                   n_workers, False)
                times = measure(jobs, repeats, count)
                table(f"TSE, {name} lines, 2 s windows, num_workers={n_workers} (mixtures/s)", times, count,
                      "mixtures/s", "speechpack flac")
                figures[f"tse {name} w{n_workers}"] = times

        # ---- ASR waveform batches
        asr = {"pcm16": build_asr_pack(corpora["short"], work)}
        for codec in chosen:
            asr[codec] = os.path.join(work, f"asr-{codec}")
            convert(asr["pcm16"], asr[codec], codec)
        count = len(corpora["short"]["rows"])
        for n_workers in workers:
            jobs = {f"speechpack {c}": asr_epoch(asr[c], n_workers) for c in ("pcm16", *chosen)}
            if n_workers == 0:
                for codec in chosen:
                    jobs[f"decode limit {codec}"] = asr_limit_epoch(asr[codec])
            times = measure(jobs, repeats, count)
            table(f"ASR waveform batches of {ASR_BATCH}, short lines, num_workers={n_workers} (utterances/s)", times,
                  count, "utt/s", "speechpack flac")
            figures[f"asr w{n_workers}"] = times

        summary(figures, workers, compressed)
    return 0


def summary(figures: dict, workers: list[int], compressed: dict[str, tuple[str, ...]]) -> None:
    """The targets of issue 32, one line each (what docs/performance.md's summary table holds)."""
    _log(f"\n  summary (metric: value, baseline, ratio, verdict); load average now {os.getloadavg()[0]:.1f}")
    for name in ("short", "long"):
        sizes = figures[f"{name}_bytes"]
        ratio = sizes["speechpack flac"] / sizes["speechpack pcm16"]
        _log(f"  {name}: FLAC pack bytes/h {sizes['speechpack flac'] / 1e6:.1f} MB, pcm16 "
             f"{sizes['speechpack pcm16'] / 1e6:.1f} MB: {ratio:.3f}x ({verdict(ratio <= TARGET_FLAC_BYTES)} <= "
             f"{TARGET_FLAC_BYTES})" + (f"; opus {sizes['speechpack opus'] / sizes['speechpack pcm16']:.3f}x"
                                        if "speechpack opus" in sizes else ""))
        tse = figures.get(f"tse {name} w0")
        if tse:
            ours, limit = tse["speechpack flac"], tse["decode limit flac"]
            _log(f"  {name}: TSE FLAC loader (w0) {limit[0] / ours[0]:.2f}x its decode limit, wall "
                 f"({verdict(limit[0] / ours[0] >= TARGET_VS_LIMIT)} >= {TARGET_VS_LIMIT}); "
                 f"{limit[1] / ours[1]:.2f}x in CPU time")
            if "speechpack opus" in tse:
                ours, limit = tse["speechpack opus"], tse["decode limit opus"]
                _log(f"  {name}: TSE Opus loader (w0) {limit[0] / ours[0]:.2f}x its decode limit, wall; "
                     f"{limit[1] / ours[1]:.2f}x in CPU time")
        for n in workers:
            tse = figures.get(f"tse {name} w{n}")
            if not tse:
                continue
            ours = tse["speechpack flac"][0]
            peers = {k: v[0] for k, v in tse.items() if k in ("Lhotse Shar flac", "WebDataset FLAC tars",
                                                               "per-file FLAC")}
            best = min(peers, key=peers.get)
            _log(f"  {name}: TSE FLAC loader (w{n}) {peers[best] / ours:.2f}x the best FLAC peer ({best}) "
                 f"({verdict(peers[best] / ours >= TARGET_VS_PEER)} >= {TARGET_VS_PEER}); Lhotse Shar FLAC "
                 f"{peers['Lhotse Shar flac'] / ours:.2f}x")
        for codec in compressed[name]:
            for what in (f"convert pcm16->{codec}", f"build {codec}"):
                if f"{name} {what}" in figures:
                    seconds, limit = figures[f"{name} {what}"]
                    _log(f"  {name}: {what} {seconds / limit:.2f}x the encode limit "
                         f"({verdict(seconds / limit <= TARGET_BUILD)} <= {TARGET_BUILD})")
    window, whole = figures["window_cost"]
    _log(f"  long: 2 s window of a 60 s FLAC utterance {window / whole:.3f}x the whole "
         f"({verdict(window / whole <= TARGET_WINDOW_COST)} <= {TARGET_WINDOW_COST})")
    asr = figures.get("asr w0")
    if asr:
        _log(f"  ASR FLAC waveform batches (w0) {asr['decode limit flac'][0] / asr['speechpack flac'][0]:.2f}x "
             f"their decode limit")


if __name__ == "__main__":
    sys.exit(main())
