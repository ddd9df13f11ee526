"""The loader's configuration: ``packs`` plus WeSep-compatible ``dataset_args``, checked key by key.

A config is a plain dict (usually loaded from YAML).  ``LoaderConfig.from_dict`` turns it into frozen
dataclasses and refuses any key it does not know, naming it, so a typo never silently becomes a default.
Defaults follow WeSep where WeSep has the key (``chunk_len`` = 3 s, ``chunk_short_policy`` = ``pad``,
``filter_len_args`` 1-1000 s), so a WeSep ``dataset_args`` block means the same thing here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loader.collate import ALIGNS as FIELD_ALIGNS
from loader.collate import BASE_FIELDS, CUE_FIELDS, OVERRIDE_KEYS, PAD_MODES
from schemas.errors import SpeechpackError

STATES = ("train", "val", "test")
SHORT_POLICIES = ("pad", "keep")
TAIL_POLICIES = ("pad", "drop")
ALIGNS = ("max", "min")
#: Collated fields whose alignment can be overridden with ``collate.<field>.align``.
ALIGNABLE_FIELDS = ("wav_mix", "wav_target")
#: Keys of ``dataset_args.cues.<cue>`` (WeSep's experiment-side cue selection).
CUE_REQUEST_KEYS = ("use", "required", "default_shape", "fill_value", "emit_present")

#: MuVAP's loudness normalisation (notes-muvap.md section 2): target RMS, gain cap, peak cap.
NORMALIZE_TARGET_RMS_DBFS = -25.0
NORMALIZE_MAX_GAIN_DB = 20.0
NORMALIZE_PEAK_LIMIT = 0.99
NORMALIZE_TYPES = ("muvap",)


class ConfigError(SpeechpackError):
    """A loader config key is unknown, missing or out of range (the message names it)."""


def _take(obj: Any, where: str, known: dict[str, Any]) -> dict:
    """``obj``'s values for the keys of ``known`` (defaults where absent); any other key is an error."""
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return {key: obj.get(key, default) for key, default in known.items()}


def _check_type(value: Any, kinds: type | tuple, where: str) -> Any:
    kinds_t = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool) and bool not in kinds_t:
        raise ConfigError(f"{where}: expected {'/'.join(k.__name__ for k in kinds_t)}, got {value!r}")
    if not isinstance(value, kinds_t):
        raise ConfigError(f"{where}: expected {'/'.join(k.__name__ for k in kinds_t)}, got {value!r}")
    return value


def _choice(value: Any, choices: tuple, where: str) -> str:
    if value not in choices:
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


@dataclass(frozen=True)
class PackSource:
    """One entry of ``packs``."""

    path: str

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> "PackSource":
        values = _take(obj, where, {"path": None})
        if not isinstance(values["path"], str) or not values["path"]:
            raise ConfigError(f"{where}.path: a pack directory is required")
        return cls(path=values["path"])


@dataclass(frozen=True)
class DatasetArgs:
    """``dataset_args``: what is read, how it is cut, normalised, batched and collated.

    ``chunk_len`` is in samples at ``resample_rate`` (WeSep's unit); ``None`` means 3 s.  ``tail`` says what
    happens to the last, incomplete round of batches: ``pad`` fills it with repeats flagged ``valid = False``
    (every sample is seen, training code masks the repeats), ``drop`` leaves the tail out (reported).
    ``cues`` selects speaker cues (WeSep's ``dataset_args.cues``); ``field_collate`` holds the ``collate.<field>``
    overrides of the cue fields and ``speaker_label``.  Checks that need the packs (the cue exists, ``required``
    against ``guaranteed``) happen when the loader is built (``loader.cues.resolve_cues``).
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
        v = _take(obj, where, {
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
        })
        for key in ("whole_utt", "chunk_random_start", "filter_len", "shuffle", "expand_targets", "online_mix"):
            _check_type(v[key], bool, f"{where}.{key}")
        mix = _mix(v, where)
        if v["resample_rate"] is not None and (_check_type(v["resample_rate"], int, f"{where}.resample_rate") <= 0):
            raise ConfigError(f"{where}.resample_rate: must be a positive number of Hz")
        if v["chunk_len"] is not None and _check_type(v["chunk_len"], int, f"{where}.chunk_len") <= 0:
            raise ConfigError(f"{where}.chunk_len: must be a positive number of samples")
        if _check_type(v["batch_size"], int, f"{where}.batch_size") < 1:
            raise ConfigError(f"{where}.batch_size: must be at least 1, got {v['batch_size']}")
        filter_args = _take(v["filter_len_args"], f"{where}.filter_len_args",
                            {"min_num_seconds": 1.0, "max_num_seconds": 1000.0})
        for key, value in filter_args.items():
            _check_type(value, (int, float), f"{where}.filter_len_args.{key}")
        if filter_args["min_num_seconds"] > filter_args["max_num_seconds"]:
            raise ConfigError(f"{where}.filter_len_args: min_num_seconds {filter_args['min_num_seconds']} > "
                              f"max_num_seconds {filter_args['max_num_seconds']}")
        _take(v["shuffle_args"], f"{where}.shuffle_args", {"shuffle_size": None})
        _cue_processing(v["cue_processing"], f"{where}.cue_processing")
        cues = _cues(v["cues"], f"{where}.cues")
        align, field_collate = _collate(v["collate"], f"{where}.collate", cues)
        return cls(
            resample_rate=v["resample_rate"],
            whole_utt=v["whole_utt"],
            chunk_len=v["chunk_len"],
            chunk_random_start=v["chunk_random_start"],
            chunk_short_policy=_choice(v["chunk_short_policy"], SHORT_POLICIES, f"{where}.chunk_short_policy"),
            filter_len=v["filter_len"],
            min_num_seconds=float(filter_args["min_num_seconds"]),
            max_num_seconds=float(filter_args["max_num_seconds"]),
            shuffle=v["shuffle"],
            batch_size=v["batch_size"],
            tail=_choice(v["tail"], TAIL_POLICIES, f"{where}.tail"),
            expand_targets=v["expand_targets"],
            normalize=_normalize(v["normalize"], f"{where}.normalize"),
            align=align,
            cues=cues,
            field_collate=field_collate,
            mix=mix,
        )


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


def _range(value: Any, where: str, lo: float | None = None, hi: float | None = None) -> tuple[float, float]:
    """A ``[lo, hi]`` pair of numbers, ``lo <= hi``, optionally within ``[lo, hi]`` bounds."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"{where}: expected [low, high], got {value!r}")
    for x in value:
        _check_type(x, (int, float), where)
    a, b = float(value[0]), float(value[1])
    if a > b:
        raise ConfigError(f"{where}: low {a} > high {b}")
    if (lo is not None and a < lo) or (hi is not None and b > hi):
        raise ConfigError(f"{where}: must lie within [{lo}, {hi}], got {value!r}")
    return a, b


def _banks(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: expected a non-empty list of {{path: ...}}")
    return tuple(PackSource.from_dict(entry, f"{where}[{i}]").path for i, entry in enumerate(value))


def _prob(value: Any, where: str) -> float:
    if not 0 <= _check_type(value, (int, float), where) <= 1:
        raise ConfigError(f"{where}: must be in [0, 1], got {value}")
    return float(value)


def _mix(v: dict, where: str) -> MixArgs | None:
    """``online_mix`` and its keys: ``num_speakers``, ``timeline``, ``mix_snr``, reverberation and noise."""
    reverb_prob = _prob(v["reverb_prob"], f"{where}.reverb_prob")
    noise_prob = _prob(v["noise_prob"], f"{where}.noise_prob")
    rir_banks = _banks(v["rir_banks"], f"{where}.rir_banks")
    noise_banks = _banks(v["noise_banks"], f"{where}.noise_banks")
    keep_dry = _check_type(v["reverb_keep_dry"], bool, f"{where}.reverb_keep_dry")
    noise_snr = DEFAULT_NOISE_SNR if v["noise_snr"] is None else _range(v["noise_snr"], f"{where}.noise_snr")
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
    spk = _take(v["num_speakers"], f"{where}.num_speakers", {"distribution": None, "max_speakers": 3})
    dist = spk["distribution"]
    if (not isinstance(dist, (list, tuple)) or len(dist) != 3
            or not all(isinstance(p, (int, float)) and not isinstance(p, bool) and p >= 0 for p in dist)
            or abs(sum(dist) - 1.0) > 1e-6):
        raise ConfigError(f"{where}.num_speakers.distribution: expected 3 non-negative probabilities summing to 1 "
                          f"(1, 2, 3..max_speakers speakers), got {dist!r}")
    max_speakers = _check_type(spk["max_speakers"], int, f"{where}.num_speakers.max_speakers")
    if max_speakers < 1 or (dist[2] > 0 and max_speakers < 3) or (dist[1] > 0 and max_speakers < 2):
        raise ConfigError(f"{where}.num_speakers.max_speakers: {max_speakers} is below the speaker counts the "
                          f"distribution {list(dist)} asks for")
    snr = _take(v["mix_snr"] if v["mix_snr"] is not None else DEFAULT_MIX_SNR, f"{where}.mix_snr",
                {"range": DEFAULT_MIX_SNR["range"], "gain": DEFAULT_MIX_SNR["gain"]})
    timeline = None
    if v["timeline"] is not None:
        at = f"{where}.timeline"
        t = _take(v["timeline"], at, {"overlap_ratio": [0.0, 1.0], "position_weights": None,
                                      "containment_prob": 0.5, "extra_speaker_activity": [0.5, 1.0]})
        weights = t["position_weights"]
        if weights is None:
            weights = [1.0, 1.0, 1.0]
        elif isinstance(weights, dict):
            weights = [_take(weights, f"{at}.position_weights", dict.fromkeys(TIMELINE_POSITIONS, 0.0))[name]
                       for name in TIMELINE_POSITIONS]
        if (not isinstance(weights, (list, tuple)) or len(weights) != 3
                or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in weights)
                or sum(weights) <= 0):
            raise ConfigError(f"{at}.position_weights: expected {{head, middle, tail}} (or a list of 3) non-negative "
                              f"weights, not all 0, got {weights!r}")
        prob = _check_type(t["containment_prob"], (int, float), f"{at}.containment_prob")
        if not 0 <= prob <= 1:
            raise ConfigError(f"{at}.containment_prob: must be in [0, 1], got {prob}")
        timeline = TimelineArgs(
            overlap_ratio=_range(t["overlap_ratio"], f"{at}.overlap_ratio", 0.0, 1.0),
            position_weights=tuple(float(w) for w in weights),
            containment_prob=float(prob),
            extra_speaker_activity=_range(t["extra_speaker_activity"], f"{at}.extra_speaker_activity", 0.0, 1.0))
    return MixArgs(distribution=tuple(float(p) for p in dist), max_speakers=max_speakers,
                   snr_range=_range(snr["range"], f"{where}.mix_snr.range"),
                   gain_range=_range(snr["gain"], f"{where}.mix_snr.gain"), timeline=timeline,
                   reverb_prob=reverb_prob, rir_banks=rir_banks, reverb_keep_dry=keep_dry,
                   noise_prob=noise_prob, noise_banks=noise_banks, noise_snr=noise_snr)


def _normalize(value: Any, where: str) -> str | None:
    """``normalize``: false/null (off), true or ``"muvap"``, or ``{type: muvap}``."""
    if value in (None, False):
        return None
    if value is True:
        return "muvap"
    if isinstance(value, dict):
        value = _take(value, where, {"type": "muvap"})["type"]
    return _choice(value, NORMALIZE_TYPES, where)


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
        _check_type(value, (int, float), where)
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
        v = _take(entry, f"{where}.{name}", {key: None for key in CUE_REQUEST_KEYS})
        use = False if v["use"] is None else _check_type(v["use"], bool, f"{where}.{name}.use")
        for key in ("required", "emit_present"):
            if v[key] is not None:
                _check_type(v[key], bool, f"{where}.{name}.{key}")
        requests.append(CueRequest(name=name, use=use, required=v["required"],
                                   default_shape=_shape(v["default_shape"], f"{where}.{name}.default_shape"),
                                   fill_value=_fill(v["fill_value"], f"{where}.{name}.fill_value"),
                                   emit_present=v["emit_present"]))
    return tuple(requests)


def _cue_processing(obj: Any, where: str) -> None:
    """WeSep's enrollment augmentation: accepted when off (probabilities 0), an error otherwise."""
    audio = _take(obj, where, {"audio": None})["audio"]
    probs = _take(audio, f"{where}.audio", {"reverb_enroll_prob": 0, "noise_enroll_prob": 0})
    for key, value in probs.items():
        if _check_type(value, (int, float), f"{where}.audio.{key}") != 0:
            raise ConfigError(f"{where}.audio.{key}: enrollment augmentation is not supported by this version of "
                              f"the loader (set it to 0)")


def _collate(obj: Any, where: str, cues: tuple[CueRequest, ...]
             ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]]:
    """``collate``: ``align`` of ``wav_mix``/``wav_target``; WeSep's spec keys of the per-row fields.

    A per-row field can be overridden only when it is registered: ``speaker_label`` always, a cue field when its
    cue is used (WeSep's build_collect_keys refuses the rest).
    """
    fields = _take(obj, where, {name: None for name in (*ALIGNABLE_FIELDS, *BASE_FIELDS)})
    aligns = []
    for name in ALIGNABLE_FIELDS:
        spec = _take(fields[name], f"{where}.{name}", {"align": "max"})
        aligns.append((name, _choice(spec["align"], ALIGNS, f"{where}.{name}.align")))
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
            _choice(given["pad_mode"], PAD_MODES, f"{at}.pad_mode")
        if "fill_value" in given:
            if given["fill_value"] is None:
                raise ConfigError(f"{at}.fill_value: a number is required")
            _fill(given["fill_value"], f"{at}.fill_value")
        if "default_shape" in given:
            given["default_shape"] = _shape(given["default_shape"], f"{at}.default_shape")
        if "emit_present" in given:
            _check_type(given["emit_present"], bool, f"{at}.emit_present")
        overrides.append((name, tuple((key, given[key]) for key in OVERRIDE_KEYS if key in given)))
    return tuple(aligns), tuple(overrides)


@dataclass(frozen=True)
class LoaderConfig:
    packs: tuple[PackSource, ...]
    dataset_args: DatasetArgs = field(default_factory=DatasetArgs)

    @classmethod
    def from_dict(cls, obj: Any, where: str = "config") -> "LoaderConfig":
        values = _take(obj, where, {"packs": None, "dataset_args": None})
        packs = values["packs"]
        if not isinstance(packs, list) or not packs:
            raise ConfigError(f"{where}.packs: a non-empty list of {{path: ...}} is required")
        return cls(
            packs=tuple(PackSource.from_dict(p, f"{where}.packs[{i}]") for i, p in enumerate(packs)),
            dataset_args=DatasetArgs.from_dict(values["dataset_args"], f"{where}.dataset_args"),
        )
