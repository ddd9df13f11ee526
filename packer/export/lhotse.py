"""A pack to a Lhotse CutSet (``speechpack export lhotse PACK --out DIR``): the way back from ``build lhotse``.

**Audio is written one file per sample** (``DIR/audio/NNNNN/NNNNNNNN.flac``), not pointed into the pack's
shard ``.npy`` files: Lhotse reads audio through its ``AudioSource`` types (file, url, memory, command, shar), and
none of them reads a range of a raw ``.npy`` array without a custom source class, which every user of the export
would then need to import.  A sample stored at scale 1 (every int16 input, most others) is written as 16-bit FLAC,
lossless: Lhotse loads the stored values exactly (``v / 32768``).  A sample the writer rescaled (float audio above
full scale; ``scale`` in docs/format.md) is written as 32-bit float WAV of its decoded values, which FLAC cannot
hold.

**Compressed packs** (format 1.4): a segment at scale 1 that is one block (a sample no longer than the pack's
``block_frames``; ``speechpack convert --block-seconds`` sets it) is exported as that block's bytes, not
re-encoded: a FLAC block is a complete FLAC file and an Opus block a complete Ogg Opus file (``.opus``), and Lhotse
reads both (FLAC to exactly the samples the pack stores; Opus to the decoder's float samples, whose int16 rounding
is what the pack stores, so within one int16 step of them).  Several blocks cannot be joined into one file without
rewriting every frame header (Lhotse's several ``AudioSource`` s of a recording are channels, not spans of time), so
a longer segment is decoded once and written as one FLAC file of its stored values: lossless for FLAC, and for Opus
no second lossy generation (what Lhotse loads is what the pack's reader returns).  Paths in the manifest are absolute, so the CutSet loads from any directory (Lhotse's
``CutSet.with_recording_path_prefix`` re-roots a moved copy).

**The manifest** ``DIR/cuts.jsonl.gz`` (written last, under a temporary name then renamed, as a pack's
``dataset.json`` is) has one cut per sample, in pack order: id = the sample's key, every channel (a ``MultiCut``
for several), ``start`` 0 and the sample's duration at the pack's rate.  An ``asr`` sample has one supervision
with its ``text``, ``language``, ``speaker`` (none when ``unknown``) and ``custom.corpus``; a ``sources`` sample
one supervision with its speaker; a ``noise`` or ``rir`` bank sample none.  What ``build lhotse`` kept in the
sample's provenance ``extra`` (the cut's and supervision's ``custom``, ``gender``, ``alignment``) goes back where
it came from, so ``build lhotse`` of an export gives the same samples; another input family's extra fields (the
other keys of an ``asr-jsonl`` line...) become the cut's ``custom``.

**Safe to interrupt, and to run again** (``packer.export.output_dir``, ``packer.export.record``).  The export records
its plan (``.tmp-export-plan.json``: the pack's ``dataset.json`` hash and sample count) before the first audio
file, writes each audio file under a ``.tmp-`` name and renames it into place, then appends its size and SHA-256 to
a journal.  Run again into the same ``DIR`` after a kill, Ctrl-C or a full disk, the same export keeps every audio
file the journal vouches for and that still verifies, writes the rest and the manifest, and gives the same bytes as
an uninterrupted export.  A finished export keeps its record, ``speechpack-export.json``, which ``--overwrite``
reads to remove exactly what the export wrote; a directory holding anything no such record lists is refused,
naming it.  Neither the manifest's gzip header nor a float WAV's ``PEAK`` chunk carries a time stamp, so the same
pack exported into the same ``DIR`` gives the same bytes.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import soundfile

from speechpack.loader.pack import open_pack
from speechpack.packer.export.output_dir import claim_export_dir
from speechpack.packer.export.record import CUTS_FILE, ExportRecord, audio_rel, temp_name
from speechpack.packer.adapters.lhotse import CORPUS_FIELD
from speechpack.packer.adapters.lhotse_manifests import require_lhotse
from speechpack.schemas.constants import (AUDIO_FULL_SCALE, KIND_ASR, KIND_NOISE, KIND_RIR, KIND_SOURCES, STREAM_TEXT,
                               UNKNOWN_SPEAKER)
from speechpack.schemas.documents import read_json
from speechpack.schemas.errors import PackFormatError, SpeechpackError
from speechpack.schemas.kinds import KIND_SPECS

#: Kinds an export writes: one audio segment per sample.  ``tse`` (a mixture and its targets) and ``asd``
#: (faces and labels) have no one-recording-per-sample form in Lhotse's manifests.
EXPORTED_KINDS = (KIND_ASR, KIND_SOURCES, KIND_NOISE, KIND_RIR)


def _index_records(pack):
    """Each sample's index record (for its provenance), in pack order, one shard's ``index.json`` at a time."""
    for shard in pack.manifest.shards:
        yield from read_json(os.path.join(pack.path, shard.directory, "index.json"), error=PackFormatError)["samples"]


#: The file name ending of a block exported as it is, by codec.
_BLOCK_EXTENSIONS = {"flac": ".flac", "opus": ".opus"}


def _verbatim_block(pack, stream: str, segment: int, factor: float) -> tuple[bytes, str] | None:
    """The bytes and file ending of a compressed segment's only block when it can be exported as it is (one block,
    scale 1), checked against its digest and decoded once to the recorded shape; else ``None``."""
    blocks = pack.blocks.get(stream)
    if blocks is None or factor * AUDIO_FULL_SCALE != 1.0:
        return None
    first, stop = int(blocks.first[segment]), int(blocks.first[segment + 1])
    if stop - first != 1:
        return None
    pack.decode_block(stream, segment, first)  # a corrupt block is a named error here, never exported
    table = pack.streams[stream]
    array = pack.stream_array(int(table.shard[segment]), stream)
    start = int(blocks.start[first])
    return bytes(array[start:start + int(blocks.size[first])]), _BLOCK_EXTENSIONS[blocks.codec]


def _audio_extension(factor: float) -> str:
    """FLAC when the stored values decode exactly to ``v / 32768`` (scale 1), else float WAV."""
    return ".flac" if factor * AUDIO_FULL_SCALE == 1.0 else ".wav"


def _encode_audio(stored: np.ndarray, factor: float, rate: int) -> bytes:
    """``[C, T]`` stored int16 audio as the bytes of its file (``_audio_extension``), encoded in memory so that its
    hash costs no second read."""
    buffer = io.BytesIO()
    if _audio_extension(factor) == ".flac":
        soundfile.write(buffer, np.ascontiguousarray(stored.T), rate, format="FLAC", subtype="PCM_16")
    else:
        soundfile.write(buffer, (stored.T.astype(np.float32) * np.float32(factor)), rate, format="WAV",
                        subtype="FLOAT")
        return _without_time_stamp(buffer.getvalue())
    return buffer.getvalue()


def _without_time_stamp(wav: bytes) -> bytes:
    """The float WAV ``wav`` with the time stamp libsndfile writes into its ``PEAK`` chunk (after the chunk's
    version) zeroed: the same pack then gives the same bytes, and a rerun the bytes of an uninterrupted export."""
    data = bytearray(wav)
    at = 12  # after "RIFF", the size and "WAVE"
    while at + 8 <= len(data) and data[at:at + 4] != b"data":
        size = int.from_bytes(data[at + 4:at + 8], "little")
        if data[at:at + 4] == b"PEAK" and size >= 8:
            data[at + 12:at + 16] = bytes(4)
            break
        at += 8 + size + (size & 1)
    return bytes(data)


@contextlib.contextmanager
def _cuts_writer(path: str) -> Iterator[Callable[[object], None]]:
    """Write cuts to ``path`` as Lhotse's ``CutSet.to_file`` does (one JSON object a line, gzip), but with no time
    stamp in the gzip header, then fsync it."""
    with open(path, "wb") as raw:
        with io.TextIOWrapper(gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0), encoding="utf-8",
                              newline="\n") as text:
            yield lambda cut: text.write(json.dumps(cut.to_dict(), ensure_ascii=False) + "\n")
        raw.flush()
        os.fsync(raw.fileno())


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


@dataclass(frozen=True)
class ExportSummary:
    """What an export did: cuts written into ``out`` (as the caller named it), and the audio files an earlier run
    of it left that were kept."""

    cuts: int
    kept: int
    out: str

    def describe(self) -> str:
        kept = f" ({self.kept} audio file(s) of an earlier run verified and kept)" if self.kept else ""
        return f"exported {self.cuts} cuts -> {self.out}/{CUTS_FILE}{kept}"


def export_lhotse(pack_path: str, out: str, overwrite: bool = False,
                  log: Callable[[str], None] = lambda message: None) -> ExportSummary:
    """Write ``out/cuts.jsonl.gz``, ``out/audio/`` and ``out/speechpack-export.json`` from the pack.  ``out`` is
    absent, empty, an unfinished export of this pack (finished now), or, with ``overwrite``, an export of any pack
    (replaced); ``log`` hears that an unfinished export is being finished."""
    require_lhotse()
    if os.path.exists(out) and not os.path.isdir(out):
        raise SpeechpackError(f"{out}: exists and is not a directory")
    pack = open_pack(pack_path)
    if pack.kind not in EXPORTED_KINDS:
        raise SpeechpackError(f"{pack_path}: a {pack.kind} pack cannot be exported to Lhotse (export writes "
                              f"{', '.join(EXPORTED_KINDS)} packs: one recording per sample)")
    named, out = out, os.path.abspath(out)
    stream = KIND_SPECS[pack.kind].targets
    record = ExportRecord(pack=os.path.abspath(pack_path), pack_manifest_sha256=pack.opened.manifest_sha256,
                          samples=len(pack))
    with claim_export_dir(out, record, overwrite, log) as claim:
        with _cuts_writer(temp_name(os.path.join(out, CUTS_FILE))) as write_cut:
            for index, provenance in enumerate(_index_records(pack)):
                segment = pack.segments_of(stream, index)[0]
                stored, factor = pack.stored_segment(stream, segment)
                verbatim = _verbatim_block(pack, stream, segment, factor)
                rel = audio_rel(index, verbatim[1] if verbatim else _audio_extension(factor))
                if not claim.reuse(rel):
                    data = verbatim[0] if verbatim else _encode_audio(np.asarray(stored), factor, pack.sample_rate)
                    claim.write_audio(index, rel, data)
                write_cut(_cut(pack, index, provenance, claim.path(rel)))
        claim.commit()
    return ExportSummary(cuts=len(pack), kept=claim.kept, out=named)


__all__ = ["CUTS_FILE", "EXPORTED_KINDS", "ExportSummary", "export_lhotse"]
