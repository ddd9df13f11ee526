"""Speaker cues per row: WeSep's cue layer (docs/loader.md, "Cues") over a pack's cue banks.

``resolve_cues(args, packs)`` is WeSep's ``build_collect_keys`` for the cues: it checks ``dataset_args.cues``
against every pack's ``cues.yaml`` (a used cue the data lacks, ``required: true`` on a cue the data does not
guarantee) and returns one ``CueField`` per used cue, in ``dataset_args.cues`` order, with its collate spec.
``CueField.read(...)`` gives one slot's value, or ``None`` when an optional cue is missing:

- the lookup key is the speaker (``spk_id``) or ``"<key>::<speaker>"`` (``mix_spk_id``);
- ``random`` takes one of the key's entries with the batch's counter-based draws, ``fixed`` the first;
- a missing key, or an entry that cannot be used, is an error naming the cue, key and pack when the cue is
  required by the experiment or guaranteed by the data (WeSep's processors raise on ``guaranteed``); otherwise
  the slot is missing (filled at collation, ``<field>_present`` False);
- waveforms (never chunked) at the loader's rate ``[C, T]``; embeddings ``[D]``; textual phoneme ids int64 ``[L]``;
- time-varying cues follow the audio chunk (``chunk_ratio``), the audio lasting ``orig_len / rate`` seconds:
  ``muse_frontend`` ``[..., T]`` and 1-D spatial fields are aligned to the audio duration through their
  ``duration_sec`` (cropped, or edge-padded), then cut at ``int(start_ratio * N) : int(end_ratio * N)``
  (edge-padded past the end); ``raw_video`` is padded with its last frame or trimmed to ``round(seconds * fps)``
  frames, then the chunk's ``round((end - start) * fps)`` frames from ``round(start * fps)`` (edge-padded),
  ``[H, W, C, T]`` uint8.

The functions below the classes are pure (arrays in, arrays out) and tested without packs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import soxr

from loader.tse.collate import CUE_FIELDS, FieldSpec, resolve_field
from loader.config_checks import ConfigError
from loader.tse.args import DatasetArgs
from loader.tse.cues.request import CueRequest
from schemas.cues import CueSpec, lookup_key
from schemas.errors import SpeechpackError

#: Uniform draws each cue takes per row from the batch's generator: the entry, then textual's span length and start.
DRAWS_PER_CUE = 3
#: WeSep's minimum window for a chunk with ``end <= start`` (``_chunk_time_window``): one 25 fps frame.
MIN_WINDOW_SECONDS = 1.0 / 25.0


class CueError(SpeechpackError):
    """A cue a row needs cannot be read: its lookup key is absent, or its resource is unusable."""


@dataclass(frozen=True)
class ChunkInfo:
    """Where a row's audio comes from (WeSep's ``chunk_ratio``) and the loader's rate."""

    start_ratio: float
    end_ratio: float
    orig_len: int
    rate: int

    @property
    def audio_seconds(self) -> float:
        return self.orig_len / self.rate


@dataclass
class CueField:
    """One used cue: its batch field, its collate spec, and per pack the bank and ``cues.yaml`` entry."""

    request: CueRequest
    field: FieldSpec
    representation: str
    required: bool
    banks: list  # per pack: loader.tse.cues.bank.CueBank
    specs: list[CueSpec]  # per pack

    @property
    def name(self) -> str:
        return self.request.name

    def read(self, pack_id: int, pack_path: str, sample_key: str, speaker: str, chunk: ChunkInfo,
             draws: np.ndarray, source_key: str | None = None) -> np.ndarray | None:
        """The slot's cue value, or ``None`` when it is missing and neither required nor guaranteed.

        ``source_key``: an online mixture's source utterance (``mix_spk_id`` lookups use it, not the mix key)."""
        bank, spec = self.banks[pack_id], self.specs[pack_id]
        strict = self.required or spec.guaranteed
        key = lookup_key(spec.policy_key, sample_key, speaker, source_key)
        entries = bank.find(key)
        if len(entries) == 0:
            if strict:
                raise CueError(f"cue {self.name!r}: no entry for lookup key {key!r} ({spec.policy_key}) in pack "
                               f"{pack_path} (" + ("required by dataset_args.cues" if self.required else
                                                   "cues.yaml marks it guaranteed") + ")")
            return None
        entry = entries[pick_entry(len(entries), spec.policy_type, float(draws[0]))]
        try:
            return self._value(bank, spec, bank.entry_item(entry), chunk, draws)
        except (ValueError, IndexError, KeyError) as err:
            if strict:
                raise CueError(f"cue {self.name!r}: cannot use the entry of lookup key {key!r} in pack {pack_path}: "
                               f"{err}") from None
            return None

    def _value(self, bank, spec: CueSpec, item: int, chunk: ChunkInfo, draws: np.ndarray) -> np.ndarray | None:
        representation = self.representation
        if representation == "waveform":
            audio = bank.read(item)
            if bank.sample_rate != chunk.rate:
                audio = np.ascontiguousarray(soxr.resample(np.ascontiguousarray(audio.T, dtype=np.float32),
                                                           bank.sample_rate, chunk.rate).T)
            return np.asarray(audio, dtype=np.float32)
        if representation == "spk_embedding":
            return embedding(bank.read(item))
        if representation == "raw_video":
            frames, fps = bank.read(item)
            return video_chunk(frames, fps, chunk)
        if representation == "muse_frontend":
            features, duration = bank.read(item)
            return muse_chunk(features, duration, chunk)
        if representation == "fields":
            values, duration = bank.read(item)
            return spatial_value(values, duration, spec.fields, spec.field_defaults, chunk)
        if representation == "dae_keyword_phoneme":
            words, keywords = bank.read(item)
            return select_phonemes(words, keywords, spec.selection or {}, draws[1:3])
        raise SpeechpackError(f"cue {self.name!r}: unknown representation {representation!r}")


def resolve_cues(args: DatasetArgs, packs: list) -> list[CueField]:
    """The used cues checked against every pack (WeSep's three build_collect_keys errors, as ``ConfigError``)."""
    fields = []
    for request in args.used_cues:
        where = f"dataset_args.cues.{request.name}"
        specs, banks = [], []
        for pack in packs:
            config = pack.cues_config
            names = [spec.name for spec in config.cues] if config is not None else []
            if request.name not in names or request.name not in pack.cues:
                listed = f"its cues.yaml lists {', '.join(names)}" if names else "it was built without cues"
                raise ConfigError(f"{where}: the experiment uses cue {request.name!r}, but pack {pack.path} does not "
                                  f"provide it ({listed})")
            specs.append(config.cue(request.name))
            banks.append(pack.cues[request.name])
        representations = {spec.representation for spec in specs}
        if len(representations) > 1:
            raise ConfigError(f"{where}: packs give cue {request.name!r} as different representations "
                              f"({', '.join(sorted(representations))}); they cannot share a batch")
        not_guaranteed = [pack.path for pack, spec in zip(packs, specs) if not spec.guaranteed]
        required = request.required if request.required is not None else not not_guaranteed
        if required and not_guaranteed:
            raise ConfigError(f"{where}.required: the experiment requires cue {request.name!r} in every sample, but "
                              f"cues.yaml of pack {not_guaranteed[0]} marks it optional (guaranteed: false)")
        defaults = [_cue_defaults(spec) for spec in specs]
        if any(d != defaults[0] for d in defaults[1:]):
            raise ConfigError(f"{where}: the packs' cues.yaml give cue {request.name!r} different collate blocks "
                              f"({defaults[0]} vs {next(d for d in defaults if d != defaults[0])}); set them in "
                              f"{where} instead")
        for pack, spec in zip(packs, specs):
            _check_spec(spec, pack.path)
        field = resolve_field(CUE_FIELDS[request.name], defaults[0], request.collate_defaults(),
                              args.collate_of(CUE_FIELDS[request.name]), required)
        fields.append(CueField(request=request, field=field, representation=specs[0].representation,
                               required=required, banks=banks, specs=specs))
    return fields


def label_field(args: DatasetArgs) -> FieldSpec:
    """``speaker_label``: always emitted, -100 where a speaker has no label (WeSep's base spec + overrides)."""
    return resolve_field("speaker_label", collate=args.collate_of("speaker_label"))


def _cue_defaults(spec: CueSpec) -> dict[str, Any]:
    collate = spec.collate
    values = {"default_shape": collate.default_shape, "fill_value": collate.fill_value,
              "emit_present": collate.emit_present}
    return {key: value for key, value in values.items() if value is not None}


def _check_spec(spec: CueSpec, pack_path: str) -> None:
    if spec.representation == "fields" and not spec.fields:
        raise ConfigError(f"cue {spec.name!r} of pack {pack_path}: a spatial cue needs a non-empty fields list")
    if spec.representation == "dae_keyword_phoneme" and not isinstance(spec.selection, dict):
        raise ConfigError(f"cue {spec.name!r} of pack {pack_path}: a dae_keyword_phoneme cue needs a selection")


# -- pure functions --------------------------------------------------------------------------------------------


def pick_entry(count: int, policy: str, u: float) -> int:
    """Which of a key's ``count`` entries: the first (``fixed``), or the one ``u`` in [0, 1) falls on (``random``)."""
    if policy == "fixed":
        return 0
    return min(int(u * count), count - 1)


def randint(lo: int, hi: int, u: float) -> int:
    """``random.randint(lo, hi)`` (inclusive) from one uniform draw ``u`` in [0, 1)."""
    return lo + min(int(u * (hi - lo + 1)), hi - lo)


def embedding(value: np.ndarray) -> np.ndarray:
    """A speaker embedding as float32 ``[D]`` (``[1, D]`` is squeezed; any other rank is an error)."""
    value = np.asarray(value, dtype=np.float32)
    if value.ndim == 2 and value.shape[0] == 1:
        value = value[0]
    if value.ndim != 1:
        raise ValueError(f"speaker embedding must be [D] or [1, D], got {list(value.shape)}")
    return value


def _edge_pad_last(x: np.ndarray, length: int) -> np.ndarray:
    """``x`` cropped to ``length`` on its last axis, or right-padded by repeating its last value."""
    current = x.shape[-1]
    if current >= length:
        return x[..., :length]
    return np.concatenate([x, np.repeat(x[..., -1:], length - current, axis=-1)], axis=-1)


def align_to_duration(x: np.ndarray, duration_sec: float | None, audio_seconds: float) -> np.ndarray:
    """A temporal cue ``[..., N]`` lasting ``duration_sec`` matched to the audio: ``round(audio * N / duration)``
    frames (a prefix, or edge-padded).  Without a duration the cue is taken as it is."""
    if x.shape[-1] <= 0:
        raise ValueError("a temporal cue needs a non-empty last dimension")
    if duration_sec is None or np.isnan(float(duration_sec)):  # a bank stores "no duration" as NaN
        return x
    if duration_sec <= 0:
        raise ValueError(f"duration_sec must be positive, got {duration_sec}")
    target = int(round(audio_seconds * x.shape[-1] / float(duration_sec)))
    if target <= 0:
        raise ValueError(f"the aligned temporal length must be positive, got {target}")
    return _edge_pad_last(x, target)


def crop_by_ratio(x: np.ndarray, chunk: ChunkInfo) -> np.ndarray:
    """The chunk's part of a duration-aligned cue ``[..., N]``: ``int(start * N) : int(end * N)``, at least one
    frame, edge-padded when the chunk runs past the end (``end_ratio > 1``)."""
    frames = x.shape[-1]
    start = int(chunk.start_ratio * frames)
    end = int(chunk.end_ratio * frames)
    start = max(0, min(start, frames))
    crop_end = max(start + 1, min(end, frames))
    out = x[..., start:crop_end]
    if end > frames:
        out = np.concatenate([out, np.repeat(out[..., -1:], end - frames, axis=-1)], axis=-1)
    return out


def muse_chunk(features: np.ndarray, duration_sec: float | None, chunk: ChunkInfo) -> np.ndarray:
    """A precomputed visual front-end ``[..., T]`` (ndim >= 2), aligned to the audio and cut to its chunk."""
    features = np.asarray(features, dtype=np.float32)
    if features.ndim < 2:
        raise ValueError(f"a muse_frontend cue needs at least 2 dimensions, got {list(features.shape)}")
    return np.ascontiguousarray(crop_by_ratio(align_to_duration(features, duration_sec, chunk.audio_seconds), chunk))


def video_chunk(frames: np.ndarray, fps: float, chunk: ChunkInfo) -> np.ndarray:
    """Raw video ``[T, H, W, C]`` uint8 to the chunk's frames, ``[H, W, C, T]`` uint8.

    The video is first matched to the audio (``round(seconds * fps)`` frames: trimmed, or padded with its last
    frame); the chunk ``[start, end)`` seconds then gives ``round((end - start) * fps)`` frames from
    ``round(start * fps)`` (at least one), padded with the last frame past the end: a 3 s chunk of 25 fps video
    is always 75 frames.
    """
    if not fps or fps <= 0:
        raise ValueError(f"a raw_video cue needs a positive fps, got {fps!r}")
    if frames.shape[0] == 0:
        raise ValueError("empty video")
    seconds = chunk.audio_seconds
    aligned = max(1, int(round(seconds * fps)))
    # The window in whole samples first (the ratios are sample counts over orig_len), so a 0.5 s chunk is exactly
    # 0.5 s and not 0.5000000001 s, whose frame count would round the other way.
    start = round(chunk.start_ratio * chunk.orig_len)
    span = round((chunk.end_ratio - chunk.start_ratio) * chunk.orig_len) / chunk.rate
    if span <= 0:
        span = max(seconds * 1e-3, MIN_WINDOW_SECONDS)
    need = max(1, int(round(span * fps)))
    first = max(0, min(int(round(start / chunk.rate * fps)), aligned - 1))
    available = min(aligned, frames.shape[0])  # frames of the file within the aligned length
    if first < available:
        window = frames[first:min(first + need, available)]
    else:  # the aligned video repeats its last real frame up to ``aligned``
        window = frames[available - 1:available]
    if len(window) < need:
        window = np.concatenate([window, np.repeat(window[-1:], need - len(window), axis=0)], axis=0)
    # Always a copy: ``frames`` may be a read-only view of the mapped cue bank.
    return np.moveaxis(window, 0, -1).astype(np.uint8, order="C", copy=True)


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


def select_phonemes(words: list[np.ndarray], keywords: np.ndarray, selection: dict, draws: np.ndarray) -> np.ndarray:
    """WeSep's DAE keyword selection, int64 ``[L]``: ``random`` a contiguous span of ``min(randint(lo, hi),
    n_words)`` words from ``randint(0, n_words - n)``; ``fixed`` the words of ``kw_candidate`` in its order."""
    if not len(words):
        raise ValueError("a DAE keyword cue needs a non-empty phn_label")
    if any(len(word) == 0 for word in words):
        raise ValueError("each DAE keyword word needs phoneme ids")
    kind = selection.get("type")
    if kind == "random":
        lo, hi = selection.get("word_range", [2, 6])
        count = min(randint(lo, hi, float(draws[0])), len(words))
        start = randint(0, len(words) - count, float(draws[1]))
        chosen = words[start:start + count]
    elif kind == "fixed":
        if not len(keywords):
            raise ValueError("DAE fixed selection needs a non-empty kw_candidate")
        if any(not 0 <= int(i) < len(words) for i in keywords):
            raise IndexError(f"a kw_candidate index is outside phn_label ({len(words)} words): {list(keywords)}")
        chosen = [words[int(i)] for i in keywords]
    else:
        raise ValueError(f"unsupported DAE keyword selection {kind!r}")
    return np.concatenate([np.asarray(word, dtype=np.int64) for word in chosen])
