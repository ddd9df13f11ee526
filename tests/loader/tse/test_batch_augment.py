"""Online mixtures augmented where training runs (``augment_on: batch``, ``loader/tse/batch_augment.py``): on real
speech, simulated rooms, bank RIRs and real noise, the batches ``loader.augment`` makes from the workers' dry
sources and draw records are the worker-side batches within float32 round-off, with the same keys, speakers and
lengths (the same draws: rooms, SNRs, noise segments); the recipe key, its refusals and the resume state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from factories.online_mix import augment_packs
from speechpack.loader import build_loader
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.tse.batch_augment import augment_batch

RATE = 16000
#: SNR (dB) a batch-side row must keep against the worker-side row: float32 round-off of FFTs of different sizes
#: and of sums in another order is about 1e-7 of the signal (140 dB); 90 dB leaves room and still catches any
#: difference in a draw, a scale or a sample offset.
MIN_SNR_DB = 90.0


def _snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    reference, other = reference.astype(np.float64), other.astype(np.float64)
    error = float(np.sum((reference - other) ** 2))
    return np.inf if error == 0.0 else 10.0 * np.log10(float(np.sum(reference ** 2)) / error)


@pytest.fixture
def packs(real_audio, wesep_list, tmp_path):
    """A sources pack of 12 real utterances of 0.7-1.3 s by 7 speakers (pocketsphinx and codec2 crops), a noise
    bank of real noise (ALSA's Noise.wav) and a bank of two real RIRs (jconvolver's street2)."""
    return augment_packs(real_audio, wesep_list, tmp_path, rirs=True)


def _config(packs, side: str, **extra) -> dict:
    src, noise, _rirs = packs
    args = {"online_mix": True, "num_speakers": {"distribution": [0.2, 0.5, 0.3], "max_speakers": 3},
            "chunk_len": RATE, "batch_size": 4, "cues": {"audio": {"use": False}}, "reverb_prob": 1.0,
            "reverb_conf": {"rt60": [0.2, 0.6]}, "noise_prob": 1.0, "noise_banks": [{"path": noise}],
            "augment_on": side, **extra}
    return {"packs": [{"path": src}], "dataset_args": args}


def _batches(config: dict, seed: int = 5, **kwargs) -> list[dict]:
    loader = build_loader(config, "train", seed=seed, **kwargs)
    return [loader.augment({k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.items()})
            for b in loader]


VARIANTS = {
    "reverb-1-noise-1": {},
    "two-speakers": {"num_speakers": {"distribution": [0, 1, 0], "max_speakers": 2}},
    "reverb-0.5-keep-dry-timeline": {"reverb_prob": 0.5, "reverb_keep_dry": True, "noise_prob": 0.5,
                                     "timeline": {"two_speaker": {"overlap_ratio": [0.2, 0.8]}}},
    "whole-utterances": {"whole_utt": True},
    "align-min": {"whole_utt": True, "collate": {"wav_mix": {"align": "min"}}},
    "bank-rirs": {"reverb_conf": None, "rir_banks": "RIRS"},
    "no-augmentation": {"reverb_prob": 0.0, "noise_prob": 0.0},
}


@pytest.mark.real_data
@pytest.mark.parametrize("name", list(VARIANTS))
def test_batch_side_agrees_with_worker_side(packs, name):
    """The same seed gives the same batches whichever side augments: keys, speakers, lengths and metadata equal,
    every audio row within float32 round-off (more than ``MIN_SNR_DB``), silent rows silent on both sides."""
    extra = dict(VARIANTS[name])
    if extra.get("rir_banks") == "RIRS":
        extra["rir_banks"] = [{"path": packs[2]}]
    worker, batch = _batches(_config(packs, "worker", **extra)), _batches(_config(packs, "batch", **extra))
    assert len(worker) == len(batch) >= 3
    for w, b in zip(worker, batch):
        assert list(w) == list(b) and not any(k.startswith("aug_") for k in b)
        for key, value in w.items():
            if key in ("wav_mix", "wav_target"):
                assert value.shape == b[key].shape and b[key].dtype == torch.float32, key
                for x, y in zip(value.numpy(), b[key].numpy()):
                    if not np.any(x):
                        assert not np.any(y)
                    else:
                        assert _snr_db(x, y) > MIN_SNR_DB, (key, _snr_db(x, y))
            elif isinstance(value, torch.Tensor):
                assert torch.equal(value, b[key]), key
            else:
                assert value == b[key], key


@pytest.mark.real_data
def test_workers_send_records_and_the_batch_is_made_once(packs):
    """With workers the records travel like any field; before ``augment`` a batch has no ``wav_mix`` (forgetting
    the call fails loudly); ``augment`` is a no-op on a finished batch and on validation batches."""
    config = _config(packs, "batch")
    loader = build_loader(config, "train", seed=5, num_workers=2)
    raw = [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.items()} for b in loader]
    assert all("wav_mix" not in b and b["aug_dry"].dtype == torch.float32 for b in raw)
    made = [loader.augment(b) for b in raw]
    again = [augment_batch(b) for b in made]
    assert all(a is b for a, b in zip(made, again))
    reference = _batches(config)
    for x, y in zip(made, reference):
        assert torch.equal(x["wav_mix"], y["wav_mix"]) and torch.equal(x["wav_target"], y["wav_target"])
    val = build_loader(config, "val", seed=5)
    for b in val:
        assert val.augment(b) is b and "wav_mix" in b


@pytest.mark.real_data
def test_resume_state_is_shared_by_both_sides(packs):
    """Where augmentation runs changes no draw: a state saved on one side resumes on the other."""
    worker = build_loader(_config(packs, "worker"), "train", seed=5)
    batch = build_loader(_config(packs, "batch"), "train", seed=5)
    assert worker.state_dict() == batch.state_dict()


def test_augment_on_is_checked(packs):
    """An unknown side, and ``batch`` without online mixing, are refused naming the key."""
    with pytest.raises(ConfigError, match="augment_on"):
        build_loader(_config(packs, "gpu"), "train")
    config = _config(packs, "batch")
    for key in ("online_mix", "num_speakers", "reverb_prob", "reverb_conf"):
        config["dataset_args"].pop(key)
    with pytest.raises(ConfigError, match="augment_on: batch .* needs online_mix"):
        build_loader(config, "train")


@pytest.mark.real_data
def test_lightning_applies_it_after_the_transfer(packs):
    """The DataModule's ``on_after_batch_transfer`` makes the batch as ``loader.augment`` does."""
    pytest.importorskip("lightning")
    from speechpack.loader.datamodule import SpeechDataModule

    config = _config(packs, "batch")
    module = SpeechDataModule(train=config, seed=5)
    raw = next(iter(module.train_dataloader()))
    made = module.on_after_batch_transfer(raw, 0)
    expected = _batches(config)[0]
    assert "aug_dry" in raw and list(made) == list(expected)
    assert torch.equal(made["wav_mix"], expected["wav_mix"]) and torch.equal(made["wav_target"], expected["wav_target"])


def test_noise_and_rir_banks_by_url_read_through_the_configs_node_cache(packs, s3_store, tmp_path):
    """Banks named by URL go through the node cache the loader config names (handed to the TSE builder
    explicitly, as the packs are): the same batches as the local banks, their files fetched into that cache."""
    from pathlib import Path

    from factories.s3 import publish

    src, noise, rirs = packs
    args = {"online_mix": True, "num_speakers": {"distribution": [0, 1, 0], "max_speakers": 2}, "chunk_len": 8000,
            "batch_size": 3, "reverb_prob": 1.0, "noise_prob": 1.0}
    local = {"packs": [{"path": src}], "dataset_args": {**args, "noise_banks": [{"path": noise}],
                                                        "rir_banks": [{"path": rirs}]}}
    remote = {"packs": [{"path": src}], "cache": {"dir": str(tmp_path / "node-cache")}, "dataset_args": {
        **args, "noise_banks": [{"path": publish(Path(noise), "banks/noise")}],
        "rir_banks": [{"path": publish(Path(rirs), "banks/rirs")}]}}
    want = list(build_loader(local, "train", seed=5))
    got = list(build_loader(remote, "train", seed=5))
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        assert torch.equal(a["wav_mix"], b["wav_mix"])
    fetched = [p for p in (tmp_path / "node-cache").rglob("*") if p.is_file()]
    assert fetched, "the banks' files were not read through the config's cache"
