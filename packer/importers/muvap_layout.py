"""Reading an existing MuVAP ASD pack (``muvap-asd-mmap``, version 4) as untrusted input, without decoding media.

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
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
from dataclasses import dataclass, field

import numpy as np

from speechpack.packer.importers.muvap_files import FileIdentity, array_identity, check_directory, read_file
from speechpack.schemas.constants import ASD_SAMPLE_RATE, FACE_SHAPE, SHARD_DIR_PREFIX, shard_dir_name
from speechpack.schemas.documents import parse_json
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.names import name_problem
from speechpack.schemas.timebase import audio_sample_count, model_frame_count
from speechpack.schemas.line_problems import LineProblem

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


__all__ = ["MUVAP_ARRAYS", "MUVAP_FORMAT", "MUVAP_INDEX", "MUVAP_MANIFEST", "MUVAP_VERSIONS", "MuvapPack",
           "MuvapRecord", "array_header", "clip_of", "read_manifest", "read_muvap_pack", "shard_paths"]
