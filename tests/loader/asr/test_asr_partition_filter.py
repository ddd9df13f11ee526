"""loader.asr.selection: the pyarrow filter forms Omnilingual's recipes write, parsed (never evaluated) into
a mask over the pack's corpus and language columns; anything else refused with the character it stopped at."""

from __future__ import annotations

import os

import numpy as np
import pytest

from speechpack.loader.asr.args import parse_dataset_args
from speechpack.loader.asr.selection import parse_partition_filters, select
from speechpack.loader.config import ConfigError

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

COLUMNS = {"corpus": np.array(["mls", "mls", "fleurs", "cv"]), "language": np.array(["en", "fr", "en", "de"])}


def mask(text) -> list[bool]:
    return parse_partition_filters(text, "f").mask(COLUMNS).tolist()


@pytest.mark.parametrize("text, expected", [
    ('pc.is_in(pc.field("corpus"), pa.array(["mls", "cv"]))', [True, True, False, True]),
    ("pc.is_in(pc.field('corpus'), value_set=pa.array(['fleurs',]))", [False, False, True, False]),
    ('pa.compute.is_in(pa.compute.field("language"), ["en"])', [True, False, True, False]),
    ('pc.field("language") == "fr"', [False, True, False, False]),
    ('"de" == pc.field("language")', [False, False, False, True]),
    ('pc.equal(pc.field("corpus"), "mls") & (pc.field("language") == "en")', [True, False, False, False]),
    ('pc.field("corpus") == "cv" | pc.field("corpus") == "mls" & pc.field("language") == "fr"',
     [False, True, False, True]),  # & binds tighter than |, as in Python
    ('(pc.field("corpus") == "cv" | pc.field("corpus") == "mls") & pc.field("language") == "fr"',
     [False, True, False, False]),
    ('pc.or_(pc.field("corpus") == "cv", pc.and_(pc.field("language") == "en", ds.field("corpus") == "fleurs"))',
     [False, False, True, True]),
    (['pc.field("language") == "en"', 'pc.field("corpus") == "mls"'], [True, False, False, False]),
])
def test_recipe_forms(text, expected):
    assert mask(text) == expected


def test_a_list_of_filters_selects_through_the_parsed_args():
    """A config's list of filters is stored as a tuple (``AsrArgs`` is frozen); the selection still reads it."""
    args = parse_dataset_args({"partition_filters": ['pc.field("language") == "en"', 'pc.field("corpus") == "mls"']},
                              "d")
    assert args.partition_filters == ('pc.field("language") == "en"', 'pc.field("corpus") == "mls"')
    selection = select(args, "train", [], [])
    assert selection.mask(COLUMNS["corpus"], COLUMNS["language"]).tolist() == [True, False, False, False]


@pytest.mark.parametrize("text, message", [
    ('__import__("os").system("touch /tmp/speechpack-pwned")', "at character 17"),
    ('~(pc.field("corpus") == "mls")', "at character 1"),
    ('pc.field("corpus") != "mls"', "at character 20"),
    ('pc.field("corpus") == 3', "at character 23"),
    ('pc.is_in(pc.field("split"), pa.array(["train"]))', "column 'split' .* is not a partition column"),
    ('pc.greater(pc.field("corpus"), "a")', "expected pc.is_in, pc.equal"),
    ('pc.field("corpus") == "mls" &', "'the end'"),
    ('np.array(["mls"])', "expected pc.is_in"),
])
def test_anything_else_is_refused_and_never_run(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_partition_filters(text, "f")
    assert not os.path.exists("/tmp/speechpack-pwned")


def test_empty_and_wrong_types_are_refused():
    assert parse_partition_filters(None, "f") is None
    for value in ("", [], ["  "], 3):
        with pytest.raises(ConfigError, match="f: expected a pyarrow filter expression"):
            parse_partition_filters(value, "f")


def test_3000_nested_parentheses_are_refused_by_name():
    from speechpack.loader.asr.selection import MAX_NESTING

    text = "(" * 3000 + 'pc.field("corpus") == "cv"' + ")" * 3000
    with pytest.raises(ConfigError, match=f"f: nested more than {MAX_NESTING} levels deep at character"):
        parse_partition_filters(text, "f")
    with pytest.raises(ConfigError, match="nested more than"):
        parse_partition_filters("pc.and_(" * 3000 + 'pc.field("corpus") == "cv"', "f")


def test_a_flat_or_of_1200_terms_evaluates_without_recursing():
    text = " | ".join(['pc.field("corpus") == "cv"'] * 1199 + ['pc.field("language") == "fr"'])
    assert mask(text) == [False, True, False, True]
    assert mask(" & ".join(['pc.field("corpus") == "mls"'] * 1200)) == [True, True, False, False]


def test_a_megabyte_filter_is_refused_at_once_and_its_message_stays_short():
    import time

    text = " | ".join(['pc.field("corpus") == "cv"'] * 45_000)  # 1.3 MB
    started = time.monotonic()
    with pytest.raises(ConfigError, match="characters of filter text, more than") as err:
        parse_partition_filters(text, "f")
    assert time.monotonic() - started < 1 and len(str(err.value)) < 500
    bad = 'pc.field("corpus") == "cv" | ' * 9000 + "~"  # under the bound: one pass, the message bounded
    started = time.monotonic()
    with pytest.raises(ConfigError, match="at character") as err:
        parse_partition_filters(bad, "f")
    assert time.monotonic() - started < 5 and len(str(err.value)) < 800
