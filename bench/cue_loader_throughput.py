"""Training-loader throughput with speaker cues (an audio enrollment and a raw face video per target), against
WeSep's way of reading them: decoding the target's whole video with PyAV for every sample.

    python bench/cue_loader_throughput.py [--lines 256] [--batch-size 8] [--repeats 5] [--baseline-batches 4]
                                          [--videos 48] [--what-if]

One process, ``num_workers=0``, state ``train``, 4 s chunks, warm page cache (every file is read once before
timing).  Measured figures and their reading: ``docs/performance.md`` ("Loading with cues").

**Corpus.**  Real speech: the five LibriVox recordings of ``pocketsphinx-testdata`` (16 kHz, 3-7 s each; one
reader, so each recording stands for a speaker).  ``--lines`` two-speaker mixtures of 8-12 s, each source a
cyclic window of its speaker's recording (SIR in [-5, 5] dB), written as PCM_16 16 kHz WAV, in a WeSep raw list.
Enrollments: ``--enrollments`` crops of 2.5-6 s per speaker, as WAV, in ``audio.json`` (``spk_id`` -> several
``{utt_id, path}``, ``policy.type: random``, so a target's enrollment is drawn per sample).  Face videos: ``--videos``
H.264 mp4 clips (PyAV, libx264, 96x96 RGB, 25 fps, yuv420p), made from a real talking-face video (kphotoalbum's
demo ``movie.avi`` at ``$SPEECHPACK_TEST_VIDEO`` or ``.cache/test-data/kphotoalbum/movie.avi``; ``scripts/test.sh``
extracts it), its frames centre-cropped, scaled, played forwards and backwards at 25 fps and jittered frame to frame
(a shift of up to 2 px and a brightness gain of +-6 %); without the movie, a synthetic moving pattern (the script
says which).  The clips come in pairs of equal length, one length per pair, and every mixture is exactly as long
as one pair: its two ``mix_spk_id`` keys (``"<key>::<speaker>"``) point to that pair in ``visual.json``.  Clips are
shared between mixtures (mp4 encoding is the slow part of making the corpus); the pack stores each clip once,
and the baseline decodes the file of every target of every sample either way.
``packer.adapters.wesep.build_wesep(list, BuildOptions(...), cues=cues.yaml)`` packs it.

**Jobs** (the same delivery: batches of ``--batch-size`` mixtures, one row per target, ``wav_mix`` and
``wav_target`` float32 ``[2 B, 1, 64000]``, ``audio_aux`` float32 ``[2 B, 1, T_min]`` (enrollments prefix-cropped
to the shortest) with ``audio_aux_present``, ``visual_aux`` uint8 ``[2 B, 96, 96, 3, 100]`` with
``visual_aux_present``):

- speechpack: ``loader.build_loader(config, "train", num_workers=0, seed=0)`` with ``dataset_args.cues``
  ``{audio: {use: true}, visual: {use: true}}``, built once; one whole epoch per run (``set_epoch``);
- WeSep-style: the raw pipeline of ``bench/loader_throughput.py`` (``json.loads`` of each line, mixture and sources
  read whole with ``soundfile``, the shuffle buffer, ``random_chunk``'s one 4 s window, ``tse_collate_fn``'s rows),
  plus WeSep's cue layer per target: ``random.choice`` of the speaker's enrollments read whole with ``soundfile``,
  and the video of the target's ``mix_spk_id`` key decoded whole with PyAV as ``torchvision.io.read_video`` does
  (every frame ``to_ndarray("rgb24")``, stacked into a uint8 ``[T, H, W, C]`` tensor), padded with its last frame
  or trimmed to the audio's duration, cut to the chunk and moved to ``[H, W, C, T]``; collated with
  ``torch.stack`` (``audio_aux`` prefix-cropped to the shortest, ``visual_aux`` edge-padded to the longest).  A
  run takes the first ``--baseline-batches`` batches of an epoch's shuffled list (a whole epoch would take
  minutes: every target decodes ~250 frames); the shuffle buffer holds those lines only, so every line read is
  delivered.  Per mixture the work is that of a whole epoch.

Before timing, the baseline's video path is checked to reproduce speechpack's ``visual_aux`` of the first batch
bit for bit from that batch's windows (``chunk_ratio``), and every ``audio_aux`` row to be a prefix of one of its
speaker's enrollment files.  Runs alternate between the jobs, after an untimed warm-up of each.  A reference job
(speechpack on the same pack without cues) shows what the cues cost.  ``--what-if`` adds two patched speechpack jobs
(the raw_video read function, ``loader.pack.cues.READERS["raw_video"]``, replaced in this process only, each checked
to give the same first batch bit for bit): the bank handing ``video_chunk`` a view of the mapped video instead of a
copy of the whole video; and the bank storing videos time-last (``[H, W, C, T]``, the batch's layout), simulated
with a transposed in-memory copy of every video, so the chunk's copy moves runs of frames instead of single bytes.

Unit: **audio seconds per second = mixtures delivered x 4 s / wall seconds**.  Target: speechpack >= 20x the
WeSep-style job, on the best of ``--repeats`` runs (medians printed too).  Missing it prints ``BELOW TARGET`` and
still exits 0; only errors exit non-zero.  Then cProfile's top functions of one speechpack epoch.
"""

from __future__ import annotations

import argparse
import cProfile
import glob
import io
import json
import os
import pstats
import random
import statistics
import sys
import time

import av
import numpy as np
import soundfile
import torch
import yaml

_BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_BENCH))
sys.path.insert(0, _BENCH)

from speechpack.loader.pack.cues import READERS  # noqa: E402
from speechpack.loader import build_loader  # noqa: E402
from workdir import bench_workdir  # noqa: E402
from loader_throughput import (  # noqa: E402
    CHUNK_LEN,
    CHUNK_SECONDS,
    RATE,
    WESEP_SHUFFLE_SIZE,
    _load,
    _read_16k,
    _wesep_batch,
    _wesep_parse_raw,
    _wesep_random_chunk,
    _wesep_resample,
    _wesep_shuffle,
    _log,
    loader_config,
    pack_files,
    speechpack_epoch,
    warm_files,
    wesep_collate,
)
from speechpack.packer.adapters.wesep import build_wesep  # noqa: E402
from speechpack.packer.build.run import BuildOptions  # noqa: E402

TARGET_VS_WESEP = 20.0
LIBRIVOX_GLOB = "/usr/share/pocketsphinx/test/data/librivox/*.wav"
FPS = 25
SIDE = 96  # frames are SIDE x SIDE RGB
JITTER = 2  # pixels of frame-to-frame shift
PIECE_SECONDS = (8.0, 12.0)
ENROLL_SECONDS = (2.5, 6.0)
_REPO = os.path.dirname(_BENCH)
_DEFAULT_MOVIE = os.path.join(_REPO, ".cache", "test-data", "kphotoalbum", "movie.avi")


# ------------------------------------------------------------------------------------------ corpus

def face_frames() -> tuple[list[np.ndarray], float, str]:
    """The frames the clips are made of, ``(SIDE + 2 JITTER)`` square RGB; their rate; and what they are."""
    path = os.environ.get("SPEECHPACK_TEST_VIDEO") or _DEFAULT_MOVIE
    side = SIDE + 2 * JITTER
    if os.path.isfile(path):
        frames = []
        with av.open(path) as container:
            stream = container.streams.video[0]
            rate = float(stream.average_rate)
            for frame in container.decode(stream):
                image = frame.to_ndarray(format="rgb24")
                h, w, _ = image.shape
                s = min(h, w)
                square = np.ascontiguousarray(image[(h - s) // 2:(h + s) // 2, (w - s) // 2:(w + s) // 2])
                frames.append(av.VideoFrame.from_ndarray(square, format="rgb24")
                              .reformat(width=side, height=side).to_ndarray(format="rgb24"))
        return frames, rate, (f"real talking-face video {path} ({len(frames)} frames at {rate:g} fps, "
                              f"{w}x{h}), centre-cropped and scaled")
    y, x = np.mgrid[0:side, 0:side]
    frames = [np.stack([(x * 4 + i * 9) % 256, (y * 5 + i * 3) % 256, np.full_like(x, 40 + 3 * i)],
                       axis=-1).astype(np.uint8) for i in range(64)]
    return frames, float(FPS), (f"SYNTHETIC moving pattern (no real video at {path}: run scripts/test.sh or set "
                                f"SPEECHPACK_TEST_VIDEO)")


def write_clip(path: str, base: list[np.ndarray], base_rate: float, frames: int, rng: np.random.Generator) -> None:
    """``frames`` frames at 25 fps: ``base`` played forwards and backwards from a random phase, each frame shifted
    by up to ``JITTER`` px and scaled in brightness, encoded with libx264 (yuv420p) in an mp4."""
    cycle = 2 * len(base) - 2
    phase = rng.uniform(0, cycle / base_rate)
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = SIDE, SIDE, "yuv420p"
        for i in range(frames):
            k = int((phase + i / FPS) * base_rate) % cycle
            k = k if k < len(base) else cycle - k
            dy, dx = rng.integers(0, 2 * JITTER + 1, size=2)
            image = base[k][dy:dy + SIDE, dx:dx + SIDE].astype(np.float32) * rng.uniform(0.94, 1.06)
            image = np.clip(image, 0, 255).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def build_corpus(workdir: str, lines: int, videos: int, enrollments: int, seed: int) -> tuple[dict, dict]:
    """WAVs, mp4 clips, the WeSep list, audio.json, visual.json and cues.yaml; returns (paths, facts)."""
    rng = np.random.default_rng(seed)
    recordings = sorted(glob.glob(LIBRIVOX_GLOB))
    if len(recordings) < 2:
        raise SystemExit(f"no recordings match {LIBRIVOX_GLOB}; install pocketsphinx-testdata "
                         f"(apt-get install -y --no-install-recommends pocketsphinx-testdata)")
    speakers = {f"lv{os.path.splitext(p)[0].rsplit('-', 1)[-1]}": _read_16k(p) for p in recordings}
    names = sorted(speakers)
    for sub in ("wav", "enroll", "video"):
        os.makedirs(os.path.join(workdir, sub))

    started = time.perf_counter()
    audio_index = {}
    for spk in names:
        audio = speakers[spk]
        seconds = len(audio) / RATE
        entries = []
        for e in range(enrollments):
            length = int(rng.uniform(min(ENROLL_SECONDS[0], 0.8 * seconds), min(ENROLL_SECONDS[1], seconds)) * RATE)
            start = int(rng.integers(0, len(audio) - length + 1))
            path = os.path.join(workdir, "enroll", f"{spk}-e{e}.wav")
            soundfile.write(path, audio[start:start + length], RATE, subtype="PCM_16")
            entries.append({"utt_id": f"{spk}/e{e}", "path": path})
        audio_index[spk] = entries

    base, base_rate, video_source = face_frames()
    pairs = max(1, videos // 2)
    pair_frames = np.linspace(PIECE_SECONDS[0] * FPS, PIECE_SECONDS[1] * FPS, pairs).round().astype(int)
    clips = []  # per pair: two paths
    for p, frames in enumerate(pair_frames):
        pair = []
        for j in range(2):
            path = os.path.join(workdir, "video", f"clip{p:03d}-{j}.mp4")
            write_clip(path, base, base_rate, int(frames), rng)
            pair.append(path)
        clips.append(pair)
    video_s = time.perf_counter() - started

    visual_index = {}
    list_path = os.path.join(workdir, "raw.list")
    seconds_total = 0.0
    with open(list_path, "w", encoding="utf-8") as fp:
        for k in range(lines):
            key = f"mix-{k:06d}"
            p = int(rng.integers(pairs))
            n = int(pair_frames[p]) * RATE // FPS  # exactly as long as the clips
            spk1, spk2 = rng.choice(names, size=2, replace=False)
            sources = []
            for spk in (spk1, spk2):
                audio = speakers[spk]
                start = int(rng.integers(len(audio)))
                sources.append(np.take(audio, np.arange(start, start + n) % len(audio)))
            s1, s2 = sources
            gain = 10 ** (rng.uniform(-5, 5) / 20)
            s1, s2 = s1 / (1 + gain), s2 * (gain / (1 + gain))
            peak = max(float(np.abs(s1 + s2).max()), 1e-9)
            if peak > 0.99:
                s1, s2 = s1 * (0.99 / peak), s2 * (0.99 / peak)
            files = []
            for role, signal in (("mix", s1 + s2), ("s1", s1), ("s2", s2)):
                path = os.path.join(workdir, "wav", f"m{k:04d}-{role}.wav")
                soundfile.write(path, np.clip(signal, -1.0, 32767 / 32768), RATE, subtype="PCM_16")
                files.append(path)
            fp.write(json.dumps({"key": key, "spk": [str(spk1), str(spk2)], "mix": {"default": [files[0]]},
                                 "src": {str(spk1): [files[1]], str(spk2): [files[2]]}}) + "\n")
            for j, spk in enumerate((spk1, spk2)):
                visual_index[f"{key}::{spk}"] = [{"utt_id": f"{spk}/clip{p:03d}-{j}", "path": clips[p][j]}]
            seconds_total += n / RATE

    paths = {"list": list_path, "audio": os.path.join(workdir, "audio.json"),
             "visual": os.path.join(workdir, "visual.json"), "cues": os.path.join(workdir, "cues.yaml")}
    for name, obj in (("audio", audio_index), ("visual", visual_index)):
        with open(paths[name], "w", encoding="utf-8") as fp:
            json.dump(obj, fp)
    cues = {"cues": {
        "audio": {"type": "wav", "format": "waveform", "scope": "speaker", "guaranteed": True,
                  "policy": {"type": "random", "key": "spk_id", "resource": paths["audio"]}},
        "visual": {"type": "mp4", "format": "raw_video", "scope": "speaker", "guaranteed": True,
                   "policy": {"type": "fixed", "key": "mix_spk_id", "resource": paths["visual"]}}}}
    with open(paths["cues"], "w", encoding="utf-8") as fp:
        yaml.safe_dump(cues, fp, sort_keys=False)
    all_files = glob.glob(os.path.join(workdir, "*", "*"))
    facts = {"speakers": len(names), "recordings": len(recordings), "lines": lines, "hours": seconds_total / 3600,
             "min_s": min(pair_frames) / FPS, "max_s": max(pair_frames) / FPS, "clips": 2 * pairs,
             "enrollments": enrollments * len(names), "video_source": video_source, "video_s": video_s,
             "audio_index": audio_index, "visual_index": visual_index,
             "wav_bytes": sum(os.path.getsize(p) for p in all_files if p.endswith(".wav")),
             "mp4_bytes": sum(os.path.getsize(p) for p in all_files if p.endswith(".mp4")), "files": all_files}
    return paths, facts


# ------------------------------------------------------------------------------------------ WeSep-style job

def read_video_pyav(path: str) -> tuple[torch.Tensor, float]:
    """What ``torchvision.io.read_video`` (PyAV backend) gives for a video-only file: every frame decoded and
    converted to RGB, stacked into a uint8 ``[T, H, W, C]`` tensor; and the stream's average frame rate."""
    with av.open(path) as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        fps = float(stream.average_rate)
    return torch.as_tensor(np.stack(frames)), fps


def wesep_video(video: torch.Tensor, fps: float, ratio: dict, rate: int) -> torch.Tensor:
    """WeSep's raw_video processing: pad with the last frame or trim to the audio's duration, cut to the chunk
    (``docs/loader.md``'s frame arithmetic: ``round(span * fps)`` frames from ``round(start * fps)``, the last frame
    repeated past the end), ``[H, W, C, T]``."""
    orig_len = ratio["orig_len"]
    aligned = max(1, int(round(orig_len / rate * fps)))
    if video.shape[0] < aligned:
        video = torch.cat([video, video[-1:].expand(aligned - video.shape[0], -1, -1, -1)])
    else:
        video = video[:aligned]
    start = round(ratio["start_ratio"] * orig_len)
    span = round((ratio["end_ratio"] - ratio["start_ratio"]) * orig_len) / rate
    need = max(1, int(round(span * fps)))
    first = max(0, min(int(round(start / rate * fps)), aligned - 1))
    window = video[first:first + need]
    if window.shape[0] < need:
        window = torch.cat([window, window[-1:].expand(need - window.shape[0], -1, -1, -1)])
    return window.permute(1, 2, 3, 0)


def _wesep_cue_layer(data, audio_index: dict, visual_index: dict, rate: int):
    """WeSep's cue layer for ``audio`` (wav/waveform, random) and ``visual`` (mp4/raw_video, fixed, mix_spk_id)."""
    for sample in data:
        for i in range(1, sample["num_speaker"] + 1):
            spk = sample[f"spk{i}"]
            wav, sample_rate = _load(random.choice(audio_index[spk])["path"])
            if sample_rate != rate:
                raise RuntimeError("the benchmark's enrollments are at the training rate; WeSep would resample here")
            sample[f"audio_spk{i}"] = wav
            video, fps = read_video_pyav(visual_index[f"{sample['key']}::{spk}"][0]["path"])
            sample[f"visual_spk{i}"] = wesep_video(video, fps, sample["chunk_ratio"], rate)
        yield sample


def wesep_cue_collate(group: list[dict]) -> dict:
    """``tse_collate_fn``: the audio fields, then ``audio_aux`` (prefix-cropped to the shortest) and ``visual_aux``
    (edge-padded to the longest), each with its ``_present`` flags, stacked with ``torch.stack``."""
    batch = wesep_collate(group)
    for field, align in (("audio", "min"), ("visual", "max")):
        rows = [sample[f"{field}_spk{i + 1}"] for sample in group for i in range(sample["num_speaker"])]
        if align == "min":
            length = min(row.shape[-1] for row in rows)
            rows = [row[..., :length] for row in rows]
        else:
            length = max(row.shape[-1] for row in rows)
            rows = [row if row.shape[-1] == length else
                    torch.cat([row, row[..., -1:].expand(*row.shape[:-1], length - row.shape[-1])], dim=-1)
                    for row in rows]
        batch[f"{field}_aux"] = torch.stack(rows)
        batch[f"{field}_aux_present"] = torch.ones(len(rows), dtype=torch.bool)
    return batch


def wesep_run(lines: list[str], audio_index: dict, visual_index: dict, batch_size: int, batches: int,
              epoch: int) -> int:
    """The first ``batches`` batches of an epoch of WeSep's raw pipeline with cues; returns the mixtures delivered."""
    order = list(range(len(lines)))
    random.Random(epoch).shuffle(order)  # DataList / DistributedSampler
    order = order[:batches * batch_size]
    random.seed(epoch)
    data = _wesep_parse_raw(lines, order)
    data = _wesep_shuffle(data, WESEP_SHUFFLE_SIZE)
    data = _wesep_resample(data, RATE)
    data = _wesep_random_chunk(data, CHUNK_LEN)
    data = _wesep_cue_layer(data, audio_index, visual_index, RATE)
    mixtures = 0
    for group in _wesep_batch(data, batch_size):
        batch = wesep_cue_collate(group)
        mixtures += len(group)
        rows = 2 * len(group)
        assert batch["wav_mix"].shape == (rows, 1, CHUNK_LEN)
        assert batch["visual_aux"].shape == (rows, SIDE, SIDE, 3, CHUNK_SECONDS * FPS)
        assert batch["audio_aux"].dtype == torch.float32 and batch["audio_aux"].shape[:2] == (rows, 1)
    return mixtures


# ------------------------------------------------------------------------------------------ checks

def check_first_batch(batch: dict, audio_index: dict, visual_index: dict) -> None:
    """The baseline's video path reproduces speechpack's ``visual_aux`` from the batch's windows, and every
    ``audio_aux`` row is a prefix of one of its speaker's enrollments."""
    rows = len(batch["key"])
    if tuple(batch["visual_aux"].shape) != (rows, SIDE, SIDE, 3, CHUNK_SECONDS * FPS):
        raise SystemExit(f"unexpected visual_aux of shape {tuple(batch['visual_aux'].shape)}")
    enrollments = {spk: [_load(e["path"])[0] for e in entries] for spk, entries in audio_index.items()}
    length = batch["audio_aux"].shape[-1]
    for r, (key, spk, ratio) in enumerate(zip(batch["key"], batch["spk"], batch["chunk_ratio"])):
        video, fps = read_video_pyav(visual_index[f"{key}::{spk}"][0]["path"])
        if not torch.equal(wesep_video(video, fps, ratio, RATE), batch["visual_aux"][r]):
            raise SystemExit(f"row {r} ({key}::{spk}): the baseline's video differs from speechpack's visual_aux")
        if not any(e.shape[-1] >= length and torch.equal(e[:, :length], batch["audio_aux"][r])
                   for e in enrollments[spk]):
            raise SystemExit(f"row {r} ({key}, {spk}): audio_aux is not a prefix of one of the speaker's enrollments")
    if not (batch["audio_aux_present"].all() and batch["visual_aux_present"].all()):
        raise SystemExit("a row lacks a cue")


# ------------------------------------------------------------------------------------------ what-ifs

def _read_raw_video_view(bank, item: int, data: np.ndarray) -> tuple[np.ndarray, float]:
    """What-if: the raw_video read function returning a read-only view of the mapped frames instead of a
    copy of the whole video (``video_chunk`` copies the chunk's frames anyway)."""
    shape = tuple(int(bank.field(n, item)) for n in ("frames", "height", "width", "channels"))
    offset = int(bank.field("offset", item))
    return data[offset:offset + int(np.prod(shape))].reshape(shape), float(bank.field("fps", item))


_TIME_LAST: dict[tuple[str, int], tuple[np.ndarray, float]] = {}


def _read_raw_video_time_last(bank, item: int, data: np.ndarray) -> tuple[np.ndarray, float]:
    """What-if: the bank storing each video time-last, ``[H, W, C, T]`` (the batch's layout), simulated by a
    transposed copy of every item made on first use (the warm-up epoch); handed to ``video_chunk`` as a
    ``[T, H, W, C]`` view, whose window's final copy then moves runs of contiguous frames instead of single bytes."""
    key = (bank.directory, item)
    if key not in _TIME_LAST:
        frames, fps = _read_raw_video_view(bank, item, data)
        _TIME_LAST[key] = (np.ascontiguousarray(np.moveaxis(frames, 0, -1)), fps)
    frames, fps = _TIME_LAST[key]
    return np.moveaxis(frames, -1, 0), fps


#: --what-if jobs: name -> the replacement of ``loader.pack.cues.READERS["raw_video"]``; each checked bit for bit.
WHAT_IFS = {"what-if: bank video as a view": _read_raw_video_view,
            "what-if: video stored [H, W, C, T]": _read_raw_video_time_last}


class patched:
    """``loader.pack.cues.READERS["raw_video"]`` replaced in this process while the block runs."""

    def __init__(self, read):
        self.read = read

    def __enter__(self):
        self.saved = READERS["raw_video"]
        READERS["raw_video"] = self.read

    def __exit__(self, *exc):
        READERS["raw_video"] = self.saved


def check_what_if(loader, read) -> None:
    """The patched loader gives the same first batch, bit for bit."""
    loader.set_epoch(0)
    want = next(iter(loader))
    with patched(read):
        loader.set_epoch(0)
        got = next(iter(loader))
    for name in ("visual_aux", "audio_aux", "wav_mix", "wav_target"):
        if not torch.equal(want[name], got[name]):
            raise SystemExit(f"the what-if {read.__name__} changes {name}")


# ------------------------------------------------------------------------------------------ main

def run(args, workdir: str) -> None:
    lines = -(-args.lines // args.batch_size) * args.batch_size  # whole batches: no tail padding to count
    if args.baseline_batches * args.batch_size > lines:
        raise SystemExit("--baseline-batches x --batch-size is more than the list holds")
    started = time.perf_counter()
    paths, corpus = build_corpus(workdir, lines, args.videos, args.enrollments, args.seed)
    corpus_s = time.perf_counter() - started
    pack_path = os.path.join(workdir, "pack")
    started = time.perf_counter()
    summary = build_wesep(paths["list"], BuildOptions(out=pack_path, workers=args.pack_workers, progress=False),
                          cues=paths["cues"])
    pack_s = time.perf_counter() - started
    pack_bytes = sum(os.path.getsize(p) for p in pack_files(pack_path))
    _log(f"corpus: {corpus['lines']} two-speaker 16 kHz mixtures of {corpus['min_s']:.1f}-{corpus['max_s']:.1f} s "
         f"({corpus['hours'] * 60:.1f} min) from {corpus['recordings']} LibriVox recordings (one reader; one "
         f"pseudo-speaker each), {corpus['enrollments']} enrollments ({args.enrollments} per speaker, random "
         f"policy), {corpus['clips']} face clips {SIDE}x{SIDE} {FPS} fps libx264 ({corpus['mp4_bytes'] / 1e6:.1f} MB "
         f"of mp4, made in {corpus['video_s']:.1f} s), {corpus['wav_bytes'] / 1e6:.0f} MB of WAV; built in "
         f"{corpus_s:.1f} s")
    _log(f"video source: {corpus['video_source']}")
    _log(f"pack: {summary.manifest.totals['samples']} samples with cues audio + visual, {pack_bytes / 1e6:.0f} MB, "
         f"packed in {pack_s:.1f} s (workers={args.pack_workers})")
    _log(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, numpy {np.__version__}, "
         f"torch {torch.__version__}, PyAV {av.__version__} (libavcodec "
         f"{'.'.join(map(str, av.library_versions['libavcodec']))}), soundfile {soundfile.__version__}")

    with open(paths["list"], encoding="utf-8") as fp:
        list_lines = [text for text in fp.read().splitlines() if text.strip()]
    audio_index, visual_index = corpus["audio_index"], corpus["visual_index"]
    warm_files(corpus["files"] + pack_files(pack_path))

    cues = {"audio": {"use": True}, "visual": {"use": True}}
    loader = build_loader(loader_config(pack_path, args.batch_size, cues=cues), "train", num_workers=0, seed=0)
    plain = build_loader(loader_config(pack_path, args.batch_size), "train", num_workers=0, seed=0)
    first = next(iter(loader))
    check_first_batch(first, audio_index, visual_index)
    _log(f"check: the baseline's video path reproduces speechpack's visual_aux of the first batch bit for bit "
         f"({tuple(first['visual_aux'].shape)} uint8), and every audio_aux row ({tuple(first['audio_aux'].shape)}) "
         f"is a prefix of one of its speaker's enrollments")
    del first

    expected = speechpack_epoch(loader, 0)  # warm-up
    base_expected = args.baseline_batches * args.batch_size
    if speechpack_epoch(plain, 0) != expected or expected != lines:
        raise SystemExit("the speechpack jobs deliver different numbers of mixtures")
    if wesep_run(list_lines, audio_index, visual_index, args.batch_size, args.baseline_batches, 0) != base_expected:
        raise SystemExit("the WeSep-style job delivered an unexpected number of mixtures")

    sp_name, base_name = "speechpack, cues audio + visual", "WeSep-style (PyAV per sample)"
    jobs = {
        sp_name: (lambda e: speechpack_epoch(loader, e), expected),
        base_name: (lambda e: wesep_run(list_lines, audio_index, visual_index, args.batch_size,
                                        args.baseline_batches, e), base_expected),
        "speechpack, no cues (reference)": (lambda e: speechpack_epoch(plain, e), expected),
    }
    if args.what_if:
        def patched_epoch(read):
            def epoch(e: int) -> int:
                with patched(read):
                    return speechpack_epoch(loader, e)
            return epoch

        for name, read in WHAT_IFS.items():
            check_what_if(loader, read)
            patched_epoch(read)(0)  # warm-up (and the time-last copies)
            jobs[name] = (patched_epoch(read), expected)
    seconds = {name: [] for name in jobs}
    for repeat in range(args.repeats):
        names = list(jobs) if repeat % 2 == 0 else list(reversed(jobs))
        for name in names:
            job, want = jobs[name]
            started = time.perf_counter()
            mixtures = job(repeat + 1)
            seconds[name].append(time.perf_counter() - started)
            if mixtures != want:
                raise SystemExit(f"{name} delivered {mixtures} mixtures, expected {want}")

    _log(f"\nbatches of {args.batch_size} mixtures = {2 * args.batch_size} rows: wav_mix, wav_target "
         f"[{2 * args.batch_size}, 1, {CHUNK_LEN}] float32, audio_aux [{2 * args.batch_size}, 1, T_min] float32, "
         f"visual_aux [{2 * args.batch_size}, {SIDE}, {SIDE}, 3, {CHUNK_SECONDS * FPS}] uint8; speechpack runs "
         f"whole epochs ({expected} mixtures), the WeSep-style job its first {args.baseline_batches} batches "
         f"({base_expected} mixtures); {args.repeats} timed runs per job, alternating, after one warm-up each\n")
    _log(f"  {'job':<38} {'mixtures':>8} {'best s':>8} {'median s':>9} {'best audio-s/s':>15} "
         f"{'median audio-s/s':>17}")
    best, median = {}, {}
    for name, times in seconds.items():
        audio = jobs[name][1] * CHUNK_SECONDS
        best[name], median[name] = audio / min(times), audio / statistics.median(times)
        _log(f"  {name:<38} {jobs[name][1]:8d} {min(times):8.3f} {statistics.median(times):9.3f} "
             f"{best[name]:15,.1f} {median[name]:17,.1f}")
    ratio = best[sp_name] / best[base_name]
    _log("")
    _log(f"  speechpack / WeSep-style: {ratio:.1f}x  (median {median[sp_name] / median[base_name]:.1f}x)   "
         f"target >= {TARGET_VS_WESEP:g}x: {'PASS' if ratio >= TARGET_VS_WESEP else 'BELOW TARGET'}")
    _log(f"  per mixture: speechpack {1e3 * CHUNK_SECONDS / best[sp_name]:.2f} ms with cues, "
         f"{1e3 * CHUNK_SECONDS / best['speechpack, no cues (reference)']:.2f} ms without; WeSep-style "
         f"{1e3 * CHUNK_SECONDS / best[base_name]:.1f} ms")
    if args.what_if:
        for name in WHAT_IFS:
            _log(f"  {name}: {best[name] / best[sp_name]:.2f}x speechpack as is (median "
                 f"{median[name] / median[sp_name]:.2f}x), {best[name] / best[base_name]:.1f}x WeSep-style")

    profiler = cProfile.Profile()
    profiler.enable()
    speechpack_epoch(loader, args.repeats + 1)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(args.profile_top)
    _log(f"\ncProfile of one speechpack epoch with cues (num_workers=0), top {args.profile_top} by own time:")
    _log(text.getvalue().strip("\n"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=256, help="mixtures in the list (default 256)")
    parser.add_argument("--batch-size", type=int, default=8, help="mixtures per batch (default 8)")
    parser.add_argument("--videos", type=int, default=48, help="distinct face clips, in equal-length pairs (48)")
    parser.add_argument("--enrollments", type=int, default=6, help="enrollment files per speaker (default 6)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per job (default 5)")
    parser.add_argument("--baseline-batches", type=int, default=4,
                        help="batches per run of the WeSep-style job (default 4)")
    parser.add_argument("--pack-workers", type=int, default=min(4, os.cpu_count() or 1),
                        help="build_wesep workers (does not change the pack)")
    parser.add_argument("--profile-top", type=int, default=10, help="functions in the profile (default 10)")
    parser.add_argument("--what-if", action="store_true",
                        help="also time speechpack patched: the bank's video read as a view; videos stored time-last")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir", default=None, help="where corpus and pack go (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    if min(args.lines, args.batch_size, args.videos, args.enrollments, args.repeats, args.baseline_batches) < 1:
        parser.error("--lines, --batch-size, --videos, --enrollments, --repeats and --baseline-batches must be >= 1")
    with bench_workdir("speechpack-cue-bench-", args.tmp_dir, args.keep, _log) as workdir:
        run(args, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
