"""``speechpack build lhotse --shar``: Shar directories written by Lhotse's own ``to_shar`` from the real librivox
clips, in every audio format it stores, read without holding their audio (each cut keeps its tar member; the bytes
are read when the cut is decoded), packed with two workers, killed and resumed, and with damaged tars whose
members are named in the problems of their cuts' lines."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import signal
import subprocess
import sys
import tarfile

import numpy as np
import soundfile
from click.testing import CliRunner
from lhotse import CutSet

from speechpack.cli import main
import factories.paths
from factories import pack_files
from factories.lhotse_cuts import stored, transcribed_cut, transcripts
from speechpack.loader import open_pack
from speechpack.packer.adapters.lhotse import load_lhotse_cut, make_items
from speechpack.packer.adapters.lhotse_shar import read_shar
from speechpack.packer.adapters.tar_members import InMemoryTarMember, TarMember
from speechpack.packer.build.state import KILL_AT_ENV
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.constants import KIND_ASR, STREAM_AUDIO

REPO = str(factories.paths.REPO)
#: The audio formats Lhotse's Shar writer stores (``original``: the source file's own bytes), lossless first.
SHAR_FORMATS = ("wav", "flac", "original", "mp3", "opus")
LOSSLESS = ("wav", "flac", "original")
#: About one librivox clip (5-7 s at 16 kHz, int16) per pack shard: several shards for two workers to share.
SHARD_BYTES = "250000"
#: One step of the pack's int16 storage (a sample decodes within it of what Lhotse decodes).
INT16_STEP = 1 / 32768


def librivox_cuts(real_audio, count: int = 5) -> CutSet:
    clips = real_audio("pocketsphinx", count)
    texts = transcripts(clips)
    return CutSet.from_cuts(transcribed_cut(p, texts[os.path.basename(p)[:-4]], corpus="librivox") for p in clips)


def shar_of_every_format(shar_dir, cuts: CutSet) -> None:
    """Shard ``k`` of ``shar_dir`` holds cut ``k``, its audio stored as ``SHAR_FORMATS[k]``."""
    shar_dir.mkdir()
    for k, fmt in enumerate(SHAR_FORMATS):
        CutSet.from_cuts([cuts[k]]).to_shar(str(shar_dir), fields={"recording": fmt}, shard_size=1, shard_offset=k)


def build(*args: str):
    return CliRunner().invoke(main, ["build", "lhotse", *args, "--no-progress"])


def test_read_shar_keeps_tar_members_not_audio(tmp_path, real_audio):
    """The memory bound: what the reader returns, and every item a worker receives, holds no audio bytes (a member
    is its tar, name, offset and size), however large the audio; decoding reads the bytes and keeps none."""
    cuts = librivox_cuts(real_audio, 4)
    (tmp_path / "shar").mkdir()
    cuts.to_shar(str(tmp_path / "shar"), fields={"recording": "wav"}, shard_size=2)
    read = read_shar(str(tmp_path / "shar"))
    assert not read.problems and [e.cut.id for e in read.cuts] == [c.id for c in cuts]
    items, problems = make_items(read.cuts, KIND_ASR)
    assert not problems
    for entry, item in zip(read.cuts, items):
        assert type(item.shar_audio) is TarMember and item.shar_audio is entry.audio
        assert item.shar_audio.size > 100_000  # a 16-bit WAV of several seconds
        assert [s.type for s in item.cut.recording.sources] == ["shar"]  # Lhotse's placeholder, no bytes
        assert len(pickle.dumps(item)) < item.shar_audio.size / 50  # what travels to a worker
        assert item.manifest_path.endswith(f"cuts.00000{read.cuts.index(entry) // 2}.jsonl.gz")
    sample = load_lhotse_cut(items[0], 16000)
    np.testing.assert_array_equal(sample.streams[STREAM_AUDIO][0].data[0],
                                  soundfile.read(real_audio("pocketsphinx", 1)[0], dtype="int16")[0])
    assert [s.type for s in items[0].cut.recording.sources] == ["shar"]  # the bytes went with the decoded sample


def test_every_shar_audio_format_packs_with_two_workers(tmp_path, real_audio):
    """Lossless formats give the clips' samples exactly; lossy ones what Lhotse's own Shar reader decodes; one
    worker and two give the same bytes."""
    cuts = librivox_cuts(real_audio)
    shar_of_every_format(tmp_path / "shar", cuts)
    two = build("--shar", str(tmp_path / "shar"), "--workers", "2", "--shard-size", SHARD_BYTES, "--out",
                str(tmp_path / "two"))
    assert two.exit_code == 0, two.output
    pack = open_pack(str(tmp_path / "two"))
    assert pack.keys.tolist() == [c.id for c in cuts]
    assert len(pack.manifest.shards) >= 3
    lhotse_decoded = {c.id: c.load_audio() for c in CutSet.from_shar(in_dir=str(tmp_path / "shar"))}
    for i, (fmt, path) in enumerate(zip(SHAR_FORMATS, real_audio("pocketsphinx", 5))):
        if fmt in LOSSLESS:
            np.testing.assert_array_equal(stored(pack, STREAM_AUDIO, i)[0], soundfile.read(path, dtype="int16")[0])
        else:
            reference = lhotse_decoded[cuts[i].id]
            assert pack.num_frames[i] == reference.shape[1]
            step = INT16_STEP * max(1.0, float(np.abs(reference).max()))  # rescaled if the codec overshoots
            np.testing.assert_allclose(pack.sample(i).targets, reference, rtol=0, atol=step)
    assert validate_pack(str(tmp_path / "two")).ok
    one = build("--shar", str(tmp_path / "shar"), "--shard-size", SHARD_BYTES, "--out", str(tmp_path / "one"))
    assert one.exit_code == 0, one.output
    assert pack_files(tmp_path / "one") == pack_files(tmp_path / "two")


def _member(tar_path, name: str) -> tarfile.TarInfo:
    with tarfile.open(tar_path) as tar:
        return tar.getmember(name)


def test_damaged_tar_members_are_problems_of_their_cuts_lines(tmp_path, real_audio):
    """Shard 0's second member overwritten with zeros (no audio header: Lhotse cannot decode it), shard 1's tar cut
    short inside its second member (found when the tar is indexed): each is its cut's problem, naming the cuts file,
    the line and the member; ``--skip-bad`` packs the other cuts, with two workers."""
    cuts = librivox_cuts(real_audio, 4)
    shar = tmp_path / "shar"
    shar.mkdir()
    cuts.to_shar(str(shar), fields={"recording": "wav"}, shard_size=2)
    ids = [c.id for c in cuts]
    tar0, tar1 = shar / "recording.000000.tar", shar / "recording.000001.tar"
    corrupt = _member(tar0, f"{ids[1]}.wav")
    with open(tar0, "r+b") as fp:
        fp.seek(corrupt.offset_data)
        fp.write(b"\0" * corrupt.size)
    truncated = _member(tar1, f"{ids[3]}.wav")
    os.truncate(tar1, truncated.offset_data + truncated.size // 2)

    failed = build("--shar", str(shar), "--out", str(tmp_path / "pack"))
    assert failed.exit_code == 1
    out = failed.output
    assert (f"line 2: key '{ids[1]}', file {shar / 'cuts.000000.jsonl.gz'}: {tar0}:{ids[1]}.wav: Lhotse could not "
            f"load cut '{ids[1]}'") in out
    assert (f"line 2: key '{ids[3]}', file {shar / 'cuts.000001.jsonl.gz'}: {tar1}:{ids[3]}.wav: truncated tar "
            f"member ({truncated.size // 2} of {truncated.size} bytes in the tar)") in out
    assert not (tmp_path / "pack").exists()

    skipped = build("--shar", str(shar), "--skip-bad", "--workers", "2", "--out", str(tmp_path / "pack"))
    assert skipped.exit_code == 0, skipped.output
    assert open_pack(str(tmp_path / "pack")).keys.tolist() == [ids[0], ids[2]]
    records = json.loads((tmp_path / "pack" / "skipped.json").read_text())["skipped"]
    assert sorted((r["key"], r["line"], r["path"]) for r in records) == [
        (ids[1], 2, str(shar / "cuts.000000.jsonl.gz")), (ids[3], 2, str(shar / "cuts.000001.jsonl.gz"))]


def test_a_cut_without_its_member_names_the_tar(tmp_path, real_audio):
    """A cuts file whose tar lacks one of its cuts (the tar of another export): that line's problem."""
    cuts = librivox_cuts(real_audio, 2)
    for name, subset in (("shar", cuts), ("other", cuts.subset(first=1))):
        (tmp_path / name).mkdir()
        subset.to_shar(str(tmp_path / name), fields={"recording": "flac"}, shard_size=2)
    os.replace(tmp_path / "other" / "recording.000000.tar", tmp_path / "shar" / "recording.000000.tar")
    result = build("--shar", str(tmp_path / "shar"), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 1
    tar = tmp_path / "shar" / "recording.000000.tar"
    assert (f"line 2: key '{cuts[1].id}', file {tmp_path / 'shar' / 'cuts.000000.jsonl.gz'}: {tar}: no audio member "
            f"{cuts[1].id}.<format> for this cut") in result.output
    assert "line 1:" not in result.output


def test_gzip_compressed_tar_is_read_through_once(tmp_path, real_audio):
    """A ``recording.NNNNNN.tar.gz`` (Lhotse reads one; its writer never makes one) has no offsets to seek to: its
    members are kept in memory, and the pack is the one its uncompressed tar gives."""
    cuts = librivox_cuts(real_audio, 3)
    (tmp_path / "shar").mkdir()
    cuts.to_shar(str(tmp_path / "shar"), fields={"recording": "flac"}, shard_size=2)
    plain = build("--shar", str(tmp_path / "shar"), "--out", str(tmp_path / "plain"))
    assert plain.exit_code == 0, plain.output
    tar = tmp_path / "shar" / "recording.000000.tar"
    with open(tar, "rb") as raw, gzip.open(f"{tar}.gz", "wb") as packed:
        packed.write(raw.read())
    tar.unlink()
    assert all(isinstance(e.audio, InMemoryTarMember) == (e.path.endswith("cuts.000000.jsonl.gz"))
               for e in read_shar(str(tmp_path / "shar")).cuts)
    compressed = build("--shar", str(tmp_path / "shar"), "--workers", "2", "--out", str(tmp_path / "gz"))
    assert compressed.exit_code == 0, compressed.output
    assert {k: v for k, v in pack_files(tmp_path / "gz").items() if k != "dataset.json"} == {
        k: v for k, v in pack_files(tmp_path / "plain").items() if k != "dataset.json"}  # its input hash differs


def _build_process(shar_dir, out, *extra: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != KILL_AT_ENV}
    if kill_at is not None:
        env[KILL_AT_ENV] = kill_at
    return subprocess.run([sys.executable, "-m", "speechpack.cli", "build", "lhotse", "--shar", str(shar_dir), "--out", str(out),
                           "--shard-size", SHARD_BYTES, "--no-progress", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_killed_shar_build_resumes_to_the_same_pack(tmp_path, real_audio):
    """Killed after its first pack shard, resumed with two workers: the pack an uninterrupted build gives."""
    shar_of_every_format(tmp_path / "shar", librivox_cuts(real_audio))
    reference = build("--shar", str(tmp_path / "shar"), "--shard-size", SHARD_BYTES, "--out", str(tmp_path / "ref"))
    assert reference.exit_code == 0, reference.output
    killed = _build_process(tmp_path / "shar", tmp_path / "pack", kill_at="receipt:0")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _build_process(tmp_path / "shar", tmp_path / "pack", "--resume", "--workers", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert "kept 1 verified shard(s) of an earlier run" in resumed.stdout
    assert pack_files(tmp_path / "pack") == pack_files(tmp_path / "ref")


def test_a_gnu_sparse_audio_member_packs_as_tar_extracts_it(tmp_path, real_audio):
    """A Shar recording tar rewritten by GNU tar with ``--sparse``: the first cut's wav (real speech around a long
    run of zeros) is stored as a sparse member, and packs to exactly its samples; the cut after it to its own."""
    first, second = real_audio("pocketsphinx", 2)
    speech, rate = soundfile.read(first, dtype="int16")
    dense = tmp_path / "dense.wav"
    soundfile.write(dense, np.concatenate([speech[:rate], np.zeros(3 * rate, np.int16), speech[rate:2 * rate]]),
                    rate, subtype="PCM_16")
    holed = tmp_path / "holed.wav"
    subprocess.run(["cp", "--sparse=always", str(dense), str(holed)], check=True)
    cuts = CutSet.from_cuts([transcribed_cut(str(holed), "a pause", corpus="librivox"),
                             transcribed_cut(second, "after it", corpus="librivox")])
    (tmp_path / "shar").mkdir()
    cuts.to_shar(str(tmp_path / "shar"), fields={"recording": "wav"}, shard_size=2)
    tar_path = tmp_path / "shar" / "recording.000000.tar"
    members = tmp_path / "members"
    with tarfile.open(tar_path) as tar:
        names = tar.getnames()
        tar.extractall(members, filter="data")
    wav_name = f"{cuts[0].id}.wav"
    subprocess.run(["cp", "--sparse=always", str(members / wav_name), str(members / "sparse")], check=True)
    os.replace(members / "sparse", members / wav_name)
    subprocess.run(["tar", "--sparse", "--format=gnu", "-cf", str(tar_path), "-C", str(members), *names], check=True)
    assert _member(tar_path, wav_name).issparse()
    result = build("--shar", str(tmp_path / "shar"), "--out", str(tmp_path / "pack"))
    assert result.exit_code == 0, result.output
    pack = open_pack(str(tmp_path / "pack"))
    np.testing.assert_array_equal(stored(pack, STREAM_AUDIO, 0)[0], soundfile.read(dense, dtype="int16")[0])
    np.testing.assert_array_equal(stored(pack, STREAM_AUDIO, 1)[0], soundfile.read(second, dtype="int16")[0])
