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


@build.command("wesep-shards")
@click.option("--list", "list_path", required=True, type=click.Path(dir_okay=False),
              help="WeSep shard list: one uncompressed tar path per line (relative to the current directory).")
@_build_options
def build_wesep_shards_command(list_path, out, sample_rate, shard_bytes, workers, skip_bad, overwrite, progress):
    """Pack WeSep tar shards (offline: key.spk<i>, key.<ext>, key_spk<i>.<ext>; online: key.spk, key.<ext>);
    the same samples as a raw list give the same shards.  Members are read in memory, never extracted."""
    from packer.build import BuildOptions, build_wesep_shards

    try:
        options = BuildOptions(out=out, sample_rate=sample_rate, shard_bytes=shard_bytes, workers=workers,
                               skip_bad=skip_bad, overwrite=overwrite, progress=progress)
        summary = build_wesep_shards(list_path, options)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@build.command("audio-bank")
@click.argument("source", metavar="[DIR_OR_LIST]", required=False, type=click.Path(exists=True))
@click.option("--kind", required=True, type=click.Choice(["noise", "rir"]),
              help="Pack kind: a noise bank or a room-impulse-response bank.")
@click.option("--simulate", type=click.IntRange(min=1), metavar="N",
              help="Instead of files: simulate N shoebox-room RIRs with pyroomacoustics (--kind rir).")
@click.option("--room-min", type=(float, float, float), default=None, metavar="X Y Z",
              help="Smallest room, metres (default 3 3 2.5).")
@click.option("--room-max", type=(float, float, float), default=None, metavar="X Y Z",
              help="Largest room, metres (default 8 6 3.5).")
@click.option("--rt60", type=(float, float), default=None, metavar="LO HI", help="RT60 range, s (default 0.2 0.6).")
@click.option("--distance", type=(float, float), default=None, metavar="LO HI",
              help="Source-microphone distance range, metres (default 0.5 3).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the simulation.")
@_build_options
def build_audio_bank_command(source, kind, simulate, room_min, room_max, rt60, distance, seed, out, sample_rate,
                             shard_bytes, workers, skip_bad, overwrite, progress):
    """Pack every audio file of a directory (recursively, sorted) or a list file (one path per line) as a noise or
    RIR bank: one sample per file, all channels, resampled, nothing normalised.  Keys are the paths relative to the
    directory (or as listed); each sample's one "speaker" is the kind name."""
    from packer.adapters.audio_bank import SimulationOptions
    from packer.build import BuildOptions, build_audio_bank, build_simulated_rirs

    simulation_flags = {"--room-min": room_min, "--room-max": room_max, "--rt60": rt60, "--distance": distance}
    if simulate is None:
        if source is None:
            raise click.UsageError("give DIR_OR_LIST, or --simulate N (with --kind rir)")
        given = [flag for flag, value in simulation_flags.items() if value is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)} only apply with --simulate")
    else:
        if source is not None:
            raise click.UsageError("give DIR_OR_LIST or --simulate N, not both")
        if kind != "rir":
            raise click.UsageError("--simulate makes RIRs: use --kind rir")
    try:
        options = BuildOptions(out=out, sample_rate=sample_rate, shard_bytes=shard_bytes, workers=workers,
                               skip_bad=skip_bad, overwrite=overwrite, progress=progress)
        if simulate is None:
            summary = build_audio_bank(source, kind, options)
        else:
            ranges = {name: tuple(value) for name, value in
                      (("room_min", room_min), ("room_max", room_max), ("rt60", rt60), ("distance", distance))
                      if value is not None}
            summary = build_simulated_rirs(SimulationOptions(count=simulate, seed=seed, **ranges), options)
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


@main.command("plan")
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False, exists=True))
@click.option("--state", type=click.Choice(["train", "val", "test"]), default="train", show_default=True)
@click.option("--world-size", default=1, show_default=True, type=click.IntRange(min=1), help="Ranks to plan for.")
@click.option("--epochs", default=1, show_default=True, type=click.IntRange(min=1), help="Epochs to plan.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write batch-size and padding histograms to this PNG (needs matplotlib: speechpack[plot]).")
def plan_command(config_path, state, world_size, epochs, seed, plot_path):
    """Dry-run the epoch plan of a loader CONFIG (YAML), reading no audio: batches, padding, utilisation."""
    from loader.peek import load_config
    from loader.planning_report import plan_report

    try:
        report = plan_report(load_config(config_path), state, world_size=world_size, epochs=epochs, seed=seed)
        click.echo(report.describe())
        if plot_path:
            report.plot(plot_path)
            click.echo(f"wrote {plot_path}")
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
