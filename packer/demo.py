"""``speechpack demo``: the whole tool on a corpus it makes up, in a few seconds, with no data to download.

1. Synthesise a small multi-speaker corpus (``packer.voices``): a few utterances per voice, written as 16-bit WAV
   at 16 kHz, 22.05 kHz and 48 kHz, so that the build has to resample.
2. Write it as WeSep raw lists: ``raw.list`` with 2- and 3-speaker mixtures, ``raw-2mic.list`` with mixtures
   recorded by two microphones (two channels), and ``sources.list`` with one single-speaker line per utterance.
   Mixtures of different channel counts cannot share a batch, so the two-microphone ones get a pack of their own,
   as a real corpus with two set-ups would.  Mixtures follow WeSep's strict policy: every file
   of a mixture is built at one rate and cropped or padded to one length, and the mixture is the sum of its
   (gain-adjusted) sources, stored as float WAV.
3. Pack the lists with ``build_wesep`` into small shards, validate the packs (hashes included), open them and
   read samples back, comparing a target with its source file resampled the same way; draw ``inspect``'s picture
   of the ``tse`` pack (``inspect.png``) when matplotlib (the ``plot`` extra) is there.
4. The same utterances as an ASR corpus: a JSON-lines manifest whose transcripts say which voice speaks (the
   voices are synthetic: there are no words to transcribe), packed into an ``asr`` pack and validated.

This module is the packing half: it reads packs only through the pack reader.  The loading half (a training
epoch of the ``tse`` pack, an fbank batch of the ``asr`` pack) is ``loader/demo.py``, and the ``demo`` command
in ``cli.py`` runs one after the other, since the demo as a whole sits above both packer/ and loader/.

Everything is deterministic, and every step is echoed, so the output doubles as a tour of what a build does.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import soundfile
import soxr

from speechpack.loader.pack import open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.ownership import remove_entries
from speechpack.packer.voices import Voice, make_voices, synthesize_utterance
from speechpack.schemas.constants import AUDIO_FULL_SCALE, DEFAULT_SAMPLE_RATE
from speechpack.schemas.errors import SpeechpackError
from speechpack.schemas.plotting import PLOT_INSTALL, plotting_available
from speechpack.schemas.units import format_bytes

#: Written first into the demo directory; only a directory holding it is ever touched by a later demo.
MARKER_NAME = ".speechpack-demo"
#: The packs the demo builds, in ``packs/`` (each with the ``.lock`` its build leaves beside it).
PACK_NAMES = ("tse", "tse-2mic", "sources", "asr")
#: The loading half's files (``loader/demo.py``: the training configs and plan's picture), named here because the
#: packing half clears the directory; ``tests/cli/test_demo.py`` checks this list against what a demo leaves.
LOADER_OUTPUTS = ("train.yaml", "both-mics.yaml", "plan.png")
NUM_VOICES = 6
#: Utterance ``u`` of voice ``v`` is recorded at ``RATES[(v + u) % 3]``: every voice has one file at every rate.
RATES = (16000, 22050, 48000)
UTTERANCES_PER_VOICE = len(RATES)
UTTERANCE_SECONDS = (2.0, 4.0)
#: Speakers per mixture; the last ``TWO_MIC_MIXTURES`` also get a second (simulated) microphone channel.
MIXTURE_SPEAKERS = (2, 3, 2, 2, 3, 2, 3, 2)
TWO_MIC_MIXTURES = 2
#: ``inspect``'s picture of the tse pack, in the demo directory.
INSPECT_PICTURE = "inspect.png"
#: Level of each interfering speaker relative to the first one, in dB.
SNR_DB = (-5.0, 5.0)
#: Small on purpose, so that even this tiny corpus spreads over several shards.
SHARD_BYTES = 800_000
SEED = 20240611


@dataclass(frozen=True)
class DemoResult:
    """Where the demo put things (absolute paths), for tests and for the curious."""

    out: str
    corpus: str
    tse_list: str
    tse_2mic_list: str
    sources_list: str
    tse_pack: str
    tse_2mic_pack: str
    sources_pack: str
    asr_pack: str
    #: ``BuildSummary.describe()`` of the asr pack and the seconds its build and validation took, for the step
    #: that loads it (``loader.demo``).
    asr_summary: str
    asr_seconds: float
    voices: tuple[Voice, ...]
    #: ``inspect``'s picture of the tse pack, or ``None`` when matplotlib is missing.
    inspect_picture: str | None
    #: ``time.monotonic()`` when the demo started, so the loading half can report the whole run's time.
    started: float
    seconds: float


@dataclass(frozen=True)
class _Utterance:
    voice: Voice
    path: str  # relative to the corpus directory
    rate: int
    audio: np.ndarray  # float32 mono, as read back from the 16-bit file


@dataclass(frozen=True)
class _Mixture:
    key: str
    speakers: tuple[str, ...]
    rate: int
    frames: int
    mix_paths: tuple[str, ...]
    source_paths: tuple[str, ...]
    snr_db: tuple[float, ...]


def run_demo(out: str, echo: Callable[[str], None] = print) -> DemoResult:
    """Generate, pack, validate and read back a small synthetic corpus in ``out``; echo steps 1-5.

    The asr pack is built and validated here too, silently: ``loader.demo.load_demo`` echoes it as step 7.

    ``out`` is created; if it holds an earlier demo (its marker file) that demo is replaced, and anything else
    in it is refused with a ``SpeechpackError`` rather than deleted.  Raises ``SpeechpackError`` if a pack
    fails validation.
    """
    started = time.monotonic()
    out = os.path.abspath(out)
    _prepare_directory(out)
    corpus = os.path.join(out, "corpus")
    packs = os.path.join(out, "packs")
    rng = np.random.default_rng(SEED)
    echo(f"speechpack demo in {out}")

    # 1. Voices and utterances.
    step = time.monotonic()
    voices = make_voices(NUM_VOICES)
    utterances = _write_utterances(corpus, voices, rng)
    echo("")
    echo(f"1. Synthesised {len(voices)} voices (glottal pulses through formant filters; no data downloaded):")
    for voice in voices:
        echo(f"     {voice.describe()}")
    total = sum(u.audio.size / u.rate for u in utterances)
    per_rate = ", ".join(f"{sum(u.rate == rate for u in utterances)} at {rate} Hz" for rate in RATES)
    lengths = [u.audio.size / u.rate for u in utterances]
    echo(f"   {len(utterances)} utterances of {min(lengths):.1f}-{max(lengths):.1f} s ({total:.0f} s in all; "
         f"{per_rate}) as 16-bit WAV in corpus/wav/  [{time.monotonic() - step:.2f} s]")

    # 2. Lists: mixtures and single-speaker sources.
    step = time.monotonic()
    mixtures = _write_mixtures(corpus, voices, utterances, rng)
    tse_list = os.path.join(corpus, "raw.list")
    tse_2mic_list = os.path.join(corpus, "raw-2mic.list")
    sources_list = os.path.join(corpus, "sources.list")
    _write_lines(tse_list, [_mixture_line(m) for m in mixtures if len(m.mix_paths) == 1])
    _write_lines(tse_2mic_list, [_mixture_line(m) for m in mixtures if len(m.mix_paths) > 1])
    _write_lines(sources_list, [_source_line(u) for u in utterances])
    echo("")
    echo(f"2. Mixed {len(mixtures)} mixtures (sum of sources, interferers at {SNR_DB[0]:+.0f}..{SNR_DB[1]:+.0f} dB, "
         f"float WAV; every file of a mixture at one rate and length)")
    for m in mixtures:
        channels = f", {len(m.mix_paths)} channels" if len(m.mix_paths) > 1 else ""
        snrs = ", ".join(f"{s:+.1f}" for s in m.snr_db[1:])
        echo(f"     {m.key}: {' + '.join(m.speakers)} at {m.rate} Hz, {m.frames / m.rate:.2f} s{channels} "
             f"(interferers {snrs} dB)")
    echo(f"   one microphone -> corpus/raw.list; two microphones -> corpus/raw-2mic.list (mixtures of different "
         f"channel counts cannot share a batch: one pack each)")
    echo(f"   {len(utterances)} single-speaker lines (no 'mix') -> corpus/sources.list  "
         f"[{time.monotonic() - step:.2f} s]")

    # 3. Build both packs.
    tse_pack = os.path.join(packs, "tse")
    tse_2mic_pack = os.path.join(packs, "tse-2mic")
    sources_pack = os.path.join(packs, "sources")
    echo("")
    echo(f"3. Packed the lists at {DEFAULT_SAMPLE_RATE} Hz (soxr resampling), int16, shards of "
         f"{format_bytes(SHARD_BYTES)} (relative paths read from --root corpus):")
    for list_path, pack in ((tse_list, tse_pack), (tse_2mic_list, tse_2mic_pack), (sources_list, sources_pack)):
        options = BuildOptions(out=pack, shard_bytes=SHARD_BYTES, workers=1, progress=False)
        summary = build_wesep(list_path, options, root=corpus)
        echo(f"   {os.path.relpath(list_path, out)} -> {summary.manifest.kind} pack:")
        echo(f"     {summary.describe()}")

    # 4. Validate.
    from speechpack.packer.validate.pack import validate_packs  # imported here: only the demo and `validate` need it

    step = time.monotonic()
    report = validate_packs([tse_pack, tse_2mic_pack, sources_pack], check_hashes=True)
    echo("")
    echo("4. Validated the packs (sizes, SHA-256 hashes, headers, offsets, keys, statistics, clipping):")
    for line in report.describe().splitlines():
        echo(f"   {line}")
    echo(f"   [{time.monotonic() - step:.2f} s]")
    if not report.ok:
        raise SpeechpackError(f"the demo's packs in {packs} failed validation (see the report above)")

    # 5. Read back.
    echo("")
    _read_back(tse_pack, tse_2mic_pack, sources_pack, corpus, mixtures, echo)
    inspect_picture = _inspect_picture(tse_pack, out, echo)

    # The same utterances as an ASR corpus (echoed as step 7 by the loading half).
    step = time.monotonic()
    asr_pack, asr_summary = _asr(corpus, utterances, os.path.join(packs, "asr"))
    asr_seconds = time.monotonic() - step

    return DemoResult(out=out, corpus=corpus, tse_list=tse_list, tse_2mic_list=tse_2mic_list,
                      sources_list=sources_list, tse_pack=tse_pack, tse_2mic_pack=tse_2mic_pack,
                      sources_pack=sources_pack, asr_pack=asr_pack, asr_summary=asr_summary,
                      asr_seconds=asr_seconds, voices=tuple(voices), inspect_picture=inspect_picture,
                      started=started, seconds=time.monotonic() - started)


def _inspect_picture(tse_pack: str, out: str, echo: Callable[[str], None]) -> str | None:
    """``speechpack inspect --plot`` of the tse pack into the demo directory, when matplotlib is installed."""
    if not plotting_available():
        echo(f"   no pictures: matplotlib is missing ({PLOT_INSTALL}; scripts/demo.sh installs it)")
        return None
    from speechpack.packer.inspect import inspect_pack

    path = os.path.join(out, INSPECT_PICTURE)
    inspect_pack(tse_pack).plot(path)
    echo(f"   inspect's picture of the tse pack (durations, levels, speakers, shards): {path}")
    return path


def _asr(corpus: str, utterances: list[_Utterance], asr_pack: str) -> tuple[str, str]:
    """An ``asr`` pack of the utterances (``build asr-jsonl``), validated; returns its path and summary."""
    from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl
    from speechpack.packer.validate.pack import validate_packs

    manifest = os.path.join(corpus, "asr.jsonl")
    _write_lines(manifest, [{"key": os.path.splitext(os.path.basename(u.path))[0],
                             "audio_filepath": os.path.join(corpus, u.path), "speaker": u.voice.name,
                             "text": f"voice {u.voice.name} utterance {n % UTTERANCES_PER_VOICE + 1}",
                             "language": "en", "corpus": "demo"} for n, u in enumerate(utterances)])
    summary = build_asr_jsonl(manifest, BuildOptions(out=asr_pack, shard_bytes=SHARD_BYTES, progress=False))
    report = validate_packs([asr_pack])
    if not report.ok:
        raise SpeechpackError(f"the demo's asr pack {asr_pack} failed validation:\n{report.describe()}")
    return asr_pack, summary.describe()


def demo_outputs() -> tuple[str, ...]:
    """Everything a demo writes into its directory, relative to it: what a later demo deletes, and nothing else
    (the README's tour writes ``batch-wavs/``, ``packs/again`` and ``staged/`` beside them, which stay)."""
    packs = tuple(os.path.join("packs", name + suffix) for name in PACK_NAMES for suffix in ("", ".lock"))
    return (MARKER_NAME, "corpus", *packs, INSPECT_PICTURE, *LOADER_OUTPUTS)


def _prepare_directory(out: str) -> None:
    """Create ``out``, or delete what an earlier demo wrote there (``demo_outputs``); refuse a directory that holds
    anything but no earlier demo, without touching it."""
    if os.path.lexists(out) and not os.path.isdir(out):
        raise SpeechpackError(f"{out}: exists and is not a directory")
    if os.path.isdir(out):
        entries = sorted(os.listdir(out))
        if entries and MARKER_NAME not in entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise SpeechpackError(f"{out}: not empty and not an earlier demo (no {MARKER_NAME}; holds {shown}); "
                                  f"refusing to delete it; pass another --out")
        remove_entries(out, demo_outputs())
    os.makedirs(out, exist_ok=True)
    packs = ", ".join(f"packs/{name}" for name in PACK_NAMES)
    with open(os.path.join(out, MARKER_NAME), "w", encoding="utf-8") as fp:
        fp.write(f"Written by `speechpack demo`; a later demo into this directory replaces what the demo wrote "
                 f"(corpus/, {packs}, the pictures and configs) and nothing else.\n")


def _write_utterances(corpus: str, voices: list[Voice], rng: np.random.Generator) -> list[_Utterance]:
    """Every voice's utterances as 16-bit WAV; the audio kept is what the file holds (read back)."""
    utterances = []
    for v, voice in enumerate(voices):
        directory = os.path.join(corpus, "wav", voice.name)
        os.makedirs(directory)
        for u in range(UTTERANCES_PER_VOICE):
            rate = RATES[(v + u) % len(RATES)]
            seconds = float(rng.uniform(*UTTERANCE_SECONDS))
            audio = synthesize_utterance(voice, seconds, rate, seed=SEED + u)
            relative = os.path.join("wav", voice.name, f"{voice.name}-u{u + 1}.wav")
            path = os.path.join(corpus, relative)
            soundfile.write(path, audio, rate, subtype="PCM_16")
            stored, _ = soundfile.read(path, dtype="float32")
            utterances.append(_Utterance(voice=voice, path=relative, rate=rate, audio=stored))
    return utterances


def _fit(audio: np.ndarray, frames: int, rng: np.random.Generator) -> np.ndarray:
    """Crop (at a random offset) or zero-pad (at a random position) ``audio`` to ``frames`` samples."""
    if audio.size >= frames:
        start = int(rng.integers(audio.size - frames + 1))
        return audio[start:start + frames].astype(np.float64)
    fitted = np.zeros(frames)
    start = int(rng.integers(frames - audio.size + 1))
    fitted[start:start + audio.size] = audio
    return fitted


def _delayed(audio: np.ndarray, delay: int) -> np.ndarray:
    shifted = np.zeros_like(audio)
    shifted[delay:] = audio[:audio.size - delay]
    return shifted


def _write_mixtures(corpus: str, voices: list[Voice], utterances: list[_Utterance],
                    rng: np.random.Generator) -> list[_Mixture]:
    """Mixtures at one rate each: the first speaker's utterance sets the length; the others are cropped or
    padded to it and scaled to a random level relative to it; sources and mixture share one final gain."""
    by_voice_rate = {(u.voice.name, u.rate): u for u in utterances}
    mixtures = []
    for index, count in enumerate(MIXTURE_SPEAKERS):
        key = f"mix{index + 1:02d}"
        rate = RATES[index % len(RATES)]
        chosen = [voices[int(i)] for i in rng.choice(len(voices), size=count, replace=False)]
        first = by_voice_rate[(chosen[0].name, rate)].audio
        frames = first.size
        sources = [first.astype(np.float64)]
        snr_db = [0.0]
        reference_rms = np.sqrt(np.mean(sources[0] ** 2))
        for voice in chosen[1:]:
            fitted = _fit(by_voice_rate[(voice.name, rate)].audio, frames, rng)
            snr = float(rng.uniform(*SNR_DB))
            rms = np.sqrt(np.mean(fitted ** 2)) or 1.0
            sources.append(fitted * (reference_rms / rms) * 10.0 ** (snr / 20.0))
            snr_db.append(snr)
        channels = [np.sum(sources, axis=0)]
        if index >= len(MIXTURE_SPEAKERS) - TWO_MIC_MIXTURES:
            # A second microphone: each source arrives a little later (up to 1 ms) and a little quieter.
            delays = [int(rng.integers(0, rate // 1000 + 1)) for _ in sources]
            channels.append(0.8 * np.sum([_delayed(s, d) for s, d in zip(sources, delays)], axis=0))
        gain = float(rng.uniform(0.5, 0.9)) / max(np.max(np.abs(c)) for c in channels)
        directory = os.path.join(corpus, "mix", key)
        os.makedirs(directory)
        source_paths = []
        for voice, source in zip(chosen, sources):
            relative = os.path.join("mix", key, f"{voice.name}.wav")
            soundfile.write(os.path.join(corpus, relative), (source * gain).astype(np.float32), rate,
                            subtype="FLOAT")
            source_paths.append(relative)
        mix_paths = []
        for channel, signal in enumerate(channels):
            relative = os.path.join("mix", key, "mix.wav" if channel == 0 else f"mix-mic{channel + 1}.wav")
            soundfile.write(os.path.join(corpus, relative), (signal * gain).astype(np.float32), rate,
                            subtype="FLOAT")
            mix_paths.append(relative)
        mixtures.append(_Mixture(key=key, speakers=tuple(v.name for v in chosen), rate=rate, frames=frames,
                                 mix_paths=tuple(mix_paths), source_paths=tuple(source_paths),
                                 snr_db=tuple(snr_db)))
    return mixtures


def _mixture_line(m: _Mixture) -> dict:
    return {"key": m.key, "spk": list(m.speakers), "mix": {"default": list(m.mix_paths)},
            "src": {spk: [path] for spk, path in zip(m.speakers, m.source_paths)}}


def _source_line(u: _Utterance) -> dict:
    key = os.path.splitext(os.path.basename(u.path))[0]
    return {"key": key, "spk": [u.voice.name], "src": {u.voice.name: [u.path]}}


def _write_lines(path: str, lines: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fp:
        for line in lines:
            fp.write(json.dumps(line) + "\n")


def _read_back(tse_pack: str, tse_2mic_pack: str, sources_pack: str, corpus: str, mixtures: list[_Mixture],
               echo: Callable[[str], None]) -> None:
    """Open the packs, decode two mixtures (one resampled, one two-channel) and compare a target with its
    source file put through the same soxr resampling: the only difference left is int16 rounding."""
    mono, two_mic, sources = open_pack(tse_pack), open_pack(tse_2mic_pack), open_pack(sources_pack)
    echo(f"5. Opened the packs: {mono!r}")
    echo(f"                     {two_mic!r}")
    echo(f"                     {sources!r}")
    by_key = {m.key: m for m in mixtures}
    resampled = next(i for i in range(len(mono)) if int(mono.orig_sample_rate[i]) != mono.sample_rate)
    for pack, index in ((mono, resampled), (two_mic, 0)):
        sample = pack.sample(index)
        mixture = by_key[sample.key]
        original, rate = soundfile.read(os.path.join(corpus, mixture.source_paths[0]), dtype="float32",
                                        always_2d=True)
        reference = original[:, :1]
        if rate != pack.sample_rate:
            reference = soxr.resample(reference, rate, pack.sample_rate)
        error = float(np.max(np.abs(sample.targets[0] - reference[:, 0])))
        step = pack.streams["target"].scale[pack.segments_of("target", index)[0]] / AUDIO_FULL_SCALE
        echo(f"   {os.path.basename(pack.path)} sample {index} {sample.key!r}: speakers {', '.join(sample.speakers)}; stored from "
             f"{int(pack.orig_sample_rate[index])} Hz at {pack.sample_rate} Hz; mix {list(sample.mix.shape)} "
             f"{sample.mix.dtype}, targets {list(sample.targets.shape)}")
        echo(f"     target {sample.speakers[0]} vs {mixture.source_paths[0]} resampled with soxr: max abs error "
             f"{error:.2e} (int16 step {step:.2e})")
