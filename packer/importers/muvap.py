"""``speechpack import muvap PACK --out DIR``: an existing MuVAP ASD pack (``muvap-asd-mmap``, version 4), read as
untrusted input and checked, then written as a speechpack ``asd`` pack, no media decoded.

MuVAP's canonical ASD preprocessing (docs/asd.md, "Coming from MuVAP") writes, per pack directory::

    dataset.json                  {"format": "muvap-asd-mmap", "version": 4, "timeline": "native",
                                   "audio_sample_rate": 16000, "audio_normalization": null,
                                   "face_shape": [112, 112], "face_color": "grayscale", "face_dtype": "uint8",
                                   "audio_dtype": "int16", "label_dtype": "uint8", "shards": n, "samples": m}
    shard-NNNNNN/faces.npy        uint8 [sum of source_frames, 112, 112]
    shard-NNNNNN/audio.npy        int16 [sum of audio_samples], 16 kHz, source gain
    shard-NNNNNN/labels.npy       uint8 [sum of source_frames], 0/1
    shard-NNNNNN/index.json       one JSON list: a record per sample, in write order

A record holds ``dataset, sample_id, source_fps, source_frames, start_sec, model_frames, face_offset,
audio_offset, audio_samples, label_offset, audio_mean, audio_rms, audio_peak, speaking_ratio``; offsets are
shard-local rows (frames or samples) and restart in every shard.

MuVAP's own reader checks little (the format name, version, timeline, rate and normalisation); this one checks
everything a speechpack pack is held to, and more, before a byte is copied:

- **names**: shard directories are exactly ``shard-000000`` ... ``shard-<shards - 1>`` (built from the count,
  never taken from a listing, and only once the listing holds that many: a count far beyond what is on disk is
  answered at once), nothing else named ``shard-*`` may sit beside them, and no shard directory or file may be a
  link (``packer.importers.muvap_files`` opens each without following one and reads from that descriptor): a
  crafted pack cannot make the import read elsewhere, not even by swapping a link in while it runs;
- ``dataset.json``: every key, type and value above (``face_shape`` must be the geometry the loader reads), and
  its ``shards``/``samples`` counts against what is on disk;
- every ``.npy`` header (read without unpickling; ``np.load`` is only ever called with ``allow_pickle=False``):
  dtype, shape, C order, and a file size that holds the data;
- every record: its keys and types (numbers within 64 bits / a double's range), ``face_offset == label_offset``,
  offsets contiguous from 0 to the array's end, its rows inside the arrays (checked record by record),
  ``audio_samples == round(source_frames / source_fps * 16000)``, at least one 25 Hz model frame,
  ``model_frames`` as MuVAP's formula gives it, a unique ``sample_id`` with no control character.

Pack-level faults raise ``PackFormatError`` naming the file and key; record faults are collected, one
``LineProblem`` each (``line`` is the sample's 1-based position in the pack, the order MuVAP's reader visits them;
the reason names the index.json entry), so one run lists them all.

A MuVAP pack already holds what an ``asd`` pack holds -- grayscale 112x112 faces and 0/1 labels per native frame,
int16 16 kHz audio at source gain -- so the import copies every sample's rows by range, the int16 audio bit for bit (MuVAP's reader decodes ``v / 32768``, as speechpack does), and runs the
ordinary build (``packer.build.run.run_build``): shards, hashes, columns, resume, ``--workers``, and a pack that
``speechpack validate`` checks like any other.

What is recomputed rather than trusted: the audio statistics.  MuVAP measures them on the float waveform before
quantising it (``x * 32767``), speechpack on the stored int16 as its reader decodes it (``docs/format.md``), so a
chunk's gain is reproducible bit for bit.  Before writing, every sample's statistics are recomputed from the
stored int16 and compared with MuVAP's ``audio_mean``/``audio_rms``/``audio_peak`` (and its ``speaking_ratio``
with the stored labels); the two measurements differ by the quantisation alone, at most about one int16 step plus
``1/32768`` of the value, so anything beyond ``STATS_ABS_TOL + STATS_REL_TOL * |value|`` is a mismatch.  Every
mismatch is reported (sample, field, both values); the pack keeps the recomputed values, which are the ones the
loader uses.  ``strict_stats`` makes mismatches fail the import instead.

A sample's ``clip`` is MuVAP's: its ``sample_id`` without the ``:entity`` suffix.  Its provenance records the MuVAP
shard, index entry, dataset name and MuVAP's own statistics.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import re
import sys
from dataclasses import dataclass, field

import numpy as np

from speechpack.packer.adapters.option_spec import Path, argument, option
from speechpack.packer.adapters.registry import (
    ENCODING_OPTIONS,
    FINISHING_OPTIONS,
    OUT_HELP,
    SCALE_OPTIONS,
    shard_size_option,
    skip_bad_option,
    workers_option,
)
from speechpack.packer.audio.decode import AudioError
from speechpack.packer.audio.store import StoredAudio, int16_statistics
from speechpack.packer.build.plan import PackedSample, SamplePlan, StoredArray
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.importers.muvap_files import FileIdentity, array_identity, check_directory, map_array, read_file
from speechpack.schemas.constants import (
    ASD_SAMPLE_RATE,
    FACE_SHAPE,
    KIND_ASD,
    SHARD_DIR_PREFIX,
    STREAM_AUDIO,
    STREAM_FACES,
    STREAM_LABELS,
    shard_dir_name,
)
from speechpack.schemas.documents import parse_json
from speechpack.schemas.errors import BuildError, PackFormatError, SpeechpackError
from speechpack.schemas.line_problems import LineProblem
from speechpack.schemas.names import name_problem
from speechpack.schemas.timebase import audio_sample_count, model_frame_count

MUVAP_FORMAT = "muvap-asd-mmap"
#: MuVAP's ``SUPPORTED_VERSIONS``.
MUVAP_VERSIONS = (4,)
MUVAP_MANIFEST = "dataset.json"
MUVAP_INDEX = "index.json"
#: The three array files of a MuVAP shard, and what each must hold: (dtype, row shape).
MUVAP_ARRAYS = {"faces": (np.dtype("uint8"), FACE_SHAPE), "audio": (np.dtype("int16"), ()),
                "labels": (np.dtype("uint8"), ())}
#: ``dataset.json`` values an importable pack must have (MuVAP's reader checks the first five).
MUVAP_FIXED = {"format": MUVAP_FORMAT, "timeline": "native", "audio_sample_rate": ASD_SAMPLE_RATE,
               "audio_normalization": None, "face_shape": list(FACE_SHAPE), "face_color": "grayscale",
               "face_dtype": "uint8", "audio_dtype": "int16", "label_dtype": "uint8"}
#: Record keys and the JSON types they must have (``bool`` is never accepted as a number).
RECORD_TYPES = {"dataset": str, "sample_id": str, "source_fps": (int, float), "source_frames": int,
                "start_sec": (int, float), "model_frames": int, "face_offset": int, "audio_offset": int,
                "audio_samples": int, "label_offset": int, "audio_mean": (int, float), "audio_rms": (int, float),
                "audio_peak": (int, float), "speaking_ratio": (int, float)}
_SHARD_ENTRY = re.compile(re.escape(SHARD_DIR_PREFIX) + r".*")
#: Integers of a record must fit in 64 bits (the pack stores offsets and counts as int64).
MAX_RECORD_INT = 2 ** 63 - 1
#: A track's audio length ``source_frames / source_fps * 16000`` must stay an exact integer in a double (2**53
#: samples are 17,800 years at 16 kHz): beyond it a tiny ``source_fps`` would overflow the int64 sample count.
MAX_TRACK_SAMPLES = 2.0 ** 53


@dataclass(frozen=True)
class MuvapRecord:
    """One MuVAP sample, checked: where its rows are in its shard, and what MuVAP measured."""

    line: int
    key: str
    dataset: str
    shard_path: str
    entry: int
    source_fps: float
    source_frames: int
    start_sec: float
    face_offset: int
    audio_offset: int
    audio_samples: int
    audio_mean: float
    audio_rms: float
    audio_peak: float
    speaking_ratio: float
    #: ``(name, identity)`` of the shard's three arrays as checked: the copy reads only those files.
    arrays: tuple[tuple[str, FileIdentity], ...] = ()

    def identity(self, name: str) -> FileIdentity:
        return dict(self.arrays)[name]


@dataclass(frozen=True)
class MuvapPack:
    """A MuVAP pack as read: its manifest, every record that passed the checks, and the problems of the others."""

    root: str
    manifest: dict
    records: tuple[MuvapRecord, ...]
    problems: tuple[LineProblem, ...]
    #: SHA-256 of the bytes parsed, per document read (``dataset.json``, ``shard-NNNNNN/index.json``; relative
    #: paths): what the import's input fingerprint is made of, without reading any of them again.
    document_sha256: dict[str, bytes] = field(default_factory=dict)


def _read_json(root: str, parts: tuple[str, ...], name: str, digests: dict[str, bytes] | None = None):
    """The JSON document ``root/parts...`` (a file ``name`` of the pack at ``root``), read without following a
    link, through the one JSON reading layer (``schemas.documents``): ``PackFormatError`` naming the file for any
    decoding failure.  ``digests`` (when given) gets the SHA-256 of the bytes read, under the relative path."""
    path = os.path.join(root, *parts)
    data = read_file(root, *parts, what=name)
    if digests is not None:
        digests[os.path.join(*parts)] = hashlib.sha256(data).digest()
    return parse_json(data, path, error=PackFormatError)


def read_manifest(root: str, digests: dict[str, bytes] | None = None) -> dict:
    """``dataset.json`` of the MuVAP pack at ``root``, checked key by key (``digests``: see ``_read_json``)."""
    path = os.path.join(root, MUVAP_MANIFEST)
    if not os.path.lexists(path):
        raise PackFormatError(f"{root}: no {MUVAP_MANIFEST}, so this is not a finished MuVAP pack (MuVAP writes it "
                              f"last)")
    manifest = _read_json(root, (MUVAP_MANIFEST,), MUVAP_MANIFEST, digests)
    if not isinstance(manifest, dict):
        raise PackFormatError(f"{path}: expected a JSON object, got {type(manifest).__name__}")
    if manifest.get("format") != MUVAP_FORMAT:
        raise PackFormatError(f"{path}: key 'format' is {manifest.get('format')!r}; this importer reads "
                              f"{MUVAP_FORMAT!r} packs (MuVAP's ASD packs; its conversation packs are another format)")
    version = manifest.get("version")
    if type(version) is not int or version not in MUVAP_VERSIONS:
        raise PackFormatError(f"{path}: key 'version' is {version!r}; this importer reads version(s) "
                              f"{', '.join(map(str, MUVAP_VERSIONS))}")
    for key, expected in MUVAP_FIXED.items():
        if key not in manifest:
            raise PackFormatError(f"{path}: key {key!r} is missing (expected {expected!r})")
        if manifest[key] != expected or type(manifest[key]) is not type(expected):
            hint = " (speechpack's loader reads 112x112 grayscale faces: re-run MuVAP's preprocessing at that size)" \
                if key in ("face_shape", "face_color") else ""
            raise PackFormatError(f"{path}: key {key!r} is {manifest[key]!r}, expected {expected!r}{hint}")
    for key in ("shards", "samples"):
        value = manifest.get(key)
        if type(value) is not int or value < 0:
            raise PackFormatError(f"{path}: key {key!r} must be a non-negative integer, got {value!r}")
    return manifest


def shard_paths(root: str, count: int) -> list[str]:
    """The shard directories ``shard-000000`` ... of a pack that says it has ``count``; anything else named
    ``shard-*`` (which MuVAP's reader would glob) is refused, and so is a link.  The listing comes first: a
    ``count`` beyond the directories present is answered by naming the first missing one, without building
    ``count`` names (``"shards": 10**12`` must not take minutes and gigabytes)."""
    present = set(name for name in os.listdir(root) if _SHARD_ENTRY.fullmatch(name))
    if count > len(present):
        first_missing = next(k for k in range(len(present) + 1) if shard_dir_name(k) not in present)
        raise PackFormatError(f"{os.path.join(root, shard_dir_name(first_missing))}: missing (key 'shards' of "
                              f"{MUVAP_MANIFEST} is {count}; the pack holds {len(present)} shard-* entries)")
    expected = [shard_dir_name(k) for k in range(count)]
    extra = sorted(present - set(expected))
    if extra:
        raise PackFormatError(f"{os.path.join(root, MUVAP_MANIFEST)}: key 'shards' says {count}, but the pack also "
                              f"holds {', '.join(map(repr, extra[:5]))}{' ...' if len(extra) > 5 else ''} "
                              f"(MuVAP's reader would glob them; remove them or fix the count)")
    paths = []
    for name in expected:
        path = os.path.join(root, name)
        if not os.path.lexists(path):
            raise PackFormatError(f"{path}: missing (key 'shards' of {MUVAP_MANIFEST} is {count})")
        check_directory(root, name, what="shard directory")
        paths.append(path)
    return paths


def array_header(root: str, shard: str, name: str) -> FileIdentity:
    """The checked ``.npy`` header of one shard array (never unpickled: an object dtype is refused here), with
    the identity of the file it was read from (the copy reads only that file)."""
    path = os.path.join(shard, f"{name}.npy")
    identity = array_identity(root, os.path.basename(shard), f"{name}.npy")
    header = identity.header
    dtype, row_shape = MUVAP_ARRAYS[name]
    if header.dtype != dtype or header.fortran_order or tuple(header.shape[1:]) != row_shape or not header.shape:
        raise PackFormatError(f"{path}: expected {dtype} [N{''.join(f', {n}' for n in row_shape)}] in C order, the "
                              f"header says {header.dtype} {list(header.shape)}"
                              f"{' (Fortran order)' if header.fortran_order else ''}")
    if identity.size < header.expected_size:
        raise PackFormatError(f"{path}: {identity.size} bytes, but its header needs {header.expected_size} (file "
                              f"truncated?)")
    return identity


def _record_problem(record: object, entry: int) -> str | None:
    """Why an index.json entry is not a well-typed MuVAP record, or ``None``."""
    if not isinstance(record, dict):
        return f"entry {entry} is {type(record).__name__}, not an object"
    missing = [key for key in RECORD_TYPES if key not in record]
    if missing:
        return f"entry {entry} lacks key(s) {', '.join(missing)}"
    for key, types in RECORD_TYPES.items():
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, types):
            return f"entry {entry}: key {key!r} is {value!r}, not {'an integer' if types is int else 'a ' + str(types)}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"entry {entry}: key {key!r} is {value!r}"
        if type(value) is int and abs(value) > (MAX_RECORD_INT if types is int else sys.float_info.max):
            return (f"entry {entry}: key {key!r} is an integer of {len(str(abs(value)))} digits, beyond "
                    f"{'64 bits' if types is int else 'the range of a double'}")
    if not record["sample_id"]:
        return f"entry {entry}: key 'sample_id' is empty"
    problem = name_problem(record["sample_id"])
    if problem is not None:
        return f"entry {entry}: key 'sample_id' {record['sample_id']!r} {problem}"
    return None


def read_shard(root: str, shard: str, first_line: int, seen: dict[str, int],
               digests: dict[str, bytes] | None = None) -> tuple[list, list, int]:
    """The checked records of one shard, the problems of the others, and how many entries its index holds
    (``seen``: sample ids met so far, for duplicates across shards; ``digests``: see ``_read_json``)."""
    index_path = os.path.join(shard, MUVAP_INDEX)
    if not os.path.isfile(index_path):
        raise PackFormatError(f"{index_path}: missing")
    entries = _read_json(root, (os.path.basename(shard), MUVAP_INDEX), MUVAP_INDEX, digests)
    if not isinstance(entries, list):
        raise PackFormatError(f"{index_path}: expected a JSON list of records, got {type(entries).__name__}")
    identities = {name: array_header(root, shard, name) for name in MUVAP_ARRAYS}
    arrays = tuple(identities.items())
    rows = {name: identity.header.shape[0] for name, identity in identities.items()}
    records, problems = [], []
    next_frame = next_sample = 0  # where the next record must start: MuVAP concatenates in write order
    for entry, record in enumerate(entries):
        line = first_line + entry
        reason = _record_problem(record, entry)
        key = record.get("sample_id") if isinstance(record, dict) and isinstance(record.get("sample_id"), str) \
            else None
        if reason is None:
            reason = _layout_problem(record, entry, next_frame, next_sample)
        if reason is None:
            reason = _rows_problem(record, entry, rows)
        if reason is None and key in seen:
            reason = f"entry {entry}: sample_id {key!r} repeats line {seen[key]}"
        spans = [record.get(k) for k in ("face_offset", "source_frames", "audio_offset", "audio_samples")] \
            if isinstance(record, dict) else [None]
        if all(type(v) is int for v in spans):  # the next record starts where this one says it ends
            next_frame, next_sample = spans[0] + spans[1], spans[2] + spans[3]
        if key is not None:
            seen.setdefault(key, line)  # a bad record's id still counts: a later copy of it is a duplicate
        if reason is not None:
            problems.append(LineProblem(line, key, index_path, reason))
            continue
        records.append(MuvapRecord(
            line=line, key=key, dataset=record["dataset"], shard_path=shard, entry=entry,
            source_fps=float(record["source_fps"]), source_frames=record["source_frames"],
            start_sec=float(record["start_sec"]), face_offset=record["face_offset"],
            audio_offset=record["audio_offset"], audio_samples=record["audio_samples"],
            audio_mean=float(record["audio_mean"]), audio_rms=float(record["audio_rms"]),
            audio_peak=float(record["audio_peak"]), speaking_ratio=float(record["speaking_ratio"]),
            arrays=arrays))
    ends = {"faces": next_frame, "labels": next_frame, "audio": next_sample}
    for name, count in rows.items():
        if count != ends[name] and not problems:  # a bad record already explains a wrong end
            problems.append(LineProblem(first_line + max(len(entries) - 1, 0), None, os.path.join(shard, f"{name}.npy"),
                                        f"holds {count} rows, the records of {MUVAP_INDEX} end at "
                                        f"{ends[name]}"))
    return records, problems, len(entries)


def _rows_problem(record: dict, entry: int, rows: dict[str, int]) -> str | None:
    """Why a record's rows are not all inside its shard's arrays, or ``None``: checked for every record, since the
    check of the arrays' ends is left out once a record is bad (a bad record explains a wrong end), and a record
    past the end would otherwise be copied as an empty sample."""
    spans = {"faces": (record["face_offset"], record["source_frames"]),
             "labels": (record["label_offset"], record["source_frames"]),
             "audio": (record["audio_offset"], record["audio_samples"])}
    for name, (offset, count) in spans.items():
        if offset + count > rows[name]:
            return (f"entry {entry}: rows [{offset}, {offset + count}) of {name}.npy, which holds {rows[name]} rows "
                    f"(the record lies past the end of the array)")
    return None


def _layout_problem(record: dict, entry: int, next_frame: int, next_sample: int) -> str | None:
    """Why a well-typed record's layout or timing is wrong, or ``None``."""
    frames, fps = record["source_frames"], float(record["source_fps"])
    if frames <= 0 or fps <= 0:
        return f"entry {entry}: source_frames {frames} and source_fps {fps!r} must be positive"
    if not frames / fps * ASD_SAMPLE_RATE < MAX_TRACK_SAMPLES:  # a tiny fps: no int64 holds the sample count
        return (f"entry {entry}: source_frames {frames} at source_fps {fps!r} would last {frames / fps:.6g} s; no "
                f"real track is that long (source_fps too small?)")
    if record["face_offset"] != record["label_offset"]:
        return f"entry {entry}: face_offset {record['face_offset']} != label_offset {record['label_offset']}"
    if record["face_offset"] != next_frame:
        return f"entry {entry}: face_offset {record['face_offset']}, but the previous record ends at frame {next_frame}"
    if record["audio_offset"] != next_sample:
        return (f"entry {entry}: audio_offset {record['audio_offset']}, but the previous record ends at sample "
                f"{next_sample}")
    samples = int(audio_sample_count(frames, fps))
    if record["audio_samples"] != samples:
        return (f"entry {entry}: audio_samples {record['audio_samples']} != round({frames} / {fps:g} * "
                f"{ASD_SAMPLE_RATE}) = {samples}")
    model = int(model_frame_count(frames, fps))
    if model == 0:
        return (f"entry {entry}: {frames} frame(s) at {fps:g} fps is shorter than one 25 Hz model frame (MuVAP drops "
                f"such tracks silently; the model cannot see it)")
    if record["model_frames"] != model:
        return f"entry {entry}: model_frames {record['model_frames']} != floor({frames} / {fps:g} * 25) = {model}"
    if record["start_sec"] < 0:
        return f"entry {entry}: start_sec {record['start_sec']} is negative"
    return None


def read_muvap_pack(root: str) -> MuvapPack:
    """Read and check a MuVAP pack (see the module docstring); ``PackFormatError`` for pack-level faults."""
    if not os.path.isdir(root):
        raise PackFormatError(f"{root}: not a directory")
    digests: dict[str, bytes] = {}
    manifest = read_manifest(root, digests)
    records: list[MuvapRecord] = []
    problems: list[LineProblem] = []
    seen: dict[str, int] = {}
    line = 1
    for shard in shard_paths(root, manifest["shards"]):
        shard_records, shard_problems, count = read_shard(root, shard, line, seen, digests)
        records += shard_records
        problems += shard_problems
        line += count
    total = line - 1
    if total != manifest["samples"]:
        raise PackFormatError(f"{os.path.join(root, MUVAP_MANIFEST)}: key 'samples' is {manifest['samples']}, the "
                              f"shards' {MUVAP_INDEX} files hold {total}")
    return MuvapPack(root=root, manifest=manifest, records=tuple(records), problems=tuple(problems),
                     document_sha256=digests)


def clip_of(sample_id: str) -> str:
    """MuVAP's clip of a sample: its id without the ``:entity`` suffix (the tracks of one AVA/WASD clip share its
    audio, so a second voice must come from another clip)."""
    return sample_id.rsplit(":", 1)[0] if ":" in sample_id else sample_id


#: One int16 step at MuVAP's quantisation scale (``x * 32767``): the rounding each stored value carries.
STATS_ABS_TOL = 1.0 / 32767
#: MuVAP quantises with 32767 and decodes with 32768: a value read back is ``32767 / 32768`` of what was measured.
STATS_REL_TOL = 2.0 / 32768
#: ``speaking_ratio`` is a mean of 0/1 labels, written as a float: only float rounding may separate the two.
RATIO_TOL = 1e-9
#: The statistics compared: MuVAP's record key, and the position in ``int16_statistics``' result.
STAT_FIELDS = (("audio_mean", 0), ("audio_rms", 1), ("audio_peak", 2))
COMMAND = "import muvap"


@dataclass(frozen=True)
class StatMismatch:
    """A statistic MuVAP recorded that the stored data does not reproduce."""

    line: int
    key: str
    path: str
    field: str
    muvap: float
    recomputed: float

    def describe(self) -> str:
        return (f"line {self.line}: key {self.key!r}, file {self.path}: {self.field} is {self.muvap!r} in MuVAP's "
                f"index, {self.recomputed!r} recomputed from the stored data")

    def to_dict(self) -> dict:
        return {"line": self.line, "key": self.key, "path": self.path, "field": self.field, "muvap": self.muvap,
                "recomputed": self.recomputed}


@dataclass(frozen=True)
class ImportSummary:
    """What an import did: the build's summary, and every statistic that did not match."""

    build: BuildSummary
    mismatches: list[StatMismatch] = field(default_factory=list)

    def describe(self) -> str:
        text = self.build.describe()
        if self.mismatches:
            lines = "\n".join(f"  {m.describe()}" for m in self.mismatches)
            text += (f"\n{len(self.mismatches)} statistic(s) of MuVAP's index differ from the stored data (the pack "
                     f"keeps the recomputed values, which the loader uses):\n{lines}")
        else:
            text += "\nevery MuVAP statistic matches the stored data"
        return text


@functools.lru_cache(maxsize=6)
def _array(shard_path: str, name: str, identity: FileIdentity) -> np.ndarray:
    """A shard array mapped read-only from a descriptor of the very file that was checked (never unpickled, never
    reached through a link: ``packer.importers.muvap_files``); the samples of a shard are read one after another."""
    root, shard = os.path.split(shard_path)
    return map_array(root, (shard, f"{name}.npy"), identity)


def _rows(record: MuvapRecord, name: str, offset: int, count: int) -> np.ndarray:
    return _array(record.shard_path, name, record.identity(name))[offset:offset + count]


def plan_record(record: MuvapRecord) -> SamplePlan:
    """A record's size (checked already: nothing to read)."""
    return SamplePlan(line=record.line, key=record.key, num_frames=record.audio_samples,
                      elements={STREAM_AUDIO: record.audio_samples, STREAM_FACES: record.source_frames,
                                STREAM_LABELS: record.source_frames})


def load_record(record: MuvapRecord) -> PackedSample:
    """A record's rows copied out of its shard: faces and labels as stored, the int16 audio bit for bit."""
    faces = np.ascontiguousarray(_rows(record, "faces", record.face_offset, record.source_frames))
    labels = np.ascontiguousarray(_rows(record, "labels", record.face_offset, record.source_frames))
    audio = np.ascontiguousarray(_rows(record, "audio", record.audio_offset, record.audio_samples))
    if len(faces) != record.source_frames or len(labels) != record.source_frames or \
            len(audio) != record.audio_samples:  # checked before: an internal fault if it ever happens
        raise AudioError(record.shard_path, f"{MUVAP_INDEX} entry {record.entry}: the arrays end before the record")
    provenance = {"muvap": {"pack": os.path.abspath(os.path.dirname(record.shard_path)),
                            "shard": os.path.basename(record.shard_path), "entry": record.entry,
                            "dataset": record.dataset, "audio_mean": record.audio_mean,
                            "audio_rms": record.audio_rms, "audio_peak": record.audio_peak,
                            "speaking_ratio": record.speaking_ratio}}
    return PackedSample(
        key=record.key, speakers=(record.key,), line=record.line, orig_sample_rate=ASD_SAMPLE_RATE,
        num_frames=record.audio_samples, provenance=provenance,
        streams={STREAM_AUDIO: [StoredAudio(audio[None, :], 1.0)], STREAM_FACES: [StoredArray(faces)],
                 STREAM_LABELS: [StoredArray(labels)]},
        attrs={"source_fps": record.source_fps, "start_sec": record.start_sec, "clip": clip_of(record.key)})


def _close(muvap: float, ours: float) -> bool:
    return abs(muvap - ours) <= STATS_ABS_TOL + STATS_REL_TOL * abs(ours)


def check_record_data(record: MuvapRecord) -> tuple[list[StatMismatch], str | None]:
    """Recompute a record's statistics from its stored int16 and labels: the mismatches with MuVAP's values, and why
    the record cannot be imported (labels other than 0/1), or ``None``."""
    index = os.path.join(record.shard_path, MUVAP_INDEX)
    labels = _rows(record, "labels", record.face_offset, record.source_frames)
    bad = np.flatnonzero(labels > 1)
    if len(bad):
        return [], (f"entry {record.entry}: label {int(bad[0])} is {int(labels[bad[0]])}; labels must be 0 or 1 "
                    f"({len(bad)} are not)")
    ours = int16_statistics(_rows(record, "audio", record.audio_offset, record.audio_samples), 1.0)
    mismatches = [StatMismatch(record.line, record.key, index, name, getattr(record, name), ours[at])
                  for name, at in STAT_FIELDS if not _close(getattr(record, name), ours[at])]
    ratio = float(np.count_nonzero(labels)) / len(labels)
    if abs(ratio - record.speaking_ratio) > RATIO_TOL:
        mismatches.append(StatMismatch(record.line, record.key, index, "speaking_ratio", record.speaking_ratio, ratio))
    return mismatches, None


def _input_digest(pack: MuvapPack) -> str:
    """The import's input fingerprint: sha256 over ``dataset.json`` and the ``index.json`` of every shard with a
    record to import (what says what the pack holds; the arrays are hashed as they are copied into the new pack),
    from the hashes of the bytes the check parsed (``MuvapPack.document_sha256``): nothing is read twice."""
    digest = hashlib.sha256()
    names = [MUVAP_MANIFEST]
    names += sorted({os.path.join(os.path.basename(r.shard_path), MUVAP_INDEX) for r in pack.records})
    for name in names:
        digest.update(name.encode() + b"\0" + pack.document_sha256[name])
    return digest.hexdigest()


def import_muvap(pack_path: str, options: BuildOptions, *, strict_stats: bool = False) -> ImportSummary:
    """Convert the MuVAP pack at ``pack_path`` into an ``asd`` pack at ``options.out`` (see the module docstring).

    Bad records (wrong types, offsets, timing, labels, duplicate ids) are problems like a bad input line: the
    import fails listing all of them, or with ``options.skip_bad`` leaves them out (``skipped.json``)."""
    if options.sample_rate != ASD_SAMPLE_RATE:
        raise SpeechpackError(f"asd packs are stored at {ASD_SAMPLE_RATE} Hz, got sample_rate {options.sample_rate}")
    pack = read_muvap_pack(pack_path)
    problems = list(pack.problems)
    records, mismatches = [], []
    for record in pack.records:
        found, reason = check_record_data(record)
        mismatches += found
        if reason is None:
            records.append(record)
        else:
            problems.append(LineProblem(record.line, record.key, os.path.join(record.shard_path, MUVAP_INDEX),
                                        reason))
    if strict_stats and mismatches:
        raise BuildError(f"{pack_path}: {len(mismatches)} statistic(s) of MuVAP's index differ from the stored data; "
                         f"nothing was imported (drop --strict-stats to import with the recomputed values)",
                         [LineProblem(m.line, m.key, m.path, f"{m.field}: MuVAP {m.muvap!r}, recomputed "
                                                               f"{m.recomputed!r}") for m in mismatches])
    problems.sort(key=lambda p: p.line)
    summary = run_build(items=records, problems=problems, plan=plan_record, load=load_record, kind=KIND_ASD,
                        input_path=os.path.abspath(pack_path), command=COMMAND,
                        recorded_options={**options.recorded(), "strict_stats": strict_stats}, options=options,
                        input_sha256=_input_digest(pack))
    return ImportSummary(build=summary, mismatches=mismatches)


#: ``speechpack import muvap``'s options as plain data (``packer.adapters.option_spec``; ``cli.py`` makes the
#: command): the rows of an asd build's shared options that apply to a copy (``registry.shared_build_options``),
#: then ``SCALE_OPTIONS``, as ``build`` takes them.
IMPORT_OPTIONS = (
    argument("pack", type=Path(file_okay=False, exists=True)),
    option("--out", required=True, type=Path(file_okay=False), help=OUT_HELP),
    shard_size_option("track"),
    workers_option("Copying"),
    skip_bad_option("Import", "track"),
    option("--strict-stats", is_flag=True,
           help="Fail when MuVAP's recorded audio statistics or speaking ratio differ from the stored data "
                "(default: report every mismatch and keep the recomputed values)."),
    *ENCODING_OPTIONS,
    *FINISHING_OPTIONS,
    *SCALE_OPTIONS,
)


def import_muvap_options(values: dict) -> ImportSummary:
    """``speechpack import muvap``: ``import_muvap`` from the command's values by name (``IMPORT_OPTIONS``); the
    pack is stored at the asd rate, as every asd build is."""
    values = dict(values)
    pack, strict_stats = values.pop("pack"), values.pop("strict_stats")
    return import_muvap(pack, BuildOptions(sample_rate=ASD_SAMPLE_RATE, **values), strict_stats=strict_stats)


__all__ = ["COMMAND", "IMPORT_OPTIONS", "ImportSummary", "MUVAP_ARRAYS", "MUVAP_FORMAT", "MUVAP_INDEX",
           "MUVAP_MANIFEST", "MUVAP_VERSIONS", "MuvapPack", "MuvapRecord", "STATS_ABS_TOL", "STATS_REL_TOL",
           "StatMismatch", "array_header", "check_record_data", "clip_of", "import_muvap", "import_muvap_options",
           "load_record", "plan_record", "read_manifest", "read_muvap_pack", "shard_paths"]
