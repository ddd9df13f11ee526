"""Audio of a TSE batch segment by segment, and the collation of its per-row fields.

A segment is first described (``loader.samples.Audio``: the mapped view, its float32 scale and shift), then
decoded once, into its destination, through the one decode path (``loader.samples``: scaling, normalisation
and the copy are decided there for every path).  A mixture repeated for each of its targets is decoded once and
copied.  Packs at another rate than the loader's are resampled with soxr when described (slow; the loader warns).

Segment by segment is how online mixing reads its sources and how pre-mixed packs resampled at load time are read;
pre-mixed batches at the loader's rate go through ``loader.tse.table``, which gives the same floats for a whole
batch at once.

Collation: WeSep's ``build_collect_keys`` and the tensor half of ``tse_collate_fn``, in numpy, for the per-row fields.

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
from typing import Any, NamedTuple

import numpy as np
from speechpack.loader.normalize import Normalizer, normalizer
from speechpack.loader.pack import Pack
from speechpack.loader.pack.readahead import will_need_views
from speechpack.loader.transport.batch_arrays import NUMPY, BatchArrays
from speechpack.loader.samples import Audio, copy_window, segment_audio
from speechpack.loader.tse.windows import Window, tile_row
from speechpack.schemas.errors import SpeechpackError


class Decoder:
    """Segments of ``packs`` ready to decode at the loader's ``rate`` under the loader's normalisation (a
    ``normalize`` value or its ``loader.normalize.Normalizer``), through the one decode path
    (``loader.samples``)."""

    def __init__(self, packs: list[Pack], rate: int, normalize: "str | Normalizer"):
        self.packs = packs
        self.rate = rate
        self.normalizer = normalizer(normalize) if isinstance(normalize, str) else normalize

    def audio(self, pack: Pack, stream: str, segment: int, gain: np.ndarray | None = None) -> Audio:
        """One segment, with its own gain (or ``gain``, its mixture's)."""
        return segment_audio(self.normalizer, pack, stream, segment, self.rate, gain)[0]

    def sample(self, pack_id: int, sample: int, slot: int, mix_stream: str, target_stream: str
               ) -> tuple[Audio, list[Audio], list[str], str]:
        """(mix, [targets], speakers, key) of a sample; only target ``slot`` when ``slot >= 0``."""
        pack = self.packs[pack_id]
        mix_seg = pack.segments_of(mix_stream, sample)[0]
        target_segs = list(pack.segments_of(target_stream, sample))
        speakers = list(pack.speakers_of(sample))
        if slot >= 0:
            target_segs, speakers = [target_segs[slot]], [speakers[slot]]
        # Mixture and targets share the mixture's gain, so the mixture stays the sum of its targets.
        mix, gain = segment_audio(self.normalizer, pack, mix_stream, mix_seg, self.rate)
        targets = [self.audio(pack, target_stream, j, gain) for j in target_segs]
        return mix, targets, speakers, str(pack.keys[sample])


class Row(NamedTuple):
    """One row of a batch (one target speaker of one mixture): ``item`` is the mixture's position in the batch
    (rows are mixture-major), ``mix``/``target`` its audio (``None`` for an online mixture, rendered elsewhere),
    ``num_speaker`` the mixture's speakers, ``window`` where its samples come from, ``pack`` the pack's index."""

    item: int
    mix: Audio | None
    target: Audio | None
    speaker: str
    key: str
    num_speaker: int
    window: Window
    pack: int


def aligned_length(lengths: np.ndarray | list[int], align: str) -> int:
    """A batch field's row length from its rows' lengths (an array or a list): the longest (``max``) or the
    shortest (``min``); 0 without rows."""
    if not len(lengths):
        return 0
    lengths = np.asarray(lengths)
    return int(lengths.max() if align == "max" else lengths.min())


def collate_rows(sources: list[Audio], windows: list[Window], lengths: np.ndarray, align: str,
                 mixture_of: list[int] | None = None, tile: bool = False, arrays: BatchArrays = NUMPY) -> np.ndarray:
    """Decode every row once into a ``[rows, C, T]`` float32 array (T by ``align``), zero-padded on the right
    (``tile``: tiled, mainline's short chunks; ``loader.tse.windows.tile_row``).  ``mixture_of``: each row's
    mixture; a row repeating the previous row's mixture is copied, not decoded.  ``arrays`` makes the output
    (``loader.transport.batch_arrays``)."""
    out_len = aligned_length(lengths, align)
    channels = sources[0][0].shape[0] if sources else 1
    out = arrays.empty((len(sources), channels, out_len), np.float32)
    # Cold cache: the batch's ranges announced at once, in one system call (a repeated mixture is copied).
    will_need_views([audio[:, window.start:window.start + min(window.take, out_len)]
                     for r, ((audio, *_scaling), window) in enumerate(zip(sources, windows))
                     if mixture_of is None or r == 0 or mixture_of[r] != mixture_of[r - 1]])
    previous = None
    for r, ((audio, scale, shift), window) in enumerate(zip(sources, windows)):
        if mixture_of is not None and previous is not None and mixture_of[r] == mixture_of[r - 1]:
            out[r] = out[r - 1]  # the same mixture repeated for its next target
            continue
        take = min(window.take, out_len)
        copy_window(out[r, :, :take], audio[:, window.start:window.start + take], scale, shift)
        if tile and take < out_len:
            tile_row(out[r], take)
        else:
            out[r, :, take:] = 0.0  # zero only the padding: the rest is written once
        previous = r
    return out


def decode_into(row: np.ndarray, audio: Audio, window: Window, tile: bool = False) -> None:
    """Channel 0 of ``audio``'s window decoded into ``row`` (``loader.samples.copy_window``), zero-padded to
    the row's length (``tile``: tiled, ``loader.tse.windows.tile_row``)."""
    data, scale, shift = audio
    take = window.take
    copy_window(row[:take], data[0, window.start:window.start + take], scale, shift)
    if take < len(row):
        if tile:
            tile_row(row, take)
        else:
            row[take:] = 0.0


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
#: into the batch by ``loader.tse.task``; ``spk``, ``key``, ``num_speaker`` are lists).
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


def collate_field(values: list[np.ndarray | None], spec: FieldSpec, keys: list[str] | None = None,
                  arrays: BatchArrays = NUMPY) -> tuple[np.ndarray, np.ndarray]:
    """Stack one field's rows (``None`` = missing) into ``[rows, ...]`` (made by ``arrays``); also return the
    ``present`` flags.

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
            length = aligned_length(lengths, spec.align)
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
    out = arrays.empty(out_shape, dtype)
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


__all__ = ["ALIGNS", "BASE_FIELDS", "CUE_DEFAULT_KEYS", "CUE_FIELDS", "NO_LABEL", "OVERRIDE_KEYS", "PAD_MODES", "Audio",
           "CollateError", "Decoder", "FieldSpec", "Row", "aligned_length", "collate_field", "collate_rows",
           "decode_into", "resolve_field"]
