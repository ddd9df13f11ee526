"""Value ranges of the TSE ``dataset_args``, and where a range error points.

An args dataclass checks its values in ``__post_init__``, so it has no ``where`` of its own: ``where_set`` lets
``from_dict`` say under which path the keys are named (``config.dataset_args``) while it builds the objects; a
directly built object names them under ``dataset_args``.  The bounds are generous (they stop nonsense such as a
1 GHz rate that crashes the resampler, or a batch of 1e18 rows that exhausts memory while planning) and each is
defined once, here or next to the field it bounds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from speechpack.loader.config_checks import MAX_BATCH_ROWS, MAX_DB, ConfigError, check_type  # noqa: F401 (shared bounds)

#: A window, chunk or history of at most 2**28 samples (about 4.7 hours at 16 kHz; 1 GiB as float32 per row).
MAX_SAMPLES = 2 ** 28

_WHERE: ContextVar[str] = ContextVar("tse_dataset_args_where", default="dataset_args")


@contextmanager
def where_set(where: str) -> Iterator[None]:
    """Within the block, range errors name keys under ``where``."""
    token = _WHERE.set(where)
    try:
        yield
    finally:
        _WHERE.reset(token)


def at(key: str) -> str:
    """The full path of ``key`` (``config.dataset_args.chunk_len``)."""
    return f"{_WHERE.get()}.{key}"


def check_int(value: Any, key: str, lo: int, hi: int, unit: str = "") -> int:
    """``value`` if it is an int in ``[lo, hi]``; else a ``ConfigError`` naming ``key`` and the range."""
    check_type(value, int, at(key))
    if not lo <= value <= hi:
        raise ConfigError(f"{at(key)}: must be in [{lo}, {hi}]{unit}, got {value}")
    return value


def check_finite(value: Any, key: str, lo: float, hi: float) -> float:
    """``value`` if it is a finite number in ``[lo, hi]``."""
    check_type(value, (int, float), at(key))
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ConfigError(f"{at(key)}: must be a finite number in [{lo}, {hi}], got {value}")
    return float(value)


def check_pair(value: tuple[float, float], key: str, lo: float, hi: float) -> tuple[float, float]:
    """A ``[low, high]`` pair of finite numbers within ``[lo, hi]``, ``low <= high``."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"{at(key)}: expected [low, high], got {value!r}")
    for x in value:
        check_type(x, (int, float), at(key))
    if not all(math.isfinite(x) and lo <= x <= hi for x in value):
        raise ConfigError(f"{at(key)}: must lie within [{lo}, {hi}], got {list(value)!r}")
    if value[0] > value[1]:
        raise ConfigError(f"{at(key)}: low {value[0]} > high {value[1]}")
    return float(value[0]), float(value[1])
