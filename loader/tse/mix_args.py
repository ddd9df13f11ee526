"""``dataset_args`` keys of online mixing (``online_mix: true``): ``num_speakers``, ``mix_snr`` and ``timeline``,
in WeSep's names and units (docs/loader.md "Online mixing"); reverberation and noise are in
``loader.tse.augment_args``.

The dataclasses hold each default next to its field and check their ranges in ``__post_init__`` (keys named by
their config path, see ``loader.tse.ranges``); ``parse_mix`` reads the config's shapes into them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from speechpack.loader.config_checks import ConfigError, check_type, take_known, value_range
from speechpack.loader.tse.ranges import MAX_DB, at, check_finite, check_int, check_pair
from speechpack.schemas.bounded_repr import bounded_repr

#: ``timeline.two_speaker.overlap_position`` keys: where a two-speaker overlap sits, in the order weights are drawn.
TIMELINE_POSITIONS = ("head", "middle", "tail")
#: ``timeline.two_speaker.middle_mode`` keys: how a ``middle`` overlap is laid out.
MIDDLE_MODES = ("crossing", "containment")
#: Names of an earlier speechpack timeline -> WeSep's, which replace them.
OLD_TIMELINE_KEYS = {"position_weights": "two_speaker.overlap_position: {head, middle, tail}",
                     "containment_prob": "two_speaker.middle_mode: {crossing, containment}",
                     "overlap_ratio": "two_speaker.overlap_ratio"}
#: ``num_speakers.max_speakers`` bound: WeSep mixes a few speakers; 64 is far beyond any recipe.
MAX_SPEAKERS = 64
#: Largest weight of ``overlap_position`` / ``middle_mode`` (they are relative; this only stops nonsense).
MAX_WEIGHT = 1e12


@dataclass(frozen=True)
class TimelineArgs:
    """``dataset_args.timeline`` under WeSep's names (see docs/loader.md "Online mixing")."""

    #: ``two_speaker.overlap_ratio``: the overlap ``r ~ U(lo, hi)``, a fraction of the group length
    overlap_ratio: tuple[float, float] = (0.0, 1.0)
    #: ``two_speaker.overlap_position``: weights of head, middle, tail
    overlap_position: tuple[float, float, float] = (1.0, 1.0, 1.0)
    #: ``two_speaker.middle_mode``: weights of crossing, containment for a ``middle`` overlap
    middle_mode: tuple[float, float] = (1.0, 1.0)
    #: ``extra_speaker_activity``: speakers 3+ get one active segment of this fraction of the group length
    extra_speaker_activity: tuple[float, float] = (0.5, 1.0)

    def __post_init__(self) -> None:
        check_pair(self.overlap_ratio, "timeline.two_speaker.overlap_ratio", 0.0, 1.0)
        check_pair(self.extra_speaker_activity, "timeline.extra_speaker_activity", 0.0, 1.0)
        for key, names in (("overlap_position", TIMELINE_POSITIONS), ("middle_mode", MIDDLE_MODES)):
            weights = getattr(self, key)
            where = f"timeline.two_speaker.{key}"
            if (not isinstance(weights, (list, tuple)) or len(weights) != len(names)
                    or sum(check_finite(w, where, 0.0, MAX_WEIGHT) for w in weights) <= 0):
                raise ConfigError(f"{at(where)}: expected {len(names)} non-negative weights ({', '.join(names)}), "
                                  f"not all 0, got {weights!r}")

    @property
    def containment_prob(self) -> float:
        """P(a ``middle`` overlap is a containment)."""
        crossing, containment = self.middle_mode
        return containment / (crossing + containment)


@dataclass(frozen=True)
class MixArgs:
    """The online mixing settings (``online_mix: true``), all in WeSep's units.  Reverberation and noise are
    ``loader.tse.augment_args.AugmentArgs`` (noise applies to pre-mixed training too)."""

    #: ``num_speakers.distribution``: P(1 speaker), P(2 speakers), P(3..max_speakers speakers, uniform)
    distribution: tuple[float, ...] = (0.0, 1.0, 0.0)
    max_speakers: int = 3
    #: ``mix_snr.range`` (dB): interferer SNRs (WeSep's default)
    snr_range: tuple[float, float] = (-5.0, 10.0)
    #: ``mix_snr.gain`` (dB): the mixture's final gain (WeSep's default)
    gain_range: tuple[float, float] = (-12.0, 0.0)
    timeline: TimelineArgs | None = None

    def __post_init__(self) -> None:
        dist = self.distribution
        if (len(dist) != 3 or not all(check_finite(p, "num_speakers.distribution", 0.0, 1.0) >= 0 for p in dist)
                or abs(sum(dist) - 1.0) > 1e-6):
            raise ConfigError(f"{at('num_speakers.distribution')}: expected 3 non-negative probabilities summing to "
                              f"1 (1, 2, 3..max_speakers speakers), got {bounded_repr(dist)}")
        max_speakers = check_int(self.max_speakers, "num_speakers.max_speakers", 1, MAX_SPEAKERS)
        if (dist[2] > 0 and max_speakers < 3) or (dist[1] > 0 and max_speakers < 2):
            raise ConfigError(f"{at('num_speakers.max_speakers')}: {max_speakers} is below the speaker counts the "
                              f"distribution {list(dist)} asks for")
        check_pair(self.snr_range, "mix_snr.range", -MAX_DB, MAX_DB)
        check_pair(self.gain_range, "mix_snr.gain", -MAX_DB, MAX_DB)


#: WeSep's default ``mix_snr`` as a config writes it (the values are ``MixArgs``'s defaults).
DEFAULT_MIX_SNR = {"range": list(MixArgs.snr_range), "gain": list(MixArgs.gain_range)}
#: Keys that only online mixing reads.
MIX_KEYS = ("num_speakers", "timeline", "mix_snr")


def parse_mix(v: dict, where: str) -> MixArgs | None:
    """``online_mix`` and its keys from the ``dataset_args`` values ``v``; ``None`` when off (then the mixing
    keys must be absent)."""
    if not v["online_mix"]:
        for key in MIX_KEYS:
            if v[key] is not None:
                raise ConfigError(f"{where}.{key}: only used with online_mix: true")
        return None
    if v["num_speakers"] is None:
        raise ConfigError(f"{where}.num_speakers: online_mix needs {{distribution: [p1, p2, p3], max_speakers: N}}")
    spk = take_known(v["num_speakers"], f"{where}.num_speakers",
                     {"distribution": None, "max_speakers": MixArgs.max_speakers})
    dist = spk["distribution"]
    if (not isinstance(dist, (list, tuple)) or len(dist) != 3
            or not all(isinstance(p, (int, float)) and not isinstance(p, bool) and p >= 0 for p in dist)
            or abs(sum(dist) - 1.0) > 1e-6):
        raise ConfigError(f"{where}.num_speakers.distribution: expected 3 non-negative probabilities summing to 1 "
                          f"(1, 2, 3..max_speakers speakers), got {bounded_repr(dist)}")
    max_speakers = check_type(spk["max_speakers"], int, f"{where}.num_speakers.max_speakers")
    if max_speakers < 1 or (dist[2] > 0 and max_speakers < 3) or (dist[1] > 0 and max_speakers < 2):
        raise ConfigError(f"{where}.num_speakers.max_speakers: {max_speakers} is below the speaker counts the "
                          f"distribution {list(dist)} asks for")
    snr = take_known(v["mix_snr"] if v["mix_snr"] is not None else DEFAULT_MIX_SNR, f"{where}.mix_snr",
                     DEFAULT_MIX_SNR)
    return MixArgs(distribution=tuple(float(p) for p in dist), max_speakers=max_speakers,
                   snr_range=value_range(snr["range"], f"{where}.mix_snr.range"),
                   gain_range=value_range(snr["gain"], f"{where}.mix_snr.gain"),
                   timeline=None if v["timeline"] is None else _timeline(v["timeline"], f"{where}.timeline"))


def _weights(obj: Any, names: tuple[str, ...], at_: str) -> tuple[float, ...]:
    """``{name: weight}`` for ``names`` (absent names weigh 0; none given: all equal)."""
    if obj is None:
        return (1.0,) * len(names)
    values = take_known(obj, at_, dict.fromkeys(names, 0.0))
    for name in names:
        check_type(values[name], (int, float), f"{at_}.{name}")
    if not all(v >= 0 for v in values.values()) or sum(values.values()) <= 0:
        raise ConfigError(f"{at_}: expected non-negative weights of {', '.join(names)}, not all 0, got {obj!r}")
    return tuple(float(values[name]) for name in names)


def _timeline(obj: Any, at_: str) -> TimelineArgs:
    """``timeline``: ``two_speaker.{overlap_ratio, overlap_position, middle_mode}`` and ``extra_speaker_activity``
    (WeSep's names); the earlier flat names are errors naming their replacement."""
    if isinstance(obj, dict):
        for old, new in OLD_TIMELINE_KEYS.items():
            if old in obj:
                raise ConfigError(f"{at_}.{old}: renamed; use {at_}.{new} (WeSep's names)")
    t = take_known(obj, at_, {"two_speaker": None,
                              "extra_speaker_activity": list(TimelineArgs.extra_speaker_activity)})
    two = take_known(t["two_speaker"], f"{at_}.two_speaker",
                     {"overlap_ratio": list(TimelineArgs.overlap_ratio), "overlap_position": None,
                      "middle_mode": None})
    return TimelineArgs(
        overlap_ratio=value_range(two["overlap_ratio"], f"{at_}.two_speaker.overlap_ratio", 0.0, 1.0),
        overlap_position=_weights(two["overlap_position"], TIMELINE_POSITIONS, f"{at_}.two_speaker.overlap_position"),
        middle_mode=_weights(two["middle_mode"], MIDDLE_MODES, f"{at_}.two_speaker.middle_mode"),
        extra_speaker_activity=value_range(t["extra_speaker_activity"], f"{at_}.extra_speaker_activity", 0.0, 1.0))


__all__ = ["MAX_SPEAKERS", "MIDDLE_MODES", "MIX_KEYS", "MixArgs", "TIMELINE_POSITIONS", "TimelineArgs", "parse_mix"]
