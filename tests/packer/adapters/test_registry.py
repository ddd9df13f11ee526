"""The adapter registry: every input family is one ``ADAPTERS`` entry, and ``speechpack build`` is made from it.

The CLI calls ``build(options=..., **fixed, **values)`` with the option names as keywords, so an option
whose name is not an argument of the build function (or a default_out that names no family value) would only fail
when someone runs that command: checked here for every entry, without building anything.
"""

from __future__ import annotations

import inspect

import click
import pytest
from click.testing import CliRunner

from speechpack.cli import build, main
from speechpack.packer.adapters import ADAPTERS
from speechpack.packer.adapters.asd_common import AsdBuildOptions
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.constants import ASD_SAMPLE_RATE
from speechpack.schemas.errors import SpeechpackError

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

FAMILIES = {"wesep", "wesep-shards", "audio-bank", "ava", "wasd", "avcc", "msdwild", "parquet", "asr-jsonl",
            "lhotse"}


def _subcommand(name: str) -> click.Command:
    """``speechpack build NAME`` as the CLI makes it (on first use: the registry is imported only then)."""
    return build.get_command(click.Context(build), name)


def test_every_family_is_one_entry_and_one_build_subcommand():
    assert set(ADAPTERS) == FAMILIES
    assert set(build.list_commands(click.Context(build))) == FAMILIES
    for name, adapter in ADAPTERS.items():
        assert adapter.name == name
        assert adapter.build.__name__.startswith("build_"), name
        assert adapter.build.__module__.startswith("speechpack.packer.adapters."), name


def test_every_parameter_is_an_argument_of_its_build_function():
    for name, adapter in ADAPTERS.items():
        arguments = inspect.signature(adapter.build).parameters
        given = ["options", *(spec.name for spec in adapter.params), *adapter.fixed]
        assert len(given) == len(set(given)), name
        assert set(given) <= set(arguments), (name, set(given) - set(arguments))
        required = {arg for arg, spec in arguments.items() if spec.default is inspect.Parameter.empty}
        assert required <= set(given), (name, required - set(given))
        if adapter.default_out is not None:
            names = set(inspect.signature(adapter.default_out).parameters)
            assert names and names <= {spec.name for spec in (*adapter.params, *adapter.out_params)}, name


def test_asd_families_take_asd_options():
    asd = {name for name, adapter in ADAPTERS.items() if adapter.asd}
    assert asd == {"ava", "wasd", "avcc", "msdwild"}
    for name in FAMILIES:
        flags = {flag for param in _subcommand(name).params for flag in param.opts}
        assert ("--skip-missing" in flags) == (name in asd), name
        assert ("--sample-rate" in flags) == (name not in asd), name
        assert ("--output" in flags) == ("--max-shard-gb" in flags) == (name in asd), name  # MuVAP's spellings
        assert {"--out", "--shard-size", "--workers", "--skip-bad", "--overwrite", "--executor", "--shards",
                "--resume"} <= flags, name


def test_asd_options_are_build_options_at_16_khz():
    options = AsdBuildOptions(out="x", skip_missing=True, resume=True)
    assert isinstance(options, BuildOptions) and options.sample_rate == ASD_SAMPLE_RATE and options.resume
    assert options.recorded() == {"sample_rate": ASD_SAMPLE_RATE, "shard_bytes": options.shard_bytes,
                                  "skip_bad": False, "skip_missing": True}
    with pytest.raises(SpeechpackError, match=f"stored at {ASD_SAMPLE_RATE} Hz"):
        AsdBuildOptions(out="x", sample_rate=8000)


def test_the_build_help_lists_every_family():
    result = CliRunner().invoke(main, ["build", "--help"])
    assert result.exit_code == 0
    for name in FAMILIES:
        assert f"  {name} " in result.output
