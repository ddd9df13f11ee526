"""``speechpack demo``: the whole tool on a corpus it makes up, in a few seconds, with no data to download.

1. Synthesise a small multi-speaker corpus (``packer.voices``): a few utterances per voice, written as 16-bit WAV
   at 16 kHz, 22.05 kHz and 48 kHz, so that the build has to resample.
2. Write it as WeSep raw lists: ``raw.list`` with 2- and 3-speaker mixtures (one of them two-channel), and
   ``sources.list`` with one single-speaker line per utterance.  Mixtures follow WeSep's strict policy: every file
   of a mixture is built at one rate and cropped or padded to one length, and the mixture is the sum of its
   (gain-adjusted) sources, stored as float WAV.
3. Pack both lists with ``build_wesep`` into small shards, validate both packs (hashes included), open the
   ``tse`` pack and read samples back, comparing a target with its source file resampled the same way.
4. Load a training epoch of the ``tse`` pack with ``build_loader``.
5. The same utterances as an ASR corpus: a JSON-lines manifest whose transcripts say which voice speaks (the
   voices are synthetic: there are no words to transcribe), packed into an ``asr`` pack, validated, and loaded with
   ``task: asr`` as 80-bin fbank features with character targets.

Everything is deterministic, and every step is echoed, so the output doubles as a tour of what a build does.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import soundfile
import soxr

from loader.pack import open_pack
from packer.adapters.wesep import build_wesep
from packer.build.run import BuildOptions
from packer.voices import Voice, make_voices, synthesize_utterance
from schemas.constants import AUDIO_FULL_SCALE, DEFAULT_SAMPLE_RATE
from schemas.errors import SpeechpackError
from schemas.units import format_bytes

#: Written first into the demo directory; only a directory holding it is ever emptied by a later demo.
MARKER_NAME = ".speechpack-demo"
NUM_VOICES = 6
#: Utterance ``u`` of voice ``v`` is recorded at ``RATES[(v + u) % 3]``: every voice has one file at every rate.
RATES = (16000, 22050, 48000)
UTTERANCES_PER_VOICE = len(RATES)
UTTERANCE_SECONDS = (2.0, 4.0)
#: Speakers per mixture; the last mixture also gets a second (simulated) microphone channel.
MIXTURE_SPEAKERS = (2, 3, 2, 2, 3, 2, 3, 2)
#: Level of each interfering speaker relative to the first one, in dB.
SNR_DB = (-5.0, 5.0)
#: Small on purpose, so that even this tiny corpus spreads over several shards.
SHARD_BYTES = 800_000
SEED = 20240611
#: Training window of the loader step, in seconds.
DEMO_CHUNK_SECONDS = 1


@dataclass(frozen=True)
class DemoResult:
    """Where the demo put things (absolute paths), for tests and for the curious."""

    out: str
    corpus: str
    tse_list: str
    sources_list: str
    tse_pack: str
    sources_pack: str
    asr_pack: str
    voices: tuple[Voice, ...]
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
    """Generate, pack, validate and read back a small synthetic corpus in ``out``; echo each step.

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
    sources_list = os.path.join(corpus, "sources.list")
    _write_lines(tse_list, [_mixture_line(m) for m in mixtures])
    _write_lines(sources_list, [_source_line(u) for u in utterances])
    echo("")
    echo(f"2. Mixed {len(mixtures)} mixtures (sum of sources, interferers at {SNR_DB[0]:+.0f}..{SNR_DB[1]:+.0f} dB, "
         f"float WAV; every file of a mixture at one rate and length) -> corpus/raw.list")
    for m in mixtures:
        channels = f", {len(m.mix_paths)} channels" if len(m.mix_paths) > 1 else ""
        snrs = ", ".join(f"{s:+.1f}" for s in m.snr_db[1:])
        echo(f"     {m.key}: {' + '.join(m.speakers)} at {m.rate} Hz, {m.frames / m.rate:.2f} s{channels} "
             f"(interferers {snrs} dB)")
    echo(f"   {len(utterances)} single-speaker lines (no 'mix') -> corpus/sources.list  "
         f"[{time.monotonic() - step:.2f} s]")

    # 3. Build both packs.
    tse_pack = os.path.join(packs, "tse")
    sources_pack = os.path.join(packs, "sources")
    echo("")
    echo(f"3. Packed both lists at {DEFAULT_SAMPLE_RATE} Hz (soxr resampling), int16, shards of "
         f"{format_bytes(SHARD_BYTES)}:")
    for list_path, pack in ((tse_list, tse_pack), (sources_list, sources_pack)):
        options = BuildOptions(out=pack, shard_bytes=SHARD_BYTES, workers=1, progress=False)
        summary = build_wesep(list_path, options, root=corpus)
        echo(f"   {os.path.relpath(list_path, out)} -> {summary.manifest.kind} pack:")
        echo(f"     {summary.describe()}")

    # 4. Validate.
    from packer.validate_report import validate_packs  # imported here: only the demo and `validate` need it

    step = time.monotonic()
    report = validate_packs([tse_pack, sources_pack], check_hashes=True)
    echo("")
    echo("4. Validated both packs (sizes, SHA-256 hashes, headers, offsets, keys, statistics, clipping):")
    for line in report.describe().splitlines():
        echo(f"   {line}")
    echo(f"   [{time.monotonic() - step:.2f} s]")
    if not report.ok:
        raise SpeechpackError(f"the demo's packs in {packs} failed validation (see the report above)")

    # 5. Read back.
    echo("")
    _read_back(tse_pack, sources_pack, corpus, mixtures, echo)

    # 6. Load training batches.
    echo("")
    config_path = _load_batches(tse_pack, out, echo)

    # 7. The same utterances as an ASR corpus.
    echo("")
    asr_pack = _asr(corpus, utterances, os.path.join(packs, "asr"), out, echo)

    seconds = time.monotonic() - started
    echo("")
    echo(f"Done in {seconds:.1f} s.  Try:  speechpack validate {tse_pack}")
    echo(f"                   speechpack peek {config_path} --save-wavs {os.path.join(out, 'batch-wavs')}")
    return DemoResult(out=out, corpus=corpus, tse_list=tse_list, sources_list=sources_list, tse_pack=tse_pack,
                      sources_pack=sources_pack, asr_pack=asr_pack, voices=tuple(voices), seconds=seconds)


def _asr(corpus: str, utterances: list[_Utterance], asr_pack: str, out: str, echo: Callable[[str], None]) -> str:
    """Step 7: an ``asr`` pack of the utterances (``build asr-jsonl``), validated, and one fbank batch of it."""
    from loader import build_loader
    from loader.peek import describe_batch
    from packer.adapters.asr_jsonl import build_asr_jsonl
    from packer.validate_report import validate_packs

    step = time.monotonic()
    manifest = os.path.join(corpus, "asr.jsonl")
    _write_lines(manifest, [{"key": os.path.splitext(os.path.basename(u.path))[0],
                             "audio_filepath": os.path.join(corpus, u.path), "speaker": u.voice.name,
                             "text": f"voice {u.voice.name} utterance {n % UTTERANCES_PER_VOICE + 1}",
                             "language": "en", "corpus": "demo"} for n, u in enumerate(utterances)])
    summary = build_asr_jsonl(manifest, BuildOptions(out=asr_pack, shard_bytes=SHARD_BYTES, progress=False))
    report = validate_packs([asr_pack])
    if not report.ok:
        raise SpeechpackError(f"the demo's asr pack {asr_pack} failed validation:\n{report.describe()}")
    config = {"task": "asr", "packs": [{"path": asr_pack}],
              "dataset_args": {"use_fbank": True, "batching_strategy": "STATIC", "batch_size": 4, "shuffle": False}}
    loader = build_loader(config, "val", seed=0)
    batch = next(iter(loader))
    echo(f"7. The same utterances as an ASR corpus (corpus/asr.jsonl; the transcripts name the voice, the voices "
         f"being synthetic), packed, validated and loaded with task: asr:")
    echo(f"     {summary.describe()}")
    echo(f"   validated: OK (hashes, text UTF-8, hours per corpus and language); {len(loader)} batches of 4 as "
         f"80-bin fbank with character targets  [{time.monotonic() - step:.2f} s]")
    for line in describe_batch(batch).splitlines():
        echo(f"     {line}")
    return asr_pack


def _load_batches(tse_pack: str, out: str, echo: Callable[[str], None]) -> str:
    """Write a loader config for the tse pack, load one training epoch through ``build_loader`` and describe it.

    One mixture per batch: the demo has a two-channel mixture, and mixtures of different channel counts cannot
    share a batch (as in WeSep).
    """
    import yaml

    from loader import build_loader  # imported here: torch is only needed from this step on
    from loader.peek import describe_batch

    step = time.monotonic()
    config = {"packs": [{"path": tse_pack}],
              "dataset_args": {"chunk_len": DEMO_CHUNK_SECONDS * DEFAULT_SAMPLE_RATE, "batch_size": 1, "normalize": "muvap"}}
    config_path = os.path.join(out, "train.yaml")
    with open(config_path, "w", encoding="utf-8") as fp:
        yaml.safe_dump(config, fp, sort_keys=False)
    loader = build_loader(config, "train", seed=0)
    loader.set_epoch(0)
    batches = list(loader)
    rows = sum(len(batch["key"]) for batch in batches)
    echo(f"6. Loaded one training epoch with build_loader ({os.path.relpath(config_path, out)}: "
         f"{DEMO_CHUNK_SECONDS} s chunks, MuVAP normalisation, one mixture per batch):")
    echo(f"   {len(batches)} batches, {rows} rows (one per target speaker), every mixture exactly once  "
         f"[{time.monotonic() - step:.2f} s]")
    echo("   first batch:")
    for line in describe_batch(batches[0]).splitlines():
        echo(f"     {line}")
    return config_path


def _prepare_directory(out: str) -> None:
    """Create ``out``, or empty it if it holds an earlier demo; refuse anything else without touching it."""
    if os.path.lexists(out) and not os.path.isdir(out):
        raise SpeechpackError(f"{out}: exists and is not a directory")
    if os.path.isdir(out):
        entries = sorted(os.listdir(out))
        if entries and MARKER_NAME not in entries:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise SpeechpackError(f"{out}: not empty and not an earlier demo (no {MARKER_NAME}; holds {shown}); "
                                  f"refusing to delete it; pass another --out")
        for name in entries:
            path = os.path.join(out, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, MARKER_NAME), "w", encoding="utf-8") as fp:
        fp.write("Written by `speechpack demo`; a later demo into this directory deletes everything in it.\n")


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
        if index == len(MIXTURE_SPEAKERS) - 1:
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


def _read_back(tse_pack: str, sources_pack: str, corpus: str, mixtures: list[_Mixture],
               echo: Callable[[str], None]) -> None:
    """Open the packs, decode two mixtures (one resampled, the two-channel one) and compare a target with its
    source file put through the same soxr resampling: the only difference left is int16 rounding."""
    pack = open_pack(tse_pack)
    sources = open_pack(sources_pack)
    echo(f"5. Opened the packs: {pack!r}")
    echo(f"                     {sources!r}")
    by_key = {m.key: m for m in mixtures}
    resampled = next(i for i in range(len(pack)) if int(pack.orig_sample_rate[i]) != pack.sample_rate)
    multichannel = next(i for i in range(len(pack)) if len(by_key[str(pack.keys[i])].mix_paths) > 1)
    for index in dict.fromkeys((resampled, multichannel)):
        sample = pack.sample(index)
        mixture = by_key[sample.key]
        original, rate = soundfile.read(os.path.join(corpus, mixture.source_paths[0]), dtype="float32",
                                        always_2d=True)
        reference = original[:, :1]
        if rate != pack.sample_rate:
            reference = soxr.resample(reference, rate, pack.sample_rate)
        error = float(np.max(np.abs(sample.targets[0] - reference[:, 0])))
        step = pack.streams["target"].scale[pack.segments_of("target", index)[0]] / AUDIO_FULL_SCALE
        echo(f"   sample {index} {sample.key!r}: speakers {', '.join(sample.speakers)}; stored from "
             f"{int(pack.orig_sample_rate[index])} Hz at {pack.sample_rate} Hz; mix {list(sample.mix.shape)} "
             f"{sample.mix.dtype}, targets {list(sample.targets.shape)}")
        echo(f"     target {sample.speakers[0]} vs {mixture.source_paths[0]} resampled with soxr: max abs error "
             f"{error:.2e} (int16 step {step:.2e})")
