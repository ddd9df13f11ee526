"""``dataset_args`` keys of online mixing (``online_mix: true``): ``num_speakers``, ``mix_snr`` and ``timeline``,
in WeSep's names and units (docs/loader.md "Online mixing"); reverberation and noise are further down.

The dataclasses hold each default next to its field and check their ranges in ``__post_init__`` (keys named by
their config path, see ``loader.config_checks.where_set``); ``parse_mix`` reads the config's shapes into them.

``dataset_args`` keys of augmentation: reverberation, noise and enrollment augmentation, in WeSep's names.

WeSep reverberates online mixtures only (``reverb_prob``, rooms from ``reverb_conf``), adds noise to the mixture
in offline (pre-mixed) and online training alike (``noise_prob``, noise from ``noise_lmdb_file``), and augments
waveform enrollments (``cue_processing.audio.{reverb_enroll_prob, noise_enroll_prob}``).  speechpack reads the same
keys, plus its own sources: ``rir_banks`` (pre-simulated or recorded RIRs, instead of simulating rooms) and
``noise_banks`` (noise packs, e.g. an LMDB converted once with ``speechpack build audio-bank --lmdb``).

``AugmentArgs`` holds them, each default next to its field and its range checked in ``__post_init__``;
``parse_augment`` reads the config's shapes into it.  docs/loader.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
import math

from speechpack.loader.config import PackSource
from speechpack.loader.config_checks import (
    MAX_DB,
    ConfigError,
    at,
    check_choice,
    check_finite,
    check_int,
    check_pair,
    check_type,
    probability,
    take_known,
    value_range,
)
from speechpack.loader.tse.room_sim import RoomConfig, WESEP_KEYS

from speechpack.schemas.documents import bounded_repr

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
    ``AugmentArgs`` (below; noise applies to pre-mixed training too)."""

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


#: ``reverb_conf`` bounds: rooms up to a concert hall's size (metres), RT60 up to 20 s, distances up to 100 m.
MAX_ROOM_M = 100.0
MAX_RT60_S = 20.0
MAX_MIC_DIST_M = 100.0
#: ``cue_processing`` sections WeSep recipes write; only ``audio`` has keys, the others are present and empty.
CUE_PROCESSING_SECTIONS = ("audio", "visual", "spatial", "textual")
#: ``augment_on``: where an online mixture's reverberation, noise and SNR mixing are applied.  ``worker``: while
#: the batch is built (the DataLoader's workers); ``batch``: to the collated batch where training runs, in torch
#: (``loader.tse.batch_augment``), from draw records the workers send with the dry sources.
AUGMENT_SIDES = ("worker", "batch")


@dataclass(frozen=True)
class AugmentArgs:
    """Reverberation, noise and enrollment augmentation (train only; WeSep's units)."""

    #: P(an online mixture is reverberated): one room per mixture, one RIR per source (online_mix only).
    reverb_prob: float = 0.0
    #: The rooms simulated (WeSep's ``reverb_conf``, its defaults when absent); ``None`` with ``rir_banks``.
    reverb_conf: RoomConfig | None = None
    #: RIR bank packs to draw RIRs from instead of simulating rooms.
    rir_banks: tuple[str, ...] = ()
    #: Targets stay dry (only the mixture is reverberant); WeSep's targets are the reverberant sources.
    reverb_keep_dry: bool = False
    #: P(noise is added to a mixture), online and offline; targets never get noise.
    noise_prob: float = 0.0
    #: WeSep's noise LMDB (``tools/make_lmdb.py``): keys by cursor, the pickled ``__keys__`` entry never read.
    noise_lmdb_file: str | None = None
    noise_banks: tuple[str, ...] = ()
    #: dB, mixture over noise, for every noise; ``None``: WeSep's rule by key (``speech*`` U[10, 30], others
    #: U[-5, 25]; ``media.noise_lmdb.noise_snr_range``).
    noise_snr: tuple[float, float] | None = None
    #: ``cue_processing.audio``: P(a waveform enrollment is reverberated / gets noise).
    reverb_enroll_prob: float = 0.0
    noise_enroll_prob: float = 0.0
    #: Where online mixtures are reverberated, noised and mixed (``AUGMENT_SIDES``); the draws are the same either
    #: way.  Enrollment augmentation always runs in the workers.
    augment_on: str = "worker"

    def __post_init__(self) -> None:
        for key in ("reverb_prob", "noise_prob"):
            check_finite(getattr(self, key), key, 0.0, 1.0)
        for key in ("reverb_enroll_prob", "noise_enroll_prob"):
            check_finite(getattr(self, key), f"cue_processing.audio.{key}", 0.0, 1.0)
        check_type(self.reverb_keep_dry, bool, at("reverb_keep_dry"))
        check_choice(self.augment_on, AUGMENT_SIDES, at("augment_on"))
        if self.noise_snr is not None:
            check_pair(self.noise_snr, "noise_snr", -MAX_DB, MAX_DB)
        if self.noise_lmdb_file is not None and (not isinstance(self.noise_lmdb_file, str)
                                                 or not self.noise_lmdb_file):
            raise ConfigError(f"{at('noise_lmdb_file')}: expected the path of a WeSep noise LMDB, got "
                              f"{self.noise_lmdb_file!r}")
        if self.noise_lmdb_file is not None and self.noise_banks:
            raise ConfigError(f"{at('noise_lmdb_file')}: noise_banks are given too; set one noise source")
        if self.reverb_conf is not None and self.rir_banks:
            raise ConfigError(f"{at('reverb_conf')}: rir_banks are given too; simulate rooms or draw RIRs from "
                              f"banks, not both")
        if self.reverb_conf is not None:
            _check_room_bounds(self.reverb_conf)
        noisy = [key for key in ("noise_prob", "noise_enroll_prob") if getattr(self, key) > 0]
        if noisy and not self.has_noise:
            raise ConfigError(f"{at(noisy[0])}: {getattr(self, noisy[0])} needs a noise source: noise_lmdb_file "
                              f"(a WeSep noise LMDB) or noise_banks: [{{path: <noise pack>}}]")
        rooms = [key for key in ("reverb_prob", "reverb_enroll_prob") if getattr(self, key) > 0]
        if rooms and self.reverb_conf is None and not self.rir_banks:
            raise ConfigError(f"{at(rooms[0])}: needs reverb_conf (rooms to simulate) or rir_banks")

    @property
    def has_noise(self) -> bool:
        return self.noise_lmdb_file is not None or bool(self.noise_banks)

    @property
    def active(self) -> bool:
        """Whether any augmentation changes batches."""
        return any(getattr(self, key) > 0 for key in ("reverb_prob", "noise_prob", "reverb_enroll_prob",
                                                      "noise_enroll_prob"))


def _check_room_bounds(conf: RoomConfig) -> None:
    """Upper bounds ``RoomConfig`` leaves open (it checks positivity and order)."""
    for name, values, high in (("min_max_room", (*conf.room_min, *conf.room_max), MAX_ROOM_M),
                               ("rt60", conf.rt60, MAX_RT60_S), ("mic_dist", conf.mic_dist, MAX_MIC_DIST_M)):
        if not all(math.isfinite(v) and v <= high for v in values):
            raise ConfigError(f"{at('reverb_conf.' + name)}: values must be at most {high}, got {list(values)}")


def _banks(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: expected a non-empty list of {{path: ...}}")
    return tuple(PackSource.from_dict(entry, f"{where}[{i}]").path for i, entry in enumerate(value))


def _room(conf: Any, where: str) -> RoomConfig:
    """``reverb_conf`` read by ``RoomConfig.from_wesep``, its errors named under ``where``."""
    if conf is not None and not isinstance(conf, dict):
        raise ConfigError(f"{where}: expected {{min_max_room, rt60, mic_dist}}, got {conf!r}")
    take_known(conf, where, dict.fromkeys(WESEP_KEYS))
    try:
        return RoomConfig.from_wesep(conf)
    except ConfigError as err:
        message = str(err)
        raise ConfigError(f"{where.rsplit('.', 1)[0]}.{message}" if message.startswith("reverb_conf")
                          else f"{where}: {message}") from None


def parse_augment(v: dict, where: str, online_mix: bool) -> AugmentArgs | None:
    """The augmentation keys of the ``dataset_args`` values ``v``; ``None`` when none is given."""
    keys = ("reverb_prob", "reverb_conf", "rir_banks", "reverb_keep_dry", "noise_prob", "noise_lmdb_file",
            "noise_banks", "noise_snr", "cue_processing")
    augment_on = v["augment_on"] if v["augment_on"] is not None else "worker"  # checked by AugmentArgs
    if augment_on == "batch" and not online_mix:
        raise ConfigError(f"{where}.augment_on: batch applies online mixing's reverberation and noise to the "
                          f"collated batch; it needs online_mix: true (pre-mixed noise is added in the workers)")
    if all(v[key] in (None, 0, False) for key in keys) and augment_on == "worker":
        return None
    reverb_prob = probability(v["reverb_prob"], f"{where}.reverb_prob")
    if reverb_prob > 0 and not online_mix:
        raise ConfigError(f"{where}.reverb_prob: WeSep reverberates online mixtures only (online_mix: true); "
                          f"pre-mixed audio is used as it is")
    rir_banks = _banks(v["rir_banks"], f"{where}.rir_banks")
    if v["reverb_conf"] is not None and rir_banks:
        raise ConfigError(f"{where}.reverb_conf: rir_banks are given too; simulate rooms or draw RIRs from banks, "
                          f"not both")
    enroll = _cue_processing(v["cue_processing"], f"{where}.cue_processing")
    needs_room = reverb_prob > 0 or enroll["reverb_enroll_prob"] > 0
    room = (_room(v["reverb_conf"], f"{where}.reverb_conf")
            if v["reverb_conf"] is not None or (needs_room and not rir_banks) else None)
    lmdb = v["noise_lmdb_file"]
    if lmdb is not None and (not isinstance(lmdb, str) or not lmdb):
        raise ConfigError(f"{where}.noise_lmdb_file: expected the path of a WeSep noise LMDB, got {lmdb!r}")
    return AugmentArgs(
        reverb_prob=reverb_prob, reverb_conf=room, rir_banks=rir_banks,
        reverb_keep_dry=check_type(v["reverb_keep_dry"], bool, f"{where}.reverb_keep_dry"),
        noise_prob=probability(v["noise_prob"], f"{where}.noise_prob"),
        noise_lmdb_file=lmdb,
        noise_banks=_banks(v["noise_banks"], f"{where}.noise_banks"),
        noise_snr=None if v["noise_snr"] is None else value_range(v["noise_snr"], f"{where}.noise_snr",
                                                                  -MAX_DB, MAX_DB),
        reverb_enroll_prob=enroll["reverb_enroll_prob"], noise_enroll_prob=enroll["noise_enroll_prob"],
        augment_on=augment_on)


def _cue_processing(obj: Any, where: str) -> dict[str, float]:
    """``cue_processing``: ``audio.{reverb_enroll_prob, noise_enroll_prob}``; ``visual``, ``spatial`` and
    ``textual`` are present with no value in WeSep recipes (they have no options)."""
    sections = take_known(obj, where, dict.fromkeys(CUE_PROCESSING_SECTIONS))
    for name in CUE_PROCESSING_SECTIONS[1:]:
        if sections[name] not in (None, {}):
            raise ConfigError(f"{where}.{name}: has no options (WeSep augments waveform enrollments only), got "
                              f"{sections[name]!r}")
    probs = take_known(sections["audio"], f"{where}.audio", {"reverb_enroll_prob": 0, "noise_enroll_prob": 0})
    return {key: probability(value, f"{where}.audio.{key}") for key, value in probs.items()}


__all__ = ["AUGMENT_SIDES", "AugmentArgs", "CUE_PROCESSING_SECTIONS", "MAX_SPEAKERS", "MIDDLE_MODES", "MIX_KEYS", "MixArgs",
           "TIMELINE_POSITIONS", "TimelineArgs", "parse_augment", "parse_mix"]
