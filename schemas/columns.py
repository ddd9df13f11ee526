"""The pack's columnar index: ``PACK/columns/*.npy``, every shard's ``index.json`` as a few numpy arrays.

``index.json`` is the human-readable record; the columns say the same thing in a form a reader loads in
milliseconds (parsing a million JSON records takes many seconds, and start-up time is a training job's idle GPU).
Both are written by the build and hashed in the manifest; ``speechpack validate`` recomputes the columns from the
shard indexes and requires them to be equal.

Files (all plain ``.npy``, no pickled objects):

``samples.npy``   one row per sample, in pack order: ``shard``, ``num_frames``, ``orig_sample_rate``, ``line``,
                  ``speaker_first``, ``speaker_count``, and per stream ``<stream>_first``, ``<stream>_count`` (the
                  sample's rows in that stream's table).
``keys.npy``      UTF-8 key per sample (numpy bytes, ``|S<n>``).
``speakers.npy``  UTF-8 speaker id per slot, every sample's slots one after another (``|S<n>``).
``<stream>.npy``  one row per segment.  Audio streams: ``shard``, ``offset``, ``channels``, ``length``,
                  ``scale``, ``mean``, ``rms``, ``peak``; data streams (faces, labels, text): ``shard``, ``offset``,
                  ``length`` (in rows).
``attr_<name>.npy`` kinds with per-sample attributes (``asd``, ``asr``; ``ATTRIBUTES_BY_KIND``): one value per
                  sample, ``<f8`` for numbers, UTF-8 ``|S<n>`` for strings.
"""

from __future__ import annotations

import numpy as np

from speechpack.schemas.constants import KEYS_FILE, SAMPLES_FILE, SPEAKERS_FILE, STREAM_TYPES, attr_file
from speechpack.schemas.kinds import ATTRIBUTES_BY_KIND, STREAMS_BY_KIND

SEGMENT_DTYPE = np.dtype([
    ("shard", "<i4"), ("offset", "<i8"), ("channels", "<i4"), ("length", "<i8"),
    ("scale", "<f8"), ("mean", "<f8"), ("rms", "<f8"), ("peak", "<f8"),
])
_SEGMENT_FIELDS = ("offset", "channels", "length", "scale", "mean", "rms", "peak")
DATA_SEGMENT_DTYPE = np.dtype([("shard", "<i4"), ("offset", "<i8"), ("length", "<i8")])
_DATA_SEGMENT_FIELDS = ("offset", "length")


def segment_fields(stream: str) -> tuple[str, ...]:
    """The keys of a segment record of ``stream`` (besides the shard, which the columns add)."""
    return _SEGMENT_FIELDS if STREAM_TYPES[stream].audio else _DATA_SEGMENT_FIELDS


def segment_dtype(stream: str) -> np.dtype:
    return SEGMENT_DTYPE if STREAM_TYPES[stream].audio else DATA_SEGMENT_DTYPE


def sample_dtype(kind: str) -> np.dtype:
    fields = [("shard", "<i4"), ("num_frames", "<i8"), ("orig_sample_rate", "<i4"), ("line", "<i8"),
              ("speaker_first", "<i8"), ("speaker_count", "<i4")]
    for stream in STREAMS_BY_KIND[kind]:
        fields += [(f"{stream}_first", "<i8"), (f"{stream}_count", "<i4")]
    return np.dtype(fields)


class ColumnBuilder:
    """Accumulates sample records (``index.json`` form) and turns them into the column arrays."""

    def __init__(self, kind: str):
        self.kind = kind
        self._samples: list[tuple] = []
        self._keys: list[bytes] = []
        self._speakers: list[bytes] = []
        self._segments: dict[str, list[tuple]] = {s: [] for s in STREAMS_BY_KIND[kind]}
        self._attrs: dict[str, list] = {name: [] for name in ATTRIBUTES_BY_KIND.get(kind, {})}

    def add(self, shard: int, record: dict) -> None:
        row = [shard, record["num_frames"], record["orig_sample_rate"], record["line"], len(self._speakers),
               len(record["speakers"])]
        for stream, rows in self._segments.items():
            segments = record["streams"][stream]
            row += [len(rows), len(segments)]
            fields = segment_fields(stream)
            rows.extend((shard, *(seg[f] for f in fields)) for seg in segments)
        for name, values in self._attrs.items():
            values.append(record["attrs"][name])
        self._samples.append(tuple(row))
        self._keys.append(record["key"].encode("utf-8"))
        self._speakers.extend(s.encode("utf-8") for s in record["speakers"])

    def arrays(self) -> dict[str, np.ndarray]:
        """File name -> array, for every column file."""
        result = {
            SAMPLES_FILE: np.array(self._samples, dtype=sample_dtype(self.kind)),
            KEYS_FILE: _bytes_array(self._keys),
            SPEAKERS_FILE: _bytes_array(self._speakers),
        }
        for stream, rows in self._segments.items():
            result[f"{stream}.npy"] = np.array(rows, dtype=segment_dtype(stream))
        for name, values in self._attrs.items():
            if ATTRIBUTES_BY_KIND[self.kind][name] is str:
                result[attr_file(name)] = _bytes_array([v.encode("utf-8") for v in values])
            else:
                result[attr_file(name)] = np.array(values, dtype="<f8")
        return result


def _bytes_array(values: list[bytes]) -> np.ndarray:
    width = max((len(v) for v in values), default=1) or 1
    return np.array(values, dtype=f"|S{width}")
