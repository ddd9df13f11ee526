"""``speechpack convert``: a pack written again from the pack alone, with a build's guarantees (atomic, resumable
after a kill, the same bytes for any ``--workers``, nothing of the user's deleted) and its provenance naming the
source.  Real recordings throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import factories.paths
from factories import pack_files
from speechpack.cli import main
from speechpack.loader.pack import open_pack
from speechpack.packer.build.state import KILL_AT_ENV, PLAN_FILE

REPO = str(factories.paths.REPO)
#: As tests/packer/build/test_resume.py: two 0.5 s two-speaker samples per shard, three shards.
SHARD_BYTES = "100000"


def stream_and_index_files(root: Path) -> dict[str, bytes]:
    """Every file of the pack but ``dataset.json`` (whose provenance names the command that wrote it)."""
    return {rel: data for rel, data in pack_files(root).items() if rel != "dataset.json"}


def build(list_path, out: Path, *extra: str) -> Path:
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(list_path), "--out", str(out),
                                       "--shard-size", SHARD_BYTES, "--no-progress", *extra])
    assert result.exit_code == 0, result.output
    return out


def convert(source: Path, out: Path, *extra: str, expect: int = 0):
    result = CliRunner().invoke(main, ["convert", str(source), "--out", str(out), "--no-progress", *extra])
    assert result.exit_code == expect, result.output
    return result


def run_convert(source, out, *extra, kill_at: str | None = None) -> subprocess.CompletedProcess:
    """``speechpack convert`` in a fresh process (``kill_at``: the checkpoint where it SIGKILLs itself)."""
    env = dict(os.environ)
    env.pop(KILL_AT_ENV, None)
    if kill_at is not None:
        env[KILL_AT_ENV] = kill_at
    return subprocess.run([sys.executable, "-m", "speechpack.cli", "convert", str(source), "--out", str(out),
                           "--no-progress", *extra], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def source(six_line_corpus, tmp_path) -> Path:
    """A tse pack of six real lines in three shards."""
    return build(six_line_corpus.list_path, tmp_path / "source")


def test_pcm16_convert_keeps_every_shard_file_index_record_and_column(source, tmp_path):
    out = tmp_path / "converted"
    result = convert(source, out, "--codec", "pcm16", "--no-digests")
    assert "packed 6 samples" in result.output
    assert stream_and_index_files(out) == stream_and_index_files(source)
    pack = open_pack(out)
    reference = open_pack(source)
    for index in range(len(reference)):
        assert np.array_equal(pack.sample(index).targets, reference.sample(index).targets)


def test_provenance_names_the_source_manifest_hash_and_the_options(source, tmp_path):
    out = tmp_path / "converted"
    convert(source, out, "--codec", "pcm16", "--no-digests")
    provenance = json.loads((out / "dataset.json").read_text())["provenance"]
    reference = json.loads((source / "dataset.json").read_text())
    assert provenance["command"] == "convert"
    assert provenance["input"]["path"] == str(source)
    assert provenance["input"]["sha256"] == open_pack(source).opened.manifest_sha256
    assert provenance["options"]["codec"] == "pcm16"
    assert provenance["options"]["digests"] is False
    assert provenance["options"]["source_provenance"] == reference["provenance"]


def test_convert_gives_the_same_bytes_for_any_number_of_workers(source, tmp_path):
    one, three = tmp_path / "one", tmp_path / "three"
    convert(source, one, "--codec", "pcm16", "--workers", "1")
    convert(source, three, "--codec", "pcm16", "--workers", "3")
    assert pack_files(one) == pack_files(three)


@pytest.mark.parametrize("codec, kill_at", [
    *(("pcm16", point) for point in ("sample:utt0", "sample:utt3", "shard:1", "receipt:1", "columns", "manifest")),
    ("flac", "sample:utt3"), ("flac", "receipt:1"), ("flac", "columns"),
])
def test_killed_convert_run_again_gives_the_uninterrupted_bytes(source, tmp_path, codec, kill_at):
    reference = tmp_path / "reference"
    assert run_convert(source, reference, "--codec", codec).returncode == 0
    out = tmp_path / "converted"
    killed = run_convert(source, out, "--codec", codec, kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (out / PLAN_FILE).exists()
    if kill_at != "manifest":
        with pytest.raises(Exception):
            open_pack(out)  # nothing half-written looks complete
    resumed = run_convert(source, out, "--codec", codec)
    assert resumed.returncode == 0, resumed.stderr
    assert pack_files(out) == pack_files(reference)


def test_convert_into_a_directory_holding_the_users_files_is_refused_and_deletes_nothing(source, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = convert(source, out, "--codec", "pcm16", expect=1)
    assert "notes.txt" in result.output
    assert sorted(os.listdir(out)) == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me"
    result = convert(source, out, "--codec", "pcm16", "--overwrite", expect=1)
    assert (out / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("where", ["same", "inside"])
def test_convert_never_writes_into_its_source(source, tmp_path, where):
    before = pack_files(source)
    out = source if where == "same" else source / "converted"
    result = convert(source, out, "--codec", "pcm16", "--overwrite", expect=1)
    assert "source pack" in result.output
    assert pack_files(source) == before


def test_a_finished_pack_in_out_is_replaced_only_with_overwrite(source, tmp_path):
    out = tmp_path / "converted"
    convert(source, out, "--codec", "flac")
    result = convert(source, out, "--codec", "pcm16", "--no-digests", expect=1)
    assert "--overwrite" in result.output
    convert(source, out, "--codec", "pcm16", "--no-digests", "--overwrite")
    assert stream_and_index_files(out) == stream_and_index_files(source)


def test_a_corrupt_source_stream_file_fails_the_convert_and_leaves_no_pack(source, tmp_path):
    target = source / "shard-000001" / "target.npy"
    data = bytearray(target.read_bytes())
    data[-3] ^= 0xFF
    target.write_bytes(bytes(data))
    out = tmp_path / "converted"
    result = convert(source, out, "--codec", "pcm16", expect=1)
    assert "target.npy" in result.output
    assert not (out / "dataset.json").exists()


def test_a_second_convert_in_the_same_process_checks_the_source_again(source, tmp_path):
    """The worker's open source is the run's own: a stream file corrupted after a first convert in the same process
    (a library user converting twice) fails the second one, naming the file."""
    convert(source, tmp_path / "first", "--codec", "flac")
    target = source / "shard-000001" / "target.npy"
    data = bytearray(target.read_bytes())
    data[-3] ^= 0xFF
    target.write_bytes(bytes(data))
    result = convert(source, tmp_path / "second", "--codec", "flac", expect=1)
    assert "target.npy" in result.output
    assert not (tmp_path / "second" / "dataset.json").exists()


def test_options_that_do_not_go_together_are_usage_errors(source, tmp_path):
    result = convert(source, tmp_path / "o", "--codec", "pcm16", "--opus-bitrate", "24000", expect=2)
    assert "--opus-bitrate" in result.output


def test_cue_banks_are_carried_into_the_converted_pack_their_enrollment_audio_re_encoded(tse_split, tmp_path):
    """Every bank goes along; the waveform bank's audio is stored with the convert's codec (its enrollments read
    back bit for bit from FLAC), the other banks' files are the source's; pcm16 -> flac -> pcm16 gives back the
    source's cues byte for byte."""
    from factories.cue_split import build_split_pack

    source = tmp_path / "cued"
    build_split_pack(tse_split, source)
    flac, out = tmp_path / "flac", tmp_path / "converted"
    convert(source, flac, "--codec", "flac", "--block-seconds", "0.25")
    compressed, reference = open_pack(flac), open_pack(source)
    assert compressed.cues["audio"].codec == "flac" and reference.cues["audio"].codec == "pcm16"
    bank, want = compressed.cues["audio"], reference.cues["audio"]
    for item in range(want.num_items):
        assert np.array_equal(bank.read(item), want.read(item))
    for name, entry in reference.manifest.cues.items():
        if not name.startswith("audio/") or name.endswith(("lookup_keys.npy", "entries.npy", "sources.json")):
            assert compressed.manifest.cues[name] == entry, name
    assert {"audio/blocks.npy", "audio/digests.npy"} <= set(compressed.manifest.cues)
    assert (flac / "cues/audio/data.npy").stat().st_size < (source / "cues/audio/data.npy").stat().st_size
    convert(flac, out, "--codec", "pcm16", "--no-digests")
    assert stream_and_index_files(out) == stream_and_index_files(source)
    converted = open_pack(out)
    assert sorted(converted.cues) == sorted(reference.cues)
    assert converted.manifest.cues == reference.manifest.cues


def test_a_pcm16_convert_copies_pcm16_cue_banks_as_they_are(tse_split, tmp_path):
    from factories.cue_split import build_split_pack

    source = tmp_path / "cued"
    build_split_pack(tse_split, source)
    convert(source, tmp_path / "digested", "--codec", "pcm16")  # digests added to the streams, cues as they were
    assert open_pack(tmp_path / "digested").manifest.cues == open_pack(source).manifest.cues


def test_every_kind_goes_to_flac_and_back_with_its_data_streams_as_stored(tmp_path, real_audio, wesep_list):
    from factories.asd_inputs import make_asd_pack
    from factories.asr import librivox_span_pack
    from speechpack.packer.adapters.audio_bank import build_audio_bank
    from speechpack.packer.build.run import BuildOptions

    (tmp_path / "asr").mkdir()
    asr = Path(librivox_span_pack(tmp_path / "asr", 4, seed=1, seconds=(0.6, 1.2), words=3))
    (tmp_path / "asd").mkdir()
    asd = Path(make_asd_pack(tmp_path / "asd"))
    bank_dir = tmp_path / "bank_files"
    bank_dir.mkdir()
    for path in real_audio("pocketsphinx", 2):
        os.symlink(path, bank_dir / os.path.basename(path))
    banks = []
    for kind in ("noise", "rir"):
        banks.append(tmp_path / kind)
        build_audio_bank(str(bank_dir), kind, BuildOptions(out=str(banks[-1]), progress=False))
    speakers = real_audio("pocketsphinx", 3)
    case = wesep_list([{"key": f"utt{i}", "spk": [f"s{i}"], "src": {f"s{i}": [path]}}
                       for i, path in enumerate(speakers)], name="sources.list")
    sources = build(case.list_path, tmp_path / "sources")
    for source in (asr, asd, *banks, sources):
        flac = tmp_path / f"{source.parent.name}-{source.name}-flac"
        back = tmp_path / f"{source.parent.name}-{source.name}-back"
        convert(source, flac, "--codec", "flac")
        assert json.loads((flac / "dataset.json").read_text())["kind"] == open_pack(source).kind
        convert(flac, back, "--codec", "pcm16", "--no-digests")
        assert stream_and_index_files(back) == stream_and_index_files(source), source

def test_a_flac_pack_converts_back_to_the_pcm16_pack_it_came_from(source, tmp_path):
    from factories.compressed import recode

    flac = recode(source, tmp_path / "flac", "flac", block_frames=4000)
    out = tmp_path / "back"
    convert(flac, out, "--codec", "pcm16", "--no-digests")
    assert stream_and_index_files(out) == stream_and_index_files(source)


def test_pcm16_to_flac_to_pcm16_gives_back_the_same_stream_files_and_index_records(source, tmp_path):
    flac, back = tmp_path / "flac", tmp_path / "back"
    convert(source, flac, "--codec", "flac")
    manifest = json.loads((flac / "dataset.json").read_text())
    assert {s["name"]: s.get("codec") for s in manifest["streams"]} == {"mix": "flac", "target": "flac"}
    assert manifest["digests"] == "blake2b-128"
    assert sum(f["size"] for shard in manifest["shards"] for f in shard["files"].values()) < \
        0.8 * sum(f["size"] for shard in json.loads((source / "dataset.json").read_text())["shards"]
                  for f in shard["files"].values())
    convert(flac, back, "--codec", "pcm16", "--no-digests")
    assert stream_and_index_files(back) == stream_and_index_files(source)


def test_a_flac_convert_writes_what_a_flac_build_writes(six_line_corpus, source, tmp_path):
    built = build(six_line_corpus.list_path, tmp_path / "built", "--codec", "flac")
    converted = tmp_path / "converted"
    convert(source, converted, "--codec", "flac", "--workers", "2")
    assert {rel: data for rel, data in pack_files(converted).items() if rel.startswith("shard-")} == \
        {rel: data for rel, data in pack_files(built).items() if rel.startswith("shard-")}


def test_an_opus_convert_keeps_every_length_and_stays_close_to_the_source(source, tmp_path):
    out = tmp_path / "opus"
    convert(source, out, "--codec", "opus", "--opus-bitrate", "32000")
    opus, reference = open_pack(out), open_pack(source)
    assert json.loads((out / "dataset.json").read_text())["provenance"]["options"]["opus_bitrate"] == 32000
    for index in range(len(reference)):
        got, want = opus.sample(index).targets, reference.sample(index).targets
        assert got.shape == want.shape
        error = np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want ** 2))
        assert error < 0.5, (index, error)


def test_an_older_pack_is_given_block_digests_and_deflated_columns_and_its_stream_files_kept(source, tmp_path):
    out = tmp_path / "digests"
    convert(source, out, "--codec", "pcm16")  # --digests is the default
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["digests"] == "blake2b-128" and manifest["format_minor"] == 5
    assert set(manifest["columns"]["deflated"]) == set(manifest["columns"]["files"])  # for readers from a store
    for name in manifest["columns"]["files"]:
        assert zlib.decompress((out / "columns" / f"{name}.zlib").read_bytes()) == (out / "columns" / name).read_bytes()
    for shard in manifest["shards"]:
        assert "digests.npy" in shard["files"]
        for name in ("mix.npy", "target.npy", "index.json"):
            assert (out / shard["directory"] / name).read_bytes() == (source / shard["directory"] / name).read_bytes()


def test_codec_options_the_source_cannot_take_are_usage_errors(source, tmp_path):
    result = convert(source, tmp_path / "o", "--codec", "flac", "--no-digests", expect=2)
    assert "digests" in result.output
    assert not (tmp_path / "o").exists()
