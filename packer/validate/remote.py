"""``speechpack validate s3://bucket/packs/train``: the checks of ``packer.validate.pack``, on a pack that stays on
object storage.

Nothing is copied to disk first.  Each object is streamed once: hashed as its bytes arrive (the same size and
sha256 comparison as a local validate) and, for the content checks that read a local pack through a memory map
(``.npy`` headers against the catalogue and the object size, offsets, statistics recomputed from the stored
int16, text and label rows, columns against the shard indexes), kept in memory as the array the map would
give.  Memory is bounded by one shard's stream files at a time (about ``--shard-size``, 1 GB by default), plus
the label rows of asd packs, which are small.  Objects under the prefix that ``dataset.json`` does not list are
errors, as files are in a directory; leftovers of an interrupted upload (``.tmp-`` names) are warnings.

Cue banks (``cues/``) are hashed while streamed like every other object; their structure checks
(``schemas.cuecheck``) read a bank directory, so the streamed bytes are written to a temporary directory for
the time of those checks (cue banks are small next to the audio), and messages name the objects' URLs.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile

import numpy as np

from speechpack.packer.ownership import pack_file_entries
from speechpack.packer.copy.remote import RemotePack, describe_error, remote_errors
from speechpack.packer.validate.report import pack_summary
from speechpack.packer.validate.cues import check_cues
from speechpack.packer.validate.files import stream_header_problem
from speechpack.packer.validate.pack import (
    _KIND_CHECKS,
    PackReport,
    _check_totals,
    _manifest_problem,
    check_shard_records,
)
from speechpack.schemas.columns import COLUMNS_DIR, ColumnBuilder
from speechpack.schemas.constants import (
    MANIFEST_NAME,
    SHARD_INDEX_NAME,
    SKIPPED_NAME,
    STREAM_LABELS,
    STREAM_TYPES,
    TEMP_PREFIX,
)
from speechpack.schemas.cues import CUES_DIR
from speechpack.schemas.errors import NpyHeaderError, PackFormatError
from speechpack.schemas.format import Manifest, StreamSpec, check_shard_index
from speechpack.schemas.kinds import KIND_SPECS
from speechpack.schemas.manifest_file import parse_manifest
from speechpack.schemas.npyfile import read_npy_header_from


class _Fetcher:
    """Streams the objects of one pack, checking each against its ``dataset.json`` entry as it arrives."""

    def __init__(self, remote: RemotePack, manifest: Manifest, listing: dict[str, int], report: PackReport,
                 check_hashes: bool):
        self.remote = remote
        self.files = pack_file_entries(manifest)
        self.listing = listing
        self.report = report
        self.check_hashes = check_hashes

    def fetch(self, rel: str) -> bytearray | None:
        """The object's bytes, or None when it is missing or unreadable (reported)."""
        name = self.remote.name(rel)
        if rel not in self.listing:
            self.report.error(name, "object missing")
            return None
        data = bytearray()
        digest = hashlib.sha256()
        try:
            for chunk in self.remote.chunks(rel):
                digest.update(chunk)
                data += chunk
        except remote_errors() as err:
            self.report.error(name, f"cannot read ({describe_error(err)})")
            return None
        expected = self.files[rel]
        if len(data) != expected.size:
            self.report.error(name, f"size {len(data)} bytes, {MANIFEST_NAME} records {expected.size}")
        elif self.check_hashes and digest.hexdigest() != expected.sha256:
            self.report.error(name, f"sha256 {digest.hexdigest()} does not match {MANIFEST_NAME} "
                                    f"({expected.sha256}): the object changed after the pack was written")
        return data


def validate_remote_pack(url: str, check_hashes: bool = True, endpoint_url: str | None = None) -> PackReport:
    """Run every check of ``packer.validate.pack.validate_pack`` on a pack on object storage (never raises for a bad
    pack; raises ``RemoteError`` when the store cannot be reached)."""
    remote = RemotePack(url, endpoint_url)
    report = PackReport(remote.url)
    at = remote.name(MANIFEST_NAME)
    listing = remote.listing()
    if MANIFEST_NAME not in listing:
        report.error(at, f"missing: not a pack (no {MANIFEST_NAME}; an unfinished upload leaves none)")
        return report
    try:
        manifest = parse_manifest(remote.read_bytes(MANIFEST_NAME), at)
    except PackFormatError as err:
        report.error(at, _manifest_problem(remote.url, str(err)))
        return report
    fetcher = _Fetcher(remote, manifest, listing, report, check_hashes)
    _check_listing(remote, listing, fetcher.files, report)
    if manifest.skipped.get("file") is not None:
        fetcher.fetch(SKIPPED_NAME)
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
    columns: ColumnBuilder | None = ColumnBuilder(manifest.kind)
    records_by_shard: dict[str, list[dict]] = {}
    labels_by_shard: dict[str, np.ndarray | None] = {}
    for shard_id, shard in enumerate(manifest.shards):
        shard_dir = remote.name(shard.directory)
        records = _read_index(fetcher, shard.directory, manifest, shard.samples, report)
        arrays = {spec.name: _stream_array(fetcher, f"{shard.directory}/{spec.file}", spec, report)
                  for spec in manifest.streams}
        if records is None:
            columns = None
            continue
        if own_checks is not None:
            records_by_shard[shard.directory] = records
            labels_by_shard[shard_dir] = arrays.get(STREAM_LABELS)
        frames += check_shard_records(manifest, shard_id, shard.directory, records, arrays, levels, shard_dir,
                                      lambda name, shard_dir=shard_dir: f"{shard_dir}/{name}",
                                      (keys, speakers, durations), columns, extra_totals, report)
    if extra_totals is not None:
        recorded = {key: getattr(manifest, key) for key in KIND_SPECS[manifest.kind].manifest_keys}
        for message in extra_totals.issues(recorded, manifest.sample_rate):
            report.error(at, message)
    if own_checks is not None:
        for file, message in own_checks(remote.url, manifest, records_by_shard,
                                        labels_of=lambda shard_dir: labels_by_shard.get(shard_dir)):
            report.error(file, message)
    _check_columns(fetcher, manifest, columns, report)
    _check_totals(remote.url, manifest, len(keys), speakers, frames, report)
    cues = _check_remote_cues(fetcher, manifest, report)
    report.summary = pack_summary(manifest, durations, levels, check_hashes)
    if cues:
        report.summary["cues"] = cues
    return report


def _check_listing(remote: RemotePack, listing: dict[str, int], files: dict, report: PackReport) -> None:
    for rel in sorted(listing):
        if rel == MANIFEST_NAME or rel in files:
            continue
        if any(part.startswith(TEMP_PREFIX) for part in rel.split("/")):
            report.warn(remote.name(rel), "leftover of an interrupted upload (safe to delete)")
        else:
            report.error(remote.name(rel), f"object not listed in {MANIFEST_NAME}")


def _read_index(fetcher: _Fetcher, directory: str, manifest: Manifest, expected_samples: int,
                report: PackReport) -> list[dict] | None:
    rel = f"{directory}/{SHARD_INDEX_NAME}"
    name = fetcher.remote.name(rel)
    data = fetcher.fetch(rel)
    if data is None:
        return None
    try:
        raw = json.loads(bytes(data).decode("utf-8"))
        records = check_shard_index(raw, manifest.kind, name)
    except (UnicodeDecodeError, json.JSONDecodeError, PackFormatError) as err:
        report.error(name, str(err).replace(f"{name}: ", "").replace(name, "index"))
        return None
    if raw["shard"] != directory:
        report.error(name, f"names shard {raw['shard']!r}")
    if len(records) != expected_samples:
        report.error(name, f"holds {len(records)} samples, {MANIFEST_NAME} says {expected_samples}")
    return records


def _stream_array(fetcher: _Fetcher, rel: str, spec: StreamSpec, report: PackReport) -> np.ndarray | None:
    """The streamed ``.npy`` object as the array a memory map would give: header checked against the catalogue
    and the object's size first (the messages ``packer.validate.pack`` gives for a file)."""
    name = fetcher.remote.name(rel)
    data = fetcher.fetch(rel)
    if data is None:
        return None
    try:
        header = read_npy_header_from(io.BytesIO(data), name)
    except NpyHeaderError as err:
        report.error(name, f"unreadable .npy header ({err.reason})")
        return None
    problem = stream_header_problem(header, spec, len(data), holder="the object")
    if problem is not None:
        report.error(name, problem)
        return None
    array = np.frombuffer(data, dtype=header.dtype, offset=header.data_offset).reshape(header.shape)
    array.flags.writeable = False
    return array


def _check_columns(fetcher: _Fetcher, manifest: Manifest, expected: ColumnBuilder | None,
                   report: PackReport) -> None:
    """The column objects are present, intact, and say exactly what the shard indexes say."""
    stored = {name: fetcher.fetch(f"{COLUMNS_DIR}/{name}") for name in sorted(manifest.columns)}
    if expected is None:
        return  # a shard index could not be read; that error is already reported
    for name, array in expected.arrays().items():
        file_name = fetcher.remote.name(f"{COLUMNS_DIR}/{name}")
        data = stored.get(name)
        if data is None:
            if name not in manifest.columns:
                report.error(file_name, f"column missing from {MANIFEST_NAME}")
            continue
        try:
            column = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception as err:  # noqa: BLE001 - a corrupt .npy header raises ValueError, SyntaxError, TokenError...
            report.error(file_name, f"cannot read column ({err})")
            continue
        if column.dtype != array.dtype or column.shape != array.shape or not np.array_equal(column, array):
            report.error(file_name, f"column disagrees with the shard indexes ({column.dtype} {column.shape} "
                                    f"stored, {array.dtype} {array.shape} from index.json)")


def _check_remote_cues(fetcher: _Fetcher, manifest: Manifest, report: PackReport) -> dict:
    """Every cue object hashed while streamed, then ``packer.validate.pack``'s bank checks on those bytes (in a
    temporary directory only for the time of the checks); messages name the objects' URLs."""
    if not manifest.cues:
        return {}
    with tempfile.TemporaryDirectory(prefix="speechpack-cues-") as staging:
        for name in sorted(manifest.cues):
            data = fetcher.fetch(f"{CUES_DIR}/{name}")
            if data is None:
                continue
            path = os.path.join(staging, CUES_DIR, *name.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fp:
                fp.write(data)
        local = PackReport(staging)
        summary = check_cues(staging, manifest, local, check_hashes=False)  # hashed above, on the stream
        for issue in local.errors:
            report.error(issue.file.replace(staging, fetcher.remote.url, 1), issue.message)
        for issue in local.warnings:
            report.warn(issue.file.replace(staging, fetcher.remote.url, 1), issue.message)
    return summary


__all__ = ["validate_remote_pack"]
