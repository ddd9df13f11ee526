"""``speechpack validate`` on asd packs: the kind's own checks run, and valid asd packs are compared by level
(source vs what the loader's normalisation makes of them), as a table, in the JSON report and as a plot."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from factories.asd_inputs import make_asd_pack
from speechpack.cli import main


def test_validate_compares_asd_packs_levels_and_plots(tmp_path):
    first = make_asd_pack(tmp_path / "a")
    second = make_asd_pack(tmp_path / "b")
    report_path = tmp_path / "report.json"
    plot_path = tmp_path / "levels.png"
    result = CliRunner().invoke(main, ["validate", first, second, "--json", str(report_path),
                                       "--plot", str(plot_path)])
    assert result.exit_code == 0, result.output
    assert "asd levels, source vs normalised" in result.output
    assert result.output.count(first) >= 2 and result.output.count(second) >= 2  # a row per pack in the table
    report = json.loads(report_path.read_text())
    assert [entry["path"] for entry in report["asd_levels"]["packs"]] == [first, second]
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_validate_reports_a_label_outside_0_1(tmp_path):
    pack = make_asd_pack(tmp_path / "a")
    labels_path = next((tmp_path / "a").rglob("labels.npy"))
    labels = np.load(labels_path)
    labels[0] = 2
    np.save(labels_path, labels)
    result = CliRunner().invoke(main, ["validate", pack, "--no-hash"])
    assert result.exit_code == 1
    assert "labels.npy" in result.output and "label(s) not 0 or 1 (first: 2 at frame 0)" in result.output
    assert "asd levels" not in result.output  # an invalid pack is not compared


def test_plot_needs_an_asd_pack(tmp_path):
    result = CliRunner().invoke(main, ["validate", str(tmp_path / "missing"), "--plot", str(tmp_path / "x.png")])
    assert result.exit_code == 1 and "no valid asd pack" in result.output
