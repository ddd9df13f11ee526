"""ASD loader throughput (``task: asd``) against a MuVAP-style loader reading the same pack.

    python bench/asd_loader_throughput.py [--tracks 96] [--workers 0] [--repeats 3] [--seed 0] [--keep]

**Corpus.**  ``--tracks`` face tracks with AVA-like lengths (lognormal, median 64 native frames, a tail to 900;
30, 29.97, 25 and 23.976 fps), two to four tracks per clip.  Faces: the frames of a real talking-face video
(kphotoalbum's demo ``movie.avi`` at ``$SPEECHPACK_TEST_VIDEO`` or ``.cache/test-data/kphotoalbum/movie.avi``;
``scripts/test.sh`` extracts it), grayscale, centre-cropped and resized to 112x112 with OpenCV, cycled from a
random phase per track; without the movie a synthetic moving pattern (the script says which).  Audio: the five
LibriVox recordings of ``pocketsphinx-testdata`` (16 kHz), a cyclic window per track at a random gain.  Labels:
speaking where the audio frame is louder than the track's median.  Written with ``packer.build.writer.PackWriter``.

**Jobs** (one epoch of state ``train`` each, MuVAP's ``asd.yaml`` settings: ``train_window`` 250, ``hist_frames``
50, frame budget 2048 clamped to 4-16 rows, ``audio_mix_prob`` 0.5 at -5..5 dB, visual augmentation on):

- speechpack: ``loader.build_loader({"task": "asd", ...}, "train", num_workers=W)``: columnar index, faces
  gathered from the mapping straight into a uint8 batch, audio normalised while decoding;
- MuVAP-style (docs/asd.md, "Speed"): a map-style torch ``Dataset`` holding one Python dict
  per chunk (sample id, clip, offsets, fps, statistics), shards opened with ``np.load(mmap_mode="r")``; an item
  reads its chunk, pads the audio and then normalises it, widens the faces to float32 in the worker, augments with
  module-level ``random``, and returns a tuple with a metadata dict; MuVAP's ``FrameBudgetBatchSampler`` (longest
  first, batch size fixed by the first member) and a collate that crops to the shortest with ``torch.stack``.

Both jobs deliver the same chunks (same chunking, same budget rule) through a ``DataLoader`` with ``--workers``
workers; the baseline's faces are float32, as MuVAP delivers them.  Runs alternate after an untimed warm-up.

Unit: **model frames per second = fed frames delivered (rows x frames) / wall seconds**; the ratio
speechpack / MuVAP-style is printed for the best of ``--repeats`` runs (medians too).  With ``--workers 0`` the
same per CPU second of this process is printed as well: on a shared machine it is the steadier figure.
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import statistics
import sys
import time

import numpy as np
import soundfile
import torch

_BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_BENCH))
sys.path.insert(0, _BENCH)

from speechpack.loader import build_loader  # noqa: E402
from speechpack.loader.asd.augment import apply_visual, draw_visual  # noqa: E402
from speechpack.loader.asd.timeline import muvap_windows  # noqa: E402
from speechpack.schemas.timebase import SAMPLES_PER_MODEL_FRAME, audio_sample_count, model_frame_count  # noqa: E402
from speechpack.loader.normalize import muvap_gain  # noqa: E402
from speechpack.loader.pack import open_pack  # noqa: E402
from speechpack.packer.audio import StoredAudio  # noqa: E402
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray  # noqa: E402
from speechpack.packer.build.writer import PackWriter  # noqa: E402
from speechpack.schemas.constants import ASD_SAMPLE_RATE, FACE_SIZE, KIND_ASD  # noqa: E402
from workdir import bench_workdir  # noqa: E402

LIBRIVOX_GLOB = "/usr/share/pocketsphinx/test/data/librivox/*.wav"
FPS_CHOICES = (30.0, 29.97, 25.0, 23.976)
TRAIN_WINDOW, HIST_FRAMES, FRAME_BUDGET, MIN_BATCH, MAX_BATCH = 250, 50, 2048, 4, 16
MIX_PROB, MIX_SNR = 0.5, (-5.0, 5.0)
TRACKS_PER_SHARD = 32
_DEFAULT_MOVIE = os.path.join(os.path.dirname(_BENCH), ".cache", "test-data", "kphotoalbum", "movie.avi")


def _log(message: str) -> None:
    print(message, flush=True)


# ------------------------------------------------------------------------------------------ corpus

def face_frames() -> tuple[np.ndarray, str]:
    """uint8 ``[N, 112, 112]`` grayscale faces, and what they are."""
    import av
    import cv2

    path = os.environ.get("SPEECHPACK_TEST_VIDEO") or _DEFAULT_MOVIE
    if os.path.isfile(path):
        frames = []
        with av.open(path) as container:
            for frame in container.decode(video=0):
                gray = frame.to_ndarray(format="gray")
                h, w = gray.shape
                s = min(h, w)
                square = gray[(h - s) // 2:(h + s) // 2, (w - s) // 2:(w + s) // 2]
                frames.append(cv2.resize(square, (FACE_SIZE, FACE_SIZE), interpolation=cv2.INTER_LINEAR))
        return np.stack(frames), f"real talking-face video {path} ({len(frames)} frames), centre-cropped"
    y, x = np.mgrid[0:FACE_SIZE, 0:FACE_SIZE]
    frames = np.stack([((x * 3 + y + 7 * i) % 256) for i in range(64)]).astype(np.uint8)
    return frames, (f"SYNTHETIC moving pattern (no real video at {path}: run scripts/test.sh or set "
                    f"SPEECHPACK_TEST_VIDEO)")


def write_corpus(path: str, tracks: int, seed: int) -> tuple[int, str]:
    """The asd pack; returns (tracks written, what the faces are)."""
    rng = np.random.default_rng(seed)
    recordings = sorted(glob.glob(LIBRIVOX_GLOB))
    if not recordings:
        raise SystemExit(f"no recordings match {LIBRIVOX_GLOB}; install pocketsphinx-testdata")
    speech = np.concatenate([soundfile.read(p, dtype="int16")[0] for p in recordings])
    faces, what = face_frames()
    lengths = np.minimum(np.exp(rng.normal(np.log(64), 1.0, tracks)).astype(np.int64) + 2, 900)
    samples, clip, left_in_clip = [], 0, 0
    for number, frames in enumerate(lengths.tolist()):
        if left_in_clip == 0:
            clip, left_in_clip = clip + 1, int(rng.integers(2, 5))
        left_in_clip -= 1
        fps = float(rng.choice(FPS_CHOICES))
        n = int(audio_sample_count(frames, fps))
        audio = np.resize(np.roll(speech, -int(rng.integers(0, len(speech)))), n).astype(np.float64)
        audio = np.clip(np.rint(audio * rng.uniform(0.1, 1.5)), -32768, 32767).astype(np.int16)
        phase = int(rng.integers(0, len(faces)))
        track_faces = np.ascontiguousarray(faces[(phase + np.arange(frames)) % len(faces)])
        spf = max(1, n // frames)
        energy = np.square(audio[:spf * frames].astype(np.float64).reshape(frames, -1)).mean(axis=1)
        labels = (energy > np.median(energy)).astype(np.uint8)
        key = f"clip{clip:04d}:face{number}"
        samples.append(PackedSample(
            key=key, speakers=(key,), line=number + 1, orig_sample_rate=ASD_SAMPLE_RATE, num_frames=n,
            provenance={"clip": f"clip{clip:04d}"},
            attrs={"source_fps": fps, "start_sec": 0.0, "clip": f"clip{clip:04d}"},
            streams={"audio": [StoredAudio(audio[None, :], 1.0)], "faces": [StoredArray(track_faces)],
                     "labels": [StoredArray(labels)]}))
    plans = [SamplePlan(line=s.line, key=s.key, num_frames=s.num_frames, elements=s.elements) for s in samples]
    os.makedirs(path)
    shards = [plans[i:i + TRACKS_PER_SHARD] for i in range(0, len(plans), TRACKS_PER_SHARD)]
    with PackWriter(path, KIND_ASD, ASD_SAMPLE_RATE, shards) as writer:
        for sample in samples:
            writer.add(sample)
        writer.finish({"input": {"path": "generated", "sha256": "0" * 64}, "tool": "speechpack",
                       "tool_version": "bench", "command": "bench", "options": {}}, [])
    return tracks, what


# ------------------------------------------------------------------------------------------ speechpack

def speechpack_loader(pack: str, workers: int, seed: int):
    config = {"task": "asd", "packs": [{"path": pack}], "dataset_args": {
        "train_window": TRAIN_WINDOW, "hist_frames": HIST_FRAMES, "frame_budget": FRAME_BUDGET,
        "min_batch": MIN_BATCH, "max_batch": MAX_BATCH, "audio_mix_prob": MIX_PROB, "audio_mix_snr": list(MIX_SNR)}}
    return build_loader(config, "train", num_workers=workers, seed=seed)


def run_speechpack(loader, epoch: int) -> int:
    loader.set_epoch(epoch)
    frames = 0
    for batch in loader:
        frames += batch["faces"].shape[0] * batch["faces"].shape[1]
    return frames


# ------------------------------------------------------------------------------------------ MuVAP-style

class MuvapStyleDataset(torch.utils.data.Dataset):
    """One Python dict per chunk, mmaps opened per shard, faces widened to float32 in the worker."""

    def __init__(self, pack_path: str):
        pack = open_pack(pack_path)  # used once, to build the per-chunk dicts MuVAP keeps
        faces, audio, labels = (pack.streams[s] for s in ("faces", "audio", "labels"))
        self.shard_dirs = [os.path.join(pack_path, shard.directory) for shard in pack.manifest.shards]
        frames = np.asarray(faces.length)[faces.first]
        fps = np.asarray(pack.attrs["source_fps"])
        m = model_frame_count(frames, fps)
        windows = muvap_windows(m, TRAIN_WINDOW, HIST_FRAMES)
        self.entries = []
        for c in range(len(windows)):
            i = int(windows.item[c])
            a = int(audio.first[i])
            self.entries.append({
                "sample_id": pack.keys[i], "clip": pack.attrs["clip"][i], "shard": int(faces.shard[faces.first[i]]),
                "face_offset": int(faces.offset[faces.first[i]]), "label_offset": int(labels.offset[labels.first[i]]),
                "audio_offset": int(audio.offset[a]), "audio_samples": int(audio.length[a]),
                "audio_mean": float(audio.mean[a]), "audio_rms": float(audio.rms[a]),
                "audio_peak": float(audio.peak[a]),
                "source_fps": float(fps[i]), "source_frames": int(frames[i]), "model_frames": int(m[i]),
                "start": int(windows.start[c]), "stop": int(windows.stop[c]), "fed_start": int(windows.fed_start[c])})
        self.lengths = [e["stop"] - e["fed_start"] for e in self.entries]
        self._arrays: dict = {}

    def _array(self, shard: int, name: str) -> np.ndarray:
        key = (shard, name)
        if key not in self._arrays:
            self._arrays[key] = np.load(os.path.join(self.shard_dirs[shard], f"{name}.npy"), mmap_mode="r")
        return self._arrays[key]

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, index: int):
        e = self.entries[index]
        k = np.arange(e["fed_start"], e["stop"])
        src = np.clip(np.floor((k + 0.5) / 25 * e["source_fps"]), 0, e["source_frames"] - 1).astype(np.int64)
        faces = np.asarray(self._array(e["shard"], "faces")[e["face_offset"] + src])
        labels = np.asarray(self._array(e["shard"], "labels")[e["label_offset"] + src], dtype=np.float32)
        audio = self._audio(e, e["fed_start"], e["stop"])
        if random.random() < MIX_PROB:  # a donor from a different clip (module-level random, as MuVAP)
            donor = e
            while donor["clip"] == e["clip"]:  # rejection sampling: cheap, and the corpus has many clips
                donor = self.entries[random.randrange(len(self.entries))]
            d = self._audio(donor, 0, donor["model_frames"])
            d = np.resize(d, len(audio))
            snr = random.uniform(*MIX_SNR)
            ps, pd = max(float(np.mean(audio ** 2)), 1e-4), max(float(np.mean(d ** 2)), 1e-4)
            audio = np.clip(audio + d * np.sqrt(ps / (pd * 10 ** (snr / 10))), -1, 1).astype(np.float32)
        draw = draw_visual(np.random.default_rng(random.getrandbits(32)))
        faces = np.ascontiguousarray(faces)
        apply_visual(faces, draw)
        visual = faces.astype(np.float32)  # widened in the worker (MuVAP's 0-255 float32)
        scored = np.zeros(len(k), dtype=bool)
        scored[e["start"] - e["fed_start"]:] = True
        return (torch.from_numpy(audio[None, :]), torch.from_numpy(visual), torch.from_numpy(labels),
                torch.from_numpy(scored), {"sample_id": e["sample_id"], "model_frames": e["model_frames"]})

    def _audio(self, e: dict, start: int, stop: int) -> np.ndarray:
        """Pad first, then normalise (MuVAP's order)."""
        lo, hi = start * SAMPLES_PER_MODEL_FRAME, stop * SAMPLES_PER_MODEL_FRAME
        raw = self._array(e["shard"], "audio")[e["audio_offset"]:e["audio_offset"] + e["audio_samples"]]
        x = np.zeros(hi - lo, dtype=np.float32)
        take = max(0, min(hi, len(raw)) - lo)
        x[:take] = raw[lo:lo + take] / 32768.0
        gain = float(muvap_gain(e["audio_rms"], e["audio_peak"]))
        return ((x - e["audio_mean"]) * gain).astype(np.float32)


class FrameBudgetBatchSampler(torch.utils.data.Sampler):
    """MuVAP's sampler: longest first, the first member fixes the size, batch order shuffled per epoch."""

    def __init__(self, lengths: list[int], seed: int):
        self.lengths = np.asarray(lengths)
        self.seed = seed
        self.epoch = 0

    def _batches(self) -> list[list[int]]:
        order = np.argsort(-self.lengths, kind="stable")
        batches, cursor = [], 0
        while cursor < len(order):
            size = min(max(FRAME_BUDGET // int(self.lengths[order[cursor]]), MIN_BATCH), MAX_BATCH)
            batches.append(order[cursor:cursor + size].tolist())
            cursor += size
        random.Random(self.seed + self.epoch).shuffle(batches)
        return batches

    def __iter__(self):
        return iter(self._batches())

    def __len__(self) -> int:
        return len(self._batches())


def muvap_collate(items):
    t = min(item[1].shape[0] for item in items)
    return (torch.stack([item[0][:, :t * SAMPLES_PER_MODEL_FRAME] for item in items]),
            torch.stack([item[1][:t] for item in items]), torch.stack([item[2][:t] for item in items]),
            torch.stack([item[3][:t] for item in items]), [item[4] for item in items])


def muvap_loader(pack: str, workers: int, seed: int):
    random.seed(seed)
    dataset = MuvapStyleDataset(pack)
    sampler = FrameBudgetBatchSampler(dataset.lengths, seed)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=workers,
                                         collate_fn=muvap_collate, persistent_workers=workers > 0)
    return loader, sampler


def run_muvap(job, epoch: int) -> int:
    loader, sampler = job
    sampler.epoch = epoch
    frames = 0
    for batch in loader:
        frames += batch[1].shape[0] * batch[1].shape[1]
    return frames


# ------------------------------------------------------------------------------------------ main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracks", type=int, default=96)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tmp-dir", default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    with bench_workdir("asd-bench-", args.tmp_dir, args.keep, _log) as workdir:
        pack = os.path.join(workdir, "pack")
        started = time.perf_counter()
        tracks, what = write_corpus(pack, args.tracks, args.seed)
        _log(f"corpus: {tracks} tracks, faces from {what}; packed in {time.perf_counter() - started:.1f} s")
        ours = speechpack_loader(pack, args.workers, args.seed)
        theirs = muvap_loader(pack, args.workers, args.seed)
        runs = {"speechpack": (lambda e: run_speechpack(ours, e)), "muvap-style": (lambda e: run_muvap(theirs, e))}
        rates: dict[str, list[float]] = {name: [] for name in runs}
        cpu_rates: dict[str, list[float]] = {name: [] for name in runs}
        frames_seen: dict[str, int] = {}
        for name, run in runs.items():  # warm-up: page cache, worker start
            frames_seen[name] = run(0)
        if frames_seen["speechpack"] != frames_seen["muvap-style"]:
            _log(f"note: frames delivered differ (speechpack {frames_seen['speechpack']}, MuVAP-style "
                 f"{frames_seen['muvap-style']}): batch composition differs, so does crop-to-shortest")
        for repeat in range(args.repeats):
            for name, run in runs.items():
                started, cpu_started = time.perf_counter(), time.process_time()
                frames = run(repeat + 1)
                rates[name].append(frames / (time.perf_counter() - started))
                cpu_rates[name].append(frames / max(time.process_time() - cpu_started, 1e-9))
        _report("wall", rates, args.workers)
        if args.workers == 0:  # all the work is in this process: CPU time is robust to other load on the machine
            _report("CPU", cpu_rates, args.workers)


def _report(clock: str, rates: dict[str, list[float]], workers: int) -> None:
    for name, values in rates.items():
        _log(f"{name:12s} best {max(values):10.0f} model frames per {clock} second, median "
             f"{statistics.median(values):10.0f} ({workers} workers)")
    best = max(rates["speechpack"]) / max(rates["muvap-style"])
    median = statistics.median(rates["speechpack"]) / statistics.median(rates["muvap-style"])
    _log(f"ratio speechpack / MuVAP-style ({clock} time): {best:.2f}x (best), {median:.2f}x (median)")


if __name__ == "__main__":
    main()
