"""Which utterances make up a split: ``train_split``/``valid_split`` and ``partition_filters``, as Omnilingual reads
them from its parquet partitions, applied to the loaded ``asr`` packs.

A pack's split is the one it was built with (``speechpack build parquet --split S`` records ``S`` in
``dataset.json``'s provenance), or its ``packs`` entry's ``split:`` when the pack records none (JSON-lines packs).
A split name is resolved the way Omnilingual's ``MixtureParquetStorage`` allows:

- a split some pack holds (``train``, ``dev``, ``dev_clean`` ...) selects those packs;
- otherwise ``<split>_<corpus>`` (``train_librispeech``) selects the packs of ``<split>`` and, in them, only the
  utterances of corpus ``<corpus>``.

``partition_filters`` (``loader.asr.partition_filter``) then keeps the utterances whose corpus and language it
accepts.  Utterances outside the selection are not part of the split: they are neither batched nor counted as
filtered.  With neither split nor filter every utterance of every pack is selected, as before.

``read_summary``: Omnilingual's dataset summary TSV (``dataset_summary_path``): hours per (corpus, language) for weighting.

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
from dataclasses import dataclass

import numpy as np

from speechpack.loader.asr.partition_filter import parse_partition_filters
from speechpack.loader.config_checks import ConfigError


#: Loader state -> the ``dataset_args`` key naming its split (Omnilingual's dataset block has these two).
SPLIT_KEYS = {"train": "train_split", "val": "valid_split"}


@dataclass(frozen=True)
class Selection:
    """The packs a split reads (one flag per loaded pack) and the row filter inside them."""

    packs: tuple[bool, ...]
    corpus: str | None = None
    partition: object = None

    def mask(self, corpus: np.ndarray, language: np.ndarray) -> np.ndarray:
        """Rows of the selected packs that the corpus filter and ``partition_filters`` keep."""
        keep = np.ones(len(corpus), dtype=bool)
        if self.corpus is not None:
            keep &= corpus == self.corpus
        if self.partition is not None:
            keep &= self.partition.mask({"corpus": corpus, "language": language})
        return keep


def pack_split(source, pack) -> str | None:
    """The split ``pack`` holds: the one it was built with, else its ``packs`` entry's ``split:``."""
    recorded = (pack.manifest.provenance.get("options") or {}).get("split")
    if recorded is not None and source.split is not None and source.split != recorded:
        raise ConfigError(f"packs entry {source.path}: split {source.split!r}, but the pack was built with "
                          f"--split {recorded!r}")
    return recorded if recorded is not None else source.split


def select(args, state: str, sources, packs) -> Selection:
    """The selection of ``state`` (module docstring) for the ``packs`` opened from the config's ``sources``."""
    partition = parse_partition_filters(args.partition_filters, "dataset_args.partition_filters")
    key = SPLIT_KEYS.get(state)
    name = getattr(args, key) if key is not None else None
    if name is None:
        if state not in SPLIT_KEYS and (args.train_split is not None or args.valid_split is not None):
            raise ConfigError(f"state {state!r}: the config names train_split and valid_split only; build a {state} "
                              f"loader from a config whose valid_split is the {state} split")
        return Selection(packs=(True,) * len(packs), partition=partition)
    splits = [pack_split(source, pack) for source, pack in zip(sources, packs)]
    unknown = [source.path for source, split in zip(sources, splits) if split is None]
    if unknown:
        raise ConfigError(f"dataset_args.{key}: pack {unknown[0]} records no split (build it with --split, or give "
                          f"its packs entry split: NAME)")
    corpus = None
    if name not in splits:
        base, _, corpus = name.partition("_")
        if not corpus or base not in splits:
            raise ConfigError(f"dataset_args.{key}: no pack holds split {name!r} (the packs hold "
                              f"{', '.join(sorted(set(splits)))}; a corpus filter is written <split>_<corpus>)")
        name = base
    return Selection(packs=tuple(split == name for split in splits), corpus=corpus or None, partition=partition)


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


__all__ = ["SPLIT_KEYS", "Selection", "pack_split", "read_summary", "select"]
