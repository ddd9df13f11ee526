"""Online reverberation made for a whole batch at once (``Reverberator`` in ``loader/tse/augment.py``,
``room_sim.rooms_rirs``, ``loader/tse/convolve.py``): batching changes float round-off only, never a draw; the
batched FFT convolution is the full convolution; RIR trimming on real impulse responses; batches of real speech with
real noise."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import soxr
import torch

from factories import require_recording
from factories.online_mix import REAL_RIRS, augment_packs
from speechpack.loader import build_loader
from speechpack.loader.tse.augment import RirSource
from speechpack.loader.tse.mix_args import AugmentArgs
from speechpack.loader.tse.convolve import RIR_TRIM_DB, convolve_rows, trim_length, trim_rir
from speechpack.loader.tse.online import OnlineMixer
from speechpack.loader.tse.room_sim import RoomConfig, draw_room, room_rirs, rooms_rirs

RATE = 16000


def _snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    reference, other = reference.astype(np.float64), other.astype(np.float64)
    error = float(np.sum((reference - other) ** 2))
    return np.inf if error == 0.0 else 10.0 * np.log10(float(np.sum(reference ** 2)) / error)


def _speech(real_audio, rows: int, seconds: float) -> np.ndarray:
    """``rows`` real speech excerpts of ``seconds`` (pocketsphinx's LibriVox clips, 16 kHz), float32."""
    clips = [soundfile.read(p, dtype="float32")[0] for p in real_audio("pocketsphinx")]
    length = int(seconds * RATE)
    return np.stack([clips[i % len(clips)][(i // len(clips)) * length:][:length] for i in range(rows)])


def _generators(keys) -> list[np.random.Generator]:
    return [np.random.Generator(np.random.Philox(key=k)) for k in keys]


def test_rooms_of_a_batch_are_the_rooms_simulated_alone():
    """``rooms_rirs`` over a batch of rooms (1-3 sources, short and long RT60) gives each room's RIRs as that room
    simulated alone (its draws are its own; the arithmetic agrees to float32 round-off), each row zero after its
    room's length."""
    config = RoomConfig(rt60=(0.1, 0.7))
    counts = [1, 2, 3, 2, 1, 2]
    generators = _generators(range(6))
    rooms = [draw_room(g, config, n) for g, n in zip(generators, counts)]
    rirs, lengths = rooms_rirs(rooms, generators, RATE)
    assert rirs.shape[0] == sum(counts) and rirs.dtype == np.float32
    row = 0
    for key, (room, n) in enumerate(zip(rooms, counts)):
        g = _generators([key])[0]
        draw_room(g, config, n)
        alone = room_rirs(room, RATE, g)
        assert np.all(lengths[row:row + n] == alone.shape[1])
        assert np.all(rirs[row:row + n, alone.shape[1]:] == 0.0)
        for batched, single in zip(rirs[row:row + n], alone):
            assert _snr_db(single, batched[:alone.shape[1]]) > 120.0
        row += n


def test_batched_convolution_is_the_full_convolution_of_real_speech(real_audio):
    """One FFT call for rows of different lengths (zero-padded to the longest) and trimmed simulated RIRs of
    different lengths: each row is ``np.convolve(source, rir)[:T]`` of its own unpadded source, in float32 (more than
    100 dB SNR against float64)."""
    speech = _speech(real_audio, 6, 1.0)
    lengths = [RATE, RATE // 2, RATE, 3 * RATE // 4, RATE, RATE // 3]
    for row, n in zip(speech, lengths):
        row[n:] = 0.0
    kernels, kept = RirSource(AugmentArgs(reverb_prob=1.0, reverb_conf=RoomConfig())).rooms([0.1, 0.5, 0.9], [2, 2, 2],
                                                                                            RATE)
    assert len(set(kept.tolist())) > 1 and kernels.shape[1] == kept.max()
    wet = convolve_rows(speech, kernels)
    assert wet.shape == speech.shape and wet.dtype == np.float32
    for source, kernel, n, k, out in zip(speech, kernels, lengths, kept, wet):
        expected = np.convolve(source[:n].astype(np.float64), kernel[:k].astype(np.float64))[:n]
        assert _snr_db(expected, out[:n]) > 100.0


@pytest.mark.real_data
@pytest.mark.parametrize("path", REAL_RIRS, ids=["street2-L", "street2-R"])
def test_trimming_real_impulse_responses(real_audio, path):
    """A real RIR (jconvolver's street2, 48 kHz, at 16 kHz) is cut where ``RIR_TRIM_DB`` of its energy is spent:
    shorter, all but 1e-6 of the energy kept, and real speech reverberated with the cut RIR within 50 dB of the
    whole one (measured 52-59 dB on these and pyroomacoustics RIRs: speech weighs the low frequencies, where a tail
    holds more than its share; why the loader trims only the RIRs it simulates, docs/wesep.md)."""
    data, rate = soundfile.read(require_recording("jconvolver-config-files", path), dtype="float64")
    rir = soxr.resample(data, rate, RATE).astype(np.float32)
    cut = trim_rir(rir)
    assert RIR_TRIM_DB == 60.0
    assert len(cut) < len(rir) and np.array_equal(cut, rir[:len(cut)])
    energy = float(np.sum(rir.astype(np.float64) ** 2))
    assert float(np.sum(cut.astype(np.float64) ** 2)) >= energy * (1.0 - 1e-6)
    assert float(np.sum(rir[len(cut) - 1:].astype(np.float64) ** 2)) > energy * 1e-6  # not a sample earlier
    speech = _speech(real_audio, 2, 1.5)
    whole = convolve_rows(speech, np.stack([rir, rir]))
    trimmed = convolve_rows(speech, np.stack([cut, cut]))
    assert all(_snr_db(w, t) > 50.0 for w, t in zip(whole, trimmed))
    rows = np.zeros((2, len(rir) + 100), dtype=np.float32)  # a batch's rows: zeros after a RIR change nothing
    rows[0, :len(rir)], rows[1, 100:] = rir, rir
    assert np.array_equal(trim_length(rows), [len(cut), len(cut) + 100])


@pytest.fixture
def packs(real_audio, wesep_list, tmp_path):
    """A sources pack of 12 real utterances of 0.7-1.3 s by 7 speakers (pocketsphinx and codec2 crops) and a
    noise bank of real noise (ALSA's Noise.wav)."""
    return augment_packs(real_audio, wesep_list, tmp_path)


def _config(src: str, noise: str, **extra) -> dict:
    args = {"online_mix": True, "num_speakers": {"distribution": [0.2, 0.5, 0.3], "max_speakers": 3},
            "chunk_len": RATE, "batch_size": 4, "cues": {"audio": {"use": False}}, "reverb_prob": 1.0,
            "reverb_conf": {"rt60": [0.2, 0.6]}, "noise_prob": 1.0, "noise_banks": [{"path": noise}], **extra}
    return {"packs": [{"path": src}], "dataset_args": args}


def _batches(config: dict, seed: int = 5) -> list[dict]:
    return [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
            for b in build_loader(config, "train", seed=seed)]


@pytest.mark.real_data
@pytest.mark.parametrize("extra", [{}, {"reverb_prob": 0.5, "reverb_keep_dry": True,
                                        "timeline": {"two_speaker": {"overlap_ratio": [0.2, 0.8]}}},
                                   {"whole_utt": True}],
                         ids=["reverb-1", "reverb-0.5-keep-dry-timeline", "whole-utterances"])
def test_batched_reverb_agrees_with_group_by_group(packs, monkeypatch, extra):
    """Real speech, simulated rooms and real noise on every mixture: the batch's one-call reverberation gives the
    batches that reverberating group by group gives (the same draws, keys and lengths; every row within float32
    round-off, more than 100 dB SNR), and is deterministic."""
    config = _config(*packs, **extra)
    batched = _batches(config)
    assert all(torch.equal(a["wav_mix"], b["wav_mix"]) for a, b in zip(batched, _batches(config)))
    # reference: no batch preparation, so each group is decoded and reverberated on its own in ``realise``
    monkeypatch.setattr(OnlineMixer, "reverberate", lambda self, drafts: [None] * len(drafts))
    alone = _batches(config)
    assert len(alone) == len(batched) >= 3
    for a, b in zip(alone, batched):
        assert a["key"] == b["key"] and a["source_key"] == b["source_key"]
        for name in ("wav_mix", "wav_target"):
            assert a[name].shape == b[name].shape
            for x, y in zip(a[name].numpy(), b[name].numpy()):
                assert _snr_db(x, y) > 100.0, name


def test_high_pass_as_a_filter_and_as_a_frequency_response_agree():
    """The 80 Hz high-pass run recursively (scipy) and applied as its frequency response (the fallback), on RIR
    taps of odd and even lengths (odd FFT sizes included): the same to 1e-12 of the peak."""
    from speechpack.loader.tse.room_sim import highpass

    rng = np.random.default_rng(3)
    for length in (2001, 2002, 7777):
        taps = rng.random((3, length)) * np.exp(-np.arange(length) / 800.0)
        recursive, spectral = highpass(taps, RATE, recursive=True), highpass(taps, RATE, recursive=False)
        assert np.max(np.abs(recursive - spectral)) < 1e-12 * np.max(np.abs(recursive))
