"""The counter-based random streams of TSE batches (docs/loader.md, "Online mixing"): one Philox generator per item
of a batch and one per batch for augmentation, each a pure function of (seed, epoch, batch[, position]), so a batch
is the same whichever worker builds it, with any ``num_workers``, and after a resume."""

from __future__ import annotations

import numpy as np

from speechpack.loader.plan.static_plan import at_counter
from speechpack.loader.tse.errors import MixError


def item_rng(seed: int, epoch: int, global_batch: int, position: int) -> np.random.Generator:
    """The generator of one item of one batch: Philox keyed by the seed, counter (0, position + 1, batch + 1, epoch).

    ``loader.plan.batch_rng`` uses word 1 = 0, so the streams never meet (each would need 2**64 draws)."""
    if seed < 0 or epoch < 0 or position < 0:
        raise MixError(f"seed, epoch and position must be non-negative, got {seed}, {epoch}, {position}")
    counter = np.array([0, position + 1, global_batch + 1, epoch], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=seed, counter=counter))


#: Counter word 1 of the batch's augmentation stream (offline mixture noise, enrollment augmentation): above any
#: item position, so it never meets ``item_rng`` or ``loader.plan.batch_rng`` (word 1 = 0).
AUGMENT_STREAM_WORD = 1 << 63


def augment_rng(seed: int, epoch: int, global_batch: int) -> np.random.Generator:
    """The batch's augmentation generator: Philox keyed by the seed, counter (0, 2**63, batch + 1, epoch); a pure
    function of (seed, epoch, batch), so augmentation is the same for any worker count and after a resume."""
    if seed < 0 or epoch < 0 or global_batch < 0:
        raise MixError(f"seed, epoch and batch must be non-negative, got {seed}, {epoch}, {global_batch}")
    counter = np.array([0, AUGMENT_STREAM_WORD, global_batch + 1, epoch], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=seed, counter=counter))

class ItemGenerators:
    """``item_rng(seed, epoch, batch, position)`` for every position of a batch, from generator objects reused
    batch after batch: the same streams, bit for bit.  Building a ``Philox`` draws OS entropy for a seed sequence
    that an explicit key then overrides (about 8 µs, more than a 2-speaker group's other draws together);
    resetting a kept one's counter costs about 1 µs.  The generators of one call are valid until the next call.
    Pickles empty (a worker makes its own)."""

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise MixError(f"seed must be non-negative, got {seed}")
        self.seed = seed
        self._generators: list[np.random.Generator] = []
        self._state = item_rng(seed, 0, 0, 0).bit_generator.state  # a fresh generator's state, keyed by seed

    def batch(self, epoch: int, global_batch: int, count: int) -> list[np.random.Generator]:
        """The generators of positions ``0 .. count - 1`` of one batch, each at the start of its stream."""
        if epoch < 0 or global_batch < 0:
            raise MixError(f"epoch and batch must be non-negative, got {epoch}, {global_batch}")
        while len(self._generators) < count:
            self._generators.append(np.random.Generator(np.random.Philox(key=self.seed)))
        return [at_counter(generator, self._state, [0, position + 1, global_batch + 1, epoch])
                for position, generator in enumerate(self._generators[:count])]

    def __getstate__(self) -> dict:
        return {"seed": self.seed}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["seed"])


__all__ = ["AUGMENT_STREAM_WORD", "ItemGenerators", "augment_rng", "item_rng"]
