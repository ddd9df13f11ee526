"""How much memory an epoch plan and a batch may take, estimated before anything is allocated (docs/loader.md,
"Memory and I/O").

Why.  Sizes that are each within their documented range can still ask for more memory than the machine has:
``choose: 4294967296`` plans four billion items (about 27 bytes each while the plan is made: over 100 GB), and
``chunk_len: 268435456`` with ``batch_size: 64`` asks for batch arrays of hundreds of GiB.  Allocating first
means minutes of work before a ``MemoryError``, or a process the kernel kills (``np.empty`` of a huge array may
succeed and fail only when written).  So the loader estimates both from the config and the packs, which costs
nothing, and refuses with the figures.

The ceiling is the config's top-level ``memory_limit`` (an integer count of bytes, or a size such as ``48GiB``:
exact, at most ``MAX_MEMORY_LIMIT``; ``1.5`` bytes or a float are refused), by default half of
the memory available when the loader starts (``MemAvailable`` of ``/proc/meminfo``), read once then
(``MemoryCeiling.of``) and carried with the loader to its workers: a plan accepted at start is judged against the
same figure in every later epoch, worker and rank, not against what other processes leave free hours later.  A batch
counts once per batch in flight (DataLoader workers x ``prefetch_factor``, at least one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from speechpack.loader.config_checks import ConfigError, byte_size
from speechpack.schemas.constants import STREAM_TYPES
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.units import format_bytes

#: Peak bytes per planned unit while ``plan_epoch`` makes a plan (tracemalloc, 2M units, numpy 2): static batches
#: 18.5 (27 with a weighting's selection), budget batches 46 (62).  Rounded up; a plan holds about 10 per unit.
PLAN_BYTES_PER_UNIT = 32
BUDGET_PLAN_BYTES_PER_UNIT = 64
#: Share of the available memory the default ceiling allows.
DEFAULT_SHARE = 0.5
#: Largest ``memory_limit``: 1 PiB, more than any machine's memory; a larger figure is a mistake, refused by name.
MAX_MEMORY_LIMIT = 1 << 50
#: The ceiling where the available memory cannot be read (no ``/proc/meminfo``).
FALLBACK_LIMIT = 8 << 30


class MemoryLimitError(SpeechpackError):
    """A plan or a batch would take more memory than ``memory_limit`` allows."""


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (what the kernel can give without swapping); None elsewhere."""
    try:
        with open("/proc/meminfo", "rb") as fp:
            for line in fp:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_memory_limit() -> int:
    """Half of the memory available now (``FALLBACK_LIMIT`` where that cannot be read)."""
    available = available_memory()
    return FALLBACK_LIMIT if available is None else int(available * DEFAULT_SHARE)


def memory_limit_bytes(value: Any, where: str = "memory_limit") -> int | None:
    """A config's ``memory_limit`` (an integer count of bytes, or ``48GiB``/``500MB``) in exact bytes, at most
    ``MAX_MEMORY_LIMIT`` (``loader.config_checks.byte_size``: no fractional bytes, no float); None stays None (the
    default, decided when the loader starts)."""
    if value is None:
        return None
    try:
        return byte_size(value, where, MAX_MEMORY_LIMIT)
    except ConfigError as err:
        raise MemoryLimitError(str(err)) from None


@dataclass(frozen=True)
class MemoryCeiling:
    """The bytes a plan or the batches in flight may take, fixed when the loader starts (see the module docstring):
    the config's ``memory_limit`` (``configured``), else its default read from the available memory at that time."""

    limit: int
    configured: bool

    @classmethod
    def of(cls, memory_limit: "MemoryCeiling | int | None") -> "MemoryCeiling":
        """The ceiling of a config's ``memory_limit`` in bytes; None reads the default now (a ceiling stays)."""
        if isinstance(memory_limit, MemoryCeiling):
            return memory_limit
        if memory_limit is None:
            return cls(default_memory_limit(), configured=False)
        return cls(int(memory_limit), configured=True)

    def __str__(self) -> str:
        how = ("memory_limit" if self.configured
               else f"memory_limit's default, {DEFAULT_SHARE:.0%} of the available memory")
        return f"{format_bytes(self.limit)} ({how})"


def check_plan_memory(units: int, budget: bool, limit: MemoryCeiling | int | None, what: str) -> None:
    """Refuse a plan of ``units`` planned units (items, or chunks) whose making would take more than ``limit``
    (``MemoryCeiling.of``: None reads the default now).  ``what`` says where the count comes from
    (``packs[0].choose``, ...)."""
    ceiling = MemoryCeiling.of(limit)
    per_unit = BUDGET_PLAN_BYTES_PER_UNIT if budget else PLAN_BYTES_PER_UNIT
    need = units * per_unit
    if need > ceiling.limit:
        raise MemoryLimitError(f"an epoch of {units} planned units ({what}) needs about {format_bytes(need)} to plan "
                               f"({per_unit} bytes a unit), over {ceiling}; plan fewer items per epoch, or raise "
                               f"memory_limit")


def largest_batch_rows(plan: Any, lengths: np.ndarray) -> tuple[int, int]:
    """(rows, samples per row) of the plan's batch with the most samples, rows padded to the batch's longest unit."""
    if len(plan) == 0 or len(lengths) == 0:
        return 0, 0
    if plan.offsets is None:
        longest = lengths[plan.items].max(axis=1)
        b = int(np.argmax(longest))
        return int(plan.items.shape[1]), int(longest[b])
    sizes = np.diff(plan.offsets)
    starts = plan.offsets[:-1][sizes > 0]
    longest = np.maximum.reduceat(lengths[plan.items], starts)
    samples = longest * sizes[sizes > 0]
    b = int(np.argmax(samples))
    return int(sizes[sizes > 0][b]), int(longest[b])


def bytes_per_row_sample(packs: list) -> int:
    """What one planned unit's batch rows take per sample, at most: float32 input and output rows (a mixture and its
    target, the audio and its features) for every speaker a sample holds and every channel (the packs' largest)."""
    speakers = max((int(p.speaker_count.max()) for p in packs if len(p)), default=1)
    channels = max((int(t.channels.max()) for p in packs for name, t in p.streams.items()
                    if STREAM_TYPES[name].audio and len(t.channels)), default=1)  # audio: a SegmentTable
    return 4 * 2 * max(speakers, 1) * max(channels, 1)


def check_batch_memory(rows: int, samples: int, bytes_per_row_sample: int, in_flight: int,
                       limit: MemoryCeiling | int | None, what: str) -> None:
    """Refuse batches whose arrays (``rows`` x ``samples`` x ``bytes_per_row_sample``), times the batches in flight,
    exceed ``limit`` (``MemoryCeiling.of``: None reads the default now)."""
    ceiling = MemoryCeiling.of(limit)
    batch = rows * samples * bytes_per_row_sample
    need = batch * max(in_flight, 1)
    if need > ceiling.limit:
        flight = f" x {in_flight} batches in flight" if in_flight > 1 else ""
        raise MemoryLimitError(f"the largest batch ({what}: {rows} rows of {samples} samples) needs about "
                               f"{format_bytes(batch)}{flight}, over {ceiling}; use a smaller batch or chunk, or raise "
                               f"memory_limit")


__all__ = ["BUDGET_PLAN_BYTES_PER_UNIT", "DEFAULT_SHARE", "FALLBACK_LIMIT", "MAX_MEMORY_LIMIT", "PLAN_BYTES_PER_UNIT", "MemoryCeiling",
           "MemoryLimitError", "available_memory", "bytes_per_row_sample", "check_batch_memory", "check_plan_memory",
           "default_memory_limit", "largest_batch_rows", "memory_limit_bytes"]
