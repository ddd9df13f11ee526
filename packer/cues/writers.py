"""The writer of each cue representation (``CueWriter`` subclasses, ``packer.cues.payload``), grouped by what
they read: numeric arrays, media files, inline JSON.

**Numeric arrays.**  Cues read from numeric arrays with numpy: ``npy/spk_embedding`` (audio cue),
``npy/muse_frontend`` (visual cue) and ``npy/fields`` (spatial cue).  Every value is stored as float32 and refused
when empty or not finite.

``npy/spk_embedding``: speaker embeddings, one float32 row ``[D]`` each.  Resource value: a list of ``{"path"}``
(``utt_id`` optional).  WeSep's rule: an ``.npy`` of shape ``[D]``, or ``[1, D]`` squeezed; any other rank is
refused.  All items of a bank share ``D`` (a batch stacks them).

``npy/muse_frontend``: precomputed visual front-end features, WeSep's experimental path.  Resource value: a list
of ``{"utt_id", "path", "duration_sec"}``.  The ``.npy`` is float32 with 2 to 4 axes, the last one time;
``duration_sec`` (the video's length, which the loader aligns the frames to) is part of an item's identity, so one
file listed with two durations is two items.

``npy/fields``: named numeric fields per speaker (azimuth, elevation, a trajectory ...).  Resource value: ONE dict
per key (not a list), ``{"path", "duration_sec"?}``.  The file is an ``.npz`` (read without unpickling), or — what
WeSep's recipes write — a dict saved with ``np.save(path, {"azimuth": ...})``, which is a pickle: it is unpickled
only with ``--allow-pickle`` (unpickling runs code from the file), and its fields are stored as plain float32, so
the pack holds no pickle.  A field is a number (stored as a scalar) or a 1-D series; its name must be a string.
``meta.json["fields"]`` is the union of the items' field names, sorted; ``values.npy`` says, per item and field,
whether the item has it and where its values are.

**Media files.**  Cues read from media files FFmpeg decodes: ``wav/waveform`` (audio cue) and ``mp4/raw_video``
(visual cue).

``wav/waveform``: enrollment recordings, decoded, resampled to the pack's rate and stored as int16.  Resource value:
a list of ``{"utt_id", "path"}``.  Decoding, resampling (soxr) and quantisation are the ones the pack's own audio
goes through (``packer.audio``), so an enrollment reads back exactly like a target would.  Every channel of the
file is kept (WeSep hands the processor ``[C, T]``).  With the build's ``--codec flac|opus`` the int16 is encoded
in blocks in the worker that decoded it (``packer.build.encoding.encode_audio``, the pack audio's own encoder), and
the bank stores the blocks, their sizes and digests (``schemas/cue_banks.py``, "Compressed enrollment audio").

``mp4/raw_video``: face videos decoded once, at build time, to uint8 RGB frames.  Resource value: a list of
``{"utt_id", "path"}``.  WeSep decodes with ``torchvision.io.read_video`` in every epoch; here PyAV decodes each
file once (any container FFmpeg reads, despite the ``mp4`` type name) to ``[T, H, W, 3]`` at its native size and
frame rate, and the stream's average frame rate is kept for the loader's alignment to audio.  A file FFmpeg cannot
decode, without a video stream or frames, with fewer frames than its container declares (FFmpeg stops quietly at the
end of a truncated file), or whose frame size changes is refused.

**Inline JSON.**  ``json/dae_keyword_phoneme`` (textual cue): per speaker, the words of a transcript with their
phoneme ids and the indices of keyword candidates.

Resource value: ONE dict per key, ``{"words": [str], "phn_label": [[int]], "kw_candidate": [int],
"normalized_text"?: str}``; ``phn_label[i]`` are the phoneme ids of ``words[i]`` and every ``kw_candidate`` is a
word index.  The value is inline (no file), so items are deduplicated by content.  The ids go to ``data.npy``
(int64, WeSep's tensor dtype); the words and text, which no array holds, to ``sources.json``.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
from numpy.lib import format as npy_format

from speechpack.media.codecs import EncodeError
from speechpack.packer.audio import AudioError, StoredAudio, read_audio, resample, to_stored
from speechpack.packer.build.encoding import EncodedAudio, encode_audio
from speechpack.packer.build.streams import NpyStream
from speechpack.packer.cues.payload import CueWriter, FlatWriter, LoadContext, as_float32, read_npy
from speechpack.packer.cues.resource import (
    CueInputError,
    EntryContext,
    ItemSource,
    entry_duration,
    entry_path,
    entry_utt_id,
)
from speechpack.packer.files import save_npy
from speechpack.schemas.constants import COMPRESSED_DTYPE, DIGEST_ALGORITHM
from speechpack.schemas.cue_banks import (
    BLOCKS_NAME,
    DATA_NAME,
    DIGESTS_NAME,
    FIELD_VALUE_DTYPE,
    INDEX_DTYPE,
    KEYWORDS_NAME,
    VALUES_NAME,
    WORDS_NAME,
    WORD_DTYPE,
    representation_spec,
)
from speechpack.schemas.digests import digests_array
from speechpack.schemas.errors import InternalError
from speechpack.schemas.npyfile import read_npy_header

_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_HINT = "a pickled dict; pass --allow-pickle to unpickle it (only for files you trust)"


class SpkEmbeddingWriter(CueWriter):
    """``data.npy`` is ``[items, D]``: created at the first item, which fixes ``D``."""

    representation = "spk_embedding"

    def __init__(self, directory: str, context: LoadContext):
        super().__init__(directory, context)
        self._data: NpyStream | None = None

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> np.ndarray:
        array = read_npy(source.path)
        if array.ndim == 2 and array.shape[0] == 1:
            array = array[0]
        if array.ndim != 1:
            raise CueInputError(f"a speaker embedding must have shape [D] or [1, D], got {list(array.shape)}")
        return as_float32(array, "the embedding", "spk_embedding")

    def add(self, source: ItemSource, loaded: np.ndarray) -> None:
        if self._data is None:
            self._data = NpyStream(os.path.join(self.directory, DATA_NAME), self.row.payload_dtype, None,
                                   loaded.shape)
        elif loaded.shape != self._data.row_shape:
            raise CueInputError(f"embedding of dimension {loaded.shape[0]}, but the bank's first item has "
                                f"{self._data.row_shape[0]}: all embeddings of a cue must share D")
        self.rows.append((self._data.append(loaded),))

    def finish(self) -> dict:
        if self._data is None:  # an empty resource: an empty [0, 0] table
            save_npy(os.path.join(self.directory, DATA_NAME), np.zeros((0, 0), dtype=self.row.payload_dtype))
        else:
            self._data.close()
        return super().finish()

    def abort(self) -> None:
        if self._data is not None:
            self._data.abort()


class MuseFrontendWriter(FlatWriter):
    representation = "muse_frontend"
    #: The ``shape`` field of an item row holds this many axes.
    MAX_NDIM = representation_spec("muse_frontend").item_dtype["shape"].shape[0]
    MIN_NDIM = 2

    @staticmethod
    def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
        source = ItemSource(entry_path(entry, context), duration_sec=entry_duration(entry, required=True))
        return source, entry_utt_id(entry)

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> np.ndarray:
        low, high = MuseFrontendWriter.MIN_NDIM, MuseFrontendWriter.MAX_NDIM
        array = read_npy(source.path)
        if not low <= array.ndim <= high:
            raise CueInputError(f"muse_frontend features need {low} to {high} axes ([..., T]), "
                                f"got shape {list(array.shape)}")
        return as_float32(array, "the features", "muse_frontend")

    def add(self, source: ItemSource, loaded: np.ndarray) -> None:
        offset = self.append(loaded.reshape(-1))
        shape = list(loaded.shape) + [0] * (self.MAX_NDIM - loaded.ndim)
        duration = source.duration_sec if source.duration_sec is not None else math.nan
        self.rows.append((offset, loaded.ndim, shape, duration))


def _file_kind(path: str) -> str:
    """``"npz"``, ``"npy"`` (a plain array), ``"pickled npy"`` (``np.save`` of a dict) or ``"other"`` (perhaps a
    raw pickle), from the first bytes and the ``.npy`` header: nothing is unpickled to find out."""
    with open(path, "rb") as fp:
        magic = fp.read(len(npy_format.MAGIC_PREFIX))
        if magic[:len(_ZIP_MAGIC)] == _ZIP_MAGIC:
            return "npz"
        if magic != npy_format.MAGIC_PREFIX:
            return "other"
    return "pickled npy" if read_npy_header(path).dtype.hasobject else "npy"


def _read_mapping(path: str, allow_pickle: bool) -> dict:
    """The file's fields as ``{name: value}``: an npz's arrays, or an unpickled dict (with ``allow_pickle``)."""
    try:
        kind = _file_kind(path)
        if kind == "npy":
            raise CueInputError("holds a plain array; expected an .npz of fields or a pickled dict")
        if kind != "npz" and not allow_pickle:
            raise CueInputError(f"is {_PICKLE_HINT}" if kind == "pickled npy"
                                else f"is not an .npy or .npz file; if it is {_PICKLE_HINT}")
        loaded = np.load(path, allow_pickle=allow_pickle)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                return {name: loaded[name] for name in loaded.files}
    except CueInputError:
        raise
    except Exception as err:  # noqa: BLE001 - np.load and unpickling raise anything (ValueError, EOFError, ...)
        raise CueInputError(f"cannot read the fields ({type(err).__name__}: {err})") from None
    if isinstance(loaded, np.ndarray) and loaded.dtype.hasobject and loaded.shape == ():
        loaded = loaded.item()  # np.save(path, dict) stores a 0-d object array
    if not isinstance(loaded, dict):
        raise CueInputError(f"expected a dict of fields, the pickle holds {type(loaded).__name__}")
    return loaded


class FieldsWriter(FlatWriter):
    representation = "fields"

    def __init__(self, directory: str, context: LoadContext):
        super().__init__(directory, context)
        self._placed: list[dict[str, tuple[int, int]]] = []  # per item: field -> (offset, length or -1)

    @staticmethod
    def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
        return ItemSource(entry_path(entry, context), duration_sec=entry_duration(entry, required=False)), ""

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> dict[str, np.ndarray]:
        """``{field name: float32 0-d or 1-D array}``."""
        fields = {}
        for name, value in _read_mapping(source.path, context.allow_pickle).items():
            if not isinstance(name, str) or not name:
                raise CueInputError(f"field names must be non-empty strings, got {name!r}")
            try:
                array = np.asarray(value)
            except Exception as err:  # noqa: BLE001 - an unpickled value can be any object
                raise CueInputError(f"field {name!r} is not numeric ({err})") from None
            if array.ndim > 1:
                raise CueInputError(f"field {name!r} must be a number or a 1-D series, got shape {list(array.shape)}")
            fields[name] = as_float32(array, f"field {name!r}", "fields")
        if not fields:
            raise CueInputError("holds no fields")
        return fields

    def add(self, source: ItemSource, loaded: dict[str, np.ndarray]) -> None:
        placed = {}
        for name in sorted(loaded):
            value = loaded[name]
            placed[name] = (self.append(value.reshape(-1)), -1 if value.ndim == 0 else value.shape[0])
        self._placed.append(placed)
        self.rows.append((source.duration_sec if source.duration_sec is not None else math.nan,))

    def finish(self) -> dict:
        super().finish()
        names = sorted({name for placed in self._placed for name in placed})
        values = np.zeros((len(self._placed), len(names)), dtype=FIELD_VALUE_DTYPE)
        for item, placed in enumerate(self._placed):
            for column, name in enumerate(names):
                if name in placed:
                    values[item, column] = (*placed[name], True)
        save_npy(os.path.join(self.directory, VALUES_NAME), values)
        return {"fields": names}


class WaveformWriter(FlatWriter):
    """pcm16: ``data.npy`` int16, offsets in samples.  Compressed (``context.encoding``): ``data.npy`` the blocks'
    bytes, offsets in bytes, and ``blocks.npy``, ``digests.npy`` gathered as items arrive."""

    representation = "waveform"

    def __init__(self, directory: str, context: LoadContext):
        self.encoding = context.encoding
        super().__init__(directory, context, dtype=COMPRESSED_DTYPE if self.encoding.compressed else None)
        self._sizes: list[int] = []
        self._digests: list[bytes] = []

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> tuple[StoredAudio | EncodedAudio, int]:
        """The stored audio (encoded, with a codec) and the file's original rate."""
        try:
            audio = read_audio(source.path, int16_at=context.sample_rate)
        except AudioError as err:
            raise CueInputError(err.reason) from None
        return WaveformWriter.encode(to_stored(resample(audio, context.sample_rate)), context), audio.sample_rate

    @staticmethod
    def encode(stored: StoredAudio, context: LoadContext) -> StoredAudio | EncodedAudio:
        """``stored`` as the bank keeps it: unchanged for pcm16, else its blocks (``speechpack convert`` re-encodes
        a bank's items through here too)."""
        if not context.encoding.compressed:
            return stored
        try:
            return encode_audio(stored, context.encoding, context.sample_rate)
        except EncodeError as err:
            raise CueInputError(str(err)) from None

    def add(self, source: ItemSource, loaded: tuple[StoredAudio | EncodedAudio, int]) -> None:
        stored, orig_rate = loaded
        if isinstance(stored, EncodedAudio) != self.encoding.compressed:
            raise InternalError(f"{self.directory}: a {type(stored).__name__} item in a {self.encoding.codec} bank")
        offset = self.append(stored.data)
        if self.encoding.compressed:
            self._sizes.extend(stored.sizes)
            self._digests.extend(stored.block_digests())
        self.rows.append((offset, stored.channels, stored.length, stored.scale, orig_rate))

    def finish(self) -> dict:
        super().finish()
        if not self.encoding.compressed:
            return {"sample_rate": self.context.sample_rate}
        save_npy(os.path.join(self.directory, BLOCKS_NAME), np.array(self._sizes, dtype=INDEX_DTYPE))
        save_npy(os.path.join(self.directory, DIGESTS_NAME), digests_array(self._digests))
        return {"sample_rate": self.context.sample_rate, "codec": self.encoding.codec,
                "block_frames": self.encoding.block_frames, "digests": DIGEST_ALGORITHM}


class RawVideoWriter(FlatWriter):
    representation = "raw_video"

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> tuple[np.ndarray, float]:
        """``(frames [T, H, W, 3] uint8, fps)``."""
        import av  # imported lazily, as in packer.audio

        frames = []
        try:
            with av.open(os.path.abspath(source.path)) as container:  # a path, never an FFmpeg protocol (cache:)
                if not container.streams.video:
                    raise CueInputError("no video stream")
                stream = container.streams.video[0]
                for frame in container.decode(stream):
                    frames.append(frame.to_ndarray(format="rgb24"))
                rate = stream.average_rate or stream.guessed_rate
                declared = stream.frames  # 0 when the container does not say
        except (av.error.FFmpegError, ValueError) as err:
            raise CueInputError(f"cannot decode video ({err})") from None
        if not frames:
            raise CueInputError("the video has no frames")
        if len(frames) < declared:
            raise CueInputError(f"truncated: the container declares {declared} frames, {len(frames)} decode")
        if not rate or rate <= 0:
            raise CueInputError("the video stream has no frame rate")
        if len({frame.shape for frame in frames}) != 1:
            raise CueInputError(f"the frame size changes within the video ({sorted({f.shape for f in frames})})")
        return np.stack(frames), float(rate)

    def add(self, source: ItemSource, loaded: tuple[np.ndarray, float]) -> None:
        frames, fps = loaded
        offset = self.append(frames)
        self.rows.append((offset, *frames.shape, fps))


_INT64_MAX = np.iinfo(np.int64).max


def _id_list(value, what: str, below: int = _INT64_MAX) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < below
                                              for v in value):
        raise CueInputError(f"{what} must be a list of integers in [0, {below}), got {value!r:.120}")
    return value


class DaeKeywordPhonemeWriter(FlatWriter):
    representation = "dae_keyword_phoneme"

    def __init__(self, directory: str, context: LoadContext):
        super().__init__(directory, context)
        self._words: list[tuple[int, int]] = []
        self._keywords: list[int] = []

    @staticmethod
    def parse_entry(entry: dict, context: EntryContext) -> tuple[ItemSource, str]:
        words = entry.get("words")
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise CueInputError(f"'words' must be a list of strings, got {words!r:.120}")
        phn_label = entry.get("phn_label")
        if not isinstance(phn_label, list) or len(phn_label) != len(words):
            raise CueInputError(f"'phn_label' must be a list with one list of phoneme ids per word ({len(words)}), "
                                f"got {phn_label!r:.120}")
        for i, ids in enumerate(phn_label):
            _id_list(ids, f"'phn_label[{i}]'")
        kw_candidate = _id_list(entry.get("kw_candidate"), "'kw_candidate'", below=len(words))
        text = entry.get("normalized_text")
        if text is not None and not isinstance(text, str):
            raise CueInputError(f"'normalized_text' must be a string, got {text!r:.120}")
        content = json.dumps({"words": words, "phn_label": phn_label, "kw_candidate": kw_candidate,
                              "normalized_text": text}, sort_keys=True, ensure_ascii=False)
        return ItemSource(context.resource_path, content=content), ""

    @staticmethod
    def load(source: ItemSource, context: LoadContext) -> tuple[list[np.ndarray], np.ndarray]:
        """``(phoneme ids per word, keyword candidate word indices)``, int64."""
        value = json.loads(source.content)
        return ([np.asarray(ids, dtype=INDEX_DTYPE) for ids in value["phn_label"]],
                np.asarray(value["kw_candidate"], dtype=INDEX_DTYPE))

    @staticmethod
    def provenance(source: ItemSource) -> dict:
        value = json.loads(source.content)
        return {"path": source.path, "words": value["words"], "normalized_text": value["normalized_text"]}

    def add(self, source: ItemSource, loaded: tuple[list[np.ndarray], np.ndarray]) -> None:
        phonemes, keywords = loaded
        self.rows.append((len(self._words), len(phonemes), len(self._keywords), len(keywords)))
        self._words.extend((self.append(ids), ids.size) for ids in phonemes)
        self._keywords.extend(int(k) for k in keywords)

    def finish(self) -> dict:
        super().finish()
        save_npy(os.path.join(self.directory, WORDS_NAME), np.array(self._words, dtype=WORD_DTYPE))
        save_npy(os.path.join(self.directory, KEYWORDS_NAME), np.array(self._keywords, dtype=INDEX_DTYPE))
        return {}


__all__ = ["DaeKeywordPhonemeWriter", "FieldsWriter", "MuseFrontendWriter", "RawVideoWriter", "SpkEmbeddingWriter",
           "WaveformWriter"]
