"""Unit conversions with one stated rounding rule each, so no module rounds its own way."""

from __future__ import annotations

import re

from speechpack.schemas.errors import SpeechpackError

_SIZE_UNITS = {
    "": 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse ``1GB`` (decimal), ``512MiB`` (binary) or a plain byte count into bytes, rounding half up."""
    if isinstance(text, bool):
        raise SpeechpackError(f"cannot read size {text!r}")
    if isinstance(text, int):
        value, unit = float(text), ""
    else:
        match = _SIZE_RE.match(text)
        if not match or match.group(2).upper() not in _SIZE_UNITS:
            raise SpeechpackError(
                f"cannot read size {text!r}: expected a number with an optional unit "
                f"({', '.join(u for u in _SIZE_UNITS if u)})"
            )
        value, unit = float(match.group(1)), match.group(2).upper()
    size = int(value * _SIZE_UNITS[unit] + 0.5)
    if size <= 0:
        raise SpeechpackError(f"size must be positive, got {text!r}")
    return size


def seconds_to_samples(seconds: float, sample_rate: int) -> int:
    """Seconds to a sample count, rounding half up (lhotse's ``compute_num_samples`` rule).  The one rule for
    seconds -> samples, except the ASD time base (``schemas.timebase``), which keeps the half-to-even rule asd packs
    were always cut by so that their bytes never change."""
    return int(seconds * sample_rate + 0.5)


def samples_to_seconds(num_samples: int, sample_rate: int) -> float:
    return num_samples / sample_rate


def format_bytes(num_bytes: int) -> str:
    """Human-readable decimal size (``1.23 GB``) for summaries."""
    size = float(num_bytes)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun`` in the form the count takes: ``1 batch``, ``2 batches``, ``0 samples``.  The one
    place messages pluralise: ``plural_form`` for nouns that do not take ``-s``/``-es`` (``plural(n, "entry",
    "entries")``)."""
    if count == 1:
        return f"{count} {noun}"
    if plural_form is None:
        plural_form = noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")
    return f"{count} {plural_form}"
