"""loader.asr.features: mono by channel mean and per-utterance normalisation over valid samples."""

from __future__ import annotations

import numpy as np
import soundfile
import torch

from speechpack.loader.asr.features import normalize_rows, to_mono


def test_mono_is_the_channel_mean():
    stereo = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], dtype=np.float32)
    np.testing.assert_array_equal(to_mono(stereo), [2.0, 2.0, 2.0])
    mono = stereo[:1]
    assert to_mono(mono).base is mono or np.shares_memory(to_mono(mono), mono)


def test_normalisation_is_layer_norm_over_each_utterance(real_audio):
    clips = [soundfile.read(p, dtype="float32")[0] for p in real_audio("pocketsphinx", 2)]
    clips = [clips[0][:30000], clips[1][:12000]]
    waves = torch.zeros(2, 30000)
    for i, c in enumerate(clips):
        waves[i, :len(c)] = torch.from_numpy(c)
    out = normalize_rows(waves, torch.tensor([30000, 12000]))
    for i, c in enumerate(clips):
        expected = torch.nn.functional.layer_norm(torch.from_numpy(c), (len(c),))
        torch.testing.assert_close(out[i, :len(c)], expected, atol=1e-4, rtol=1e-4)
    assert not out[1, 12000:].any()
