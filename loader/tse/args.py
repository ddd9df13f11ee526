"""``dataset_args`` of a TSE loader config (``task: tse``, the default): WeSep's names and defaults, checked key by key.

``DatasetArgs.from_dict`` turns the ``dataset_args`` mapping into frozen dataclasses and refuses any key it does
not know, naming it, so a typo never silently becomes a default.  Defaults follow WeSep where WeSep has the key
(``chunk_len`` = 3 s, ``chunk_short_policy`` = ``pad``, ``filter_len_args`` 1-1000 s), so a WeSep ``dataset_args``
block means the same thing here; docs/loader.md has the table.

Every numeric value has a range, checked in ``__post_init__``, so an args object built directly is checked too, and
a value far outside it (``resample_rate: 1e9`` used to crash inside soxr, ``batch_size: 1e18`` ran out of memory
while planning) is a ``ConfigError`` naming the key before any pack is opened.  The ranges are generous: they
exist to stop nonsense, not to second-guess an experiment.  ``from_dict`` names keys under its ``where``
(``config.dataset_args.chunk_len``); a directly built object under ``dataset_args``.

The online mixing keys (``MixArgs``, ``TimelineArgs``) and reverberation, noise and enrollment augmentation
(``AugmentArgs``) are parsed in ``loader.tse.mix_args``, the cue and collate keys (``CueRequest``) in
``loader.tse.cues.request``.

``check_legacy``: keys of older WeSep configs (the earlier public pipeline and its forks) are refused, each naming
what replaces it now.

The earlier pipeline selected enrollments with ``speaker_feat`` and Kaldi features, mixed a fixed number of
speakers and took other key names; WeSep's data pipeline contract replaced all of them.  A config that still holds
one would otherwise fail with a bare "unknown key" or, worse, be read with a different meaning, so each gets an
error naming its replacement (docs/wesep.md "Bring your recipe").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

from speechpack.loader.config_checks import (
    MAX_BATCH_ROWS,
    MAX_COUNT,
    MAX_SAMPLES,
    ConfigError,
    at,
    check_choice,
    check_finite,
    check_int,
    check_type,
    positive_int,
    take_known,
    where_set,
)
from speechpack.loader.normalize import MUVAP, NONE, parse_normalize
from speechpack.loader.plan.static_plan import TAIL_POLICIES
from speechpack.loader.tse.cues.request import ALIGNS, CueRequest, parse_collate, parse_cues
from speechpack.loader.tse.mix_args import AugmentArgs, MixArgs, TimelineArgs, parse_augment, parse_mix
from speechpack.loader.tse.mainline import MainlineArgs, fixed_speakers


if TYPE_CHECKING:  # loader.plan.batching imports loader.config; the real import is inside _batching
    from speechpack.loader.plan.batching import BudgetArgs

SHORT_POLICIES = ("pad", "keep")
#: ``normalize`` values the TSE task builds (``loader.normalize``), in the order its errors list them.
NORMALIZE_CHOICES = (MUVAP, NONE)
#: WeSep's default chunk, ``chunk_len: null``: this many seconds at the loader's rate.
DEFAULT_CHUNK_SECONDS = 3
#: ``resample_rate`` bounds (Hz): telephone-band 1 kHz up to 384 kHz, the highest rate of common audio interfaces.
MIN_RATE, MAX_RATE = 1_000, 384_000
#: ``sort_window`` bound (items sorted together): 2**31.
MAX_SORT_WINDOW = 2 ** 31
#: ``filter_len_args`` bound (seconds): a year.
MAX_SECONDS = 365 * 24 * 3600.0
#: ``shuffle_args.shuffle_size`` and ``online_buffer_size`` bound (items): accepted, not used (module docstring).
MAX_BUFFER_ITEMS = 2 ** 31


@dataclass(frozen=True)
class DatasetArgs:
    """``dataset_args``: what is read, how it is cut, normalised, batched and collated.

    ``tail`` says what happens to the last, incomplete round of batches: ``pad`` fills it with repeats flagged
    ``valid = False`` (every sample is seen, training code masks the repeats), ``drop`` leaves the tail out
    (reported).  Checks that need the packs (the cue exists, ``required`` against ``guaranteed``) happen when the
    loader is built (``loader.tse.cues.resolve.resolve_cues``).
    """

    #: Hz of the batches; ``None``: the packs' rate (they must agree).  Another rate resamples at load (slow).
    resample_rate: int | None = None
    whole_utt: bool = False
    #: Training window in samples at the loader's rate (WeSep's unit); ``None``: ``DEFAULT_CHUNK_SECONDS`` (3 s),
    #: resolved by ``chunk_samples`` once the rate is known.
    chunk_len: int | None = None
    chunk_random_start: bool = True
    chunk_short_policy: str = "pad"
    #: WeSep's ``filter_len`` (train, ``whole_utt``): keep items of ``[min_num_seconds, max_num_seconds]``.
    filter_len: bool = False
    min_num_seconds: float = 1.0
    max_num_seconds: float = 1000.0
    shuffle: bool = True
    batch_size: int = 1
    tail: str = "pad"
    expand_targets: bool = False
    #: ``none`` or ``muvap`` (``loader.normalize``).
    normalize: str = NONE
    align: tuple[tuple[str, str], ...] = (("wav_mix", "max"), ("wav_target", "max"))
    #: ``cues``: every ``dataset_args.cues.<name>`` entry, in config order (used or not).
    cues: tuple[CueRequest, ...] = ()
    #: ``collate.<field>`` overrides of the per-row fields (cue fields, ``speaker_label``):
    #: ``((field, ((key, value), ...)), ...)``.
    field_collate: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    #: ``online_mix: true``: the online mixing settings (``None`` when off); see ``MixArgs``.
    mix: MixArgs | None = None
    #: Reverberation, noise and enrollment augmentation (``None``: none given); see ``AugmentArgs``.
    augment: AugmentArgs | None = None
    #: ``batching`` with ``type: budget`` (``None``: static batches of ``batch_size``); see ``loader.plan.batching``.
    batching: "BudgetArgs | None" = None
    #: ``train_window``: train items longer than this many samples are tiled into near-equal chunks, each fed
    #: with ``hist_frames`` samples of unscored context before it (``loader.plan.train_windows.tile_windows``).
    train_window: int | None = None
    hist_frames: int = 0
    #: Set when the config is a mainline WeSep recipe (``loader.tse.mainline``): its batch keys and enrollment
    #: features (``loader.tse.mainline``).
    mainline: MainlineArgs | None = None

    def __post_init__(self) -> None:
        if self.resample_rate is not None:
            check_int(self.resample_rate, "resample_rate", MIN_RATE, MAX_RATE, unit=" Hz")
        if self.chunk_len is not None:
            check_int(self.chunk_len, "chunk_len", 1, MAX_SAMPLES, unit=" samples")
        for key in ("whole_utt", "chunk_random_start", "filter_len", "shuffle", "expand_targets"):
            check_type(getattr(self, key), bool, at(key))
        check_choice(self.chunk_short_policy, SHORT_POLICIES, at("chunk_short_policy"))
        check_choice(self.tail, TAIL_POLICIES, at("tail"))
        check_choice(self.normalize, NORMALIZE_CHOICES, at("normalize"))
        for key in ("min_num_seconds", "max_num_seconds"):
            check_finite(getattr(self, key), f"filter_len_args.{key}", 0.0, MAX_SECONDS)
        if self.min_num_seconds > self.max_num_seconds:
            raise ConfigError(f"{at('filter_len_args')}: min_num_seconds {self.min_num_seconds} > "
                              f"max_num_seconds {self.max_num_seconds}")
        check_int(self.batch_size, "batch_size", 1, MAX_BATCH_ROWS)
        for name, align in self.align:
            check_choice(align, ALIGNS, at(f"collate.{name}.align"))
        if self.train_window is not None:
            check_int(self.train_window, "train_window", 1, MAX_SAMPLES, unit=" samples")
        check_int(self.hist_frames, "hist_frames", 0, MAX_SAMPLES, unit=" samples")

    @property
    def online_mix(self) -> bool:
        return self.mix is not None

    def chunk_samples(self, rate: int) -> int:
        """``chunk_len``, or its default (``DEFAULT_CHUNK_SECONDS`` at ``rate``)."""
        return self.chunk_len or DEFAULT_CHUNK_SECONDS * rate

    def align_of(self, name: str) -> str:
        return dict(self.align)[name]

    @property
    def used_cues(self) -> tuple[CueRequest, ...]:
        """The cues the experiment consumes (``use: true``), in ``dataset_args.cues`` order."""
        return tuple(cue for cue in self.cues if cue.use)

    def collate_of(self, field_name: str) -> dict[str, Any]:
        """The ``collate.<field>`` keys given for a per-row field (empty when none)."""
        return dict(dict(self.field_collate).get(field_name, ()))

    @classmethod
    def from_dict(cls, obj: Any, where: str = "dataset_args") -> "DatasetArgs":
        check_legacy(obj, where)  # an older pipeline's key: name its replacement, not just "unknown key"
        v = take_known(obj, where, {
            "resample_rate": None, "whole_utt": False, "chunk_len": None, "chunk_random_start": True,
            "chunk_short_policy": "pad", "filter_len": False, "filter_len_args": None, "shuffle": True,
            # Accepted for WeSep configs: the loader shuffles the whole epoch (and draws interferers from the
            # whole pack), so the buffer sizes have no role (docs/loader.md "Shuffling").
            "shuffle_args": None, "online_buffer_size": None,
            "batch_size": 1, "tail": "pad", "expand_targets": False, "normalize": None, "collate": None,
            "cues": None,
            "online_mix": False, "num_speakers": None, "timeline": None, "mix_snr": None,
            "cue_processing": None, "reverb_prob": 0, "reverb_conf": None, "rir_banks": None,
            "reverb_keep_dry": False, "noise_prob": 0, "noise_lmdb_file": None, "noise_banks": None,
            "noise_snr": None, "augment_on": None,
            "batching": None, "train_window": None, "hist_frames": 0, "mainline": None,
        })
        with where_set(where):
            for key in ("whole_utt", "chunk_random_start", "filter_len", "shuffle", "expand_targets", "online_mix"):
                check_type(v[key], bool, f"{where}.{key}")
            mix = parse_mix(v, where)
            for key in ("resample_rate", "chunk_len"):
                if v[key] is not None:
                    check_type(v[key], int, f"{where}.{key}")
            check_type(v["batch_size"], int, f"{where}.batch_size")
            filter_args = take_known(v["filter_len_args"], f"{where}.filter_len_args",
                                     {"min_num_seconds": 1.0, "max_num_seconds": 1000.0})
            for key, value in filter_args.items():
                check_type(value, (int, float), f"{where}.filter_len_args.{key}")
            size = take_known(v["shuffle_args"], f"{where}.shuffle_args", {"shuffle_size": None})["shuffle_size"]
            for key, value in (("shuffle_args.shuffle_size", size), ("online_buffer_size", v["online_buffer_size"])):
                if value is not None:
                    positive_int(value, f"{where}.{key}", maximum=MAX_BUFFER_ITEMS)
            augment = parse_augment(v, where, v["online_mix"])
            cues = parse_cues(v["cues"], f"{where}.cues")
            align, field_collate = parse_collate(v["collate"], f"{where}.collate", cues)
            batch_size, batching = _batching(v["batching"], v["batch_size"], f"{where}.batching")
            train_window, hist = _train_window(v, mix, where)
            return cls(
                resample_rate=v["resample_rate"],
                whole_utt=v["whole_utt"],
                chunk_len=v["chunk_len"],
                chunk_random_start=v["chunk_random_start"],
                chunk_short_policy=check_choice(v["chunk_short_policy"], SHORT_POLICIES,
                                                f"{where}.chunk_short_policy"),
                filter_len=v["filter_len"],
                min_num_seconds=float(filter_args["min_num_seconds"]),
                max_num_seconds=float(filter_args["max_num_seconds"]),
                shuffle=v["shuffle"],
                batch_size=batch_size,
                tail=check_choice(v["tail"], TAIL_POLICIES, f"{where}.tail"),
                expand_targets=v["expand_targets"],
                normalize=parse_normalize(v["normalize"], f"{where}.normalize", NORMALIZE_CHOICES, MUVAP),
                align=align,
                cues=cues,
                field_collate=field_collate,
                mix=mix,
                augment=augment,
                batching=batching,
                train_window=train_window,
                hist_frames=hist,
                mainline=None if v["mainline"] is None else MainlineArgs.from_dict(v["mainline"]),
            )


def _batching(obj: Any, batch_size: int, where: str) -> tuple[int, "BudgetArgs | None"]:
    """``batching``: ``{type: static, batch_size}`` or ``{type: budget, max_frames | max_num_elements, cost,
    min_batch, max_batch, num_seqs_multiple_of, sort_window}`` (see ``loader.plan.batching``)."""
    from speechpack.loader.plan.batching import BATCH_TYPES, COSTS, DEFAULT_WINDOW_ITEMS, BudgetArgs
    if obj is None:
        return batch_size, None
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a mapping with type: static or budget, got {type(obj).__name__}")
    kind = check_choice(obj.get("type"), BATCH_TYPES, f"{where}.type")
    if kind == "static":
        v = take_known(obj, where, {"type": None, "batch_size": None})
        if v["batch_size"] is None:
            raise ConfigError(f"{where}.batch_size: static batching needs a batch size")
        size = check_int(v["batch_size"], "batching.batch_size", 1, MAX_BATCH_ROWS)
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
    budget = check_int(v[key], f"batching.{key}", 1, MAX_COUNT)
    min_batch = check_int(v["min_batch"], "batching.min_batch", 1, MAX_BATCH_ROWS)
    max_batch = None if v["max_batch"] is None else check_int(v["max_batch"], "batching.max_batch", 1, MAX_BATCH_ROWS)
    multiple = check_int(v["num_seqs_multiple_of"], "batching.num_seqs_multiple_of", 1, MAX_BATCH_ROWS)
    if max_batch is not None and (max_batch < min_batch or max_batch < multiple):
        raise ConfigError(f"{where}.max_batch: {max_batch} is below min_batch {min_batch} or "
                          f"num_seqs_multiple_of {multiple}")
    if batch_size != 1:
        raise ConfigError(f"{where}: dataset_args.batch_size {batch_size} is set too; budget batching sizes its "
                          f"own batches")
    return 1, BudgetArgs(budget=budget, cost=check_choice(v["cost"], COSTS, f"{where}.cost"), min_batch=min_batch,
                         max_batch=max_batch, multiple_of=multiple,
                         window_items=check_int(v["sort_window"], "batching.sort_window", 1, MAX_SORT_WINDOW))


def _train_window(v: dict, mix: MixArgs | None, where: str) -> tuple[int | None, int]:
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


def parse_dataset_args(obj: Any, where: str) -> DatasetArgs:
    """The task interface's parser (``loader.tasks``)."""
    return DatasetArgs.from_dict(obj, where)


_ENROLL = ("select the enrollment with dataset_args.cues.audio: {use: true} and the split's cues.yaml (an audio "
           "cue: type wav, format waveform for enrollment audio; type npy, format spk_embedding for embeddings)")
_ENROLL_AUG = ("cue_processing.audio: {reverb_enroll_prob, noise_enroll_prob} augments waveform enrollments; "
               "feature-level augmentation belongs to the model's frontend")

#: ``dataset_args`` key of an older config -> what replaces it in the contract version.
LEGACY_KEYS = {
    "speaker_feat": _ENROLL,
    "fbank_args": "enrollments are waveforms (audio_aux) or embeddings; fbank features are computed by the model "
                  "(model_args), not the data pipeline",
    "use_random_snr": "mix_snr: {range: [low, high], gain: [low, high]} (dB; WeSep's default range [-5, 10], "
                      "gain [-12, 0])",
    "specaug_enroll_prob": _ENROLL_AUG,
    "SSA_enroll_prob": _ENROLL_AUG,
    "filter_args": "filter_len_args: {min_num_seconds, max_num_seconds}",
    "snr_conf": "mix_snr: {range: [low, high], gain: [low, high]}",
}


def check_legacy(obj: Any, where: str) -> None:
    """Raise for the older-pipeline keys of the ``dataset_args`` mapping ``obj``: one error listing every one of
    them with its replacement, so a config is fixed in one round, not one key per run."""
    if not isinstance(obj, dict):
        return
    found = [f"{where}.{key}: a key of the older WeSep pipeline; now {replacement}"
             for key, replacement in LEGACY_KEYS.items() if key in obj]
    spk = obj.get("num_speakers")
    if isinstance(spk, int) and not isinstance(spk, bool):
        found.append(f"{where}.num_speakers: {spk} (a fixed count, the older pipeline's form); now "
                     f"num_speakers: {{distribution: [p1, p2, p3], max_speakers: N}} (P(1), P(2), P(3..N) "
                     f"speakers; {spk} speakers: {_fixed(spk)})")
    if obj.get("noise_lmdb_file") is not None and not obj.get("cues"):
        found.append(f"{where}.noise_lmdb_file: given without dataset_args.cues, the older pipeline's layout; "
                     f"now {_ENROLL}, and noise_lmdb_file serves noise_prob (mixture noise) and "
                     f"cue_processing.audio.noise_enroll_prob")
    if len(found) == 1:
        raise ConfigError(found[0])
    if found:
        raise ConfigError(f"{len(found)} keys of the older WeSep pipeline (a mainline WeSep recipe is read as it "
                          f"is when it keeps model_args.tse_model.joint_training or top-level whole_utt; "
                          f"docs/wesep.md):\n  " + "\n  ".join(found))


def _fixed(count: int) -> str:
    """The ``num_speakers`` block of a fixed speaker count, as YAML flow text."""
    block = fixed_speakers(count)
    return f"{{distribution: {block['distribution']}, max_speakers: {block['max_speakers']}}}"


__all__ = ["CueRequest", "DEFAULT_CHUNK_SECONDS", "DatasetArgs", "LEGACY_KEYS", "MixArgs", "NORMALIZE_CHOICES",
           "TimelineArgs", "check_legacy", "parse_dataset_args"]
