"""``dataset_args`` of an ``asd`` loader config (``task: asd``), checked key by key.

Defaults are MuVAP's ``asd.yaml`` (docs/asd.md, "``dataset_args``"), so a MuVAP experiment means the same thing here:

| key | default | meaning |
|---|---|---|
| ``train_window`` | 250 | fed model frames per training chunk, history included (``None``: whole tracks) |
| ``hist_frames`` | 50 | unscored history frames before each chunk (scored span = ``train_window - hist_frames``) |
| ``frame_budget`` | 2048 | train batches: about ``rows * frames`` frames (``loader.batching.make_budget_plan``) |
| ``min_batch``, ``max_batch`` | 4, 16 | clamp of the train batch size (the contrastive term is a B-way task) |
| ``val_frame_budget`` | 4 x frame_budget | validation batches of whole tracks |
| ``val_max_batch`` | 64 | largest validation batch (smallest: 1) |
| ``shuffle`` | true | train order: a new shuffle and new batch composition every epoch |
| ``tail`` | pad | the last round of batches: repeats flagged ``valid = False`` (pad) or left out (drop) |
| ``audio_mix_prob`` | 0.5 | train: probability of mixing in a second voice from a different clip |
| ``audio_mix_snr`` | [-5, 5] | dB range of that mix |
| ``visual_aug`` | true | train: one of orig/flip/crop/rotate per chunk |
| ``normalize`` | muvap | ``muvap`` (whole-recording gain) or ``none`` (the stored audio); ``loader.normalize`` |
| ``sort_window`` | 2**18 | chunks sorted by length together before batches are cut (``loader.batching``) |

Validation and test ignore the training-only keys: whole tracks, no augmentation, no shuffle.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from loader.batching import DEFAULT_WINDOW_ITEMS, BudgetArgs
from loader.config_checks import (
    ConfigError,
    check_type,
    check_choice,
    positive_int,
    probability,
    value_range,
    take_known,
)
from loader.normalize import MUVAP, NONE, parse_normalize
from loader.static_plan import TAIL_POLICIES

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
    visual_aug: bool = True
    normalize: str = MUVAP
    #: Items sorted by length together before cutting batches (``loader.batching``, ``sort_window``).
    sort_window: int = DEFAULT_WINDOW_ITEMS

    def __post_init__(self) -> None:
        if self.val_frame_budget is None:
            object.__setattr__(self, "val_frame_budget", VAL_BUDGET_FACTOR * self.frame_budget)

    def plan_args(self, state: str) -> "PlanArgs":
        """What the loader's planner needs for ``state``: train chunks by ``frame_budget``, shuffled; validation
        whole tracks by ``val_frame_budget`` in a fixed order."""
        if state == "train":
            budget = BudgetArgs(budget=self.frame_budget, min_batch=self.min_batch, max_batch=self.max_batch,
                                window_items=self.sort_window)
            return PlanArgs(batch_size=1, batching=budget, shuffle=self.shuffle, tail=self.tail)
        budget = BudgetArgs(budget=self.val_frame_budget, min_batch=1, max_batch=self.val_max_batch,
                            window_items=self.sort_window)
        return PlanArgs(batch_size=1, batching=budget, shuffle=False, tail="pad")


@dataclass(frozen=True)
class PlanArgs:
    """The planner's view of the args (``loader.torch`` reads ``batch_size``, ``batching``, ``shuffle``, ``tail``).
    Validation always pads its tail: every track must be scored."""

    batch_size: int
    batching: BudgetArgs | None
    shuffle: bool
    tail: str


def parse_dataset_args(obj: dict | None, where: str = "dataset_args") -> AsdArgs:
    """Check ``dataset_args`` of an asd config; unknown keys and bad values raise ``ConfigError`` naming the key."""
    # The dataclass's defaults are the config's (val_frame_budget: None until resolved from frame_budget).
    known = {f.name: f.default for f in fields(AsdArgs)}
    v = take_known(obj, where, known)
    window = v["train_window"]
    if window is not None:
        window = positive_int(window, f"{where}.train_window")
    hist = positive_int(v["hist_frames"], f"{where}.hist_frames", minimum=0)
    if window is not None and hist >= window:
        raise ConfigError(f"{where}.hist_frames: {hist} leaves no scored frame in train_window {window} (each chunk "
                          f"scores train_window - hist_frames frames)")
    budget = positive_int(v["frame_budget"], f"{where}.frame_budget")
    min_batch = positive_int(v["min_batch"], f"{where}.min_batch")
    max_batch = positive_int(v["max_batch"], f"{where}.max_batch")
    if max_batch < min_batch:
        raise ConfigError(f"{where}.max_batch: {max_batch} is below min_batch {min_batch}")
    val_budget = (None if v["val_frame_budget"] is None
                  else positive_int(v["val_frame_budget"], f"{where}.val_frame_budget"))
    for key in ("shuffle", "visual_aug"):
        check_type(v[key], bool, f"{where}.{key}")
    return AsdArgs(
        train_window=window, hist_frames=hist if window is not None else 0, frame_budget=budget,
        min_batch=min_batch, max_batch=max_batch, val_frame_budget=val_budget,
        val_max_batch=positive_int(v["val_max_batch"], f"{where}.val_max_batch"),
        shuffle=v["shuffle"], tail=check_choice(v["tail"], TAIL_POLICIES, f"{where}.tail"),
        audio_mix_prob=probability(v["audio_mix_prob"], f"{where}.audio_mix_prob"),
        audio_mix_snr=value_range(v["audio_mix_snr"], f"{where}.audio_mix_snr"),
        visual_aug=v["visual_aug"],
        normalize=parse_normalize(v["normalize"], f"{where}.normalize", NORMALIZE_CHOICES, MUVAP),
        sort_window=positive_int(v["sort_window"], f"{where}.sort_window"))


__all__ = ["AsdArgs", "NORMALIZE_CHOICES", "PlanArgs", "parse_dataset_args"]
