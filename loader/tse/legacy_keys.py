"""Keys of older WeSep configs (the earlier public pipeline and its forks) and what replaces each one now.

The earlier pipeline selected enrollments with ``speaker_feat`` and Kaldi features, mixed a fixed number of
speakers and took other key names; WeSep's data pipeline contract replaced all of them.  A config that still holds
one would otherwise fail with a bare "unknown key" or, worse, be read with a different meaning, so each gets an
error naming its replacement (docs/wesep.md "Bring your recipe").
"""

from __future__ import annotations

from typing import Any

from speechpack.loader.config_checks import ConfigError

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
    """The ``num_speakers`` block of a fixed speaker count."""
    dist = [1 if count == 1 else 0, 1 if count == 2 else 0, 1 if count >= 3 else 0]
    return f"{{distribution: {dist}, max_speakers: {max(count, 1)}}}"


__all__ = ["LEGACY_KEYS", "check_legacy"]
