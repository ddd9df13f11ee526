"""How delivered batches reached the training loop, and what is wrong with them, said so that one failed run is
enough to diagnose a loss, a repeat or an overwrite (a rare failure under load leaves no second chance).

- ``origin(loader, batch_index, batch)``: the DataLoader worker that built the batch and how it crossed: which slot
  of the batch ring (``loader.transport.batch_ring``), torch's shared memory, pickled, or built in the training process;
- ``exactly_once_problems``: the (mixture, target) pairs missing, repeated (with every rank/batch/row/worker
  where each appeared) or unexpected among the valid rows of a TSE epoch;
- ``batch_differences``: which batches and fields differ from a reference (one process's batches), and where
  each came from.

The origin reads the loader's private state (the ring's mappings, the DataLoader's worker processes): it is for
messages only, never for an assertion.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Callable

import torch

from factories.batches import field_differences

#: What ``origin`` answers for, given a batch's position: ``describe(rank, batch_index) -> str``.
Describe = Callable[[int, int], str]


def worker_of(batch_index: int, num_workers: int) -> int | None:
    """The worker that builds batch ``batch_index`` of a pass: torch's DataLoader deals the batch indices round-robin
    from worker 0 at every pass (persistent workers too), while no worker has died."""
    return batch_index % num_workers if num_workers else None


def origin(loader, batch_index: int, batch: dict) -> str:
    """Where ``batch`` (batch ``batch_index`` of a ``SpeechLoader`` pass) was built and how it crossed; call it
    while the loader is alive."""
    num_workers = loader.dataloader.num_workers
    if not num_workers:
        return f"batch {batch_index}, built in the training process"
    where = f"batch {batch_index} (dealt to worker {worker_of(batch_index, num_workers)})"
    audio = next((v for v in batch.values() if isinstance(v, torch.Tensor) and v.numel()), None)
    if audio is None:
        return f"{where}, no tensor to trace"
    if audio.is_shared():
        return f"{where}, through torch's shared memory (no free slot)"
    address = audio.data_ptr()
    ring = loader.dataset.ring
    for (pid, slot), (_pid, generation, mapped, base) in (ring._maps.items() if ring is not None else ()):
        if base <= address < base + len(mapped):
            return f"{where}, in slot {slot} of {_worker_named(loader, pid)}, slot generation {generation}"
    return f"{where}, in no current slot mapping: pickled (no free slot) or in an older generation of a slot"


def _worker_named(loader, pid: int) -> str:
    """``worker W (pid P)`` for one of the loader's current worker processes, else says the pid is not one (the
    DataLoader's worker processes, ``_workers``, in worker order)."""
    workers = getattr(getattr(loader.dataloader, "_iterator", None), "_workers", None) or []
    ids = [w for w, process in enumerate(workers) if process.pid == pid]
    return f"worker {ids[0]} (pid {pid})" if ids else f"pid {pid}, not one of the loader's current workers"


def _valid_rows(batch: dict):
    valid = batch["valid"].tolist()
    return [(row, (key, spk)) for row, (key, spk, ok) in enumerate(zip(batch["key"], batch["spk"], valid)) if ok]


def exactly_once_problems(per_rank: list[list[dict]], expected: Counter, describe: Describe) -> list[str]:
    """What breaks "every expected (key, spk) pair once among the valid rows" over all ranks' batches: each missing,
    repeated or unexpected pair, with every place it appeared (``describe(rank, batch_index)``, then the row)."""
    seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rank, batches in enumerate(per_rank):
        for index, batch in enumerate(batches):
            for row, pair in _valid_rows(batch):
                seen[pair].append(f"{describe(rank, index)}, row {row}")
    problems = [f"missing {pair}" for pair in sorted(expected) if not seen.get(pair)]
    for pair, places in sorted(seen.items()):
        if pair not in expected:
            problems.append(f"unexpected {pair} at " + "; ".join(places))
        elif len(places) != expected[pair]:
            problems.append(f"{pair} {len(places)} times (expected {expected[pair]}) at " + "; ".join(places))
    return problems


def batch_differences(batches: list[dict], reference: list[dict], describe: Callable[[int], str]) -> list[str]:
    """Per batch that differs from ``reference`` (the same batches from one process): where it came from
    (``describe(batch_index)``), the fields that differ, and both batches' valid (key, spk) rows."""
    if len(batches) != len(reference):
        return [f"{len(batches)} batches, expected {len(reference)}"]
    problems = []
    for index, (got, want) in enumerate(zip(batches, reference)):
        fields = list(field_differences(got, want))
        if fields:
            problems.append(f"{describe(index)}: {', '.join(fields)} differ; valid rows {_valid_rows(got)}, "
                            f"expected {_valid_rows(want)}")
    return problems


__all__ = ["batch_differences", "exactly_once_problems", "origin", "worker_of"]
