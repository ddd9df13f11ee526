"""``speechpack``: a thin click layer over ``packer`` and ``loader``.

Each command parses its options and calls one library function.  Bad input (``SpeechpackError``) becomes a
message on stderr and exit status 1; bad flags and options that do not go together (``OptionError``) are click's
usage errors (exit status 2).  The ``build`` subcommands are made from ``packer.adapters.ADAPTERS``, one per
input family.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys

import click

from speechpack.loader.config import STATES
from speechpack.packer.adapters import ADAPTERS, Adapter
from speechpack.packer.adapters.build_options import SizeType, apply_max_shard_gb, scale_options, shared_build_options
from speechpack.packer.adapters.registry import range_type
from speechpack.packer.build.finalize import DEFAULT_JOBS as FINALIZE_JOBS
from speechpack.packer.copy.to_directory import DEFAULT_JOBS as COPY_JOBS
from speechpack.schemas import limits
from speechpack.schemas.constants import tool_version
from speechpack.schemas.errors import BuildError, OptionError, SpeechpackError
from speechpack.schemas.wesep_list import LineProblem


def _fail(err: SpeechpackError) -> None:
    """Print a bad-input error (every problem of a failed build) and exit 1."""
    click.echo(f"error: {err}", err=True)
    if isinstance(err, BuildError):
        for problem in err.problems:
            if isinstance(problem, LineProblem):
                click.echo(f"  line {problem.line}: key {problem.key!r}"
                           + (f", file {problem.path}" if problem.path else "") + f": {problem.reason}", err=True)
            else:  # a cue problem names its cue, key and file itself
                click.echo(f"  {problem}", err=True)
    sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(tool_version(), prog_name="speechpack")
def main() -> None:
    """Convert speech corpora once into versioned, sharded, memory-mapped packs, and check them."""


@main.group()
def build() -> None:
    """Convert an input corpus into a pack (one subcommand per input family)."""


def _call_with_named(func, values: dict):
    """``func`` called with the values its parameters name (``ava.default_out(visual_root, split)``)."""
    names = inspect.signature(func).parameters
    return func(**{name: value for name, value in values.items() if name in names})


def _build_command(adapter: Adapter) -> click.Command:
    """``speechpack build NAME`` for one entry of ``ADAPTERS``: the family's options, then the shared ones, which
    become ``adapter.options`` for the family's build function."""
    shared = shared_build_options(adapter)

    def run(**values):
        chosen = {option.name: values.pop(option.name) for option in shared}
        out_only = {param.name: values.pop(param.name) for param in adapter.out_params}
        apply_max_shard_gb(chosen)
        try:
            if chosen["out"] is None:
                chosen["out"] = _call_with_named(adapter.default_out, {**values, **out_only})
            summary = adapter.build(options=adapter.options(**chosen), **adapter.fixed, **values)
        except OptionError as err:
            raise click.UsageError(str(err)) from None
        except SpeechpackError as err:
            _fail(err)
        click.echo(summary.describe())

    return click.Command(adapter.name, callback=run, params=[*adapter.params, *adapter.out_params, *shared],
                         help=adapter.help)


for _adapter in ADAPTERS.values():
    build.add_command(_build_command(_adapter))


def _endpoint_option(command):
    """``--endpoint-url`` for commands that accept object-store URLs (credentials never come from an option)."""
    return click.option("--endpoint-url", metavar="URL",
                        help="S3-compatible endpoint for s3:// URLs (default: AWS_ENDPOINT_URL, else AWS). "
                             "Credentials come from the environment or the AWS config files, never an option.")(command)


@main.command()
@click.argument("packs", nargs=-1, required=True, type=click.Path())
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the full report as JSON.")
@click.option("--no-hash", is_flag=True, help="Skip content hashes (sizes are still checked).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="asd packs only: plot source vs normalised levels of the valid asd packs given to this PNG "
                   "(extra: plot).  Other kinds are validated, not plotted; the plot never changes the exit status.")
@_endpoint_option
def validate(packs, json_path, no_hash, plot_path, endpoint_url):
    """Check packs file by file: manifest, headers, offsets, keys, hashes, statistics, NaN and clipping.  asd
    packs also get label, frame-count and level checks, and their levels are compared across the packs given.
    Exit status 1 when a pack is invalid, else 0 (whatever --plot could draw)."""
    from speechpack.packer.validate.pack import validate_packs

    try:
        report = validate_packs(list(packs), check_hashes=not no_hash, endpoint_url=endpoint_url)
    except SpeechpackError as err:
        _fail(err)
    level_paths = report.level_report_paths()
    if level_paths:  # composed here: the level comparison is the loader's normalisation, above packer/
        from speechpack.loader.asd.levels import asd_level_report, format_level_table

        levels = asd_level_report(level_paths)
        report = dataclasses.replace(report, asd_levels=levels, asd_levels_table=format_level_table(levels))
    click.echo(report.describe())
    if json_path:
        report.write_json(json_path)
    if plot_path:
        from speechpack.loader.asd.levels import plot_validated_levels

        try:  # the plot is an extra view of the report: a plot that cannot be drawn is a note, not invalidity
            plot_validated_levels(report.asd_levels, plot_path)
            click.echo(f"levels plotted to {plot_path}")
        except SpeechpackError as err:
            click.echo(f"--plot: nothing plotted: {err}", err=True)
    if not report.ok:
        sys.exit(1)


@main.command("finalize")
@click.argument("pack", type=click.Path(file_okay=False, exists=True))
@click.option("--no-hash", is_flag=True, help="Trust the receipts' hashes (sizes and indexes are still checked).")
@click.option("--jobs", default=FINALIZE_JOBS, show_default=True, type=range_type(limits.JOBS),
              help="Shards verified at once.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
def finalize_command(pack, no_hash, jobs, progress):
    """Commit a pack built by array jobs (`build ... --shards i/n`): verify every planned shard against the plan
    and its receipt, then write columns/ and dataset.json.  Decodes nothing."""
    from speechpack.packer.build.finalize import finalize_pack

    try:
        summary = finalize_pack(pack, check_hashes=not no_hash, progress=progress, jobs=jobs)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@main.command("copy")
@click.argument("src", type=click.Path(file_okay=False))
@click.argument("dst", type=click.Path(file_okay=False))
@click.option("--jobs", default=COPY_JOBS, show_default=True, type=range_type(limits.JOBS),
              help="Files copied and hashed at once.")
@click.option("--verify-only", is_flag=True, help="Re-hash DST against SRC's dataset.json; copy nothing.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar (bytes).")
@_endpoint_option
def copy_command(src, dst, jobs, verify_only, progress, endpoint_url):
    """Copy the pack SRC to DST (node-local staging), hashing every file; dataset.json last, under DST.lock.
    Either side may be an object-store URL (s3://bucket/packs/train: staging from it, or publishing to it).

    DST.lock stays beside DST afterwards: it records the last verified copy, so a copy that waited for another
    trusts it instead of hashing again; delete it only when no speechpack command writes to DST
    (docs/building.md, "The lock")."""
    from speechpack.packer.copy.to_directory import copy_pack, verify_copy

    run = verify_copy if verify_only else copy_pack
    try:
        report = run(src, dst, jobs=jobs, progress=progress, log=lambda text: click.echo(text, err=True),
                     endpoint_url=endpoint_url)
    except SpeechpackError as err:
        _fail(err)
    click.echo(report.describe())


@main.command("inspect")
@click.argument("pack", type=click.Path(file_okay=False))
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write duration, level, speaker and shard histograms to this PNG (needs speechpack[plot]).")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON instead of text.")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1), help="Speakers listed by hours.")
def inspect_command(pack, plot_path, as_json, top):
    """What a PACK holds: hours, speakers, durations, levels, cue coverage, shard sizes."""
    from speechpack.packer.inspect import inspect_pack

    try:
        report = inspect_pack(pack, top=top)
        click.echo(report.to_json() if as_json else report.describe())
        if plot_path:
            report.plot(plot_path)
            click.echo(f"wrote {plot_path}", err=as_json)
    except SpeechpackError as err:
        _fail(err)


def _pack_option(func):
    """``--pack``: the packs of a WeSep recipe read unchanged (a config without ``packs``)."""
    return click.option("--pack", "packs", multiple=True, type=click.Path(file_okay=False),
                        help="A pack directory for a config without packs (a WeSep recipe as it is); repeatable.")(func)


@main.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False, exists=True))
@click.option("--state", type=click.Choice(STATES), default=STATES[0], show_default=True)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--save-wavs", type=click.Path(file_okay=False), help="Write the batch's rows as WAV files here.")
@_pack_option
def peek(config_path, state, seed, save_wavs, packs):
    """Print one model-ready batch of a loader CONFIG (YAML): field, shape, dtype, range."""
    from speechpack.loader.peek import peek_config

    try:
        click.echo(peek_config(config_path, state, seed=seed, save_wavs=save_wavs, packs=packs).describe())
    except SpeechpackError as err:
        _fail(err)


@main.command("plan")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False, exists=True))
@click.option("--state", type=click.Choice(STATES), default=STATES[0], show_default=True)
@click.option("--world-size", default=1, show_default=True, type=click.IntRange(min=1), help="Ranks to plan for.")
@click.option("--epochs", default=1, show_default=True, type=click.IntRange(min=1), help="Epochs to plan.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write batch-size and padding histograms to this PNG (needs matplotlib: speechpack[plot]).")
@_pack_option
def plan_command(config_path, state, world_size, epochs, seed, plot_path, packs):
    """Dry-run the epoch plan of a loader CONFIG (YAML), reading no audio: batches, padding, utilisation."""
    from speechpack.loader.peek import load_config
    from speechpack.loader.planning_report import plan_report

    try:
        report = plan_report(load_config(config_path, packs), state, world_size=world_size, epochs=epochs, seed=seed)
        click.echo(report.describe())
        if plot_path:
            report.plot(plot_path)
            click.echo(f"wrote {plot_path}")
    except SpeechpackError as err:
        _fail(err)


@main.group("import")
def import_group() -> None:
    """Convert a pack written by another tool into a speechpack pack, without decoding its media again."""


@import_group.command("muvap")
@click.argument("pack", type=click.Path(file_okay=False, exists=True))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Pack directory to create (must be empty or absent, unless --overwrite).")
@click.option("--shard-size", "shard_bytes", default="1GB", show_default=True, type=SizeType(),
              help="Close a shard when the next track would push its payload past this size.")
@click.option("--workers", default=1, show_default=True, type=range_type(limits.WORKERS),
              help="Copying processes; the pack is byte-identical whatever the number.")
@click.option("--skip-bad", is_flag=True,
              help="Import the good tracks and record the bad records in skipped.json instead of failing.")
@click.option("--strict-stats", is_flag=True,
              help="Fail when MuVAP's recorded audio statistics or speaking ratio differ from the stored data "
                   "(default: report every mismatch and keep the recomputed values).")
@click.option("--overwrite", is_flag=True, help="Replace the pack already in --out.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
@scale_options
def import_muvap_command(pack, out, shard_bytes, workers, skip_bad, strict_stats, overwrite, progress, **scale):
    """Convert a MuVAP ASD pack (muvap-asd-mmap v4: dataset.json, shard-NNNNNN/{faces,audio,labels}.npy,
    index.json) into an asd pack: rows copied by range, statistics recomputed and compared (docs/asd.md)."""
    from speechpack.packer.build.run import BuildOptions
    from speechpack.packer.importers.muvap import import_muvap
    from speechpack.schemas.constants import ASD_SAMPLE_RATE

    try:
        options = BuildOptions(out=out, sample_rate=ASD_SAMPLE_RATE, shard_bytes=shard_bytes, workers=workers,
                               skip_bad=skip_bad, overwrite=overwrite, progress=progress, **scale)
        summary = import_muvap(pack, options, strict_stats=strict_stats)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@main.group("export")
def export_group() -> None:
    """Write a pack in another tool's format, so its samples can leave speechpack."""


@export_group.command("lhotse")
@click.argument("pack", type=click.Path(file_okay=False, exists=True))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Directory to write: cuts.jsonl.gz, audio/ (one FLAC per sample) and speechpack-export.json. "
                   "Absent, empty, or an unfinished export of the same PACK (finished where it stopped).")
@click.option("--overwrite", is_flag=True,
              help="Replace the export already in --out (finished, or unfinished of another pack); files no "
                   "export record lists are never deleted.")
def export_lhotse_command(pack, out, overwrite):
    """A Lhotse CutSet of an asr, sources, noise or rir PACK: one cut per sample, text, speaker and language in
    its supervision (docs/integrations.md, "Lhotse"; needs speechpack[lhotse]).  Interrupted, the same command
    finishes it."""
    from speechpack.packer.export.lhotse import CUTS_FILE, export_lhotse

    try:
        summary = export_lhotse(pack, out, overwrite=overwrite, log=lambda message: click.echo(message, err=True))
    except SpeechpackError as err:
        _fail(err)
    kept = f" ({summary.kept} audio file(s) of an earlier run verified and kept)" if summary.kept else ""
    click.echo(f"exported {summary.cuts} cuts -> {out}/{CUTS_FILE}{kept}")


@main.command()
@click.option("--out", "out", default="demo-out", show_default=True, type=click.Path(file_okay=False),
              help="Working directory for the generated corpus and its pack (replaced if it holds an old demo).")
def demo(out):
    """Generate a small multi-voice corpus, pack it, validate it, open it and show what happened."""
    from speechpack.loader.demo import load_demo
    from speechpack.packer.demo import run_demo

    try:  # the packing half, then the loading half: the demo as a whole sits above packer/ and loader/
        made = run_demo(out, echo=click.echo)
        load_demo(made.tse_pack, made.asr_pack, made.asr_summary, made.asr_seconds, made.out, made.started,
                  echo=click.echo, inspect_picture=made.inspect_picture, tse_2mic_pack=made.tse_2mic_pack)
    except SpeechpackError as err:
        _fail(err)


if __name__ == "__main__":
    main()
