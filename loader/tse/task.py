"""The TSE task (``task: tse``, the default): WeSep-style target speaker extraction from ``tse`` or ``sources``
packs.  Items are mixtures (or one per target with ``expand_targets``); ``loader.tse.batch`` builds the batches."""

from __future__ import annotations

from loader.config_checks import ConfigError
from loader.tasks import Prepared
from loader.tse.args import DatasetArgs, parse_dataset_args
from loader.tse.batch import TseBatchBuilder
from loader.tse.items import length_filter, tse_items


__all__ = ["parse_dataset_args", "prepare", "unsupported"]


def unsupported(args: DatasetArgs, state: str) -> str | None:
    """What the config asks for that this version does not build yet (a message), else None.

    These keys are parsed and checked (``loader.tse.augment_args``), so a recipe that sets them to 0 loads; a
    value that would change training batches is refused rather than silently ignored.  Validation and test never
    augment (WeSep), so they load whatever the values are.
    """
    aug = args.augment
    if aug is None or state != "train":
        return None
    if aug.noise_prob > 0 and args.mix is None:
        return "noise_prob: noise on pre-mixed (offline) training is not supported yet (online_mix: true only)"
    if aug.noise_prob > 0 and aug.noise_lmdb_file is not None:
        return ("noise_lmdb_file: noise read from the LMDB at batch time is not supported yet; convert it once "
                "(speechpack build audio-bank --kind noise --lmdb PATH) and give noise_banks: [{path: PACK}]")
    if aug.reverb_prob > 0 and aug.reverb_conf is not None:
        return ("reverb_conf: simulated same-room reverberation is not supported yet; give rir_banks: "
                "[{path: PACK}] (speechpack build audio-bank --kind rir --simulate N)")
    for key in ("reverb_enroll_prob", "noise_enroll_prob"):
        if getattr(aug, key) > 0:
            return f"cue_processing.audio.{key}: enrollment augmentation is not supported yet (set it to 0)"
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
    return Prepared(builder=TseBatchBuilder(packs, kept, args, state, seed), item_pack=kept.pack, filtered=filtered,
                    filter_report={"filter_len": filtered} if filtered else {})
