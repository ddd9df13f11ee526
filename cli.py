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


class _Slice(click.ParamType):
    """``--shards i/n``: one slice of the shard plan (``packer.build.plan.ShardSlice``)."""

    name = "i/n"

    def convert(self, value, param, ctx):
        from packer.build.plan import ShardSlice

        if isinstance(value, ShardSlice):
            return value
        try:
            return ShardSlice.parse(value)
        except SpeechpackError as err:
            self.fail(str(err), param, ctx)


def _scale_options(func):
    """Options for builds at scale, on every ``build`` subcommand; the command takes them as ``**scale`` and
    passes them on to ``BuildOptions`` (same names).  See docs/building.md."""
    options = [
        click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                     help="Where shards are written: this machine (--workers processes) or a Ray cluster (one task "
                          "per shard; needs speechpack[ray] and --out on storage every node mounts)."),
        click.option("--ray-address", metavar="ADDR",
                     help="Ray cluster to connect to (auto, ray://host:10001); default: start a local Ray."),
        click.option("--shards", type=_Slice(), default=None,
                     help="Build only the planned shards k with k % n == i (a cluster array job); then run "
                          "`speechpack finalize OUT` once every slice is done."),
        click.option("--resume", is_flag=True,
                     help="Resume an interrupted build (a plain rerun does too): keep its shards that verify "
                          "against the plan, build the rest; refuse a finished pack."),
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
@_scale_options
def build_wesep_command(list_path, root, cues_path, allow_pickle, out, sample_rate, shard_bytes, workers, skip_bad,
                        overwrite, progress, **scale):
    """Pack a WeSep raw list: mixture lines make a `tse` pack, single-speaker lines a `sources` pack."""
    from packer.build.run import BuildOptions, build_wesep

    try:
        options = BuildOptions(out=out, sample_rate=sample_rate, shard_bytes=shard_bytes, workers=workers,
                               skip_bad=skip_bad, overwrite=overwrite, progress=progress, **scale)
        summary = build_wesep(list_path, options, root=root, cues=cues_path, allow_pickle=allow_pickle)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@build.command("wesep-shards")
@click.option("--list", "list_path", required=True, type=click.Path(dir_okay=False),
              help="WeSep shard list: one tar path per line, plain or gzip-compressed (.tar.gz/.tgz, read in "
                   "memory); relative to the current directory.")
@_build_options
@_scale_options
def build_wesep_shards_command(list_path, out, sample_rate, shard_bytes, workers, skip_bad, overwrite, progress,
                               **scale):
    """Pack WeSep tar shards (offline: key.spk<i>, key.<ext>, key_spk<i>.<ext>; online: key.spk, key.<ext>);
    the same samples as a raw list give the same shards.  Members are read in memory, never extracted."""
    from packer.build.run import BuildOptions, build_wesep_shards

    try:
        options = BuildOptions(out=out, sample_rate=sample_rate, shard_bytes=shard_bytes, workers=workers,
                               skip_bad=skip_bad, overwrite=overwrite, progress=progress, **scale)
        summary = build_wesep_shards(list_path, options)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@build.command("parquet")
@click.option("--path", "path", required=True, type=click.Path(exists=True),
              help="Omnilingual parquet dataset: a directory (corpus=X/language=Y/*.parquet partitions) or one file.")
@click.option("--split", help="Pack only the rows whose `split` is this (e.g. train).")
@_build_options
@_scale_options
def build_parquet_command(path, split, out, sample_rate, shard_bytes, workers, skip_bad, overwrite, progress,
                          **scale):
    """Pack Omnilingual ASR parquet (audio_bytes, audio_size, text, split, language, corpus) into an `asr` pack
    (needs speechpack[parquet])."""
    from packer.adapters.asr_parquet import build_parquet
    from packer.build.run import BuildOptions

    try:
        options = BuildOptions(out=out, sample_rate=sample_rate, shard_bytes=shard_bytes, workers=workers,
                               skip_bad=skip_bad, overwrite=overwrite, progress=progress, **scale)
        summary = build_parquet(path, options, split=split)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@build.command("asr-jsonl")
@click.option("--list", "list_path", required=True, type=click.Path(dir_okay=False),
              help="ASR manifest: JSON lines with audio_filepath, text, language, corpus [key, speaker, offset, "
                   "duration]; relative paths are read from the manifest's directory.")
@click.option("--language", help="Language of lines that name none.")
@click.option("--corpus", help="Corpus of lines that name none.")
@_build_options
@_scale_options
def build_asr_jsonl_command(list_path, language, corpus, out, sample_rate, shard_bytes, workers, skip_bad, overwrite,
                            progress, **scale):
    """Pack a one-utterance-per-line JSON manifest into an `asr` pack (offset/duration cut spans of long files)."""
    from packer.adapters.asr_jsonl import build_asr_jsonl
    from packer.build.run import BuildOptions

    try:
        options = BuildOptions(out=out, sample_rate=sample_rate, shard_bytes=shard_bytes, workers=workers,
                               skip_bad=skip_bad, overwrite=overwrite, progress=progress, **scale)
        summary = build_asr_jsonl(list_path, options, language=language, corpus=corpus)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@build.command("audio-bank")
@click.argument("source", metavar="[DIR_OR_LIST]", required=False, type=click.Path(exists=True))
@click.option("--kind", required=True, type=click.Choice(["noise", "rir"]),
              help="Pack kind: a noise bank or a room-impulse-response bank.")
@click.option("--simulate", type=click.IntRange(min=1), metavar="N",
              help="Instead of files: simulate N shoebox-room RIRs with pyroomacoustics (--kind rir).")
@click.option("--lmdb", "lmdb_path", type=click.Path(exists=True), metavar="PATH",
              help="Instead of files: every entry of a WeSep noise LMDB (tools/make_lmdb.py), keys kept (--kind noise; "
                   "needs speechpack[wesep]).")
@click.option("--room-min", type=(float, float, float), default=None, metavar="X Y Z",
              help="Smallest room, metres (default 3 3 2.5).")
@click.option("--room-max", type=(float, float, float), default=None, metavar="X Y Z",
              help="Largest room, metres (default 8 6 3.5).")
@click.option("--rt60", type=(float, float), default=None, metavar="LO HI", help="RT60 range, s (default 0.2 0.6).")
@click.option("--distance", type=(float, float), default=None, metavar="LO HI",
              help="Source-microphone distance range, metres (default 0.5 3).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the simulation.")
@_build_options
@_scale_options
def build_audio_bank_command(source, kind, simulate, lmdb_path, room_min, room_max, rt60, distance, seed, out,
                             sample_rate, shard_bytes, workers, skip_bad, overwrite, progress, **scale):
    """Pack every audio file of a directory (recursively, sorted) or a list file (one path per line) as a noise or
    RIR bank: one sample per file, all channels, resampled, nothing normalised.  Keys are the paths relative to the
    directory (or as listed); each sample's one "speaker" is the kind name.  --lmdb converts a WeSep noise LMDB
    once: every entry decoded and checked, its key kept as the sample key."""
    from packer.adapters.audio_bank import SimulationOptions
    from packer.build.run import BuildOptions, build_audio_bank, build_simulated_rirs

    simulation_flags = {"--room-min": room_min, "--room-max": room_max, "--rt60": rt60, "--distance": distance}
    if lmdb_path is not None:
        if source is not None or simulate is not None:
            raise click.UsageError("give one of DIR_OR_LIST, --simulate N or --lmdb PATH")
        if kind != "noise":
            raise click.UsageError("--lmdb reads a WeSep noise LMDB: use --kind noise")
        source = lmdb_path  # the checks below see an input
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
                               skip_bad=skip_bad, overwrite=overwrite, progress=progress, **scale)
        if lmdb_path is not None:
            from packer.adapters.noise_lmdb import build_noise_lmdb

            summary = build_noise_lmdb(lmdb_path, options)
        elif simulate is None:
            summary = build_audio_bank(source, kind, options)
        else:
            ranges = {name: tuple(value) for name, value in
                      (("room_min", room_min), ("room_max", room_max), ("rt60", rt60), ("distance", distance))
                      if value is not None}
            summary = build_simulated_rirs(SimulationOptions(count=simulate, seed=seed, **ranges), options)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


def _asd_build_options(out_help: str | None):
    """Options of the ``asd`` builds: those of ``_build_options`` less ``--sample-rate`` (asd packs are always
    16 kHz), with ``--skip-missing``, and ``_scale_options``; ``--out`` may default to a place beside the corpus."""

    def decorate(func):
        options = [
            click.option("--out", "out", required=out_help is None, type=click.Path(file_okay=False),
                         help=out_help or "Pack directory to create (must be empty or absent, unless --overwrite)."),
            click.option("--shard-size", "shard_bytes", default="1GB", show_default=True, type=_Size(),
                         help="Close a shard when the next track would push its payload past this size."),
            click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1),
                         help="Decoding processes; the pack is byte-identical whatever the number."),
            click.option("--skip-bad", is_flag=True,
                         help="Pack the good tracks and record the bad ones in skipped.json instead of failing."),
            click.option("--skip-missing", is_flag=True,
                         help="Partial development copies: leave out tracks whose face or audio files are missing "
                              "(recorded in skipped.json); any other problem still fails the build."),
            click.option("--overwrite", is_flag=True, help="Replace the pack already in --out."),
            click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar."),
        ]
        func = _scale_options(func)
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def _asd_options(out, shard_bytes, workers, skip_bad, skip_missing, overwrite, progress, scale):
    from packer.adapters.avcc import AsdBuildOptions

    return AsdBuildOptions(out=out, shard_bytes=shard_bytes, workers=workers, skip_bad=skip_bad,
                           skip_missing=skip_missing, overwrite=overwrite, progress=progress, scale=scale)


def _build_ava_like(corpus: str):
    """``build ava`` and ``build wasd``: one reader, MuVAP's loader CSV layout (docs/asd.md)."""

    @build.command(corpus, help=f"Pack {corpus.upper()} face tracks (JPEG crops, per-track WAVs, the loader CSV) as an "
                                f"asd pack: faces 112x112 grayscale, labels per native frame, audio 16 kHz mono "
                                f"unnormalised.")
    @click.option("--loader", "loader_csv", required=True, type=click.Path(dir_okay=False),
                  help="The header-less loader CSV (sample_id, _, fps, labels), one face track per line.")
    @click.option("--visual-root", required=True, type=click.Path(file_okay=False),
                  help="Face crops: VISUAL_ROOT/SPLIT/<clip>/<track>/<timestamp>.jpg.")
    @click.option("--audio-root", required=True, type=click.Path(file_okay=False),
                  help="Track audio: AUDIO_ROOT/SPLIT/<clip>/<track>.wav.")
    @click.option("--split", required=True, help="Split directory under both roots (train, val, ...).")
    @_asd_build_options("Pack directory (default: <dataset root>/packed/<split>, the dataset root being the visual "
                        "root's parent).")
    def command(loader_csv, visual_root, audio_root, split, out, shard_bytes, workers, skip_bad, skip_missing,
                overwrite, progress, **scale):
        from packer.adapters.ava import build_ava, default_out

        try:
            options = _asd_options(out or default_out(visual_root, split), shard_bytes, workers, skip_bad,
                                   skip_missing, overwrite, progress, scale)
            summary = build_ava(loader_csv, visual_root, audio_root, split, options, corpus=corpus)
        except SpeechpackError as err:
            _fail(err)
        click.echo(summary.describe())

    return command


build_ava_command = _build_ava_like("ava")
build_wasd_command = _build_ava_like("wasd")


@build.command("avcc")
@click.option("--loader", "tsv_path", required=True, type=click.Path(dir_okay=False),
              help="The headered TSV: sample_id, visual_path, audio_path, source_fps, labels[, start_sec, "
                   "visual_kind, audio_sample_rate].")
@click.option("--root", required=True, type=click.Path(file_okay=False),
              help="Resolve the TSV's relative paths against this directory.")
@_asd_build_options(None)
def build_avcc_command(tsv_path, root, out, shard_bytes, workers, skip_bad, skip_missing, overwrite, progress,
                       **scale):
    """Pack AVCC face tracks (npy or JPEG-directory faces, conversation audio cut at start_sec) as an asd pack."""
    from packer.adapters.avcc import build_avcc

    try:
        options = _asd_options(out, shard_bytes, workers, skip_bad, skip_missing, overwrite, progress, scale)
        summary = build_avcc(tsv_path, root, options)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@build.command("msdwild")
@click.option("--input", "input_dir", required=True, type=click.Path(file_okay=False),
              help="MSDWild's box directory: <video>.csv per video (and the MP4s, unless --video-root).")
@click.option("--rttm", "rttm_path", type=click.Path(dir_okay=False),
              help="Speech turns; its videos are the ones packed (default: INPUT/all.rttm).")
@click.option("--video-root", type=click.Path(file_okay=False), help="Where <video>.mp4 are (default: --input).")
@click.option("--window", "window_sec", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Window length, seconds.")
@click.option("--overlap", "overlap_sec", default=10.0, show_default=True, type=click.FloatRange(min=0),
              help="Overlap of consecutive windows, seconds.")
@click.option("--box-format", type=click.Choice(["xywh", "xyxy"]), default="xywh", show_default=True,
              help="The four box columns: x y width height, or x1 y1 x2 y2.")
@_asd_build_options("Pack directory (default: <dataset root>/packed/<rttm name>, the dataset root being the input's "
                    "parent).")
def build_msdwild_command(input_dir, rttm_path, video_root, window_sec, overlap_sec, box_format, out, shard_bytes,
                          workers, skip_bad, skip_missing, overwrite, progress, **scale):
    """Pack MSDWild: windows cut from each MP4 with its box CSV, tracks present in 90% of a window, labels from
    the RTTM by frame centre; an incomplete final window is kept, unpadded (docs/asd.md)."""
    import os

    from packer.adapters.msdwild import DEFAULT_RTTM, build_msdwild, default_out

    rttm = rttm_path or os.path.join(input_dir, DEFAULT_RTTM)
    try:
        options = _asd_options(out or default_out(input_dir, rttm), shard_bytes, workers, skip_bad, skip_missing,
                               overwrite, progress, scale)
        summary = build_msdwild(input_dir, options, rttm_path=rttm, video_root=video_root, window_sec=window_sec,
                                overlap_sec=overlap_sec, box_format=box_format)
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


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
              help="asd packs: plot source vs normalised levels across the packs to this PNG (extra: plot).")
@_endpoint_option
def validate(packs, json_path, no_hash, plot_path, endpoint_url):
    """Check packs file by file: manifest, headers, offsets, keys, hashes, statistics, NaN and clipping.  asd
    packs also get label, frame-count and level checks, and their levels are compared across the packs given."""
    from packer.validate_report import validate_packs

    try:
        report = validate_packs(list(packs), check_hashes=not no_hash, endpoint_url=endpoint_url)
    except SpeechpackError as err:
        _fail(err)
    click.echo(report.describe())
    if json_path:
        report.write_json(json_path)
    if plot_path:
        if report.asd_levels is None:
            _fail(SpeechpackError("--plot compares asd packs' levels; no valid asd pack was given"))
        from loader.asd.levels import plot_levels

        try:
            plot_levels(report.asd_levels, plot_path)
        except SpeechpackError as err:
            _fail(err)
        click.echo(f"levels plotted to {plot_path}")
    if not report.ok:
        sys.exit(1)


@main.command("finalize")
@click.argument("pack", type=click.Path(file_okay=False, exists=True))
@click.option("--no-hash", is_flag=True, help="Trust the receipts' hashes (sizes and indexes are still checked).")
@click.option("--jobs", type=click.IntRange(min=1),
              help="Shards verified at once (default: packer.build.finalize.DEFAULT_JOBS, 4).")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
def finalize_command(pack, no_hash, jobs, progress):
    """Commit a pack built by array jobs (`build ... --shards i/n`): verify every planned shard against the plan
    and its receipt, then write columns/ and dataset.json.  Decodes nothing."""
    from packer.build.finalize import finalize_pack

    try:
        summary = finalize_pack(pack, check_hashes=not no_hash, progress=progress,
                                **({} if jobs is None else {"jobs": jobs}))
    except SpeechpackError as err:
        _fail(err)
    click.echo(summary.describe())


@main.command("copy")
@click.argument("src", type=click.Path(file_okay=False))
@click.argument("dst", type=click.Path(file_okay=False))
@click.option("--jobs", type=click.IntRange(min=1),
              help="Files copied and hashed at once (default 4, packer.copy.DEFAULT_JOBS).")
@click.option("--verify-only", is_flag=True, help="Re-hash DST against SRC's dataset.json; copy nothing.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar (bytes).")
@_endpoint_option
def copy_command(src, dst, jobs, verify_only, progress, endpoint_url):
    """Copy the pack SRC to DST (node-local staging), hashing every file; dataset.json last, under DST.lock.
    Either side may be an object-store URL (s3://bucket/packs/train: staging from it, or publishing to it)."""
    from packer.copy import copy_pack, verify_copy

    run = verify_copy if verify_only else copy_pack
    chosen = {} if jobs is None else {"jobs": jobs}
    try:
        report = run(src, dst, progress=progress, log=lambda text: click.echo(text, err=True),
                     endpoint_url=endpoint_url, **chosen)
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
    from packer.inspect import inspect_pack

    try:
        report = inspect_pack(pack, top=top)
        click.echo(report.to_json() if as_json else report.describe())
        if plot_path:
            report.plot(plot_path)
            click.echo(f"wrote {plot_path}", err=as_json)
    except SpeechpackError as err:
        _fail(err)


@main.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False, exists=True))
@click.option("--state", type=click.Choice(["train", "val", "test"]), default="train", show_default=True)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--save-wavs", type=click.Path(file_okay=False), help="Write the batch's rows as WAV files here.")
def peek(config_path, state, seed, save_wavs):
    """Print one model-ready batch of a loader CONFIG (YAML): field, shape, dtype, range."""
    from loader import build_loader
    from loader.peek import batch_sample_rate, describe_batch, load_config, save_batch_wavs

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
            paths = save_batch_wavs(batch, batch_sample_rate(loader.builder), save_wavs)
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
