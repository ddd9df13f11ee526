"""``dataset_args`` of a TSE loader config (``task: tse``, the default): WeSep's names and defaults, every key
declared once, in ``DATASET_ARGS`` (``loader.config_keys``).

The table gives each key its default, check (once per key, errors naming the config path: ``config.dataset_args
.chunk_len``), doc row (docs/loader.md's table is ``DATASET_ARGS.markdown()``, a test keeps them equal) and
fingerprint role, and makes ``DatasetArgs`` (``args_class``: one field per field of the table, checked on
construction, named under ``dataset_args``).  A config writes some keys in another shape than ``DatasetArgs``
holds them: ``filter_len_args`` becomes ``min_num_seconds``/``max_num_seconds``, ``collate`` ``align`` and
``field_collate``, the online mixing keys ``mix``, the augmentation keys ``augment``; ``_combine`` checks what spans
those keys.  Unknown keys are refused, naming them, so a typo never silently becomes a default.  Defaults follow
WeSep where WeSep has the key (``chunk_len`` = 3 s, ``chunk_short_policy`` = ``pad``, ``filter_len_args``
1-1000 s), so a WeSep ``dataset_args`` block means the same thing here.

Every numeric value has a range, so a value far outside it (``resample_rate: 1e9`` used to crash inside soxr,
``batch_size: 1e18`` ran out of memory while planning) is a ``ConfigError`` naming the key before any pack is
opened.  The ranges are generous: they exist to stop nonsense, not to second-guess an experiment.

The online mixing keys (``MixArgs``, ``TimelineArgs``) and reverberation, noise and enrollment augmentation
(``AugmentArgs``) are declared in ``loader.tse.mix_args``; the cue and collate keys (``CueRequest``) keep their
parsers (``loader.tse.cues.request``) as their checks.  The keys of stages added with ``register_stage(...,
keys=)`` are declared in the stage's module and held in ``stage_args`` (``loader.tse.stages.keys``; a stage
reads them with ``DatasetArgs.stage_arg``); which fields each built-in stage reads is its ``Stage.keys``.

``check_legacy``: keys of older WeSep configs (the earlier public pipeline and its forks) are refused, each naming
what replaces it now.

The earlier pipeline selected enrollments with ``speaker_feat`` and Kaldi features, mixed a fixed number of
speakers and took other key names; WeSep's data pipeline contract replaced all of them.  A config that still holds
one would otherwise fail with a bare "unknown key" or, worse, be read with a different meaning, so each gets an
error naming its replacement (docs/wesep.md "Bring your recipe").
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable

from speechpack.loader.config_checks import (
    MAX_BATCH_ROWS,
    MAX_COUNT,
    MAX_SAMPLES,
    ConfigError,
    check_choice,
    check_type,
    number,
    positive_int,
)
from speechpack.loader.config_keys import (
    SHARD_WINDOW,
    WHEN_SET,
    Bool,
    Flat,
    Int,
    Key,
    KeyTable,
    Nested,
    Nullable,
    OneOf,
    Parsed,
    Unchecked,
    Variant,
    Within,
)
from speechpack.loader.normalize import MUVAP, NONE, parse_normalize
from speechpack.loader.plan.batching import COSTS, DEFAULT_WINDOW_ITEMS, BudgetArgs
from speechpack.loader.plan.static_plan import TAIL_POLICIES
from speechpack.loader.tse.cues.request import ALIGNS, CueRequest, parse_collate, parse_cues
from speechpack.loader.tse.mix_args import AUGMENT, MIX, AugmentArgs, MixArgs, TimelineArgs, parse_augment, parse_mix
from speechpack.loader.tse.mainline import MAINLINE, MainlineArgs, fixed_speakers
from speechpack.loader.tse.stages.keys import fingerprint_of, stage_key, stage_table

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
#: ``shuffle_args.shuffle_size`` and ``online_buffer_size`` bound (items): accepted, not used (``SHUFFLE_ARGS``).
MAX_BUFFER_ITEMS = 2 ** 31


def _check_aligns(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``align`` built in code: each field's ``collate.<field>.align`` one of ``ALIGNS``."""
    for name, align in value:
        check_choice(align, ALIGNS, f"{where.rsplit('.', 1)[0]}.collate.{name}.align")
    return value


def _check_cues(value: Any, where: str) -> tuple[CueRequest, ...]:
    """``cues`` (``loader.tse.cues.request.parse_cues``); the default, no cue, held as it is."""
    return value if value == () else parse_cues(value, where)


def _int(value: Any, where: str) -> int:
    """An int; its range is checked once ``batching`` says which key sets the batch size (``_combine``)."""
    return check_type(value, int, where)


def _no_augment_unset(value: Any) -> Any:
    """``augment`` as the fingerprint hashes it: where augmentation runs changes no draw (a state resumes on either
    side), and settings that augment nothing are as good as none."""
    if not value:
        return value
    value = {k: v for k, v in value.items() if k != "augment_on"}
    return None if value == _NO_AUGMENT else value


def _normalize_as_hashed(value: Any) -> Any:
    """``none`` was spelt None before ``normalize`` had one vocabulary: older states still resume."""
    return None if value == NONE else value


def _read_normalize(value: Any, where: str) -> str:
    """The one ``normalize`` vocabulary (``true``: ``muvap``; ``false``/``null``: ``none``; ``{type: X}``), its
    choice checked there (once)."""
    return parse_normalize(value, where, NORMALIZE_CHOICES, MUVAP)


#: ``AugmentArgs`` that augment nothing, as the fingerprint sees them (``augment_on`` left out).
_NO_AUGMENT = {k: v for k, v in asdict(AugmentArgs()).items() if k != "augment_on"}


def _seconds(value: Any, where: str) -> float:
    """A ``filter_len_args`` bound in a config: a number, held as a float, then in range."""
    return number(float(check_type(value, (int, float), where)), where, 0.0, MAX_SECONDS)


def _seconds_field(value: Any, where: str) -> Any:
    """A ``filter_len_args`` bound built in code: in range, held as given."""
    number(value, where, 0.0, MAX_SECONDS)
    return value


def _count(minimum: int) -> Callable[[Any, str], int]:
    """An int of at least ``minimum``; its range in samples is checked once it is known to be used
    (``_train_window``)."""
    return lambda value, where: positive_int(value, where, minimum=minimum)


_SAMPLES = Within(1, MAX_SAMPLES, " samples")
_HIST = Within(0, MAX_SAMPLES, " samples")
_BUFFER = Nullable(Int(hi=MAX_BUFFER_ITEMS))
_SECONDS = Parsed(_seconds, "number in [0, a year] s", float)
#: ``filter_len_args``: WeSep's ``filter_len`` bounds (seconds), held as ``DatasetArgs.min_num_seconds`` and
#: ``max_num_seconds``.
FILTER_LEN_ARGS = KeyTable((
    Key("min_num_seconds", 1.0, _SECONDS, "with `filter_len`: shortest item kept"),
    Key("max_num_seconds", 1000.0, _SECONDS, "with `filter_len`: longest item kept"),
))
#: ``shuffle_args``: accepted for WeSep configs; the loader shuffles the whole epoch (and draws interferers from the
#: whole pack), so the buffer size has no role (docs/loader.md "Shuffling").
SHUFFLE_ARGS = KeyTable((
    Key("shuffle_size", None, _BUFFER, "accepted for WeSep recipes, not used ([Shuffling](#shuffling))"),
))


def _combine(v: dict, where: str) -> dict:
    """What spans keys a config writes: collation (it names cues), batching (it sets the batch size) and train
    windows (alternatives to chunks).  Online mixing and augmentation are ``Flat`` fields (``loader.tse.mix_args``)."""
    v["collate"] = parse_collate(v["collate"], f"{where}.collate", v["cues"])
    v["batch_size"], v["batching"] = _batching(v["batching"], v["batch_size"], f"{where}.batching")
    v["train_window"], v["hist_frames"] = _train_window(v, v["mix"], where)
    return v


def _relate(v: dict, where: str) -> None:
    if v["min_num_seconds"] > v["max_num_seconds"]:
        raise ConfigError(f"{where}.filter_len_args: min_num_seconds {v['min_num_seconds']} > "
                          f"max_num_seconds {v['max_num_seconds']}")


def _static_relate(v: dict, where: str) -> None:
    if v["batch_size"] is None:
        raise ConfigError(f"{where}.batch_size: static batching needs a batch size")


def _budget_relate(v: dict, where: str) -> None:
    if (v["max_frames"] is None) == (v["max_num_elements"] is None):
        raise ConfigError(f"{where}: budget batching needs exactly one of max_frames, max_num_elements")
    if v["max_batch"] is not None and (v["max_batch"] < v["min_batch"] or v["max_batch"] < v["num_seqs_multiple_of"]):
        raise ConfigError(f"{where}.max_batch: {v['max_batch']} is below min_batch {v['min_batch']} or "
                          f"num_seqs_multiple_of {v['num_seqs_multiple_of']}")


_ROWS = Within(1, MAX_BATCH_ROWS)
#: ``batching: {type: static, batch_size}``: ``batch_size``'s other spelling.
STATIC_BATCHING = KeyTable((
    Key("batch_size", None, Nullable(_ROWS), "mixtures per batch", default_doc="required"),
), relate=_static_relate)
#: ``batching: {type: budget, ...}``: length-aware batches (``loader.plan.batching.make_budget_plan``).
BUDGET_BATCHING = KeyTable((
    Key("max_frames", None, Nullable(Within(1, MAX_COUNT)), "a batch holds about this many samples (one of "
        "`max_frames`, `max_num_elements`)"),
    Key("max_num_elements", None, Nullable(Within(1, MAX_COUNT)), "the same budget under fairseq2's name"),
    Key("cost", "linear", OneOf(COSTS), "a row costs its length, or its length squared"),
    Key("min_batch", 1, _ROWS, "fewest rows of a batch"),
    Key("max_batch", None, Nullable(_ROWS), "most rows of a batch", default_doc="none"),
    Key("num_seqs_multiple_of", 1, _ROWS, "rows a multiple of this"),
    Key("sort_window", DEFAULT_WINDOW_ITEMS, Within(1, MAX_SORT_WINDOW), "items sorted by length together"),
), relate=_budget_relate)


class _StageKeys:
    """The table of ``stage_args``: the keys of the stages registered when a config is parsed
    (``loader.tse.stages.keys``), read then, so a stage registered later adds its keys to the configs parsed after
    it."""

    @property
    def config_keys(self) -> tuple[Key, ...]:
        return stage_table().config_keys

    def rows(self, prefix: str = "") -> list:
        return stage_table().rows(prefix)


def _parse_stage_args(values: dict, where: str, held: dict) -> tuple[tuple[str, Any], ...]:
    """The registered stages' keys of a config, each checked by its declaration, in registration order."""
    return tuple(stage_table().check_config(values, where).items())


def _check_stage_args(value: Any, where: str) -> tuple[tuple[str, Any], ...]:
    """``stage_args`` built in code: ``(name, value)`` pairs (or a mapping) of registered stages' keys, each
    checked by its declaration."""
    pairs = tuple(value.items()) if isinstance(value, dict) else value
    if not isinstance(pairs, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        raise ConfigError(f"{where}: expected (key, value) pairs of registered stages' keys, got "
                          f"{type(value).__name__}")
    held = []
    for name, item in pairs:
        key = stage_key(name)
        if key is None:
            raise ConfigError(f"{where}: {name!r} is no registered stage's key")
        held.append((name, key.check(item, f"{where.rsplit('.', 1)[0]}.{name}")))
    return tuple(held)


_MIX = "online mixing ([Online mixing](#online-mixing))"
_AUG = "([Augmentation](#augmentation-noise-rooms-enrollments))"

#: Every key of TSE's ``dataset_args``, each declared once, in the order they are checked, the order of
#: ``DatasetArgs`` 's fields and of the docs' rows.  A config key that is no field of its own says ``field=False``
#: (``_combine`` reads it with the keys it goes with); a field that no config key of its name gives has a
#: ``build``.  Keys added after the first release (cues, collate overrides, online mixing, augmentation, budget
#: batching, train windows, mainline recipes) are hashed only while set.
DATASET_ARGS = KeyTable((
    Key("resample_rate", None, Nullable(Within(MIN_RATE, MAX_RATE, " Hz")), "rate of the batches; if it differs "
        "from a pack's rate, audio is resampled with soxr at load time (a warning says so: packing at the right "
        "rate is much faster)", default_doc="pack rate"),
    Key("whole_utt", False, Bool(), "train on whole utterances instead of chunks"),
    Key("chunk_len", None, Nullable(_SAMPLES), "training window", default_doc=f"{DEFAULT_CHUNK_SECONDS} s"),
    Key("chunk_random_start", True, Bool(), "random window start (else the start of the utterance)"),
    Key("chunk_short_policy", "pad", OneOf(SHORT_POLICIES), "an utterance shorter than `chunk_len`: zero-pad it to "
        "`chunk_len`, or keep its length"),
    Key("filter_len", False, Bool(), "with `whole_utt` in train: leave out utterances outside `filter_len_args` "
        "(counted in `report().filtered`)"),
    Key("filter_len_args", None, Nested(FILTER_LEN_ARGS), "WeSep's length filter bounds", field=False,
        dialects={MAINLINE: "filter_args"}),
    Key("min_num_seconds", 1.0, Parsed(_seconds_field, "", float), "", build=lambda v: v["filter_len_args"]["min_num_seconds"],
        path="filter_len_args.min_num_seconds"),
    Key("max_num_seconds", 1000.0, Parsed(_seconds_field, "", float), "", build=lambda v: v["filter_len_args"]["max_num_seconds"],
        path="filter_len_args.max_num_seconds"),
    Key("shuffle", True, Bool(), "a new order every epoch (in every state, as in WeSep)"),
    Key("shuffle_args", None, Nested(SHUFFLE_ARGS), "WeSep's shuffle buffer", field=False),
    Key("online_buffer_size", None, _BUFFER, "accepted for WeSep recipes, not used ([Shuffling](#shuffling))",
        field=False),
    Key("batch_size", 1, Parsed(_int, Within(1, MAX_BATCH_ROWS).doc, int),
        "mixtures per batch", field_check=Within(1, MAX_BATCH_ROWS)),
    Key("tail", "pad", OneOf(TAIL_POLICIES), "the last incomplete round of batches: padded with repeats flagged "
        "`valid = False`, or dropped"),
    Key("expand_targets", False, Bool(), "one item per (mixture, target): every row has `num_speaker` 1 "
        "(evaluation, inference)"),
    Key("normalize", NONE, Parsed(_read_normalize, OneOf(NORMALIZE_CHOICES).doc, str), "MuVAP's loudness normalisation from whole-recording "
        "statistics ([below](#normalisation-normalize-muvap)); the words every task shares (`loader/normalize.py`): "
        "`false`/`null` mean `none`, `true` the task's own (`muvap` here)", field_check=OneOf(NORMALIZE_CHOICES),
        fingerprint_value=_normalize_as_hashed),
    Key("collate", None, Unchecked("mapping", dict), "`collate.<field>.align` (`wav_mix`, `wav_target`: max, min) "
        "and the per-row fields' collation ([Cues](#cues))", field=False),
    Key("align", (("wav_mix", "max"), ("wav_target", "max")),
        Parsed(_check_aligns, "", tuple[tuple[str, str], ...]), "", build=lambda v: v["collate"][0]),
    Key("cues", (), Parsed(_check_cues, "mapping", tuple[CueRequest, ...]), "speaker cues to read "
        "([Cues](#cues))", default_doc="none", field_check=Unchecked("", tuple[CueRequest, ...]),
        fingerprint=WHEN_SET),
    Key("field_collate", (), Unchecked("", tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]), "",
        build=lambda v: v["collate"][1], fingerprint=WHEN_SET),
    Key("online_mix", False, Bool(), f"{_MIX} of `sources` packs in train", field=False),
    Key("mix", None, Flat(MIX, parse_mix, MixArgs | None), "", fingerprint=WHEN_SET),
    Key("augment", None, Flat(AUGMENT, parse_augment, AugmentArgs | None), "", fingerprint=WHEN_SET,
        fingerprint_value=_no_augment_unset),
    Key("batching", None, Nullable(Variant("type", {"static": STATIC_BATCHING, "budget": BUDGET_BATCHING})),
        "`{type: static, batch_size}` (same as `batch_size`) or `{type: budget, ...}`: length-aware batches "
        "([Batching](#batching))", default_doc="static", field_check=Unchecked("", BudgetArgs | None),
        fingerprint=WHEN_SET),
    Key("train_window", None, Nullable(Parsed(_count(1), _SAMPLES.doc, int)), "train: items longer than this "
        "tiled into near-equal chunks ([Batching](#batching))", field_check=Nullable(_SAMPLES),
        fingerprint=WHEN_SET),
    Key("hist_frames", 0, Parsed(_count(0), _HIST.doc, int), "with `train_window`: samples of unscored context "
        "fed before each chunk", field_check=_HIST, fingerprint=WHEN_SET),
    SHARD_WINDOW,
    Key("mainline", None, Parsed(lambda v, w: None if v is None else MainlineArgs.from_dict(v), "mapping",
                                 MainlineArgs | None),
        "set by a mainline WeSep recipe's translation (`loader.tse.mainline`), not by a config",
        field_check=Unchecked("", MainlineArgs | None), fingerprint=WHEN_SET),
    Key("stage_args", (), Flat(_StageKeys(), _parse_stage_args, tuple[tuple[str, Any], ...]), "",
        field_check=Parsed(_check_stage_args, "", tuple[tuple[str, Any], ...]), fingerprint=WHEN_SET,
        fingerprint_value=fingerprint_of),
), relate=_relate, combine=_combine)


@DATASET_ARGS.args_class("dataset_args")
class DatasetArgs:
    """``dataset_args``: what is read, how it is cut, normalised, batched and collated; one field per field of
    ``DATASET_ARGS``, checked on construction.

    ``tail`` says what happens to the last, incomplete round of batches: ``pad`` fills it with repeats flagged
    ``valid = False`` (every sample is seen, training code masks the repeats), ``drop`` leaves the tail out
    (reported).  Checks that need the packs (the cue exists, ``required`` against ``guaranteed``) happen when the
    loader is built (``loader.tse.cues.resolve.resolve_cues``).  ``chunk_len`` ``None`` is
    ``DEFAULT_CHUNK_SECONDS`` (3 s), resolved by ``chunk_samples`` once the rate is known; ``mix`` is ``None``
    without online mixing, ``augment`` without augmentation, ``batching`` with static batches, ``mainline`` but
    for a mainline WeSep recipe (``loader.tse.mainline``).
    """

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

    def stage_arg(self, name: str) -> Any:
        """The value of a registered stage's key ``name`` (``register_stage(..., keys=...)``): as the config gave
        it, else its declared default."""
        held = dict(self.stage_args)
        if name in held:
            return held[name]
        key = stage_key(name)
        if key is None:
            raise KeyError(f"{name!r} is no registered stage's key")
        return key.check(key.default, f"dataset_args.{name}")

    def collate_of(self, field_name: str) -> dict[str, Any]:
        """The ``collate.<field>`` keys given for a per-row field (empty when none)."""
        return dict(dict(self.field_collate).get(field_name, ()))

    @classmethod
    def from_dict(cls, obj: Any, where: str = "dataset_args") -> "DatasetArgs":
        check_legacy(obj, where)  # an older pipeline's key: name its replacement, not just "unknown key"
        return DATASET_ARGS.held(cls, DATASET_ARGS.parse(obj, where))


def _batching(b: dict | None, batch_size: int, where: str) -> tuple[int, BudgetArgs | None]:
    """The batch size and budget of ``batching`` (held by ``BATCHING``) and ``batch_size``: one of them sets the
    size."""
    if b is None:
        return _ROWS(batch_size, f"{where.rsplit('.', 1)[0]}.batch_size"), None
    if b["type"] == "static":
        if batch_size not in (1, b["batch_size"]):
            raise ConfigError(f"{where}.batch_size: {b['batch_size']} differs from dataset_args.batch_size "
                              f"{batch_size}; set one of them")
        return b["batch_size"], None
    if batch_size != 1:
        raise ConfigError(f"{where}: dataset_args.batch_size {batch_size} is set too; budget batching sizes its "
                          f"own batches")
    budget = b["max_frames"] if b["max_frames"] is not None else b["max_num_elements"]
    return 1, BudgetArgs(budget=budget, cost=b["cost"], min_batch=b["min_batch"], max_batch=b["max_batch"],
                         multiple_of=b["num_seqs_multiple_of"], window_items=b["sort_window"])


def _train_window(v: dict, mix: MixArgs | None, where: str) -> tuple[int | None, int]:
    """``train_window`` and ``hist_frames`` (samples at the loader rate for TSE packs), each already in range:
    what they contradict."""
    if v["train_window"] is None:
        if v["hist_frames"]:
            raise ConfigError(f"{where}.hist_frames: only used with train_window")
        return None, 0
    if v["chunk_len"] is not None:
        raise ConfigError(f"{where}.train_window: an alternative to chunk_len (random windows); set one of them")
    if v["whole_utt"]:
        raise ConfigError(f"{where}.train_window: whole_utt: true feeds whole utterances; unset one of them")
    if mix is not None:
        raise ConfigError(f"{where}.train_window: not supported with online_mix yet")
    return _SAMPLES(v["train_window"], f"{where}.train_window"), _HIST(v["hist_frames"], f"{where}.hist_frames")


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
