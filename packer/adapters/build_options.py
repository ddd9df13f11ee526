"""The options every ``speechpack build`` subcommand (and ``speechpack import``) shares, declared once as plain data
(``OptionSpec``): their names are the fields of the adapter's options class (``BuildOptions`` / ``AsdBuildOptions``;
see docs/building.md).  ``cli.py`` adds them to each command it makes from ``ADAPTERS``; the library checks every
value again (``schemas.limits``), so the ranges here only make the usage error come early.
"""

from __future__ import annotations

from speechpack.packer.adapters.option_spec import Choice, Number, OptionSpec, Parsed, Path, option
from speechpack.packer.adapters.registry import Adapter
from speechpack.packer.build.plan import ShardSlice
from speechpack.packer.build.run import EXECUTORS
from speechpack.schemas import limits
from speechpack.schemas.constants import DEFAULT_SAMPLE_RATE, DEFAULT_SHARD_BYTES, TOOL_NAME
from speechpack.schemas.units import format_bytes, parse_size


def parse_shard_size(text) -> int:
    """A byte size such as ``1GB`` (decimal) or ``512MiB`` (binary), within ``limits.SHARD_BYTES``."""
    return limits.SHARD_BYTES.check(parse_size(text))


def parse_shard_slice(text) -> ShardSlice:
    """``--shards i/n``: one slice of the shard plan (``packer.build.plan.ShardSlice``)."""
    return text if isinstance(text, ShardSlice) else ShardSlice.parse(text)


#: ``--shard-size`` and ``--shards`` values.
SIZE = Parsed("size", parse_shard_size)
SLICE = Parsed("i/n", parse_shard_slice)


def shared_build_options(adapter: Adapter) -> list[OptionSpec]:
    """The options every ``build`` subcommand shares, declared once; their names are the fields of
    ``adapter.options`` (``BuildOptions``; see docs/building.md).  asd families store 16 kHz always (no
    ``--sample-rate``), may leave missing inputs out (``--skip-missing``), pack tracks rather than lines, and also
    take MuVAP's spellings ``--output`` and ``--max-shard-gb``."""
    sample, item = ("track", "track") if adapter.asd else ("sample", "line")
    out_help = adapter.out_help or "Pack directory to create (must be empty or absent, unless --overwrite)."
    if adapter.asd:
        options = [option("--out", "--output", "out", required=adapter.default_out is None,
                          type=Path(file_okay=False), help=out_help + " --output is MuVAP's spelling.")]
    else:
        options = [option("--out", required=adapter.default_out is None, type=Path(file_okay=False), help=out_help),
                   option("--sample-rate", default=DEFAULT_SAMPLE_RATE, show_default=True,
                          type=Number.within(limits.SAMPLE_RATE),
                          help="Rate of the stored audio in Hz; inputs are resampled with soxr.")]
    options.append(option("--shard-size", "shard_bytes", default=format_bytes(DEFAULT_SHARD_BYTES),
                          show_default=True, type=SIZE,
                          help=f"Close a shard when the next {sample} would push its payload past this size."))
    if adapter.asd:
        options.append(option("--max-shard-gb", "max_shard_gb", type=Number(False, low=0, low_open=True),
                              default=None, help="MuVAP's spelling of --shard-size, in decimal GB (1.5 = "
                                                 "--shard-size 1.5GB)."))
    options += [
        option("--workers", default=1, show_default=True, type=Number.within(limits.WORKERS),
               help="Decoding processes; the pack is byte-identical whatever the number."),
        option("--skip-bad", is_flag=True,
               help=f"Pack the good {item}s and record the bad ones in skipped.json instead of failing."),
    ]
    if adapter.asd:
        options.append(option("--skip-missing", is_flag=True,
                              help="Partial development copies: leave out tracks whose face or audio files are "
                                   "missing (recorded in skipped.json); any other problem still fails the build."))
    options += [
        option("--overwrite", is_flag=True, help="Replace the pack already in --out."),
        option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar."),
    ]
    return options + SCALE_OPTIONS


#: Builds at scale (`build` and `import`): they change where shards are written, never what.
SCALE_OPTIONS = [
    option("--executor", type=Choice(EXECUTORS), default=EXECUTORS[0], show_default=True,
           help="Where shards are written: this machine (--workers processes) or a Ray cluster (one task per shard; "
                "needs speechpack[ray] and --out on storage every node mounts)."),
    option("--ray-address", metavar="ADDR",
           help="Ray cluster to connect to (auto, ray://host:10001); default: start a local Ray."),
    option("--shards", type=SLICE, default=None,
           help="Build only the planned shards k with k % n == i (a cluster array job); then run "
                f"`{TOOL_NAME} finalize OUT` once every slice is done."),
    option("--resume", is_flag=True,
           help="Resume an interrupted build (a plain rerun does too): keep its shards that verify against the plan, "
                "build the rest; refuse a finished pack."),
]


def shard_bytes_of_gb(max_shard_gb: float) -> int:
    """MuVAP's ``--max-shard-gb`` as ``shard_bytes``: ``round(gb * 1e9)``, as MuVAP's CLI rounds it, within
    ``limits.SHARD_BYTES`` (``SpeechpackError`` naming the range otherwise)."""
    return limits.SHARD_BYTES.check(parse_size(f"{max_shard_gb!r}GB"))


__all__ = ["SCALE_OPTIONS", "SIZE", "SLICE", "parse_shard_size", "parse_shard_slice", "shard_bytes_of_gb",
           "shared_build_options"]
