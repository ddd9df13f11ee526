"""The TSE task (``task: tse``, the default): WeSep-style target speaker extraction from ``tse`` or ``sources``
packs.  Items are mixtures (or one per target with ``expand_targets``); ``loader.tse.batch`` builds the batches."""

from __future__ import annotations

from loader.tse.args import parse_dataset_args
from loader.tasks import Prepared
from loader.tse.batch import TseBatchBuilder
from loader.tse.items import length_filter, tse_items


__all__ = ["parse_dataset_args", "prepare"]


def prepare(config, state: str, packs: list, seed: int) -> Prepared:
    args = config.dataset_args
    items = tse_items(packs, args.expand_targets)
    keep = length_filter(items, packs, args, state)
    kept = items.subset(keep)
    filtered = int(len(keep) - keep.sum())
    return Prepared(builder=TseBatchBuilder(packs, kept, args, state, seed), item_pack=kept.pack, filtered=filtered,
                    filter_report={"filter_len": filtered} if filtered else {})
