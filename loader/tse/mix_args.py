"""``dataset_args`` keys of online mixing (``online_mix: true``): ``num_speakers``, ``mix_snr`` and ``timeline``,
in WeSep's names and units (docs/loader.md "Online mixing"); reverberation and noise are further down.

Each key is declared once, in a ``loader.config_keys.KeyTable``: ``MIX`` (its mappings ``NUM_SPEAKERS``,
``MIX_SNR`` and ``TIMELINE``/``TWO_SPEAKER``) makes ``MixArgs`` and ``TimelineArgs``; the tables give each key its
default, its check (run once, errors naming the config path) and its docs row (``loader.tse.args.DATASET_ARGS``
holds them as ``Flat`` fields, so they are ``dataset_args`` keys of their own).  ``parse_mix`` says when they apply.

``dataset_args`` keys of augmentation: reverberation, noise and enrollment augmentation, in WeSep's names.

WeSep reverberates online mixtures only (``reverb_prob``, rooms from ``reverb_conf``), adds noise to the mixture
in offline (pre-mixed) and online training alike (``noise_prob``, noise from ``noise_lmdb_file``), and augments
waveform enrollments (``cue_processing.audio.{reverb_enroll_prob, noise_enroll_prob}``).  speechpack reads the same
keys, plus its own sources: ``rir_banks`` (pre-simulated or recorded RIRs, instead of simulating rooms) and
``noise_banks`` (noise packs, e.g. an LMDB converted once with ``speechpack build audio-bank --lmdb``).

``AUGMENT`` (with ``CUE_PROCESSING``) declares them and makes ``AugmentArgs``; ``parse_augment`` says when they
apply (none given: no augmentation, nothing checked, as before).  An args object built in code is checked by the
same declarations (named under ``dataset_args``).  docs/loader.md has the table.
"""

from __future__ import annotations

from typing import Any, Callable
import math

from speechpack.loader.config import PackSource
from speechpack.loader.config_checks import MAX_DB, ConfigError, check_type, number, take_known, value_range
from speechpack.loader.config_keys import (
    Bool,
    Key,
    KeyTable,
    Nested,
    Nullable,
    Number,
    OneOf,
    Parsed,
    Probability,
    Range,
    Then,
    Unchecked,
    Within,
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


def _weights(names: tuple[str, ...]) -> Callable[[Any, str], tuple[float, ...]]:
    """``{name: weight}`` for ``names`` (absent names weigh 0; none given: all equal), each finite and at most
    ``MAX_WEIGHT``."""
    def check(obj: Any, where: str) -> tuple[float, ...]:
        if obj is None:
            return (1.0,) * len(names)
        values = take_known(obj, where, dict.fromkeys(names, 0.0))
        for name in names:
            check_type(values[name], (int, float), f"{where}.{name}")
        if not all(v >= 0 for v in values.values()) or sum(values.values()) <= 0:
            raise ConfigError(f"{where}: expected non-negative weights of {', '.join(names)}, not all 0, got {obj!r}")
        weights = tuple(float(values[name]) for name in names)
        for w in weights:
            number(w, where, 0.0, MAX_WEIGHT)
        return weights
    return check


def _weights_field(names: tuple[str, ...]) -> Callable[[Any, str], Any]:
    """Weights built in code: ``len(names)`` non-negative numbers, not all 0."""
    def check(weights: Any, where: str) -> Any:
        if (not isinstance(weights, (list, tuple)) or len(weights) != len(names)
                or sum(number(w, where, 0.0, MAX_WEIGHT) for w in weights) <= 0):
            raise ConfigError(f"{where}: expected {len(names)} non-negative weights ({', '.join(names)}), "
                              f"not all 0, got {weights!r}")
        return weights
    return check


def _old_timeline_names(obj: Any, where: str) -> Any:
    """The earlier flat names of ``timeline`` are errors naming their replacement."""
    if isinstance(obj, dict):
        for old, new in OLD_TIMELINE_KEYS.items():
            if old in obj:
                raise ConfigError(f"{where}.{old}: renamed; use {where}.{new} (WeSep's names)")
    return obj


_FRACTION = Range(0.0, 1.0)
#: ``timeline.two_speaker``: how two speakers overlap.
TWO_SPEAKER = KeyTable((
    Key("overlap_ratio", (0.0, 1.0), _FRACTION, "the overlap `r ~ U(lo, hi)`, a fraction of the group length"),
    Key("overlap_position", None, Parsed(_weights(TIMELINE_POSITIONS), "{head, middle, tail} weights"),
        "where the overlap sits", default_doc="equal"),
    Key("middle_mode", None, Parsed(_weights(MIDDLE_MODES), "{crossing, containment} weights"),
        "how a `middle` overlap is laid out", default_doc="equal"),
))
_TWO = TWO_SPEAKER.parse(None, "timeline.two_speaker")


def _from_two(name: str) -> Key:
    """A ``TimelineArgs`` field held from ``two_speaker.<name>``."""
    table_key = next(k for k in TWO_SPEAKER.keys if k.name == name)
    check = table_key.check if name == "overlap_ratio" else Parsed(
        _weights_field(TIMELINE_POSITIONS if name == "overlap_position" else MIDDLE_MODES), "", tuple[float, ...])
    return Key(name, _TWO[name], check, "", build=lambda v: v["two_speaker"][name],
               path=f"timeline.two_speaker.{name}")


#: ``timeline`` (WeSep's names; docs/loader.md "Online mixing"), held as ``TimelineArgs``.
TIMELINE = KeyTable((
    Key("two_speaker", None, Nested(TWO_SPEAKER), "two-speaker groups", field=False),
    _from_two("overlap_ratio"),
    _from_two("overlap_position"),
    _from_two("middle_mode"),
    Key("extra_speaker_activity", (0.5, 1.0), _FRACTION, "speakers 3+ get one active segment of this fraction of "
        "the group length", path="timeline.extra_speaker_activity"),
))


@TIMELINE.args_class("dataset_args")
class TimelineArgs:
    """``dataset_args.timeline`` under WeSep's names (see docs/loader.md "Online mixing"): one field per field of
    ``TIMELINE``, checked on construction."""

    @property
    def containment_prob(self) -> float:
        """P(a ``middle`` overlap is a containment)."""
        crossing, containment = self.middle_mode
        return containment / (crossing + containment)


_SPEAKERS_DOC = "expected 3 non-negative probabilities summing to 1 (1, 2, 3..max_speakers speakers)"


def _distribution(dist: Any, where: str) -> Any:
    """``num_speakers.distribution`` in a config: P(1), P(2), P(3..max_speakers) speakers (kept as given for the
    relation's message; held as floats by ``MixArgs``)."""
    if (not isinstance(dist, (list, tuple)) or len(dist) != 3
            or not all(isinstance(p, (int, float)) and not isinstance(p, bool) and p >= 0 for p in dist)
            or abs(sum(dist) - 1.0) > 1e-6):
        raise ConfigError(f"{where}: {_SPEAKERS_DOC}, got {bounded_repr(dist)}")
    for p in dist:
        number(p, where, 0.0, 1.0)
    return dist


def _distribution_field(dist: Any, where: str) -> Any:
    """``MixArgs.distribution`` built in code."""
    if len(dist) != 3 or not all(number(p, where, 0.0, 1.0) >= 0 for p in dist) or abs(sum(dist) - 1.0) > 1e-6:
        raise ConfigError(f"{where}: {_SPEAKERS_DOC}, got {bounded_repr(dist)}")
    return dist


def _below(max_speakers: int, dist: Any, where: str) -> None:
    if (dist[2] > 0 and max_speakers < 3) or (dist[1] > 0 and max_speakers < 2) or max_speakers < 1:
        raise ConfigError(f"{where}.max_speakers: {max_speakers} is below the speaker counts the distribution "
                          f"{list(dist)} asks for")


def _speakers_relate(v: dict, where: str) -> None:
    """A config's ``num_speakers``: ``max_speakers`` covers the counts the distribution asks for, then its range."""
    _below(v["max_speakers"], v["distribution"], where)
    Within(1, MAX_SPEAKERS)(v["max_speakers"], f"{where}.max_speakers")


#: ``num_speakers``: how many speakers an online mixture has.
NUM_SPEAKERS = KeyTable((
    Key("distribution", None, Parsed(_distribution, "[p1, p2, p3]"), "P(1 speaker), P(2 speakers), "
        "P(3..max_speakers speakers, uniform)", default_doc="required"),
    Key("max_speakers", 3, Parsed(lambda v, w: check_type(v, int, w), Within(1, MAX_SPEAKERS).doc, int),
        "most speakers of a mixture"),
), relate=_speakers_relate)
#: ``mix_snr`` (dB, WeSep's defaults).
#: A pair first, then its bounds (errors show the pair as held: ``(-200.0, 5.0)``).
_DB_PAIR = Then(Parsed(lambda v, w: value_range(v, w), "[low, high]"), Range(-MAX_DB, MAX_DB, "dB"))
MIX_SNR = KeyTable((
    Key("range", (-5.0, 10.0), _DB_PAIR, "interferer SNRs"),
    Key("gain", (-12.0, 0.0), _DB_PAIR, "the mixture's final gain"),
))
_SNR = MIX_SNR.parse(None, "mix_snr")
#: WeSep's default ``mix_snr`` as a config writes it.
DEFAULT_MIX_SNR = {"range": list(_SNR["range"]), "gain": list(_SNR["gain"])}


def _mix_built(v: dict, where: str) -> None:
    """``MixArgs`` built in code: ``max_speakers`` covers the distribution."""
    _below(v["max_speakers"], v["distribution"], f"{where}.num_speakers")


#: The online mixing keys (``online_mix: true``), held as ``MixArgs``: all in WeSep's units.
MIX = KeyTable((
    Key("num_speakers", None, Nullable(Nested(NUM_SPEAKERS)), "online mixing: how many speakers a mixture has",
        default_doc="required", field=False),
    Key("timeline", None, Nullable(Then(Parsed(_old_timeline_names, "mapping"), Nested(TIMELINE))),
        "online mixing: the speakers' activity", default_doc="WeSep's", field=False),
    Key("mix_snr", None, Nullable(Nested(MIX_SNR)), "online mixing: SNRs and gain (dB)", field=False),
    Key("distribution", (0.0, 1.0, 0.0), Parsed(_distribution_field, "", tuple[float, ...]), "",
        build=lambda v: tuple(float(p) for p in v["num_speakers"]["distribution"]), path="num_speakers.distribution"),
    Key("max_speakers", NUM_SPEAKERS.defaults()["max_speakers"], Within(1, MAX_SPEAKERS), "",
        build=lambda v: v["num_speakers"]["max_speakers"], path="num_speakers.max_speakers"),
    Key("snr_range", _SNR["range"], Range(-MAX_DB, MAX_DB), "", build=lambda v: (v["mix_snr"] or _SNR)["range"],
        path="mix_snr.range"),
    Key("gain_range", _SNR["gain"], Range(-MAX_DB, MAX_DB), "", build=lambda v: (v["mix_snr"] or _SNR)["gain"],
        path="mix_snr.gain"),
    Key("timeline", None, Unchecked("", TimelineArgs | None), "",
        build=lambda v: None if v["timeline"] is None else TIMELINE.held(TimelineArgs, v["timeline"])),
), relate_built=_mix_built)
#: Keys that only online mixing reads.
MIX_KEYS = tuple(k.name for k in MIX.config_keys)


@MIX.args_class("dataset_args")
class MixArgs:
    """The online mixing settings (``online_mix: true``): one field per field of ``MIX``, checked on construction.
    Reverberation and noise are ``AugmentArgs`` (below; noise applies to pre-mixed training too)."""


def parse_mix(v: dict, where: str, held: dict) -> MixArgs | None:
    """``MixArgs`` from the mixing keys' values ``v`` (``held``: ``online_mix``); ``None`` when off (then the
    mixing keys must be absent)."""
    if not held["online_mix"]:
        for key in MIX_KEYS:
            if v[key] is not None:
                raise ConfigError(f"{where}.{key}: only used with online_mix: true")
        return None
    if v["num_speakers"] is None:
        raise ConfigError(f"{where}.num_speakers: online_mix needs {{distribution: [p1, p2, p3], max_speakers: N}}")
    return MIX.held(MixArgs, MIX.hold(MIX.check_config(v, where), where))


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


def _check_room_bounds(conf: RoomConfig, where: str) -> None:
    """Upper bounds ``RoomConfig`` leaves open (it checks positivity and order)."""
    for name, values, high in (("min_max_room", (*conf.room_min, *conf.room_max), MAX_ROOM_M),
                               ("rt60", conf.rt60, MAX_RT60_S), ("mic_dist", conf.mic_dist, MAX_MIC_DIST_M)):
        if not all(math.isfinite(v) and v <= high for v in values):
            raise ConfigError(f"{where}.{name}: values must be at most {high}, got {list(values)}")


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


def _room_checked(conf: Any, where: str) -> RoomConfig:
    """``reverb_conf`` in a config: WeSep's rooms (``RoomConfig.from_wesep``), within ``_check_room_bounds``."""
    room = _room(conf, where)
    _check_room_bounds(room, where)
    return room


def _room_bounds(conf: Any, where: str) -> Any:
    """``AugmentArgs.reverb_conf`` built in code."""
    if conf is not None:
        _check_room_bounds(conf, where)
    return conf


def _bank_list(value: Any, where: str) -> tuple[str, ...]:
    """``rir_banks`` / ``noise_banks``: ``[{path: ...}, ...]`` (the default, none, held as it is)."""
    return value if value == () else _banks(value, where)


def _lmdb(value: Any, where: str) -> Any:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{where}: expected the path of a WeSep noise LMDB, got {value!r}")
    return value


def _no_options(value: Any, where: str) -> Any:
    if value not in (None, {}):
        raise ConfigError(f"{where}: has no options (WeSep augments waveform enrollments only), got {value!r}")
    return value


#: ``cue_processing.audio``: P(a waveform enrollment is reverberated / gets noise).
ENROLL_AUGMENT = KeyTable((
    Key("reverb_enroll_prob", 0, Probability(), "P(a waveform enrollment is reverberated)"),
    Key("noise_enroll_prob", 0, Probability(), "P(a waveform enrollment gets noise)"),
))
#: ``cue_processing``: WeSep recipes write all four sections; only ``audio`` has keys.
CUE_PROCESSING = KeyTable((
    Key("audio", None, Nested(ENROLL_AUGMENT), "enrollment augmentation"),
    *(Key(name, None, Parsed(_no_options, "empty"), "accepted empty (WeSep has no options for it)")
      for name in CUE_PROCESSING_SECTIONS[1:]),
))


def _augment_relate(v: dict, where: str) -> None:
    """What spans the augmentation fields: one noise source, one room source, and a source for what augments."""
    if v["noise_lmdb_file"] is not None and v["noise_banks"]:
        raise ConfigError(f"{where}.noise_lmdb_file: noise_banks are given too; set one noise source")
    if v["reverb_conf"] is not None and v["rir_banks"]:
        raise ConfigError(f"{where}.reverb_conf: rir_banks are given too; simulate rooms or draw RIRs from banks, "
                          f"not both")
    noisy = [key for key in ("noise_prob", "noise_enroll_prob") if v[key] > 0]
    if noisy and v["noise_lmdb_file"] is None and not v["noise_banks"]:
        raise ConfigError(f"{where}.{noisy[0]}: {v[noisy[0]]} needs a noise source: noise_lmdb_file "
                          f"(a WeSep noise LMDB) or noise_banks: [{{path: <noise pack>}}]")
    rooms = [key for key in ("reverb_prob", "reverb_enroll_prob") if v[key] > 0]
    if rooms and v["reverb_conf"] is None and not v["rir_banks"]:
        raise ConfigError(f"{where}.{rooms[0]}: needs reverb_conf (rooms to simulate) or rir_banks")


_AUG = "([Augmentation](#augmentation-noise-rooms-enrollments))"
_P = Number(0.0, 1.0)
#: Reverberation, noise and enrollment augmentation (train only; WeSep's units), held as ``AugmentArgs``.
AUGMENT = KeyTable((
    Key("reverb_prob", 0, Probability(), f"P(an online mixture is reverberated): one room per mixture, one RIR per "
        f"source {_AUG}", field_check=_P),
    Key("reverb_conf", None, Nullable(Parsed(_room_checked, "mapping")), "the rooms simulated (WeSep's "
        "`reverb_conf`)", default_doc="WeSep's rooms", field_check=Parsed(_room_bounds, "", RoomConfig | None)),
    Key("rir_banks", (), Parsed(_bank_list, "list of {path}", tuple[str, ...]), "RIR bank packs to draw RIRs from "
        "instead of simulating rooms", default_doc="none", field_check=Unchecked("", tuple[str, ...])),
    Key("reverb_keep_dry", False, Bool(), "targets stay dry (only the mixture is reverberant); WeSep's targets are "
        "the reverberant sources"),
    Key("noise_prob", 0, Probability(), f"P(noise is added to a mixture), online and offline; targets never get "
        f"noise {_AUG}", field_check=_P),
    Key("noise_lmdb_file", None, Parsed(_lmdb, "path, or null", str | None), "WeSep's noise LMDB "
        "(`tools/make_lmdb.py`)"),
    Key("noise_banks", (), Parsed(_bank_list, "list of {path}", tuple[str, ...]), "noise packs", default_doc="none",
        field_check=Unchecked("", tuple[str, ...])),
    Key("noise_snr", None, Nullable(Range(-MAX_DB, MAX_DB, "dB")), "mixture over noise, for every noise",
        default_doc="WeSep's rule by key"),
    Key("cue_processing", None, Nested(CUE_PROCESSING), "WeSep's enrollment augmentation", field=False),
    Key("reverb_enroll_prob", 0.0, _P, "", build=lambda v: v["cue_processing"]["audio"]["reverb_enroll_prob"],
        path="cue_processing.audio.reverb_enroll_prob"),
    Key("noise_enroll_prob", 0.0, _P, "", build=lambda v: v["cue_processing"]["audio"]["noise_enroll_prob"],
        path="cue_processing.audio.noise_enroll_prob"),
    Key("augment_on", "worker", OneOf(AUGMENT_SIDES), "where online mixtures are reverberated, noised and mixed: "
        "while the batch is built, or in torch on the collated batch where training runs "
        "([below](#augmentation-where-training-runs-augment_on-batch)); the same draws either way",
        read=lambda v, w: "worker" if v is None else v),
), relate=_augment_relate)


@AUGMENT.args_class("dataset_args")
class AugmentArgs:
    """Reverberation, noise and enrollment augmentation (train only; WeSep's units): one field per field of
    ``AUGMENT``, checked on construction."""

    @property
    def has_noise(self) -> bool:
        return self.noise_lmdb_file is not None or bool(self.noise_banks)

    @property
    def active(self) -> bool:
        """Whether any augmentation changes batches."""
        return any(getattr(self, key) > 0 for key in ("reverb_prob", "noise_prob", "reverb_enroll_prob",
                                                      "noise_enroll_prob"))


def _off(value: Any) -> bool:
    return value in (None, 0, False) or value == ()


def parse_augment(v: dict, where: str, held: dict) -> AugmentArgs | None:
    """``AugmentArgs`` from the augmentation keys' values ``v`` (``held``: ``online_mix``); ``None`` when none is
    given."""
    online_mix = held["online_mix"]
    if v["augment_on"] == "batch" and not online_mix:
        raise ConfigError(f"{where}.augment_on: batch applies online mixing's reverberation and noise to the "
                          f"collated batch; it needs online_mix: true (pre-mixed noise is added in the workers)")
    if all(_off(value) for key, value in v.items() if key != "augment_on") and v["augment_on"] == "worker":
        return None
    c = AUGMENT.check_config(v, where)
    if c["reverb_prob"] > 0 and not online_mix:
        raise ConfigError(f"{where}.reverb_prob: WeSep reverberates online mixtures only (online_mix: true); "
                          f"pre-mixed audio is used as it is")
    enroll = c["cue_processing"]["audio"]
    if c["reverb_conf"] is None and not c["rir_banks"] and (c["reverb_prob"] > 0 or enroll["reverb_enroll_prob"] > 0):
        c["reverb_conf"] = _room_checked(None, f"{where}.reverb_conf")  # WeSep's rooms
    return AUGMENT.held(AugmentArgs, AUGMENT.hold(c, where))


__all__ = ["AUGMENT", "AUGMENT_SIDES", "AugmentArgs", "CUE_PROCESSING", "CUE_PROCESSING_SECTIONS", "MAX_SPEAKERS",
           "MIDDLE_MODES", "MIX", "MIX_KEYS", "MixArgs", "NUM_SPEAKERS", "TIMELINE", "TIMELINE_POSITIONS",
           "TimelineArgs", "parse_augment", "parse_mix"]
