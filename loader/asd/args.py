"""``dataset_args`` of an ``asd`` loader config (``task: asd``), checked key by key.

Defaults are MuVAP's ``asd.yaml`` (docs/asd.md, "``dataset_args``"), so a MuVAP experiment means the same thing here:

| key | default | meaning |
|---|---|---|
| ``train_window`` | 250 | fed model frames per training chunk, history included (``None``: whole tracks) |
| ``hist_frames`` | 50 | unscored history frames before each chunk (scored span = ``train_window - hist_frames``) |
| ``frame_budget`` | 2048 | train batches: about ``rows * frames`` frames (``loader.plan.batching.make_budget_plan``) |
| ``min_batch``, ``max_batch`` | 4, 16 | clamp of the train batch size (the contrastive term is a B-way task) |
| ``val_frame_budget`` | 4 x frame_budget | validation batches of whole tracks |
| ``val_max_batch`` | 64 | largest validation batch (smallest: 1) |
| ``shuffle`` | true | train order: a new shuffle and new batch composition every epoch |
| ``tail`` | pad | the last round of batches: repeats flagged ``valid = False`` (pad) or left out (drop) |
| ``audio_mix_prob`` | 0.5 | train: probability of mixing in a second voice from a different clip |
| ``audio_mix_snr`` | [-5, 5] | dB range of that mix |
| ``substitute_audio_prob`` | 0 | train: probability of replacing the audio by a voice from a different clip, labels 0 |
| ``jitter`` | false | train: each chunk's scored span moves to a random start in its track every epoch (MuVAP's) |
| ``visual_aug`` | true | train: one of orig/flip/crop/rotate per chunk |
| ``normalize`` | muvap | ``muvap`` (whole-recording gain) or ``none`` (the stored audio); ``loader.normalize`` |
| ``sort_window`` | 2**18 | chunks sorted by length together before batches are cut (``loader.plan.batching``) |

Every number has a range (``loader.config_checks``): batch sizes at most ``MAX_BATCH_ROWS`` rows, frames, budgets
and ``sort_window`` at most ``MAX_COUNT``, ``audio_mix_snr`` within +-``MAX_DB`` dB.  An ``AsdArgs`` built directly
is checked the same way.

Validation and test ignore the training-only keys: whole tracks, no augmentation, no shuffle.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from speechpack.loader.plan.batching import DEFAULT_WINDOW_ITEMS, BudgetArgs
from speechpack.loader.config_checks import (
    MAX_BATCH_ROWS,
    ConfigError,
    check_choice,
    check_type,
    db_range,
    positive_int,
    probability,
    take_known,
    value_range,
)
from speechpack.loader.normalize import MUVAP, NONE, parse_normalize
from speechpack.loader.plan.static_plan import TAIL_POLICIES
from speechpack.loader.tasks import PlanArgs

#: ``normalize`` values the ASD task builds (``loader.normalize``), in the order its errors list them.
NORMALIZE_CHOICES = (MUVAP, NONE)
#: The validation budget is this many times the training one unless set (MuVAP's default).
VAL_BUDGET_FACTOR = 4


@dataclass(frozen=True)
class AsdArgs:
    """The checked ``dataset_args`` (see the module docstring for each key)."""

    train_window: int | None = 250
    hist_frames: int = 50
    frame_budget: int = 2048
    min_batch: int = 4
    max_batch: int = 16
    #: ``None``: ``VAL_BUDGET_FACTOR * frame_budget`` (resolved on construction).
    val_frame_budget: int | None = None
    val_max_batch: int = 64
    shuffle: bool = True
    tail: str = "pad"
    audio_mix_prob: float = 0.5
    audio_mix_snr: tuple[float, float] = (-5.0, 5.0)
    substitute_audio_prob: float = 0.0
    jitter: bool = False
    visual_aug: bool = True
    normalize: str = MUVAP
    #: Items sorted by length together before cutting batches (``loader.plan.batching``, ``sort_window``).
    sort_window: int = DEFAULT_WINDOW_ITEMS

    def __post_init__(self) -> None:
        _check({f.name: getattr(self, f.name) for f in fields(self)}, "dataset_args")
        if self.val_frame_budget is None:
            object.__setattr__(self, "val_frame_budget", VAL_BUDGET_FACTOR * self.frame_budget)

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


def _check(v: dict, where: str) -> None:
    """Every value of ``v`` (one per ``AsdArgs`` field, ``normalize`` already in the one vocabulary) against its
    type and range, named under ``where``: run by the parser (config paths) and on construction."""
    if v["train_window"] is not None:
        positive_int(v["train_window"], f"{where}.train_window")
    hist = positive_int(v["hist_frames"], f"{where}.hist_frames", minimum=0)
    if v["train_window"] is not None and hist >= v["train_window"]:
        raise ConfigError(f"{where}.hist_frames: {hist} leaves no scored frame in train_window {v['train_window']} "
                          f"(each chunk scores train_window - hist_frames frames)")
    positive_int(v["frame_budget"], f"{where}.frame_budget")
    min_batch = positive_int(v["min_batch"], f"{where}.min_batch", maximum=MAX_BATCH_ROWS)
    max_batch = positive_int(v["max_batch"], f"{where}.max_batch", maximum=MAX_BATCH_ROWS)
    if max_batch < min_batch:
        raise ConfigError(f"{where}.max_batch: {max_batch} is below min_batch {min_batch}")
    if v["val_frame_budget"] is not None:
        positive_int(v["val_frame_budget"], f"{where}.val_frame_budget")
    positive_int(v["val_max_batch"], f"{where}.val_max_batch", maximum=MAX_BATCH_ROWS)
    for key in ("shuffle", "visual_aug", "jitter"):
        check_type(v[key], bool, f"{where}.{key}")
    check_choice(v["tail"], TAIL_POLICIES, f"{where}.tail")
    probability(v["audio_mix_prob"], f"{where}.audio_mix_prob")
    probability(v["substitute_audio_prob"], f"{where}.substitute_audio_prob")
    db_range(v["audio_mix_snr"], f"{where}.audio_mix_snr")
    check_choice(v["normalize"], NORMALIZE_CHOICES, f"{where}.normalize")
    positive_int(v["sort_window"], f"{where}.sort_window")


def parse_dataset_args(obj: dict | None, where: str = "dataset_args") -> AsdArgs:
    """Check ``dataset_args`` of an asd config; unknown keys and bad values raise ``ConfigError`` naming the key."""
    # The dataclass's defaults are the config's (val_frame_budget: None until resolved from frame_budget).
    known = {f.name: f.default for f in fields(AsdArgs)}
    v = take_known(obj, where, known)
    v["normalize"] = parse_normalize(v["normalize"], f"{where}.normalize", NORMALIZE_CHOICES, MUVAP)
    _check(v, where)  # first, so errors name the config path
    if v["train_window"] is None:
        v["hist_frames"] = 0
    return AsdArgs(**{**v, "audio_mix_prob": float(v["audio_mix_prob"]),
                      "substitute_audio_prob": float(v["substitute_audio_prob"]),
                      "audio_mix_snr": value_range(v["audio_mix_snr"], f"{where}.audio_mix_snr")})


__all__ = ["AsdArgs", "NORMALIZE_CHOICES", "parse_dataset_args"]
