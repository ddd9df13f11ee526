"""The files a pack's manifest lists, checked one by one: present, of the recorded size and (unless ``--no-hash``)
of the recorded SHA-256.  Shared by the shard checks (``packer.validate.pack``) and the cue checks
(``packer.validate.cues``); every problem goes into the ``PackReport`` under the file's path.
"""

from __future__ import annotations

import os

from speechpack.packer.validate.report import PackReport
from speechpack.packer.files import hash_file
from speechpack.schemas.constants import MANIFEST_NAME
from speechpack.schemas.format import FileEntry, StreamSpec
from speechpack.schemas.npyfile import NpyHeader


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


def stream_header_problem(header: NpyHeader, spec: StreamSpec, size: int, holder: str = "file") -> str | None:
    """What is wrong with a shard stream's ``.npy`` header, read from a file (or an object, ``holder``) of ``size``
    bytes: a dtype, order or row shape other than the stream catalogue's, or a size other than the header
    promises; None when it fits.  Shared by the checks on disk and on object storage, so both word it alike."""
    shape, dtype, fortran = header.shape, header.dtype, header.fortran_order
    if dtype.str != spec.dtype or fortran or len(shape) != 1 + len(spec.row_shape) \
            or tuple(shape[1:]) != spec.row_shape:
        return (f"header says {dtype.str} {shape} (fortran={fortran}); the catalogue says {spec.dtype} rows of "
                f"{list(spec.row_shape)}")
    if size != header.expected_size:
        return (f"header promises {header.expected_size} bytes, {holder} has {size} "
                f"({'truncated' if size < header.expected_size else 'trailing bytes'})")
    return None
