"""The TSE task (``task: tse``, the default): WeSep-style target speaker extraction from ``tse`` or ``sources``
packs.  Items are mixtures (or one per target with ``expand_targets``); ``loader.tse.batch`` builds the batches."""

from __future__ import annotations

from speechpack.loader.config_checks import ConfigError
from speechpack.loader.tasks import Prepared
from speechpack.loader.tse.args import DatasetArgs, parse_dataset_args
from speechpack.loader.tse.batch import TseBatchBuilder
from speechpack.loader.tse.items import length_filter, tse_items
from speechpack.loader.tse.mainline_batch import MainlineBatchBuilder


__all__ = ["parse_dataset_args", "prepare", "unsupported"]


def unsupported(args: DatasetArgs, state: str) -> str | None:
    """What the config asks for that this version does not build (a message), else None.

    Every augmentation key (``loader.tse.augment_args``) now changes batches: noise from an LMDB or noise packs,
    online and offline; same-room reverberation from ``reverb_conf`` or ``rir_banks``; enrollment augmentation
    (``loader.tse.augment``).  Kept as the one place a future key is refused instead of silently ignored."""
    return None


def prepare(config, state: str, packs: list, seed: int) -> Prepared:
    args = config.dataset_args
    missing = unsupported(args, state)
    if missing is not None:
        raise ConfigError(f"dataset_args.{missing}")
    items = tse_items(packs, args.expand_targets)
    keep = length_filter(items, packs, args, state)
    kept = items.subset(keep)
    filtered = int(len(keep) - keep.sum())
    builder = TseBatchBuilder(packs, kept, args, state, seed)
    if args.mainline is not None:
        builder = MainlineBatchBuilder(builder, args.mainline, state, seed)
    return Prepared(builder=builder, item_pack=kept.pack, filtered=filtered,
                    filter_report={"filter_len": filtered} if filtered else {})
