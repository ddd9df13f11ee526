"""loader.asr.items.read_summary: Omnilingual's dataset summary TSV, read for corpus/language weighting."""

from __future__ import annotations

import pytest

from speechpack.loader.asr.items import read_summary
from speechpack.loader.config import ConfigError

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")


def write(tmp_path, text: str):
    path = tmp_path / "language_distribution_0.tsv"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_seconds_per_split_are_summed_into_hours(tmp_path):
    path = write(tmp_path, "corpus\tlanguage\tsplit\tnum_samples\ttotal_audio_seconds\n"
                           "mls\ten\ttrain\t10\t7200\n"
                           "mls\ten\ttrain\t5\t1800.0\n"
                           "mls\ten\tdev\t2\t360\n"
                           "cv\tfr\ttrain\t3\t3600\n"
                           "\n")
    assert read_summary(path) == {("mls", "en"): 2.5, ("cv", "fr"): 1.0}
    assert read_summary(path, split="dev") == {("mls", "en"): 0.1}


def test_an_hours_column_without_split(tmp_path):
    assert read_summary(write(tmp_path, "language\tcorpus\thours\nen\tmls\t4\n")) == {("mls", "en"): 4.0}


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("corpus\thours\nmls\t1\n", ":1: column 'language' is missing"),
    ("corpus\tlanguage\tnum_samples\nmls\ten\t3\n", ":1: needs a 'total_audio_seconds'"),
    ("corpus\tlanguage\thours\nmls\ten\tmany\n", ":2: column 'hours': 'many' is not a number"),
    ("corpus\tlanguage\thours\nmls\ten\n", ":2: 2 columns, the header has 3"),
    ("corpus\tlanguage\thours\nmls\ten\t1\n\ten\t-1\n", ":3: column 'hours': must be non-negative"),
])
def test_errors_name_the_line_and_column(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        read_summary(write(tmp_path, text))
    with pytest.raises(ConfigError, match="cannot read"):
        read_summary(str(tmp_path / "missing.tsv"))
