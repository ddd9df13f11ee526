"""Every constant the pack format and its tools share, defined once.

Writers, readers and validators import these names; nothing else in the code base may retype a file name,
a dtype or a version number.
"""

from __future__ import annotations

import numpy as np

#: Value of ``dataset.json["format"]``.
FORMAT_NAME = "speechpack"
#: Major version written by this code. A reader MUST refuse a major it does not list in SUPPORTED_MAJOR_VERSIONS.
FORMAT_VERSION = 1
#: Minor version: additions a v1 reader may ignore (new optional keys, new stream names).
FORMAT_MINOR = 0
#: Major versions this code reads.
SUPPORTED_MAJOR_VERSIONS = (1,)

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

#: Pack kinds defined by format v1.
KIND_TSE = "tse"  # fixed mixtures with one target per speaker
KIND_SOURCES = "sources"  # single-speaker utterances (inputs to online mixing)
KIND_NOISE = "noise"  # a noise bank for online augmentation (format 1.2)
KIND_RIR = "rir"  # a room-impulse-response bank for online reverberation (format 1.2)
KINDS = (KIND_TSE, KIND_SOURCES, KIND_NOISE, KIND_RIR)

#: Stream names of format v1.
STREAM_MIX = "mix"
STREAM_TARGET = "target"
STREAM_SOURCE = "source"
STREAM_AUDIO = "audio"
STREAMS_BY_KIND = {
    KIND_TSE: (STREAM_MIX, STREAM_TARGET),
    KIND_SOURCES: (STREAM_SOURCE,),
    KIND_NOISE: (STREAM_AUDIO,),
    KIND_RIR: (STREAM_AUDIO,),
}

#: Audio is stored as little-endian int16; a stored value v decodes to ``v / AUDIO_FULL_SCALE * scale``.
AUDIO_DTYPE = np.dtype("<i2")
AUDIO_FULL_SCALE = 32768.0
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


TOOL_NAME = "speechpack"


def tool_version() -> str:
    """Installed speechpack version (recorded as provenance in every pack)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(TOOL_NAME)
    except PackageNotFoundError:
        return "0+unknown"
