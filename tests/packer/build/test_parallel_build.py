"""Builds divided into slices: ``--shards i/n`` array jobs plus ``speechpack finalize`` give the pack one build
gives, byte for byte; finalize refuses missing, corrupted or foreign shards and jobs run with other options; a
shard whose every sample is skipped keeps its planned number.  Real recordings throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.packer.build import shards
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.build.state import PLAN_FILE, RECEIPTS_DIR
from speechpack.packer.build.plan import ShardSlice
from speechpack.packer.validate.pack import validate_packs
from speechpack.schemas.errors import SpeechpackError
import factories.paths
from factories import Mix, mixture_line, pack_files
# The cue split of test_cues_build (real speech, a real talking-face video): its fixture, not a copy.
from factories.cue_split import build_split_pack

#: 0.5 s mixtures of two speakers at 16 kHz: 3 segments x 8000 x 2 bytes = 48 kB a sample, 2 samples a shard.
SHARD_BYTES = "100000"


@pytest.fixture
def corpus(real_audio, wesep_list):
    """Eight real two-speaker mixtures (16 kHz LibriVox, 48 kHz ALSA resampled): four shards of two."""
    ps = real_audio("pocketsphinx", 4)
    alsa = real_audio("alsa", 2)
    items = []
    for i in range(8):
        sources = tuple(alsa) if i % 4 == 3 else (ps[i % 4], ps[(i + 1) % 4])
        items.append(Mix(f"utt{i}", sources, seconds=0.5, start=0.2 + 0.05 * i))
    return wesep_list(items)


def build_cli(list_path, out, *extra) -> object:
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(list_path), "--out", str(out),
                                       "--shard-size", SHARD_BYTES, "--no-progress", *extra])
    return result


def finalize_cli(out, *extra):
    return CliRunner().invoke(main, ["finalize", str(out), "--no-progress", *extra])


def test_slices_then_finalize_equal_one_build(corpus, tmp_path):
    reference, sliced = tmp_path / "one", tmp_path / "sliced"
    assert build_cli(corpus.list_path, reference).exit_code == 0
    for index in (2, 0, 1):  # any order: array jobs finish when they finish
        result = build_cli(corpus.list_path, sliced, "--shards", f"{index}/3")
        assert result.exit_code == 0, result.output
        assert f"slice {index}/3" in result.output and "speechpack finalize" in result.output
        assert not (sliced / "dataset.json").exists()
    assert sorted(os.listdir(sliced / RECEIPTS_DIR)) == [f"shard-{k:06d}.json" for k in range(4)]
    result = finalize_cli(sliced, "--jobs", "3")
    assert result.exit_code == 0, result.output
    assert "packed 8 samples" in result.output
    one, two = pack_files(reference), pack_files(sliced)
    assert sorted(one) == sorted(two)  # build state removed: no .tmp- file left
    for name in one:
        assert one[name] == two[name], f"{name} differs between one build and slices + finalize"
    assert validate_packs([str(sliced)]).ok


@pytest.mark.parametrize("shard_tasks_from", [1, sys.maxsize], ids=["shard-tasks", "streamed"])
def test_two_workers_equal_one_whichever_way_they_split_the_work(corpus, tmp_path, monkeypatch, shard_tasks_from):
    """The local executor runs whole-shard tasks in its pool when there are enough shards, and otherwise streams
    samples to one writer thread: the pack is the same."""
    monkeypatch.setattr(shards, "SHARD_TASKS_FROM", shard_tasks_from)
    assert build_cli(corpus.list_path, tmp_path / "one").exit_code == 0
    result = build_cli(corpus.list_path, tmp_path / "two", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert pack_files(tmp_path / "one") == pack_files(tmp_path / "two")


def test_more_jobs_than_shards(corpus, tmp_path):
    out = tmp_path / "pack"
    for index in range(6):
        assert build_cli(corpus.list_path, out, "--shards", f"{index}/6").exit_code == 0
    assert finalize_cli(out).exit_code == 0
    assert len(json.loads((out / "dataset.json").read_text())["shards"]) == 4


def test_finalize_lists_every_missing_shard(corpus, tmp_path):
    out = tmp_path / "pack"
    assert build_cli(corpus.list_path, out, "--shards", "1/2").exit_code == 0
    result = finalize_cli(out)
    assert result.exit_code == 1
    assert "cannot finalize: 2 problem(s) with the planned 4 shard(s)" in result.output
    assert "shard-000000: missing" in result.output and "shard-000002: missing" in result.output
    assert not (out / "dataset.json").exists()


def test_finalize_detects_a_corrupted_shard_file(corpus, tmp_path):
    out = tmp_path / "pack"
    for index in (0, 1):
        assert build_cli(corpus.list_path, out, "--shards", f"{index}/2").exit_code == 0
    target = out / "shard-000002" / "mix.npy"
    data = bytearray(target.read_bytes())
    data[-100] ^= 0x01
    target.write_bytes(bytes(data))
    result = finalize_cli(out)
    assert result.exit_code == 1
    assert f"{target}: sha256" in result.output and "changed or corrupted" in result.output
    # --no-hash trusts the receipts' hashes: the same flipped bit passes (sizes and indexes still match)
    assert finalize_cli(out, "--no-hash").exit_code == 0


def test_finalize_detects_an_index_that_does_not_match_the_plan(corpus, tmp_path):
    out = tmp_path / "pack"
    for index in (0, 1):
        assert build_cli(corpus.list_path, out, "--shards", f"{index}/2").exit_code == 0
    index_path = out / "shard-000001" / "index.json"
    index_path.write_text(index_path.read_text().replace('"key":"utt2"', '"key":"utt9"'))
    result = finalize_cli(out)
    assert result.exit_code == 1
    assert "key 'utt9'" in result.output and "the plan has line 3 key 'utt2'" in result.output


def test_jobs_with_other_options_are_refused(corpus, tmp_path):
    out = tmp_path / "pack"
    assert build_cli(corpus.list_path, out, "--shards", "0/2").exit_code == 0
    result = build_cli(corpus.list_path, out, "--shards", "1/2", "--sample-rate", "8000")
    assert result.exit_code == 1
    assert "plan differs" in result.output
    assert '"sample_rate": 16000' in result.output and '"sample_rate": 8000' in result.output


def test_finalize_detects_a_shard_from_another_plan(corpus, tmp_path):
    """Two jobs that raced past the plan check with different options: the receipt names the other plan."""
    out, other = tmp_path / "pack", tmp_path / "other"
    assert build_cli(corpus.list_path, out, "--shards", "0/2").exit_code == 0
    assert build_cli(corpus.list_path, other, "--shards", "1/2", "--skip-bad").exit_code == 0
    for k in (1, 3):
        os.replace(other / f"shard-{k:06d}", out / f"shard-{k:06d}")
        os.replace(other / RECEIPTS_DIR / f"shard-{k:06d}.json", out / RECEIPTS_DIR / f"shard-{k:06d}.json")
    result = finalize_cli(out)
    assert result.exit_code == 1
    assert "written for another plan" in result.output and "shard-000001" in result.output


def test_finalize_needs_a_build_in_progress(corpus, tmp_path):
    out = tmp_path / "pack"
    assert build_cli(corpus.list_path, out).exit_code == 0
    result = finalize_cli(out)
    assert result.exit_code == 1 and f"no {PLAN_FILE}" in result.output


@pytest.mark.parametrize("value, message", [("2/2", "need 0 <= i < n"), ("1", "expected i/n"), ("a/b", "expected i/n"),
                                            ("1/99999999999", "at most 1048576"),
                                            ("0/" + "9" * 5000, "at most 1048576")])
def test_bad_shards_values_are_usage_errors(corpus, tmp_path, value, message):
    result = build_cli(corpus.list_path, tmp_path / "pack", "--shards", value)
    assert result.exit_code == 2 and message in result.output


def test_shards_and_overwrite_do_not_mix(corpus, tmp_path):
    result = build_cli(corpus.list_path, tmp_path / "pack", "--shards", "0/2", "--overwrite")
    assert result.exit_code == 1 and "each array job would delete the others' shards" in result.output


def test_slice_selection_is_round_robin():
    assert ShardSlice.parse("1/3").select(8) == [1, 4, 7]
    assert ShardSlice.parse(" 0/1 ").select(3) == [0, 1, 2]
    assert ShardSlice(5, 6).select(4) == []
    with pytest.raises(SpeechpackError, match="need 0 <= i < n"):
        ShardSlice(0, 0)


def test_slice_count_is_at_most_the_largest_array():
    assert ShardSlice.parse("0/1048576").select(2) == [0]
    for text in ("0/1048577", "1/99999999999", "1/" + "9" * 5000, "9" * 5000 + "/3"):
        with pytest.raises(SpeechpackError, match="--shards"):
            ShardSlice.parse(text)


@pytest.fixture
def corpus_with_bad_lines(real_audio, wesep_list, make_wav, tmp_path):
    """The corpus plus a line whose file is missing (found while planning) and one holding NaN (found only when
    decoding), in different shards."""
    case = wesep_list([Mix(f"utt{i}", tuple(real_audio("pocketsphinx", 2)), seconds=0.5, start=0.2 + 0.1 * i)
                       for i in range(6)])
    good = case.lines[0].record
    nan = make_wav("nan.wav", subtype="FLOAT", data=np.where(np.arange(8000) == 4000, np.nan, 0.1).astype(np.float32))
    lines = [json.dumps(line.record) for line in case.lines]
    lines.insert(1, json.dumps(mixture_line("missing", [str(tmp_path / "nowhere.wav")], good["src"])))
    lines.insert(5, json.dumps(mixture_line("nan", [nan], {name: [nan] for name in good["src"]})))
    case.list_path.write_text("\n".join(lines) + "\n")
    return case.list_path


def test_skipped_lines_travel_through_receipts(corpus_with_bad_lines, tmp_path):
    reference, sliced = tmp_path / "one", tmp_path / "sliced"
    assert build_cli(corpus_with_bad_lines, reference, "--skip-bad").exit_code == 0
    skipped = json.loads((reference / "skipped.json").read_text())["skipped"]
    assert [(p["line"], p["key"]) for p in skipped] == [(2, "missing"), (6, "nan")]
    for index in (0, 1):
        assert build_cli(corpus_with_bad_lines, sliced, "--skip-bad", "--shards", f"{index}/2").exit_code == 0
    assert finalize_cli(sliced).exit_code == 0
    assert pack_files(reference) == pack_files(sliced)


def test_slice_without_skip_bad_fails_on_its_own_bad_lines(corpus_with_bad_lines, tmp_path):
    result = build_cli(corpus_with_bad_lines, tmp_path / "pack", "--shards", "0/2")
    assert result.exit_code == 1
    assert "line 2: key 'missing'" in result.output and "nothing was packed" in result.output


def test_a_shard_whose_every_sample_is_skipped_keeps_its_number(real_audio, wesep_list, make_wav, tmp_path):
    """Shard names come from the plan, not from what earlier shards held: an all-bad shard is written empty, so
    any process can write any shard.  The pack validates and opens."""
    from speechpack.loader.pack import open_pack

    ps = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix(f"utt{i}", tuple(ps), seconds=0.5, start=0.2 + 0.1 * i) for i in range(2)])
    nan = make_wav("nan.wav", subtype="FLOAT", data=np.where(np.arange(8000) == 4000, np.nan, 0.1).astype(np.float32))
    lines = [json.dumps(line.record) for line in case.lines]
    lines.insert(1, json.dumps(mixture_line("nan", [nan], {name: [nan] for name in case.lines[0].record["src"]})))
    case.list_path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "pack"
    summary = build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=48_000, skip_bad=True,
                                                           progress=False))
    assert [s.samples for s in summary.manifest.shards] == [1, 0, 1]
    assert validate_packs([str(out)]).ok
    pack = open_pack(out)
    assert len(pack) == 2 and list(pack.shard) == [0, 2]


def test_cues_are_built_by_slice_zero_and_checked_by_finalize(tse_split, tmp_path):
    reference, sliced = tmp_path / "one", tmp_path / "sliced"
    build_split_pack(tse_split, reference, shard_bytes=100_000)
    assert len(json.loads((reference / "dataset.json").read_text())["shards"]) > 1
    summary = build_split_pack(tse_split, sliced, shard_bytes=100_000, shards=ShardSlice(1, 2))
    assert summary.manifest is None and not (sliced / "cues").exists()
    result = finalize_cli(sliced)
    assert result.exit_code == 1 and "cues: missing or without a receipt" in result.output
    build_split_pack(tse_split, sliced, shard_bytes=100_000, shards=ShardSlice(0, 2))
    cue_file = next(p for p in sorted((sliced / "cues").rglob("*.npy")))
    original = cue_file.read_bytes()
    cue_file.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    result = finalize_cli(sliced)
    assert result.exit_code == 1 and f"{cue_file}: sha256 differs from its receipt" in result.output
    cue_file.write_bytes(original)
    assert finalize_cli(sliced).exit_code == 0
    assert pack_files(sliced) == pack_files(reference)


def test_array_jobs_running_at_the_same_time(corpus, tmp_path):
    """Two jobs started together race to create the directory and to record the plan: one records it, the other
    checks against it, and finalize gives the one-build pack."""
    reference, out = tmp_path / "one", tmp_path / "sliced"
    assert build_cli(corpus.list_path, reference).exit_code == 0
    repo = str(factories.paths.REPO)
    jobs = [subprocess.Popen([sys.executable, "-m", "speechpack.cli", "build", "wesep", "--list", str(corpus.list_path),
                              "--out", str(out), "--shard-size", SHARD_BYTES, "--no-progress", "--shards", f"{i}/2"],
                             cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    for job in jobs:
        stdout, stderr = job.communicate(timeout=60)
        assert job.returncode == 0, stderr
    assert finalize_cli(out).exit_code == 0
    assert pack_files(out) == pack_files(reference)


def test_asr_slices_then_finalize_equal_one_build(tmp_path):
    """An asr pack's extra totals (hours_by_corpus, char_counts) come out of finalize as out of one build: they are
    gathered from the shards on disk, never from decoded samples."""
    from factories.asr import librivox_clips, write_jsonl_manifest

    clips = librivox_clips()
    manifest = write_jsonl_manifest(tmp_path / "train.jsonl", [
        {"audio_filepath": clip.path, "text": clip.text, "language": "en" if i % 2 else "fr",
         "corpus": "librivox" if i < 3 else "austen"} for i, clip in enumerate(clips)])

    def build(out, *extra):
        result = CliRunner().invoke(main, ["build", "asr-jsonl", "--list", str(manifest), "--out", str(out),
                                           "--shard-size", "150000", "--no-progress", *extra])
        assert result.exit_code == 0, result.output

    build(tmp_path / "one")
    for index in (1, 0):
        build(tmp_path / "sliced", "--shards", f"{index}/2")
    assert finalize_cli(tmp_path / "sliced").exit_code == 0
    reference = json.loads((tmp_path / "one" / "dataset.json").read_text())
    assert len(reference["shards"]) > 2 and set(reference["hours_by_corpus"]) == {"librivox", "austen"}
    assert pack_files(tmp_path / "sliced") == pack_files(tmp_path / "one")


def test_asd_slices_then_finalize_equal_one_build(tmp_path):
    """The scale options reach the asd builds too (their own options class hands them to run_build): AVCC
    tracks cut from a real talking-face video, in slices, then finalize."""
    from factories.asd_inputs import write_avcc

    inputs = write_avcc(tmp_path / "AVCC")

    def build(out, *extra):
        result = CliRunner().invoke(main, ["build", "avcc", "--loader", str(inputs.tsv), "--root", str(inputs.root),
                                           "--out", str(out), "--shard-size", "40kB", "--no-progress", *extra])
        assert result.exit_code == 0, result.output

    build(tmp_path / "one")
    for index in (0, 1):
        build(tmp_path / "sliced", "--shards", f"{index}/2")
    assert finalize_cli(tmp_path / "sliced").exit_code == 0
    assert len(json.loads((tmp_path / "one" / "dataset.json").read_text())["shards"]) > 1
    assert pack_files(tmp_path / "sliced") == pack_files(tmp_path / "one")
