"""``dataset_args`` keys of augmentation: reverberation, noise and enrollment augmentation, in WeSep's names.

WeSep reverberates online mixtures only (``reverb_prob``, rooms from ``reverb_conf``), adds noise to the mixture
in offline (pre-mixed) and online training alike (``noise_prob``, noise from ``noise_lmdb_file``), and augments
waveform enrollments (``cue_processing.audio.{reverb_enroll_prob, noise_enroll_prob}``).  speechpack reads the same
keys, plus its own sources: ``rir_banks`` (pre-simulated or recorded RIRs, instead of simulating rooms) and
``noise_banks`` (noise packs, e.g. an LMDB converted once with ``speechpack build audio-bank --lmdb``).

``AugmentArgs`` holds them, each default next to its field and its range checked in ``__post_init__``;
``parse_augment`` reads the config's shapes into it.  docs/loader.md has the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from speechpack.loader.config import PackSource
from speechpack.loader.config_checks import ConfigError, check_type, probability, take_known, value_range
from speechpack.loader.tse.ranges import MAX_DB, at, check_finite, check_pair
from speechpack.loader.tse.room_sim import WESEP_KEYS, RoomConfig

#: ``reverb_conf`` bounds: rooms up to a concert hall's size (metres), RT60 up to 20 s, distances up to 100 m.
MAX_ROOM_M = 100.0
MAX_RT60_S = 20.0
MAX_MIC_DIST_M = 100.0
#: ``cue_processing`` sections WeSep recipes write; only ``audio`` has keys, the others are present and empty.
CUE_PROCESSING_SECTIONS = ("audio", "visual", "spatial", "textual")


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
    #: U[-5, 25]; ``schemas.noise_lmdb.noise_snr_range``).
    noise_snr: tuple[float, float] | None = None
    #: ``cue_processing.audio``: P(a waveform enrollment is reverberated / gets noise).
    reverb_enroll_prob: float = 0.0
    noise_enroll_prob: float = 0.0

    def __post_init__(self) -> None:
        for key in ("reverb_prob", "noise_prob"):
            check_finite(getattr(self, key), key, 0.0, 1.0)
        for key in ("reverb_enroll_prob", "noise_enroll_prob"):
            check_finite(getattr(self, key), f"cue_processing.audio.{key}", 0.0, 1.0)
        check_type(self.reverb_keep_dry, bool, at("reverb_keep_dry"))
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
    if all(v[key] in (None, 0, False) for key in keys):
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
        reverb_enroll_prob=enroll["reverb_enroll_prob"], noise_enroll_prob=enroll["noise_enroll_prob"])


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


__all__ = ["AugmentArgs", "CUE_PROCESSING_SECTIONS", "parse_augment"]
