"""``speechpack validate``: check finished packs file by file, without going through the loader; one implementation
for a pack in a directory and one on object storage (``s3://bucket/packs/train``), both read through
``loader.pack.PackFiles`` (how each file's bytes arrive, and what only a directory has: ``packer.validate.files``).

Every problem is collected (not just the first) and names the file (or object URL) it was found in.  Checks, per
pack: ``dataset.json`` against its schema; every shard file present, of the recorded size and (unless disabled)
hash; ``.npy`` headers against the stream catalogue and the file size; ``index.json`` structure; segment offsets
contiguous and in bounds; unique keys; statistics recomputed from the stored int16 and equal; totals; non-finite
values in the index; samples at int16 full scale (reported as clipping, a warning).  A compressed stream (format
1.4) is decoded segment by segment, every block (``media.codecs``: a block that does not decode to its frames is
an error naming the segment and block), and its statistics compared on the decoded int16; a pack with digests
has every piece's blake2b-128 recomputed and compared with ``digests.npy`` (naming shard, stream, segment and
block).  Speaker cues: every file of
``cues/`` listed, of its size and hash, and each bank as ``schemas/cue_banks.py`` specifies it (``.npy`` headers,
sorted unique keys, entries and payloads in bounds, no NaN/Inf in float payloads; ``check_cues``, run on the pack's
directory or on the cue objects of a pack on object storage where they lie: ``packer.validate.files.CueFiles``);
a compressed waveform bank has every block checked against its digest and decoded to its item's frames, an error
naming the bank's ``data.npy``, item and block otherwise.
The report itself (``PackReport``, its summary) is ``packer.validate.report``.
"""

from __future__ import annotations

import math

import numpy as np
from tqdm import tqdm

from speechpack.loader.pack import DirectoryPackFiles, pack_files
from speechpack.loader.pack.blocks import BlockTable
from speechpack.media.codecs import CorruptBlock, codec, decode_run
from speechpack.packer.audio.store import int16_statistics
from speechpack.packer.validate.asd import asd_issues
from speechpack.packer.validate.files import CheckedFiles, CueFiles, checked_files
from speechpack.packer.validate.report import PackReport, ValidationReport, pack_summary
from speechpack.schemas.columns import ColumnBuilder
from speechpack.schemas.constants import (
    AUDIO_DTYPE,
    COLUMNS_DIR,
    DIGESTS_NAME,
    KIND_ASD,
    MANIFEST_NAME,
    SHARD_INDEX_NAME,
    SKIPPED_NAME,
    STREAM_LABELS,
    STREAM_TYPES,
    TOOL_NAME,
    stream_file_name,
)
from speechpack.schemas.cue_banks import BLOCKS_NAME, DATA_NAME, ITEMS_NAME, META_NAME, bank_codec, read_bank
from speechpack.schemas.cue_banks import DIGESTS_NAME as CUE_DIGESTS_NAME
from speechpack.schemas.cues import CUES_YAML, LABEL_SPEAKERS_NAME, LABEL_VALUES_NAME, LABELS_DIR, label_issues
from speechpack.schemas.digests import check_digests_header, piece_digest
from speechpack.schemas.documents import parse_json
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import Manifest, StreamSpec, check_shard_index
from speechpack.schemas.kinds import KIND_SPECS

#: Tolerance when comparing recomputed statistics: they are exact-integer sums, so only JSON float printing
#: could differ, and Python's repr round-trips; the margin only covers a different numpy's sqrt.
_STAT_RTOL = 1e-9
#: Checks only one kind has, beyond what ``KIND_SPECS`` describes: ``check(location, manifest, records_by_shard,
#: labels_of=...)`` yields ``(file, message)`` errors.
_KIND_CHECKS = {KIND_ASD: asd_issues}


def validate_pack(location: str, check_hashes: bool = True, endpoint_url: str | None = None,
                  progress: bool = False) -> PackReport:
    """Run every check on one pack, a directory or an object-store URL (``s3://bucket/packs/train``: nothing is
    copied to disk), and return what was found.  Never raises for a bad pack; a store that cannot be reached raises
    ``ObjectStoreError``.  With ``progress``, a bar over its shards on stderr (hashing a large pack takes minutes,
    as building and copying it do)."""
    files = pack_files(location, endpoint_url)
    report = PackReport(files.location)
    at = files.where(MANIFEST_NAME)
    listing = None
    if not isinstance(files, DirectoryPackFiles):
        listing = files.listing()
        if MANIFEST_NAME not in listing:
            report.error(at, f"missing: not a pack (no {MANIFEST_NAME}; an unfinished upload leaves none)")
            return report
    try:
        manifest = files.read_manifest().manifest
    except PackFormatError as err:
        report.error(at, _manifest_problem(at, files.location, str(err)))
        return report
    checked = checked_files(files, manifest, report, check_hashes, listing)
    checked.check_layout()
    if manifest.skipped.get("file") is not None:
        checked.check(SKIPPED_NAME)
    elif manifest.skipped["count"]:
        report.error(at, "skipped.count > 0 but no skipped file recorded")
    keys: dict[str, str] = {}
    speakers: set[str] = set()
    durations: list[float] = []
    frames = 0
    levels = {spec.name: {"rms": [], "peak": [], "full_scale": 0, "rescaled": 0} for spec in manifest.streams
              if STREAM_TYPES[spec.name].audio}
    extra = KIND_SPECS[manifest.kind].totals
    extra_totals = extra() if extra is not None else None
    own_checks = _KIND_CHECKS.get(manifest.kind)
    # None once a shard index is unreadable
    columns: ColumnBuilder | None = ColumnBuilder(manifest.kind, manifest.block_frames)
    records_by_shard: dict[str, list[dict]] = {}  # what the kind's own checks read
    labels_by_shard: dict[str, np.ndarray | None] = {}
    shards = tqdm(manifest.shards, desc=f"{TOOL_NAME} validate {files.location}", unit="shard", disable=not progress)
    for shard_id, shard in enumerate(shards):
        if not checked.check_shard(shard.directory):
            columns = None
            continue
        records = _read_index(checked, shard.directory, manifest, shard.samples)
        arrays = {spec.name: checked.stream(f"{shard.directory}/{spec.file}", spec) for spec in manifest.streams}
        if records is None:
            columns = None
            checked.done_with_shard()
            continue
        if own_checks is not None:
            records_by_shard[shard.directory] = records
            labels_by_shard[checked.where(shard.directory)] = arrays.get(STREAM_LABELS)
        frames += _check_shard_records(checked, shard_id, shard.directory, records, arrays, levels,
                                       (keys, speakers, durations), columns, extra_totals)
        checked.done_with_shard()
    if extra_totals is not None:
        recorded = {key: getattr(manifest, key) for key in KIND_SPECS[manifest.kind].manifest_keys}
        for message in extra_totals.issues(recorded, manifest.sample_rate):
            report.error(at, message)
    if own_checks is not None:
        for file, message in own_checks(files.location, manifest, records_by_shard,
                                        labels_of=lambda shard_dir: labels_by_shard.get(shard_dir)):
            report.error(file, message)
    _check_columns(checked, columns)
    _check_totals(at, manifest, len(keys), speakers, frames, report)
    cues = check_cues(checked.cue_files(), manifest, report)
    report.summary = pack_summary(manifest, durations, levels, check_hashes)
    if cues:
        report.summary["cues"] = cues
    return report


def _check_shard_records(checked: CheckedFiles, shard_id: int, directory: str, records: list[dict], arrays: dict,
                         levels: dict, tally: tuple[dict, set, list], columns: ColumnBuilder | None,
                         extra_totals) -> int:
    """One shard's index records and streams checked; ``tally`` is the pack's (keys by shard, speakers, durations)
    so far.  Returns the shard's frame count."""
    manifest, report = checked.manifest, checked.report
    keys, speakers, durations = tally
    frames = 0
    index_at = checked.where(f"{directory}/{SHARD_INDEX_NAME}")
    for record in records:
        if columns is not None:
            columns.add(shard_id, record)
        at = f"{index_at} key {record['key']!r}"
        if record["key"] in keys:
            report.error(at, f"duplicate key (also in {keys[record['key']]})")
        keys[record["key"]] = directory
        speakers.update(record["speakers"])
        durations.append(record["num_frames"] / manifest.sample_rate)
        frames += record["num_frames"]
        _check_record_shape(record, manifest, at, report)
    for spec in manifest.streams:
        file_path = checked.where(f"{directory}/{spec.file}")
        if STREAM_TYPES[spec.name].audio:
            _check_stream(file_path, spec, manifest.sample_rate, records, arrays[spec.name], levels[spec.name],
                          report)
        else:
            _check_data_stream(file_path, spec, records, arrays[spec.name], report)
    if manifest.digests is not None:
        _check_digests(checked, directory, records, arrays)
    if extra_totals is not None:
        extra_totals.add(records, arrays.get, lambda record, stream, message: report.error(
            f"{checked.where(f'{directory}/{stream_file_name(stream)}')} key {record['key']!r}", message))
    return frames


def _manifest_problem(at: str, path: str, message: str) -> str:
    """The manifest reader's message without the path the report already names, keeping the field
    (``shards[0].directory: ...``)."""
    for prefix in (f"{at}: ", f"{at}.", f"{path}: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def _read_index(checked: CheckedFiles, directory: str, manifest: Manifest, expected_samples: int) -> list[dict] | None:
    rel = f"{directory}/{SHARD_INDEX_NAME}"
    index_path = checked.where(rel)
    report = checked.report
    try:
        data = checked.read(rel)
        if data is None:
            return None  # missing or unreadable: reported
        raw = parse_json(data, index_path, error=PackFormatError)
        records = check_shard_index(raw, manifest.kind, index_path, manifest.block_frames)
    except (OSError, PackFormatError) as err:
        report.error(index_path, str(err).replace(f"{index_path}: ", "").replace(index_path, "index"))
        return None
    if raw["shard"] != directory:
        report.error(index_path, f"names shard {raw['shard']!r}")
    if len(records) != expected_samples:
        report.error(index_path, f"holds {len(records)} samples, {MANIFEST_NAME} says {expected_samples}")
    return records


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


def _check_data_stream(file_path: str, spec: StreamSpec, records: list[dict], array: np.ndarray | None,
                       report: PackReport) -> None:
    """Rows of a data stream (faces, labels, text): contiguous and in bounds."""
    position = 0
    for record in records:
        for slot, seg in enumerate(record["streams"][spec.name]):
            if seg["offset"] != position:
                report.error(f"{file_path} key {record['key']!r} {spec.name}[{slot}]",
                             f"offset {seg['offset']}, expected {position} (segments must be contiguous)")
            position = seg["offset"] + seg["length"]
    if array is not None and position != array.shape[0]:
        report.error(file_path, f"index covers {position} rows, the file holds {array.shape[0]}")


def _check_stream(file_path: str, spec: StreamSpec, sample_rate: int, records: list[dict],
                  array: np.ndarray | None, levels: dict, report: PackReport) -> None:
    """Offsets contiguous and in bounds (elements of int16, or bytes of a compressed stream's blocks); statistics
    recomputed from the samples a reader gets (stored, or every block decoded to exactly its frames: format 1.4)
    and equal."""
    compressed = spec.codec is not None
    unit = "byte" if compressed else "element"
    position = 0
    for record in records:
        for slot, seg in enumerate(record["streams"][spec.name]):
            at = f"{file_path} key {record['key']!r} {spec.name}[{slot}]"
            size = sum(seg["blocks"]) if compressed else seg["channels"] * seg["length"]
            if seg["offset"] != position:
                report.error(at, f"offset {seg['offset']}, expected {position} (segments must be contiguous)")
            position = seg["offset"] + size
            if array is None:
                continue
            if position > array.shape[0]:
                report.error(at, f"ends at {unit} {position}, the file holds {array.shape[0]}")
                continue
            if not compressed:
                _check_levels(at, seg, array[seg["offset"]:position], levels, report)
                continue
            starts = seg["offset"] + np.concatenate([[0], np.cumsum(seg["blocks"][:-1], dtype=np.int64)])
            pieces = [array[int(start):int(start) + length] for start, length in zip(starts, seg["blocks"])]
            try:
                decoded = decode_run(spec.codec, pieces, sample_rate, seg["channels"], seg["length"],
                                     spec.block_frames)
            except CorruptBlock as err:
                report.error(at, f"{spec.codec} {err}")
                continue
            # a lossy codec's overshoot is no clipping of the input
            _check_levels(at, seg, decoded, levels, report, f" from the decoded {spec.codec} blocks",
                          count_clipping=codec(spec.codec).lossless)
    if array is not None and position != array.shape[0]:
        report.error(file_path, f"index covers {position} {unit}s, the file holds {array.shape[0]}")


def _check_levels(at: str, seg: dict, samples: np.ndarray, levels: dict, report: PackReport, source: str = "",
                  count_clipping: bool = True) -> None:
    """A segment's recorded statistics against those recomputed from its int16 ``samples`` (stored, or decoded:
    ``source`` says so in the message), and its levels counted for the report (full-scale samples only where
    ``count_clipping``)."""
    mean, rms, peak = int16_statistics(samples, seg["scale"])
    for name, value in (("mean", mean), ("rms", rms), ("peak", peak)):
        if not math.isclose(value, seg[name], rel_tol=_STAT_RTOL, abs_tol=1e-12):
            report.error(at, f"{name} recorded {seg[name]!r}, recomputed {value!r}{source}")
    levels["rms"].append(rms)
    levels["peak"].append(peak)
    if seg["scale"] != 1.0:
        levels["rescaled"] += 1
    elif samples.size and count_clipping:
        clipped = int(np.count_nonzero((samples == np.iinfo(AUDIO_DTYPE).max)
                                       | (samples == np.iinfo(AUDIO_DTYPE).min)))
        if clipped:
            levels["full_scale"] += clipped
            report.warn(at, f"{clipped} sample(s) at int16 full scale: the input itself was clipped")


def _check_digests(checked: CheckedFiles, directory: str, records: list[dict], arrays: dict) -> None:
    """``digests.npy`` (format 1.4) holds the blake2b-128 of every piece of the shard, in catalogue then storage
    order: each one recomputed from the stream files and compared."""
    manifest, report = checked.manifest, checked.report
    rel = f"{directory}/{DIGESTS_NAME}"
    found = checked.npy_header(rel)
    if found is None:
        return
    header, size = found
    pieces = [(spec, record, slot, seg, block)
              for spec in manifest.streams for record in records
              for slot, seg in enumerate(record["streams"][spec.name])
              for block in (range(len(seg["blocks"])) if spec.codec is not None else (None,))]
    try:
        check_digests_header(header, len(pieces), checked.where(rel))
    except PackFormatError as err:
        report.error(checked.where(rel), str(err).split(": ", 1)[-1])
        return
    if size != header.expected_size:
        report.error(checked.where(rel), f"header promises {header.expected_size} bytes, the file has {size}")
        return
    stored = checked.array(rel, header)
    for row, (spec, record, slot, seg, block) in enumerate(pieces):
        array = arrays.get(spec.name)
        if array is None:
            continue  # the stream file itself is reported
        start, stop = _piece_span(spec, seg, block)
        if stop > array.shape[0]:
            continue  # reported by the stream's own check
        if piece_digest(np.ascontiguousarray(array[start:stop])) != bytes(stored[row]):
            which = f" block {block}" if block is not None else ""
            report.error(f"{checked.where(f'{directory}/{spec.file}')} key {record['key']!r} {spec.name}[{slot}]"
                         f"{which}", f"bytes differ from their digest ({DIGESTS_NAME} row {row}): changed or "
                                     f"corrupted since the pack was written")


def _piece_span(spec: StreamSpec, seg: dict, block: int | None) -> tuple[int, int]:
    """Rows ``[start, stop)`` of the stream file that hold one piece: a block, or the whole segment."""
    if block is not None:
        start = seg["offset"] + sum(seg["blocks"][:block])
        return start, start + seg["blocks"][block]
    rows = seg["channels"] * seg["length"] if STREAM_TYPES[spec.name].audio else seg["length"]
    return seg["offset"], seg["offset"] + rows


def _check_columns(checked: CheckedFiles, expected: ColumnBuilder | None) -> None:
    """The column files are present, intact, and say exactly what the shard indexes say."""
    if not checked.check_columns() or expected is None:
        return  # no columns to compare, or a shard index could not be read: already reported
    manifest, report = checked.manifest, checked.report
    for name, array in expected.arrays().items():
        file_path = checked.where(f"{COLUMNS_DIR}/{name}")
        try:
            stored = checked.load_column(f"{COLUMNS_DIR}/{name}")
        except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError, TokenError...
            report.error(file_path, f"cannot read column ({err})")
            continue
        if stored is None:  # an object not fetched (reported), or one the manifest does not list
            if name not in manifest.columns:
                report.error(file_path, f"column missing from {MANIFEST_NAME}")
            continue
        if stored.dtype != array.dtype or stored.shape != array.shape or not np.array_equal(stored, array):
            report.error(file_path, f"column disagrees with the shard indexes ({stored.dtype} {stored.shape} stored, "
                                    f"{array.dtype} {array.shape} from index.json)")


def _check_totals(at: str, manifest: Manifest, samples: int, speakers: set[str], frames: int,
                  report: PackReport) -> None:
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


def check_cues(cues: CueFiles, manifest: Manifest, report: PackReport) -> dict:
    """Every file of ``cues/`` listed and intact, then each bank's structure; returns a per-cue summary."""
    if not cues.check_layout(manifest):
        return {}
    for name in sorted(manifest.cues):
        cues.check(name)
    try:
        config = cues.config()
    except PackFormatError as err:
        report.error(cues.where(CUES_YAML), str(err).split(": ", 1)[-1])
        return {}
    expected = {CUES_YAML} | {f"{spec.name}/{name}" for spec in config.cues
                              for name in spec.representation_spec.files_of(_bank_meta(cues, spec.name))}
    if config.speaker_label_resource is not None:
        expected |= {f"{LABELS_DIR}/{LABEL_SPEAKERS_NAME}", f"{LABELS_DIR}/{LABEL_VALUES_NAME}"}
    for name in sorted(expected - set(manifest.cues)):
        report.error(cues.where(name), f"part of the cues, but not listed in {MANIFEST_NAME}")
    for name in sorted(set(manifest.cues) - expected):
        report.error(cues.where(name), f"listed in {MANIFEST_NAME}, but no part of the cues.yaml's banks")
    summary = {}
    for spec in config.cues:
        files, issues = read_bank(cues.where(spec.name), spec, manifest.sample_rate, cues.bank(spec.name))
        for file_path, message in issues:
            report.error(file_path, message)
        if files is None:
            continue
        summary[spec.name] = {"representation": spec.representation,
                              **{key: files.meta.get(key) for key in ("keys", "entries", "items")}}
        if bank_codec(files.meta) is not None:
            summary[spec.name]["codec"] = bank_codec(files.meta)
            if not issues:
                _check_cue_blocks(cues, spec.name, files, manifest.sample_rate, report)
        if not issues and spec.representation_spec.payload_dtype.kind == "f":
            data = f"{spec.name}/{DATA_NAME}"
            bad = cues.nonfinite(data)
            if bad:
                report.error(cues.where(data), f"{bad} NaN/Inf value(s) in a float cue payload")
    if config.speaker_label_resource is not None:
        labels_dir = cues.where(LABELS_DIR)
        try:
            speakers, labels = (_load_npy(cues, f"{LABELS_DIR}/{name}") for name in (LABEL_SPEAKERS_NAME,
                                                                                   LABEL_VALUES_NAME))
        except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError, TokenError...
            report.error(labels_dir, f"cannot read the speaker labels ({err})")
        else:
            for file_path, message in label_issues(labels_dir, speakers, labels):
                report.error(file_path, message)
    return summary


def _bank_meta(cues: CueFiles, cue: str) -> dict | None:
    """Bank ``cue``'s ``meta.json`` (which files the bank has), or None when it cannot be read (``read_bank``
    reports why)."""
    try:
        with cues.bank(cue).open(META_NAME) as fp:
            meta = parse_json(fp.read(), cues.where(f"{cue}/{META_NAME}"), error=ValueError)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _check_cue_blocks(cues: CueFiles, cue: str, files, sample_rate: int, report: PackReport) -> None:
    """Every block of a compressed waveform bank (whose structure passed ``read_bank``): its bytes against its
    digest, then decoded to its item's channels and frames; one item's bytes read at a time."""
    name = f"{cue}/{DATA_NAME}"
    where = cues.where(name)
    items, digests = files.arrays[ITEMS_NAME], files.arrays[CUE_DIGESTS_NAME]
    table = BlockTable.of(files.meta["codec"], files.meta["block_frames"], items["offset"], items["length"],
                          files.arrays[BLOCKS_NAME], cues.where(f"{cue}/{BLOCKS_NAME}"))
    ends = table.start + table.size
    for item in range(len(items)):
        first, stop = int(table.first[item]), int(table.first[item + 1])
        begin, end = int(table.start[first]), int(ends[stop - 1])
        try:
            data = memoryview(cues.payload_bytes(name, begin, end))
        except OSError as err:
            report.error(where, f"item {item}: cannot read ({err})")
            continue
        pieces = [data[int(table.start[b]) - begin:int(ends[b]) - begin] for b in range(first, stop)]
        bad = [b - first for b, piece in zip(range(first, stop), pieces) if piece_digest(piece) != digests[b].tobytes()]
        if bad:
            report.error(where, f"item {item}: block {bad[0]}: bytes differ from their digest "
                                f"({CUE_DIGESTS_NAME} row {first + bad[0]})")
            continue
        try:
            decode_run(table.codec, pieces, sample_rate, int(items["channels"][item]), int(items["length"][item]),
                       table.block_frames)
        except CorruptBlock as err:
            report.error(where, f"item {item}: {err}")


def _load_npy(cues: CueFiles, name: str) -> np.ndarray:
    with cues.open(name) as fp:
        return np.load(fp, allow_pickle=False)


def validate_packs(paths: list[str], check_hashes: bool = True, endpoint_url: str | None = None,
                   progress: bool = False) -> ValidationReport:
    """Validate every pack (a directory, or an object-store URL: nothing copied to disk); ``progress`` shows a bar
    per pack.  The asd level comparison is left to the caller (see ``ValidationReport``)."""
    return ValidationReport([validate_pack(path, check_hashes, endpoint_url, progress=progress) for path in paths])


__all__ = ["validate_pack", "validate_packs"]
