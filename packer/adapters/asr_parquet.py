"""Omnilingual ASR's parquet datasets to an ``asr`` pack (``speechpack build parquet``).

Layout (``LangASRSchema``): rows with ``audio_bytes`` (an encoded file: FLAC, WAV, Ogg, MP3...; ``binary`` or a
list of 8-bit integers), ``audio_size`` (samples per channel at the file's rate), ``text``, ``split``,
``language`` and ``corpus``, in ``*.parquet`` files found recursively under ``--path`` (sorted by relative path;
``--path`` may also be one file).  Hive partition directories (``corpus=X/language=Y/part-0.parquet``) supply a
column a file lacks; a file that has the column and a partition that disagrees with it is an error.  Optional
columns: ``key`` (default ``<file without .parquet>:<row>``, the row counted within the file) and ``speaker``.

- ``--split S`` keeps the rows whose ``split`` is ``S`` (the others are not packed and not reported).
- Only the small columns are read up front; a row's audio is read by the worker that decodes it, one row group at
  a time (the last few are cached per process), so memory does not grow with the dataset.
- Audio is decoded with ``packer.audio.read_audio_bytes``: libsndfile for the containers it knows (sniffed from
  the first bytes), PyAV for the rest or when libsndfile refuses.
- Every bad row is reported with the file, the row within it and the column: undecodable audio, ``audio_size``
  disagreeing with the decoded length, empty text, a missing value.  A file lacking a required column is one
  problem naming the file and the column.  ``line`` in reports and ``skipped.json`` is the row's ordinal over all
  files (1-based), ``path`` the file.

pyarrow is imported lazily: it is the optional extra ``speechpack[parquet]``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import urllib.parse
from dataclasses import dataclass

import numpy as np

from speechpack.packer.adapters.asr_common import asr_plan, asr_sample, check_label, check_text
from speechpack.packer.audio import Audio, AudioError, AudioInfo, probe_audio_bytes, read_audio_bytes
from speechpack.packer.build.run import BuildOptions, BuildSummary, run_build
from speechpack.packer.build.plan import PackedSample, SamplePlan
from speechpack.schemas.constants import KIND_ASR
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.names import name_problem
from speechpack.schemas.line_problems import LineProblem

#: LangASRSchema's column names.
AUDIO_COLUMN = "audio_bytes"
LENGTH_COLUMN = "audio_size"
TEXT_COLUMN = "text"
SPLIT_COLUMN = "split"
LANGUAGE_COLUMN = "language"
CORPUS_COLUMN = "corpus"
KEY_COLUMN = "key"
SPEAKER_COLUMN = "speaker"
#: Columns every row needs (from the file or a partition directory).
REQUIRED_COLUMNS = (AUDIO_COLUMN, TEXT_COLUMN, LANGUAGE_COLUMN, CORPUS_COLUMN)
#: Row groups of audio each worker keeps decoded-from-parquet (rows of one group are usually packed together).
CACHED_ROW_GROUPS = 2
#: First bytes of the containers libsndfile reads; anything else goes straight to PyAV.
_SOUNDFILE_MAGIC = {b"RIFF": ".wav", b"RIFX": ".wav", b"fLaC": ".flac", b"OggS": ".ogg", b"FORM": ".aiff",
                    b"caff": ".caf"}


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise SpeechpackError("reading parquet needs pyarrow: pip install 'speechpack[parquet]'") from None
    return pyarrow


@dataclass(frozen=True)
class ParquetRow:
    """One row to pack: where its audio is (file, row group, row in the group) and its small columns."""

    line: int
    key: str
    path: str
    row: int
    row_group: int
    group_row: int
    text: str
    language: str
    corpus: str
    speaker: str | None
    audio_size: int | None


@dataclass(frozen=True)
class ParquetInput:
    items: list[ParquetRow]
    problems: list[LineProblem]
    files: list[str]


def parquet_files(path: str) -> list[str]:
    """``path`` itself, or every ``*.parquet`` under it (hidden entries left out), sorted by relative path."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise SpeechpackError(f"{path}: no such parquet file or directory")
    found = []
    for directory, subdirs, files in os.walk(path):
        subdirs[:] = [d for d in subdirs if not d.startswith((".", "_"))]
        found.extend(os.path.join(directory, f) for f in files
                     if f.endswith(".parquet") and not f.startswith((".", "_")))
    if not found:
        raise SpeechpackError(f"{path}: holds no .parquet files")
    return sorted(found, key=lambda f: os.path.relpath(f, path).split(os.sep))


def partition_values(path: str, root: str) -> dict[str, str]:
    """Hive partition values of a file: ``name=value`` directory components between ``root`` and the file."""
    relative = os.path.relpath(os.path.dirname(path), root) if os.path.isdir(root) else ""
    values = {}
    for part in relative.split(os.sep):
        name, eq, value = part.partition("=")
        if eq and name:
            values[urllib.parse.unquote(name)] = urllib.parse.unquote(value)
    return values


def read_parquet_input(root: str, split: str | None) -> ParquetInput:
    """Every row of every file (only the small columns), checked; rows of other splits left out."""
    pa = _pyarrow()
    files = parquet_files(root)
    items: list[ParquetRow] = []
    problems: list[LineProblem] = []
    first_line: dict[str, int] = {}
    ordinal = 0
    for path in files:
        try:
            parquet = pa.parquet.ParquetFile(path)
        except (pa.ArrowException, OSError) as err:
            raise SpeechpackError(f"{path}: not a readable parquet file ({err})") from None
        num_rows = parquet.metadata.num_rows
        first, ordinal = ordinal + 1, ordinal + num_rows
        names = set(parquet.schema_arrow.names)
        partitions = partition_values(path, root)
        wanted = list(REQUIRED_COLUMNS) + ([SPLIT_COLUMN] if split is not None else [])
        missing = [c for c in wanted if c not in names and c not in partitions]
        if missing:
            problems.append(LineProblem(first, None, path, f"column {missing[0]!r} is missing (no partition "
                                                           f"directory supplies it either); {num_rows} row(s) "
                                                           f"not read"))
            continue
        small = [c for c in (TEXT_COLUMN, SPLIT_COLUMN, LANGUAGE_COLUMN, CORPUS_COLUMN, LENGTH_COLUMN, KEY_COLUMN,
                             SPEAKER_COLUMN) if c in names]
        table = parquet.read(columns=small).to_pydict() if small else {}
        groups = np.cumsum([0] + [parquet.metadata.row_group(g).num_rows
                                  for g in range(parquet.metadata.num_row_groups)])
        stem = os.path.splitext(os.path.relpath(path, root) if os.path.isdir(root) else os.path.basename(path))[0]
        for row in range(num_rows):
            line = first + row
            values = {c: (table[c][row] if c in table else partitions.get(c)) for c in
                      (TEXT_COLUMN, SPLIT_COLUMN, LANGUAGE_COLUMN, CORPUS_COLUMN, LENGTH_COLUMN, KEY_COLUMN,
                       SPEAKER_COLUMN)}
            if split is not None and values[SPLIT_COLUMN] != split:
                continue
            key = values[KEY_COLUMN] if values[KEY_COLUMN] is not None else f"{stem.replace(os.sep, '/')}:{row}"
            try:
                item = _row_item(values, partitions, path, row, line, key, groups)
            except ValueError as err:
                problems.append(LineProblem(line, key if isinstance(key, str) else None, path,
                                            f"row {row}, column {err}"))
                continue
            if key in first_line:
                problems.append(LineProblem(line, key, path, f"row {row}, column {KEY_COLUMN!r}: duplicate key "
                                                             f"(first on row ordinal {first_line[key]})"))
                continue
            first_line[key] = line
            items.append(item)
    if not items and not problems:
        where = f" of split {split!r}" if split is not None else ""
        raise SpeechpackError(f"{root}: no rows{where} to pack")
    return ParquetInput(items, problems, files)


def _row_item(values: dict, partitions: dict, path: str, row: int, line: int, key, groups: np.ndarray) -> ParquetRow:
    """One row's checked item; ``ValueError("'column': reason")`` for a bad value."""
    for column in (LANGUAGE_COLUMN, CORPUS_COLUMN):
        if column in partitions and values[column] != partitions[column]:
            raise ValueError(f"{column!r}: {values[column]!r} disagrees with the partition directory "
                             f"{column}={partitions[column]}")
    if not isinstance(key, str) or not key:
        raise ValueError(f"{KEY_COLUMN!r}: expected a non-empty string, got {key!r}")
    if name_problem(key) is not None:
        raise ValueError(f"{KEY_COLUMN!r}: {key!r} {name_problem(key)}")
    labels = {}
    for column in (LANGUAGE_COLUMN, CORPUS_COLUMN):
        try:
            labels[column] = check_label(values[column], column)
        except ValueError as err:
            raise ValueError(f"{column!r}: {str(err).partition(': ')[2]}") from None
    try:
        text = check_text(values[TEXT_COLUMN])
    except ValueError as err:
        raise ValueError(f"{TEXT_COLUMN!r}: {str(err).partition(': ')[2]}") from None
    size = values[LENGTH_COLUMN]
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
        raise ValueError(f"{LENGTH_COLUMN!r}: expected a positive number of samples, got {size!r}")
    speaker = values[SPEAKER_COLUMN]
    if speaker is not None:
        try:
            speaker = check_label(speaker, SPEAKER_COLUMN)
        except ValueError as err:
            raise ValueError(f"{SPEAKER_COLUMN!r}: {str(err).partition(': ')[2]}") from None
    group = int(np.searchsorted(groups, row, side="right") - 1)
    return ParquetRow(line=line, key=key, path=path, row=row, row_group=group, group_row=row - int(groups[group]),
                      text=text, speaker=speaker, audio_size=size, **labels)


@functools.lru_cache(maxsize=CACHED_ROW_GROUPS)
def _audio_of_group(path: str, row_group: int):
    """The ``audio_bytes`` column of one row group (a pyarrow array), cached per process."""
    pa = _pyarrow()
    return pa.parquet.ParquetFile(path).read_row_group(row_group, columns=[AUDIO_COLUMN]).column(0)


def row_audio_bytes(item: ParquetRow) -> bytes:
    """The encoded audio of a row (``binary`` or a list of 8-bit integers); ``AudioError`` when missing."""
    value = _audio_of_group(item.path, item.row_group)[item.group_row]
    if not value.is_valid:
        raise AudioError(item.path, f"row {item.row}, column {AUDIO_COLUMN!r}: no audio (null)")
    value = value.as_py()
    if isinstance(value, list):
        value = np.asarray(value, dtype=np.int16).astype(np.uint8).tobytes()  # int8 -> its byte pattern
    if not isinstance(value, (bytes, bytearray)) or not value:
        raise AudioError(item.path, f"row {item.row}, column {AUDIO_COLUMN!r}: empty audio bytes")
    return bytes(value)


def _decoded(item: ParquetRow, decode, data: bytes):
    """``decode(data, name)`` with libsndfile when the bytes look like its container, else (or when it fails)
    with PyAV; errors name the file, row and column."""
    where = f"row {item.row}, column {AUDIO_COLUMN!r}"
    extension = _SOUNDFILE_MAGIC.get(data[:4])
    errors = []
    for name in ([f"{where}{extension}"] if extension else []) + [f"{where}.bin"]:  # .bin: PyAV decides
        try:
            return decode(data, name)
        except AudioError as err:
            errors.append(err.reason)
    raise AudioError(item.path, f"{where}: cannot decode audio ({'; '.join(errors)})")


def _check_size(item: ParquetRow, frames: int) -> None:
    if item.audio_size is not None and item.audio_size != frames:
        raise AudioError(item.path, f"row {item.row}, column {LENGTH_COLUMN!r}: says {item.audio_size} samples, "
                                    f"the decoded audio has {frames}")


def plan_parquet_row(item: ParquetRow, sample_rate: int) -> SamplePlan:
    """Size a row's sample from its audio header (and check ``audio_size`` against it)."""
    info: AudioInfo = _decoded(item, probe_audio_bytes, row_audio_bytes(item))
    _check_size(item, info.frames)
    return asr_plan(item.line, item.key, info.channels, info.frames, info.sample_rate, sample_rate, item.text,
                    item.path)


def load_parquet_row(item: ParquetRow, sample_rate: int) -> PackedSample:
    """Decode a row's audio, check ``audio_size``, resample and assemble its sample."""
    audio: Audio = _decoded(item, functools.partial(read_audio_bytes, int16_at=sample_rate), row_audio_bytes(item))
    _check_size(item, audio.num_frames)
    return asr_sample(line=item.line, key=item.key, audio=audio, sample_rate=sample_rate, text=item.text,
                      language=item.language, corpus=item.corpus, speaker=item.speaker,
                      provenance={"path": item.path, "row": item.row})


def build_parquet(path: str, options: BuildOptions, split: str | None = None) -> BuildSummary:
    """``speechpack build parquet``: Omnilingual parquet files to an ``asr`` pack."""
    source = read_parquet_input(path, split)
    listing = "".join(f"{os.path.relpath(f, path) if os.path.isdir(path) else os.path.basename(f)}\t"
                      f"{os.path.getsize(f)}\n" for f in source.files)
    return run_build(
        items=source.items,
        problems=source.problems,
        plan=functools.partial(plan_parquet_row, sample_rate=options.sample_rate),
        load=functools.partial(load_parquet_row, sample_rate=options.sample_rate),
        kind=KIND_ASR,
        input_path=os.path.abspath(path),
        command="build parquet",
        recorded_options={**options.recorded(), "split": split},
        options=options,
        input_sha256=hashlib.sha256(listing.encode("utf-8")).hexdigest() if os.path.isdir(path) else None,
    )


__all__ = ["ParquetInput", "ParquetRow", "build_parquet", "load_parquet_row", "parquet_files", "partition_values",
           "plan_parquet_row", "read_parquet_input", "row_audio_bytes"]
