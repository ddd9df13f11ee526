"""Omnilingual's dataset summary TSV (``dataset_summary_path``): hours per (corpus, language) for weighting.

An ``asr`` pack already records ``hours_by_corpus``, so the file is optional.  Give it to weigh by the hours of
the whole original dataset (as an Omnilingual recipe does) rather than by what the packs hold, e.g. when the packs
are a subset.  The format is Omnilingual's ``language_distribution_*.tsv``: a header row, then one row per
(corpus, language[, split]) with the columns

``corpus``, ``language``  required;
``total_audio_seconds``    the group's audio (or ``hours``, in hours);
``split``                  optional: only the rows of the requested split count (default ``train``);
                           other columns (``num_samples``...) are ignored.

Rows of one (corpus, language) add up.  Errors name the file, the line and the column.
"""

from __future__ import annotations

import csv

from speechpack.loader.config_checks import ConfigError

SECONDS_COLUMN = "total_audio_seconds"
HOURS_COLUMN = "hours"
SPLIT_COLUMN = "split"


def read_summary(path: str, split: str = "train") -> dict[tuple[str, str], float]:
    """``{(corpus, language): hours}`` from the TSV at ``path`` (module docstring)."""
    try:
        with open(path, encoding="utf-8", newline="") as fp:
            rows = list(csv.reader(fp, delimiter="\t"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the dataset summary ({err.strerror})") from None
    if not rows:
        raise ConfigError(f"{path}: the dataset summary is empty (a header row is required)")
    header = [name.strip() for name in rows[0]]
    missing = [c for c in ("corpus", "language") if c not in header]
    if missing:
        raise ConfigError(f"{path}:1: column {missing[0]!r} is missing from the header")
    amount = SECONDS_COLUMN if SECONDS_COLUMN in header else HOURS_COLUMN if HOURS_COLUMN in header else None
    if amount is None:
        raise ConfigError(f"{path}:1: needs a {SECONDS_COLUMN!r} (or {HOURS_COLUMN!r}) column")
    per_hour = 3600.0 if amount == SECONDS_COLUMN else 1.0
    hours: dict[tuple[str, str], float] = {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise ConfigError(f"{path}:{number}: {len(row)} columns, the header has {len(header)}")
        cells = dict(zip(header, (cell.strip() for cell in row)))
        if SPLIT_COLUMN in cells and cells[SPLIT_COLUMN] != split:
            continue
        try:
            value = float(cells[amount]) / per_hour
        except ValueError:
            raise ConfigError(f"{path}:{number}: column {amount!r}: {cells[amount]!r} is not a number") from None
        if not value >= 0:
            raise ConfigError(f"{path}:{number}: column {amount!r}: must be non-negative, got {cells[amount]}")
        for column in ("corpus", "language"):
            if not cells[column]:
                raise ConfigError(f"{path}:{number}: column {column!r} is empty")
        group = (cells["corpus"], cells["language"])
        hours[group] = hours.get(group, 0.0) + value
    return hours


__all__ = ["read_summary"]
