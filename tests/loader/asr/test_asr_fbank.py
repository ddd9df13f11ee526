"""loader.asr.features against kaldi-native-fbank (the library fairseq2 calls) on real speech."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile
import torch

from speechpack.loader.asr.features import NUM_MEL_BINS, fbank, frame_geometry, num_frames, standardize_frames
from factories import require

#: Largest difference of a log-mel value from kaldi-native-fbank's (float32 inside; values reach about 26).
LOG_MEL_ATOL = 2e-3


def kaldi_reference(audio: np.ndarray, rate: int) -> np.ndarray:
    """kaldi-native-fbank with fairseq2's options (80 bins, waveform scaled by 2**15) and no dither."""
    knf = require("kaldi_native_fbank", "dev")
    opts = knf.FbankOptions()
    opts.frame_opts.dither = 0.0
    opts.frame_opts.samp_freq = rate
    opts.mel_opts.num_bins = NUM_MEL_BINS
    computer = knf.OnlineFbank(opts)
    computer.accept_waveform(rate, (audio.astype(np.float32) * 32768.0).tolist())
    computer.input_finished()
    return np.stack([computer.get_frame(i) for i in range(computer.num_frames_ready)])


def fairseq2_standardize(feats: np.ndarray) -> np.ndarray:
    """fairseq2's ``standardize=True``: ``torch.std_mean`` over frames, per bin."""
    std, mean = torch.std_mean(torch.from_numpy(feats).double(), dim=0)
    return ((torch.from_numpy(feats).double() - mean) / std).numpy()


def _padded(clips: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(c) for c in clips)
    batch = np.zeros((len(clips), width), dtype=np.float32)
    for i, clip in enumerate(clips):
        batch[i, :len(clip)] = clip
    return torch.from_numpy(batch), torch.tensor([len(c) for c in clips])


@pytest.fixture
def speech(real_audio):
    return [soundfile.read(p, dtype="float32")[0] for p in real_audio("pocketsphinx", 3)]


def test_matches_kaldi_native_fbank_on_a_padded_batch_of_real_speech(speech):
    clips = [speech[0], speech[1][:20000], speech[2][:12345]]
    waves, lengths = _padded(clips)
    feats, frames = fbank(waves, lengths, 16000, standardize=False)
    assert feats.shape == (3, int(frames.max()), NUM_MEL_BINS)
    for row, clip in enumerate(clips):
        ref = kaldi_reference(clip, 16000)
        assert int(frames[row]) == len(ref) == num_frames(len(clip), 16000)
        np.testing.assert_allclose(feats[row, :len(ref)].numpy(), ref, atol=LOG_MEL_ATOL, rtol=0)
        assert not feats[row, len(ref):].any()


def test_standardized_features_match_fairseq2s_rule(speech):
    clips = [speech[0][:30000], speech[1][:16000]]
    waves, lengths = _padded(clips)
    feats, frames = fbank(waves, lengths, 16000)
    for row, clip in enumerate(clips):
        expected = fairseq2_standardize(kaldi_reference(clip, 16000))
        got = feats[row, :int(frames[row])].numpy()
        np.testing.assert_allclose(got, expected, atol=5e-3, rtol=0)
        np.testing.assert_allclose(got.mean(axis=0), 0, atol=1e-4)
        np.testing.assert_allclose(got.std(axis=0, ddof=1), 1, atol=1e-4)


def test_a_row_is_the_same_alone_or_in_a_batch(speech):
    alone, _ = fbank(torch.from_numpy(speech[1][:9000])[None], torch.tensor([9000]), 16000)
    waves, lengths = _padded([speech[0], speech[1][:9000]])
    batched, frames = fbank(waves, lengths, 16000)
    torch.testing.assert_close(batched[1, :int(frames[1])], alone[0], atol=1e-5, rtol=0)


def test_chunking_and_padding_content_do_not_change_the_features(speech, monkeypatch):
    import speechpack.loader.asr.features as module

    waves, lengths = _padded([speech[0], speech[1][:20000], speech[2][:7000]])
    reference, frames = fbank(waves, lengths, 16000)
    noisy = waves.clone()
    for row, n in enumerate(lengths.tolist()):  # samples past a row's length are never read
        noisy[row, n:] = torch.randn(noisy.shape[1] - n)
    for chunk in (7, 100, 10**9):
        monkeypatch.setattr(module, "CPU_CHUNK_FRAMES", chunk)
        got, got_frames = fbank(noisy, lengths, 16000)
        assert torch.equal(got_frames, frames)
        torch.testing.assert_close(got, reference, atol=1e-5, rtol=0)  # FFT batch sizes round differently


def test_frame_counts_follow_snip_edges():
    assert frame_geometry(16000) == (400, 160, 512)
    assert num_frames(np.array([0, 399, 400, 559, 560]), 16000).tolist() == [0, 0, 1, 1, 2]
    assert num_frames(torch.tensor([399, 560]), 16000).tolist() == [0, 2]
    feats, frames = fbank(torch.zeros(2, 300), torch.tensor([300, 10]), 16000)
    assert feats.shape == (2, 0, NUM_MEL_BINS) and frames.tolist() == [0, 0]


def test_short_and_constant_rows_are_only_centred():
    feats = torch.tensor([[[1.0, 2.0]], [[3.0, 3.0]]]).expand(2, 3, 2).clone()
    out = standardize_frames(feats, torch.tensor([1, 3]))
    assert torch.isfinite(out).all()
    assert not out[0].any() and not out[1].any()


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="float tensor"):
        fbank(torch.zeros(4, dtype=torch.int16)[None], torch.tensor([4]), 16000)
    with pytest.raises(ValueError, match="do not fit"):
        fbank(torch.zeros(1, 500), torch.tensor([600]), 16000)
    with pytest.raises(ValueError, match="at least 100 Hz"):
        frame_geometry(50)
