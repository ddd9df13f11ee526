"""The range of every numeric build option, in one table: the CLI declares them on its options and the library
checks them again when the options are made, so a value out of range is refused before any input is read, with
the option named.

Why bounds at all: numbers reach allocators and C libraries (soxr, numpy, pyroomacoustics) that fail badly outside
what audio needs: ``--sample-rate 1000000000000`` raised ``std::bad_alloc`` inside soxr (issue 13, item 8).  Each
bound is far outside any real use and well inside what the machinery survives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from speechpack.schemas.errors import SpeechpackError


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
#: ``build audio-bank --simulate N`` and its seed (numpy's generators take any non-negative integer; 64 bits).
SIMULATE = Range("--simulate", 1, 10**7)
SEED = Range("--seed", 0, 2**64 - 1)
#: Simulated rooms: metres and seconds of real rooms (an RT60 of minutes would allocate minutes of RIR per room).
ROOM_SIZE = Range("--room-min/--room-max", 0, 100, "m", low_open=True, integer=False)
RT60 = Range("--rt60", 0, 10, "s", low_open=True, integer=False)
DISTANCE = Range("--distance", 0, 100, "m", low_open=True, integer=False)
#: MSDWild windows (seconds): an hour is longer than any of its videos.
WINDOW_SECONDS = Range("--window", 0, 3600, "s", low_open=True, integer=False)
OVERLAP_SECONDS = Range("--overlap", 0, 3600, "s", integer=False)
#: Largest ratio between a file's rate and the pack's that ``packer.audio.resample`` accepts (8 kHz to 768 kHz is
#: 96; a header claiming 1 Hz is not audio).
MAX_RESAMPLE_RATIO = 1024


__all__ = ["DISTANCE", "JOBS", "MAX_RESAMPLE_RATIO", "OVERLAP_SECONDS", "ROOM_SIZE", "RT60", "Range", "SAMPLE_RATE",
           "SEED", "SHARD_BYTES", "SIMULATE", "WINDOW_SECONDS", "WORKERS"]
