"""``speechpack demo`` end to end through the CLI, and the synthetic voices it is built on."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner, Result

from cli import main
from loader.pack import open_pack
from packer.demo import MARKER_NAME, MIXTURE_SPEAKERS, NUM_VOICES, RATES, UTTERANCES_PER_VOICE, run_demo
from packer.validate_report import validate_packs
from packer.voices import make_voices, synthesize_utterance
from schemas.errors import SpeechpackError


def _run_demo(out) -> Result:
    return CliRunner().invoke(main, ["demo", "--out", str(out)])


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One demo run shared by the read-only tests: (out directory, CliRunner result)."""
    out = tmp_path_factory.mktemp("demo") / "out"
    result = _run_demo(out)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return out, result


def test_demo_prints_every_step(demo):
    _, result = demo
    text = result.output
    for expected in (f"1. Synthesised {NUM_VOICES} voices",
                     f"{NUM_VOICES * UTTERANCES_PER_VOICE} utterances",
                     f"2. Mixed {len(MIXTURE_SPEAKERS)} mixtures",
                     "2 channels",
                     "3. Packed both lists at 16000 Hz",
                     f"packed {len(MIXTURE_SPEAKERS)} samples",
                     f"packed {NUM_VOICES * UTTERANCES_PER_VOICE} samples",
                     "4. Validated both packs",
                     "all packs valid",
                     "5. Opened the packs",
                     "6. Loaded one training epoch with build_loader",
                     f"{len(MIXTURE_SPEAKERS)} batches, {sum(MIXTURE_SPEAKERS)} rows (one per target speaker)",
                     "wav_mix        (", "speechpack peek",
                     "7. The same utterances as an ASR corpus",
                     f"packed {NUM_VOICES * UTTERANCES_PER_VOICE} samples",
                     "validated: OK", "source_seqs", "(4, ", "target_seqs",
                     "Done in"):
        assert expected in text, f"missing {expected!r} in:\n{text}"
    for rate in RATES:
        assert f"at {rate} Hz" in text
    # Several shards each, or the demo does not show sharding.
    shards = [int(n) for n in re.findall(r"into (\d+) shard\(s\)", text)]
    assert len(shards) == 3 and min(shards) >= 2, text  # tse, sources, asr


def test_demo_read_back_matches_the_source_files(demo):
    _, result = demo
    errors = [float(e) for e in re.findall(r"max abs error (\S+)", result.output)]
    assert len(errors) == 2
    # A target differs from its soxr-resampled source only by int16 rounding: half a step.
    assert max(errors) <= 0.5 / 32768 * 1.01
    assert re.search(r"mix \[2, \d+\] float32", result.output), "the two-channel mixture was not shown"


def test_demo_packs_exist_and_validate(demo):
    out, _ = demo
    tse_pack, sources_pack = out / "packs" / "tse", out / "packs" / "sources"
    report = validate_packs([str(tse_pack), str(sources_pack)], check_hashes=True)
    assert report.ok, report.describe()

    tse = open_pack(tse_pack)
    assert tse.kind == "tse" and len(tse) == len(MIXTURE_SPEAKERS)
    assert sorted(tse.speaker_count.tolist()) == sorted(MIXTURE_SPEAKERS)
    assert set(tse.orig_sample_rate.tolist()) == set(RATES)
    channels = [tse.sample(i).mix.shape[0] for i in range(len(tse))]
    assert sorted(channels) == [1] * (len(tse) - 1) + [2]

    sources = open_pack(sources_pack)
    assert sources.kind == "sources" and len(sources) == NUM_VOICES * UTTERANCES_PER_VOICE
    assert len(set(sources.speakers.tolist())) == NUM_VOICES

    # The lists follow WeSep's format: mixture lines with mix.default, source lines without.
    with open(out / "corpus" / "raw.list", encoding="utf-8") as fp:
        lines = [json.loads(line) for line in fp]
    assert all(set(line) == {"key", "spk", "mix", "src"} for line in lines)
    assert all(os.path.isfile(out / "corpus" / p) for line in lines for p in line["mix"]["default"])
    with open(out / "corpus" / "sources.list", encoding="utf-8") as fp:
        assert all("mix" not in json.loads(line) for line in fp)


def test_mixture_files_share_rate_and_length_and_sum_up(demo):
    out, _ = demo
    with open(out / "corpus" / "raw.list", encoding="utf-8") as fp:
        lines = [json.loads(line) for line in fp]
    for line in lines:
        mix, rate = soundfile.read(out / "corpus" / line["mix"]["default"][0], dtype="float32")
        sources = []
        for spk in line["spk"]:
            source, source_rate = soundfile.read(out / "corpus" / line["src"][spk][0], dtype="float32")
            assert source_rate == rate and source.shape == mix.shape
            sources.append(source)
        np.testing.assert_allclose(np.sum(sources, axis=0), mix, atol=1e-6)


def _median_f0(audio: np.ndarray, rate: int) -> float:
    """Median f0 of the louder frames, from the autocorrelation peak between 60 and 400 Hz."""
    frame = int(0.04 * rate)
    starts = range(0, audio.size - frame, frame // 2)
    frames = np.stack([audio[s:s + frame] - audio[s:s + frame].mean() for s in starts])
    energy = np.sqrt(np.mean(frames ** 2, axis=1))
    lo, hi = int(rate / 400), int(rate / 60)
    estimates = []
    for f in frames[energy > 0.3 * energy.max()]:
        autocorrelation = np.correlate(f, f, "full")[frame - 1:]
        estimates.append(rate / (lo + np.argmax(autocorrelation[lo:hi])))
    return float(np.median(estimates))


def test_demo_voices_are_distinct(demo):
    out, _ = demo
    voices = make_voices(NUM_VOICES)
    measured = []
    for voice in voices:
        estimates = []
        for u in range(UTTERANCES_PER_VOICE):
            audio, rate = soundfile.read(out / "corpus" / "wav" / voice.name / f"{voice.name}-u{u + 1}.wav",
                                         dtype="float32")
            estimates.append(_median_f0(audio, rate))
        f0 = float(np.median(estimates))
        assert abs(f0 / voice.f0 - 1) < 0.1, f"{voice.name}: nominal f0 {voice.f0} Hz, measured {f0:.1f} Hz"
        measured.append(f0)
    ratios = np.diff(np.log(sorted(measured)))
    assert np.exp(ratios.min()) > 1.15, f"two voices have nearly the same pitch: {measured}"


def test_voices_differ_in_timbre_too():
    """Same pitch, different vocal tract: the formants, hence the spectral centroid, move up with tract_scale."""
    base = make_voices(2)[0]
    short_tract = dataclasses.replace(base, tract_scale=base.tract_scale * 1.4)
    rate = 16000

    def centroid(voice):
        audio = synthesize_utterance(voice, 3.0, rate, seed=3)
        spectrum = np.abs(np.fft.rfft(audio))
        freqs = np.fft.rfftfreq(audio.size, 1 / rate)
        band = freqs < 5000
        return float((spectrum[band] * freqs[band]).sum() / spectrum[band].sum())

    assert centroid(short_tract) > 1.15 * centroid(base)


def test_synthesis_is_deterministic_and_in_range():
    voice = make_voices(6)[3]
    a = synthesize_utterance(voice, 2.5, 22050, seed=11)
    b = synthesize_utterance(voice, 2.5, 22050, seed=11)
    c = synthesize_utterance(voice, 2.5, 22050, seed=12)
    assert a.dtype == np.float32 and a.shape == (round(2.5 * 22050),)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.all(np.isfinite(a)) and np.max(np.abs(a)) < 1.0
    other = synthesize_utterance(make_voices(6)[0], 2.5, 22050, seed=11)
    assert not np.array_equal(a, other)


def test_demo_twice_into_the_same_directory(tmp_path):
    out = tmp_path / "demo"
    assert _run_demo(out).exit_code == 0
    leftover = out / "corpus" / "stale.wav"
    leftover.write_bytes(b"from the first run")
    second = _run_demo(out)
    assert second.exit_code == 0, second.output
    assert not leftover.exists()
    assert (out / MARKER_NAME).is_file()
    assert validate_packs([str(out / "packs" / "tse"), str(out / "packs" / "sources")]).ok


def test_demo_refuses_a_directory_it_did_not_make(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = _run_demo(out)
    assert result.exit_code == 1
    assert "refusing" in result.output and "notes.txt" in result.output
    assert (out / "notes.txt").read_text() == "keep me"
    assert sorted(os.listdir(out)) == ["notes.txt"]


def test_demo_refuses_a_file(tmp_path):
    out = tmp_path / "a-file"
    out.write_text("x")
    assert _run_demo(out).exit_code == 2  # click's Path(file_okay=False) refuses it as a usage error
    with pytest.raises(SpeechpackError, match="not a directory"):
        run_demo(str(out), echo=lambda line: None)  # the library refuses it too
    assert out.read_text() == "x"
