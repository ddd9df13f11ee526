"""The speechpack pack format, version 1.  This docstring is the normative specification; ``docs/format.md``
adds an annotated example.  The key words MUST, MUST NOT, SHOULD and MAY are used as in RFC 2119.

Goal: a pack must be straightforward to read without speechpack.  Datasets outlive the programs that made them,
so everything is plain JSON and plain ``.npy`` (numpy format 1.0) files.

Layout
------
::

    PACK/
      dataset.json            the commit record, written last
      skipped.json            only when the build skipped bad input (``--skip-bad``)
      columns/                every index.json as numpy columns (schemas/columns.py)
      cues/                   only when built with a cues.yaml: speaker-cue banks (schemas/cues.py)
      shard-000000/
        index.json            one record per sample, in storage order
        mix.npy               one file per stream: a flat 1-D array
        target.npy
        digests.npy           only in a pack with digests (1.4): one digest per piece of the shard
      shard-000001/
      ...

A directory without ``dataset.json`` is not a pack.  A writer MUST write every other file first and then
``dataset.json`` atomically (temporary file, fsync, rename).  Names starting with ``.tmp-`` belong to an
unfinished write and are not part of the pack; a reader MUST ignore them.

dataset.json
------------
A JSON object with exactly these keys, plus the optional ones after them:

``format``         the string ``"speechpack"``.
``format_version`` integer major version.  A reader MUST refuse a major it does not know and say which it reads.
``format_minor``   integer minor version.  Minor versions only add optional content; a reader MAY ignore it.
``kind``           ``"tse"`` (fixed mixtures, one target per speaker), ``"sources"`` (single-speaker
                   utterances), since 1.2 ``"noise"`` or ``"rir"`` (audio banks for online augmentation), since 1.3
                   ``"asd"`` (face tracks for active speaker detection) or ``"asr"`` (transcribed utterances).
``sample_rate``    integer Hz of every audio stream.
``streams``        list of ``{"name", "dtype", "row_shape", "file"}``: the catalogue.  ``dtype`` is a numpy
                   dtype string (``"<i2"``), ``row_shape`` the shape of one element of axis 0 (``[]`` for flat
                   audio, ``[112, 112]`` for faces), ``file`` the file name inside every shard directory.  Since
                   1.4 an audio stream's entry MAY also carry ``"codec"`` (``"flac"`` or ``"opus"``) and
                   ``"block_frames"`` (int > 0), both or neither ("Compressed audio streams" below); absent means
                   pcm16, as in every older pack.
``shards``         list of ``{"directory", "samples", "files"}`` in order; ``files`` maps every file of the
                   shard directory to ``{"size": bytes, "sha256": hex digest}``.  Shard ``k`` is the ``k``-th shard
                   of the build's plan, so its name never depends on what other shards hold: a shard whose every
                   planned sample was skipped is present with zero samples (empty stream files).
``totals``         ``{"samples", "hours", "speakers", "bytes"}``; ``speakers`` counts distinct speaker ids.
``provenance``     ``{"input": {"path", "sha256"}, "tool": "speechpack", "tool_version", "command",
                   "options"}``; ``options`` holds every option that influences the bytes of the pack.  The input
                   hash is that of the list file; an audio bank built from a directory hashes its listing (each
                   packed file's relative path and size, one per line), and a simulated RIR bank has the path
                   ``"<simulate N>"`` and hashes its simulation options (``options.simulate``).
``columns``        ``{"directory": "columns", "files": {name: {"size", "sha256"}}}``: the columnar index (below).
                   Since 1.5 it MAY also hold ``"deflated": {name: {"size", "sha256"}}``: ``columns/<name>.zlib``,
                   a zlib stream of column ``name`` (one of ``files``), for readers that fetch the columns from a
                   store (``schemas/deflated_columns.py``); a pack with digests has one for every column.
``skipped``        ``{"count": n}`` plus ``"file": {"name": "skipped.json", "size", "sha256"}`` when ``n > 0``.

and, since 1.1, optionally:

``cues``           ``{"directory": "cues", "files": {path: {"size", "sha256"}}}``: every file under ``cues/``, by its
                   ``/``-separated path relative to that directory (``cues.yaml``, ``audio/data.npy``, ...).  Present
                   exactly when the pack has cues; the layout of ``cues/`` is specified in ``schemas/cues.py``.

and, since 1.4, optionally:

``digests``        the string ``"blake2b-128"``: every shard's ``files`` also lists ``digests.npy`` (and exactly
                   then; "Digests" below).  REQUIRED when any stream has a codec (a compressed pack always has
                   digests); a pcm16 pack has it when built with ``--digests``.

and, in ``asr`` packs (1.3), required there and absent elsewhere:

``hours_by_corpus`` ``{corpus: {language: hours}}`` over the pack's samples: what corpus and language weighting
                   needs, without a separate statistics file.
``char_counts``    ``{character: count}`` over every transcript: the built-in character vocabulary is made from
                   it (deterministically) when loading.

A writer records the lowest minor version that describes the pack (as numpy's ``.npy`` writer picks format 1.0
unless the array needs 2.0): a ``tse`` or ``sources`` pack without cues is 1.0, so its bytes do not change; with
cues it is 1.1; a ``noise`` or ``rir`` pack is 1.2; an ``asd`` or ``asr`` pack is 1.3; a pack with a codec stream
or with digests is 1.4, and with deflated columns (every pack built with digests since) 1.5 (``lowest_minor``).

Keys are sorted and the JSON is indented by one space, so equal packs have byte-identical manifests.

Streams and shards
------------------
Each stream name has one type (``schemas.constants.STREAM_TYPES``), and the catalogue MUST say exactly it.

Audio streams (``mix``, ``target``, ``source``, ``audio``) have dtype ``<i2`` (int16) and ``row_shape`` ``[]``.
An audio stream file is a 1-D array; each audio segment occupies ``channels * length`` consecutive elements, **channel-major** (all of channel 0, then
channel 1, ...), so a segment reads back as ``array[offset : offset + channels * length].reshape(channels,
length)`` without copying.  Segments of one stream are stored in sample order with no gaps: the first starts at
0 and each next one starts where the previous ended; the file holds exactly the sum of their sizes.

A stored value ``v`` decodes to the float ``v / 32768 * scale``.  ``scale`` is 1.0 unless the audio would
have clipped: then it is the smallest factor that keeps the peak representable, and a reader MUST apply it.

Compressed audio streams (since 1.4)
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
An audio stream whose catalogue entry has ``codec`` has ``dtype`` ``"|u1"``, ``row_shape`` ``[]`` and the same file
name ``<stream>.npy``: a 1-D uint8 ``.npy`` holding the stream's blocks back to back, segments in storage order
with no gaps (the no-gap rule in bytes: the file holds exactly the sum of all its blocks' sizes).  A segment of
``channels`` C and ``length`` T frames is cut into ``ceil(T / block_frames)`` blocks; block ``i`` holds frames
``[i * B, min((i + 1) * B, T))`` of all C channels (``B`` = ``block_frames``).  Each block is one complete,
independently decodable file:

``flac``   a native FLAC stream (starts with ``fLaC``), 16 bits per sample, C channels, the pack's sample rate.
           Lossless: it decodes to exactly the int16 values a pcm16 pack would store.
``opus``   an Ogg Opus stream (RFC 7845), C channels, the pack's sample rate (which MUST be one of 8000, 12000,
           16000, 24000, 48000), with pre-skip and end trimming by granule position so that it decodes to exactly
           its frame count.  Decoded float samples are taken as int16 the way libsndfile's ``sf_readf_short``
           gives them (soundfile ``read(..., dtype="int16")``).

A decoded block with another frame or channel count than the segment says is corrupt, and a reader MUST refuse it.
**The stored samples of a compressed segment are its decoded int16 values**: ``scale``, ``mean``, ``rms`` and
``peak`` are defined on them exactly as for pcm16 (so a normalisation computed from any slice holds), and a reader
decodes a value ``v`` to ``v / 32768 * scale`` as before.  For ``flac`` they equal the pcm16 pack's values bit for
bit; for ``opus`` the writer encodes the int16 it would have stored, decodes each block again and records the
statistics of what it decoded.  Data streams (``faces``, ``labels``, ``text``) never have a codec.  A pack's
cue banks of enrollment audio (``waveform``) are stored with the pack's codec, in blocks of the same kind, with
their sizes and digests in the bank (``schemas/cue_banks.py``, "Compressed enrollment audio").

Data streams (since 1.3) hold rows: ``faces`` ``|u1`` rows of ``[112, 112]`` (a grayscale face crop per native
video frame), ``labels`` ``|u1`` ``[]`` (0 or 1, speaking, per native video frame), ``text`` ``|u1`` ``[]``
(the UTF-8 bytes of a transcript).  A data segment is ``length`` consecutive rows from row ``offset``; the same
no-gap rule holds.

Kinds and their streams
~~~~~~~~~~~~~~~~~~~~~~~
The same rules, as data, are the rows of ``schemas.kinds.KIND_SPECS``.

``tse``      ``mix`` (one segment per sample, all mixture channels) and ``target`` (one mono segment per
             speaker, in the sample's speaker order).  All segments of a sample have the same length.
``sources``  ``source`` (one mono segment per sample, one speaker).
``noise``    ``audio`` (one segment per sample: one input file, all its channels).  A bank has no speakers, but
             ``speakers`` must be a non-empty list: it is ``["noise"]``, the kind name.  Since 1.2.
``rir``      ``audio``, as ``noise`` (``speakers`` is ``["rir"]``): one room impulse response per sample, stored as
             decoded (not normalised; its level is in the statistics).  Since 1.2.
``asd``      ``audio`` (one mono segment: the track's audio at 16 kHz, unnormalised, full duration), ``faces`` and
             ``labels`` (one segment each of ``source_frames`` rows, at the native frame rate).  Invariants:
             faces rows == labels rows == source_frames, and audio length == round(source_frames / source_fps *
             16000).  ``speakers`` is ``[key]`` (the track); attributes ``source_fps``, ``start_sec`` (where the
             track starts in its recording) and ``clip`` (the recording: tracks of one clip share audio).  The
             sample rate is 16000.  Since 1.3.
``asr``      ``audio`` (one segment, all channels) and ``text`` (one segment, at least one byte).  ``speakers`` is
             ``[speaker]`` when the input names one, else ``["unknown"]``; attributes ``language`` and ``corpus``.
             Since 1.3.

index.json
----------
``{"format_version": 1, "shard": "shard-000000", "samples": [record, ...]}``, written with sorted keys and
one compact record per line, where a record is::

    {"key": str,                       unique within the pack
     "speakers": [str, ...],           ordered; slot i of the sample is speakers[i]
     "num_frames": int,                samples per channel at the pack's sample_rate
     "duration": float,                num_frames / sample_rate, seconds
     "orig_sample_rate": int,          rate of the input files before resampling
     "line": int,                      1-based line of the input list (provenance)
     "provenance": {...},              the input paths exactly as listed (a bank: {"path": ...}, or
                                       {"simulated": {room, rt60, source, microphone, distance}})
     "streams": {name: [segment, ...]},
     "attrs": {name: value}}           only in kinds with attributes (asd, asr): exactly the kind's names

and an audio segment is ``{"offset", "channels", "length", "scale", "mean", "rms", "peak"}``: element offset into
the stream file (64-bit), channel count, samples per channel, the decode scale, and statistics of the decoded
audio over all its channels: ``mean``; then, after removing that mean, ``rms`` and ``peak`` (max absolute).  A data
segment is ``{"offset", "length"}`` in rows.  A segment of a compressed audio stream (1.4) is ``{"offset",
"channels", "length", "scale", "mean", "rms", "peak", "blocks"}``: ``offset`` is the **byte** offset of its first
block in the stream file's data and ``blocks`` the list of its blocks' byte sizes in order (each at least 1, exactly
``ceil(length / block_frames)`` of them); block ``i`` starts at byte ``offset + sum(blocks[:i])``.
Statistics MUST be computed from the stored int16 exactly as a reader decodes it, so a reader can reproduce a
whole-recording normalisation from any slice.

columns/
--------
The shard indexes again, as plain ``.npy`` arrays a reader loads in milliseconds; the dtypes are defined in
``schemas/columns.py``, the file list in ``schemas.kinds.column_files``.  They MUST equal what the shard indexes
say; a reader MAY use either.  The segment table ``<stream>.npy`` of a compressed stream keeps its dtype (its
``offset`` in bytes), and such a stream adds ``columns/<stream>_blocks.npy`` (1.4): ``<i8``, every block's byte
size, segments in storage order, segment ``s`` owning ``ceil(length_s / block_frames)`` consecutive rows; a reader
finds block offsets by a cumulative sum.

Digests
-------
In a pack with ``digests`` (1.4), ``shard-k/digests.npy`` is a uint8 ``[n, 16]`` array: row ``i`` is
``hashlib.blake2b(piece_i, digest_size=16).digest()`` of the ``i``-th *piece* of the shard, in this order: for each
stream of the catalogue in catalogue order, for each of the shard's segments of that stream in storage order,
each block of a compressed audio segment, else the segment's whole bytes (pcm16: ``channels * length * 2`` bytes
from element ``offset``; a data segment: its ``length`` rows).  A reader finds a segment's first piece by counting
(a cumulative sum over the columns), reads a piece's bytes from wherever they lie and MUST compare them with its
digest before using them.  The file is small (16 bytes per piece) and is verified by its sha256 in
``dataset.json`` like every shard file.

Names
-----
Every name in ``dataset.json`` becomes part of a path, so a reader MUST check it before using it
(``schemas/names.py``): ``shards[k].directory`` MUST be ``shard_dir_name(k)``; the keys of ``shards[k].files`` MUST be
exactly ``index.json``, the catalogue's stream files and, exactly when the pack has ``digests``, ``digests.npy``;
``columns`` MUST name ``columns`` and exactly the kind's column files plus ``<stream>_blocks.npy`` for each
compressed stream; ``skipped.file.name`` MUST be ``skipped.json``; every ``cues`` path MUST be ``/``-joined components.
Any name MUST be one path component of ASCII letters, digits, ``_``, ``-`` and ``.``, not starting with ``.`` (so no
separator, no ``..``, no absolute path).  A reader refuses a manifest that breaks any of these, naming the field.

What a reader verifies
----------------------
At open, a reader MUST compare every column file with its size and sha256 in ``dataset.json`` and SHOULD check the
columns' internal consistency (``schemas/columns.py``): every index in range, every segment inside its
shard's stream file; for a compressed stream, every block size positive, ``ceil(length / block_frames)`` blocks
per segment and the no-gap rule in bytes.  When it maps a stream file it MUST check that the file's size is the recorded one and its
``.npy`` header has exactly the rows the segments need, and SHOULD check that ``dataset.json`` is still the file it
opened (``loader/pack/verify.py``: a pack replaced under a reader is an error, never other audio).

Version history
---------------
1.0  first version.
1.1  optional ``cues`` (speaker-cue banks, ``cues/``).  A 1.0 reader, which requires the exact key set, refuses
     such a pack instead of misreading it.
1.2  kinds ``noise`` and ``rir`` (stream ``audio``).  A 1.0 or 1.1 reader, which checks the kind, refuses them.
1.3  kinds ``asd`` and ``asr``: data streams (``faces``, ``labels``, ``text``), per-sample ``attrs``, and the
     ``asr`` manifest keys ``hours_by_corpus`` and ``char_counts``.  Older readers refuse the kinds.
1.4  compressed audio streams (catalogue ``codec`` ``flac`` or ``opus`` and ``block_frames``; segment ``blocks``;
     ``columns/<stream>_blocks.npy``) and per-piece digests (``digests``, ``shard-k/digests.npy``); compressed
     enrollment audio in waveform cue banks (``meta.json`` ``codec``, ``blocks.npy``, ``digests.npy``).  A 1.3 reader,
     which requires the exact catalogue keys, the exact shard file set and the ``<i2`` dtype of audio streams,
     refuses such a pack.
1.5  deflated copies of the column files (``columns.deflated``, ``columns/<name>.zlib``), written with digests.  A
     1.4 reader, which requires the exact keys of ``columns``, refuses such a pack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from speechpack.schemas.cues import CUES_DIR, CUES_YAML
from speechpack.schemas.constants import (  # noqa: F401  (MINOR_*: the version history's names, re-exported)
    AUDIO_DTYPE,
    CODEC_PCM16,
    COLUMNS_DIR,
    COMPRESSED_CODECS,
    COMPRESSED_DTYPE,
    DIGEST_ALGORITHM,
    DIGESTS_NAME,
    FORMAT_MINOR,
    FORMAT_NAME,
    FORMAT_VERSION,
    HASH_NAME,
    KINDS,
    MINOR_BANKS,
    MINOR_BLOCKS,
    MINOR_CUES,
    MINOR_DEFLATED_COLUMNS,
    MINOR_TRACKS,
    SHARD_INDEX_NAME,
    SKIPPED_NAME,
    STREAM_TYPES,
    SUPPORTED_MAJOR_VERSIONS,
    block_count,
    shard_dir_name,
    stream_file_name,
)
from speechpack.schemas.deflated_columns import deflated_name
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.kinds import ATTRIBUTES_BY_KIND, EXTRA_MANIFEST_KEYS, KIND_SPECS, STREAMS_BY_KIND, column_files
from speechpack.schemas.names import check_component, check_relative_path, check_shard_directory


def lowest_minor(kind: str, has_cues: bool, has_blocks: bool = False, has_deflated: bool = False) -> int:
    """The lowest minor version that describes a pack of ``kind`` (with or without cues; ``has_blocks``: a stream
    has a codec or the pack has digests, format 1.4; ``has_deflated``: deflated copies of the columns, 1.5)."""
    return max(FORMAT_MINOR, MINOR_CUES if has_cues else FORMAT_MINOR, KIND_SPECS[kind].since_minor,
               MINOR_BLOCKS if has_blocks else FORMAT_MINOR, MINOR_DEFLATED_COLUMNS if has_deflated else FORMAT_MINOR)


def _require(obj: Any, keys: set[str], where: str, optional: set[str] = frozenset()) -> None:
    """Check that ``obj`` is a dict with exactly ``keys`` (plus any of ``optional``), naming what differs."""
    if not isinstance(obj, dict):
        raise PackFormatError(f"{where}: expected an object, got {type(obj).__name__}")
    missing = sorted(keys - obj.keys())
    unknown = sorted(obj.keys() - keys - set(optional))
    if missing:
        raise PackFormatError(f"{where}: missing key(s) {', '.join(missing)}")
    if unknown:
        raise PackFormatError(f"{where}: unknown key(s) {', '.join(unknown)}")


def _typed(obj: dict, key: str, kind: type | tuple, where: str) -> Any:
    value = obj[key]
    # bool is an int in Python; a count or a rate must not be true/false.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise PackFormatError(f"{where}.{key}: expected {_type_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise PackFormatError(f"{where}.{key}: expected {_type_name(kind)}, got {value!r}")
    return value


def _type_name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def check_version(manifest: dict, where: str) -> None:
    """Refuse anything that is not a speechpack manifest of a major version this code reads."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        got = manifest.get("format") if isinstance(manifest, dict) else manifest
        raise PackFormatError(f"{where}: not a speechpack manifest (format is {got!r}, expected {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if type(version) is not int or version not in SUPPORTED_MAJOR_VERSIONS:  # True == 1 and 1.0 == 1 in Python
        readable = ", ".join(str(v) for v in SUPPORTED_MAJOR_VERSIONS)
        raise PackFormatError(
            f"{where}: format_version {version!r} is not supported; this speechpack reads format_version {readable}"
        )


@dataclass(frozen=True)
class StreamSpec:
    """One entry of the stream catalogue.  ``codec`` and ``block_frames`` (format 1.4) are set together on a
    compressed audio stream and None on every other (pcm16, data streams, every older pack)."""

    name: str
    dtype: str = AUDIO_DTYPE.str
    row_shape: tuple[int, ...] = ()
    codec: str | None = None
    block_frames: int | None = None

    @property
    def file(self) -> str:
        return stream_file_name(self.name)

    @property
    def compressed(self) -> bool:
        return self.codec is not None

    @property
    def codec_name(self) -> str:
        """The stream's codec by name, ``pcm16`` when the catalogue names none (data streams have no codec)."""
        return self.codec or CODEC_PCM16

    def to_dict(self) -> dict:
        obj = {"name": self.name, "dtype": self.dtype, "row_shape": list(self.row_shape), "file": self.file}
        if self.codec is not None:
            obj["codec"] = self.codec
            obj["block_frames"] = self.block_frames
        return obj

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> "StreamSpec":
        _require(obj, {"name", "dtype", "row_shape", "file"}, where, optional=set(_CODEC_KEYS))
        present = _CODEC_KEYS & obj.keys()
        if present and present != _CODEC_KEYS:
            missing = sorted(_CODEC_KEYS - present)
            raise PackFormatError(f"{where}: missing key(s) {', '.join(missing)} (a stream with a codec has both "
                                  f"codec and block_frames)")
        codec = block_frames = None
        if present:
            codec = _typed(obj, "codec", str, where)
            if codec not in COMPRESSED_CODECS:
                raise PackFormatError(f"{where}.codec: {codec!r} is not one of {', '.join(COMPRESSED_CODECS)} "
                                      f"(pcm16 is written by leaving the key out)")
            block_frames = _typed(obj, "block_frames", int, where)
            if block_frames <= 0:
                raise PackFormatError(f"{where}.block_frames: must be positive, got {block_frames}")
        spec = cls(
            name=_typed(obj, "name", str, where),
            dtype=_typed(obj, "dtype", str, where),
            row_shape=tuple(_typed(obj, "row_shape", list, where)),
            codec=codec,
            block_frames=block_frames,
        )
        if obj["file"] != spec.file:
            raise PackFormatError(f"{where}.file: expected {spec.file!r}, got {obj['file']!r}")
        return spec


#: The catalogue keys of a compressed stream (format 1.4), present together or not at all.
_CODEC_KEYS = frozenset({"codec", "block_frames"})


@dataclass(frozen=True)
class FileEntry:
    """Size and content hash of one file of the pack."""

    size: int
    sha256: str

    def to_dict(self) -> dict:
        return {"size": self.size, HASH_NAME: self.sha256}

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> "FileEntry":
        _require(obj, {"size", HASH_NAME}, where)
        size = _typed(obj, "size", int, where)
        digest = _typed(obj, HASH_NAME, str, where)
        if size < 0 or len(digest) != 64:
            raise PackFormatError(f"{where}: bad size {size!r} or {HASH_NAME} {digest!r}")
        return cls(size=size, sha256=digest)


@dataclass(frozen=True)
class ShardEntry:
    directory: str
    samples: int
    files: dict[str, FileEntry]

    def to_dict(self) -> dict:
        return {
            "directory": self.directory,
            "samples": self.samples,
            "files": {name: entry.to_dict() for name, entry in sorted(self.files.items())},
        }

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> "ShardEntry":
        _require(obj, {"directory", "samples", "files"}, where)
        files = _typed(obj, "files", dict, where)
        samples = _typed(obj, "samples", int, where)
        if samples < 0:
            raise PackFormatError(f"{where}.samples: negative count {samples}")
        return cls(
            directory=check_shard_directory(obj["directory"], f"{where}.directory"),
            samples=samples,
            files={check_component(name, f"{where}.files"): FileEntry.from_dict(entry, f"{where}.files[{name!r}]")
                   for name, entry in files.items()},
        )


@dataclass(frozen=True)
class Manifest:
    """``dataset.json``: what a pack holds and how to check it."""

    kind: str
    sample_rate: int
    streams: tuple[StreamSpec, ...]
    shards: tuple[ShardEntry, ...]
    totals: dict
    provenance: dict
    columns: dict[str, FileEntry] = field(default_factory=dict)
    skipped: dict = field(default_factory=lambda: {"count": 0})
    format_version: int = FORMAT_VERSION
    format_minor: int = FORMAT_MINOR
    #: Every file under ``cues/`` by its ``/``-separated relative path; empty when the pack has no cues.
    cues: dict[str, FileEntry] = field(default_factory=dict)
    #: ``asr`` packs: ``{corpus: {language: hours}}`` and ``{character: count}``; None in other kinds.
    hours_by_corpus: dict[str, dict[str, float]] | None = None
    char_counts: dict[str, int] | None = None
    #: ``"blake2b-128"`` when every shard has ``digests.npy`` (format 1.4; always with a codec stream), else None.
    digests: str | None = None
    #: Deflated copies of columns (format 1.5), by the column's name: ``columns/<name>.zlib``; empty without.
    deflated_columns: dict[str, FileEntry] = field(default_factory=dict)

    _KEYS = frozenset(
        {"format", "format_version", "format_minor", "kind", "sample_rate", "streams", "shards", "totals",
         "provenance", "columns", "skipped"}
    )
    _OPTIONAL_KEYS = frozenset({"cues", "digests"})
    _TOTALS = frozenset({"samples", "hours", "speakers", "bytes"})
    _PROVENANCE = frozenset({"input", "tool", "tool_version", "command", "options"})

    def stream(self, name: str) -> StreamSpec:
        for spec in self.streams:
            if spec.name == name:
                return spec
        raise PackFormatError(f"pack has no stream {name!r} (streams: {', '.join(s.name for s in self.streams)})")

    @property
    def num_samples(self) -> int:
        return self.totals["samples"]

    @property
    def block_frames(self) -> dict[str, int]:
        """Compressed streams (format 1.4), by name, with their frames per block; empty in a pcm16 pack."""
        return {spec.name: spec.block_frames for spec in self.streams if spec.codec is not None}

    @property
    def has_blocks(self) -> bool:
        """Whether the pack needs format 1.4: a stream has a codec or the shards have digests."""
        return bool(self.block_frames) or self.digests is not None

    def column_file_names(self) -> tuple[str, ...]:
        """Every file of ``columns/``: the kind's, plus each compressed stream's block sizes."""
        return column_files(self.kind, self.block_frames)

    def file_entries(self) -> dict[str, FileEntry]:
        """Every file of the pack except ``dataset.json`` by ``/``-separated relative path, with its size and hash:
        shards' files, columns, cue files and ``skipped.json`` (what a copy moves, a validation hashes and the node
        cache fetches by)."""
        entries = {f"{shard.directory}/{name}": entry for shard in self.shards for name, entry in shard.files.items()}
        entries.update({f"{COLUMNS_DIR}/{name}": entry for name, entry in self.columns.items()})
        entries.update({f"{COLUMNS_DIR}/{deflated_name(name)}": entry for name, entry in self.deflated_columns.items()})
        entries.update({f"{CUES_DIR}/{name}": entry for name, entry in self.cues.items()})
        skipped = self.skipped.get("file")
        if skipped is not None:
            entries[SKIPPED_NAME] = FileEntry(size=skipped["size"], sha256=skipped[HASH_NAME])
        return entries

    def to_dict(self) -> dict:
        """The JSON object of ``dataset.json``; ``cues`` only when the pack has cues."""
        obj = {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "format_minor": self.format_minor,
            "kind": self.kind,
            "sample_rate": self.sample_rate,
            "streams": [spec.to_dict() for spec in self.streams],
            "shards": [shard.to_dict() for shard in self.shards],
            "totals": dict(self.totals),
            "provenance": self.provenance,
            "columns": {"directory": COLUMNS_DIR,
                        "files": {name: entry.to_dict() for name, entry in sorted(self.columns.items())},
                        **({"deflated": {name: entry.to_dict() for name, entry in sorted(self.deflated_columns.items())}}
                           if self.deflated_columns else {})},
            "skipped": dict(self.skipped),
        }
        if self.cues:
            obj["cues"] = {"directory": CUES_DIR,
                           "files": {name: entry.to_dict() for name, entry in sorted(self.cues.items())}}
        if self.digests is not None:
            obj["digests"] = self.digests
        for key in KIND_SPECS[self.kind].manifest_keys:
            obj[key] = getattr(self, key)
        return obj

    @classmethod
    def from_dict(cls, obj: Any, where: str = "dataset.json") -> "Manifest":
        """Parse and check a manifest: version first, then the exact key set and every type."""
        check_version(obj, where)
        _require(obj, set(cls._KEYS), where, optional=set(cls._OPTIONAL_KEYS | EXTRA_MANIFEST_KEYS))
        kind = _typed(obj, "kind", str, where)
        if kind not in KINDS:
            raise PackFormatError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
        extra_keys = KIND_SPECS[kind].manifest_keys
        foreign = (EXTRA_MANIFEST_KEYS - extra_keys) & obj.keys()
        if foreign:
            owners = sorted(k for k, spec in KIND_SPECS.items() if foreign & spec.manifest_keys)
            raise PackFormatError(f"{where}: {', '.join(sorted(foreign))} only belong to {' and '.join(owners)} "
                                  f"packs, this one is {kind!r}")
        _require(obj, set(cls._KEYS | extra_keys), where, optional=set(cls._OPTIONAL_KEYS))
        sample_rate = _typed(obj, "sample_rate", int, where)
        if sample_rate <= 0:
            raise PackFormatError(f"{where}.sample_rate: must be positive, got {sample_rate}")
        streams = tuple(
            StreamSpec.from_dict(s, f"{where}.streams[{i}]") for i, s in enumerate(_typed(obj, "streams", list, where))
        )
        expected = STREAMS_BY_KIND[kind]
        if tuple(s.name for s in streams) != expected:
            raise PackFormatError(
                f"{where}.streams: kind {kind!r} has streams {list(expected)}, got {[s.name for s in streams]}"
            )
        for i, spec in enumerate(streams):
            expected_type = STREAM_TYPES[spec.name]
            if spec.codec is not None and not expected_type.audio:
                raise PackFormatError(f"{where}.streams[{i}]: stream {spec.name!r} is a data stream; only audio "
                                      f"streams have a codec")
            dtype = COMPRESSED_DTYPE.str if spec.codec is not None else expected_type.dtype.str
            row_shape = () if spec.codec is not None else expected_type.row_shape
            if spec.dtype != dtype or spec.row_shape != row_shape:
                what = f"a {spec.codec} stream" if spec.codec is not None else f"stream {spec.name!r}"
                raise PackFormatError(
                    f"{where}.streams[{i}]: {what} must be dtype {dtype!r} with row_shape {list(row_shape)}, got "
                    f"{spec.dtype!r} {list(spec.row_shape)}"
                )
        digests = _digests(obj, streams, where)
        shards = tuple(
            ShardEntry.from_dict(s, f"{where}.shards[{i}]") for i, s in enumerate(_typed(obj, "shards", list, where))
        )
        _check_shard_names(shards, streams, digests is not None, where)
        totals = _typed(obj, "totals", dict, where)
        _require(totals, set(cls._TOTALS), f"{where}.totals")
        provenance = _typed(obj, "provenance", dict, where)
        _require(provenance, set(cls._PROVENANCE), f"{where}.provenance")
        columns = _typed(obj, "columns", dict, where)
        _require(columns, {"directory", "files"}, f"{where}.columns", optional={"deflated"})
        if columns["directory"] != COLUMNS_DIR:
            raise PackFormatError(f"{where}.columns.directory: expected {COLUMNS_DIR!r}, got {columns['directory']!r}")
        column_entries = {name: FileEntry.from_dict(entry, f"{where}.columns.files[{name!r}]")
                          for name, entry in _typed(columns, "files", dict, f"{where}.columns").items()}
        expected_columns = column_files(kind, (spec.name for spec in streams if spec.codec is not None))
        if set(column_entries) != set(expected_columns):
            raise PackFormatError(f"{where}.columns.files: expected {sorted(expected_columns)}, "
                                  f"got {sorted(column_entries)}")
        deflated = {name: FileEntry.from_dict(entry, f"{where}.columns.deflated[{name!r}]")
                    for name, entry in _typed(columns, "deflated", dict, f"{where}.columns").items()} \
            if "deflated" in columns else {}
        if not set(deflated) <= set(column_entries):
            raise PackFormatError(f"{where}.columns.deflated: {sorted(set(deflated) - set(column_entries))} are not "
                                  f"columns (columns: {sorted(column_entries)})")
        skipped = _typed(obj, "skipped", dict, where)
        _check_skipped(skipped, f"{where}.skipped")
        if sum(shard.samples for shard in shards) != totals["samples"]:
            raise PackFormatError(
                f"{where}: shards hold {sum(s.samples for s in shards)} samples but totals.samples is "
                f"{totals['samples']}"
            )
        return cls(
            cues=_cue_files(obj["cues"], f"{where}.cues") if "cues" in obj else {},
            kind=kind,
            sample_rate=sample_rate,
            streams=streams,
            shards=shards,
            totals=totals,
            provenance=provenance,
            columns=column_entries,
            skipped=skipped,
            format_version=obj["format_version"],
            format_minor=_typed(obj, "format_minor", int, where),
            digests=digests,
            deflated_columns=deflated,
            **{key: parse(obj, where) for key, parse in _EXTRA_KEY_PARSERS.items() if key in extra_keys},
        )


def _digests(obj: dict, streams: tuple[StreamSpec, ...], where: str) -> str | None:
    """``dataset.json["digests"]`` (format 1.4): absent, or the one algorithm; required when a stream has a codec
    (a compressed pack always has digests)."""
    if "digests" not in obj:
        compressed = [spec.name for spec in streams if spec.codec is not None]
        if compressed:
            raise PackFormatError(f"{where}: missing key digests (stream(s) {', '.join(compressed)} have a codec, "
                                  f"and a compressed pack always has digests)")
        return None
    algorithm = _typed(obj, "digests", str, where)
    if algorithm != DIGEST_ALGORITHM:
        raise PackFormatError(f"{where}.digests: expected {DIGEST_ALGORITHM!r}, got {algorithm!r}")
    return algorithm


def _check_shard_names(shards: tuple[ShardEntry, ...], streams: tuple[StreamSpec, ...], digests: bool,
                       where: str) -> None:
    """Shard ``k`` is ``shard_dir_name(k)`` and holds exactly its index, one file per stream and, exactly when the
    pack has digests, ``digests.npy``: the only names a reader or a copy ever joins to the pack's path
    (``schemas.names`` has already refused anything unsafe)."""
    expected_files = {SHARD_INDEX_NAME} | {spec.file for spec in streams} | ({DIGESTS_NAME} if digests else set())
    for i, shard in enumerate(shards):
        if shard.directory != shard_dir_name(i):
            raise PackFormatError(f"{where}.shards[{i}].directory: expected {shard_dir_name(i)!r}, got "
                                  f"{shard.directory!r} (shard k is the k-th shard of the plan)")
        if set(shard.files) != expected_files:
            raise PackFormatError(f"{where}.shards[{i}].files: expected {sorted(expected_files)}, got "
                                  f"{sorted(shard.files)}")


def _check_skipped(skipped: dict, where: str) -> None:
    """``{"count": n}``, plus ``"file": {"name": "skipped.json", "size", "sha256"}`` when ``n > 0``."""
    _require(skipped, {"count"}, where, optional={"file"})
    count = _typed(skipped, "count", int, where)
    if count < 0:
        raise PackFormatError(f"{where}.count: negative count {count}")
    if "file" in skipped:
        entry = _typed(skipped, "file", dict, where)
        _require(entry, {"name", "size", HASH_NAME}, f"{where}.file")
        if entry["name"] != SKIPPED_NAME:
            raise PackFormatError(f"{where}.file.name: expected {SKIPPED_NAME!r}, got {entry['name']!r}")
        FileEntry.from_dict({"size": entry["size"], HASH_NAME: entry[HASH_NAME]}, f"{where}.file")


def _hours_by_corpus(obj: dict, where: str) -> dict[str, dict[str, float]]:
    table = _typed(obj, "hours_by_corpus", dict, where)
    for corpus, languages in table.items():
        at = f"{where}.hours_by_corpus[{corpus!r}]"
        if not isinstance(languages, dict) or not languages:
            raise PackFormatError(f"{at}: expected a non-empty object of language -> hours")
        for language in languages:
            hours = _typed(languages, language, (int, float), at)
            if hours < 0:
                raise PackFormatError(f"{at}[{language!r}]: negative hours {hours}")
    return table


def _char_counts(obj: dict, where: str) -> dict[str, int]:
    counts = _typed(obj, "char_counts", dict, where)
    for char in counts:
        if len(char) != 1 or _typed(counts, char, int, f"{where}.char_counts") <= 0:
            raise PackFormatError(f"{where}.char_counts: {char!r} must be one character with a positive count")
    return counts


#: How each extra manifest key (``KindSpec.manifest_keys``) is checked.
_EXTRA_KEY_PARSERS = {"hours_by_corpus": _hours_by_corpus, "char_counts": _char_counts}


def _cue_files(obj: Any, where: str) -> dict[str, FileEntry]:
    """``dataset.json["cues"]``: relative paths that stay inside ``cues/``, and ``cues.yaml`` among them."""
    _require(obj, {"directory", "files"}, where)
    if obj["directory"] != CUES_DIR:
        raise PackFormatError(f"{where}.directory: expected {CUES_DIR!r}, got {obj['directory']!r}")
    files = {}
    for name, entry in _typed(obj, "files", dict, where).items():
        files[check_relative_path(name, f"{where}.files", f"{CUES_DIR}/")] = FileEntry.from_dict(
            entry, f"{where}.files[{name!r}]")
    if CUES_YAML not in files:
        raise PackFormatError(f"{where}.files: {CUES_YAML} is missing")
    return files


SEGMENT_KEYS = frozenset({"offset", "channels", "length", "scale", "mean", "rms", "peak"})
#: A segment of a compressed audio stream (format 1.4): ``offset`` in bytes, and its blocks' byte sizes.
COMPRESSED_SEGMENT_KEYS = SEGMENT_KEYS | {"blocks"}
DATA_SEGMENT_KEYS = frozenset({"offset", "length"})
RECORD_KEYS = frozenset(
    {"key", "speakers", "num_frames", "duration", "orig_sample_rate", "line", "provenance", "streams"}
)
ATTRS_KEY = "attrs"
SHARD_INDEX_KEYS = frozenset({"format_version", "shard", "samples"})


def check_shard_index(obj: Any, kind: str, where: str, block_frames: Mapping[str, int] | None = None) -> list[dict]:
    """Check a shard's ``index.json`` structure and return its sample records.  ``block_frames`` names the pack's
    compressed streams with their frames per block (``Manifest.block_frames``; format 1.4): their segments carry
    ``blocks``, one positive byte size per block, ``ceil(length / block_frames)`` of them."""
    block_frames = block_frames or {}
    _require(obj, set(SHARD_INDEX_KEYS), where)
    if type(obj["format_version"]) is not int or obj["format_version"] not in SUPPORTED_MAJOR_VERSIONS:
        raise PackFormatError(f"{where}.format_version: {obj['format_version']!r} is not supported")
    records = _typed(obj, "samples", list, where)
    streams = STREAMS_BY_KIND[kind]
    attributes = ATTRIBUTES_BY_KIND.get(kind)
    record_keys = set(RECORD_KEYS) | ({ATTRS_KEY} if attributes else set())
    for i, record in enumerate(records):
        at = f"{where}.samples[{i}]"
        _require(record, record_keys, at)
        if attributes:
            _check_attrs(record[ATTRS_KEY], attributes, f"{at}.{ATTRS_KEY}")
        _typed(record, "key", str, at)
        speakers = _typed(record, "speakers", list, at)
        if not speakers or not all(isinstance(s, str) for s in speakers):
            raise PackFormatError(f"{at}.speakers: expected a non-empty list of strings, got {speakers!r}")
        for name in ("num_frames", "orig_sample_rate", "line"):
            _typed(record, name, int, at)
        _typed(record, "duration", (int, float), at)
        segments = _typed(record, "streams", dict, at)
        if set(segments) != set(streams):
            raise PackFormatError(f"{at}.streams: expected {list(streams)}, got {sorted(segments)}")
        for name, segs in segments.items():
            if not isinstance(segs, list) or not segs:
                raise PackFormatError(f"{at}.streams.{name}: expected a non-empty list of segments")
            audio = STREAM_TYPES[name].audio
            frames = block_frames.get(name)
            keys = (COMPRESSED_SEGMENT_KEYS if frames is not None else SEGMENT_KEYS) if audio else DATA_SEGMENT_KEYS
            for j, seg in enumerate(segs):
                seg_at = f"{at}.streams.{name}[{j}]"
                _require(seg, set(keys), seg_at)
                for key in ("offset", "channels", "length") if audio else ("offset", "length"):
                    if _typed(seg, key, int, seg_at) < 0:
                        raise PackFormatError(f"{seg_at}.{key}: negative value {seg[key]}")
                for key in ("scale", "mean", "rms", "peak") if audio else ():
                    _typed(seg, key, (int, float), seg_at)
                if frames is not None:
                    _check_blocks(seg, frames, seg_at)
    return records


def _check_blocks(seg: dict, block_frames: int, where: str) -> None:
    """A compressed segment's ``blocks``: ``ceil(length / block_frames)`` positive byte sizes."""
    blocks = _typed(seg, "blocks", list, where)
    expected = block_count(seg["length"], block_frames)
    if len(blocks) != expected:
        raise PackFormatError(f"{where}.blocks: {len(blocks)} block(s), a segment of {seg['length']} frames in blocks "
                              f"of {block_frames} has {expected}")
    for size in blocks:
        if type(size) is not int or size <= 0:
            raise PackFormatError(f"{where}.blocks: {size!r} is not a positive byte size")


def _check_attrs(attrs: Any, attributes: dict[str, type], where: str) -> None:
    _require(attrs, set(attributes), where)
    for name, kind in attributes.items():
        _typed(attrs, name, (int, float) if kind is float else kind, where)
