"""``ConfigError`` and the value checks every loader config parser shares, with the ranges they enforce.

The generic config (``loader.config``) and each task's ``dataset_args`` parser (``loader.tse``, ``loader.asd.args``,
``loader.asr.args``) use these, so a bad value reads the same whatever the task: the message names the key's full
path (``where``), the value and what is allowed.

Every number has a range, checked when the config is parsed (and again when an args object is built directly):
a huge ``batch_size`` or budget would otherwise surface much later as a ``MemoryError`` or ``OverflowError`` deep
inside planning, even in a dry run.  The limits are far above any real setting and far below what overflows
64-bit arithmetic or memory; they are the only place these bounds are written.

Every check takes the key's path as an argument (``where``): nothing here is ambient.  A config's parser names
keys under the config's path (``config.dataset_args.chunk_len``); an args object built in code checks itself in
``__post_init__`` and names its keys under ``dataset_args``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from numbers import Integral
from typing import Any

from speechpack.schemas.documents import bounded_repr, key_list
from speechpack.schemas.errors import SpeechpackError

#: Rows of one batch (``batch_size``, ``min_batch``, ``max_batch``, ``num_seqs_multiple_of`` ...).  A plan pads
#: every round of ``batch_size * world_size`` rows, so this bounds the plan's arrays too.
MAX_BATCH_ROWS = 1 << 20
#: Any other count: samples, frames, budgets, items, windows (about 2.2 years of 16 kHz audio).
MAX_COUNT = 1 << 40
#: Items of one epoch (``weighting.epoch_items``, ``choose``): the plan holds one int64 per item.
MAX_EPOCH_ITEMS = 1 << 32
#: Largest ``seed`` (the key of numpy's Philox generator is 64-bit) and ``epoch`` (a 32-bit counter word leaves
#: the weighting's cycle counter room for any pack size).
MAX_SEED = (1 << 63) - 1
MAX_EPOCH = (1 << 31) - 1
#: Decibel values (SNRs, gains) lie within +-this: beyond it one signal is below float32 resolution of the other.
MAX_DB = 100.0
#: A window, chunk or history of at most 2**28 samples (about 4.7 hours at 16 kHz; 1 GiB as float32 per row).
MAX_SAMPLES = 2 ** 28

#: The units ``byte_size`` reads (``schemas.units.parse_size``'s: decimal and binary).
_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "PIB": 2**50}
_SIZE = re.compile(r"^\s*(\d{1,30}(?:\.\d{1,30})?)\s*([A-Za-z]{0,3})\s*$")


class ConfigError(SpeechpackError):
    """A loader config key is unknown, missing or out of range (the message names it)."""


def take_known(obj: Any, where: str, known: dict[str, Any]) -> dict:
    """``obj``'s values for the keys of ``known`` (defaults where absent); any other key is an error."""
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = set(obj) - set(known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {key_list(unknown)} (known: {', '.join(sorted(known))})")
    return {key: obj.get(key, default) for key, default in known.items()}


def check_type(value: Any, kinds: type | tuple, where: str) -> Any:
    """``value`` if it is one of ``kinds`` (``True`` is not an int here), else a ``ConfigError`` naming ``where``."""
    kinds_t = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool) and bool not in kinds_t:
        raise ConfigError(f"{where}: expected {'/'.join(k.__name__ for k in kinds_t)}, got {bounded_repr(value)}")
    if not isinstance(value, kinds_t):
        raise ConfigError(f"{where}: expected {'/'.join(k.__name__ for k in kinds_t)}, got {bounded_repr(value)}")
    return value


def check_choice(value: Any, choices: tuple, where: str) -> str:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{where}: {bounded_repr(value)} is not one of {', '.join(choices)}")
    return value


def positive_int(value: Any, where: str, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """An int in ``[minimum, maximum]`` (the default ceiling, ``MAX_COUNT``, holds for any count)."""
    if check_type(value, int, where) < minimum:
        raise ConfigError(f"{where}: must be at least {minimum}, got {bounded_repr(value)}")
    if value > maximum:
        raise ConfigError(f"{where}: must be at most {maximum}, got {bounded_repr(value)}")
    return value


def byte_size(value: Any, where: str, maximum: int) -> int:
    """A config's size in bytes, exactly: an integer count of bytes, or text with a unit (``200GB``, ``1.5GiB``;
    a fraction of a unit is rounded half up to whole bytes), in ``[1, maximum]``.  A fractional byte count (``1.5``,
    ``1.5B``) and a float (YAML's ``1.5``, ``1e9``: never exact) are refused, as are values of other types."""
    unit = 1
    if isinstance(value, Integral) and not isinstance(value, bool):
        size = int(value)
    elif isinstance(value, str) and (match := _SIZE.match(value)) and match.group(2).upper() in _SIZE_UNITS:
        unit = _SIZE_UNITS[match.group(2).upper()]
        try:
            exact = Decimal(match.group(1)) * unit
        except InvalidOperation:  # pragma: no cover - the pattern admits only digits
            exact = Decimal(-1)
        if unit == 1 and exact != exact.to_integral_value():
            raise ConfigError(f"{where}: {bounded_repr(value)} is not a whole number of bytes")
        size = int((exact + Decimal("0.5")).to_integral_value(rounding="ROUND_FLOOR"))
    elif isinstance(value, float):
        raise ConfigError(f"{where}: expected a whole number of bytes or a size such as 48GiB, got the float "
                          f"{bounded_repr(value)} (write it as an integer, or with a unit)")
    else:
        raise ConfigError(f"{where}: expected a number of bytes or a size such as 48GiB (units: "
                          f"{', '.join(u for u in _SIZE_UNITS if u)}), got {bounded_repr(value)}")
    if size < 1:
        raise ConfigError(f"{where}: must be at least 1 byte, got {bounded_repr(value)}")
    if size > maximum:
        counted = "is" if unit == 1 else f"is {size} bytes,"  # a count of bytes is named once, bounded
        raise ConfigError(f"{where}: {bounded_repr(value)} {counted} more than the largest allowed ({maximum} "
                          f"bytes)")
    return size


def integer(value: Any, where: str, lo: int, hi: int) -> int:
    """An integer (a Python or numpy one, not a bool) in ``[lo, hi]``, as an int: for arguments such as ``seed`` or
    ``epoch`` that code passes rather than a config."""
    if isinstance(value, bool) or not isinstance(value, Integral) or not lo <= value <= hi:
        raise ConfigError(f"{where} must be an integer in [{lo}, {hi}], got {bounded_repr(value)}")
    return int(value)


def number(value: Any, where: str, lo: float, hi: float) -> float:
    """A finite int or float in ``[lo, hi]``, as a float."""
    check_type(value, (int, float), where)
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ConfigError(f"{where}: must be a number in [{lo}, {hi}], got {bounded_repr(value)}")
    return float(value)


def probability(value: Any, where: str) -> float:
    """A number in ``[0, 1]``, as a float."""
    if not 0 <= check_type(value, (int, float), where) <= 1:
        raise ConfigError(f"{where}: must be in [0, 1], got {bounded_repr(value)}")
    return float(value)


def value_range(value: Any, where: str, lo: float | None = None, hi: float | None = None) -> tuple[float, float]:
    """A ``[low, high]`` pair of finite numbers, ``low <= high``, optionally within ``[lo, hi]`` bounds."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"{where}: expected [low, high], got {bounded_repr(value)}")
    for x in value:
        check_type(x, (int, float), where)
        if not math.isfinite(x):
            raise ConfigError(f"{where}: expected finite numbers, got {bounded_repr(value)}")
    a, b = float(value[0]), float(value[1])
    if a > b:
        raise ConfigError(f"{where}: low {a} > high {b}")
    if (lo is not None and a < lo) or (hi is not None and b > hi):
        raise ConfigError(f"{where}: must lie within [{lo}, {hi}], got {bounded_repr(value)}")
    return a, b


def db_range(value: Any, where: str) -> tuple[float, float]:
    """A ``[low, high]`` range of decibels within ``+-MAX_DB``."""
    return value_range(value, where, -MAX_DB, MAX_DB)


def check_int(value: Any, where: str, lo: int, hi: int, unit: str = "") -> int:
    """``value`` if it is an int in ``[lo, hi]``; else a ``ConfigError`` naming ``where`` and the range."""
    check_type(value, int, where)
    if not lo <= value <= hi:
        raise ConfigError(f"{where}: must be in [{lo}, {hi}]{unit}, got {bounded_repr(value)}")
    return value


__all__ = ["MAX_BATCH_ROWS", "MAX_COUNT", "MAX_DB", "MAX_EPOCH", "MAX_EPOCH_ITEMS", "MAX_SAMPLES", "MAX_SEED",
           "ConfigError", "byte_size", "check_choice", "check_int", "check_type", "db_range",
           "integer", "number", "positive_int", "probability", "take_known", "value_range"]
