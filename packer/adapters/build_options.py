"""The options every ``speechpack build`` subcommand (and ``speechpack import``) shares, declared once as click
options: their names are the fields of the adapter's options class (``BuildOptions`` / ``AsdBuildOptions``; see
docs/building.md).  ``cli.py`` adds them to each command it makes from ``ADAPTERS``; the library checks every value
again (``schemas.limits``), so the ranges here only make the usage error come early.
"""

from __future__ import annotations

import click

from speechpack.packer.adapters.registry import Adapter, range_type
from speechpack.packer.build.plan import ShardSlice
from speechpack.packer.build.run import EXECUTORS
from speechpack.schemas import limits
from speechpack.schemas.constants import DEFAULT_SAMPLE_RATE, DEFAULT_SHARD_BYTES, TOOL_NAME
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.units import format_bytes, parse_size


class SizeType(click.ParamType):
    """A byte size such as ``1GB`` (decimal) or ``512MiB`` (binary)."""

    name = "size"

    def convert(self, value, param, ctx):
        try:
            size = parse_size(value)
        except SpeechpackError as err:
            self.fail(str(err), param, ctx)
        problem = limits.SHARD_BYTES.problem(size)
        if problem is not None:
            self.fail(problem, param, ctx)
        return size


class SliceType(click.ParamType):
    """``--shards i/n``: one slice of the shard plan (``packer.build.plan.ShardSlice``)."""

    name = "i/n"

    def convert(self, value, param, ctx):
        if isinstance(value, ShardSlice):
            return value
        try:
            return ShardSlice.parse(value)
        except SpeechpackError as err:
            self.fail(str(err), param, ctx)


def shared_build_options(adapter: Adapter) -> list[click.Option]:
    """The options every ``build`` subcommand shares, declared once; their names are the fields of
    ``adapter.options`` (``BuildOptions``; see docs/building.md).  asd families store 16 kHz always (no
    ``--sample-rate``), may leave missing inputs out (``--skip-missing``), pack tracks rather than lines, and also
    take MuVAP's spellings ``--output`` and ``--max-shard-gb``."""
    sample, item = ("track", "track") if adapter.asd else ("sample", "line")
    out_help = adapter.out_help or "Pack directory to create (must be empty or absent, unless --overwrite)."
    if adapter.asd:
        options = [click.Option(["--out", "--output", "out"], required=adapter.default_out is None,
                                type=click.Path(file_okay=False), help=out_help + " --output is MuVAP's spelling.")]
    else:
        options = [click.Option(["--out"], required=adapter.default_out is None, type=click.Path(file_okay=False),
                                help=out_help),
                   click.Option(["--sample-rate"], default=DEFAULT_SAMPLE_RATE, show_default=True,
                                type=range_type(limits.SAMPLE_RATE),
                                help="Rate of the stored audio in Hz; inputs are resampled with soxr.")]
    options.append(click.Option(["--shard-size", "shard_bytes"], default=format_bytes(DEFAULT_SHARD_BYTES),
                                show_default=True, type=SizeType(),
                                help=f"Close a shard when the next {sample} would push its payload past this size."))
    if adapter.asd:
        options.append(click.Option(["--max-shard-gb", "max_shard_gb"], type=click.FloatRange(min=0, min_open=True),
                                    default=None, help="MuVAP's spelling of --shard-size, in decimal GB (1.5 = "
                                                       "--shard-size 1.5GB)."))
    options += [
        click.Option(["--workers"], default=1, show_default=True, type=range_type(limits.WORKERS),
                     help="Decoding processes; the pack is byte-identical whatever the number."),
        click.Option(["--skip-bad"], is_flag=True,
                     help=f"Pack the good {item}s and record the bad ones in skipped.json instead of failing."),
    ]
    if adapter.asd:
        options.append(click.Option(["--skip-missing"], is_flag=True,
                                    help="Partial development copies: leave out tracks whose face or audio files are "
                                         "missing (recorded in skipped.json); any other problem still fails the "
                                         "build."))
    options += [
        click.Option(["--overwrite"], is_flag=True, help="Replace the pack already in --out."),
        click.Option(["--progress/--no-progress"], default=True, show_default=True, help="Show a progress bar."),
    ]
    return options + [click.Option(decls, **attrs) for decls, attrs in SCALE_OPTIONS]


# builds at scale (`build` and `import`): they change where shards are written, never what
SCALE_OPTIONS = [
    (["--executor"], dict(type=click.Choice(EXECUTORS), default=EXECUTORS[0], show_default=True,
                          help="Where shards are written: this machine (--workers processes) or a Ray cluster (one "
                               "task per shard; needs speechpack[ray] and --out on storage every node mounts).")),
    (["--ray-address"], dict(metavar="ADDR",
                             help="Ray cluster to connect to (auto, ray://host:10001); default: start a local Ray.")),
    (["--shards"], dict(type=SliceType(), default=None,
                        help="Build only the planned shards k with k % n == i (a cluster array job); then run "
                             f"`{TOOL_NAME} finalize OUT` once every slice is done.")),
    (["--resume"], dict(is_flag=True,
                        help="Resume an interrupted build (a plain rerun does too): keep its shards that verify "
                             "against the plan, build the rest; refuse a finished pack.")),
]


def scale_options(func):
    """``func`` (a click command function) taking the options of ``SCALE_OPTIONS`` (``speechpack import``)."""
    for decls, attrs in reversed(SCALE_OPTIONS):
        func = click.option(*decls, **attrs)(func)
    return func


def apply_max_shard_gb(chosen: dict) -> None:
    """MuVAP's ``--max-shard-gb`` in ``chosen`` turned into ``shard_bytes`` (``round(gb * 1e9)``, as MuVAP's CLI
    rounds it); giving it with ``--shard-size`` is a usage error."""
    max_shard_gb = chosen.pop("max_shard_gb", None)
    if max_shard_gb is None:
        return
    source = click.get_current_context().get_parameter_source("shard_bytes")
    if source is not None and source.name != "DEFAULT":
        raise click.UsageError("--max-shard-gb and --shard-size set the same limit: give one of them")
    size = parse_size(f"{max_shard_gb!r}GB")
    problem = limits.SHARD_BYTES.problem(size)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="--max-shard-gb")
    chosen["shard_bytes"] = size
