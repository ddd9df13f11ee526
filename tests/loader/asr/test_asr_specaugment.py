"""loader.asr.features: masks inside their bounds, drawn from the batch generator, on features and waveforms."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from speechpack.loader.asr.features import fbank
from speechpack.loader.asr.features import (ROUND_TRIP_FFT, draw_masks, round_trip_frames, spec_augment_features,
                                    spec_augment_waveforms)
from speechpack.loader.rng import batch_rng


def test_masks_stay_within_their_bounds():
    frames = np.random.default_rng(0).integers(0, 400, size=2000)
    masks = draw_masks(batch_rng(7, 0, 3), frames, 80, p=0.5, freq_param=27, time_param=100)
    freq_width = masks.freq_stop - masks.freq_start
    time_width = masks.time_stop - masks.time_start
    assert (freq_width >= 0).all() and (freq_width < 27).all()
    assert (masks.freq_start >= 0).all() and (masks.freq_stop <= 80).all()
    assert (time_width >= 0).all() and (time_width < np.maximum(np.minimum(100, frames), 1)).all()
    assert (masks.time_start >= 0).all() and (masks.time_stop <= frames).all()
    assert 0.45 < masks.applied.mean() < 0.55  # spec_aug_p
    assert freq_width.max() == 26 and time_width.max() == 99  # the whole range is reachable


def test_draws_come_from_the_batch_generator():
    frames = np.array([300, 50, 0])
    a = draw_masks(batch_rng(1, 2, 3), frames, 80, 1.0, 80, 80)
    b = draw_masks(batch_rng(1, 2, 3), frames, 80, 1.0, 80, 80)
    c = draw_masks(batch_rng(1, 2, 4), frames, 80, 1.0, 80, 80)
    assert all(np.array_equal(x, y) for x, y in zip(vars(a).values(), vars(b).values()))
    assert not np.array_equal(a.freq_start, c.freq_start)
    never = draw_masks(batch_rng(1, 2, 3), frames, 80, 0.0, 80, 80)
    assert not never.applied.any()


@pytest.fixture
def speech(real_audio):
    return [soundfile.read(p, dtype="float32")[0] for p in real_audio("pocketsphinx", 2)]


def test_feature_masks_zero_exactly_the_drawn_cells(speech):
    clips = [speech[0][:32000], speech[1][:20000]]
    waves = torch.zeros(2, 32000)
    for i, c in enumerate(clips):
        waves[i, :len(c)] = torch.from_numpy(c)
    feats, frames = fbank(waves, torch.tensor([32000, 20000]), 16000)
    masked, masks = spec_augment_features(feats, frames.numpy(), batch_rng(0, 0, 0), 1.0, 27, 100)
    for row in range(2):
        cells = np.zeros(feats.shape[1:], dtype=bool)
        cells[masks.time_start[row]:masks.time_stop[row], :] = True
        cells[:, masks.freq_start[row]:masks.freq_stop[row]] = True
        assert (masked[row].numpy()[cells] == 0).all()
        np.testing.assert_array_equal(masked[row].numpy()[~cells], feats[row].numpy()[~cells])


def test_waveform_round_trip_masks_the_spectrogram_and_keeps_unmasked_rows(speech):
    clip = speech[0][:24000]
    waves = torch.zeros(3, 24000)
    waves[0] = torch.from_numpy(clip)
    waves[1, :16000] = torch.from_numpy(clip[:16000])
    waves[2, :100] = torch.from_numpy(clip[:100])  # too short for the STFT: left alone
    lengths = np.array([24000, 16000, 100])
    out, masks = spec_augment_waveforms(waves, lengths, batch_rng(3, 0, 0), 1.0, 80, 80)
    assert masks.applied.tolist() == [True, True, False]
    assert out.shape == waves.shape
    assert not out[1, 16000:].any() and torch.equal(out[2], waves[2])
    window = torch.hann_window(ROUND_TRIP_FFT)
    for row in (0, 1):
        spec = torch.stft(out[row, :lengths[row]], ROUND_TRIP_FFT, ROUND_TRIP_FFT // 2, window=window,
                          return_complex=True).abs()
        assert spec.shape[1] == round_trip_frames(lengths)[row]
        band = spec[masks.freq_start[row]:masks.freq_stop[row]]
        # the masked band carries (almost) no energy after the round trip; the rest keeps its own
        assert band.square().sum() < 1e-3 * spec.square().sum()
    untouched, none = spec_augment_waveforms(waves, lengths, batch_rng(3, 0, 0), 0.0, 80, 80)
    assert not none.applied.any() and torch.equal(untouched, waves)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="spec_aug_p"):
        draw_masks(batch_rng(0, 0, 0), np.array([10]), 80, 1.5, 10, 10)
    with pytest.raises(ValueError, match="non-negative"):
        draw_masks(batch_rng(0, 0, 0), np.array([10]), 80, 0.5, -1, 10)
