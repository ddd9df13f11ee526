"""``speechpack``: a thin click layer over ``packer`` and ``loader``.

Each command parses its options and calls one library function.  Bad input (``SpeechpackError``) becomes a
message on stderr and exit status 1; bad flags are click's usage errors (exit status 2).
"""

from __future__ import annotations

import sys

import click

from schemas.constants import DEFAULT_SAMPLE_RATE, tool_version
from schemas.errors import BuildError, SpeechpackError
from schemas.units import parse_size
from schemas.wesep_list import LineProblem


class _Size(click.ParamType):
    """A byte size such as ``1GB`` (decimal) or ``512MiB`` (binary)."""

    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except SpeechpackError as err:
            self.fail(str(err), param, ctx)


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


def _build_options(func):
    """Options every ``build`` subcommand shares."""
    options = [
        click.option("--out", "out", required=True, type=click.Path(file_okay=False),
                     help="Pack directory to create (must be empty or absent, unless --overwrite)."),
        click.option("--sample-rate", default=DEFAULT_SAMPLE_RATE, show_default=True, type=click.IntRange(min=1),
                     help="Rate of the stored audio in Hz; inputs are resampled with soxr."),
        click.option("--shard-size", "shard_bytes", default="1GB", show_default=True, type=_Size(),
                     help="Close a shard when the next sample would push its audio past this size."),
        click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1),
                     help="Decoding processes; the pack is byte-identical whatever the number."),
        click.option("--skip-bad", is_flag=True,
                     help="Pack the good lines and record the bad ones in skipped.json instead of failing."),
        click.option("--overwrite", is_flag=True, help="Replace the pack already in --out."),
        click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@build.command("wesep")
@click.option("--list", "list_path", required=True, type=click.Path(dir_okay=False),
              help="WeSep raw list (JSON lines: key, spk, mix.default, src).")
@click.option("--root", type=click.Path(file_okay=False, exists=True),
              help="Resolve relative audio, cue resource and cue file paths against this directory "
                   "(default: the current directory).")
@click.option("--cues", "cues_path", type=click.Path(dir_okay=False),
              help="The split's cues.yaml: pack every cue resource it points to into PACK/cues/.")
@click.option("--allow-pickle", is_flag=True,
              help="Unpickle spatial cue files that are pickled dicts (runs code from them: trusted files only).")
@_build_options
def build_wesep_command(list_path, root, cues_path, allow_pickle, out, sample_rate, shard_bytes, workers, skip_bad,
                        overwrite, progress):
    """Pack a WeSep raw list: mixture lines make a `tse` pack, single-speaker lines a `sources` pack."""
    from packer.build import BuildOptions, build_wesep

    try:
        options = BuildOptions(out=out, sample_rate=sample_rate, shard_bytes=shard_bytes, workers=workers,
                               skip_bad=skip_bad, overwrite=overwrite, progress=progress)
        summary = build_wesep(list_path, options, root=root, cues=cues_path, allow_pickle=allow_pickle)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@main.command()
@click.argument("packs", nargs=-1, required=True, type=click.Path())
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the full report as JSON.")
@click.option("--no-hash", is_flag=True, help="Skip content hashes (sizes are still checked).")
def validate(packs, json_path, no_hash):
    """Check packs file by file: manifest, headers, offsets, keys, hashes, statistics, NaN and clipping."""
    from packer.validate import validate_packs

    report = validate_packs(list(packs), check_hashes=not no_hash)
    click.echo(report.describe())
    if json_path:
        report.write_json(json_path)
    if not report.ok:
        sys.exit(1)


@main.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False, exists=True))
@click.option("--state", type=click.Choice(["train", "val", "test"]), default="train", show_default=True)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--save-wavs", type=click.Path(file_okay=False), help="Write the batch's rows as WAV files here.")
def peek(config_path, state, seed, save_wavs):
    """Print one model-ready batch of a loader CONFIG (YAML): field, shape, dtype, range."""
    from loader import build_loader
    from loader.peek import describe_batch, load_config, save_batch_wavs

    try:
        loader = build_loader(load_config(config_path), state, seed=seed)
        report = loader.report()
        click.echo(f"{state}: {report.items} items, {report.filtered} filtered out, {len(loader)} batches per "
                   f"rank, {report.padded_items} padded items, {report.dropped_items} dropped")
        batch = next(iter(loader), None)
        if batch is None:
            raise SpeechpackError(f"{config_path}: the {state} plan holds no batch")
        click.echo(describe_batch(batch))
        if save_wavs:
            paths = save_batch_wavs(batch, loader.builder.rate, save_wavs)
            click.echo(f"wrote {len(paths)} WAV files to {save_wavs}")
    except SpeechpackError as err:
        _fail(err)


@main.command()
@click.option("--out", "out", default="demo-out", show_default=True, type=click.Path(file_okay=False),
              help="Working directory for the generated corpus and its pack (replaced if it holds an old demo).")
def demo(out):
    """Generate a small multi-voice corpus, pack it, validate it, open it and show what happened."""
    from packer.demo import run_demo

    try:
        run_demo(out, echo=click.echo)
    except SpeechpackError as err:
        _fail(err)


if __name__ == "__main__":
    main()
