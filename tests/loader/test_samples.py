"""loader.samples: the one decode path, read by every task (TSE's paths: tests/loader/tse/test_tse_stages.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from speechpack.loader.samples import decode_window
from speechpack.schemas.timebase import SAMPLES_PER_MODEL_FRAME

FAST_MODULE = True  # imports without torch: its tests marked fast join the tier (docs/testing.md)

LOADER = Path(__file__).resolve().parents[2] / "loader"
#: A read of a stream's stored samples: what only ``loader.samples`` (and the pack reader it calls) may do.
STORED_READ = re.compile(r"\.(stored_segment|read_segment)\(|\.(stream_array|read_rows)\([^)]*STREAM_AUDIO")


@pytest.mark.fast
def test_audio_reads_are_clamped_and_zero_padded_after_normalising():
    stored = np.arange(1, 1001, dtype=np.int16)[None]  # 1000 samples: 1 frame and 360 samples of a second
    out = np.full(3 * SAMPLES_PER_MODEL_FRAME, np.nan, dtype=np.float32)
    decode_window(out, stored, 1 / 32768, start=0, gain=2.0, shift=np.float32(0.01 * 2.0))
    np.testing.assert_allclose(out[:1000], (stored[0] / 32768 - 0.01) * 2.0, atol=1e-7)
    assert np.all(out[1000:] == 0.0)  # padding stays 0 (MuVAP's would be -mean * gain)
    out = np.full(2 * SAMPLES_PER_MODEL_FRAME, np.nan, dtype=np.float32)
    decode_window(out, stored, 1 / 32768, start=5 * SAMPLES_PER_MODEL_FRAME)  # wholly past the end
    assert np.all(out == 0.0)
    out = np.full(500, np.nan, dtype=np.float32)
    decode_window(out, stored, 1 / 32768, start=700)  # straddles the end
    np.testing.assert_array_equal(out[:300], stored[0, 700:] * np.float32(1 / 32768))
    assert np.all(out[300:] == 0.0)


@pytest.mark.fast
def test_several_channels_are_mixed_down_by_their_mean_in_one_multiply():
    stored = np.array([[100, -200, 300, 7], [1, 2, 3, 5], [-50, 60, 70, 11]], dtype=np.int16)
    out = np.full(6, np.nan, dtype=np.float32)
    decode_window(out, stored, 0.5, start=1)
    expected = stored[:, 1:].sum(axis=0, dtype=np.float32) * np.float32(0.5 / 3)
    np.testing.assert_array_equal(out[:3], expected)
    assert np.all(out[3:] == 0.0)


@pytest.mark.fast
def test_asd_and_asr_read_stored_audio_only_through_the_decode_path():
    offenders = [f"{path.relative_to(LOADER.parent)}:{n}: {line.strip()}"
                 for package in ("asd", "asr") for path in sorted((LOADER / package).rglob("*.py"))
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if STORED_READ.search(line)]
    assert not offenders, "read a stream's stored samples through loader.samples:\n" + "\n".join(offenders)
