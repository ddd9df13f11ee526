"""The ASD loader task (``task: asd``): MuVAP-style active speaker detection batches from ``asd`` packs.

``loader.torch.SpeechLoader`` plans and deals the batches; this module supplies what is ASD-specific
(``loader.tasks``): ``parse_dataset_args`` (``loader.asd.args``) and ``prepare``, which indexes the packs' face
tracks (``loader.asd.tracks``), reports the tracks that have no model frame, and returns the batch builder
(``loader.asd.batch``).
"""

from __future__ import annotations

import warnings

from speechpack.loader.asd.args import AsdArgs, parse_dataset_args
from speechpack.loader.asd.batch import AsdBatchBuilder
from speechpack.loader.asd.tracks import asd_tracks
from speechpack.loader.pack import Pack
from speechpack.loader.task import LoaderTask, Prepared

#: ``filter_report`` reason of the tracks too short for a single 25 Hz frame (one frame at 30 fps).
ZERO_MODEL_FRAMES = "zero_model_frames"
#: Keys named in the warning about such tracks (the count is always complete).
_KEYS_SHOWN = 5


def prepare(config, state: str, packs: list[Pack], seed: int) -> Prepared:
    """The builder for ``state`` over every track with at least one model frame; the others are counted under
    ``zero_model_frames`` in ``filter_report`` and named in a warning (they cannot be fed, so a native-rate
    evaluation must treat them as unscored)."""
    args: AsdArgs = config.dataset_args
    tracks, empty = asd_tracks(packs)
    if len(empty):
        keys = [str(packs[int(p)].keys[int(s)]) for p, s in zip(empty.pack[:_KEYS_SHOWN], empty.sample[:_KEYS_SHOWN])]
        warnings.warn(f"{len(empty)} ASD track(s) have no 25 Hz model frame and are not loaded "
                      f"({', '.join(keys)}{', ...' if len(empty) > _KEYS_SHOWN else ''}); see "
                      f"report().filter_report['{ZERO_MODEL_FRAMES}']", stacklevel=2)
    builder = AsdBatchBuilder(packs, tracks, args, state, seed)
    return Prepared(builder=builder, item_pack=tracks.pack.astype(int), filtered=len(empty),
                    filter_report={ZERO_MODEL_FRAMES: len(empty)})


class AsdTask(LoaderTask):
    """``task: asd`` (``loader.task.LoaderTask``)."""

    name = "asd"

    def parse_dataset_args(self, obj, where: str) -> AsdArgs:
        return parse_dataset_args(obj, where)

    def prepare(self, config, state: str, packs: list, seed: int) -> Prepared:
        return prepare(config, state, packs, seed)


TASK = AsdTask()

__all__ = ["TASK", "ZERO_MODEL_FRAMES", "AsdTask", "parse_dataset_args", "prepare"]
