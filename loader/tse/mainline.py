"""Mainline WeSep's recipe YAML (github.com/wenet-e2e/wesep, ``examples/*/confs/*.yaml``) read unchanged, only
``packs`` added: the dialect recognised, its keys translated into the contract dialect's ``dataset_args`` with
mainline's meaning, and every key speechpack cannot honour refused in one error (docs/wesep.md, "Coming from
mainline WeSep").

The dialect is told from keys outside ``dataset_args`` (many ``dataset_args`` keys are valid in both): a top-level
``whole_utt`` or ``repeat_dataset`` (mainline's ``train.py`` reads them there), ``model_args.tse_model`` with
``joint_training`` or ``spk_feat``, or ``model_args.discriminator`` (mainline's ``train_gan.py``; its GAN recipes
name no ``joint_training``, whose default there is false: embeddings).  What mainline's ``train.py`` and ``Dataset`` do with each key, and what it becomes here:

- ``resample_rate``, ``chunk_len``, ``shuffle`` (mainline's default ``false`` kept), ``shuffle_args``,
  ``sample_num_per_epoch``, ``noise_prob`` + ``noise_lmdb_file``, ``online_mix``, ``online_buffer_size``: the
  contract keys of the same name; top-level ``whole_utt`` becomes ``dataset_args.whole_utt``;
- ``filter_len`` + ``filter_args`` (train only): ``filter_len`` + ``filter_len_args`` (a ``filter_len_args`` block,
  which mainline never reads, is honoured too);
- ``num_speakers: N``: ``{distribution, max_speakers}`` giving N speakers always; ``use_random_snr``: ``mix_snr``
  range [-10, 10] dB (else 0 dB), gain 0 dB;
- ``reverb_prob``: reverberates online mixtures (mainline ignores it for pre-mixed data, and so does this);
- ``noise_enroll_prob``, ``reverb_enroll_prob``: ``cue_processing.audio`` (enrollment audio only, as mainline);
- ``speaker_feat`` + ``fbank_args``: Kaldi fbank of the enrollment (``loader.tse.mainline_batch``);
- ``model_args.tse_model.joint_training``: enrollment audio (true) or embeddings (false) from the pack's audio
  cue; ``multi_task``: ``spk_label`` in training;
- ``repeat_dataset``: accepted (epochs are planned exactly; docs/wesep.md); ``SSA_enroll_prob``: accepted, unread
  by mainline too.

Val and test turn every augmentation and online mixing off, as mainline's ``train.py`` builds its val set.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from speechpack.loader.config_checks import ConfigError

MAINLINE = "wesep-mainline"
CONTRACT = "wesep-contract"
#: ``fbank_args`` keys and mainline's defaults (``processor.compute_fbank``).
FBANK_DEFAULTS = {"num_mel_bins": 80, "frame_length": 25, "frame_shift": 10, "dither": 1.0}
#: ``dataset_args`` keys mainline's ``Dataset`` reads, with what happens to them here (see module docstring).
KNOWN_KEYS = ("resample_rate", "shuffle", "shuffle_args", "chunk_len", "sample_num_per_epoch", "speaker_feat",
              "fbank_args", "noise_prob", "noise_lmdb_file", "reverb_prob", "noise_enroll_prob",
              "reverb_enroll_prob", "specaug_enroll_prob", "SSA_enroll_prob", "online_mix", "num_speakers",
              "online_buffer_size", "use_random_snr", "filter_len", "filter_args", "filter_len_args")
AUGMENT_KEYS = ("noise_prob", "reverb_prob", "noise_enroll_prob", "reverb_enroll_prob", "specaug_enroll_prob")


@dataclass(frozen=True)
class MainlineArgs:
    """What the mainline batch needs besides the contract keys (``loader.tse.mainline_batch``)."""

    joint_training: bool = False
    multi_task: bool = False
    speaker_feat: bool = False
    num_mel_bins: int = 80
    frame_length: float = 25.0
    frame_shift: float = 10.0
    dither: float = 1.0

    @classmethod
    def from_dict(cls, obj: Any) -> "MainlineArgs":
        return cls(**obj) if isinstance(obj, dict) else obj


def tse_model(obj: dict) -> dict:
    model_args = obj.get("model_args")
    model = model_args.get("tse_model") if isinstance(model_args, dict) else None
    return model if isinstance(model, dict) else {}


def dialect(obj: Any) -> str | None:
    """``MAINLINE`` for a mainline recipe, ``CONTRACT`` for a recipe of WeSep's contract pipeline, None for a
    plain loader config (no recipe sections)."""
    if not isinstance(obj, dict):
        return None
    model_args = obj.get("model_args")
    if ("whole_utt" in obj or "repeat_dataset" in obj or {"joint_training", "spk_feat"} & set(tse_model(obj))
            or (isinstance(model_args, dict) and "discriminator" in model_args)):
        return MAINLINE
    return CONTRACT if any(k in obj for k in ("dataloader_args", "val_dataset_args", "model", "model_args")) else None


def _refusal(problems: list[str], where: str, key: str, message: str) -> None:
    problems.append(f"  {where}.{key}: {message}")


def translate(obj: dict, state: str, where: str = "config") -> dict:
    """The contract-dialect config of a mainline recipe for ``state``; one ``ConfigError`` lists every key that
    cannot be honoured (its section, and what to use instead)."""
    args = obj.get("dataset_args") or {}
    if not isinstance(args, dict):
        raise ConfigError(f"{where}.dataset_args: expected a mapping, got {type(args).__name__}")
    at = f"{where}.dataset_args"
    problems: list[str] = []
    model = tse_model(obj)
    joint = bool(model.get("joint_training", False))
    train = state == "train"
    for key in args:
        if key not in KNOWN_KEYS:
            _refusal(problems, at, key, f"not a key of mainline WeSep's dataset_args (it reads {', '.join(KNOWN_KEYS)})")
    out: dict[str, Any] = {}
    for key in ("resample_rate", "chunk_len", "shuffle_args", "online_buffer_size"):
        if args.get(key) is not None:
            out[key] = args[key]
    out["shuffle"] = args.get("shuffle", False)  # mainline's Dataset defaults to no shuffling
    if args.get("sample_num_per_epoch") is not None:
        out["sample_num_per_epoch"] = args["sample_num_per_epoch"]
    out["whole_utt"] = bool(obj.get("whole_utt", False))
    if args.get("filter_len") and train:
        out["filter_len"] = True
        limits = args.get("filter_args") or args.get("filter_len_args")
        if limits is not None:
            out["filter_len_args"] = limits
    online = bool(args.get("online_mix", False)) and train
    probs = {key: args.get(key, 0) or 0 for key in AUGMENT_KEYS} if train else dict.fromkeys(AUGMENT_KEYS, 0)
    lmdb = args.get("noise_lmdb_file")
    if online:
        count = args.get("num_speakers", 2)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            _refusal(problems, at, "num_speakers", f"expected a speaker count (mainline's form), got {count!r}")
        else:
            out["online_mix"] = True
            out["num_speakers"] = {"distribution": [1 if count == 1 else 0, 1 if count == 2 else 0,
                                                    1 if count >= 3 else 0], "max_speakers": max(count, 1)}
        snr = [-10, 10] if args.get("use_random_snr", False) else [0, 0]
        out["mix_snr"] = {"range": snr, "gain": [0, 0]}
        if probs["reverb_prob"]:
            out["reverb_prob"] = probs["reverb_prob"]
    if probs["noise_prob"]:
        if not lmdb:
            _refusal(problems, at, "noise_prob", "needs dataset_args.noise_lmdb_file (mainline asserts it too)")
        out["noise_prob"] = probs["noise_prob"]
    if lmdb and (probs["noise_prob"] or (joint and probs["noise_enroll_prob"])):
        out["noise_lmdb_file"] = lmdb
    speaker_feat = bool(args.get("speaker_feat", False)) and joint
    if joint:
        enroll = {k: probs[k] for k in ("noise_enroll_prob", "reverb_enroll_prob") if probs[k]}
        if enroll.get("noise_enroll_prob") and not lmdb:
            _refusal(problems, at, "noise_enroll_prob", "needs dataset_args.noise_lmdb_file (mainline asserts it "
                                                        "too)")
        if enroll:
            out["cue_processing"] = {"audio": enroll}
        if probs["specaug_enroll_prob"] and speaker_feat:
            _refusal(problems, at, "specaug_enroll_prob", "SpecAugment of the enrollment's fbank is not implemented "
                                                          "here; set it to 0 and mask features in the model")
    fbank = dict(FBANK_DEFAULTS)
    given = args.get("fbank_args") or {}
    if speaker_feat:
        if not isinstance(given, dict):
            _refusal(problems, at, "fbank_args", f"expected a mapping, got {type(given).__name__}")
            given = {}
        for key, value in given.items():
            if key not in FBANK_DEFAULTS:
                _refusal(problems, f"{at}.fbank_args", key, f"not one of {', '.join(FBANK_DEFAULTS)}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                _refusal(problems, f"{at}.fbank_args", key, f"expected a non-negative number, got {value!r}")
            else:
                fbank[key] = value
    if problems:
        raise ConfigError(f"{where}: a mainline WeSep recipe (model_args.tse_model.joint_training / whole_utt / "
                          f"repeat_dataset) with {len(problems)} key(s) speechpack cannot honour:\n"
                          + "\n".join(problems))
    out["cues"] = {"audio": {"use": True}}
    out["mainline"] = {"joint_training": joint, "multi_task": bool(model.get("multi_task", False)) and joint,
                       "speaker_feat": speaker_feat, "num_mel_bins": int(fbank["num_mel_bins"]),
                       "frame_length": float(fbank["frame_length"]), "frame_shift": float(fbank["frame_shift"]),
                       "dither": float(fbank["dither"]) if train else 0.0}
    translated = {key: copy.deepcopy(value) for key, value in obj.items()
                  if key not in ("dataset_args", "val_dataset_args", "whole_utt", "repeat_dataset")}
    translated["dataset_args"] = out
    return translated


__all__ = ["CONTRACT", "MAINLINE", "MainlineArgs", "dialect", "translate"]
