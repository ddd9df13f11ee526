"""The TSE item universe: one item per mixture (or per (mixture, target) with ``expand_targets``), as columns.

Parallel numpy arrays, not per-item Python objects, so a builder forked into DataLoader workers shares them
without copy-on-write growth (docs/loader.md "What one epoch is", step 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speechpack.loader.pack import Pack
from speechpack.loader.tse.args import DatasetArgs


@dataclass(frozen=True)
class ItemIndex:
    """The item universe as parallel arrays.  ``slot`` is -1 for "every target of the mixture"."""

    pack: np.ndarray
    sample: np.ndarray
    slot: np.ndarray
    num_frames: np.ndarray  # at the pack's rate

    def __len__(self) -> int:
        return len(self.pack)

    def subset(self, keep: np.ndarray) -> "ItemIndex":
        return ItemIndex(self.pack[keep], self.sample[keep], self.slot[keep], self.num_frames[keep])


def tse_items(packs: list[Pack], expand_targets: bool) -> ItemIndex:
    """One item per sample of every pack (pack order, then storage order); per target with ``expand_targets``."""
    packs_col, samples_col, slots_col, frames_col = [], [], [], []
    for pack_id, pack in enumerate(packs):
        n = len(pack)
        samples = np.arange(n, dtype=np.int64)
        if expand_targets:
            counts = pack.speaker_count
            samples = np.repeat(samples, counts)
            slots = (np.arange(len(samples)) - np.repeat(pack.speaker_first, counts)).astype(np.int32)
        else:
            slots = np.full(n, -1, dtype=np.int32)
        packs_col.append(np.full(len(samples), pack_id, dtype=np.int32))
        samples_col.append(samples)
        slots_col.append(slots)
        frames_col.append(pack.num_frames[samples])
    return ItemIndex(np.concatenate(packs_col), np.concatenate(samples_col), np.concatenate(slots_col),
                     np.concatenate(frames_col))


def length_filter(items: ItemIndex, packs: list[Pack], args: DatasetArgs, state: str) -> np.ndarray:
    """WeSep's ``filter_len`` (train, ``whole_utt`` only): keep items within [min, max] seconds, inclusive."""
    keep = np.ones(len(items), dtype=bool)
    if state == "train" and args.whole_utt and args.filter_len:
        rates = np.asarray([p.sample_rate for p in packs], dtype=np.float64)[items.pack]
        seconds = items.num_frames / rates
        keep = (seconds >= args.min_num_seconds) & (seconds <= args.max_num_seconds)
    return keep


__all__ = ["ItemIndex", "length_filter", "tse_items"]
