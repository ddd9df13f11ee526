"""The loader's configuration: ``packs`` plus WeSep-compatible ``dataset_args``, checked key by key.

A config is a plain dict (usually loaded from YAML).  ``LoaderConfig.from_dict`` turns it into frozen
dataclasses and refuses any key it does not know, naming it, so a typo never silently becomes a default.
Defaults follow WeSep where WeSep has the key (``chunk_len`` = 3 s, ``chunk_short_policy`` = ``pad``,
``filter_len_args`` 1-1000 s), so a WeSep ``dataset_args`` block means the same thing here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loader.batching import BudgetArgs
from loader.config_checks import (  # the shared checks; task parsers import them from loader.config_checks
    MAX_EPOCH_ITEMS,
    ConfigError,
    check_choice,
    check_type,
    number,
    positive_int,
    probability,
    take_known,
    value_range,
)
from loader.normalize import NORMALIZE_TYPES
from loader.static_plan import TAIL_POLICIES
from loader.tasks import DEFAULT_TASK, STATES, task_module
from loader.tse.collate import ALIGNS as FIELD_ALIGNS
from loader.tse.collate import BASE_FIELDS, CUE_FIELDS, OVERRIDE_KEYS, PAD_MODES

SHORT_POLICIES = ("pad", "keep")
ALIGNS = ("max", "min")
#: Collated fields whose alignment can be overridden with ``collate.<field>.align``.
ALIGNABLE_FIELDS = ("wav_mix", "wav_target")
#: Keys of ``dataset_args.cues.<cue>`` (WeSep's experiment-side cue selection).
CUE_REQUEST_KEYS = ("use", "required", "default_shape", "fill_value", "emit_present")


#: Keys of a ``packs`` entry that set its count per epoch (at most one each; see loader.weighting).
WEIGHT_KEYS = ("weight", "hours_beta", "repeat", "choose")
#: Largest ``weighting.beta_corpus``/``beta_language``: hours ** beta stays finite for any corpus size (Omnilingual
#: uses 0.5; 0 is uniform, 1 proportional to hours).
MAX_BETA = 10.0


def _values(obj: Any) -> dict[str, Any]:
    """A dataclass's field values by name (what ``__post_init__`` checks)."""
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


def _check_pack_entry(v: dict[str, Any], where: str) -> None:
    """The rules of one ``packs`` entry (``v`` holds every PackSource field)."""
    if not isinstance(v["path"], str) or not v["path"]:
        raise ConfigError(f"{where}.path: a pack directory is required")
    given = [key for key in WEIGHT_KEYS if v[key] is not None and v[key] is not False]
    if len(given) > 1:
        raise ConfigError(f"{where}: {' and '.join(given)} together; set at most one of {', '.join(WEIGHT_KEYS)}")
    for key in ("weight", "repeat"):
        if v[key] is not None:
            if check_type(v[key], (int, float), f"{where}.{key}") < 0:
                raise ConfigError(f"{where}.{key}: must be non-negative, got {v[key]}")
            number(v[key], f"{where}.{key}", 0, MAX_EPOCH_ITEMS)
    if v["choose"] is not None:
        if check_type(v["choose"], int, f"{where}.choose") < 0:
            raise ConfigError(f"{where}.choose: must be a non-negative number of items, got {v['choose']}")
        positive_int(v["choose"], f"{where}.choose", minimum=0, maximum=MAX_EPOCH_ITEMS)
    check_type(v["hours_beta"], bool, f"{where}.hours_beta")
    for key in ("corpus", "language"):
        if v[key] is not None and (not isinstance(v[key], str) or not v[key]):
            raise ConfigError(f"{where}.{key}: expected a non-empty string, got {v[key]!r}")


@dataclass(frozen=True)
class PackSource:
    """One entry of ``packs``: its path and, optionally, how many items it gives each epoch.

    At most one of ``weight`` (relative share of the epoch), ``hours_beta: true`` (share by Omnilingual's
    hours ** beta rule, betas in the top-level ``weighting``), ``repeat`` (multiplier of the pack's items) or
    ``choose`` (items per epoch).  ``corpus`` and ``language`` group packs for ``hours_beta`` and the report;
    both default to the path.  Checked on construction, whether from a config or built directly.
    """

    path: str
    weight: float | None = None
    hours_beta: bool = False
    repeat: float | None = None
    choose: int | None = None
    corpus: str | None = None
    language: str | None = None

    def __post_init__(self) -> None:
        _check_pack_entry(_values(self), "PackSource")

    @property
    def weighted(self) -> bool:
        """Whether the entry sets any weighting key."""
        return (self.weight is not None or self.hours_beta or self.repeat is not None or self.choose is not None)

    @property
    def corpus_name(self) -> str:
        return self.corpus if self.corpus is not None else self.path

    @property
    def language_name(self) -> str:
        return self.language if self.language is not None else self.path

    @classmethod
    def from_dict(cls, obj: Any, where: str, weighting: bool = False) -> "PackSource":
        """``weighting`` False (banks: rir_banks, noise_banks) accepts ``path`` only."""
        defaults = {"path": None, "weight": None, "hours_beta": False, "repeat": None, "choose": None,
                    "corpus": None, "language": None}
        values = {**defaults, **take_known(obj, where, defaults if weighting else {"path": None})}
        _check_pack_entry(values, where)  # first, so the message names the config path
        return cls(path=values["path"],
                   weight=None if values["weight"] is None else float(values["weight"]),
                   hours_beta=values["hours_beta"],
                   repeat=None if values["repeat"] is None else float(values["repeat"]),
                   choose=values["choose"], corpus=values["corpus"], language=values["language"])


def _check_weighting(v: dict[str, Any], where: str) -> None:
    for key in ("beta_corpus", "beta_language"):
        if check_type(v[key], (int, float), f"{where}.{key}") < 0:
            raise ConfigError(f"{where}.{key}: must be non-negative, got {v[key]}")
        number(v[key], f"{where}.{key}", 0, MAX_BETA)
    if v["epoch_items"] is not None:
        if check_type(v["epoch_items"], int, f"{where}.epoch_items") < 1:
            raise ConfigError(f"{where}.epoch_items: must be at least 1, got {v['epoch_items']}")
        positive_int(v["epoch_items"], f"{where}.epoch_items", maximum=MAX_EPOCH_ITEMS)


@dataclass(frozen=True)
class Weighting:
    """Top-level ``weighting``: the betas of ``hours_beta`` (Omnilingual recipes use 0.5) and ``epoch_items``,
    the epoch size of proportional weighting (default: the sum of the packs' sizes).  How it fits the ``packs``
    entries is checked by ``LoaderConfig``."""

    beta_corpus: float = 0.5
    beta_language: float = 0.5
    epoch_items: int | None = None

    def __post_init__(self) -> None:
        _check_weighting(_values(self), "Weighting")

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> "Weighting":
        v = take_known(obj, where, {"beta_corpus": 0.5, "beta_language": 0.5, "epoch_items": None})
        _check_weighting(v, where)
        return cls(beta_corpus=float(v["beta_corpus"]), beta_language=float(v["beta_language"]),
                   epoch_items=v["epoch_items"])


def _check_packs_weighting(packs: Any, weighting: Weighting, where: str) -> None:
    """``packs`` is a non-empty sequence of ``PackSource`` whose weighting modes agree with ``weighting``."""
    if not isinstance(packs, tuple) or not packs or not all(isinstance(p, PackSource) for p in packs):
        raise ConfigError(f"{where}.packs: a non-empty list of {{path: ...}} is required")
    if not isinstance(weighting, Weighting):
        raise ConfigError(f"{where}.weighting: expected a Weighting, got {type(weighting).__name__}")
    modes = {"weight" if p.weight is not None else "hours_beta" if p.hours_beta
             else "repeat/choose/none" for p in packs}
    if len(modes) > 1 and modes & {"weight", "hours_beta"}:
        raise ConfigError(f"{where}.packs: proportions are all or none: every entry sets weight, or every "
                          f"entry sets hours_beta: true, or none does (got {', '.join(sorted(modes))})")
    proportional = bool(modes & {"weight", "hours_beta"})
    if proportional and sum(p.weight or 0.0 for p in packs) <= 0 and "weight" in modes:
        raise ConfigError(f"{where}.packs: the weights sum to 0")
    if weighting.epoch_items is not None and not proportional:
        raise ConfigError(f"{where}.weighting.epoch_items: only with weight or hours_beta entries (with "
                          f"repeat/choose the epoch size is the sum of the packs' counts)")


@dataclass(frozen=True)
class DatasetArgs:
    """``dataset_args``: what is read, how it is cut, normalised, batched and collated.

    ``chunk_len`` is in samples at ``resample_rate`` (WeSep's unit); ``None`` means 3 s.  ``tail`` says what
    happens to the last, incomplete round of batches: ``pad`` fills it with repeats flagged ``valid = False``
    (every sample is seen, training code masks the repeats), ``drop`` leaves the tail out (reported).
    ``cues`` selects speaker cues (WeSep's ``dataset_args.cues``); ``field_collate`` holds the ``collate.<field>``
    overrides of the cue fields and ``speaker_label``.  Checks that need the packs (the cue exists, ``required``
    against ``guaranteed``) happen when the loader is built (``loader.tse.cues.fields.resolve_cues``).
    """

    resample_rate: int | None = None
    whole_utt: bool = False
    chunk_len: int | None = None
    chunk_random_start: bool = True
    chunk_short_policy: str = "pad"
    filter_len: bool = False
    min_num_seconds: float = 1.0
    max_num_seconds: float = 1000.0
    shuffle: bool = True
    batch_size: int = 1
    tail: str = "pad"
    expand_targets: bool = False
    normalize: str | None = None
    align: tuple[tuple[str, str], ...] = (("wav_mix", "max"), ("wav_target", "max"))
    #: ``cues``: every ``dataset_args.cues.<name>`` entry, in config order (used or not).
    cues: tuple["CueRequest", ...] = ()
    #: ``collate.<field>`` overrides of the per-row fields (cue fields, ``speaker_label``):
    #: ``((field, ((key, value), ...)), ...)``.
    field_collate: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    #: ``online_mix: true``: the online mixing settings (``None`` when off); see ``MixArgs``.
    mix: "MixArgs | None" = None
    #: ``batching`` with ``type: budget`` (``None``: static batches of ``batch_size``); see ``loader.batching``.
    batching: "BudgetArgs | None" = None
    #: ``train_window``: train items longer than this many samples are tiled into near-equal chunks, each fed
    #: with ``hist_frames`` samples of unscored context before it (``loader.batching.tile_windows``).
    train_window: int | None = None
    hist_frames: int = 0

    @property
    def online_mix(self) -> bool:
        return self.mix is not None

    def align_of(self, name: str) -> str:
        return dict(self.align)[name]

    @property
    def used_cues(self) -> tuple["CueRequest", ...]:
        """The cues the experiment consumes (``use: true``), in ``dataset_args.cues`` order."""
        return tuple(cue for cue in self.cues if cue.use)

    def collate_of(self, field_name: str) -> dict[str, Any]:
        """The ``collate.<field>`` keys given for a per-row field (empty when none)."""
        return dict(dict(self.field_collate).get(field_name, ()))

    @classmethod
    def from_dict(cls, obj: Any, where: str = "dataset_args") -> "DatasetArgs":
        v = take_known(obj, where, {
            "resample_rate": None, "whole_utt": False, "chunk_len": None, "chunk_random_start": True,
            "chunk_short_policy": "pad", "filter_len": False, "filter_len_args": None, "shuffle": True,
            # Accepted for WeSep configs: the loader shuffles the whole epoch, so the buffer size has no role.
            "shuffle_args": None,
            "batch_size": 1, "tail": "pad", "expand_targets": False, "normalize": None, "collate": None,
            "cues": None,
            "online_mix": False, "num_speakers": None, "timeline": None, "mix_snr": None,
            # WeSep keys of features that are not built yet: present and off is fine, on is an error.
            "cue_processing": None, "reverb_prob": 0, "noise_prob": 0, "rir_banks": None, "noise_banks": None,
            "noise_snr": None, "reverb_keep_dry": False,
            "batching": None, "train_window": None, "hist_frames": 0,
        })
        for key in ("whole_utt", "chunk_random_start", "filter_len", "shuffle", "expand_targets", "online_mix"):
            check_type(v[key], bool, f"{where}.{key}")
        mix = _mix(v, where)
        if v["resample_rate"] is not None and (check_type(v["resample_rate"], int, f"{where}.resample_rate") <= 0):
            raise ConfigError(f"{where}.resample_rate: must be a positive number of Hz")
        if v["chunk_len"] is not None and check_type(v["chunk_len"], int, f"{where}.chunk_len") <= 0:
            raise ConfigError(f"{where}.chunk_len: must be a positive number of samples")
        if check_type(v["batch_size"], int, f"{where}.batch_size") < 1:
            raise ConfigError(f"{where}.batch_size: must be at least 1, got {v['batch_size']}")
        filter_args = take_known(v["filter_len_args"], f"{where}.filter_len_args",
                            {"min_num_seconds": 1.0, "max_num_seconds": 1000.0})
        for key, value in filter_args.items():
            check_type(value, (int, float), f"{where}.filter_len_args.{key}")
        if filter_args["min_num_seconds"] > filter_args["max_num_seconds"]:
            raise ConfigError(f"{where}.filter_len_args: min_num_seconds {filter_args['min_num_seconds']} > "
                              f"max_num_seconds {filter_args['max_num_seconds']}")
        take_known(v["shuffle_args"], f"{where}.shuffle_args", {"shuffle_size": None})
        _cue_processing(v["cue_processing"], f"{where}.cue_processing")
        cues = _cues(v["cues"], f"{where}.cues")
        align, field_collate = _collate(v["collate"], f"{where}.collate", cues)
        batch_size, batching = _batching(v["batching"], v["batch_size"], f"{where}.batching")
        train_window, hist = _train_window(v, mix, where)
        return cls(
            resample_rate=v["resample_rate"],
            whole_utt=v["whole_utt"],
            chunk_len=v["chunk_len"],
            chunk_random_start=v["chunk_random_start"],
            chunk_short_policy=check_choice(v["chunk_short_policy"], SHORT_POLICIES, f"{where}.chunk_short_policy"),
            filter_len=v["filter_len"],
            min_num_seconds=float(filter_args["min_num_seconds"]),
            max_num_seconds=float(filter_args["max_num_seconds"]),
            shuffle=v["shuffle"],
            batch_size=batch_size,
            tail=check_choice(v["tail"], TAIL_POLICIES, f"{where}.tail"),
            expand_targets=v["expand_targets"],
            normalize=_normalize(v["normalize"], f"{where}.normalize"),
            align=align,
            cues=cues,
            field_collate=field_collate,
            mix=mix,
            batching=batching,
            train_window=train_window,
            hist_frames=hist,
        )


def _batching(obj: Any, batch_size: int, where: str) -> tuple[int, "BudgetArgs | None"]:
    """``batching``: ``{type: static, batch_size}`` or ``{type: budget, max_frames | max_num_elements, cost,
    min_batch, max_batch, num_seqs_multiple_of, sort_window}`` (see ``loader.batching``)."""
    from loader.batching import BATCH_TYPES, COSTS, DEFAULT_WINDOW_ITEMS, BudgetArgs
    if obj is None:
        return batch_size, None
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping with type: static or budget, got {type(obj).__name__}")
    kind = check_choice(obj.get("type"), BATCH_TYPES, f"{where}.type")
    if kind == "static":
        v = take_known(obj, where, {"type": None, "batch_size": None})
        if v["batch_size"] is None:
            raise ConfigError(f"{where}.batch_size: static batching needs a batch size")
        size = positive_int(v["batch_size"], f"{where}.batch_size")
        if batch_size not in (1, size):
            raise ConfigError(f"{where}.batch_size: {size} differs from dataset_args.batch_size {batch_size}; "
                              f"set one of them")
        return size, None
    v = take_known(obj, where, {"type": None, "max_frames": None, "max_num_elements": None, "cost": "linear",
                           "min_batch": 1, "max_batch": None, "num_seqs_multiple_of": 1,
                           "sort_window": DEFAULT_WINDOW_ITEMS})
    if (v["max_frames"] is None) == (v["max_num_elements"] is None):
        raise ConfigError(f"{where}: budget batching needs exactly one of max_frames, max_num_elements")
    key = "max_frames" if v["max_frames"] is not None else "max_num_elements"
    budget = positive_int(v[key], f"{where}.{key}")
    min_batch = positive_int(v["min_batch"], f"{where}.min_batch")
    max_batch = None if v["max_batch"] is None else positive_int(v["max_batch"], f"{where}.max_batch")
    multiple = positive_int(v["num_seqs_multiple_of"], f"{where}.num_seqs_multiple_of")
    if max_batch is not None and (max_batch < min_batch or max_batch < multiple):
        raise ConfigError(f"{where}.max_batch: {max_batch} is below min_batch {min_batch} or "
                          f"num_seqs_multiple_of {multiple}")
    if batch_size != 1:
        raise ConfigError(f"{where}: dataset_args.batch_size {batch_size} is set too; budget batching sizes its "
                          f"own batches")
    return 1, BudgetArgs(budget=budget, cost=check_choice(v["cost"], COSTS, f"{where}.cost"), min_batch=min_batch,
                         max_batch=max_batch, multiple_of=multiple,
                         window_items=positive_int(v["sort_window"], f"{where}.sort_window"))


def _train_window(v: dict, mix: "MixArgs | None", where: str) -> tuple[int | None, int]:
    """``train_window`` and ``hist_frames`` (samples at the loader rate for TSE packs)."""
    hist = positive_int(v["hist_frames"], f"{where}.hist_frames", minimum=0)
    if v["train_window"] is None:
        if hist:
            raise ConfigError(f"{where}.hist_frames: only used with train_window")
        return None, 0
    window = positive_int(v["train_window"], f"{where}.train_window")
    if v["chunk_len"] is not None:
        raise ConfigError(f"{where}.train_window: an alternative to chunk_len (random windows); set one of them")
    if v["whole_utt"]:
        raise ConfigError(f"{where}.train_window: whole_utt: true feeds whole utterances; unset one of them")
    if mix is not None:
        raise ConfigError(f"{where}.train_window: not supported with online_mix yet")
    return window, hist


#: WeSep's default ``mix_snr`` (dB): interferer SNR range and the mixture's final gain range.
DEFAULT_MIX_SNR = {"range": [-5, 10], "gain": [-12, 0]}
#: WeSep's ``add_noise`` SNR range (dB) of non-speech noise.
DEFAULT_NOISE_SNR = (-5.0, 25.0)
#: Timeline positions of a two-speaker overlap, in the order of ``timeline.position_weights`` as a list.
TIMELINE_POSITIONS = ("head", "middle", "tail")


@dataclass(frozen=True)
class TimelineArgs:
    """``dataset_args.timeline`` (WeSep's generator; see docs/loader.md "Online mixing")."""

    overlap_ratio: tuple[float, float] = (0.0, 1.0)
    #: weights of head, middle, tail for two speakers
    position_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    #: probability that a ``middle`` overlap is a containment (else a crossing)
    containment_prob: float = 0.5
    extra_speaker_activity: tuple[float, float] = (0.5, 1.0)


@dataclass(frozen=True)
class MixArgs:
    """The online mixing settings (``online_mix: true``), all in WeSep's units."""

    #: P(1 speaker), P(2 speakers), P(3..max_speakers speakers, uniform)
    distribution: tuple[float, ...] = (0.0, 1.0, 0.0)
    max_speakers: int = 3
    snr_range: tuple[float, float] = (-5.0, 10.0)
    gain_range: tuple[float, float] = (-12.0, 0.0)
    timeline: TimelineArgs | None = None
    reverb_prob: float = 0.0
    rir_banks: tuple[str, ...] = ()
    reverb_keep_dry: bool = False
    noise_prob: float = 0.0
    noise_banks: tuple[str, ...] = ()
    noise_snr: tuple[float, float] = (-5.0, 25.0)


def _banks(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: expected a non-empty list of {{path: ...}}")
    return tuple(PackSource.from_dict(entry, f"{where}[{i}]").path for i, entry in enumerate(value))


def _mix(v: dict, where: str) -> MixArgs | None:
    """``online_mix`` and its keys: ``num_speakers``, ``timeline``, ``mix_snr``, reverberation and noise."""
    reverb_prob = probability(v["reverb_prob"], f"{where}.reverb_prob")
    noise_prob = probability(v["noise_prob"], f"{where}.noise_prob")
    rir_banks = _banks(v["rir_banks"], f"{where}.rir_banks")
    noise_banks = _banks(v["noise_banks"], f"{where}.noise_banks")
    keep_dry = check_type(v["reverb_keep_dry"], bool, f"{where}.reverb_keep_dry")
    noise_snr = DEFAULT_NOISE_SNR if v["noise_snr"] is None else value_range(v["noise_snr"], f"{where}.noise_snr")
    if not v["online_mix"]:
        for key in ("num_speakers", "timeline", "mix_snr", "rir_banks", "noise_banks", "noise_snr"):
            if v[key] is not None:
                raise ConfigError(f"{where}.{key}: only used with online_mix: true")
        for key in ("reverb_prob", "noise_prob"):
            if v[key] != 0:
                raise ConfigError(f"{where}.{key}: reverberation and noise are only built for online_mix: true")
        return None
    if reverb_prob > 0 and not rir_banks:
        raise ConfigError(f"{where}.reverb_prob: {reverb_prob} needs rir_banks: [{{path: <rir bank pack>}}]")
    if noise_prob > 0 and not noise_banks:
        raise ConfigError(f"{where}.noise_prob: {noise_prob} needs noise_banks: [{{path: <noise bank pack>}}]")
    if v["num_speakers"] is None:
        raise ConfigError(f"{where}.num_speakers: online_mix needs {{distribution: [p1, p2, p3], max_speakers: N}}")
    spk = take_known(v["num_speakers"], f"{where}.num_speakers", {"distribution": None, "max_speakers": 3})
    dist = spk["distribution"]
    if (not isinstance(dist, (list, tuple)) or len(dist) != 3
            or not all(isinstance(p, (int, float)) and not isinstance(p, bool) and p >= 0 for p in dist)
            or abs(sum(dist) - 1.0) > 1e-6):
        raise ConfigError(f"{where}.num_speakers.distribution: expected 3 non-negative probabilities summing to 1 "
                          f"(1, 2, 3..max_speakers speakers), got {dist!r}")
    max_speakers = check_type(spk["max_speakers"], int, f"{where}.num_speakers.max_speakers")
    if max_speakers < 1 or (dist[2] > 0 and max_speakers < 3) or (dist[1] > 0 and max_speakers < 2):
        raise ConfigError(f"{where}.num_speakers.max_speakers: {max_speakers} is below the speaker counts the "
                          f"distribution {list(dist)} asks for")
    snr = take_known(v["mix_snr"] if v["mix_snr"] is not None else DEFAULT_MIX_SNR, f"{where}.mix_snr",
                {"range": DEFAULT_MIX_SNR["range"], "gain": DEFAULT_MIX_SNR["gain"]})
    timeline = None
    if v["timeline"] is not None:
        at = f"{where}.timeline"
        t = take_known(v["timeline"], at, {"overlap_ratio": [0.0, 1.0], "position_weights": None,
                                      "containment_prob": 0.5, "extra_speaker_activity": [0.5, 1.0]})
        weights = t["position_weights"]
        if weights is None:
            weights = [1.0, 1.0, 1.0]
        elif isinstance(weights, dict):
            weights = [take_known(weights, f"{at}.position_weights", dict.fromkeys(TIMELINE_POSITIONS, 0.0))[name]
                       for name in TIMELINE_POSITIONS]
        if (not isinstance(weights, (list, tuple)) or len(weights) != 3
                or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in weights)
                or sum(weights) <= 0):
            raise ConfigError(f"{at}.position_weights: expected {{head, middle, tail}} (or a list of 3) non-negative "
                              f"weights, not all 0, got {weights!r}")
        prob = check_type(t["containment_prob"], (int, float), f"{at}.containment_prob")
        if not 0 <= prob <= 1:
            raise ConfigError(f"{at}.containment_prob: must be in [0, 1], got {prob}")
        timeline = TimelineArgs(
            overlap_ratio=value_range(t["overlap_ratio"], f"{at}.overlap_ratio", 0.0, 1.0),
            position_weights=tuple(float(w) for w in weights),
            containment_prob=float(prob),
            extra_speaker_activity=value_range(t["extra_speaker_activity"], f"{at}.extra_speaker_activity", 0.0, 1.0))
    return MixArgs(distribution=tuple(float(p) for p in dist), max_speakers=max_speakers,
                   snr_range=value_range(snr["range"], f"{where}.mix_snr.range"),
                   gain_range=value_range(snr["gain"], f"{where}.mix_snr.gain"), timeline=timeline,
                   reverb_prob=reverb_prob, rir_banks=rir_banks, reverb_keep_dry=keep_dry,
                   noise_prob=noise_prob, noise_banks=noise_banks, noise_snr=noise_snr)


def _normalize(value: Any, where: str) -> str | None:
    """``normalize``: false/null (off), true or ``"muvap"``, or ``{type: muvap}``."""
    if value in (None, False):
        return None
    if value is True:
        return "muvap"
    if isinstance(value, dict):
        value = take_known(value, where, {"type": "muvap"})["type"]
    return check_choice(value, NORMALIZE_TYPES, where)


@dataclass(frozen=True)
class CueRequest:
    """``dataset_args.cues.<name>``: whether the experiment consumes a cue, and how a missing one is filled.

    ``required`` ``None`` means "as the data promises" (the packs' ``cues.yaml`` ``guaranteed``); the other
    ``None`` values mean "not set here" (the cue's ``cues.yaml`` collate block or WeSep's base table decides).
    """

    name: str
    use: bool = False
    required: bool | None = None
    default_shape: tuple[int, ...] | None = None
    fill_value: float | int | None = None
    emit_present: bool | None = None

    @property
    def field(self) -> str:
        return CUE_FIELDS[self.name]

    def collate_defaults(self) -> dict[str, Any]:
        """The collate keys this entry sets (``default_shape``, ``fill_value``, ``emit_present``)."""
        values = {"default_shape": self.default_shape, "fill_value": self.fill_value,
                  "emit_present": self.emit_present}
        return {key: value for key, value in values.items() if value is not None}


def _shape(value: Any, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                       for d in value):
        raise ConfigError(f"{where}: expected a list of non-negative integers, got {value!r}")
    return tuple(value)


def _fill(value: Any, where: str) -> float | int | None:
    if value is not None:
        check_type(value, (int, float), where)
    return value


def _cues(obj: Any, where: str) -> tuple[CueRequest, ...]:
    """``dataset_args.cues``: ``{audio|spatial|visual|textual: {use, required, default_shape, fill_value,
    emit_present}}``, checked key by key; order kept (it is the order of the cue fields in a batch)."""
    if obj is None:
        return ()
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping of cue name to {{use: ...}}, got {type(obj).__name__}")
    requests = []
    for name, entry in obj.items():
        if name not in CUE_FIELDS:
            raise ConfigError(f"{where}: unknown cue {name!r} (known: {', '.join(CUE_FIELDS)})")
        v = take_known(entry, f"{where}.{name}", {key: None for key in CUE_REQUEST_KEYS})
        use = False if v["use"] is None else check_type(v["use"], bool, f"{where}.{name}.use")
        for key in ("required", "emit_present"):
            if v[key] is not None:
                check_type(v[key], bool, f"{where}.{name}.{key}")
        requests.append(CueRequest(name=name, use=use, required=v["required"],
                                   default_shape=_shape(v["default_shape"], f"{where}.{name}.default_shape"),
                                   fill_value=_fill(v["fill_value"], f"{where}.{name}.fill_value"),
                                   emit_present=v["emit_present"]))
    return tuple(requests)


def _cue_processing(obj: Any, where: str) -> None:
    """WeSep's enrollment augmentation: accepted when off (probabilities 0), an error otherwise."""
    audio = take_known(obj, where, {"audio": None})["audio"]
    probs = take_known(audio, f"{where}.audio", {"reverb_enroll_prob": 0, "noise_enroll_prob": 0})
    for key, value in probs.items():
        if check_type(value, (int, float), f"{where}.audio.{key}") != 0:
            raise ConfigError(f"{where}.audio.{key}: enrollment augmentation is not supported by this version of "
                              f"the loader (set it to 0)")


def _collate(obj: Any, where: str, cues: tuple[CueRequest, ...]
             ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]]:
    """``collate``: ``align`` of ``wav_mix``/``wav_target``; WeSep's spec keys of the per-row fields.

    A per-row field can be overridden only when it is registered: ``speaker_label`` always, a cue field when its
    cue is used (WeSep's build_collect_keys refuses the rest).
    """
    fields = take_known(obj, where, {name: None for name in (*ALIGNABLE_FIELDS, *BASE_FIELDS)})
    aligns = []
    for name in ALIGNABLE_FIELDS:
        spec = take_known(fields[name], f"{where}.{name}", {"align": "max"})
        aligns.append((name, check_choice(spec["align"], ALIGNS, f"{where}.{name}.align")))
    used = {cue.field: cue.name for cue in cues if cue.use}
    overrides = []
    for name in BASE_FIELDS:
        if fields[name] is None:
            continue
        at = f"{where}.{name}"
        if name != "speaker_label" and name not in used:
            cue = next(c for c, f in CUE_FIELDS.items() if f == name)
            raise ConfigError(f"{at}: cannot override unregistered field {name} (cue {cue!r} is not used: set "
                              f"dataset_args.cues.{cue}.use: true)")
        if not isinstance(fields[name], dict):
            raise ConfigError(f"{at}: expected a mapping, got {type(fields[name]).__name__}")
        unknown = sorted(set(fields[name]) - set(OVERRIDE_KEYS))
        if unknown:
            raise ConfigError(f"{at}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(OVERRIDE_KEYS))})")
        given = dict(fields[name])
        if "align" in given:
            if given["align"] not in FIELD_ALIGNS:
                raise ConfigError(f"{at}.align: {given['align']!r} is not one of max, min, null")
            if name == "speaker_label" and given["align"] is not None:
                raise ConfigError(f"{at}.align: speaker_label is one number per row; align must be null")
        if "pad_mode" in given:
            check_choice(given["pad_mode"], PAD_MODES, f"{at}.pad_mode")
        if "fill_value" in given:
            if given["fill_value"] is None:
                raise ConfigError(f"{at}.fill_value: a number is required")
            _fill(given["fill_value"], f"{at}.fill_value")
        if "default_shape" in given:
            given["default_shape"] = _shape(given["default_shape"], f"{at}.default_shape")
        if "emit_present" in given:
            check_type(given["emit_present"], bool, f"{at}.emit_present")
        overrides.append((name, tuple((key, given[key]) for key in OVERRIDE_KEYS if key in given)))
    return tuple(aligns), tuple(overrides)


@dataclass(frozen=True)
class LoaderConfig:
    """A checked loader config: ``packs``, the task's ``dataset_args``, ``weighting`` and ``task``.

    ``from_dict`` parses a config dict and names the key of any error by its path (``config.packs[1].weight``);
    an object built directly is checked on construction too, its keys named by field.
    """

    packs: tuple[PackSource, ...]
    #: The task's ``dataset_args`` dataclass (``DatasetArgs`` for ``tse``; see ``loader.tasks``).
    dataset_args: Any = field(default_factory=DatasetArgs)
    #: ``weighting``: betas and epoch size of the packs' weighting (docs/loader.md "Weighting").
    weighting: Weighting = field(default_factory=Weighting)
    #: ``task``: ``tse`` (default), ``asd`` or ``asr`` (``loader.tasks``).
    task: str = DEFAULT_TASK

    def __post_init__(self) -> None:
        task_module(check_type(self.task, str, "LoaderConfig.task"), "LoaderConfig.task")
        _check_packs_weighting(self.packs, self.weighting, "LoaderConfig")

    @property
    def weighted(self) -> bool:
        """Whether any ``packs`` entry sets a weighting key (else every item once per epoch, as before)."""
        return any(p.weighted for p in self.packs)

    @classmethod
    def from_dict(cls, obj: Any, where: str = "config") -> "LoaderConfig":
        values = take_known(obj, where, {"packs": None, "dataset_args": None, "weighting": None, "task": DEFAULT_TASK})
        task = check_type(values["task"], str, f"{where}.task")
        module = task_module(task, f"{where}.task")
        packs = values["packs"]
        if not isinstance(packs, list) or not packs:
            raise ConfigError(f"{where}.packs: a non-empty list of {{path: ...}} is required")
        sources = tuple(PackSource.from_dict(p, f"{where}.packs[{i}]", weighting=True) for i, p in enumerate(packs))
        dataset_args = module.parse_dataset_args(values["dataset_args"], f"{where}.dataset_args")
        weighting = Weighting.from_dict(values["weighting"], f"{where}.weighting")
        _check_packs_weighting(sources, weighting, where)
        return cls(packs=sources, dataset_args=dataset_args, weighting=weighting, task=task)
