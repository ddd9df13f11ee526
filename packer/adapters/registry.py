"""``ADAPTERS``: one entry per input family, naming its ``build_<family>`` function and its own options.

The options are plain data (``packer.adapters.option_spec.OptionSpec``); ``cli.py`` alone turns them into click
parameters and makes one ``speechpack build NAME`` subcommand per entry: the entry's options, then the shared ones
(below).  The command turns the shared options into the entry's ``options`` class
(``BuildOptions``, or ``AsdBuildOptions`` for the asd families) and calls ``build(options=..., **fixed, **family
option values)``: so each family option's name is the name of a ``build`` argument.  Adding an input family is its
adapter module and one entry here (docs/extending.md).

This module imports every adapter (and their decoders) to reference their functions and defaults; importing one
adapter (a worker process does) does not import it.

**Shared options** (``--out``, ``--shard-size``, ``--workers``, ``--shards``...; ``shared_build_options``): what every
``speechpack build`` subcommand (and ``speechpack import``) shares, declared once; their names are the fields of the
options class (``BuildOptions`` / ``AsdBuildOptions``; docs/building.md).  The library checks every value again
(``schemas.units``), so the ranges here only make the usage error come early.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from speechpack.packer.adapters import (
    asr_jsonl,
    asr_parquet,
    audio_bank,
    ava,
    avcc,
    lhotse as lhotse_adapter,
    msdwild,
    wesep,
    wesep_shards,
)
from speechpack.packer.adapters.asd_common import AsdBuildOptions
from speechpack.packer.adapters.option_spec import Choice, Number, OptionSpec, Parsed, Path, argument, option
from speechpack.packer.build.run import EXECUTORS, BuildOptions, BuildSummary
from speechpack.packer.build.plan import ShardSlice
from speechpack.schemas import units
from speechpack.media.codecs import DEFAULT_BLOCK_SECONDS, DEFAULT_OPUS_BITRATE
from speechpack.schemas.constants import CODEC_PCM16, CODECS, DEFAULT_SAMPLE_RATE, DEFAULT_SHARD_BYTES, TOOL_NAME
from speechpack.schemas.errors import OptionError, SpeechpackError
from speechpack.schemas.units import format_bytes, parse_size


@dataclass(frozen=True)
class Adapter:
    """One input family of ``speechpack build``.

    ``build`` is called with keyword arguments only: ``options`` and one per option of ``params`` (their
    ``name``) and of ``fixed``.  ``default_out``, when set, makes ``--out`` optional: it is called with the family
    values it names as arguments (``ava.default_out(visual_root, split)``) when ``--out`` is not given.
    ``out_params`` are options that only name that default (``avcc``'s ``--split``): they go to
    ``default_out``, never to ``build``.
    """

    name: str
    build: Callable[..., BuildSummary]
    help: str
    params: tuple[OptionSpec, ...] = ()
    options: type[BuildOptions] = BuildOptions
    fixed: Mapping[str, object] = field(default_factory=dict)
    default_out: Callable[..., str] | None = None
    out_params: tuple[OptionSpec, ...] = ()
    out_help: str | None = None

    @property
    def asd(self) -> bool:
        """An asd family: 16 kHz always (no ``--sample-rate``), ``--skip-missing``, and its inputs are tracks."""
        return issubclass(self.options, AsdBuildOptions)

    def run(self, values: Mapping[str, object], shared: Iterable[str], given: Iterable[str] = ()) -> BuildSummary:
        """The family's build from a command's option values by name: the ``shared`` options (those of
        ``shared_build_options``) make ``self.options``, ``out_params`` only name the default ``--out``, and the
        rest are ``build``'s own arguments.  ``given`` names the options set on the command line rather than left
        at their default: MuVAP's ``--max-shard-gb`` becomes ``shard_bytes`` unless ``--shard-size`` was given too."""
        values = dict(values)
        max_shard_gb = values.pop("max_shard_gb", None)
        if max_shard_gb is not None:
            values["shard_bytes"] = shard_bytes_of_gb(max_shard_gb, shard_size_given="shard_bytes" in given)
        chosen = {name: values.pop(name) for name in shared if name in values}
        out_only = {spec.name: values.pop(spec.name) for spec in self.out_params}
        if chosen["out"] is None:
            named = {**values, **out_only}
            wanted = inspect.signature(self.default_out).parameters
            chosen["out"] = self.default_out(**{name: value for name, value in named.items() if name in wanted})
        return self.build(options=self.options(**chosen), **self.fixed, **values)


def _list_option(help_text: str, name: str = "list_path") -> OptionSpec:
    return option("--list", name, required=True, type=Path(dir_okay=False), help=help_text)


def _ava_like(corpus: str) -> Adapter:
    """``build ava`` and ``build wasd``: one reader, MuVAP's loader CSV layout (docs/asd.md)."""
    return Adapter(
        name=corpus,
        build=ava.build_ava,
        fixed={"corpus": corpus},
        options=AsdBuildOptions,
        help=f"Pack {corpus.upper()} face tracks (JPEG crops, per-track WAVs, the loader CSV) as an asd pack: faces "
             f"112x112 grayscale, labels per native frame, audio 16 kHz mono unnormalised.",
        params=(
            option("--loader", "csv_path", required=True, type=Path(dir_okay=False),
                   help="The header-less loader CSV (sample_id, _, fps, labels), one face track per line."),
            option("--visual-root", required=True, type=Path(file_okay=False),
                   help="Face crops: VISUAL_ROOT/SPLIT/<clip>/<track>/<timestamp>.jpg."),
            option("--audio-root", required=True, type=Path(file_okay=False),
                   help="Track audio: AUDIO_ROOT/SPLIT/<clip>/<track>.wav."),
            option("--split", required=True, help="Split directory under both roots (train, val, ...)."),
        ),
        default_out=ava.default_out,
        out_help="Pack directory (default: <dataset root>/packed/<split>, the dataset root being the visual root's "
                 "parent).",
    )


def _range_option(flag: str, arity: int, metavar: str, default: tuple, unit: str, limit: units.Range) -> OptionSpec:
    """A ``--simulate`` range: ``arity`` numbers within ``limit``, ``None`` when not given (the simulation's own
    default)."""
    shown = " ".join(f"{value:g}" for value in default)
    return option(flag, type=Number.within(limit), arity=arity, default=None, metavar=metavar,
                  help=f"{unit} (default {shown}).")


ADAPTERS: dict[str, Adapter] = {adapter.name: adapter for adapter in (
    Adapter(
        name="wesep",
        build=wesep.build_wesep_command,
        help="Pack a WeSep raw list: mixture lines make a `tse` pack, single-speaker lines a `sources` pack.  "
             "--data-dir packs a WeSep split directory as its recipes lay it out, in one command.  Mainline WeSep's "
             "shard.list or wav.scp (with utt2spk beside it) and its enrollment files are read as they are.",
        params=(
            option("--list", "list_path", type=Path(dir_okay=False),
                   help="WeSep raw list (JSON lines: key, spk, mix.default, src), mainline WeSep's single-speaker "
                        "JSON lines (key, wav, spk), or its shard.list or wav.scp (utt2spk beside it)."),
            option("--data-dir", type=Path(file_okay=False),
                   help="A WeSep split directory (data/train): its samples.jsonl, raw.list or shard.list, with "
                        "its cues.yaml and spk2label.json, instead of --list and --cues."),
            option("--root", type=Path(file_okay=False, exists=True),
                   help="Resolve relative audio, cue resource and cue file paths against this directory "
                        "(default: the current directory)."),
            option("--cues", "cues", type=Path(dir_okay=False),
                   help="The split's cues.yaml: pack every cue resource it points to into PACK/cues/."),
            option("--allow-pickle", is_flag=True,
                   help="Unpickle spatial cue files that are pickled dicts (runs code from them: trusted files "
                        "only)."),
            option("--enroll", type=Path(dir_okay=False),
                   help="Mainline WeSep enrollments: spk2enroll.json (training draws) or single.wav.scp (the "
                        "audio of the --fixed-enroll ids)."),
            option("--fixed-enroll", multiple=True, type=Path(dir_okay=False),
                   help="Mainline WeSep fixed enrollments, in slot order: --fixed-enroll spk1.enroll "
                        "--fixed-enroll spk2.enroll; as in mainline, a later slot without a file of its own reads "
                        "the second (spk2.enroll)."),
            option("--spk-embeds", type=Path(dir_okay=False),
                   help="Mainline WeSep pre-extracted Kaldi embeddings (embed.scp, lines 'key embed.ark:offset' or "
                        "'key file'; never a command or stdin)."),
            option("--utt2spk", type=Path(dir_okay=False),
                   help="single.utt2spk: the speaker of each --spk-embeds embedding (training draws; only with "
                        "--spk-embeds)."),
        ),
    ),
    Adapter(
        name="wesep-shards",
        build=wesep_shards.build_wesep_shards,
        help="Pack WeSep tar shards (offline: key.spk<i>, key.<ext>, key_spk<i>.<ext>; online: key.spk, key.<ext>); "
             "the same samples as a raw list give the same shards.  Members are read from the tar (GNU sparse ones "
             "too), never extracted; a member over 1 GB is refused by name.",
        params=(
            _list_option("WeSep shard list: one tar path per line, plain or gzip-compressed (.tar.gz/.tgz, held in "
                         "memory, 2 GB at most); relative to the current directory."),
        ),
    ),
    Adapter(
        name="parquet",
        build=asr_parquet.build_parquet,
        help="Pack Omnilingual ASR parquet (audio_bytes, audio_size, text, split, language, corpus) into an `asr` "
             "pack (needs speechpack[parquet]).",
        params=(
            option("--path", "path", required=True, type=Path(exists=True),
                   help="Omnilingual parquet dataset: a directory (corpus=X/language=Y/*.parquet partitions) or "
                        "one file."),
            option("--split", help="Pack only the rows whose `split` is this (e.g. train)."),
        ),
    ),
    Adapter(
        name="asr-jsonl",
        build=asr_jsonl.build_asr_jsonl,
        help="Pack a one-utterance-per-line JSON manifest into an `asr` pack (offset/duration cut spans of long "
             "files).",
        params=(
            _list_option("ASR manifest: JSON lines with audio_filepath, text, language, corpus [key, speaker, "
                         "offset, duration]; relative paths are read from the manifest's directory.",
                         name="manifest_path"),
            option("--language", help="Language of lines that name none."),
            option("--corpus", help="Corpus of lines that name none."),
        ),
    ),
    Adapter(
        name="lhotse",
        build=lhotse_adapter.build_lhotse,
        help="Pack Lhotse manifests (any Lhotse recipe's output) into an `asr` pack (one supervision with text per "
             "cut) or a `sources` pack (single-speaker mono cuts); audio is read by Lhotse itself (files, cuts of "
             "longer recordings, multi-channel, Shar tars read member by member as cuts are decoded; URLs refused).  "
             "Needs speechpack[lhotse].",
        params=(
            option("--cuts", type=Path(dir_okay=False),
                   help="A CutSet in JSON lines (cuts.jsonl.gz), one cut per line."),
            option("--recordings", type=Path(dir_okay=False),
                   help="A RecordingSet (JSON lines), with --supervisions: one sample per supervision, cut "
                        "from its recording with all its channels."),
            option("--supervisions", type=Path(dir_okay=False),
                   help="A SupervisionSet (JSON lines), with --recordings."),
            option("--shar", type=Path(file_okay=False),
                   help="A Lhotse Shar directory (cuts.NNNNNN.jsonl.gz and recording.NNNNNN.tar)."),
            option("--kind", type=Choice(lhotse_adapter.KINDS), default="auto", show_default=True,
                   help="Pack kind: asr (one transcribed supervision per cut), sources (one speaker, mono; "
                        "input of online mixing), or auto: asr when any cut has text, else sources."),
            option("--language", help="Language of supervisions that name none (asr)."),
            option("--corpus", help="Corpus of the samples (asr; default: the supervision's custom.corpus, "
                                      "else the recipe's file name, <corpus>_cuts_<split>.jsonl.gz)."),
        ),
    ),
    Adapter(
        name="audio-bank",
        build=audio_bank.build_bank,
        help="Pack every audio file of a directory (recursively, sorted) or a list file (one path per line) as a "
             "noise or RIR bank: one sample per file, all channels, resampled, nothing normalised.  Keys are the "
             "paths relative to the directory (or as listed); each sample's one \"speaker\" is the kind name.  --lmdb "
             "converts a WeSep noise LMDB once: every entry decoded and checked, its key kept as the sample key.",
        params=(
            argument("source", metavar="[DIR_OR_LIST]", required=False, type=Path(exists=True)),
            option("--kind", required=True, type=Choice(audio_bank.BANK_KINDS),
                   help="Pack kind: a noise bank or a room-impulse-response bank."),
            option("--simulate", type=Number.within(units.SIMULATE), metavar="N",
                   help="Instead of files: simulate N shoebox-room RIRs with pyroomacoustics (--kind rir)."),
            option("--lmdb", "lmdb", type=Path(exists=True), metavar="PATH",
                   help="Instead of files: every entry of a WeSep noise LMDB (tools/make_lmdb.py), keys kept "
                        "(--kind noise; needs speechpack[wesep])."),
            _range_option("--room-min", 3, "X Y Z", audio_bank.DEFAULT_ROOM_MIN, "Smallest room, metres",
                          units.ROOM_SIZE),
            _range_option("--room-max", 3, "X Y Z", audio_bank.DEFAULT_ROOM_MAX, "Largest room, metres",
                          units.ROOM_SIZE),
            _range_option("--rt60", 2, "LO HI", audio_bank.DEFAULT_RT60, "RT60 range, s", units.RT60),
            _range_option("--distance", 2, "LO HI", audio_bank.DEFAULT_DISTANCE,
                          "Source-microphone distance range, metres", units.DISTANCE),
            option("--seed", default=0, show_default=True, type=Number.within(units.SEED),
                   help="Seed of the simulation."),
        ),
    ),
    _ava_like("ava"),
    _ava_like("wasd"),
    Adapter(
        name="avcc",
        build=avcc.build_avcc,
        options=AsdBuildOptions,
        help="Pack AVCC face tracks (npy or JPEG-directory faces, conversation audio cut at start_sec) as an asd "
             "pack.",
        params=(
            option("--loader", "tsv_path", required=True, type=Path(dir_okay=False),
                   help="The headered TSV: sample_id, visual_path, audio_path, source_fps, labels[, start_sec, "
                        "visual_kind, audio_sample_rate]."),
            option("--root", required=True, type=Path(file_okay=False),
                   help="Resolve the TSV's relative paths against this directory."),
        ),
        default_out=avcc.default_out,
        out_params=(
            option("--split", 
                   help="The split packed (train, val, ...): names the default --out, <root>/packed/<split>."),
        ),
        out_help="Pack directory (default with --split: <root>/packed/<split>).",
    ),
    Adapter(
        name="msdwild",
        build=msdwild.build_msdwild,
        options=AsdBuildOptions,
        help="Pack MSDWild: windows cut from each MP4 with its box CSV, tracks present in 90% of a window, labels "
             "from the RTTM by frame centre; an incomplete final window is discarded unless --keep-tail (docs/asd.md).",
        params=(
            option("--input", "input_dir", required=True, type=Path(file_okay=False),
                   help="MSDWild's box directory: <video>.csv per video (and the MP4s, unless --video-root)."),
            option("--rttm", "rttm_path", type=Path(dir_okay=False),
                   help=f"Speech turns; its videos are the ones packed (default: INPUT/{msdwild.DEFAULT_RTTM})."),
            option("--video-root", type=Path(file_okay=False),
                   help="Where <video>.mp4 are (default: --input)."),
            option("--window", "window_sec", default=msdwild.DEFAULT_WINDOW_SEC, show_default=True,
                   type=Number.within(units.WINDOW_SECONDS), help="Window length, seconds."),
            option("--overlap", "--overlap-seconds", "overlap_sec", default=msdwild.DEFAULT_OVERLAP_SEC,
                   show_default=True, type=Number.within(units.OVERLAP_SECONDS),
                   help="Overlap of consecutive windows, seconds (--overlap-seconds: MuVAP's spelling)."),
            option("--keep-tail", is_flag=True,
                   help="Keep an incomplete final window (unpadded) when it adds frames; by default it is "
                        "discarded, as MuVAP's document says."),
            option("--box-format", type=Choice(msdwild.BOX_FORMATS), default=msdwild.BOX_FORMATS[0],
                   show_default=True, help="The four box columns: x y width height, or x1 y1 x2 y2."),
        ),
        default_out=msdwild.default_out,
        out_help="Pack directory (default: <dataset root>/packed/<rttm name>, the dataset root being the input's "
                 "parent).",
    ),
)}


def parse_shard_size(text) -> int:
    """A byte size such as ``1GB`` (decimal) or ``512MiB`` (binary), within ``units.SHARD_BYTES``."""
    return units.SHARD_BYTES.check(parse_size(text))


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
    take MuVAP's spellings ``--output`` and ``--max-shard-gb``.  ``import muvap`` shares rows (``IMPORT_OPTIONS``)."""
    sample, item = ("track", "track") if adapter.asd else ("sample", "line")
    out_help = adapter.out_help or OUT_HELP
    if adapter.asd:
        options = [option("--out", "--output", "out", required=adapter.default_out is None,
                          type=Path(file_okay=False), help=out_help + " --output is MuVAP's spelling.")]
    else:
        options = [option("--out", required=adapter.default_out is None, type=Path(file_okay=False), help=out_help),
                   option("--sample-rate", default=DEFAULT_SAMPLE_RATE, show_default=True,
                          type=Number.within(units.SAMPLE_RATE),
                          help="Rate of the stored audio in Hz; inputs are resampled with soxr.")]
    options.append(shard_size_option(sample))
    if adapter.asd:
        options.append(option("--max-shard-gb", "max_shard_gb", type=Number(False, low=0, low_open=True),
                              default=None, help="MuVAP's spelling of --shard-size, in decimal GB (1.5 = "
                                                 "--shard-size 1.5GB)."))
    options += [workers_option("Decoding"), skip_bad_option("Pack", item)]
    if adapter.asd:
        options.append(option("--skip-missing", is_flag=True,
                              help="Partial development copies: leave out tracks whose face or audio files are "
                                   "missing (recorded in skipped.json); any other problem still fails the build."))
    return options + ENCODING_OPTIONS + FINISHING_OPTIONS + SCALE_OPTIONS


#: ``--out``'s help where a command names no default directory.
OUT_HELP = "Pack directory to create (must be empty or absent, unless --overwrite)."


def shard_size_option(item: str) -> OptionSpec:
    """``--shard-size``, in terms of what the pack holds (``item``: a sample, a track)."""
    return option("--shard-size", "shard_bytes", default=format_bytes(DEFAULT_SHARD_BYTES), show_default=True,
                  type=SIZE, help=f"Close a shard when the next {item} would push its payload past this size (counted as "
                       "int16 audio: a --codec flac or opus shard holds the same samples in fewer bytes).")


def workers_option(work: str) -> OptionSpec:
    """``--workers``; ``work`` says what the processes do (``"Decoding"`` in a build, ``"Copying"`` in an import)."""
    return option("--workers", default=1, show_default=True, type=Number.within(units.WORKERS),
                  help=f"{work} processes; the pack is byte-identical whatever the number.")


def skip_bad_option(verb: str, item: str) -> OptionSpec:
    """``--skip-bad``; ``verb``: the command's work (``"Pack"``, ``"Import"``), ``item``: a line, a track."""
    return option("--skip-bad", is_flag=True,
                  help=f"{verb} the good {item}s and record the bad ones in skipped.json instead of failing.")


#: How a build or an import stores its audio (format 1.4, ``packer.build.encoding``): build options, recorded in
#: the pack's provenance and part of the build's fingerprint.
ENCODING_OPTIONS = [
    option("--codec", type=Choice(CODECS), default=CODEC_PCM16, show_default=True,
           help="How audio streams (and cue banks' enrollment audio) are stored: pcm16 (int16, the fastest read), "
                "flac (lossless, about 0.55x the bytes of pcm16 on speech) or opus (lossy, about 0.1x at the "
                "default bitrate; 8/12/16/24/48 kHz packs only).  flac and opus store blocks that decode on their "
                "own (--block-seconds)."),
    option("--opus-bitrate", type=Number.within(units.OPUS_BITRATE), default=None, metavar="BPS",
           help=f"Opus bits per second per channel (default {DEFAULT_OPUS_BITRATE}, for 16 kHz speech: about 26 "
                f"kbit/s on disk with the blocks' framing).  Only with --codec opus."),
    option("--block-seconds", type=Number.within(units.BLOCK_SECONDS), default=DEFAULT_BLOCK_SECONDS,
           show_default=True, help="Length of a flac/opus block: the unit a reader decodes (a window decodes the "
                                   "blocks it touches)."),
    option("--digests/--no-digests", default=None,
           help="Store a blake2b-128 digest of every segment (and block) in each shard (digests.npy, format 1.4), "
                "for verified range reads; default: with --codec flac/opus (always), not with pcm16."),
]

#: The last options of a build's or an import's own (``SCALE_OPTIONS`` follow).
FINISHING_OPTIONS = [
    option("--overwrite", is_flag=True, help="Replace the pack already in --out."),
    option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar."),
]


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


def shard_bytes_of_gb(max_shard_gb: float, shard_size_given: bool = False) -> int:
    """MuVAP's ``--max-shard-gb`` as ``shard_bytes``: ``round(gb * 1e9)``, as MuVAP's CLI rounds it, within
    ``units.SHARD_BYTES``.  A size out of range, or ``--shard-size`` given too, is an ``OptionError`` (a usage
    error)."""
    if shard_size_given:
        raise OptionError("--max-shard-gb and --shard-size set the same limit: give one of them")
    try:
        return units.SHARD_BYTES.check(parse_size(f"{max_shard_gb!r}GB"))
    except SpeechpackError as err:
        raise OptionError(f"Invalid value for --max-shard-gb: {err}") from None


__all__ = ["ADAPTERS", "ENCODING_OPTIONS", "FINISHING_OPTIONS", "OUT_HELP", "SCALE_OPTIONS", "SIZE", "SLICE", "Adapter", "parse_shard_size",
           "parse_shard_slice", "shard_bytes_of_gb", "shard_size_option", "shared_build_options", "skip_bad_option",
           "workers_option"]
