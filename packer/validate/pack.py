"""``speechpack validate``: check finished packs file by file, without going through the loader.

Every problem is collected (not just the first) and names the file it was found in.  Checks, per pack:
``dataset.json`` against its schema; every shard file present, of the recorded size and (unless disabled)
hash; ``.npy`` headers against the stream catalogue and the file size; ``index.json`` structure; segment offsets
contiguous and in bounds; unique keys; statistics recomputed from the stored int16 and equal; totals; non-finite
values in the index; samples at int16 full scale (reported as clipping, a warning).  Speaker cues: every file of
``cues/`` listed, of its size and hash, and each bank as ``schemas/cues.py`` specifies it (``.npy`` headers, sorted
unique keys, entries and payloads in bounds, no NaN/Inf in float payloads; ``packer.validate.cues``).  The report
itself (``PackReport``, its summary) is ``packer.validate.report``.
"""

from __future__ import annotations

from collections.abc import Callable

import json
import math
import os

import numpy as np

from speechpack.loader.pack import read_manifest
from speechpack.packer.audio.store import int16_statistics
from speechpack.schemas.columns import COLUMNS_DIR, ColumnBuilder
from speechpack.schemas.constants import (
    AUDIO_DTYPE,
    KIND_ASD,
    MANIFEST_NAME,
    SHARD_DIR_PREFIX,
    SHARD_INDEX_NAME,
    SKIPPED_NAME,
    STREAM_TYPES,
    TEMP_PREFIX,
    stream_file_name,
)
from speechpack.schemas.errors import NpyHeaderError, PackFormatError
from speechpack.schemas.npyfile import read_npy_header
from speechpack.schemas.format import FileEntry, Manifest, StreamSpec, check_shard_index
from speechpack.schemas.kinds import KIND_SPECS
from speechpack.packer.validate.report import PackReport, pack_summary
from speechpack.packer.validate.cues import check_cues
from speechpack.packer.validate.files import check_file, check_files, stream_header_problem
from speechpack.packer.validate.asd import asd_issues

#: Tolerance when comparing recomputed statistics: they are exact-integer sums, so only JSON float printing
#: could differ, and Python's repr round-trips; the margin only covers a different numpy's sqrt.
_STAT_RTOL = 1e-9
#: Checks only one kind has, beyond what ``KIND_SPECS`` describes: ``check(path, manifest, records_by_shard)``
#: yields ``(file, message)`` errors.
_KIND_CHECKS = {KIND_ASD: asd_issues}


def validate_pack(path: str, check_hashes: bool = True) -> PackReport:
    """Run every check on one pack and return what was found (never raises for a bad pack)."""
    report = PackReport(path)
    try:
        manifest = read_manifest(path)
    except PackFormatError as err:
        report.error(os.path.join(path, MANIFEST_NAME), _manifest_problem(path, str(err)))
        return report
    _check_directory_entries(path, manifest, report)
    _check_skipped(path, manifest, report, check_hashes)
    keys: dict[str, str] = {}
    speakers: set[str] = set()
    durations: list[float] = []
    frames = 0
    levels = {name: {"rms": [], "peak": [], "full_scale": 0, "rescaled": 0} for name in _stream_names(manifest)
              if STREAM_TYPES[name].audio}
    extra = KIND_SPECS[manifest.kind].totals
    extra_totals = extra() if extra is not None else None
    own_checks = _KIND_CHECKS.get(manifest.kind)
    columns: ColumnBuilder | None = ColumnBuilder(manifest.kind)  # None once a shard index is unreadable
    records_by_shard: dict[str, list[dict]] = {}  # what the kind's own checks read
    for shard_id, shard in enumerate(manifest.shards):
        shard_dir = os.path.join(path, shard.directory)
        if not os.path.isdir(shard_dir):
            report.error(shard_dir, "shard directory missing")
            columns = None
            continue
        check_files(shard_dir, shard.files, report, check_hashes)
        records = _read_index(shard_dir, manifest, shard.samples, report)
        arrays = {spec.name: _open_stream(shard_dir, spec, report) for spec in manifest.streams}
        if records is None:
            columns = None
            continue
        if own_checks is not None:
            records_by_shard[shard.directory] = records
        frames += check_shard_records(manifest, shard_id, shard.directory, records, arrays, levels, shard_dir,
                                      lambda name, shard_dir=shard_dir: os.path.join(shard_dir, name),
                                      (keys, speakers, durations), columns, extra_totals, report)
    if extra_totals is not None:
        recorded = {key: getattr(manifest, key) for key in KIND_SPECS[manifest.kind].manifest_keys}
        for message in extra_totals.issues(recorded, manifest.sample_rate):
            report.error(os.path.join(path, MANIFEST_NAME), message)
    if own_checks is not None:
        for file, message in own_checks(path, manifest, records_by_shard):
            report.error(file, message)
    _check_columns(path, manifest, columns, report, check_hashes)
    _check_totals(path, manifest, len(keys), speakers, frames, report)
    cues = check_cues(path, manifest, report, check_hashes)
    report.summary = pack_summary(manifest, durations, levels, check_hashes)
    if cues:
        report.summary["cues"] = cues
    return report



def check_shard_records(manifest: Manifest, shard_id: int, directory: str, records: list[dict], arrays: dict,
                        levels: dict, shard_dir: str, name: Callable[[str], str],
                        tally: tuple[dict, set, list], columns: ColumnBuilder | None, extra_totals,
                        report: PackReport) -> int:
    """One shard's index records and streams checked, for a pack on disk and one on an object store alike
    (``name`` turns a file of the shard into the path a message shows); ``tally`` is the pack's (keys by shard,
    speakers, durations) so far.  Returns the shard's frame count."""
    keys, speakers, durations = tally
    frames = 0
    for record in records:
        if columns is not None:
            columns.add(shard_id, record)
        at = f"{name(SHARD_INDEX_NAME)} key {record['key']!r}"
        if record["key"] in keys:
            report.error(at, f"duplicate key (also in {keys[record['key']]})")
        keys[record["key"]] = directory
        speakers.update(record["speakers"])
        durations.append(record["num_frames"] / manifest.sample_rate)
        frames += record["num_frames"]
        _check_record_shape(record, manifest, at, report)
    for spec in manifest.streams:
        if STREAM_TYPES[spec.name].audio:
            _check_stream(shard_dir, spec, records, arrays[spec.name], levels[spec.name], report)
        else:
            _check_data_stream(shard_dir, spec, records, arrays[spec.name], report)
    if extra_totals is not None:
        extra_totals.add(records, arrays.get, lambda record, stream, message: report.error(
            f"{name(stream_file_name(stream))} key {record['key']!r}", message))
    return frames

def _manifest_problem(path: str, message: str) -> str:
    """The manifest reader's message without the path the report already names, keeping the field
    (``shards[0].directory: ...``)."""
    at = os.path.join(path, MANIFEST_NAME)
    for prefix in (f"{at}: ", f"{at}.", f"{path}: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def _stream_names(manifest: Manifest) -> list[str]:
    return [spec.name for spec in manifest.streams]


def _check_directory_entries(path: str, manifest: Manifest, report: PackReport) -> None:
    listed = {shard.directory for shard in manifest.shards}
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if name.startswith(TEMP_PREFIX):
            report.warn(full, "leftover of an interrupted write (safe to delete)")
        elif name.startswith(SHARD_DIR_PREFIX) and name not in listed:
            report.error(full, f"shard directory not listed in {MANIFEST_NAME}")


def _check_skipped(path: str, manifest: Manifest, report: PackReport, check_hashes: bool) -> None:
    entry = manifest.skipped.get("file")
    skipped_path = os.path.join(path, SKIPPED_NAME)
    if manifest.skipped["count"] and entry is None:
        report.error(os.path.join(path, MANIFEST_NAME), "skipped.count > 0 but no skipped file recorded")
    if entry is None:
        return
    expected = FileEntry(size=entry.get("size", -1), sha256=entry.get("sha256", ""))
    check_file(skipped_path, expected, report, check_hashes)


def _read_index(shard_dir: str, manifest: Manifest, expected_samples: int, report: PackReport) -> list[dict] | None:
    index_path = os.path.join(shard_dir, SHARD_INDEX_NAME)
    try:
        with open(index_path, encoding="utf-8") as fp:
            raw = json.load(fp)
        records = check_shard_index(raw, manifest.kind, index_path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, PackFormatError) as err:
        report.error(index_path, str(err).replace(f"{index_path}: ", "").replace(index_path, "index"))
        return None
    if raw["shard"] != os.path.basename(shard_dir):
        report.error(index_path, f"names shard {raw['shard']!r}")
    if len(records) != expected_samples:
        report.error(index_path, f"holds {len(records)} samples, {MANIFEST_NAME} says {expected_samples}")
    return records


def _open_stream(shard_dir: str, spec: StreamSpec, report: PackReport) -> np.ndarray | None:
    """Check the ``.npy`` header against the catalogue and the file size, then map it."""
    file_path = os.path.join(shard_dir, spec.file)
    try:
        header = read_npy_header(file_path)
    except NpyHeaderError as err:
        report.error(file_path, f"unreadable .npy header ({err.reason})")
        return None
    problem = stream_header_problem(header, spec, os.path.getsize(file_path))
    if problem is not None:
        report.error(file_path, problem)
        return None
    return np.load(file_path, mmap_mode="r", allow_pickle=False)


def _check_record_shape(record: dict, manifest: Manifest, at: str, report: PackReport) -> None:
    """The kind's layout (``KindSpec.shape_issues``: speakers, segments per stream, mono streams, equal and
    non-empty rows), then what every audio segment shares: the sample's length, finite statistics, a positive
    scale."""
    for message in KIND_SPECS[manifest.kind].shape_issues(record):
        report.error(at, message)
    for name, segments in record["streams"].items():
        if not STREAM_TYPES[name].audio:
            continue
        for seg in segments:
            if seg["length"] != record["num_frames"]:
                report.error(at, f"{name} segment has {seg['length']} samples, num_frames is {record['num_frames']}")
            bad = [k for k in ("scale", "mean", "rms", "peak") if not math.isfinite(seg[k])]
            if bad or seg["scale"] <= 0:
                report.error(at, f"{name} segment has non-finite or invalid {', '.join(bad) or 'scale'}")
    expected_duration = record["num_frames"] / manifest.sample_rate
    if not math.isclose(record["duration"], expected_duration, rel_tol=1e-12):
        report.error(at, f"duration {record['duration']} != num_frames / sample_rate = {expected_duration}")


def _check_data_stream(shard_dir: str, spec: StreamSpec, records: list[dict], array: np.ndarray | None,
                       report: PackReport) -> None:
    """Rows of a data stream (faces, labels, text): contiguous and in bounds."""
    file_path = os.path.join(shard_dir, spec.file)
    position = 0
    for record in records:
        for slot, seg in enumerate(record["streams"][spec.name]):
            if seg["offset"] != position:
                report.error(f"{file_path} key {record['key']!r} {spec.name}[{slot}]",
                             f"offset {seg['offset']}, expected {position} (segments must be contiguous)")
            position = seg["offset"] + seg["length"]
    if array is not None and position != array.shape[0]:
        report.error(file_path, f"index covers {position} rows, the file holds {array.shape[0]}")


def _check_stream(shard_dir: str, spec: StreamSpec, records: list[dict], array: np.ndarray | None,
                  levels: dict, report: PackReport) -> None:
    """Offsets contiguous and in bounds; statistics recomputed from the stored data and equal."""
    file_path = os.path.join(shard_dir, spec.file)
    position = 0
    for record in records:
        for slot, seg in enumerate(record["streams"][spec.name]):
            at = f"{file_path} key {record['key']!r} {spec.name}[{slot}]"
            size = seg["channels"] * seg["length"]
            if seg["offset"] != position:
                report.error(at, f"offset {seg['offset']}, expected {position} (segments must be contiguous)")
            position = seg["offset"] + size
            if array is None:
                continue
            if position > array.shape[0]:
                report.error(at, f"ends at element {position}, the file holds {array.shape[0]}")
                continue
            stored = array[seg["offset"]:position]
            mean, rms, peak = int16_statistics(stored, seg["scale"])
            for name, value in (("mean", mean), ("rms", rms), ("peak", peak)):
                if not math.isclose(value, seg[name], rel_tol=_STAT_RTOL, abs_tol=1e-12):
                    report.error(at, f"{name} recorded {seg[name]!r}, recomputed {value!r}")
            levels["rms"].append(rms)
            levels["peak"].append(peak)
            if seg["scale"] != 1.0:
                levels["rescaled"] += 1
            elif stored.size:
                clipped = int(np.count_nonzero((stored == np.iinfo(AUDIO_DTYPE).max)
                                               | (stored == np.iinfo(AUDIO_DTYPE).min)))
                if clipped:
                    levels["full_scale"] += clipped
                    report.warn(at, f"{clipped} sample(s) at int16 full scale: the input itself was clipped")
    if array is not None and position != array.shape[0]:
        report.error(file_path, f"index covers {position} elements, the file holds {array.shape[0]}")


def _check_columns(path: str, manifest: Manifest, expected: ColumnBuilder | None, report: PackReport,
                   check_hashes: bool) -> None:
    """The column files are present, intact, and say exactly what the shard indexes say."""
    directory = os.path.join(path, COLUMNS_DIR)
    if not os.path.isdir(directory):
        report.error(directory, "columns directory missing")
        return
    for name in sorted(set(os.listdir(directory)) - set(manifest.columns)):
        report.error(os.path.join(directory, name), f"file not listed in {MANIFEST_NAME}")
    for name, entry in sorted(manifest.columns.items()):
        check_file(os.path.join(directory, name), entry, report, check_hashes)
    if expected is None:
        return  # a shard index could not be read; that error is already reported
    for name, array in expected.arrays().items():
        file_path = os.path.join(directory, name)
        try:
            stored = np.load(file_path, allow_pickle=False)
        except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError, TokenError...
            report.error(file_path, f"cannot read column ({err})")
            continue
        if stored.dtype != array.dtype or stored.shape != array.shape or not np.array_equal(stored, array):
            report.error(file_path, f"column disagrees with the shard indexes ({stored.dtype} {stored.shape} stored, "
                                    f"{array.dtype} {array.shape} from index.json)")


def _check_totals(path: str, manifest: Manifest, samples: int, speakers: set[str], frames: int,
                  report: PackReport) -> None:
    at = os.path.join(path, MANIFEST_NAME)
    totals = manifest.totals
    if totals["samples"] != samples:
        report.error(at, f"totals.samples {totals['samples']}, the shards hold {samples}")
    if totals["speakers"] != len(speakers):
        report.error(at, f"totals.speakers {totals['speakers']}, the shards name {len(speakers)}")
    hours = frames / manifest.sample_rate / 3600.0
    if not math.isclose(totals["hours"], hours, rel_tol=1e-9, abs_tol=1e-12):
        report.error(at, f"totals.hours {totals['hours']}, the shards hold {hours}")
    recorded_bytes = sum(entry.size for shard in manifest.shards for entry in shard.files.values())
    if totals["bytes"] != recorded_bytes:
        report.error(at, f"totals.bytes {totals['bytes']}, the shard files add up to {recorded_bytes}")
