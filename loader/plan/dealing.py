"""Dealing an epoch's global sequence of batches to ranks, from any global position: what lets a state saved at one
world size resume at another (docs/loader.md, "Resume").

Every planner (``loader.plan.static_plan``, ``loader.plan.batching``) first makes the epoch's *global* sequence:
``count`` real batches, numbered ``0 .. count - 1``, a pure function of (units, config, seed, epoch) that does not
depend on the world size.  Beyond ``count`` the sequence goes on with padding batches (repeats, every row
``valid = False``), each also a function of its number alone.  The world size only decides how that sequence is
dealt and where it stops:

- a pass deals global batches from ``global_start`` on (0 for a fresh epoch; a resumed pass starts where the saved
  ranks had got to): batch ``g`` goes to rank ``(g - global_start) % world_size``;
- every rank takes the same number of steps: the remaining real batches rounded up to a multiple of the world size
  with padding batches (``sync = "pad"``), or down, leaving the last ones out (``sync = "drop"``).

After ``k`` steps on every rank, the global batches ``global_start .. global_start + k * world_size - 1`` are
consumed, whatever the world size: that number, the global position, is what a resume state carries.  A pass at
the same world size that starts at a multiple of it deals exactly the batches the uninterrupted pass would have
dealt from there, so resuming without a change of world size changes nothing.

A batch's random draws are keyed by its global number (``loader.rng``), so a global batch is the same batch, bit
for bit, at any world size and with any ``num_workers``.
"""

from __future__ import annotations

import numpy as np

#: How the steps of a pass are evened across ranks (``sync``; ``loader.plan.static_plan.TAIL_POLICIES``).
SYNC_PAD, SYNC_DROP = "pad", "drop"


def pass_steps(count: int, global_start: int, world_size: int, sync: str) -> int:
    """The steps every rank takes in a pass over ``count`` real batches dealt from ``global_start`` on: the
    remaining batches over the ranks, rounded up (``pad``: the short ranks get padding batches) or down
    (``drop``: the surplus is left out)."""
    remaining = max(count - global_start, 0)
    return -(-remaining // world_size) if sync == SYNC_PAD else remaining // world_size


def pass_end(count: int, global_start: int, world_size: int, sync: str) -> int:
    """The global batch after the pass's last one (the pass deals ``[global_start, pass_end)``)."""
    return global_start + world_size * pass_steps(count, global_start, world_size, sync)


def rank_batches(count: int, global_start: int, rank: int, world_size: int, sync: str) -> np.ndarray:
    """The global numbers of rank ``rank``'s batches in the pass, in order: ``global_start + rank``, then every
    ``world_size``-th.  Numbers from ``count`` on are padding batches."""
    steps = pass_steps(count, global_start, world_size, sync)
    return global_start + rank + world_size * np.arange(steps, dtype=np.int64)


def resume_point(position: int, world_size: int) -> tuple[int, int]:
    """Where a pass at ``world_size`` resumes the global position ``position``: ``(global_start, steps done)``.

    The pass deals from ``position % world_size`` (so it is the uninterrupted pass when ``position`` is a multiple
    of the world size), and its first ``position // world_size`` steps, the batches before ``position``, count as
    done."""
    return position % world_size, position // world_size


__all__ = ["SYNC_DROP", "SYNC_PAD", "pass_end", "pass_steps", "rank_batches", "resume_point"]
