"""The loader's counter-based random generators, in one place: every random draw of a plan or a batch comes from
one of these, each a pure function of (seed, epoch, batch[, position]), so a batch is the same whichever worker
builds it, with any ``num_workers``, and after a resume (docs/loader.md, "Online mixing").

Every stream is numpy's ``Philox`` (4 x 64-bit counter words) keyed by the loader's seed; a stream is told apart by
where its counter starts.  The counter-word layout, ``[w0, w1, w2, w3]``:

==========================  ====  ==================  =============  =========  =================================
stream                      w0    w1                  w2             w3         used by
==========================  ====  ==================  =============  =========  =================================
``batch_rng(s, e, -1)``     0     0                   0              e          the epoch's permutation, budget
                                                                                batching, shuffle windows
``jitter_rng(s, e)``        0     0                   0              e          ASD chunk jitter (the same start
                                                                                as the epoch's permutation: two
                                                                                uses of one stream, kept so the
                                                                                batches stay what they were)
``batch_rng(s, e, b)``      0     0                   b + 1          e          a batch's draws (TSE windows, ASR
                                                                                SpecAugment, ...)
``item_rng(s, e, b, p)``    0     p + 1               b + 1          e          one item of a batch (online
                                                                                mixing, ASD augmentation)
``augment_rng(s, e, b)``    0     2**63               b + 1          e          a batch's augmentation (noise,
                                                                                enrollments)
``cycle_rng(s, pack, k)``   0     k                   pack           2**63      weighting: cycle ``k`` of a pack
``dither_rng(s, e, b)``     0     0x6D61696E          b + 1          e          mainline WeSep's fbank dither
                                                                                (``loader.tse.mainline``)
``window_rng(s, p, i)``     0     i + 1               p              0x76616C   mainline WeSep's val windows: one
                                                                     << 40      stream per (pack, sample), the
                                                                                same every epoch
``stage_rng(s, n, e, b)``   0     0x5354 << 48        b + 1          e          a TSE stage added after these
                                  | crc32(n)                                    (``loader.tse.stages``): stage
                                                                                ``n``'s own stream
==========================  ====  ==================  =============  =========  =================================

The TSE stages (``loader.tse.stages``) and the streams they draw from.  Each existing stage keeps exactly the
positions it drew before the stages were apart, so batches stay bit for bit what they were; a stage added later
draws from a stream of its own (``stage_rng``), which no other stage reads, so it shifts nobody's draws:

===============  ============================================  ==================================================
stage            stream                                        positions (per batch; ``n`` items, ``r`` rows,
                                                                ``c`` cues, ``d`` = ``Chunking.draws_per_window``)
===============  ============================================  ==================================================
``windows``      ``batch_rng(s, e, b)``; mainline val/test:    ``[0, n d)``; each mixture ``[0, d)``
                 ``window_rng(s, pack, sample)``
``decode``       none
``online_mix``   ``item_rng(s, e, b, p)`` per position;        the whole stream of each position
                 ``room_generator`` of one of its draws
``noise``        ``augment_rng(s, e, b)``                      ``[0, n NOISE_DRAWS)``
``cues``         ``batch_rng(s, e, b)``; enrollments:          ``[n d, n d + r c DRAWS_PER_CUE)`` (online:
                 ``augment_rng(s, e, b)``                      from 0); ``[k, k + r c ENROLL_DRAWS)``, ``k`` =
                                                               ``n NOISE_DRAWS`` when ``noise`` runs, else 0
``collate``      none
``mainline``     ``dither_rng(s, e, b)``                       the whole stream (train only)
a new stage      ``stage_rng(s, name, e, b)``                  the whole stream
===============  ============================================  ==================================================

``stream_at`` starts a stream at a declared position (it draws the positions before it), which is how ``cues``
begins where the table says.

Philox advances w0 first, so two streams whose starts differ in w1..w3 meet only after 2**64 draws of one of them.
A room's generator (``room_generator``) is the exception: keyed by the bits of one uniform draw of its mixture's
stream, counter 0, so a room depends only on that draw.

Building a ``Philox`` draws OS entropy for a seed sequence that the explicit key then overrides (about 8-12 µs, a
few percent of a short batch); ``BatchGenerator`` and ``ItemGenerators`` keep their generator objects and move
their counters instead (``at_counter``, about 1-4 µs), drawing the same streams bit for bit.
"""

from __future__ import annotations

import zlib

import numpy as np

from speechpack.schemas.errors import PlanError

#: Counter word 1 of the batch's augmentation stream (offline mixture noise, enrollment augmentation): above any
#: item position, so it never meets ``item_rng`` or ``batch_rng`` (word 1 = 0).
AUGMENT_STREAM_WORD = 1 << 63
#: Counter word 3 of the weighting's cycles: the top bit, above any epoch.
CYCLE_STREAM_WORD = 1 << 63
#: Counter word 1 of the dither stream of mainline WeSep's enrollment fbank ("main" in ASCII): far above any
#: item position, so it never meets ``item_rng``.
DITHER_STREAM_WORD = 0x6D61696E
#: Counter word 3 of mainline WeSep's val windows ("val" in ASCII, shifted): above any epoch, below the weighting's
#: top bit, so it never meets a batch's, an item's or a cycle's stream.
WINDOW_STREAM_WORD = 0x76616C << 40
#: Counter word 1 of a TSE stage's own stream ("ST" in ASCII, shifted), ored with the crc32 of its name: far above
#: any item position and below the augmentation stream's top bit, so it meets no other stream.
STAGE_STREAM_WORD = 0x5354 << 48
#: Bits of a room's key taken from one uniform draw (a float64 has 53).
ROOM_KEY_BITS = 53


def _philox(seed: int, counter: list[int]) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=seed, counter=np.array(counter, dtype=np.uint64)))


def batch_rng(seed: int, epoch: int, global_batch: int) -> np.random.Generator:
    """A batch's generator, keyed by (seed, epoch, batch): the same draws whichever worker asks.
    ``global_batch = -1`` is the epoch's permutation (the plan's own stream)."""
    if seed < 0 or epoch < 0:
        raise PlanError(f"seed and epoch must be non-negative, got seed={seed}, epoch={epoch}")
    return _philox(seed, [0, 0, global_batch + 1, epoch])


def jitter_rng(seed: int, epoch: int) -> np.random.Generator:
    """The epoch's ASD jitter generator (counter (0, 0, 0, epoch); see the table in the module docstring)."""
    return _philox(seed, [0, 0, 0, epoch])


def item_rng(seed: int, epoch: int, global_batch: int, position: int) -> np.random.Generator:
    """The generator of one item of one batch (counter (0, position + 1, batch + 1, epoch))."""
    if seed < 0 or epoch < 0 or position < 0:
        raise PlanError(f"seed, epoch and position must be non-negative, got {seed}, {epoch}, {position}")
    return _philox(seed, [0, position + 1, global_batch + 1, epoch])


def augment_rng(seed: int, epoch: int, global_batch: int) -> np.random.Generator:
    """The batch's augmentation generator (counter (0, 2**63, batch + 1, epoch))."""
    if seed < 0 or epoch < 0 or global_batch < 0:
        raise PlanError(f"seed, epoch and batch must be non-negative, got {seed}, {epoch}, {global_batch}")
    return _philox(seed, [0, AUGMENT_STREAM_WORD, global_batch + 1, epoch])


def cycle_rng(seed: int, pack: int, cycle: int) -> np.random.Generator:
    """The weighting's generator of cycle ``cycle`` of pack ``pack`` (counter (0, cycle, pack, 2**63))."""
    return _philox(seed, [0, cycle, pack, CYCLE_STREAM_WORD])


def dither_rng(seed: int, epoch: int, global_batch: int) -> np.random.Generator:
    """The batch's dither generator (counter (0, 0x6D61696E, batch + 1, epoch))."""
    return _philox(seed, [0, DITHER_STREAM_WORD, global_batch + 1, epoch])


def window_rng(seed: int, pack: int, sample: int) -> np.random.Generator:
    """The val window generator of sample ``sample`` of pack ``pack`` (counter (0, sample + 1, pack, 0x76616C << 40)):
    keyed by the mixture alone, so its window is the same every epoch and in any batch."""
    if seed < 0 or pack < 0 or sample < 0:
        raise PlanError(f"seed, pack and sample must be non-negative, got {seed}, {pack}, {sample}")
    return _philox(seed, [0, sample + 1, pack, WINDOW_STREAM_WORD])


def stage_rng(seed: int, name: str, epoch: int, global_batch: int) -> np.random.Generator:
    """The own stream of TSE stage ``name`` for one batch (counter (0, 0x5354 << 48 | crc32(name), batch + 1,
    epoch)): a stage added to the pipeline draws here, so no other stage's draws move."""
    if seed < 0 or epoch < 0 or global_batch < 0:
        raise PlanError(f"seed, epoch and batch must be non-negative, got {seed}, {epoch}, {global_batch}")
    return _philox(seed, [0, STAGE_STREAM_WORD | zlib.crc32(name.encode("utf-8")), global_batch + 1, epoch])


def stream_at(generator: np.random.Generator, position: int) -> np.random.Generator:
    """``generator`` moved past its next ``position`` uniform draws: a stage whose declared positions start
    there (the table above) draws from ``position`` on, whichever stage drew before it."""
    if position:
        generator.random(position)
    return generator


def room_generator(draw: float) -> np.random.Generator:
    """A room's generator: Philox keyed by the bits of one uniform draw of its mixture's stream."""
    return np.random.Generator(np.random.Philox(key=int(draw * (1 << ROOM_KEY_BITS))))


def at_counter(generator: np.random.Generator, fresh: dict, counter: list[int]) -> np.random.Generator:
    """``generator`` (Philox) set to the start of the stream at ``counter``, as a new ``Philox(key, counter)``
    would begin: ``fresh`` is the state of a freshly built one with the same key (empty buffer)."""
    generator.bit_generator.state = {**fresh, "buffer": fresh["buffer"].copy(),
                                     "state": {"counter": np.array(counter, dtype=np.uint64),
                                               "key": fresh["state"]["key"]}}
    return generator


class BatchGenerator:
    """``batch_rng(seed, epoch, batch)`` for one batch after another, from one generator object reused: the same
    stream, bit for bit.  The generator one call returns is valid until the next call.  Pickles as its seed (a
    worker makes its own)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._generator = batch_rng(seed, 0, 0)  # checks the seed
        self._fresh = self._generator.bit_generator.state  # a fresh generator's state, keyed by seed

    def __call__(self, epoch: int, global_batch: int) -> np.random.Generator:
        if epoch < 0:
            raise PlanError(f"epoch must be non-negative, got {epoch}")
        return at_counter(self._generator, self._fresh, [0, 0, global_batch + 1, epoch])

    def __getstate__(self) -> dict:
        return {"seed": self.seed}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["seed"])


class ItemGenerators:
    """``item_rng(seed, epoch, batch, position)`` for every position of a batch, from generator objects reused
    batch after batch: the same streams, bit for bit.  The generators of one call are valid until the next call.
    Pickles empty (a worker makes its own)."""

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise PlanError(f"seed must be non-negative, got {seed}")
        self.seed = seed
        self._generators: list[np.random.Generator] = []
        self._state = item_rng(seed, 0, 0, 0).bit_generator.state  # a fresh generator's state, keyed by seed

    def batch(self, epoch: int, global_batch: int, count: int) -> list[np.random.Generator]:
        """The generators of positions ``0 .. count - 1`` of one batch, each at the start of its stream."""
        if epoch < 0 or global_batch < 0:
            raise PlanError(f"epoch and batch must be non-negative, got {epoch}, {global_batch}")
        while len(self._generators) < count:
            self._generators.append(np.random.Generator(np.random.Philox(key=self.seed)))
        return [at_counter(generator, self._state, [0, position + 1, global_batch + 1, epoch])
                for position, generator in enumerate(self._generators[:count])]

    def __getstate__(self) -> dict:
        return {"seed": self.seed}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["seed"])


__all__ = ["AUGMENT_STREAM_WORD", "CYCLE_STREAM_WORD", "DITHER_STREAM_WORD", "ROOM_KEY_BITS", "STAGE_STREAM_WORD",
           "WINDOW_STREAM_WORD",
           "BatchGenerator", "ItemGenerators", "at_counter", "augment_rng", "batch_rng", "cycle_rng", "dither_rng",
           "item_rng", "jitter_rng", "room_generator", "stage_rng", "stream_at", "window_rng"]
