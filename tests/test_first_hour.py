"""What a new user meets in the first hour (issue 17, part 4), on real recordings: ``plan`` refuses the batches the
loader would refuse (mixtures of different channel counts) and counts items and rows in the loader's words; a
list written relative to itself names the ``--root`` that reads it; ``validate --plot`` exits on validity alone;
messages say "1 batch", not "1 batches"; the pictures count in whole numbers and keep fractions in [0, 1]."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from speechpack.cli import main
from factories.wesep_lists import Mix
from speechpack.loader import build_loader
from speechpack.loader.plan_checks import MixedChannels
from speechpack.loader.planning_report import plan_report
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.units import plural


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
    from speechpack.loader.plan_plot import plan_figure

    report = plan_report({"packs": [{"path": mixed_channels_pack}], "dataset_args": {"batch_size": 1}}, "train")
    fig = plan_figure(report)
    sizes, padding = fig.axes
    assert all(float(t).is_integer() for t in sizes.get_xticks())
    assert all(float(t).is_integer() for t in sizes.get_yticks())
    assert padding.get_xlim() == (0.0, 1.0)  # no padding: a bar at 0, not an axis running negative


def test_inspect_picture_counts_in_whole_numbers(mixed_channels_pack):
    from speechpack.packer.inspect import inspect_pack
    from speechpack.packer.inspect import inspect_figure

    fig = inspect_figure(inspect_pack(mixed_channels_pack))
    durations, _levels, speakers, per_speaker, shards, _extra = fig.axes
    for axis in (durations.yaxis, per_speaker.yaxis, shards.xaxis):
        assert all(float(t).is_integer() for t in axis.get_majorticklocs())
    assert speakers.get_xlabel() == "seconds"  # seconds of speech per speaker, not 0.0004 h
    assert len(speakers.get_xticks()) <= 6


def _relative_list(real_audio, directory) -> str:
    """A list whose mixture paths are relative to the list's own directory (as the demo writes them)."""
    a, b = real_audio("pocketsphinx", 2)
    os.makedirs(directory / "mix")
    paths = {}
    for name, path in (("s1", a), ("s2", b)):
        data, rate = soundfile.read(path, dtype="float32")
        paths[name] = data[:rate]
        soundfile.write(directory / "mix" / f"{name}.wav", paths[name], rate, subtype="FLOAT")
    soundfile.write(directory / "mix" / "mix.wav", paths["s1"] + paths["s2"], rate, subtype="FLOAT")
    line = {"key": "m1", "spk": ["s1", "s2"], "mix": {"default": ["mix/mix.wav"]},
            "src": {"s1": ["mix/s1.wav"], "s2": ["mix/s2.wav"]}}
    list_path = directory / "raw.list"
    list_path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    return str(list_path)


def test_a_list_relative_to_itself_names_the_root(real_audio, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    list_path = _relative_list(real_audio, corpus)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["build", "wesep", "--list", "corpus/raw.list", "--out", "p1", "--no-progress"])
    assert result.exit_code == 1
    assert "relative audio path(s) not found from the current directory" in result.output
    assert f"mix/mix.wav -> {tmp_path / 'mix' / 'mix.wav'}" in result.output and "--root corpus" in result.output
    assert not (tmp_path / "p1").exists()
    ok = CliRunner().invoke(main, ["build", "wesep", "--list", "corpus/raw.list", "--root", "corpus", "--out", "p2",
                                   "--no-progress"])
    assert ok.exit_code == 0, ok.output
    monkeypatch.chdir(corpus)  # WeSep's rule: relative paths are read from the current directory
    here = CliRunner().invoke(main, ["build", "wesep", "--list", list_path, "--out", str(tmp_path / "p3"),
                                     "--no-progress"])
    assert here.exit_code == 0, here.output


def test_a_missing_relative_file_shows_where_it_was_looked_for(tmp_path, monkeypatch, write_list):
    list_path = write_list([{"key": "m1", "spk": ["a"], "src": {"a": ["nowhere/a.wav"]}}])
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(list_path), "--out", "p", "--no-progress"])
    assert result.exit_code == 1
    assert f"file not found (a relative path, looked for at {tmp_path / 'nowhere' / 'a.wav'})" in result.output


def test_validate_plot_on_other_kinds_is_a_note_not_a_failure(mixed_channels_pack, tmp_path):
    png = tmp_path / "levels.png"
    result = CliRunner().invoke(main, ["validate", mixed_channels_pack, "--no-hash", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "all packs valid" in result.output and "--plot: nothing plotted" in result.output
    assert not png.exists()
    assert "asd packs only" in CliRunner().invoke(main, ["validate", "--help"]).output
    broken = tmp_path / "missing"
    assert CliRunner().invoke(main, ["validate", str(broken), "--plot", str(png)]).exit_code == 1


def test_plural():
    assert [plural(n, "batch") for n in (0, 1, 2)] == ["0 batches", "1 batch", "2 batches"]
    assert plural(1, "sample") == "1 sample" and plural(3, "sample") == "3 samples"
    assert plural(2, "entry", "entries") == "2 entries" and plural(1, "entry", "entries") == "1 entry"


def test_build_summary_and_copy_say_one_in_the_singular(real_audio, wesep_list, tmp_path):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("only", (a, b))])
    built = CliRunner().invoke(main, ["build", "wesep", "--list", str(case.list_path), "--out", str(tmp_path / "p"),
                                      "--no-progress"])
    assert built.exit_code == 0 and "packed 1 sample (" in built.output, built.output
    inspected = CliRunner().invoke(main, ["inspect", str(tmp_path / "p")])
    assert "  1 sample, " in inspected.output and "1 samples" not in inspected.output
    np.testing.assert_array_equal(plan_report({"packs": [{"path": str(tmp_path / "p")}],
                                               "dataset_args": {"batch_size": 1}}).epochs[0].items, [1])


def test_copy_counts_in_the_units_of_its_summary(capsys):
    from speechpack.packer.copy.report import progress_bar

    with progress_bar(2_000_000, True, "copy") as bar:
        bar.update(1_500_000)
        assert bar.format_dict["unit_divisor"] == 1000 and bar.unit == "B"
        assert "1.50M/2.00M" in str(bar)  # decimal MB (binary would read 1.43M/1.91M), as the summary counts
    help_text = CliRunner().invoke(main, ["copy", "--help"]).output
    assert "DST.lock stays beside DST" in help_text
