"""packer.audio: quantisation never clips silently, statistics match what the reader decodes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from speechpack.packer.audio import (
    Audio,
    AudioError,
    int16_statistics,
    probe_audio,
    quantise,
    read_audio,
    resample,
    resampled_length,
    to_stored,
)

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

finite_audio = arrays(
    np.float32, st.tuples(st.integers(1, 3), st.integers(1, 400)),
    elements=st.floats(-4.0, 4.0, width=32, allow_nan=False, allow_infinity=False),
)


@settings(max_examples=200, deadline=None)
@given(finite_audio)
def test_quantise_keeps_the_peak_and_stays_within_half_a_step(data):
    stored, scale = quantise(data)
    assert stored.dtype == np.int16 and stored.shape == data.shape
    decoded = stored.astype(np.float32) * np.float32(scale / 32768)  # the reader's decoding (format.md)
    step = scale / 32768
    assert np.max(np.abs(decoded - data)) <= step * 0.5 + 1e-6 * scale
    if round(float(data.max()) * 32768) > 32767 or round(float(data.min()) * 32768) < -32768:
        assert scale > 1.0  # would have clipped: rescaled instead
        assert stored.max() == 32767 or stored.min() == -32768
    else:
        assert scale == 1.0


def test_int16_input_round_trips_bit_exactly():
    ints = np.arange(-32768, 32768, 7, dtype=np.int16)[None, :]
    stored, scale = quantise(ints.astype(np.float32) / 32768)
    assert scale == 1.0
    np.testing.assert_array_equal(stored, ints)


@settings(max_examples=100, deadline=None)
@given(finite_audio)
def test_statistics_equal_a_float64_recomputation_of_the_decoded_audio(data):
    stored = to_stored(Audio(data, 16000))
    mean, rms, peak = int16_statistics(stored.data, stored.scale)
    decoded = stored.data.astype(np.float64) * (stored.scale / 32768)
    centred = decoded - decoded.mean()
    assert mean == pytest.approx(decoded.mean(), rel=1e-9, abs=1e-12)
    assert rms == pytest.approx(np.sqrt(np.mean(centred ** 2)), rel=1e-7, abs=1e-9)
    assert peak == pytest.approx(np.max(np.abs(centred)), rel=1e-9, abs=1e-12)


def test_statistics_do_not_depend_on_chunking():
    rng = np.random.default_rng(0)
    long = rng.integers(-32768, 32767, size=3 * (1 << 20) + 5, dtype=np.int16)
    assert int16_statistics(long, 1.0) == int16_statistics(long.copy(), 1.0)
    assert int16_statistics(np.zeros(0, np.int16), 1.0) == (0.0, 0.0, 0.0)


def test_read_audio_names_the_problem(tmp_path, make_wav):
    with pytest.raises(AudioError, match="file not found"):
        read_audio(str(tmp_path / "nope.wav"))
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"RIFF\x00\x00not really a wave file at all")
    with pytest.raises(AudioError, match="cannot decode audio"):
        read_audio(str(garbage))
    empty = make_wav("empty.wav", seconds=0)
    with pytest.raises(AudioError, match="empty audio"):
        read_audio(empty)
    nan = make_wav("nan.wav", subtype="FLOAT", data=np.array([0.1, np.nan, np.inf, 0.2], dtype=np.float32))
    with pytest.raises(AudioError, match="2 NaN/Inf"):
        read_audio(nan)


def test_pyav_decodes_what_libsndfile_cannot(tmp_path):
    """An AAC file in an M4A container goes through PyAV and keeps its rate and length (within codec padding)."""
    import av

    path = tmp_path / "tone.m4a"
    rate, seconds = 16000, 1.0
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(rate * seconds)) / rate)).astype(np.float32)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=rate, layout="mono")
        for start in range(0, len(tone), 1024):
            frame = av.AudioFrame.from_ndarray(tone[None, start:start + 1024], format="fltp", layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    audio = read_audio(str(path))
    assert audio.sample_rate == rate and audio.channels == 1
    assert abs(audio.num_frames - len(tone)) <= 2048
    assert 0.15 < float(np.sqrt(np.mean(audio.data ** 2))) < 0.25  # the tone's rms is 0.212


def test_resample_uses_soxr_and_is_a_no_op_at_the_same_rate(make_wav):
    audio = read_audio(make_wav("a.wav", rate=48000, seconds=0.3))
    assert resample(audio, 48000) is audio
    down = resample(audio, 16000)
    assert down.sample_rate == 16000 and down.num_frames == 4800 and down.data.dtype == np.float32


def test_probe_reads_headers_and_predicts_soxr_lengths(make_wav):
    path = make_wav("probe.wav", rate=22050, seconds=0.731, channels=2)
    info = probe_audio(path)
    assert (info.sample_rate, info.frames, info.channels, info.pcm16) == (22050, 16119, 2, True)
    audio = read_audio(path)
    for rate in (8000, 16000, 44100, 48000):
        assert resample(audio, rate).num_frames == resampled_length(info.frames, 22050, rate)


def test_pcm16_reads_as_int16_untouched(make_wav):
    path = make_wav("ints.wav", kind="noise", amplitude=1.0)
    as_float = read_audio(path)
    as_int = read_audio(path, int16_at=16000)
    assert read_audio(path, int16_at=8000).data.dtype == np.float32  # to be resampled: decoded as float
    assert as_int.data.dtype == np.int16
    stored = to_stored(as_int)
    assert stored.scale == 1.0
    np.testing.assert_array_equal(stored.data, to_stored(as_float).data)
