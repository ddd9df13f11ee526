"""A pack to a Lhotse CutSet (``speechpack export lhotse PACK --out DIR``): the way back from ``build lhotse``.

**Audio is re-encoded, one file per sample** (``DIR/audio/NNNNN/NNNNNNNN.flac``), not pointed into the pack's
shard ``.npy`` files: Lhotse reads audio through its ``AudioSource`` types (file, url, memory, command, shar), and
none of them reads a range of a raw ``.npy`` array without a custom source class, which every user of the export
would then need to import.  A sample stored at scale 1 (every int16 input, most others) is written as 16-bit FLAC,
lossless: Lhotse loads the stored values exactly (``v / 32768``).  A sample the writer rescaled (float audio above
full scale; ``scale`` in docs/format.md) is written as 32-bit float WAV of its decoded values, which FLAC cannot
hold.  Paths in the manifest are absolute, so the CutSet loads from any directory (Lhotse's
``CutSet.with_recording_path_prefix`` re-roots a moved copy).

**The manifest** ``DIR/cuts.jsonl.gz`` (written last, under a temporary name then renamed, as a pack's
``dataset.json`` is) has one cut per sample, in pack order: id = the sample's key, every channel (a ``MultiCut``
for several), ``start`` 0 and the sample's duration at the pack's rate.  An ``asr`` sample has one supervision
with its ``text``, ``language``, ``speaker`` (none when ``unknown``) and ``custom.corpus``; a ``sources`` sample
one supervision with its speaker; a ``noise`` or ``rir`` bank sample none.  What ``build lhotse`` kept in the
sample's provenance ``extra`` (the cut's and supervision's ``custom``, ``gender``, ``alignment``) goes back where
it came from, so ``build lhotse`` of an export gives the same samples; another input family's extra fields (the
other keys of an ``asr-jsonl`` line...) become the cut's ``custom``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import soundfile

from loader.pack import open_pack
from packer.adapters.lhotse import CORPUS_FIELD
from packer.adapters.lhotse_read import require_lhotse
from schemas.constants import (AUDIO_FULL_SCALE, KIND_ASR, KIND_NOISE, KIND_RIR, KIND_SOURCES, STREAM_TEXT,
                               UNKNOWN_SPEAKER)
from schemas.errors import SpeechpackError
from schemas.kinds import KIND_SPECS

#: Kinds an export writes: one audio segment per sample.  ``tse`` (a mixture and its targets) and ``asd``
#: (faces and labels) have no one-recording-per-sample form in Lhotse's manifests.
EXPORTED_KINDS = (KIND_ASR, KIND_SOURCES, KIND_NOISE, KIND_RIR)
#: The manifest written in ``--out``.
CUTS_FILE = "cuts.jsonl.gz"
#: Audio files per subdirectory of ``DIR/audio``.
FILES_PER_DIR = 1000


def _index_records(pack):
    """Each sample's index record (for its provenance), in pack order, one shard's ``index.json`` at a time."""
    for shard in pack.manifest.shards:
        with open(os.path.join(pack.path, shard.directory, "index.json"), encoding="utf-8") as fp:
            yield from json.load(fp)["samples"]


def _write_audio(stored: np.ndarray, factor: float, rate: int, base: str) -> str:
    """Write ``[C, T]`` stored int16 audio; FLAC when it decodes exactly to ``v / 32768`` (scale 1), else float
    WAV."""
    if factor * AUDIO_FULL_SCALE == 1.0:
        path = base + ".flac"
        soundfile.write(path, np.ascontiguousarray(stored.T), rate, format="FLAC", subtype="PCM_16")
    else:
        path = base + ".wav"
        soundfile.write(path, (stored.T.astype(np.float32) * np.float32(factor)), rate, format="WAV",
                        subtype="FLOAT")
    return path


def _cut(pack, index: int, record: dict, path: str):
    from lhotse import AudioSource, MonoCut, MultiCut, Recording, SupervisionSegment

    key = pack.keys[index]
    frames = int(pack.num_frames[index])
    rate = pack.sample_rate
    stream = KIND_SPECS[pack.kind].targets
    channels = int(pack.streams[stream].channels[pack.segments_of(stream, index)[0]])
    channel = 0 if channels == 1 else list(range(channels))
    recording = Recording(id=key, sources=[AudioSource(type="file", channels=list(range(channels)), source=path)],
                          sampling_rate=rate, num_samples=frames, duration=frames / rate)
    extra = record.get("provenance", {}).get("extra", {})
    supervisions = []
    if pack.kind in (KIND_ASR, KIND_SOURCES):
        speaker = pack.speakers_of(index)[0]
        kept = extra.get("supervision", {})
        custom = dict(kept.get("custom") or {})
        text = language = None
        if pack.kind == KIND_ASR:
            text = bytes(pack.read_rows(STREAM_TEXT, pack.segments_of(STREAM_TEXT, index)[0])).decode("utf-8")
            language = pack.attrs["language"][index]
            custom[CORPUS_FIELD] = pack.attrs["corpus"][index]
        supervisions.append(SupervisionSegment(
            id=key, recording_id=key, start=0.0, duration=recording.duration, channel=channel, text=text,
            language=language, speaker=None if speaker == UNKNOWN_SPEAKER else speaker,
            gender=kept.get("gender"), custom=custom or None))
        if kept.get("alignment"):
            supervisions[0] = SupervisionSegment.from_dict({**supervisions[0].to_dict(),
                                                            "alignment": kept["alignment"]})
    cut_class = MonoCut if channels == 1 else MultiCut
    custom = {**{k: v for k, v in extra.items() if k not in ("cut", "supervision")}, **(extra.get("cut") or {})}
    return cut_class(id=key, start=0.0, duration=recording.duration, channel=channel, recording=recording,
                     supervisions=supervisions, custom=custom or None)


def export_lhotse(pack_path: str, out: str) -> int:
    """Write ``out/cuts.jsonl.gz`` and ``out/audio/`` from the pack; returns the number of cuts.  ``out`` must be
    absent or empty."""
    lhotse = require_lhotse()
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise SpeechpackError(f"{out}: export needs an absent or empty directory")
    pack = open_pack(pack_path)
    if pack.kind not in EXPORTED_KINDS:
        raise SpeechpackError(f"{pack_path}: a {pack.kind} pack cannot be exported to Lhotse (export writes "
                              f"{', '.join(EXPORTED_KINDS)} packs: one recording per sample)")
    out = os.path.abspath(out)
    stream = KIND_SPECS[pack.kind].targets
    temporary = os.path.join(out, ".tmp-" + CUTS_FILE)
    os.makedirs(out, exist_ok=True)
    with lhotse.CutSet.open_writer(temporary) as writer:
        for index, record in enumerate(_index_records(pack)):
            folder = os.path.join(out, "audio", f"{index // FILES_PER_DIR:05d}")
            os.makedirs(folder, exist_ok=True)
            stored, factor = pack.stored_segment(stream, pack.segments_of(stream, index)[0])
            path = _write_audio(stored, factor, pack.sample_rate, os.path.join(folder, f"{index:08d}"))
            writer.write(_cut(pack, index, record, path))
    os.replace(temporary, os.path.join(out, CUTS_FILE))
    return len(pack)


__all__ = ["CUTS_FILE", "EXPORTED_KINDS", "export_lhotse"]
