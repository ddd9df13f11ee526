"""Messages count in the singular and plural as English does ("1 batch", "2 batches"): ``schemas.units.plural``,
the build summary, ``inspect``, ``plan`` and ``copy`` (whose progress bar counts in the decimal units of its
summary)."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from speechpack.cli import main
from factories.wesep_lists import Mix
from speechpack.loader.plan.planning_report import plan_report
from speechpack.schemas.units import plural


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


def test_validate_and_inspect_of_a_one_speaker_bank_say_speaker_in_the_singular(tmp_path):
    """A bank's one "speaker" is its kind: ``1 speaker``, ``the one speaker holds``, never ``1 speakers``."""
    import soundfile

    rng = np.random.default_rng(0)
    (tmp_path / "noise").mkdir()
    for i in range(3):
        soundfile.write(tmp_path / "noise" / f"n{i}.wav", (0.1 * rng.standard_normal(4000)).astype(np.float32), 16000)
    pack = str(tmp_path / "pack")
    runner = CliRunner()
    built = runner.invoke(main, ["build", "audio-bank", "--kind", "noise", str(tmp_path / "noise"), "--out", pack,
                                 "--no-progress"])
    assert built.exit_code == 0, built.output
    validated = runner.invoke(main, ["validate", pack, "--no-progress"]).output
    assert "noise pack: 3 samples, 0.000 h, 1 speaker, 1 shard, " in validated
    inspected = runner.invoke(main, ["inspect", pack]).output
    assert "the one speaker holds 100.0 % of the speaker hours" in inspected
    assert "1 speakers" not in validated + inspected
