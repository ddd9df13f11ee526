"""``speechpack demo`` end to end through the CLI, and the synthetic voices it is built on."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner, Result

from speechpack.cli import main
from speechpack.loader.pack import open_pack
from speechpack.loader.demo import BOTH_MICS_CONFIG, DEMO_BATCH_SIZE, PLAN_PICTURE
from speechpack.packer.demo import (INSPECT_PICTURE, LOADER_OUTPUTS, MARKER_NAME, MIXTURE_SPEAKERS, NUM_VOICES, RATES,
                                    TWO_MIC_MIXTURES, UTTERANCES_PER_VOICE, demo_outputs, run_demo)
from speechpack.packer.validate.pack import validate_packs
from speechpack.packer.voices import make_voices, synthesize_utterance
from speechpack.schemas.errors import SpeechpackError

import factories.paths

#: Speakers per one-microphone mixture: the demo's tse pack (the two-microphone ones are in tse-2mic).
ONE_MIC = MIXTURE_SPEAKERS[:len(MIXTURE_SPEAKERS) - TWO_MIC_MIXTURES]


def _run_demo(out) -> Result:
    return CliRunner().invoke(main, ["demo", "--out", str(out)])


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One demo run shared by the tests that read it: (out directory, CliRunner result).  The directory is named
    ``demo-out``, as the README's commands name it."""
    out = tmp_path_factory.mktemp("demo") / "demo-out"
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
                     "3. Packed the lists at 16000 Hz",
                     f"packed {len(MIXTURE_SPEAKERS) - TWO_MIC_MIXTURES} samples",
                     f"packed {TWO_MIC_MIXTURES} samples",
                     f"packed {NUM_VOICES * UTTERANCES_PER_VOICE} samples",
                     "4. Validated the packs",
                     "all packs valid",
                     "5. Opened the packs",
                     "6. Loaded one training epoch with build_loader",
                     f"{-(-len(ONE_MIC) // DEMO_BATCH_SIZE)} batches, {sum(ONE_MIC)} rows (one per target speaker",
                     f"items per batch {DEMO_BATCH_SIZE}, rows per batch",
                     f"({BOTH_MICS_CONFIG}), `speechpack plan` refuses it",
                     "mixtures with different channel counts in one batch",
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
    assert len(shards) == 4 and min(shards) >= 2, text  # tse, tse-2mic, sources, asr


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
    assert tse.kind == "tse" and len(tse) == len(ONE_MIC)
    assert sorted(tse.speaker_count.tolist()) == sorted(ONE_MIC)
    assert set(tse.orig_sample_rate.tolist()) == set(RATES)
    assert [tse.sample(i).mix.shape[0] for i in range(len(tse))] == [1] * len(tse)
    two_mic = open_pack(out / "packs" / "tse-2mic")
    assert validate_packs([str(out / "packs" / "tse-2mic")], check_hashes=True).ok
    assert sorted(two_mic.speaker_count.tolist()) == sorted(MIXTURE_SPEAKERS[len(ONE_MIC):])
    assert [two_mic.sample(i).mix.shape[0] for i in range(len(two_mic))] == [2] * TWO_MIC_MIXTURES

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


def test_demo_draws_its_pictures(demo):
    out, result = demo
    for name in (INSPECT_PICTURE, PLAN_PICTURE):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert str(out / name) in result.output  # the demo says where it put them


def _readme_block(after: str, language: str) -> str:
    """The first ``language`` code block of README.md after the line containing ``after``."""
    with open(os.path.join(factories.paths.REPO, "README.md"), encoding="utf-8") as fp:
        text = fp.read()
    start = text.index(f"```{language}\n", text.index(after)) + len(language) + 4
    return text[start:text.index("```", start)]


def test_readme_commands_after_the_demo_work_as_written(demo, monkeypatch):
    """README.md, "After the demo": every command, verbatim, from the directory holding ``demo-out``."""
    out, _ = demo
    monkeypatch.chdir(out.parent)
    commands = [line for line in _readme_block("## After the demo", "bash").splitlines() if line.strip()]
    assert commands[0] == ". .venv/bin/activate" and len(commands) > 5
    for command in commands[1:]:
        words = shlex.split(command, comments=True)
        assert words[0] == "speechpack", command
        result = CliRunner().invoke(main, words[1:])
        assert result.exit_code == 0, f"{command}\n{result.output}"
    assert validate_packs([str(out / "packs" / "again"), str(out / "staged" / "tse")]).ok
    refused = shlex.split(_readme_block("before any training starts", "bash"), comments=True)
    result = CliRunner().invoke(main, refused[1:])
    assert result.exit_code == 1 and "mixtures with different channel counts in one batch" in result.output


def test_readme_python_example_runs_on_the_demo_pack(demo, monkeypatch, capsys):
    """README.md's Python example, verbatim, on the demo's own pack (batches of several mixtures)."""
    out, _ = demo
    monkeypatch.chdir(out.parent)
    namespace: dict = {}
    exec(compile(_readme_block("Reading a pack from Python", "python"), "README.md", "exec"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(f"{len(ONE_MIC)} ")
    epochs = [line for line in printed[1:] if re.match(r"\d+ \(", line)]
    assert {line.split()[0] for line in epochs} == {"0", "1"}
    assert namespace["state"] is not None


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


def test_demo_again_replaces_its_own_files_and_keeps_what_the_readme_tour_wrote(tmp_path):
    """``demo_outputs`` names every file a demo leaves (what a later demo deletes); a second demo replaces those and
    leaves the README tour's (``batch-wavs/``, ``packs/again``, ``staged/``) and anything else beside them."""
    out = tmp_path / "demo-out"
    assert _run_demo(out).exit_code == 0
    written = {name for name in os.listdir(out) if name != "packs"}
    written |= {os.path.join("packs", name) for name in os.listdir(out / "packs")}
    assert written == set(demo_outputs())
    assert set(LOADER_OUTPUTS) == {"train.yaml", BOTH_MICS_CONFIG, PLAN_PICTURE}
    tour = [out / "batch-wavs" / "row0.wav", out / "packs" / "again" / "dataset.json", out / "staged" / "tse" / "x",
            out / "notes.txt"]
    for path in tour:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("the tour's")
    stale = [out / "corpus" / "stale.wav", out / "packs" / "tse" / "stale"]
    for path in stale:
        path.write_text("the first demo's")
    second = _run_demo(out)
    assert second.exit_code == 0, second.output
    assert all(path.read_text() == "the tour's" for path in tour)
    assert not any(path.exists() for path in stale)
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
