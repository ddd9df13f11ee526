"""``dataset_args`` of an ``asd`` loader config (``task: asd``): every key declared once, in ``DATASET_ARGS``.

Defaults are MuVAP's ``asd.yaml`` (docs/asd.md, "``dataset_args``"), and so are the names, so a MuVAP experiment
means the same thing here.  The table below is ``DATASET_ARGS.markdown()`` (``loader.config_keys``; a test keeps
it and docs/asd.md equal to the declarations):

| key | type | default | meaning |
|---|---|---|---|
| `train_window` | int in [1, 2^40], or null | 250 | fed model frames per training chunk, history included; `null`: whole tracks |
| `hist_frames` | int in [0, 2^40] | 50 | unscored history frames before each chunk; a chunk scores `train_window - hist_frames` frames |
| `frame_budget` | int in [1, 2^40] | 2048 | a training batch holds about `rows x frames` model frames (`loader.plan.batching.make_budget_plan`) |
| `min_batch` | int in [1, 2^20] | 4 | smallest training batch (the contrastive term is a B-way task) |
| `max_batch` | int in [1, 2^20] | 16 | largest training batch |
| `val_frame_budget` | int in [1, 2^40], or null | 4 x `frame_budget` | validation/test batches of whole tracks hold about this many model frames |
| `val_max_batch` | int in [1, 2^20] | 64 | largest validation/test batch (smallest: 1) |
| `shuffle` | bool | true | training order and batch composition new every epoch |
| `tail` | pad, drop | pad | last round of training batches: repeats flagged `valid = False` (pad), or left out (drop); validation always pads |
| `audio_mix_prob` | number in [0, 1] | 0.5 | training: probability of mixing in a second voice from a different clip |
| `audio_mix_snr` | [low, high] dB within [-100, 100] | [-5, 5] | training: SNR range of that mix |
| `substitute_audio_prob` | number in [0, 1] | 0 | training: probability of replacing the audio by a voice from a different clip, labels set to 0 |
| `jitter` | bool | false | training: every chunk's scored span moves to a random start in its track, every epoch (MuVAP's) |
| `visual_aug` | bool | true | training: one of orig / flip / crop / rotate per chunk |
| `normalize` | muvap, none | muvap | `muvap`: MuVAP's whole-recording gain; `none`: the stored audio (`loader.normalize`; `true`/`false` too) |
| `sort_window` | int in [1, 2^40] | 262144 | chunks sorted by length together before batches are cut (`loader.plan.batching`) |
| `shard_window` | int in [1, 2^30], or null | none (whole-epoch shuffle) | shuffle within windows of this many shards (the shards shuffled, then the items within each window; batches kept in that order) instead of the whole epoch: each byte fetched about once per epoch from a store with a cache of a window's shards ([Shard windows](integrations.md#shard-windows)); unweighted epochs only |

Besides each key's own range: ``hist_frames`` is below ``train_window`` (a chunk scores ``train_window -
hist_frames`` frames) and ``max_batch`` is at least ``min_batch``.  An ``AsdArgs`` built directly is checked the
same way.  A config with ``train_window: null`` (whole tracks) has no history: its ``hist_frames`` is 0.

Validation and test ignore the training-only keys: whole tracks, no augmentation, no shuffle.
"""

from __future__ import annotations

from speechpack.loader.config_checks import MAX_BATCH_ROWS, MAX_DB, ConfigError
from speechpack.loader.config_keys import (SHARD_WINDOW, WHEN_SET, Bool, Int, Key, KeyTable, Nullable, OneOf,
                                           Probability, Range)
from speechpack.loader.normalize import MUVAP, NONE, parse_normalize
from speechpack.loader.plan.batching import DEFAULT_WINDOW_ITEMS, BudgetArgs
from speechpack.loader.plan.static_plan import TAIL_POLICIES
from speechpack.loader.tasks import PlanArgs

#: ``normalize`` values the ASD task builds (``loader.normalize``), in the order its errors list them.
NORMALIZE_CHOICES = (MUVAP, NONE)
#: The validation budget is this many times the training one unless set (MuVAP's default).
VAL_BUDGET_FACTOR = 4

_ROWS = Int(hi=MAX_BATCH_ROWS)


def _relate(v: dict, where: str) -> None:
    """What spans two keys: a chunk keeps a scored frame, and the batch-size clamp is not empty."""
    if v["train_window"] is not None and v["hist_frames"] >= v["train_window"]:
        raise ConfigError(f"{where}.hist_frames: {v['hist_frames']} leaves no scored frame in train_window "
                          f"{v['train_window']} (each chunk scores train_window - hist_frames frames)")
    if v["max_batch"] < v["min_batch"]:
        raise ConfigError(f"{where}.max_batch: {v['max_batch']} is below min_batch {v['min_batch']}")


def _read_normalize(value, where: str) -> str:
    """The one ``normalize`` vocabulary (``true``: ``muvap``; ``false``/``null``: ``none``; ``{type: X}``)."""
    return parse_normalize(value, where, NORMALIZE_CHOICES, MUVAP)


#: Every key of ASD's ``dataset_args``.  ``train_window`` and ``hist_frames`` came after the first states were
#: saved, so they are hashed only while set (whole tracks: None and 0).
DATASET_ARGS = KeyTable((
    Key("train_window", 250, Nullable(Int()), "fed model frames per training chunk, history included; `null`: "
        "whole tracks", fingerprint=WHEN_SET),
    Key("hist_frames", 50, Int(lo=0), "unscored history frames before each chunk; a chunk scores `train_window - "
        "hist_frames` frames", fingerprint=WHEN_SET),
    Key("frame_budget", 2048, Int(), "a training batch holds about `rows x frames` model frames "
        "(`loader.plan.batching.make_budget_plan`)"),
    Key("min_batch", 4, _ROWS, "smallest training batch (the contrastive term is a B-way task)"),
    Key("max_batch", 16, _ROWS, "largest training batch"),
    Key("val_frame_budget", None, Nullable(Int()), "validation/test batches of whole tracks hold about this many "
        "model frames", default_doc=f"{VAL_BUDGET_FACTOR} x `frame_budget`",
        derive=lambda v: VAL_BUDGET_FACTOR * v["frame_budget"]),
    Key("val_max_batch", 64, _ROWS, "largest validation/test batch (smallest: 1)"),
    Key("shuffle", True, Bool(), "training order and batch composition new every epoch"),
    Key("tail", "pad", OneOf(TAIL_POLICIES), "last round of training batches: repeats flagged `valid = False` "
        "(pad), or left out (drop); validation always pads"),
    Key("audio_mix_prob", 0.5, Probability(), "training: probability of mixing in a second voice from a different "
        "clip"),
    Key("audio_mix_snr", (-5.0, 5.0), Range(-MAX_DB, MAX_DB, "dB"), "training: SNR range of that mix"),
    Key("substitute_audio_prob", 0.0, Probability(), "training: probability of replacing the audio by a voice "
        "from a different clip, labels set to 0"),
    Key("jitter", False, Bool(), "training: every chunk's scored span moves to a random start in its track, every "
        "epoch (MuVAP's)"),
    Key("visual_aug", True, Bool(), "training: one of orig / flip / crop / rotate per chunk"),
    Key("normalize", MUVAP, OneOf(NORMALIZE_CHOICES), "`muvap`: MuVAP's whole-recording gain; `none`: the stored "
        "audio (`loader.normalize`; `true`/`false` too)", read=_read_normalize),
    Key("sort_window", DEFAULT_WINDOW_ITEMS, Int(), "chunks sorted by length together before batches are cut "
        "(`loader.plan.batching`)"),
    SHARD_WINDOW,
), relate=_relate)


@DATASET_ARGS.args_class("dataset_args")
class AsdArgs:
    """The checked ``dataset_args``: one field per key of ``DATASET_ARGS``, checked on construction
    (``val_frame_budget`` resolved from ``frame_budget`` when None)."""

    def plan_args(self, state: str) -> PlanArgs:
        """What the loader's planner needs for ``state``: train chunks by ``frame_budget``, shuffled; validation
        whole tracks by ``val_frame_budget`` in a fixed order."""
        if state == "train":
            budget = BudgetArgs(budget=self.frame_budget, min_batch=self.min_batch, max_batch=self.max_batch,
                                window_items=self.sort_window)
            return PlanArgs(batch_size=1, batching=budget, shuffle=self.shuffle, tail=self.tail)
        budget = BudgetArgs(budget=self.val_frame_budget, min_batch=1, max_batch=self.val_max_batch,
                            window_items=self.sort_window)
        return PlanArgs(batch_size=1, batching=budget, shuffle=False, tail="pad")


def parse_dataset_args(obj: dict | None, where: str = "dataset_args") -> AsdArgs:
    """Check ``dataset_args`` of an asd config; unknown keys and bad values raise ``ConfigError`` naming the key."""
    values = DATASET_ARGS.parse(obj, where)  # checked once, so errors name the config path
    if values["train_window"] is None:
        values["hist_frames"] = 0  # whole tracks have no history
    return DATASET_ARGS.held(AsdArgs, values)


__all__ = ["AsdArgs", "DATASET_ARGS", "NORMALIZE_CHOICES", "VAL_BUDGET_FACTOR", "parse_dataset_args"]
