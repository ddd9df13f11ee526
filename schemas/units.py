"""Numbers with units: conversions with one stated rounding rule each, so no module rounds its own way, the
range (in its unit) of every numeric build option, and the one limit on resampling ratios
(:func:`resample_ratio_problem`, held by builds and by the loader's noise LMDB reader alike).

**Ranges.**  The range of every numeric build option, in one table: the CLI declares them on its options and the library
checks them again when the options are made, so a value out of range is refused before any input is read, with
the option named.

Why bounds at all: numbers reach allocators and C libraries (soxr, numpy, pyroomacoustics) that fail badly outside
what audio needs: ``--sample-rate 1000000000000`` raised ``std::bad_alloc`` inside soxr.  Each
bound is far outside any real use and well inside what the machinery survives.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (``low < value`` when ``low_open``), for the option spelled ``option``."""

    option: str
    low: float
    high: float
    unit: str = ""
    low_open: bool = False
    integer: bool = True

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        low = f"above {self.low:g}" if self.low_open else f"from {self.low:g}"
        return f"{low} to {self.high:g}{unit}"

    def problem(self, value) -> str | None:
        """Why ``value`` is not a valid value of the option, or ``None``."""
        numeric = (int,) if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, numeric) or not math.isfinite(value):
            kind = "an integer" if self.integer else "a number"
            return f"{self.option} must be {kind} {self.describe()}, got {value!r}"
        if value < self.low or value > self.high or (self.low_open and value == self.low):
            return f"{self.option} must be {self.describe()}, got {value!r}"
        return None

    def check(self, value):
        """``value``, or ``SpeechpackError`` naming the option and its range."""
        problem = self.problem(value)
        if problem is not None:
            raise SpeechpackError(problem)
        return value


#: Rate of the stored audio: telephone-band corpora at the bottom, the highest rate audio hardware offers at the top.
SAMPLE_RATE = Range("--sample-rate", 1000, 768000, "Hz")
#: Bytes per shard: below a kilobyte every sample is its own shard anyway; a terabyte shard defeats sharding.
SHARD_BYTES = Range("--shard-size", 1000, 10**12, "bytes")
#: Processes (or threads) of one build, finalize or copy.
WORKERS = Range("--workers", 1, 1024)
JOBS = Range("--jobs", 1, 1024)
#: ``--shards i/n``: jobs of one array build; 2**20 is the loader's largest world size, beyond any scheduler's array.
SHARD_SLICES = Range("--shards n", 1, 1 << 20)
#: ``build audio-bank --simulate N`` and its seed (numpy's generators take any non-negative integer; 64 bits).
SIMULATE = Range("--simulate", 1, 10**7)
SEED = Range("--seed", 0, 2**64 - 1)
#: Simulated rooms: metres and seconds of real rooms (an RT60 of minutes would allocate minutes of RIR per room).
ROOM_SIZE = Range("--room-min/--room-max", 0, 100, "m", low_open=True, integer=False)
RT60 = Range("--rt60", 0, 10, "s", low_open=True, integer=False)
DISTANCE = Range("--distance", 0, 100, "m", low_open=True, integer=False)
#: MSDWild windows (seconds): an hour is longer than any of its videos.
#: ``--block-seconds``: the unit of random access of a compressed pack (format 1.4); a minute is far past any use.
BLOCK_SECONDS = Range("--block-seconds", 0, 60, "s", low_open=True, integer=False)
#: ``--opus-bitrate``, bits per second per channel: what libsndfile's Opus encoder can be set to.
OPUS_BITRATE = Range("--opus-bitrate", 6000, 256000, "bit/s per channel")
WINDOW_SECONDS = Range("--window", 0, 3600, "s", low_open=True, integer=False)
OVERLAP_SECONDS = Range("--overlap", 0, 3600, "s", integer=False)
#: Largest ratio between a file's rate and the pack's that ``packer.audio.resample`` accepts (8 kHz to 768 kHz is
#: 96; a header claiming 1 Hz is not audio).
MAX_RESAMPLE_RATIO = 1024


def resample_ratio_problem(rate: int, new_rate: int) -> str | None:
    """Why soxr should not resample from ``rate`` to ``new_rate`` Hz, or ``None``: both must be positive and
    within ``MAX_RESAMPLE_RATIO`` of each other (far beyond any real pair of rates; a huge ratio allocates the
    output at once and has crashed soxr).  The one limit a build holds every file to and the loader every noise
    LMDB entry it draws."""
    if rate <= 0 or new_rate <= 0:
        return f"cannot resample from {rate} Hz to {new_rate} Hz: rates must be positive"
    if max(rate, new_rate) > MAX_RESAMPLE_RATIO * min(rate, new_rate):
        return (f"cannot resample from {rate} Hz to {new_rate} Hz: the ratio is beyond 1:{MAX_RESAMPLE_RATIO} "
                f"(a file header with a wrong rate?)")
    return None


__all__ = ["DISTANCE", "JOBS", "MAX_RESAMPLE_RATIO", "OVERLAP_SECONDS", "ROOM_SIZE", "RT60", "SAMPLE_RATE", "SEED",
           "SHARD_BYTES", "SIMULATE", "WINDOW_SECONDS", "WORKERS", "Range", "resample_ratio_problem"]
