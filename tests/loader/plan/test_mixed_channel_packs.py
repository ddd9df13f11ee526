"""A tse pack whose mixtures have different channel counts, on real recordings: ``plan`` refuses the batches the
loader would refuse and counts items and rows in the loader's words; the plan and inspect pictures count in whole
numbers and keep fractions in [0, 1]; ``validate --plot`` on a kind it cannot plot exits on validity alone.

(Relative list paths: tests/packer/adapters/test_list_paths.py; singular and plural in messages:
tests/cli/test_plural_messages.py.)"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from factories.wesep_lists import Mix
from speechpack.loader import build_loader
from speechpack.loader.tse.items import MixedChannels
from speechpack.loader.plan.planning_report import plan_report
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions


@pytest.fixture
def mixed_channels_pack(real_audio, wesep_list, tmp_path):
    """A tse pack of real speech: two one-channel mixtures and one of two channels (two mixture files)."""
    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("mono1", (a, b)), Mix("mono2", (b, c), start=0.5), Mix("twomic", (a, c), layout="two_files")])
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), progress=False))
    return str(out)


def _config(tmp_path, pack: str, **dataset_args) -> str:
    path = tmp_path / "train.yaml"
    path.write_text(json.dumps({"packs": [{"path": pack}], "dataset_args": dataset_args}), encoding="utf-8")
    return str(path)


def test_plan_refuses_what_the_loader_refuses(mixed_channels_pack, tmp_path):
    config = {"packs": [{"path": mixed_channels_pack}], "dataset_args": {"batch_size": 3, "shuffle": False}}
    with pytest.raises(MixedChannels) as caught:
        plan_report(config, "train")
    message = str(caught.value)
    assert "different channel counts" in message and "1 channel: mono1, mono2" in message
    assert "2 channels: twomic" in message and "batch_size: 1" in message
    with pytest.raises(Exception, match=r"different channel counts \[1, 2\]"):  # the loader agrees
        list(build_loader(config, "train"))
    result = CliRunner().invoke(main, ["plan", _config(tmp_path, mixed_channels_pack, batch_size=3)])
    assert result.exit_code == 1 and "error: epoch 0, rank 0, batch 0" in result.output, result.output
    assert "epochs consumed" not in result.output  # no success report before the error


def test_plan_accepts_one_mixture_per_batch_and_counts_rows(mixed_channels_pack, tmp_path):
    config = {"packs": [{"path": mixed_channels_pack}], "dataset_args": {"batch_size": 1, "shuffle": False}}
    report = plan_report(config, "train")
    epoch = report.epochs[0]
    assert epoch.items.tolist() == [1, 1, 1] and epoch.rows.tolist() == [2, 2, 2]  # one row per target speaker
    loaded = list(build_loader(config, "train"))
    assert [len(batch["key"]) for batch in loaded] == epoch.rows.tolist()
    text = report.describe()
    assert text.startswith("train: 3 items, world size 1")
    assert "3 batches per rank; items per batch 1, rows per batch 2 (one per target speaker)" in text
    expanded = plan_report({**config, "dataset_args": {"batch_size": 1, "expand_targets": True}}, "train")
    assert "rows per batch" not in expanded.describe()  # expanded targets: one row per item


def test_plan_picture_counts_in_whole_numbers(mixed_channels_pack):
    from speechpack.loader.plan.planning_report import plan_figure

    report = plan_report({"packs": [{"path": mixed_channels_pack}], "dataset_args": {"batch_size": 1}}, "train")
    fig = plan_figure(report)
    sizes, padding = fig.axes[:2]
    assert all(float(t).is_integer() for t in sizes.get_xticks())
    assert all(float(t).is_integer() for t in sizes.get_yticks())
    assert padding.get_xlim() == (0.0, 1.0)  # no padding: a bar at 0, not an axis running negative


def test_inspect_picture_counts_in_whole_numbers(mixed_channels_pack):
    from speechpack.packer.inspect import inspect_figure, inspect_pack

    fig = inspect_figure(inspect_pack(mixed_channels_pack))
    durations, _levels, speakers, per_speaker, shards, _extra = fig.axes
    for axis in (durations.yaxis, per_speaker.yaxis, shards.xaxis):
        assert all(float(t).is_integer() for t in axis.get_majorticklocs())
    assert speakers.get_xlabel() == "seconds"  # seconds of speech per speaker, not 0.0004 h
    assert len(speakers.get_xticks()) <= 6


def test_validate_plot_on_other_kinds_is_a_note_not_a_failure(mixed_channels_pack, tmp_path):
    png = tmp_path / "levels.png"
    result = CliRunner().invoke(main, ["validate", mixed_channels_pack, "--no-hash", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "all packs valid" in result.output and "--plot: nothing plotted" in result.output
    assert not png.exists()
    assert "asd packs only" in CliRunner().invoke(main, ["validate", "--help"]).output
    broken = tmp_path / "missing"
    assert CliRunner().invoke(main, ["validate", str(broken), "--plot", str(png)]).exit_code == 1
