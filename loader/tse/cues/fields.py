"""``npy/fields`` (spatial cue): named numeric fields per speaker (azimuth, elevation, a trajectory ...), the
``cues.yaml`` ``fields`` list in order: float32 ``[F]`` when all are scalars, else ``[F, T]``."""

from __future__ import annotations

import math

import numpy as np

from speechpack.loader.tse.cues.values import ChunkInfo, align_to_duration, crop_by_ratio


def read(bank, item: int, data: np.ndarray) -> tuple[dict[str, np.ndarray], float | None]:
    """``({name: float32 0-d or 1-D array}, duration_sec or None)`` with only the fields the item has."""
    fields = {}
    for name, value_ in zip(bank.fields, bank.values[item]):
        if value_["present"]:
            offset, length = int(value_["offset"]), int(value_["length"])
            fields[name] = np.array(data[offset]) if length == -1 else np.array(data[offset:offset + length])
    duration = float(bank.field("duration_sec", item))
    return fields, None if math.isnan(duration) else duration


def value(bank, spec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray:
    values, duration = bank.read(item)
    return spatial_value(values, duration, spec.fields, spec.field_defaults, chunk)


def check_spec(spec, pack_path: str) -> str | None:
    """What makes a ``cues.yaml`` entry of this representation unusable, or None."""
    return None if spec.fields else "a spatial cue needs a non-empty fields list"


def spatial_value(values: dict[str, np.ndarray], duration_sec: float | None, fields: tuple[str, ...],
                  field_defaults: dict, chunk: ChunkInfo) -> np.ndarray:
    """The listed ``fields`` in order: float32 ``[F]`` when all are scalars, else ``[F, T]`` (scalars broadcast).

    A field the item lacks takes ``field_defaults``, else ``KeyError``.  1-D fields are aligned to the audio via
    ``duration_sec`` and cut to the chunk (both with edge padding).
    """
    rows = []
    for name in fields:
        if name in values:
            value = np.asarray(values[name], dtype=np.float32)
        elif name in field_defaults:
            value = np.asarray(field_defaults[name], dtype=np.float32)
        else:
            raise KeyError(f"spatial field {name!r} missing (item has {', '.join(sorted(values)) or 'none'})")
        if value.ndim > 1:
            raise ValueError(f"spatial field {name!r} must be a scalar or 1-D, got {list(value.shape)}")
        if value.ndim == 1:
            value = crop_by_ratio(align_to_duration(value, duration_sec, chunk.audio_seconds), chunk)
        rows.append(value)
    lengths = {value.shape[0] for value in rows if value.ndim == 1}
    if not lengths:
        return np.asarray([float(value) for value in rows], dtype=np.float32)
    if len(lengths) > 1:
        raise ValueError(f"spatial sequence fields have different lengths {sorted(lengths)}")
    length = lengths.pop()
    return np.stack([value if value.ndim == 1 else np.full(length, value, dtype=np.float32) for value in rows])
