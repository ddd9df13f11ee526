"""Level comparison across asd packs (``loader/asd/levels.py``): source vs normalised percentiles checked against
levels measured independently on the decoded audio, the cap counts, the table, JSON and the plot."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from speechpack.loader.asd.levels import (
    METRICS,
    PERCENTILES,
    asd_level_report,
    format_level_table,
    level_report_json,
    plot_levels,
)
from speechpack.loader.pack import open_pack
from speechpack.schemas.errors import SpeechpackError
from factories.asd_tracks import Track, write_asd_pack
from factories.tse import mixture

#: A corpus at ordinary levels (one track with a click: the peak cap decides; one clipped 8x), and one with a
#: very quiet track (the 20 dB cap decides) and a silent one.
LOUD = [Track("a:1", "a", 50, 25.0, gain=1.0), Track("a:2", "a", 75, 30.0, gain=0.1, click=True),
        Track("b:1", "b", 40, 25.0, gain=8.0)]
QUIET = [Track("q:1", "q", 60, 25.0, gain=0.004), Track("q:2", "q", 50, 25.0, gain=0.3),
         Track("s:1", "s", 30, 30.0, silent=True)]


@pytest.fixture
def level_packs(tmp_path, real_audio):
    speech = real_audio("pocketsphinx")
    paths = [str(tmp_path / "loud"), str(tmp_path / "quiet")]
    write_asd_pack(paths[0], LOUD, speech)
    write_asd_pack(paths[1], QUIET, speech)
    return paths


def measured(path: str) -> dict[str, np.ndarray]:
    """Every metric measured on the decoded audio and labels, as MuVAP's validate would (through the samples)."""
    pack = open_pack(path)
    out = {name: [] for name in METRICS}
    for i in range(len(pack)):
        sample = pack.sample(i)
        x = sample.targets[0].astype(np.float64)
        centred = x - x.mean()
        rms, peak = np.sqrt(np.mean(centred ** 2)), np.abs(centred).max()
        gain = 1.0 if rms <= 1e-8 or peak <= 1e-8 else min(10 ** (-25 / 20) / rms, 10.0, 0.99 / peak)
        y = centred * gain
        out["source_rms"].append(rms)
        out["source_peak"].append(peak)
        out["gain_db"].append(20 * np.log10(max(gain, 1e-8)))
        out["normalized_rms"].append(np.sqrt(np.mean(y ** 2)))
        out["normalized_peak"].append(np.abs(y).max())
        out["speaking_ratio"].append(sample.data["labels"].mean())
    return {k: np.asarray(v) for k, v in out.items()}


def test_report_matches_levels_measured_on_the_decoded_audio(level_packs):
    report = asd_level_report(level_packs)
    assert report["percentiles"] == list(PERCENTILES) and report["metrics"] == list(METRICS)
    for entry, path in zip(report["packs"], level_packs):
        assert entry["path"] == path
        truth = measured(path)
        for metric in METRICS:
            want = np.percentile(truth[metric], PERCENTILES)
            got = [entry["levels"][metric][str(p)] for p in PERCENTILES]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=f"{path} {metric}")
    loud, quiet = report["packs"]
    assert loud["samples"] == 3 and quiet["samples"] == 3
    assert loud["peak_limited"] == 1 and loud["gain_capped"] == 0  # the click: the peak cap decides
    assert quiet["gain_capped"] == 1 and quiet["silent"] == 1
    # What the comparison is for: normalised RMS sits at -25 dBFS unless a cap decided.
    target = 10 ** (-25 / 20)
    assert loud["levels"]["normalized_rms"]["100"] == pytest.approx(target, rel=1e-3)
    assert quiet["levels"]["normalized_rms"]["0"] == 0.0  # the silent track


def test_table_json_and_plot(level_packs, tmp_path):
    report = asd_level_report(level_packs)
    table = format_level_table(report)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["metric", "pack", "p0"]
    for metric in METRICS:
        assert any(line.startswith(metric) for line in lines)
    assert sum(level_packs[1] in line for line in lines) == len(METRICS) + 1  # a row per metric plus the summary
    assert "silent 1" in table and "gain-capped (20 dB) 1" in table
    assert json.loads(level_report_json(report)) == json.loads(json.dumps(report))
    png = tmp_path / "levels.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:  # scripts/test.sh installs the extra: in CI its absence is a failure
        if os.environ.get("CI"):
            raise
        pytest.skip("the plot extra is not installed: pip install 'speechpack[plot]'")
    plot_levels(report, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_clear_error(level_packs, tmp_path, monkeypatch):
    report = asd_level_report(level_packs[:1])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(SpeechpackError, match=r"pip install 'speechpack\[plot\]'"):
        plot_levels(report, str(tmp_path / "x.png"))


def test_only_asd_packs_are_compared(tse_pack):
    with pytest.raises(SpeechpackError, match="at least one asd pack"):
        asd_level_report([])
    path, _ = tse_pack("tse", [mixture("m0", 4000)])
    with pytest.raises(SpeechpackError, match="level comparison reads asd packs; this one is tse"):
        asd_level_report([path])


def test_real_video_pack_compared_with_a_speech_pack(tmp_path, level_packs):
    """The pack the AVA adapter makes from the real talking-face video, beside a read-speech pack: the measured
    labels' speaking ratio and the webcam's levels come out as measured on its decoded audio."""
    from factories.asd_inputs import make_asd_pack

    video = make_asd_pack(tmp_path / "video")
    report = asd_level_report([video, level_packs[0]])
    entry = report["packs"][0]
    truth = measured(video)
    for metric in METRICS:
        np.testing.assert_allclose([entry["levels"][metric][str(p)] for p in PERCENTILES],
                                   np.percentile(truth[metric], PERCENTILES), rtol=1e-4, atol=1e-6)
    assert 0 < entry["levels"]["speaking_ratio"]["50"] < 1  # the man talks in bursts
    table = format_level_table(report)
    assert video in table and level_packs[0] in table
