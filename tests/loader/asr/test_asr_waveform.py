"""loader.asr.features: per-utterance normalisation over valid samples (mono by channel mean is the batch builder's:
test_asr_task.py, test_multichannel_audio_is_mixed_to_mono_with_utf8_labels)."""

from __future__ import annotations

import soundfile
import torch

from speechpack.loader.asr.features import normalize_rows


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
