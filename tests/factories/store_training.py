"""Training from the loopback S3 store beside the local copy: the tests' loader config, the batches of the local
copy, and rank processes (``factories.store_rank``) started and finished with their batches."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import factories.paths
from factories.s3 import SECRET
from speechpack.loader import build_loader

ARGS = {"batch_size": 2, "chunk_len": 1000}
TESTS = factories.paths.TESTS


def config(path: str, cache: dict | None = None, **args) -> dict:
    return {"packs": [{"path": path}], "dataset_args": {**ARGS, **args}, **({"cache": cache} if cache else {})}


def plain(batch: dict) -> dict:
    return {name: value.numpy().copy() if hasattr(value, "numpy") else value for name, value in batch.items()}


def local_batches(local: Path, rank: int = 0, world_size: int = 1, seed: int = 3, **args) -> list[dict]:
    return [plain(b) for b in build_loader(config(str(local), **args), "train", rank=rank, world_size=world_size,
                                           seed=seed)]


def start_rank(spec: dict, out: Path, **env) -> subprocess.Popen:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path]), **env}
    return subprocess.Popen([sys.executable, "-m", "factories.store_rank", json.dumps(spec), str(out)], env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen, out: Path, timeout: float = 180) -> dict:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output
    assert SECRET not in output
    with open(out, "rb") as fp:
        return pickle.load(fp)


def record_schedule_builds(monkeypatch, builds: Path) -> None:
    """Every ``FileSchedule.of`` call, in this process or a worker forked from it, appends its process id to
    ``builds`` (a test reads which processes built a schedule)."""
    from speechpack.loader.cache import schedule

    of = schedule.FileSchedule.of.__func__

    def counted(cls, packs, plans, units):
        with open(builds, "a") as fp:
            fp.write(f"{os.getpid()}\n")
        return of(cls, packs, plans, units)

    monkeypatch.setattr(schedule.FileSchedule, "of", classmethod(counted))
