"""The files a pack's manifest lists, checked one by one: present, of the recorded size and (unless ``--no-hash``)
of the recorded SHA-256.  Shared by the shard checks (``packer.validate``) and the cue checks
(``packer.validate_cues``); every problem goes into the ``PackReport`` under the file's path.
"""

from __future__ import annotations

import os

from packer.pack_report import PackReport
from packer.writer import hash_file
from schemas.constants import MANIFEST_NAME
from schemas.format import FileEntry


def check_file(file_path: str, expected: FileEntry, report: PackReport, check_hashes: bool) -> None:
    """One listed file: missing, a different size, or (with ``check_hashes``) a different SHA-256 is an error."""
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


def check_files(shard_dir: str, files: dict[str, FileEntry], report: PackReport, check_hashes: bool) -> None:
    """A shard directory: every file listed and intact, and no file the manifest does not list."""
    for name in sorted(set(os.listdir(shard_dir)) - set(files)):
        report.error(os.path.join(shard_dir, name), f"file not listed in {MANIFEST_NAME}")
    for name, expected in sorted(files.items()):
        check_file(os.path.join(shard_dir, name), expected, report, check_hashes)


