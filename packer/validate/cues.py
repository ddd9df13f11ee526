"""``validate``'s checks of a pack's speaker cues (``cues/``, format 1.1): every file listed and intact, the
``cues.yaml`` readable and naming exactly the banks on disk, each bank's structure as ``schemas.cue_banks`` defines it,
no NaN/Inf in float payloads, and the speaker labels.  Run by ``packer.validate.pack`` on a pack's
directory, or on the cue objects of a pack on object storage staged by ``packer.validate.files.StoreFiles``.
"""

from __future__ import annotations

import os

import numpy as np

from speechpack.loader.pack.cues import read_cues_config
from speechpack.packer.validate.files import check_file
from speechpack.packer.validate.report import PackReport
from speechpack.schemas.constants import MANIFEST_NAME
from speechpack.schemas.cue_banks import DATA_NAME, read_bank
from speechpack.schemas.cues import (
    CUES_DIR,
    CUES_YAML,
    LABEL_SPEAKERS_NAME,
    LABEL_VALUES_NAME,
    LABELS_DIR,
    label_issues,
)
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import Manifest


#: Elements per chunk when scanning a float payload for NaN/Inf (bounds the temporary mask).
_SCAN_CHUNK = 1 << 24


def check_cues(path: str, manifest: Manifest, report: PackReport, check_hashes: bool) -> dict:
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
        check_file(os.path.join(directory, name), entry, report, check_hashes)
    try:
        config = read_cues_config(path)
    except PackFormatError as err:
        report.error(os.path.join(directory, CUES_YAML), str(err).split(": ", 1)[-1])
        return {}
    expected = {CUES_YAML} | {f"{spec.name}/{name}" for spec in config.cues for name in spec.representation_spec.files}
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
        if not issues and spec.representation_spec.payload_dtype.kind == "f":
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

