"""Frame-budget utilisation of ASD training with and without MuVAP's ``jitter``, as ``speechpack plan`` reports it,
against MuVAP's sampler with jitter on the same tracks.

    python bench/asd_jitter_utilisation.py [--ava 2000] [--wasd 100] [--epochs 3] [--keep DIR]

Utilisation is MuVAP's implied definition: the frames that survive cropping every batch to its shortest row, over
the frames offered (``sum |b| * min L / sum L``; docs/asd.md).  MuVAP's settings: ``train_window`` 250,
``hist_frames`` 50, ``frame_budget`` 2048, ``min_batch`` 4, ``max_batch`` 16.

- **Tracks.** ``--ava`` AVA-like tracks (model frames lognormal, median 64, sigma 1.2, as ``plan_throughput.py``)
  and ``--wasd`` WASD-like ones (median 746, sigma 0.5), written as an ``asd`` pack.  Planning reads only the
  pack's index, so each track is stored at the frame rate that gives exactly its model frames from the fewest face
  rows (``F = ceil(M / 25)`` rows at ``25 F / M`` fps), which keeps the pack small; the audio is silence of the
  invariant length.
- **speechpack.** ``loader.plan.planning_report.plan_report`` (what ``speechpack plan`` runs) with ``jitter`` off and
  on: with jitter the chunks are moved before planning, so the planner batches the lengths that are fed.
- **Baseline (MuVAP, same tracks, same run).** A re-implementation of MuVAP's batch sampler as its documentation
  and the notes describe it (chunks sorted longest first, each batch sized by its first member's fed length, the
  unjittered lengths), fed with MuVAP's jitter: every chunk's scored span moves to ``U{0 .. M - span}`` and is fed
  with ``min(hist, start)`` history, after the batches were fixed.  Its utilisation is averaged over ``--epochs``
  draws.

Prints one line per job and the ratio; the figures go in docs/asd.md and docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile

import numpy as np

from speechpack.loader.asd.timeline import muvap_windows
from speechpack.loader.plan.planning_report import plan_report
from speechpack.packer.audio import StoredAudio
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.packer.build.writer import PackWriter
from speechpack.schemas.constants import ASD_SAMPLE_RATE, FACE_SHAPE, KIND_ASD
from speechpack.schemas.timebase import ASD_MODEL_FPS, SAMPLES_PER_MODEL_FRAME, model_frame_count

SETTINGS = dict(train_window=250, hist_frames=50, frame_budget=2048, min_batch=4, max_batch=16)


def track_lengths(ava: int, wasd: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.minimum(np.exp(rng.normal(np.log(64), 1.2, ava)).astype(np.int64) + 1, 20000)
    w = np.exp(rng.normal(np.log(746), 0.5, wasd)).astype(np.int64) + 1
    return np.concatenate([a, w])


def write_pack(path: str, model_frames: np.ndarray) -> None:
    """An asd pack whose tracks have exactly ``model_frames`` (see the module docstring)."""
    samples = []
    for number, m in enumerate(model_frames.tolist()):
        rows = math.ceil(m / ASD_MODEL_FPS)
        fps = ASD_MODEL_FPS * rows / m
        assert int(model_frame_count(rows, fps)) == m
        audio = np.zeros((1, int(round(rows / fps * ASD_SAMPLE_RATE))), dtype=np.int16)
        samples.append(PackedSample(
            key=f"clip{number // 3}:t{number}", speakers=(f"t{number}",), line=number + 1,
            orig_sample_rate=ASD_SAMPLE_RATE, num_frames=audio.shape[1], provenance={},
            attrs={"source_fps": fps, "start_sec": 0.0, "clip": f"clip{number // 3}"},
            streams={"audio": [StoredAudio(audio, 1.0)], "faces": [StoredArray(np.zeros((rows, *FACE_SHAPE), np.uint8))],
                     "labels": [StoredArray(np.zeros(rows, np.uint8))]}))
    plans = [SamplePlan(s.line, s.key, s.num_frames, s.elements) for s in samples]
    per_shard = 500
    os.makedirs(path)
    with PackWriter(path, KIND_ASD, ASD_SAMPLE_RATE,
                    [plans[i:i + per_shard] for i in range(0, len(plans), per_shard)]) as writer:
        for sample in samples:
            writer.add(sample)
        writer.finish({"input": {"path": "bench", "sha256": "0" * 64}, "tool": "speechpack", "tool_version": "bench",
                       "command": "bench", "options": {}}, [])


def muvap_sampler(fed: np.ndarray, budget: int, min_batch: int, max_batch: int) -> list[np.ndarray]:
    """MuVAP's greedy batches over ``fed`` lengths: longest first (stable), size fixed by each batch's first."""
    order = np.argsort(-fed, kind="stable")
    batches, cursor = [], 0
    while cursor < len(order):
        size = min(max(budget // int(fed[order[cursor]]), min_batch), max_batch)
        batches.append(order[cursor:cursor + size])
        cursor += size
    return batches


def muvap_jitter_utilisation(model_frames: np.ndarray, epochs: int) -> float:
    windows = muvap_windows(model_frames, SETTINGS["train_window"], SETTINGS["hist_frames"])
    batches = muvap_sampler(windows.fed_length, SETTINGS["frame_budget"], SETTINGS["min_batch"],
                            SETTINGS["max_batch"])
    span = windows.stop - windows.start
    room = model_frames[windows.item] - span + 1
    rng = np.random.default_rng(1)
    values = []
    for _ in range(epochs):
        start = np.minimum((rng.random(len(span)) * room).astype(np.int64), room - 1)
        fed = span + np.minimum(SETTINGS["hist_frames"], start)
        kept = sum(len(b) * int(fed[b].min()) for b in batches)
        values.append(kept / int(fed.sum()))
    return float(np.mean(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ava", type=int, default=2000)
    parser.add_argument("--wasd", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--keep", help="Write the pack and the plan configs here (and keep them) for speechpack plan.")
    args = parser.parse_args()
    model_frames = track_lengths(args.ava, args.wasd)
    root = args.keep or tempfile.mkdtemp(prefix="asd-jitter-")
    pack = os.path.join(root, "pack")
    try:
        if not os.path.exists(pack):
            write_pack(pack, model_frames)
        print(f"{len(model_frames)} tracks ({args.ava} AVA-like, {args.wasd} WASD-like), "
              f"{int(model_frames.sum()):,} model frames; settings {SETTINGS}")
        results = {}
        for jitter in (False, True):
            config = {"task": "asd", "packs": [{"path": pack}], "dataset_args": {**SETTINGS, "jitter": jitter}}
            if args.keep:
                with open(os.path.join(root, f"plan-jitter-{str(jitter).lower()}.json"), "w") as fp:
                    json.dump(config, fp)
            report = plan_report(config, "train", epochs=args.epochs, seed=0)
            values = [e.utilisation for e in report.epochs]
            results[jitter] = float(np.mean(values))
            print(f"speechpack plan, jitter {str(jitter).lower():5}: utilisation "
                  f"{100 * results[jitter]:.2f} % (epochs: {', '.join(f'{100 * v:.2f}' for v in values)})")
        muvap = muvap_jitter_utilisation(model_frames, args.epochs)
        print(f"MuVAP sampler + MuVAP jitter (baseline): utilisation {100 * muvap:.2f} %")
        print(f"jitter on: speechpack {100 * results[True]:.2f} % vs MuVAP {100 * muvap:.2f} %: "
              f"{100 * (results[True] - muvap):+.2f} points; jitter costs speechpack "
              f"{100 * (results[False] - results[True]):.2f} points")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
