"""``speechpack``: a thin click layer over ``packer`` and ``loader``, and the one module that imports click.

Each command parses its options and calls one library function.  Bad input (``SpeechpackError``) becomes a
message on stderr and exit status 1, once, in the root group; bad flags and options that do not go together
(``OptionError``) are click's usage errors (exit status 2).  ``build NAME`` and ``import muvap`` are made from
options declared as plain data in the library (``packer.adapters.option_spec``: ``ADAPTERS``, ``IMPORT_OPTIONS``).

Start-up: scripts call ``speechpack validate`` or ``inspect`` in loops, so a command imports only what it uses.
At module level this file imports click and light declarations (``schemas.errors``, ``schemas.units``, the option
types); a command whose options need a library constant (a default, a set of choices) is registered as a factory
on a ``_LazyGroup``, made only when it runs or its help is asked, and each command imports its library call
inside its body.  ``speechpack --help`` lists commands from their help text without making them
(tests/project/test_startup_imports.py checks what stays unimported; bench/startup.py times it).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable

import click
from click.core import ParameterSource

from speechpack.packer.adapters.option_spec import Choice, Number, OptionSpec, Parsed, Path, ValueType
from speechpack.schemas import units
from speechpack.schemas.errors import BuildError, OptionError, SpeechpackError

if TYPE_CHECKING:
    from speechpack.packer.adapters.registry import Adapter


class _ParsedType(click.ParamType):
    """A ``Parsed`` value: the library's ``parse`` reads the text; its ``SpeechpackError`` is the usage error."""

    def __init__(self, parsed: Parsed):
        self.name = parsed.name
        self.parse = parsed.parse

    def convert(self, value, param, ctx):
        try:
            return self.parse(value)
        except SpeechpackError as err:
            self.fail(str(err), param, ctx)


def _click_type(value_type: ValueType) -> click.ParamType | None:
    """The click type of an option's declared value type (``packer.adapters.option_spec``)."""
    if isinstance(value_type, Path):
        return click.Path(file_okay=value_type.file_okay, dir_okay=value_type.dir_okay, exists=value_type.exists)
    if isinstance(value_type, Choice):
        return click.Choice(value_type.choices)
    if isinstance(value_type, Number):
        kind = click.IntRange if value_type.integer else click.FloatRange
        return kind(value_type.low, value_type.high, min_open=value_type.low_open)
    if isinstance(value_type, Parsed):
        return _ParsedType(value_type)
    return None


def _click_param(spec: OptionSpec) -> click.Parameter:
    """The click option (or argument) an ``OptionSpec`` declares."""
    attrs = spec.given()
    value_type = _click_type(spec.type)
    if value_type is not None:
        attrs["type"] = (value_type,) * spec.arity if spec.arity > 1 else value_type
    if spec.positional:
        return click.Argument([spec.name], **{**attrs, "required": spec.required})
    if any("/" in flag for flag in spec.flags) and "default" not in attrs:
        attrs["default"] = None  # an on/off pair left unset reads None (``--digests/--no-digests``), not off
    return click.Option([*spec.flags, spec.name], **attrs)


class _LazyGroup(click.Group):
    """A group whose commands may be registered as factories (``lazy_command``): a factory imports what the
    command's options need, makes the command and returns it, and is called only when that command runs or its
    help is asked.  Its docstring is the command's help, so the group's own help lists it without making it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.factories: dict[str, Callable[[], click.Command]] = {}
        self._listing = False

    def lazy_command(self, name: str):
        def register(factory: Callable[[], click.Command]):
            self.factories[name] = factory
            return factory
        return register

    def list_commands(self, ctx):
        return sorted({*self.commands, *self.factories})

    def get_command(self, ctx, name):
        factory = self.factories.get(name)
        if name in self.commands or factory is None:
            return super().get_command(ctx, name)
        if self._listing:  # a row of the group's help: the help text is all it shows
            return click.Command(name, help=factory.__doc__)
        self.add_command(factory(), name)
        return self.commands[name]

    def format_commands(self, ctx, formatter):
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False


def _print_version(ctx: click.Context, param, value) -> None:
    """``--version``: the installed version, looked up only when asked (importlib.metadata scans every
    distribution)."""
    if not value or ctx.resilient_parsing:
        return
    from speechpack.schemas.constants import tool_version

    click.echo(f"speechpack, version {tool_version()}")
    ctx.exit()


class _Speechpack(_LazyGroup):
    """The root group: bad input (``SpeechpackError``) from any command under it is printed on stderr, with every
    problem of a failed build (each names itself), and exits 1; unless the command catches it first (``build``
    makes an ``OptionError`` a usage error)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SpeechpackError as err:
            click.echo(f"error: {err}", err=True)
            for problem in err.problems if isinstance(err, BuildError) else ():
                click.echo(f"  {problem}", err=True)
            sys.exit(1)


@click.group(cls=_Speechpack, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
def main() -> None:
    """Convert speech corpora once into versioned, sharded, memory-mapped packs, and check them."""


class _FamilyGroup(click.Group):
    """``speechpack build``: one subcommand per ``ADAPTERS`` entry, made when it is asked for (the registry imports
    every adapter, which no other command needs)."""

    def list_commands(self, ctx):
        from speechpack.packer.adapters import ADAPTERS

        return sorted(ADAPTERS)

    def get_command(self, ctx, name):
        from speechpack.packer.adapters import ADAPTERS

        return _build_command(ADAPTERS[name]) if name in ADAPTERS else None


@main.group(cls=_FamilyGroup)
def build() -> None:
    """Convert an input corpus into a pack (one subcommand per input family)."""


def _build_command(adapter: Adapter) -> click.Command:
    """``speechpack build NAME`` for one entry of ``ADAPTERS``: the family's options, then the shared ones."""
    from speechpack.packer.adapters.registry import shared_build_options

    shared = shared_build_options(adapter)

    def run(**values):
        ctx = click.get_current_context()  # the options set on the command line, not left at their default
        given = [name for name in values if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
        try:
            summary = adapter.run(values, [spec.name for spec in shared], given)
        except OptionError as err:
            raise click.UsageError(str(err)) from None
        click.echo(summary.describe())

    params = [_click_param(spec) for spec in (*adapter.params, *adapter.out_params, *shared)]
    return click.Command(adapter.name, callback=run, params=params, help=adapter.help)


#: ``--endpoint-url`` for commands that accept object-store URLs (credentials never come from an option).
_endpoint_option = click.option("--endpoint-url", metavar="URL",
                                help="S3-compatible endpoint for s3:// URLs (default: AWS_ENDPOINT_URL, else AWS). "
                                     "Credentials come from the environment or the AWS config files, never an option.")


@main.command()
@click.argument("packs", nargs=-1, required=True, type=click.Path())
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the full report as JSON.")
@click.option("--no-hash", is_flag=True, help="Skip content hashes (sizes are still checked).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="asd packs only: plot source vs normalised levels of the valid asd packs given to this PNG "
                   "(extra: plot).  Other kinds are validated, not plotted; the plot never changes the exit status.")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Show a progress bar per pack, over its shards (on stderr).")
@_endpoint_option
def validate(packs, json_path, no_hash, plot_path, endpoint_url, progress):
    """Check packs file by file: manifest, headers, offsets, keys, hashes, statistics, NaN and clipping.  asd
    packs also get label, frame-count and level checks, and their levels are compared across the packs given.
    Exit status 1 when a pack is invalid, else 0 (whatever --plot could draw)."""
    from speechpack.packer.validate.pack import validate_packs

    report = validate_packs(list(packs), check_hashes=not no_hash, endpoint_url=endpoint_url, progress=progress)
    if report.level_report_paths():  # composed here: the level comparison is the loader's, above packer/
        from speechpack.loader.asd.levels import compare_validated_levels

        report = compare_validated_levels(report)
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


@main.lazy_command("finalize")
def finalize_command() -> click.Command:
    """Commit a pack built by array jobs (`build ... --shards i/n`): verify every planned shard against the plan
    and its receipt, then write columns/ and dataset.json.  Decodes nothing."""
    from speechpack.packer.build.run import DEFAULT_JOBS, finalize_pack

    @click.command("finalize", help=finalize_command.__doc__)
    @click.argument("pack", type=click.Path(file_okay=False, exists=True))
    @click.option("--no-hash", is_flag=True, help="Trust the receipts' hashes (sizes and indexes are still checked).")
    @click.option("--jobs", default=DEFAULT_JOBS, show_default=True, type=_click_type(Number.within(units.JOBS)),
                  help="Shards verified at once.")
    @click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
    def finalize(pack, no_hash, jobs, progress):
        click.echo(finalize_pack(pack, check_hashes=not no_hash, progress=progress, jobs=jobs).describe())

    return finalize


@main.lazy_command("copy")
def copy_command() -> click.Command:
    """Copy the pack SRC to DST (node-local staging), hashing every file; dataset.json last, under DST.lock.
    Either side may be an object-store URL (s3://bucket/packs/train: staging from it, or publishing to it).

    DST.lock stays beside DST afterwards: it records the last verified copy, so a copy that waited for another
    trusts it instead of hashing again; delete it only when no speechpack command writes to DST
    (docs/building.md, "The lock")."""
    from speechpack.packer.copy.report import DEFAULT_JOBS
    from speechpack.packer.copy.to_directory import copy_pack, verify_copy

    @click.command("copy", help=copy_command.__doc__)
    @click.argument("src", type=click.Path(file_okay=False))
    @click.argument("dst", type=click.Path(file_okay=False))
    @click.option("--jobs", default=DEFAULT_JOBS, show_default=True, type=_click_type(Number.within(units.JOBS)),
                  help="Files copied and hashed at once.")
    @click.option("--verify-only", is_flag=True, help="Re-hash DST against SRC's dataset.json; copy nothing.")
    @click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar (bytes).")
    @_endpoint_option
    def copy(src, dst, jobs, verify_only, progress, endpoint_url):
        run = verify_copy if verify_only else copy_pack
        report = run(src, dst, jobs=jobs, progress=progress, log=lambda text: click.echo(text, err=True),
                     endpoint_url=endpoint_url)
        click.echo(report.describe())

    return copy


@main.command("inspect")
@click.argument("pack", type=click.Path(file_okay=False))
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write duration, level, speaker and shard histograms to this PNG, and for a pack with cues the "
                   "speakers and slots each cue covers and the enrollments per speaker (needs speechpack[plot]).")
@click.option("--json", "as_json", is_flag=True, help="Print every figure as JSON instead of text.")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1), help="Speakers listed by hours.")
def inspect_command(pack, plot_path, as_json, top):
    """What a PACK holds: hours, speakers, durations, levels, cue coverage, shard sizes."""
    from speechpack.packer.inspect import inspect_pack

    report = inspect_pack(pack, top=top)
    click.echo(report.to_json() if as_json else report.describe())
    if plot_path:
        report.plot(plot_path)
        click.echo(f"wrote {plot_path}", err=as_json)


#: ``--pack``: the packs of a WeSep recipe read unchanged (a config without ``packs``).
_pack_option = click.option("--pack", "packs", multiple=True, type=click.Path(file_okay=False),
                            help="A pack directory for a config without packs (a WeSep recipe as it is); repeatable.")


#: ``--state`` and ``--seed`` of ``peek`` and ``plan``: what the loader would be built with (``build_loader``).
STATE_HELP = ("The loader state the config is read for, as build_loader(config, STATE) reads it (a recipe's "
              "val_dataset_args apply to val and test).")
SEED_HELP = "The loader's seed (build_loader(seed=...)): the same seed gives the same order, windows and draws."


@main.lazy_command("peek")
def peek_command() -> click.Command:
    """Print one model-ready batch of a loader CONFIG (YAML): field, shape, dtype, range; a plan with no batch is
    an error saying why (the counts and the setting that dropped them)."""
    from speechpack.loader.config import STATES
    from speechpack.loader.config_checks import MAX_SEED
    from speechpack.loader.peek import peek_config

    @click.command("peek", help=peek_command.__doc__)
    @click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False, exists=True))
    @click.option("--state", type=click.Choice(STATES), default=STATES[0], show_default=True, help=STATE_HELP)
    @click.option("--seed", default=0, show_default=True, type=click.IntRange(0, MAX_SEED), help=SEED_HELP)
    @click.option("--save-wavs", type=click.Path(file_okay=False), help="Write the batch's rows as WAV files here.")
    @_pack_option
    def peek(config_path, state, seed, save_wavs, packs):
        click.echo(peek_config(config_path, state, seed=seed, save_wavs=save_wavs, packs=packs).describe())

    return peek


@main.lazy_command("plan")
def plan_command() -> click.Command:
    """Dry-run the epoch plan of a loader CONFIG (YAML), reading no audio: batches, padding, utilisation, per rank
    and per pack; a plan with no batch is an error saying why."""
    from speechpack.loader.config import STATES
    from speechpack.loader.peek import load_config
    from speechpack.loader.plan.epoch_plan import MAX_WORLD_SIZE
    from speechpack.loader.config_checks import MAX_SEED
    from speechpack.loader.plan.planning_report import MAX_PLAN_EPOCHS, plan_report

    @click.command("plan", help=plan_command.__doc__)
    @click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False, exists=True))
    @click.option("--state", type=click.Choice(STATES), default=STATES[0], show_default=True,
                  help=STATE_HELP + " val and test are planned as the loader deals them (a WeSep recipe as it is: "
                                    "with --pack).")
    @click.option("--world-size", default=1, show_default=True, type=click.IntRange(1, MAX_WORLD_SIZE),
                  help="Ranks to plan for (every rank is planned; the report summarises them).")
    @click.option("--epochs", default=1, show_default=True, type=click.IntRange(1, MAX_PLAN_EPOCHS),
                  help="Epochs to plan, each in full.")
    @click.option("--seed", default=0, show_default=True, type=click.IntRange(0, MAX_SEED), help=SEED_HELP)
    @click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
                  help="Write the plan as a PNG: batch sizes, padding, what was dropped, per rank and per pack "
                       "(needs matplotlib: speechpack[plot]).")
    @_pack_option
    def plan(config_path, state, world_size, epochs, seed, plot_path, packs):
        report = plan_report(load_config(config_path, packs), state, world_size=world_size, epochs=epochs, seed=seed)
        click.echo(report.describe())
        if plot_path:
            report.plot(plot_path)
            click.echo(f"wrote {plot_path}")

    return plan


@main.group("import", cls=_LazyGroup)
def import_group() -> None:
    """Convert a pack written by another tool into a speechpack pack, without decoding its media again."""


@import_group.lazy_command("muvap")
def import_muvap_command() -> click.Command:
    """Convert a MuVAP ASD pack (muvap-asd-mmap v4: dataset.json, shard-NNNNNN/{faces,audio,labels}.npy,
    index.json) into an asd pack: rows copied by range, statistics recomputed and compared (docs/asd.md)."""
    from speechpack.packer.importers.muvap import IMPORT_OPTIONS, import_muvap_options

    def muvap(**values):
        try:
            summary = import_muvap_options(values)
        except OptionError as err:  # options that cannot work together (a codec at a rate it cannot encode)
            raise click.UsageError(str(err)) from None
        click.echo(summary.describe())

    return click.Command("muvap", callback=muvap, params=[_click_param(spec) for spec in IMPORT_OPTIONS],
                         help=import_muvap_command.__doc__)


@main.lazy_command("convert")
def convert_command() -> click.Command:
    """Write PACK again with another audio codec (pcm16, flac, opus), or with block digests added, from the pack
    alone: atomic, resumable after a kill (run the same command again), the same bytes whatever --workers is
    (docs/building.md, "Converting a pack")."""
    from speechpack.media.codecs import DEFAULT_BLOCK_SECONDS, DEFAULT_OPUS_BITRATE, OPUS_MAX_BITRATE, OPUS_MIN_BITRATE
    from speechpack.packer.convert.run import ConvertOptions, convert_pack
    from speechpack.schemas.constants import CODECS

    @click.command("convert", help=convert_command.__doc__)
    @click.argument("pack", type=click.Path(file_okay=False, exists=True))
    @click.option("--codec", type=click.Choice(CODECS), required=True,
                  help="Audio codec of the converted pack, its cue banks' enrollment audio included: pcm16 "
                       "(int16, fastest to read), flac (lossless, about 0.6x the bytes), opus (lossy, about 0.1x).")
    @click.option("--out", "out", required=True, type=click.Path(file_okay=False),
                  help="Directory to write: absent, empty, or an unfinished convert of the same PACK and options "
                       "(finished where it stopped).")
    @click.option("--opus-bitrate", type=click.IntRange(OPUS_MIN_BITRATE, OPUS_MAX_BITRATE), default=None,
                  metavar="BPS", help=f"Opus bit rate, bits per second per channel (--codec opus; default "
                                      f"{DEFAULT_OPUS_BITRATE}, transparent for 16 kHz speech).")
    @click.option("--block-seconds", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_BLOCK_SECONDS,
                  show_default=True,
                  help="Seconds per independently decodable block of a flac or opus stream.")
    @click.option("--digests/--no-digests", default=True, show_default=True,
                  help="Write per-block digests (a flac or opus pack always has them).")
    @click.option("--workers", default=1, show_default=True, type=_click_type(Number.within(units.WORKERS)),
                  help="Processes that read and encode (the output is the same for any number).")
    @click.option("--overwrite", is_flag=True, help="Replace a finished pack in --out (files no speechpack record "
                                                    "lists are never deleted).")
    @click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
    def convert(pack, codec, out, opus_bitrate, block_seconds, digests, workers, overwrite, progress):
        try:
            options = ConvertOptions(out=out, codec=codec, opus_bitrate=opus_bitrate, block_seconds=block_seconds,
                                     digests=digests, workers=workers, overwrite=overwrite, progress=progress)
            summary = convert_pack(pack, options)
        except OptionError as err:
            raise click.UsageError(str(err)) from None
        click.echo(summary.describe())

    return convert


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
    from speechpack.packer.export.lhotse import export_lhotse

    click.echo(export_lhotse(pack, out, overwrite=overwrite, log=lambda message: click.echo(message, err=True))
               .describe())


@main.command()
@click.option("--out", "out", default="demo-out", show_default=True, type=click.Path(file_okay=False),
              help="Working directory for the generated corpus and its packs (what an earlier demo wrote there is "
                   "replaced; nothing else is deleted).")
def demo(out):
    """Generate a small multi-voice corpus, pack it, validate it, open it and show what happened."""
    from speechpack.loader.demo import load_demo
    from speechpack.packer.demo import run_demo

    made = run_demo(out, echo=click.echo)  # the packing half, then the loading half: the demo sits above both
    load_demo(made.tse_pack, made.asr_pack, made.asr_summary, made.asr_seconds, made.out, made.started,
              echo=click.echo, inspect_picture=made.inspect_picture, tse_2mic_pack=made.tse_2mic_pack)


if __name__ == "__main__":
    main()
