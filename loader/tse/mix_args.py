"""``dataset_args`` keys of online mixing (``online_mix: true``): ``num_speakers``, ``mix_snr``, ``timeline``,
reverberation and noise, in WeSep's units (docs/loader.md "Online mixing").

The dataclasses hold each default next to its field and check their ranges in ``__post_init__`` (keys named by
their config path, see ``loader.tse.ranges``); ``parse_mix`` reads the config's shapes into them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loader.config import PackSource
from loader.config_checks import ConfigError, check_type, probability, take_known, value_range
from loader.tse.ranges import MAX_DB, at, check_finite, check_int, check_pair

#: Timeline positions of a two-speaker overlap, in the order of ``timeline.position_weights`` as a list.
TIMELINE_POSITIONS = ("head", "middle", "tail")
#: ``num_speakers.max_speakers`` bound: WeSep mixes a few speakers; 64 is far beyond any recipe.
MAX_SPEAKERS = 64


@dataclass(frozen=True)
class TimelineArgs:
    """``dataset_args.timeline`` (WeSep's generator; see docs/loader.md "Online mixing")."""

    #: two speakers: the overlap ``r ~ U(lo, hi)``, a fraction of the group length
    overlap_ratio: tuple[float, float] = (0.0, 1.0)
    #: weights of head, middle, tail for two speakers
    position_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    #: probability that a ``middle`` overlap is a containment (else a crossing)
    containment_prob: float = 0.5
    #: speakers 3+: one active segment of this fraction of the group length
    extra_speaker_activity: tuple[float, float] = (0.5, 1.0)

    def __post_init__(self) -> None:
        check_pair(self.overlap_ratio, "timeline.overlap_ratio", 0.0, 1.0)
        check_pair(self.extra_speaker_activity, "timeline.extra_speaker_activity", 0.0, 1.0)
        check_finite(self.containment_prob, "timeline.containment_prob", 0.0, 1.0)
        weights = self.position_weights
        if len(weights) != 3 or sum(check_finite(w, "timeline.position_weights", 0.0, 1e12) for w in weights) <= 0:
            raise ConfigError(f"{at('timeline.position_weights')}: expected 3 non-negative weights, not all 0, got "
                              f"{list(weights)!r}")


@dataclass(frozen=True)
class MixArgs:
    """The online mixing settings (``online_mix: true``), all in WeSep's units."""

    #: ``num_speakers.distribution``: P(1 speaker), P(2 speakers), P(3..max_speakers speakers, uniform)
    distribution: tuple[float, ...] = (0.0, 1.0, 0.0)
    max_speakers: int = 3
    #: ``mix_snr.range`` (dB): interferer SNRs (WeSep's default)
    snr_range: tuple[float, float] = (-5.0, 10.0)
    #: ``mix_snr.gain`` (dB): the mixture's final gain (WeSep's default)
    gain_range: tuple[float, float] = (-12.0, 0.0)
    timeline: TimelineArgs | None = None
    reverb_prob: float = 0.0
    rir_banks: tuple[str, ...] = ()
    reverb_keep_dry: bool = False
    noise_prob: float = 0.0
    noise_banks: tuple[str, ...] = ()
    #: dB, mixture over noise: WeSep's ``add_noise`` range for non-speech noise
    noise_snr: tuple[float, float] = (-5.0, 25.0)

    def __post_init__(self) -> None:
        dist = self.distribution
        if (len(dist) != 3 or not all(check_finite(p, "num_speakers.distribution", 0.0, 1.0) >= 0 for p in dist)
                or abs(sum(dist) - 1.0) > 1e-6):
            raise ConfigError(f"{at('num_speakers.distribution')}: expected 3 non-negative probabilities summing to "
                              f"1 (1, 2, 3..max_speakers speakers), got {list(dist)!r}")
        max_speakers = check_int(self.max_speakers, "num_speakers.max_speakers", 1, MAX_SPEAKERS)
        if (dist[2] > 0 and max_speakers < 3) or (dist[1] > 0 and max_speakers < 2):
            raise ConfigError(f"{at('num_speakers.max_speakers')}: {max_speakers} is below the speaker counts the "
                              f"distribution {list(dist)} asks for")
        check_pair(self.snr_range, "mix_snr.range", -MAX_DB, MAX_DB)
        check_pair(self.gain_range, "mix_snr.gain", -MAX_DB, MAX_DB)
        check_pair(self.noise_snr, "noise_snr", -MAX_DB, MAX_DB)
        for key in ("reverb_prob", "noise_prob"):
            check_finite(getattr(self, key), key, 0.0, 1.0)
        check_type(self.reverb_keep_dry, bool, at("reverb_keep_dry"))
        if self.reverb_prob > 0 and not self.rir_banks:
            raise ConfigError(f"{at('reverb_prob')}: {self.reverb_prob} needs rir_banks: [{{path: <rir bank pack>}}]")
        if self.noise_prob > 0 and not self.noise_banks:
            raise ConfigError(f"{at('noise_prob')}: {self.noise_prob} needs noise_banks: "
                              f"[{{path: <noise bank pack>}}]")


#: WeSep's default ``mix_snr`` as a config writes it (the values are ``MixArgs``'s defaults).
DEFAULT_MIX_SNR = {"range": list(MixArgs.snr_range), "gain": list(MixArgs.gain_range)}


def _banks(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: expected a non-empty list of {{path: ...}}")
    return tuple(PackSource.from_dict(entry, f"{where}[{i}]").path for i, entry in enumerate(value))


def parse_mix(v: dict, where: str) -> MixArgs | None:
    """``online_mix`` and its keys from the ``dataset_args`` values ``v``; ``None`` when off (then the mixing
    keys must be absent or off)."""
    reverb_prob = probability(v["reverb_prob"], f"{where}.reverb_prob")
    noise_prob = probability(v["noise_prob"], f"{where}.noise_prob")
    rir_banks = _banks(v["rir_banks"], f"{where}.rir_banks")
    noise_banks = _banks(v["noise_banks"], f"{where}.noise_banks")
    keep_dry = check_type(v["reverb_keep_dry"], bool, f"{where}.reverb_keep_dry")
    noise_snr = MixArgs.noise_snr if v["noise_snr"] is None else value_range(v["noise_snr"], f"{where}.noise_snr")
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
    spk = take_known(v["num_speakers"], f"{where}.num_speakers",
                     {"distribution": None, "max_speakers": MixArgs.max_speakers})
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
                     DEFAULT_MIX_SNR)
    return MixArgs(distribution=tuple(float(p) for p in dist), max_speakers=max_speakers,
                   snr_range=value_range(snr["range"], f"{where}.mix_snr.range"),
                   gain_range=value_range(snr["gain"], f"{where}.mix_snr.gain"),
                   timeline=None if v["timeline"] is None else _timeline(v["timeline"], f"{where}.timeline"),
                   reverb_prob=reverb_prob, rir_banks=rir_banks, reverb_keep_dry=keep_dry,
                   noise_prob=noise_prob, noise_banks=noise_banks, noise_snr=noise_snr)


def _timeline(obj: Any, at_: str) -> TimelineArgs:
    """``timeline``: ``overlap_ratio``, ``position_weights`` (``{head, middle, tail}`` or a list of 3),
    ``containment_prob``, ``extra_speaker_activity``."""
    t = take_known(obj, at_, {"overlap_ratio": list(TimelineArgs.overlap_ratio), "position_weights": None,
                              "containment_prob": TimelineArgs.containment_prob,
                              "extra_speaker_activity": list(TimelineArgs.extra_speaker_activity)})
    weights = t["position_weights"]
    if weights is None:
        weights = list(TimelineArgs.position_weights)
    elif isinstance(weights, dict):
        weights = [take_known(weights, f"{at_}.position_weights", dict.fromkeys(TIMELINE_POSITIONS, 0.0))[name]
                   for name in TIMELINE_POSITIONS]
    if (not isinstance(weights, (list, tuple)) or len(weights) != 3
            or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in weights)
            or sum(weights) <= 0):
        raise ConfigError(f"{at_}.position_weights: expected {{head, middle, tail}} (or a list of 3) non-negative "
                          f"weights, not all 0, got {weights!r}")
    prob = check_type(t["containment_prob"], (int, float), f"{at_}.containment_prob")
    if not 0 <= prob <= 1:
        raise ConfigError(f"{at_}.containment_prob: must be in [0, 1], got {prob}")
    return TimelineArgs(
        overlap_ratio=value_range(t["overlap_ratio"], f"{at_}.overlap_ratio", 0.0, 1.0),
        position_weights=tuple(float(w) for w in weights),
        containment_prob=float(prob),
        extra_speaker_activity=value_range(t["extra_speaker_activity"], f"{at_}.extra_speaker_activity", 0.0, 1.0))


__all__ = ["MAX_SPEAKERS", "MixArgs", "TIMELINE_POSITIONS", "TimelineArgs", "parse_mix"]
