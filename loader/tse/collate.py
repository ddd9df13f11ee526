"""WeSep's ``build_collect_keys`` and the tensor half of ``tse_collate_fn``, in numpy, for the per-row fields.

A ``FieldSpec`` says how one per-row field is stacked into a batch array: ``align`` its last (time) dimension to
the longest (``max``) or shortest (``min``) real row, or not at all (``None``); pad shorter rows on the right with
``fill_value`` (``constant``) or by repeating their last value (``edge``); longer rows are cropped to a prefix.
A missing row (``None``: an optional cue the slot lacks) becomes ``fill_value`` in the shape and dtype of the
field's first real row in the batch, or ``default_shape`` when no row of the batch has the field (its dtype from
the Python type of ``fill_value``: float gives float32, int int64, bool bool); with neither it is an error.

The base table is WeSep's (``tse_collate_fn`` in github.com/wenet-e2e/wesep; docs/loader.md, "Batches");
``resolve_field`` applies the overrides in WeSep's precedence: BASE < ``cues.yaml`` ``cues.<m>.collate`` < ``dataset_args.cues.<m>`` < ``dataset_args.collate.<field>``.
Nothing here reads packs or imports torch, so every rule is tested on plain arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from speechpack.loader.transport import batch_arrays
from speechpack.schemas.errors import SpeechpackError

ALIGNS = ("max", "min", None)
PAD_MODES = ("constant", "edge")
#: cue name (``cues.yaml`` and ``dataset_args.cues``) -> its batch field.
CUE_FIELDS = {"audio": "audio_aux", "spatial": "spatial_aux", "visual": "visual_aux", "textual": "textual_aux"}
#: ``speaker_label`` of rows without a label (PyTorch's ignore_index).
NO_LABEL = -100
#: Keys of a field spec that ``dataset_args.collate.<field>`` may set (WeSep's names).
OVERRIDE_KEYS = ("align", "pad_mode", "fill_value", "default_shape", "emit_present")
#: Keys of a cue's ``collate`` block in ``cues.yaml`` and of ``dataset_args.cues.<m>`` that reach the field spec.
CUE_DEFAULT_KEYS = ("default_shape", "fill_value", "emit_present")


class CollateError(SpeechpackError):
    """Rows of one field cannot be stacked (different non-time shapes, nothing to shape a fill on, ...)."""


@dataclass(frozen=True)
class FieldSpec:
    """How one per-row field is collated (see the module docstring)."""

    name: str
    align: str | None = None
    pad_mode: str = "constant"
    fill_value: float | int | bool = 0.0
    default_shape: tuple[int, ...] | None = None
    emit_present: bool = False
    required: bool = False

    def override(self, values: dict[str, Any]) -> "FieldSpec":
        """This spec with ``values`` (keys of ``FieldSpec``) replacing its own."""
        if "default_shape" in values and values["default_shape"] is not None:
            values = {**values, "default_shape": tuple(values["default_shape"])}
        return replace(self, **values)


#: WeSep's ``BASE_COLLECT_KEYS`` for the per-row fields it stacks (``wav_mix``/``wav_target`` are decoded straight
#: into the batch by ``loader.tse.batch``; ``spk``, ``key``, ``num_speaker`` are lists).
BASE_FIELDS = {
    "speaker_label": FieldSpec("speaker_label", align=None, fill_value=NO_LABEL, default_shape=()),
    "audio_aux": FieldSpec("audio_aux", align="min", pad_mode="constant", fill_value=0.0, emit_present=True),
    "spatial_aux": FieldSpec("spatial_aux", align="max", pad_mode="edge", fill_value=-999.0, emit_present=True),
    "visual_aux": FieldSpec("visual_aux", align="max", pad_mode="edge", fill_value=0.0, emit_present=True),
    "textual_aux": FieldSpec("textual_aux", align="max", pad_mode="constant", fill_value=0, emit_present=True),
}


def resolve_field(field: str, cue_defaults: dict[str, Any] | None = None, experiment: dict[str, Any] | None = None,
                  collate: dict[str, Any] | None = None, required: bool = False) -> FieldSpec:
    """The spec of ``field``: BASE, then the cue's ``cues.yaml`` collate defaults, then ``dataset_args.cues.<m>``
    (``default_shape``, ``fill_value``, ``emit_present``), then ``dataset_args.collate.<field>`` (any key).

    Each layer holds only the keys it sets.  ``required`` is the experiment's (already checked against the
    data's ``guaranteed``).
    """
    spec = BASE_FIELDS[field]
    for layer in (cue_defaults, experiment):
        if layer:
            spec = spec.override({k: v for k, v in layer.items() if k in CUE_DEFAULT_KEYS})
    if collate:
        spec = spec.override({k: v for k, v in collate.items() if k in OVERRIDE_KEYS})
    return replace(spec, required=required)


def _fill_dtype(fill_value: Any) -> np.dtype:
    """WeSep's ``torch.full(shape, fill)``: the dtype follows the Python type of the fill."""
    if isinstance(fill_value, (bool, np.bool_)):
        return np.dtype(bool)
    if isinstance(fill_value, (int, np.integer)):
        return np.dtype(np.int64)
    return np.dtype(np.float32)


def _full(shape: tuple[int, ...], fill_value: Any, dtype: np.dtype, name: str) -> np.ndarray:
    try:
        return np.full(shape, fill_value, dtype=dtype)
    except (OverflowError, ValueError, TypeError) as err:
        raise CollateError(f"{name}: fill_value {fill_value!r} does not fit the field's dtype {dtype} "
                           f"({err})") from None


def collate_field(values: list[np.ndarray | None], spec: FieldSpec, keys: list[str] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Stack one field's rows (``None`` = missing) into ``[rows, ...]``; also return the ``present`` flags.

    ``keys`` (the rows' mixture keys) only serve error messages.
    """
    name = spec.name
    present = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    real = [v for v in values if v is not None]
    if spec.required and not present.all():
        row = int(np.flatnonzero(~present)[0])
        where = f" (mixture {keys[row]!r})" if keys else ""
        raise CollateError(f"{name}: required feature missing for batch row {row}{where}")
    ref = real[0] if real else None
    if ref is None and spec.default_shape is None and len(values):
        raise CollateError(f"{name}: no row of the batch has it and no default_shape is set: cannot shape the fill "
                           f"(set dataset_args.cues.<cue>.default_shape or the cue's collate.default_shape)")
    if ref is not None:
        dtype, row_shape = ref.dtype, tuple(ref.shape)
    else:
        dtype, row_shape = _fill_dtype(spec.fill_value), tuple(spec.default_shape or ())
    # The target length: over the real rows' last dims, or default_shape[-1] when the batch has none.
    length = None
    if spec.align is not None:
        if real:
            if any(v.ndim == 0 for v in real):
                raise CollateError(f"{name}: align {spec.align!r} needs a time dimension, got a scalar row")
            lengths = [v.shape[-1] for v in real]
            length = max(lengths) if spec.align == "max" else min(lengths)
        elif values:
            if not row_shape:
                raise CollateError(f"{name}: align {spec.align!r} needs a default_shape with a time dimension, "
                                   f"got {list(row_shape)}")
            length = row_shape[-1]
        else:
            length = 0
        out_shape = (len(values), *row_shape[:-1], length) if row_shape else (len(values),)
    else:
        out_shape = (len(values), *row_shape)
    out = batch_arrays.empty(out_shape, dtype)
    fill_row = None
    for r, value in enumerate(values):
        if value is None:
            if fill_row is None:
                fill_row = _full(out_shape[1:], spec.fill_value, dtype, name)
            out[r] = fill_row
            continue
        if length is None:
            if tuple(value.shape) != row_shape:
                raise CollateError(f"{name}: rows of shapes {list(row_shape)} and {list(value.shape)} cannot be "
                                   f"stacked (align is none)" + (f" (mixture {keys[r]!r})" if keys else ""))
            out[r] = value
            continue
        if tuple(value.shape[:-1]) != out_shape[1:-1]:
            raise CollateError(f"{name}: rows of shapes {list(row_shape)} and {list(value.shape)} differ before the "
                               f"time dimension" + (f" (mixture {keys[r]!r})" if keys else ""))
        take = min(value.shape[-1], length)
        out[r, ..., :take] = value[..., :take]
        if take < length:
            if spec.pad_mode == "edge":
                if take == 0:
                    raise CollateError(f"{name}: cannot edge-pad an empty row" + (f" (mixture {keys[r]!r})"
                                                                                 if keys else ""))
                out[r, ..., take:] = value[..., take - 1:take]
            elif spec.pad_mode == "constant":
                out[r, ..., take:] = _full((), spec.fill_value, dtype, name)
            else:
                raise CollateError(f"{name}: unknown pad_mode {spec.pad_mode!r} (known: {', '.join(PAD_MODES)})")
    return out, present
