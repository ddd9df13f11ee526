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
- ``speaker_feat`` + ``fbank_args``: Kaldi fbank of the enrollment (``loader.tse.mainline``);
- ``model_args.tse_model.joint_training``: enrollment audio (true) or embeddings (false) from the pack's audio
  cue; ``multi_task``: ``spk_label`` in training;
- ``repeat_dataset``: accepted (training epochs are planned exactly; docs/wesep.md); ``SSA_enroll_prob``: accepted,
  unread by mainline too;
- ``contract_keys`` (speechpack's own; mainline's ``Dataset`` ignores it): the contract's batch keys too.

Val and test turn every augmentation and online mixing off, as mainline's ``train.py`` builds its val set.  Mainline's
data semantics hold in every state (``loader.tse.windows.Chunking.mainline``): train and val are cut to ``chunk_len``
(test, as its ``infer.py``, only with ``whole_utt: false``), short mixtures tiled, windows re-drawn while a target is
silent; val windows are keyed by (seed, mixture) (``loader.tse.stages.windows.window_draws``), and val runs
mainline's ``val_iter`` full batches, refusing at start a dev set too small for one
(``loader.tse.task.TseBatchBuilder.plan_args``, ``check_plan``).

The batch of mainline WeSep's ``tse_collate_fn`` (github.com/wenet-e2e/wesep, ``wesep/dataset/dataset.py``), so
its ``train.py`` loop runs unchanged on a speechpack loader (docs/wesep.md, "Coming from mainline WeSep").

The TSE pipeline's last stage, ``mainline`` (``loader.tse.stages.mainline``), makes it from the contract batch
(same plan, rows, draws), renamed and reshaped:

- ``wav_mix``, ``wav_targets``: ``[rows, T]`` float32, one row per (mixture, target), the first channel (mainline's
  chunking keeps channel 0);
- ``spk_embeds``: the audio cue of each row as mainline's ``sample_*`` and ``compute_fbank``/``apply_cmvn`` leave
  it, cut to the shortest row of the batch (its ``mode="min"``): ``[rows, D]`` embeddings, ``[rows, L]``
  enrollment waveforms, or ``[rows, frames, num_mel_bins]`` Kaldi fbank of the enrollment scaled by 2**15 with
  the enrollment's mean removed (``speaker_feat``);
- ``length_spk_embeds``: each row's length before the cut (a list, as mainline gives it);
- ``spk``, ``key``: lists; ``spk_label``: the speaker's index in ``spk2enroll.json`` order in training with
  ``multi_task``, else an empty tensor (mainline's val set has no labels).

Those keys only (``BATCH_KEYS``), unless ``contract_keys``: then the contract's stay beside them (``wav_target``,
``audio_aux``, ``speaker_label``, ``valid``, ``lengths`` and the rest; ``wav_mix`` is mainline's).  Dither noise is
drawn from a generator keyed by (seed, epoch, batch), so a batch is the same with any number of workers; val has no
dither (mainline dithers val enrollments too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
import copy
import functools
import math

import numpy as np

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
#: speechpack's own ``dataset_args`` keys in a mainline recipe (mainline's ``Dataset`` reads keys with ``.get``, so
#: it runs on the same file): ``contract_keys: true`` keeps the contract's batch keys beside mainline's.
SPEECHPACK_KEYS = ("contract_keys",)
#: The keys of mainline's ``tse_collate_fn`` batch, the only ones a mainline batch has without ``contract_keys``.
BATCH_KEYS = ("wav_mix", "wav_targets", "spk_embeds", "length_spk_embeds", "spk", "key", "spk_label")
AUGMENT_KEYS = ("noise_prob", "reverb_prob", "noise_enroll_prob", "reverb_enroll_prob", "specaug_enroll_prob")


@dataclass(frozen=True)
class MainlineArgs:
    """What the mainline batch needs besides the contract keys (``loader.tse.mainline``)."""

    joint_training: bool = False
    multi_task: bool = False
    speaker_feat: bool = False
    #: ``dataset_args.contract_keys``: the contract's keys (``wav_target``, ``audio_aux``, ``valid``, ...) too.
    contract_keys: bool = False
    num_mel_bins: int = 80
    frame_length: float = 25.0
    frame_shift: float = 10.0
    dither: float = 1.0

    @classmethod
    def from_dict(cls, obj: Any) -> "MainlineArgs":
        return cls(**obj) if isinstance(obj, dict) else obj


def fixed_speakers(count: int) -> dict:
    """The ``num_speakers`` block that mixes ``count`` speakers always: mainline's (and the older pipeline's)
    fixed count in the contract dialect's form."""
    return {"distribution": [1 if count == 1 else 0, 1 if count == 2 else 0, 1 if count >= 3 else 0],
            "max_speakers": max(count, 1)}


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


def read_dialect(obj: Any, state: str, where: str = "config") -> tuple[Any, str | None]:
    """The TSE task's recipe reader (``loader.tasks.DIALECT_READERS``): ``obj`` as the loader reads it for
    ``state`` (a mainline recipe translated, ``translate``) and the dialect it was read as (``dialect``)."""
    read_as = dialect(obj)
    if read_as == MAINLINE:  # mainline WeSep's recipe: its keys in the contract dialect's terms
        obj = translate(obj, state, where)
    return obj, read_as


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
        if key not in KNOWN_KEYS and key not in SPEECHPACK_KEYS:
            _refusal(problems, at, key, f"not a key of mainline WeSep's dataset_args (it reads "
                                        f"{', '.join(KNOWN_KEYS)}; speechpack adds {', '.join(SPEECHPACK_KEYS)})")
    contract_keys = args.get("contract_keys", False)
    if not isinstance(contract_keys, bool):
        _refusal(problems, at, "contract_keys", f"expected true or false, got {contract_keys!r}")
    out: dict[str, Any] = {}
    for key in ("resample_rate", "chunk_len", "shuffle_args", "online_buffer_size"):
        if args.get(key) is not None:
            out[key] = args[key]
    out["shuffle"] = args.get("shuffle", False)  # mainline's Dataset defaults to no shuffling
    if args.get("sample_num_per_epoch") is not None and train:  # train.py sizes training epochs with it, not val
        out["sample_num_per_epoch"] = args["sample_num_per_epoch"]
    # train.py reads whole_utt with the default false (train and val), infer.py with true (test)
    out["whole_utt"] = bool(obj.get("whole_utt", state == "test"))
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
            out["num_speakers"] = fixed_speakers(count)
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
                       "speaker_feat": speaker_feat, "contract_keys": contract_keys is True,
                       "num_mel_bins": int(fbank["num_mel_bins"]),
                       "frame_length": float(fbank["frame_length"]), "frame_shift": float(fbank["frame_shift"]),
                       "dither": float(fbank["dither"]) if train else 0.0}
    translated = {key: copy.deepcopy(value) for key, value in obj.items()
                  if key not in ("dataset_args", "val_dataset_args", "whole_utt", "repeat_dataset")}
    translated["dataset_args"] = out
    return translated


#: Kaldi's defaults that mainline's ``compute_fbank`` keeps (``torchaudio.compliance.kaldi.fbank``).
PREEMPHASIS = 0.97
LOW_FREQ = 20.0
WAVEFORM_SCALE = 1 << 15


def _mel(freq):
    return 1127.0 * np.log(1.0 + np.asarray(freq, dtype=np.float64) / 700.0)


@functools.lru_cache(maxsize=8)
def mel_banks(num_bins: int, fft_size: int, sample_rate: int) -> np.ndarray:
    """Kaldi's triangular mel filters ``[num_bins, fft_size // 2]`` from 20 Hz to Nyquist (no VTLN)."""
    low, high = _mel(LOW_FREQ), _mel(sample_rate / 2)
    delta = (high - low) / (num_bins + 1)
    left = low + np.arange(num_bins)[:, None] * delta
    center, right = left + delta, left + 2 * delta
    mel = _mel(sample_rate / fft_size * np.arange(fft_size // 2))[None, :]
    up, down = (mel - left) / (center - left), (right - mel) / (right - center)
    return np.maximum(0.0, np.minimum(up, down)).astype(np.float32)


def kaldi_fbank(wave: np.ndarray, sample_rate: int, args: MainlineArgs, rng: np.random.Generator | None) -> np.ndarray:
    """``[frames, num_mel_bins]`` log-mel energies of ``wave`` (float, already scaled by 2**15) with Kaldi's
    options as mainline passes them: hamming window, ``snip_edges``, DC removal, pre-emphasis 0.97, power
    spectrum, no energy, log floored at float32's epsilon; ``dither`` Gaussian noise per frame from ``rng``."""
    length = int(sample_rate * args.frame_length * 0.001)
    shift = int(sample_rate * args.frame_shift * 0.001)
    if length < 2 or shift < 1 or len(wave) < length:
        return np.zeros((0, args.num_mel_bins), dtype=np.float32)
    count = 1 + (len(wave) - length) // shift
    frames = np.lib.stride_tricks.sliding_window_view(wave.astype(np.float32), length)[::shift][:count].copy()
    if args.dither and rng is not None:
        frames += np.float32(args.dither) * rng.standard_normal(frames.shape, dtype=np.float32)
    frames -= frames.mean(axis=1, keepdims=True)
    previous = np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    frames -= np.float32(PREEMPHASIS) * previous
    frames *= np.hamming(length).astype(np.float32)
    fft_size = 1 << math.ceil(math.log2(length))
    spectrum = np.fft.rfft(frames, n=fft_size, axis=1)[:, :fft_size // 2]
    power = (spectrum.real ** 2 + spectrum.imag ** 2).astype(np.float32)
    energies = power @ mel_banks(args.num_mel_bins, fft_size, sample_rate).T
    return np.log(np.maximum(energies, np.finfo(np.float32).eps)).astype(np.float32)


__all__ = ["BATCH_KEYS", "CONTRACT", "MAINLINE", "MainlineArgs", "SPEECHPACK_KEYS", "dialect",
           "fixed_speakers", "kaldi_fbank", "mel_banks", "translate"]
