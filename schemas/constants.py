"""Every constant the pack format and its tools share, defined once.

Writers, readers and validators import these names; nothing else in the code base may retype a file name,
a dtype or a version number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Value of ``dataset.json["format"]``.
FORMAT_NAME = "speechpack"
#: Major version written by this code. A reader MUST refuse a major it does not list in SUPPORTED_MAJOR_VERSIONS.
FORMAT_VERSION = 1
#: Minor version: additions a v1 reader may ignore (new optional keys, new stream names).
FORMAT_MINOR = 0
#: Major versions this code reads.
SUPPORTED_MAJOR_VERSIONS = (1,)
#: The minor version that introduced the optional ``cues`` key (``schemas/format.py``, "Version history").
MINOR_CUES = 1
#: The minor version that introduced the ``noise`` and ``rir`` kinds (audio banks).
MINOR_BANKS = 2
#: The minor version that introduced the ``asd`` and ``asr`` kinds (data streams, attributes).
MINOR_TRACKS = 3
#: The minor version that introduced codec streams (``flac``, ``opus``: audio in independently decodable blocks)
#: and per-piece digests (``digests.npy``).
MINOR_BLOCKS = 4
#: The minor version that introduced deflated copies of the column files (``columns/<name>.zlib``).
MINOR_DEFLATED_COLUMNS = 5

#: The commit record of a pack; a directory without it is not a pack.
MANIFEST_NAME = "dataset.json"
#: Per-shard sample table, inside every shard directory.
SHARD_INDEX_NAME = "index.json"
#: Lines that ``--skip-bad`` left out, at the pack root.
SKIPPED_NAME = "skipped.json"
#: Shard directories are ``shard-000000``, ``shard-000001``, ...
SHARD_DIR_PREFIX = "shard-"
SHARD_DIR_DIGITS = 6
#: Prefix of directories and files that are still being written; never part of a finished pack.
TEMP_PREFIX = ".tmp-"
#: Directory of a pack where readers record the sha256 they computed of each stream file, keyed by the file's
#: identity (``loader.pack.content_check``); not part of the format, owned by the pack's manifest.
VERIFIED_DIR = ".verified"
#: The columnar index (``schemas.columns``): its directory at the pack root and the files every kind has in it;
#: each stream adds the table of its segments (``stream_column_file``), and a kind with per-sample attributes one
#: ``attr_<name>.npy`` per attribute (``attr_file``).
COLUMNS_DIR = "columns"
SAMPLES_FILE = "samples.npy"
KEYS_FILE = "keys.npy"
SPEAKERS_FILE = "speakers.npy"
ATTR_PREFIX = "attr_"
#: The column of a compressed audio stream's block sizes (``<stream>_blocks.npy``, format 1.4).
BLOCKS_SUFFIX = "_blocks"
#: Per-shard file of piece digests (format 1.4), present in every shard exactly when ``dataset.json`` has ``digests``.
DIGESTS_NAME = "digests.npy"
#: Value of ``dataset.json["digests"]``: ``hashlib.blake2b(piece, digest_size=16)``.
DIGEST_ALGORITHM = "blake2b-128"
DIGEST_SIZE = 16

#: Pack kinds defined by format v1; what each kind holds is its row of ``schemas.kinds.KIND_SPECS``.
KIND_TSE = "tse"  # fixed mixtures with one target per speaker
KIND_SOURCES = "sources"  # single-speaker utterances (inputs to online mixing)
KIND_NOISE = "noise"  # a noise bank for online augmentation (format 1.2)
KIND_RIR = "rir"  # a room-impulse-response bank for online reverberation (format 1.2)
KIND_ASD = "asd"  # active-speaker-detection face tracks: audio, faces, labels (format 1.3)
KIND_ASR = "asr"  # transcribed utterances: audio and text (format 1.3)
KINDS = (KIND_TSE, KIND_SOURCES, KIND_NOISE, KIND_RIR, KIND_ASD, KIND_ASR)

#: Stream names of format v1.
STREAM_MIX = "mix"
STREAM_TARGET = "target"
STREAM_SOURCE = "source"
STREAM_AUDIO = "audio"
STREAM_FACES = "faces"
STREAM_LABELS = "labels"
STREAM_TEXT = "text"

#: Audio is stored as little-endian int16; a stored value v decodes to ``v / AUDIO_FULL_SCALE * scale``.
AUDIO_DTYPE = np.dtype("<i2")
AUDIO_FULL_SCALE = 32768.0

#: Audio codecs (format 1.4): ``dataset.json`` ``streams[i]["codec"]``; absent means pcm16 (every older pack).
CODEC_PCM16 = "pcm16"
CODEC_FLAC = "flac"
CODEC_OPUS = "opus"
CODECS = (CODEC_PCM16, CODEC_FLAC, CODEC_OPUS)
#: The codecs a catalogue names (pcm16 is the absence of the key).
COMPRESSED_CODECS = (CODEC_FLAC, CODEC_OPUS)
#: A compressed stream file: a flat uint8 array, the stream's blocks back to back.
COMPRESSED_DTYPE = np.dtype("|u1")
#: The only sample rates Opus encodes (RFC 6716); a pack at another rate cannot use it.
OPUS_SAMPLE_RATES = (8000, 12000, 16000, 24000, 48000)
#: Block sizes of compressed streams are 64-bit byte counts (``columns/<stream>_blocks.npy``).
BLOCK_SIZE_DTYPE = np.dtype("<i8")

#: The face crop of ``asd`` packs: square, grayscale, uint8 (the ASD community's geometry).  A pack written at one
#: size cannot be read at another, so the reader checks the catalogue's row shape against this.
FACE_SIZE = 112
FACE_SHAPE = (FACE_SIZE, FACE_SIZE)
#: ``asd`` packs hold 16 kHz audio whatever the input rate (the rate ASD models are trained at).
ASD_SAMPLE_RATE = 16000


@dataclass(frozen=True)
class StreamType:
    """What a stream file holds: ``dtype`` rows of ``row_shape``.  ``audio`` streams are flat int16 with
    channel-major segments and statistics; the others ("data" streams) are rows addressed by offset and length."""

    dtype: np.dtype
    row_shape: tuple[int, ...]
    audio: bool

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize


_AUDIO_STREAM = StreamType(AUDIO_DTYPE, (), audio=True)
STREAM_TYPES = {
    STREAM_MIX: _AUDIO_STREAM,
    STREAM_TARGET: _AUDIO_STREAM,
    STREAM_SOURCE: _AUDIO_STREAM,
    STREAM_AUDIO: _AUDIO_STREAM,
    STREAM_FACES: StreamType(np.dtype("|u1"), FACE_SHAPE, audio=False),  # grayscale, one row per native frame
    STREAM_LABELS: StreamType(np.dtype("|u1"), (), audio=False),  # 0/1 speaking, one per native frame
    STREAM_TEXT: StreamType(np.dtype("|u1"), (), audio=False),  # UTF-8 bytes of the transcript
}

#: ``speakers`` of an asr sample whose input names no speaker.
UNKNOWN_SPEAKER = "unknown"
#: Offsets and lengths are 64-bit so a shard is never capped at 4 GiB (MosaicML's u32 offsets are).
OFFSET_DTYPE = np.dtype("<i8")

#: Content hash used for every file in the manifest.
HASH_NAME = "sha256"

DEFAULT_SAMPLE_RATE = 16000
#: Decimal bytes, like MuVAP's ``--max-shard-gb``: 1 GB = 10**9 bytes of array payload.
DEFAULT_SHARD_BYTES = 1_000_000_000


def shard_dir_name(shard_id: int) -> str:
    """Name of shard ``shard_id``'s directory (``shard-000042``)."""
    return f"{SHARD_DIR_PREFIX}{shard_id:0{SHARD_DIR_DIGITS}d}"


def stream_file_name(stream: str) -> str:
    """File that holds ``stream`` inside a shard directory."""
    return f"{stream}.npy"


def stream_column_file(stream: str) -> str:
    """Column file of ``stream``'s segments (``columns/mix.npy``: shard, offset, length... of every segment), the
    column a reader finds each sample's bytes of that stream by."""
    return f"{stream}.npy"


def blocks_column_file(stream: str) -> str:
    """Column file of a compressed ``stream``'s block sizes (``mix_blocks.npy``: every block's bytes, segments in
    storage order), from which a reader finds each block by a cumulative sum."""
    return f"{stream}{BLOCKS_SUFFIX}.npy"


def block_count(length: int, block_frames: int) -> int:
    """Blocks of a compressed segment of ``length`` frames: ``ceil(length / block_frames)`` (exact integers)."""
    return -(-length // block_frames)


def attr_file(name: str) -> str:
    """Column file of the per-sample attribute ``name`` (``attr_language.npy``)."""
    return f"{ATTR_PREFIX}{name}.npy"


TOOL_NAME = "speechpack"


def tool_version() -> str:
    """Installed speechpack version (recorded as provenance in every pack)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(TOOL_NAME)
    except PackageNotFoundError:
        return "0+unknown"
