"""The batch ring (``loader.transport.batch_ring``) under a consumer that keeps and drops batches the awkward ways real training
code does, checked against one process's batches: the lifetime rule must hold whatever the consumer does.

What is pinned (docs/loader.md, "Workers"), over eight epochs of real recordings through 3 workers with 3 slots
each: every batch equals the one a process without workers builds when it arrives, and still equals it whenever it
is checked again later, while the consumer

- holds some batches across many later ones and drops them in a scrambled order;
- drops some into reference cycles, freed only by the garbage collector (perhaps after other workers were forked);
- holds a whole epoch at once (the ring runs out: those batches come through torch's shared memory instead);
- stops a pass early (the next pass discards what was in flight) and replaces its loader while still holding the
  old loader's batches (the old workers exit, once with batches still in flight).

At the end every slot is free again.  The schedule is drawn from a fixed seed: the same on every run.
"""

from __future__ import annotations

import gc
import random
from dataclasses import dataclass

import pytest
import torch

from factories.tse import real_mixtures_config
from factories.delivery import batch_differences, origin
from speechpack.loader import build_loader
from speechpack.loader.transport import batch_ring

pytestmark = [pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.skipif(not batch_ring.supported(), reason="memfd_create is Linux only")]

EPOCHS = 8
WORKERS = 3
#: One batch prefetched per worker, so 3 slots each (``SLOTS_BEYOND_PREFETCH`` more): 9 held batches use them all.
PREFETCH = 1
#: Epochs that start on a new loader (the previous one's workers exit; its batches may still be held).
NEW_LOADER_AT = {0, 3, 6}
#: Epoch -> the batch at which the pass is abandoned (epoch 5's loader is then replaced with batches in flight).
STOP_EARLY = {1: 4, 5: 7}
#: An epoch whose every batch is kept until its end, as ``list(loader)`` keeps them.
HOLD_ALL = 4


@pytest.fixture
def stress_config(real_audio, wesep_list, tmp_path):
    """24 short two-speaker mixtures of real recordings, 12 batches an epoch of 128 kB of audio per field (at
    least 64 kB, so a batch that finds no free slot crosses through torch's shared memory, not pickled)."""
    return real_mixtures_config(real_audio, wesep_list, tmp_path / "pack", 24, seconds=0.4, seconds_step=0.05,
                                seconds_cycle=5, start_step=0.05, partner=1)


@dataclass
class Held:
    epoch: int
    index: int
    batch: dict
    #: Where it came from (``factories.delivery.origin``), said when it arrived.
    where: str


def _copy(batch: dict) -> dict:
    return {name: value.clone() if isinstance(value, torch.Tensor) else value for name, value in batch.items()}


def test_held_and_scrambled_batches_stay_what_one_process_builds(stress_config):
    one_process = build_loader(stress_config, "train", seed=4)
    reference = []
    for epoch in range(EPOCHS):
        one_process.set_epoch(epoch)
        reference.append([_copy(batch) for batch in one_process])
    assert len(reference[0]) == 12

    schedule = random.Random(11)
    problems: list[str] = []
    crossed = {"slot": 0, "shared memory": 0}

    def check(held: Held, when: str) -> None:
        differences = batch_differences([held.batch], [reference[held.epoch][held.index]],
                                        lambda _i: f"epoch {held.epoch} {held.where}, {when}")
        problems.extend(differences)

    def check_all(kept: list[Held], when: str) -> None:  # a function, so no loop variable keeps a batch alive
        for held in kept:
            check(held, when)

    loader = None
    kept: list[Held] = []
    for epoch in range(EPOCHS):
        if epoch in NEW_LOADER_AT:
            loader = build_loader(stress_config, "train", seed=4, num_workers=WORKERS, prefetch_factor=PREFETCH)
        loader.set_epoch(epoch)
        for index, batch in enumerate(loader):
            if index == STOP_EARLY.get(epoch):
                break
            arrived = Held(epoch, index, batch, origin(loader, index, batch))
            crossed["slot"] += " in slot " in arrived.where
            crossed["shared memory"] += "shared memory" in arrived.where
            check(arrived, "on arrival")
            draw = schedule.random()
            if epoch == HOLD_ALL or draw < 0.5:
                kept.append(arrived)
            elif draw < 0.7:  # dropped into a cycle: only the garbage collector frees it
                cycle = [arrived]
                cycle.append(cycle)
                del cycle
            del batch, arrived
            while kept and epoch != HOLD_ALL and schedule.random() < 0.4:
                dropped = kept.pop(schedule.randrange(len(kept)))
                check(dropped, "when dropped")
                del dropped
        if schedule.random() < 0.5:
            gc.collect()
        check_all(kept, f"held at the end of epoch {epoch}")
    assert not problems, "batches differ from one process's:\n" + "\n".join(problems[:20])
    assert crossed["slot"] and crossed["shared memory"], f"both ways batches cross should be exercised: {crossed}"
    del kept
    gc.collect()
    free = [[semaphore.get_value() for semaphore in row] for row in loader.dataset.ring._free]
    assert free == [[1] * (PREFETCH + 2)] * WORKERS, f"slots still claimed after every batch was dropped: {free}"
