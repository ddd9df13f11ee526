"""The TSE item universe: one item per mixture (or per (mixture, target) with ``expand_targets``), as columns.

Parallel numpy arrays, not per-item Python objects, so a builder forked into DataLoader workers shares them
without copy-on-write growth (docs/loader.md "What one epoch is", step 1).

What the dry run (``speechpack plan``) needs to know about TSE batches beyond their lengths, read from the
packs' columns (no audio): how many rows the loader yields per planned item, and which batches it would refuse
(the TSE builder's ``dry_run``: its rows and batch check, ``loader.tasks.DryRunView``).

The words (docs/loader.md, "Dry run"): an *item* is what the plan places in a batch (one mixture; one (mixture,
target) pair with ``expand_targets``; one chunk with ``train_window``; one utterance or track for asr and asd); a
*row* is one entry along the batch dimension the loader yields (``B_out``: one per target speaker of a TSE mixture,
one per item elsewhere).

The loader stacks a batch's mixtures into one ``wav_mix [B_out, C, T]``, so a batch whose mixtures have different
channel counts is refused when it is built (``loader.tse.task``), possibly hours into training.  The same test on
the plan's batches, before any audio is read, lets ``speechpack plan`` say so first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from speechpack.loader.pack import Pack
from speechpack.loader.tse.args import DatasetArgs
from speechpack.loader.samples import MixedChannels
from speechpack.schemas.units import plural


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


#: Keys named per channel count in the message about a mixed batch.
_KEYS_SHOWN = 3


def _premixed_items(builder: Any):
    """The builder's item columns when its batches are pre-mixed audio from the packs; ``None`` with online mixing
    (which renders its own mixtures from mono sources)."""
    return builder.items if builder.online is None else None


def _item_of_unit(builder: Any) -> np.ndarray | None:
    """Per planned unit, its item (``train_window`` chunks map to the item they cut); ``None`` when they are the
    same."""
    return None if builder.train_windows is None else builder.train_windows.item


def unit_rows(builder: Any) -> np.ndarray | None:
    """Rows the loader yields per planned unit: a mixture gives one per target speaker, unless ``expand_targets``
    planned its targets one by one; ``None`` when every unit is one row (online mixing)."""
    items = _premixed_items(builder)
    if items is None:
        return None
    counts = np.concatenate([p.speaker_count for p in builder.packs]) if builder.packs else np.zeros(0, np.int64)
    offsets = np.cumsum([0] + [len(p) for p in builder.packs])[:-1]
    rows = np.where(items.slot >= 0, 1, counts[offsets[items.pack] + items.sample]).astype(np.int64)
    item = _item_of_unit(builder)
    return rows if item is None else rows[item]


def unit_channels(builder: Any) -> np.ndarray | None:
    """Mixture channels per planned unit, from the mix stream's segment table; ``None`` when batches cannot mix
    channel counts (online mixing renders its mixtures)."""
    items = _premixed_items(builder)
    if items is None:
        return None
    per_pack = []
    for pack in builder.packs:
        table = pack.streams[builder.mix_stream]
        per_pack.append(table.channels[table.first].astype(np.int64))
    offsets = np.cumsum([0] + [len(p) for p in builder.packs])[:-1]
    channels = np.concatenate(per_pack)[offsets[items.pack] + items.sample]
    item = _item_of_unit(builder)
    return channels if item is None else channels[item]


def unit_keys(builder: Any, units: np.ndarray) -> list[str]:
    """Sample keys of planned units (for messages)."""
    item = _item_of_unit(builder)
    ids = units if item is None else item[units]
    return [str(builder.packs[int(builder.items.pack[i])].keys[int(builder.items.sample[i])]) for i in ids]


def check_batch_channels(builder: Any, channels: np.ndarray, units: np.ndarray, *, epoch: int, rank: int,
                         batch: int, batches: int) -> None:
    """Raise ``MixedChannels`` if the batch's units (``units``, planned ids) have more than one channel count,
    naming the batch, a few keys per count and the ways out; ``batches`` is how many batches the rank has."""
    counts = channels[units]
    if counts.size == 0 or counts.min() == counts.max():
        return
    found = []
    for count in np.unique(counts):
        keys = sorted(set(unit_keys(builder, units[counts == count])))
        shown = ", ".join(keys[:_KEYS_SHOWN]) + (", ..." if len(keys) > _KEYS_SHOWN else "")
        found.append(f"{plural(int(count), 'channel')}: {shown}")
    values = sorted(int(c) for c in np.unique(channels))
    raise MixedChannels(
        f"epoch {epoch}, rank {rank}, batch {batch} (of {batches}): mixtures with different channel counts in one "
        f"batch ({'; '.join(found)}); the loader refuses such a batch.  The packs hold mixtures of "
        f"{' and '.join(str(v) for v in values)} channels: pack each channel count apart and train on one pack "
        f"at a time, or set dataset_args.batch_size: 1")


__all__ = ["ItemIndex", "MixedChannels", "check_batch_channels", "length_filter", "tse_items", "unit_channels",
           "unit_keys", "unit_rows"]
