"""``speechpack validate``: check finished packs file by file, without going through the loader.

Every problem is collected (not just the first) and names the file it was found in.  Checks, per pack:
``dataset.json`` against its schema; every shard file present, of the recorded size and (unless disabled)
hash; ``.npy`` headers against the stream catalogue and the file size; ``index.json`` structure; segment offsets
contiguous and in bounds; unique keys; statistics recomputed from the stored int16 and equal; totals; non-finite
values in the index; samples at int16 full scale (reported as clipping, a warning).  Speaker cues: every file of
``cues/`` listed, of its size and hash, and each bank as ``schemas/cues.py`` specifies it (``.npy`` headers, sorted
unique keys, entries and payloads in bounds, no NaN/Inf in float payloads; ``schemas.cuecheck``).
"""

from __future__ import annotations

from collections.abc import Callable

import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

from loader.tse.cues.bank import read_cues_config
from schemas.cuecheck import bank_files, label_issues, read_bank
from loader.pack import read_manifest
from packer.audio import int16_statistics
from packer.writer import hash_file
from schemas.columns import COLUMNS_DIR, ColumnBuilder
from schemas.cues import (
    CUES_DIR,
    CUES_YAML,
    DATA_NAME,
    LABEL_SPEAKERS_NAME,
    LABEL_VALUES_NAME,
    LABELS_DIR,
    PAYLOAD_DTYPES,
)
from schemas.constants import (
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
from schemas.errors import NpyHeaderError, PackFormatError
from schemas.units import format_bytes
from schemas.npyfile import read_npy_header
from schemas.format import FileEntry, Manifest, StreamSpec, check_shard_index
from schemas.kinds import KIND_SPECS
from packer.validate_asd import asd_issues

#: Tolerance when comparing recomputed statistics: they are exact-integer sums, so only JSON float printing
#: could differ, and Python's repr round-trips; the margin only covers a different numpy's sqrt.
_STAT_RTOL = 1e-9
_PERCENTILES = (0, 5, 50, 95, 100)
#: Checks only one kind has, beyond what ``KIND_SPECS`` describes: ``check(path, manifest, records_by_shard)``
#: yields ``(file, message)`` errors.
_KIND_CHECKS = {KIND_ASD: asd_issues}


@dataclass
class Issue:
    file: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


@dataclass
class PackReport:
    path: str
    errors: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def error(self, file: str, message: str) -> None:
        self.errors.append(Issue(file, message))

    def warn(self, file: str, message: str) -> None:
        self.warnings.append(Issue(file, message))

    def to_dict(self) -> dict:
        return {"path": self.path, "ok": self.ok, "errors": [vars(i) for i in self.errors],
                "warnings": [vars(i) for i in self.warnings], "summary": self.summary}

    def describe(self) -> str:
        lines = [f"{'OK  ' if self.ok else 'FAIL'} {self.path}"]
        s = self.summary
        if "samples" in s:
            lines.append(f"     {s['kind']} pack: {s['samples']} samples, {s['hours']:.3f} h, {s['speakers']} speakers, "
                         f"{s['shards']} shard(s), {format_bytes(s['bytes'])}, {s['sample_rate']} Hz")
        if "duration_s" in s:
            lines.append("     duration s  " + _percentile_row(s["duration_s"]))
        for stream, levels in s.get("levels", {}).items():
            lines.append(f"     {stream:<7} rms dBFS " + _percentile_row(levels["rms_dbfs"]))
            lines.append(f"     {stream:<7} peak dBFS " + _percentile_row(levels["peak_dbfs"]))
            lines.append(f"     {stream:<7} full-scale samples {levels['full_scale_samples']}, "
                         f"rescaled segments {levels['rescaled_segments']}")
        for name, bank in s.get("cues", {}).items():
            lines.append(f"     cue {name}: {bank['representation']}, {bank['keys']} keys, {bank['entries']} entries, "
                         f"{bank['items']} items")
        if s.get("hashes_checked") is False:
            lines.append("     hashes not checked (--no-hash)")
        lines += [f"     error: {issue}" for issue in self.errors]
        lines += [f"     warning: {issue}" for issue in self.warnings]
        return "\n".join(lines)


def _percentile_row(values: dict) -> str:
    return "  ".join(f"p{p}={values[f'p{p}']:.2f}" for p in _PERCENTILES)


def _percentiles(values: np.ndarray) -> dict:
    if values.size == 0:
        return {f"p{p}": float("nan") for p in _PERCENTILES}
    return {f"p{p}": float(np.percentile(values, p)) for p in _PERCENTILES}


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
        _check_files(shard_dir, shard.files, report, check_hashes)
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
    cues = _check_cues(path, manifest, report, check_hashes)
    report.summary = _summary(manifest, durations, levels, check_hashes)
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
    _check_file(skipped_path, expected, report, check_hashes)


def _check_file(file_path: str, expected: FileEntry, report: PackReport, check_hashes: bool) -> None:
    if not os.path.isfile(file_path):
        report.error(file_path, "file missing")
        return
    size = os.path.getsize(file_path)
    if size != expected.size:
        report.error(file_path, f"size {size} bytes, {MANIFEST_NAME} records {expected.size}")
    elif check_hashes:
        actual = hash_file(file_path)
        if actual.sha256 != expected.sha256:
            report.error(file_path, f"sha256 {actual.sha256} does not match {MANIFEST_NAME} ({expected.sha256}): "
                                    f"the file changed after the pack was written")


def _check_files(shard_dir: str, files: dict[str, FileEntry], report: PackReport, check_hashes: bool) -> None:
    for name in sorted(set(os.listdir(shard_dir)) - set(files)):
        report.error(os.path.join(shard_dir, name), f"file not listed in {MANIFEST_NAME}")
    for name, expected in sorted(files.items()):
        _check_file(os.path.join(shard_dir, name), expected, report, check_hashes)


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
    shape, dtype, fortran = header.shape, header.dtype, header.fortran_order
    if dtype.str != spec.dtype or fortran or len(shape) != 1 + len(spec.row_shape) \
            or tuple(shape[1:]) != spec.row_shape:
        report.error(file_path, f"header says {dtype.str} {shape} (fortran={fortran}); the catalogue says "
                                f"{spec.dtype} rows of {list(spec.row_shape)}")
        return None
    expected_size = header.expected_size
    actual_size = os.path.getsize(file_path)
    if actual_size != expected_size:
        report.error(file_path, f"header promises {expected_size} bytes, file has {actual_size} "
                                f"({'truncated' if actual_size < expected_size else 'trailing bytes'})")
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
        _check_file(os.path.join(directory, name), entry, report, check_hashes)
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


#: Elements per chunk when scanning a float payload for NaN/Inf (bounds the temporary mask).
_SCAN_CHUNK = 1 << 24


def _check_cues(path: str, manifest: Manifest, report: PackReport, check_hashes: bool) -> dict:
    """Every file of ``cues/`` listed and intact, then each bank's structure; returns a per-cue summary."""
    directory = os.path.join(path, CUES_DIR)
    if not manifest.cues:
        if os.path.exists(directory):
            report.error(directory, f"cues directory present, but {MANIFEST_NAME} lists no cues")
        return {}
    if not os.path.isdir(directory):
        report.error(directory, "cues directory missing")
        return {}
    on_disk = {os.path.relpath(os.path.join(root, name), directory).replace(os.sep, "/")
               for root, _dirs, names in os.walk(directory) for name in names}
    for name in sorted(on_disk - set(manifest.cues)):
        report.error(os.path.join(directory, name), f"file not listed in {MANIFEST_NAME}")
    for name, entry in sorted(manifest.cues.items()):
        _check_file(os.path.join(directory, name), entry, report, check_hashes)
    try:
        config = read_cues_config(path)
    except PackFormatError as err:
        report.error(os.path.join(directory, CUES_YAML), str(err).split(": ", 1)[-1])
        return {}
    expected = {CUES_YAML} | {f"{spec.name}/{name}" for spec in config.cues for name in bank_files(spec.representation)}
    if config.speaker_label_resource is not None:
        expected |= {f"{LABELS_DIR}/{LABEL_SPEAKERS_NAME}", f"{LABELS_DIR}/{LABEL_VALUES_NAME}"}
    for name in sorted(expected - set(manifest.cues)):
        report.error(os.path.join(directory, name), f"part of the cues, but not listed in {MANIFEST_NAME}")
    for name in sorted(set(manifest.cues) - expected):
        report.error(os.path.join(directory, name), f"listed in {MANIFEST_NAME}, but no part of the cues.yaml's banks")
    summary = {}
    for spec in config.cues:
        bank_dir = os.path.join(directory, spec.name)
        files, issues = read_bank(bank_dir, spec, manifest.sample_rate)
        for file_path, message in issues:
            report.error(file_path, message)
        if files is None:
            continue
        summary[spec.name] = {"representation": spec.representation,
                              **{key: files.meta.get(key) for key in ("keys", "entries", "items")}}
        if not issues and PAYLOAD_DTYPES[spec.representation].kind == "f":
            _check_finite(os.path.join(bank_dir, DATA_NAME), report)
    if config.speaker_label_resource is not None:
        labels_dir = os.path.join(directory, LABELS_DIR)
        try:
            speakers, labels = (np.load(os.path.join(labels_dir, name), allow_pickle=False)
                                for name in (LABEL_SPEAKERS_NAME, LABEL_VALUES_NAME))
        except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError, TokenError...
            report.error(labels_dir, f"cannot read the speaker labels ({err})")
        else:
            for file_path, message in label_issues(labels_dir, speakers, labels):
                report.error(file_path, message)
    return summary


def _check_finite(file_path: str, report: PackReport) -> None:
    data = np.load(file_path, mmap_mode="r", allow_pickle=False).reshape(-1)
    bad = sum(int(data.size - np.count_nonzero(np.isfinite(data[start:start + _SCAN_CHUNK])))
              for start in range(0, data.size, _SCAN_CHUNK))
    if bad:
        report.error(file_path, f"{bad} NaN/Inf value(s) in a float cue payload")


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


def _dbfs(values: list[float]) -> np.ndarray:
    return 20 * np.log10(np.maximum(np.asarray(values, dtype=np.float64), 1e-10))


def _summary(manifest: Manifest, durations: list[float], levels: dict, check_hashes: bool) -> dict:
    return {
        "kind": manifest.kind,
        "sample_rate": manifest.sample_rate,
        "samples": manifest.totals["samples"],
        "hours": manifest.totals["hours"],
        "speakers": manifest.totals["speakers"],
        "shards": len(manifest.shards),
        "bytes": manifest.totals["bytes"],
        "skipped": manifest.skipped["count"],
        "hashes_checked": check_hashes,
        "duration_s": _percentiles(np.asarray(durations)),
        "levels": {
            name: {"rms_dbfs": _percentiles(_dbfs(lv["rms"])), "peak_dbfs": _percentiles(_dbfs(lv["peak"])),
                   "full_scale_samples": lv["full_scale"], "rescaled_segments": lv["rescaled"]}
            for name, lv in levels.items()
        },
    }
