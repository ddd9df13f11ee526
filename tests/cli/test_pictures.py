"""What the pictures say (``inspect --plot``, ``plan --plot``, ``validate --plot``), read from their figures: axes
fitted to the data, titles that do not round a small pack away, face tracks named as such, rows counted where
the model gets rows, no bar for padding that is not there, packs named by name."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from factories.asd_tracks import TRACKS, write_asd_pack
from speechpack.loader.asd.levels import asd_level_report, levels_figure
from speechpack.schemas.plotting import path_labels
from speechpack.loader.plan.planning_report import plan_figure
from speechpack.loader.plan.planning_report import plan_report
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.inspect import inspect_figure, inspect_pack
from speechpack.schemas.plotting import duration_text

try:
    import matplotlib.pyplot as plt
except ImportError:  # scripts/test.sh installs the extra: in CI its absence is a failure, not a skip
    if os.environ.get("CI"):
        raise
    pytest.skip("the plot extra is not installed: pip install 'speechpack[plot]'", allow_module_level=True)


@pytest.fixture
def generated_wavs(make_wav) -> list[str]:
    """Two seconds of noise per file, at two levels (so the level panel has a spread to fit)."""
    rng = np.random.default_rng(0)
    return [make_wav(f"w{i}.wav", data=(level * rng.standard_normal(32000)).clip(-1, 1).astype(np.float32))
            for i, level in enumerate((0.05, 0.05, 0.2, 0.2))]


@pytest.fixture
def tse_pack(generated_wavs, write_list, tmp_path) -> str:
    """Mixtures of two and three speakers: more rows than items per batch."""
    lines = []
    for i, speakers in enumerate(((0, 1), (1, 2, 3), (2, 3), (0, 3))):
        spk = [f"s{s}" for s in speakers]
        lines.append({"key": f"m{i}", "spk": spk, "mix": {"default": [generated_wavs[speakers[0]]]},
                      "src": {name: [generated_wavs[s]] for name, s in zip(spk, speakers)}})
    list_path = write_list(lines, "raw.list")
    build_wesep(str(list_path), BuildOptions(out=str(tmp_path / "tse"), progress=False))
    return str(tmp_path / "tse")


def _titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes]


def test_inspect_fits_the_level_axis_to_the_levels_and_keeps_a_small_total(tse_pack):
    report = inspect_pack(tse_pack)
    fig = inspect_figure(report)
    levels = fig.axes[1]
    low, high = levels.get_xlim()
    values = np.concatenate([v for v in report.levels_dbfs.values()])
    assert values.min() - 3 < low < values.min() and values.max() < high < values.max() + 3
    assert high - low < 30  # not the whole -90..0 dBFS scale
    title = fig._suptitle.get_text()
    assert title.endswith(f", {duration_text(3600.0 * report.figures['pack']['hours'])}") and " h" not in title
    plt.close(fig)


def test_total_durations_read_in_their_unit():
    assert duration_text(18.0) == "18 seconds"  # 0.005 h, which "0.01 h" rounded up
    assert duration_text(1800.0) == "30 minutes"
    assert duration_text(3600.0 * 1234.5) == "1,234 hours"


def test_asd_speaker_panels_are_face_tracks(generated_wavs, tmp_path):
    write_asd_pack(str(tmp_path / "asd"), [t for t in TRACKS if t.frames > 1][:4], generated_wavs)
    fig = inspect_figure(inspect_pack(str(tmp_path / "asd")))
    titles = _titles(fig)
    assert "top 4 of 4 face tracks" in titles and "seconds per face track" in titles
    assert not any("speaker" in title for title in titles)
    plt.close(fig)


def test_plan_counts_rows_and_draws_no_bar_for_absent_padding(tse_pack):
    config = {"packs": [{"path": tse_pack}], "dataset_args": {"batch_size": 2, "chunk_len": 8000}}
    report = plan_report(config, "train")
    fig = plan_figure(report)
    sizes, padding = fig.axes[:2]
    assert sizes.get_xlabel().startswith("rows per batch") and sizes.get_title() == "batch sizes (2 items each)"
    rows = [int(round(p.get_x() + p.get_width() / 2)) for p in sizes.patches]
    assert sorted(rows) == sorted(set(int(r) for r in report.epochs[0].rows))
    assert [p.get_height() for p in padding.patches if p.get_height()] == []  # no batch padded: no bar
    assert [t.get_text() for t in padding.texts] == ["no batch is padded"]
    plt.close(fig)


def test_levels_name_the_packs(generated_wavs, tmp_path):
    paths = []
    for name in ("AVA", "WASD"):
        paths.append(str(tmp_path / name / "packed" / "train"))
        write_asd_pack(paths[-1], [t for t in TRACKS if t.frames > 1][:3], generated_wavs)
    assert path_labels(paths) == ["AVA/packed/train", "WASD/packed/train"]
    assert path_labels(["/a/ava_train", "/b/wasd_val"]) == ["ava_train", "wasd_val"]
    fig = levels_figure(asd_level_report(paths))
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["AVA/packed/train", "WASD/packed/train"]
    plt.close(fig)


def _panel(fig, title_start: str):
    (ax,) = [ax for ax in fig.axes if ax.get_title().startswith(title_start)]
    return ax


def test_plan_picture_shows_what_the_plan_dropped_and_the_figures_per_pack(tse_pack):
    config = {"packs": [{"path": tse_pack}], "dataset_args": {"batch_size": 3, "chunk_len": 8000, "tail": "drop"}}
    report = plan_report(config, "train")
    fig = plan_figure(report)
    outcome = _panel(fig, "what the plan did with the items")
    assert [t.get_text() for t in outcome.get_yticklabels()] == [
        "dealt (items in a batch)", "padding rows (repeats)", "dropped (tail: drop)", "filtered out (before planning)"]
    assert [p.get_width() for p in outcome.patches] == [3, 0, 1, 0]  # 4 mixtures, one batch of 3: one dropped
    per_pack = _panel(fig, "per pack")
    assert [t.get_text() for t in per_pack.get_yticklabels()] == ["tse"]
    assert [p.get_width() for p in per_pack.patches] == [pytest.approx(0.75)]
    assert "0.750 of 4 items" in [t.get_text() for t in per_pack.texts]
    plt.close(fig)


def test_plan_picture_draws_a_bar_per_rank_or_a_histogram_of_many_ranks(tse_pack):
    config = {"packs": [{"path": tse_pack}], "dataset_args": {"batch_size": 1, "chunk_len": 8000}}
    few = plan_figure(plan_report(config, "train", world_size=3))
    items = _panel(few, "valid items per rank")
    assert [p.get_height() for p in items.patches] == [2, 1, 1] and items.get_xlabel() == "rank"
    assert _panel(few, "utilisation per rank").get_title() == "utilisation per rank\n(50.0%-100.0%)"
    plt.close(few)
    many = plan_figure(plan_report(config, "train", world_size=40))
    items = _panel(many, "valid items per rank")
    assert items.get_title() == "valid items per rank\n(36 ranks only padding)"
    assert items.get_xlabel() == "valid items of a rank"
    assert sorted((int(round(p.get_x() + p.get_width() / 2)), p.get_height()) for p in items.patches) == [(0, 36),
                                                                                                          (1, 4)]
    assert many._suptitle.get_text().startswith("train: 40 batches over 1 epoch, 40 ranks")
    plt.close(many)


def test_inspect_picture_has_a_cue_panel_of_speakers_with_enrollments(generated_wavs, write_list, tmp_path):
    lines = []
    for i, speakers in enumerate(((0, 1), (1, 2, 3), (2, 3), (0, 3))):
        spk = [f"s{s}" for s in speakers]
        lines.append({"key": f"m{i}", "spk": spk, "mix": {"default": [generated_wavs[speakers[0]]]},
                      "src": {name: [generated_wavs[s]] for name, s in zip(spk, speakers)}})
    enroll = {"s0": [generated_wavs[1]], "s1": generated_wavs[:2], "s2": generated_wavs[1:4]}  # s3: none
    (tmp_path / "enroll.json").write_text(json.dumps({spk: [{"utt_id": f"{spk}-{i}", "path": path}
                                                            for i, path in enumerate(paths)]
                                                      for spk, paths in enroll.items()}))
    (tmp_path / "cues.yaml").write_text("cues:\n  audio: {type: wav, format: waveform, guaranteed: false, policy: "
                                        f"{{type: random, key: spk_id, resource: {tmp_path / 'enroll.json'}}}}}\n")
    build_wesep(str(write_list(lines, "raw.list")), BuildOptions(out=str(tmp_path / "cued"), progress=False),
                cues=str(tmp_path / "cues.yaml"))
    report = inspect_pack(str(tmp_path / "cued"))
    cue = report.figures["cues"]["audio"]
    assert cue["entries_per"] == "speaker" and cue["entries"] == {"0": 1, "1": 1, "2": 1, "3": 1}
    fig = inspect_figure(report)
    cover = _panel(fig, "cue coverage")
    assert [p.get_width() for p in cover.patches] == [pytest.approx(75.0), pytest.approx(100 * 6 / 9)]
    assert {t.get_text() for t in cover.texts} == {"3/4", "6/9"}  # speakers, then speaker slots
    entries = _panel(fig, "entries per speaker")
    assert [(p.get_x() + p.get_width() / 2, p.get_height()) for p in entries.patches] == [
        (pytest.approx(n), 1) for n in range(4)]
    assert entries.patches[0].get_facecolor() != entries.patches[1].get_facecolor()  # no enrollment: drawn apart
    plt.close(fig)
