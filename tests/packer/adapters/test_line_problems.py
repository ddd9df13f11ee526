"""Inputs that could be packed wrong, or crash a whole build, are problems of the line that holds them (named,
skippable with ``--skip-bad``): names the fixed-width columns would merge (a trailing NUL, control characters),
truncated WAVs, rates far from the pack's, audio empty after resampling, malformed lines (bytes that are not UTF-8,
deep nesting, lone surrogates).

Audio is cropped from real recordings (``real_audio``).  Numeric options out of range: tests/cli/test_option_ranges.py.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader import open_pack
from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl
from speechpack.packer.audio import Audio, AudioError, probe_audio, read_audio, resample
from speechpack.packer.adapters.audio_bank import build_audio_bank
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.adapters.wesep_shards import build_wesep_shards
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.build.plan import SamplePlan, UnstorableSample
from speechpack.schemas.errors import BuildError, SpeechpackError


def options(out: Path, **kwargs) -> BuildOptions:
    kwargs.setdefault("progress", False)
    return BuildOptions(out=str(out), **kwargs)


def crop(source: str, dest: Path, frames: int, start: int = 4000) -> str:
    """The first ``frames`` frames from ``start`` of a real recording, as 16-bit PCM WAV at its own rate."""
    data, rate = soundfile.read(source, dtype="int16")
    soundfile.write(dest, data[start:start + frames], rate, subtype="PCM_16")
    return str(dest)


def source(key: str, spk: str, path: str) -> dict:
    return {"key": key, "spk": [spk], "src": {spk: [path]}}


def write_lines(path: Path, lines: list) -> Path:
    """``dict`` lines dumped as JSON (``\\u`` escapes for control characters), ``bytes`` written verbatim."""
    with open(path, "wb") as fp:
        for line in lines:
            fp.write(line if isinstance(line, bytes) else json.dumps(line).encode("utf-8"))
            fp.write(b"\n")
    return path


@pytest.fixture
def speech(real_audio, tmp_path):
    """Three 0.5 s crops of real 16 kHz speech (pocketsphinx librivox)."""
    paths = real_audio("pocketsphinx", 3)
    return [crop(p, tmp_path / f"speech{i}.wav", 8000) for i, p in enumerate(paths)]


def assert_no_pack(out: Path) -> None:
    assert not (out / "dataset.json").exists()


# --- names that the |S columns would merge ----------------------------------------------------------


def test_key_differing_by_trailing_nul_is_a_line_problem(speech, tmp_path):
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), source("a\x00", "s2", speech[1]),
                                                  source("b", "s3", speech[2])])
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), options(tmp_path / "pack"))
    [problem] = err.value.problems
    assert problem.line == 2 and "key 'a\\x00'" in problem.reason and "control character (U+0000" in problem.reason
    assert_no_pack(tmp_path / "pack")
    summary = build_wesep(str(listed), options(tmp_path / "kept", skip_bad=True))
    pack = open_pack(summary.out)
    assert sorted(pack.keys) == ["a", "b"] and [p.line for p in summary.skipped] == [2]


def test_speaker_with_control_character_is_a_line_problem(speech, tmp_path):
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), source("b", "s1\x00", speech[1]),
                                                  source("c", "s\x1b[2J", speech[2])])
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), options(tmp_path / "pack"))
    assert [p.line for p in err.value.problems] == [2, 3]
    assert all(p.reason.startswith("speaker ") and "control character" in p.reason for p in err.value.problems)


def test_asr_jsonl_key_and_speaker_with_control_characters(speech, tmp_path):
    good = {"audio_filepath": speech[0], "text": "hello", "language": "en", "corpus": "c"}
    manifest = write_lines(tmp_path / "m.jsonl", [
        {**good, "key": "k1"}, {**good, "key": "k1\x00"}, {**good, "key": "k3", "speaker": "sp\x00"},
        {**good, "key": "k4", "language": "e\tn"}])
    with pytest.raises(BuildError) as err:
        build_asr_jsonl(str(manifest), options(tmp_path / "pack"))
    problems = {p.line: p.reason for p in err.value.problems}
    assert sorted(problems) == [2, 3, 4]
    assert "key 'k1\\x00'" in problems[2] and "speaker" in problems[3] and "language" in problems[4]


def test_audio_bank_file_name_with_control_character(speech, tmp_path):
    bank = tmp_path / "bank"
    bank.mkdir()
    os.link(speech[0], bank / "good.wav")
    os.link(speech[1], bank / "bad\x01name.wav")
    with pytest.raises(BuildError) as err:
        build_audio_bank(str(bank), "noise", options(tmp_path / "pack"))
    [problem] = err.value.problems
    assert problem.line == 1 and "file name" in problem.reason and "U+0001" in problem.reason
    summary = build_audio_bank(str(bank), "noise", options(tmp_path / "kept", skip_bad=True))
    assert list(open_pack(summary.out).keys) == ["good.wav"]


def test_wesep_shard_speaker_id_with_nul(speech, tmp_path):
    shard = tmp_path / "shard.tar"
    with tarfile.open(shard, "w") as tar:
        for name, data in [("a.spk", b"s1"), ("a.wav", Path(speech[0]).read_bytes()),
                           ("b.spk", b"s1\x00"), ("b.wav", Path(speech[1]).read_bytes())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    shard_list = tmp_path / "shard.list"
    shard_list.write_text(f"{shard}\n", encoding="utf-8")
    with pytest.raises(BuildError) as err:
        build_wesep_shards(str(shard_list), options(tmp_path / "pack"))
    [problem] = err.value.problems
    assert problem.line == 2 and problem.key == "b" and "speaker 's1\\x00'" in problem.reason


def test_every_family_meets_the_same_check_in_the_sample_plan():
    """The net under every adapter (ASD ones included): a plan or sample with an unstorable name is refused as
    an ``AudioError``, which the build reports as a problem of the line."""
    with pytest.raises(UnstorableSample) as err:
        SamplePlan(line=1, key="clip\x00", num_frames=10, elements={"audio": 10})
    assert isinstance(err.value, AudioError) and err.value.path is None and "U+0000" in err.value.reason


# --- truncated WAV ------------------------------------------------------------------------------------


@pytest.fixture
def truncated(real_audio, tmp_path):
    """A real recording whose header says 32,000 frames and whose file holds 10,652 (cut after writing)."""
    path = Path(crop(real_audio("pocketsphinx", 1)[0], tmp_path / "truncated.wav", 32000))
    with soundfile.SoundFile(path) as sound:
        assert sound.frames == 32000
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - (32000 - 10652) * 2])
    return str(path)


def test_truncated_wav_is_a_line_problem(speech, truncated, tmp_path):
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), source("cut", "s2", truncated)])
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), options(tmp_path / "pack"))
    [problem] = err.value.problems
    assert problem.line == 2 and problem.path == truncated
    assert "truncated" in problem.reason and "32000" in problem.reason and "10652" in problem.reason
    summary = build_wesep(str(listed), options(tmp_path / "kept", skip_bad=True))
    assert list(open_pack(summary.out).keys) == ["a"]


def test_truncated_wav_is_refused_by_probe_and_decode(truncated, speech):
    for read in (probe_audio, read_audio):
        with pytest.raises(AudioError, match="header declares 32000 frames, the file holds 10652"):
            read(truncated)
    assert probe_audio(speech[0]).frames == 8000  # an intact file is untouched


def test_cli_names_the_line_and_both_counts(speech, truncated, tmp_path):
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), source("cut", "s2", truncated)])
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(listed), "--out", str(tmp_path / "p"),
                                       "--no-progress"])
    assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit)
    assert "line 2" in result.output and "32000" in result.output and "10652" in result.output


# --- rates far from the pack's --------------------------------------------------------------------------------


def test_resample_refuses_a_ratio_soxr_must_not_see():
    with pytest.raises(SpeechpackError, match="cannot resample from 1 Hz to 16000000 Hz"):
        resample(Audio(np.zeros((1, 4), np.float32), 1), 16_000_000)


def test_a_header_rate_far_from_the_pack_rate_is_a_line_problem(speech, tmp_path):
    slow = tmp_path / "slow.wav"
    soundfile.write(slow, soundfile.read(speech[1], dtype="int16")[0], 10, subtype="PCM_16")
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), source("b", "s2", str(slow))])
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), options(tmp_path / "pack"))
    [problem] = err.value.problems
    assert problem.line == 2 and "ratio is beyond" in problem.reason


# --- empty after resampling ---------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_empty_after_resampling_is_a_skippable_line_problem(real_audio, speech, tmp_path, workers):
    one = crop(real_audio("alsa", 1)[0], tmp_path / "one-sample-48k.wav", 1)
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), source("tiny", "s2", one),
                                                  source("b", "s3", speech[1])])
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), options(tmp_path / "pack", workers=workers))
    [problem] = err.value.problems
    assert problem.line == 2 and problem.path == one
    assert problem.reason == "empty after resampling: 1 sample(s) at 48000 Hz are 0 at 16000 Hz"
    summary = build_wesep(str(listed), options(tmp_path / "kept", workers=workers, skip_bad=True))
    assert sorted(open_pack(summary.out).keys) == ["a", "b"]
    assert json.loads((tmp_path / "kept" / "skipped.json").read_text())["skipped"][0]["line"] == 2


# --- malformed lines ---------------------------------------------------------------------------------


def test_non_utf8_byte_is_a_problem_of_its_line(speech, tmp_path):
    bad = json.dumps(source("x", "s2", speech[1])).encode().replace(b'"x"', b'"x\xff"')
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), bad, source("b", "s3", speech[2])])
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), options(tmp_path / "pack"))
    [problem] = err.value.problems
    assert problem.line == 2 and problem.reason == "not UTF-8 text (byte 0xff at byte 11 of the line)"
    summary = build_wesep(str(listed), options(tmp_path / "kept", skip_bad=True))
    assert sorted(open_pack(summary.out).keys) == ["a", "b"]


def test_deeply_nested_line_is_a_line_problem(speech, tmp_path):
    deep = b"[" * 100_000 + b"]" * 100_000
    shallow_but_deep = source("c", "s3", speech[2]) | {"extra": json.loads("[" * 40 + "]" * 40)}
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), deep, shallow_but_deep])
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), options(tmp_path / "pack"))
    problems = {p.line: p.reason for p in err.value.problems}
    assert sorted(problems) == [2, 3]
    assert "recursion limit" in problems[2] and "nested more than" in problems[3]


def test_lone_surrogate_key_is_refused_at_parse_time(speech, tmp_path):
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), source("b\ud800", "s2", speech[1]),
                                                  source("c", "s3", speech[2]) | {"note": "\udfff"}])
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), options(tmp_path / "pack"))
    problems = {p.line: p.reason for p in err.value.problems}
    assert sorted(problems) == [2, 3] and all("lone surrogate" in r for r in problems.values())
    summary = build_wesep(str(listed), options(tmp_path / "kept", skip_bad=True))
    assert list(open_pack(summary.out).keys) == ["a"]
    assert [p["line"] for p in json.loads((tmp_path / "kept" / "skipped.json").read_text())["skipped"]] == [2, 3]


def test_asr_jsonl_malformed_lines_are_named(speech, tmp_path):
    good = {"audio_filepath": speech[0], "text": "hello", "language": "en", "corpus": "c"}
    manifest = write_lines(tmp_path / "m.jsonl", [good, b"\xc3\x28", b"{" * 50_000, {**good, "key": "\ud83d"},
                                                   b'{"key": ' + b"1" * 5000 + b"}"])
    result = CliRunner().invoke(main, ["build", "asr-jsonl", "--list", str(manifest), "--out", str(tmp_path / "p"),
                                       "--no-progress"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    for line in (2, 3, 4, 5):
        assert f"line {line}:" in result.output
    result = CliRunner().invoke(main, ["build", "asr-jsonl", "--list", str(manifest), "--out", str(tmp_path / "q"),
                                       "--no-progress", "--skip-bad"])
    assert result.exit_code == 0, result.output
    assert len(open_pack(str(tmp_path / "q"))) == 1


def test_audio_bank_list_with_a_non_utf8_line(speech, tmp_path):
    listed = tmp_path / "bank.list"
    listed.write_bytes(speech[0].encode() + b"\n/x/\xffbad.wav\n" + speech[1].encode() + b"\n")
    with pytest.raises(BuildError) as err:
        build_audio_bank(str(listed), "noise", options(tmp_path / "pack"))
    [problem] = err.value.problems
    assert problem.line == 2 and "not UTF-8" in problem.reason


def test_source_path_with_nul_is_a_problem_of_its_line(speech, tmp_path):
    single = {"key": "c", "wav": speech[2] + "\x00.wav", "spk": "s3"}
    mixture = {"key": "d", "spk": ["s1"], "src": {"s1": [speech[0]]}, "mix": {"default": ["m\x00.wav"]}}
    listed = write_lines(tmp_path / "raw.list", [source("a", "s1", speech[0]), source("b", "s2", "x\x00y.wav"),
                                                  single, mixture])
    with pytest.raises(BuildError) as err:
        build_wesep(str(listed), options(tmp_path / "pack"))
    problems = {p.line: p.reason for p in err.value.problems}
    assert sorted(problems) == [2, 3, 4] and all("NUL byte" in r for r in problems.values())
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(listed), "--out", str(tmp_path / "cli"),
                                       "--skip-bad", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert list(open_pack(str(tmp_path / "cli")).keys) == ["a"]
