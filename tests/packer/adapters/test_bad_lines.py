"""Bad input to ``speechpack build wesep``: every offending line reported in one pass, nothing published; or, with
``--skip-bad``, the rest packed and the skipped lines recorded in the pack.  Also: a build that dies midway leaves
no ``dataset.json``.

Audio is generated (``make_wav``), so these tests need no Debian package.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from speechpack.cli import main
from factories import mixture_line, source_line
from speechpack.loader import open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.build.writer import PackWriter
from speechpack.schemas.errors import BuildError, SpeechpackError

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")


def options(out: Path, **kwargs) -> BuildOptions:
    kwargs.setdefault("progress", False)
    return BuildOptions(out=str(out), **kwargs)


def assert_only_what_resume_keeps(out: Path) -> list[str]:
    """A build that failed for any reason but bad input keeps its plan, its receipts and the shards they
    vouch for (a rerun resumes from them), and nothing else: no manifest, no temporary debris."""
    left = sorted(os.listdir(out))
    shards = [name for name in left if name.startswith("shard-")]
    assert set(left) - set(shards) <= {".tmp-plan.json", ".tmp-receipts"}, left
    receipts = sorted(os.listdir(out / ".tmp-receipts")) if shards else []
    assert receipts == [f"{name}.json" for name in shards]
    return shards


def assert_nothing_published(out: Path) -> None:
    """No manifest, no shard and no temporary debris; the directory itself may be gone."""
    if not out.exists():
        return
    left = sorted(os.listdir(out))
    assert "dataset.json" not in left
    assert not [name for name in left if name.startswith(("shard-", ".tmp-")) or name == "skipped.json"], left


def problems_by_line(problems) -> dict[int, object]:
    lines = [p.line for p in problems]
    assert lines == sorted(lines), "problems are reported in line order"
    assert len(set(lines)) == len(lines), f"one problem per line, got {lines}"
    return {p.line: p for p in problems}


# ---------------------------------------------------------------------------------------------------------------
# A mixture list with one bad line of every kind
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def bad_tse_list(make_wav, write_list, tmp_path):
    """A ``tse`` list: good lines 1 and 14, a bad line of every kind around them.

    Returns ``(list_path, expected)`` where ``expected`` maps each bad line number to (key, path, reason part).
    """
    mix = make_wav("mix.wav", kind="noise", amplitude=0.3)
    s1 = make_wav("s1.wav", freq=300)
    s2 = make_wav("s2.wav", freq=520, amplitude=0.3)
    missing = str(tmp_path / "nowhere" / "missing.wav")
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk" + bytes(range(256)) * 4)
    corrupt_m4a = tmp_path / "corrupt.m4a"  # an extension libsndfile does not read: decoded through PyAV
    corrupt_m4a.write_bytes(b"\x00\x00\x00\x18ftypM4A " + os.urandom(64))
    mix_8k = make_wav("mix8k.wav", rate=8000)
    s1_short = make_wav("s1short.wav", seconds=0.4)
    s2_8k = make_wav("s2_8k.wav", rate=8000, seconds=1.0)  # same 8000 frames as the mixture, at another rate
    nan = make_wav("nan.wav", subtype="FLOAT",
                   data=np.where(np.arange(8000) == 4000, np.nan, 0.1).astype(np.float32))
    inf = make_wav("inf.wav", subtype="DOUBLE", data=np.where(np.arange(8000) == 7, np.inf, -0.1))
    empty = make_wav("empty.wav", seconds=0)
    src = {"a": [s1], "b": [s2]}
    lines = [
        mixture_line("ok1", [mix], src),  # 1
        mixture_line("missing", [mix], {"a": [missing], "b": [s2]}),  # 2
        mixture_line("corrupt", [str(corrupt)], src),  # 3
        '{"key": "broken", "spk": ["a"',  # 4 not JSON
        "",  # 5 blank: ignored but counted
        mixture_line("ok1", [mix], src),  # 6 duplicate key
        mixture_line("nosrc", [mix], {"a": [s1]}, spk=["a", "b"]),  # 7
        mixture_line("rate", [mix, mix_8k], src),  # 8 mixture files at 16 and 8 kHz
        mixture_line("length", [mix], {"a": [s1_short], "b": [s2]}),  # 9
        mixture_line("nan", [mix], {"a": [s1], "b": [nan]}),  # 10
        mixture_line("inf", [inf], src),  # 11
        mixture_line("empty", [mix], {"a": [empty], "b": [s2]}),  # 12
        mixture_line("m4a", [str(corrupt_m4a)], src),  # 13
        mixture_line("ok2", [mix], {"b": [s2], "a": [s1]}, spk=["b", "a"]),  # 14
        source_line("lonely", "a", s1),  # 15 a sources line in a tse list
        mixture_line("srcrate", [mix], {"a": [s1], "b": [s2_8k]}),  # 16
        mixture_line("directory", [str(tmp_path)], src),  # 17
    ]
    expected = {
        2: ("missing", missing, "file not found"),
        3: ("corrupt", str(corrupt), "cannot decode audio"),
        4: (None, None, "not valid JSON"),
        6: ("ok1", None, "duplicate key (first on line 1)"),
        7: ("nosrc", None, "speaker 'b' in 'spk' has no entry in 'src'"),
        8: ("rate", mix_8k, "mixture file sample rate 8000 Hz differs from the mixture's 16000 Hz"),
        9: ("length", s1_short, "source length 6400 samples differs from the mixture's 8000"),
        10: ("nan", nan, "1 NaN/Inf value(s)"),
        11: ("inf", inf, "1 NaN/Inf value(s)"),
        12: ("empty", empty, "empty audio (0 samples)"),
        13: ("m4a", str(corrupt_m4a), "cannot decode audio"),
        15: ("lonely", None, "a sources line in a list of tse lines"),
        16: ("srcrate", s2_8k, "source sample rate 8000 Hz differs from the mixture's 16000 Hz"),
        17: ("directory", str(tmp_path), "not a regular file"),
    }
    return write_list(lines), expected


def test_a_line_that_is_not_json_is_named_by_its_number_alone(tmp_path):
    """No key to show (``key None`` said nothing): the line number and the reason."""
    list_path = tmp_path / "raw.list"
    first = json.dumps(source_line("first", "a", str(tmp_path / "a.wav")))  # a JSON first line: a WeSep raw list
    list_path.write_text(first + '\nthis is not json\n{"key": "x", "spk"\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(list_path), "--out", str(tmp_path / "pack"),
                                       "--no-progress"])
    assert result.exit_code == 1
    assert "  line 2: not valid JSON (" in result.output and "  line 3: not valid JSON (" in result.output
    assert "key None" not in result.output


@pytest.mark.parametrize("workers", [1, 2])
def test_every_bad_line_reported_in_one_pass(bad_tse_list, tmp_path, workers):
    list_path, expected = bad_tse_list
    out = tmp_path / "pack"
    with pytest.raises(BuildError, match=r"14 bad line\(s\); nothing was packed") as caught:
        build_wesep(str(list_path), options(out, workers=workers))
    found = problems_by_line(caught.value.problems)
    assert sorted(found) == sorted(expected)  # every bad line, and no good one
    for line, (key, path, reason) in expected.items():
        problem = found[line]
        assert problem.key == key, line
        assert problem.path == path, line
        assert reason in problem.reason, (line, problem.reason)
    assert_nothing_published(out)
    assert not out.exists()  # the build created it, so the failed build removed it


def test_cli_reports_every_bad_line_on_stderr(bad_tse_list, tmp_path):
    list_path, expected = bad_tse_list
    out = tmp_path / "pack"
    out.mkdir()  # an existing empty directory stays, empty
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(list_path), "--out", str(out),
                                       "--no-progress"])
    assert result.exit_code == 1, result.output
    assert "14 bad line(s)" in result.stderr and "--skip-bad" in result.stderr
    assert result.stdout == ""
    for line, (key, path, reason) in expected.items():
        (reported,) = [text for text in result.stderr.splitlines() if text.strip().startswith(f"line {line}:")]
        assert (f"key {key!r}" in reported) if key is not None else "key" not in reported  # not JSON: no key
        if path is not None:
            assert path in reported
        assert reason in reported
    assert "line 1:" not in result.stderr and "line 14:" not in result.stderr
    assert os.listdir(out) == []


@pytest.fixture
def bad_sources_list(make_wav, write_list, tmp_path):
    """A ``sources`` list (single-speaker lines) with its own kinds of bad line."""
    good = [make_wav(f"good{i}.wav", freq=200 + 100 * i) for i in range(3)]
    stereo = make_wav("stereo.wav", channels=2)
    nan = make_wav("nan.wav", subtype="FLOAT", data=np.full(800, np.nan, dtype=np.float32))
    empty = make_wav("empty.wav", seconds=0)
    missing = str(tmp_path / "missing.wav")
    lines = [
        source_line("g0", "s0", good[0]),  # 1
        source_line("stereo", "s1", stereo),  # 2
        source_line("g1", "s1", good[1]),  # 3
        source_line("nan", "s2", nan),  # 4
        source_line("empty", "s3", empty),  # 5
        source_line("missing", "s4", missing),  # 6
        {"key": "two", "spk": ["s0", "s1"], "src": {"s0": [good[0]], "s1": [good[1]]}},  # 7 no mix, 2 speakers
        {"key": "twofiles", "spk": ["s0"], "src": {"s0": [good[0], good[1]]}},  # 8 no mix, 2 files
        mixture_line("mixture", [good[0]], {"s0": [good[1]]}),  # 9 a tse line in a sources list
        source_line("g2", "s2", good[2]),  # 10
    ]
    expected = {
        2: ("stereo", stereo, "a single-speaker source must be mono, got 2 channels"),
        4: ("nan", nan, "800 NaN/Inf value(s)"),
        5: ("empty", empty, "empty audio (0 samples)"),
        6: ("missing", missing, "file not found"),
        7: ("two", None, "needs exactly one speaker, got 2"),
        8: ("twofiles", None, "needs exactly one file in 'src.s0', got 2"),
        9: ("mixture", None, "a tse line in a list of sources lines"),
    }
    return write_list(lines, name="sources.list"), expected


def test_sources_list_bad_lines(bad_sources_list, tmp_path):
    list_path, expected = bad_sources_list
    out = tmp_path / "pack"
    with pytest.raises(BuildError) as caught:
        build_wesep(str(list_path), options(out))
    found = problems_by_line(caught.value.problems)
    assert sorted(found) == sorted(expected)
    for line, (key, path, reason) in expected.items():
        assert (found[line].key, found[line].path) == (key, path), line
        assert reason in found[line].reason, (line, found[line].reason)
    assert_nothing_published(out)


# ---------------------------------------------------------------------------------------------------------------
# --skip-bad
# ---------------------------------------------------------------------------------------------------------------


def test_skip_bad_packs_the_rest_and_records_what_it_skipped(bad_tse_list, tmp_path):
    list_path, expected = bad_tse_list
    out = tmp_path / "pack"
    summary = build_wesep(str(list_path), options(out, skip_bad=True))
    assert [p.line for p in summary.skipped] == sorted(expected)
    pack = open_pack(out)
    assert [pack.sample(i).key for i in range(len(pack))] == ["ok1", "ok2"]
    assert pack.speakers_of(1) == ("b", "a")
    skipped_bytes = (out / "skipped.json").read_bytes()
    skipped = json.loads(skipped_bytes)["skipped"]
    assert [entry["line"] for entry in skipped] == sorted(expected)
    for entry in skipped:
        assert set(entry) == {"line", "key", "path", "reason"}
        key, path, reason = expected[entry["line"]]
        assert (entry["key"], entry["path"]) == (key, path)
        assert reason in entry["reason"]
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["skipped"] == {
        "count": len(expected),
        "file": {"name": "skipped.json", "size": len(skipped_bytes),
                 "sha256": hashlib.sha256(skipped_bytes).hexdigest()},
    }
    assert manifest["provenance"]["options"]["skip_bad"] is True
    assert manifest["totals"]["samples"] == 2
    assert "skipped 14 bad line(s)" in summary.describe()


def test_cli_skip_bad_summary_says_how_many(bad_sources_list, tmp_path):
    list_path, expected = bad_sources_list
    out = tmp_path / "pack"
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(list_path), "--out", str(out),
                                       "--skip-bad", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "packed 3 samples" in result.stdout
    assert f"skipped {len(expected)} bad line(s); see {out / 'skipped.json'}" in result.stdout
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["kind"] == "sources"
    assert manifest["skipped"]["count"] == len(expected)
    assert [e["key"] for e in json.loads((out / "skipped.json").read_text())["skipped"]] == \
        [expected[line][0] for line in sorted(expected)]


def test_skip_bad_with_nothing_good_publishes_nothing(make_wav, write_list, tmp_path):
    list_path = write_list([source_line("a", "s", str(tmp_path / "missing.wav")), "[1, 2]"])
    out = tmp_path / "pack"
    with pytest.raises(BuildError, match="every line was bad") as caught:
        build_wesep(str(list_path), options(out, skip_bad=True))
    assert [(p.line, p.key) for p in caught.value.problems] == [(1, "a"), (2, None)]
    assert "expected a JSON object, got list" in caught.value.problems[1].reason
    assert_nothing_published(out)


def test_empty_or_absent_list_is_refused(write_list, tmp_path):
    with pytest.raises(SpeechpackError, match="holds no samples"):
        build_wesep(str(write_list(["", "   "])), options(tmp_path / "pack"))
    with pytest.raises(SpeechpackError, match="list file not found"):
        build_wesep(str(tmp_path / "absent.list"), options(tmp_path / "pack"))
    assert not (tmp_path / "pack").exists()
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(tmp_path / "absent.list"), "--out",
                                       str(tmp_path / "pack")])
    assert result.exit_code == 1 and "list file not found" in result.stderr


# ---------------------------------------------------------------------------------------------------------------
# Interrupted builds
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def good_list(make_wav, write_list):
    lines = []
    for i in range(4):
        mix = make_wav(f"mix{i}.wav", kind="noise", seed=i, amplitude=0.2)
        lines.append(mixture_line(f"k{i}", [mix], {"a": [make_wav(f"a{i}.wav", freq=300 + i)],
                                                    "b": [make_wav(f"b{i}.wav", freq=700 + i)]}))
    return write_list(lines, name="good.list")


@pytest.mark.parametrize("error", [RuntimeError("disk on fire"), KeyboardInterrupt()])
@pytest.mark.parametrize("fail_at", [2, 3])
@pytest.mark.parametrize("existing_out", [False, True])
def test_exception_mid_build_leaves_no_dataset_json(good_list, tmp_path, monkeypatch, error, fail_at, existing_out):
    out = tmp_path / "pack"
    if existing_out:
        out.mkdir()
    original_add = PackWriter.add
    calls = []

    def add_then_fail(self, sample):
        calls.append(sample.key)
        if len(calls) == fail_at:
            # One sample per shard, planned up front: a shard is published as soon as its last sample is written.
            written = sorted(n for n in os.listdir(out) if n.startswith("shard-"))
            assert written == [f"shard-{i:06d}" for i in range(fail_at - 1)]
            raise error
        original_add(self, sample)

    monkeypatch.setattr(PackWriter, "add", add_then_fail)
    # 0.5 s x 16 kHz x 3 segments x 2 bytes = 48 kB per sample; a 50 kB shard holds one.
    with pytest.raises(type(error)):
        build_wesep(str(good_list), options(out, shard_bytes=50_000))
    assert len(calls) == fail_at
    assert not (out / "dataset.json").exists()
    assert assert_only_what_resume_keeps(out) == [f"shard-{i:06d}" for i in range(fail_at - 1)]


def test_failure_while_committing_leaves_no_dataset_json(good_list, tmp_path, monkeypatch):
    import speechpack.packer.build.writer
    from speechpack import packer
    original = packer.build.writer.write_json_atomic

    def fail_on_manifest(path, obj):
        if os.path.basename(path) == "dataset.json":
            raise OSError(28, "No space left on device")
        original(path, obj)

    monkeypatch.setattr(packer.build.writer, "write_json_atomic", fail_on_manifest)
    out = tmp_path / "pack"
    with pytest.raises(SpeechpackError, match="No space left on device .*run the same command again to resume"):
        build_wesep(str(good_list), options(out))
    assert not (out / "dataset.json").exists()
    assert assert_only_what_resume_keeps(out)


def test_failed_build_over_an_old_pack_leaves_no_half_pack(good_list, bad_tse_list, tmp_path):
    out = tmp_path / "pack"
    build_wesep(str(good_list), options(out))
    assert len(open_pack(out)) == 4
    list_path, _ = bad_tse_list
    with pytest.raises(BuildError):
        build_wesep(str(list_path), options(out, overwrite=True))
    assert_nothing_published(out)
    with pytest.raises(SpeechpackError, match="not a pack"):
        open_pack(out)


def _nan_mixture_list(make_wav, write_list):
    """Five mixtures of one shard; the third mixture's float mixture file holds a NaN (found only by decoding)."""
    lines = []
    for i in range(5):
        if i == 2:
            data = np.full(8000, 0.1, dtype=np.float32)
            data[4000] = np.nan
            mix = make_wav(f"nanmix{i}.wav", subtype="FLOAT", data=data)
        else:
            mix = make_wav(f"okmix{i}.wav", kind="noise", seed=i, amplitude=0.2)
        lines.append(mixture_line(f"k{i}", [mix], {"a": [make_wav(f"okA{i}.wav", freq=200 + i)]}))
    return write_list(lines, name="nan.list")


def test_skip_bad_after_decoding_shortens_the_planned_shard(make_wav, write_list, tmp_path):
    """A sample planned into a shard but failing to decode is left out; the shard's files still verify."""
    from speechpack.packer.validate.pack import validate_pack

    out = tmp_path / "pack"
    summary = build_wesep(str(_nan_mixture_list(make_wav, write_list)), options(out, skip_bad=True))
    assert [p.key for p in summary.skipped] == ["k2"] and "NaN" in summary.skipped[0].reason
    pack = open_pack(str(out))
    assert list(pack.keys) == ["k0", "k1", "k3", "k4"] and len(pack.manifest.shards) == 1
    report = validate_pack(str(out))
    assert report.ok, report.describe()
    mix = np.load(out / "shard-000000" / "mix.npy", mmap_mode="r")
    assert mix.shape == (4 * 8000,)


def test_a_header_that_disagrees_with_the_decoded_audio_is_reported(make_wav, write_list, tmp_path, monkeypatch):
    import speechpack.packer.adapters.wesep_lines as wesep_lines
    from speechpack.packer.audio import AudioInfo

    path = make_wav("liar.wav", seconds=0.5)
    real_probe = wesep_lines.probe_audio

    def lying_probe(p):
        info = real_probe(p)
        return AudioInfo(info.sample_rate, info.frames + 10, info.channels, info.pcm16) if p == path else info

    monkeypatch.setattr(wesep_lines, "probe_audio", lying_probe)
    lst = write_list([source_line("s1", "a", path), source_line("s2", "b", make_wav("fine.wav"))])
    with pytest.raises(BuildError) as caught:
        build_wesep(str(lst), options(tmp_path / "pack"))
    (problem,) = caught.value.problems
    assert problem.key == "s1" and "headers promised 8010" in problem.reason
