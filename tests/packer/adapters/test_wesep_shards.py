"""``speechpack build wesep-shards`` on real speech: WeSep tar shards pack to the same samples as the raw list.

Shards are written from the ``wesep_list`` cases of conftest.py by ``write_shards`` (WeSep's
``make_shards_from_samples.py`` layout), so each test can compare the two packs file by file.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from factories import Mix, Source, pack_files
from speechpack.packer.adapters.wesep_shards import read_wesep_shards, write_shards
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.adapters.wesep_shards import build_wesep_shards
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.errors import BuildError, SpeechpackError


def options(out: Path, **kwargs) -> BuildOptions:
    kwargs.setdefault("progress", False)
    return BuildOptions(out=str(out), **kwargs)


def same_audio_files(raw: Path, shards: Path) -> None:
    """Shard ``.npy`` files and ``columns/`` identical; only ``dataset.json`` and ``index.json`` (provenance)
    may differ."""
    raw_files, shard_files = pack_files(raw), pack_files(shards)
    assert sorted(raw_files) == sorted(shard_files)
    compared = [name for name in raw_files if not name.endswith(("dataset.json", "index.json"))]
    assert any(name.endswith(".npy") and name.startswith("shard-") for name in compared)
    assert any(name.startswith("columns/") for name in compared)
    for name in compared:
        assert raw_files[name] == shard_files[name], name
    for name in raw_files:
        if name.endswith("index.json"):
            raw_index, shard_index = (json.loads(f[name]) for f in (raw_files, shard_files))
            for a, b in zip(raw_index["samples"], shard_index["samples"]):
                assert set(b["provenance"]) == {"tar", "members"}
                a.pop("provenance"), b.pop("provenance")
            assert raw_index == shard_index


def tar_members(tar_path: str) -> list[tuple[str, bytes]]:
    with tarfile.open(tar_path) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def rewrite_tar(tar_path: str, members: list[tuple[str, bytes]], compress: bool = False) -> None:
    with tarfile.open(tar_path, "w:gz" if compress else "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_offline_shards_pack_like_the_raw_list(real_audio, wesep_list, tmp_path):
    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("mixA", (a, b)), Mix("mixB", (b, c), layout="two_files", start=0.4),
                       Mix("mixC", (a, c), layout="stereo", subtype="PCM_16", src_stereo=True)])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"), samples_per_shard=2)
    assert len(open(shard_list).read().split()) == 2
    build_wesep(str(case.list_path), options(tmp_path / "raw", shard_bytes=100_000))
    summary = build_wesep_shards(shard_list, options(tmp_path / "shards", shard_bytes=100_000))
    assert summary.manifest.totals["samples"] == 3
    same_audio_files(tmp_path / "raw", tmp_path / "shards")
    build_wesep_shards(shard_list, options(tmp_path / "parallel", shard_bytes=100_000, workers=3))
    assert pack_files(tmp_path / "shards") == pack_files(tmp_path / "parallel")
    index = json.loads((tmp_path / "shards" / "shard-000000" / "index.json").read_text())
    first = index["samples"][0]["provenance"]
    assert first["tar"].endswith("shards_000000000.tar")
    assert first["members"] == ["mixA.spk1", "mixA.spk2", "mixA.wav", "mixA_spk1.wav", "mixA_spk2.wav"]


def test_gzip_shards_pack_like_the_raw_list(real_audio, wesep_list, tmp_path):
    """``.tar.gz`` and ``.tgz`` shards are streamed once and read in memory: the same pack as the raw list, with
    one process or several (the members' bytes travel to the workers)."""
    from speechpack.packer.adapters.tar_members import InMemoryTarMember
    from speechpack.packer.adapters.wesep_shards import is_gzip

    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("mixA", (a, b)), Mix("mixB", (b, c), layout="two_files", start=0.4),
                       Mix("mixC", (a, c), seconds=1.0)])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"), samples_per_shard=2, compress=True)
    first, second = open(shard_list).read().split()
    assert first.endswith(".tar.gz") and is_gzip(first)
    tgz = second[:-len(".tar.gz")] + ".tgz"
    os.rename(second, tgz)
    Path(shard_list).write_text(f"{first}\n{tgz}\n")
    shards = read_wesep_shards(shard_list)
    assert not shards.problems and len(shards.lines) == 3
    assert all(isinstance(p, InMemoryTarMember) for line in shards.lines for p in line.target_paths)
    assert str(shards.lines[2].target_paths[0]) == f"{tgz}:mixC_spk1.wav"
    build_wesep(str(case.list_path), options(tmp_path / "raw", shard_bytes=100_000))
    build_wesep_shards(shard_list, options(tmp_path / "shards", shard_bytes=100_000))
    same_audio_files(tmp_path / "raw", tmp_path / "shards")
    build_wesep_shards(shard_list, options(tmp_path / "parallel", shard_bytes=100_000, workers=2))
    assert pack_files(tmp_path / "shards") == pack_files(tmp_path / "parallel")


def test_gzip_shard_problems_are_reported(real_audio, wesep_list, tmp_path):
    """A corrupt member of a compressed shard drops only its sample, named ``tar:member``; a truncated or
    garbled compressed shard fails the build with its path."""
    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("m1", (a, b)), Mix("m2", (b, c)), Mix("m3", (a, c))])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"))
    plain = open(shard_list).read().split()[0]
    members = [(n, b"not audio at all" if n == "m2_spk2.wav" else d) for n, d in tar_members(plain)]
    gz = tmp_path / "bad.tar.gz"
    with tarfile.open(gz, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "gz.list").write_text(f"{gz}\n")
    summary = build_wesep_shards(str(tmp_path / "gz.list"), options(tmp_path / "pack", skip_bad=True))
    assert summary.manifest.totals["samples"] == 2
    assert [(p.line, p.key, p.path) for p in summary.skipped] == [(2, "m2", f"{gz}:m2_spk2.wav")]
    truncated = tmp_path / "truncated.tgz"
    truncated.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])
    (tmp_path / "truncated.list").write_text(f"{truncated}\n")
    with pytest.raises(SpeechpackError, match=f"{truncated}: not a readable gzip-compressed tar"):
        build_wesep_shards(str(tmp_path / "truncated.list"), options(tmp_path / "pack2"))


def test_a_compressed_shards_gzip_trailer_is_checked(real_audio, wesep_list, tmp_path):
    """A ``.tar.gz`` whose CRC or length does not match what it decodes to, or whose trailer is cut off, fails the
    build with its path (tarfile's stream mode never looks at the trailer); the same shard intact packs."""
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m1", (a, b))])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"), compress=True)
    good = Path(open(shard_list).read().split()[0]).read_bytes()
    crc = bytearray(good)
    crc[-8] ^= 0xFF
    length = bytearray(good)
    length[-1] ^= 0x01
    for name, data, reason in [("crc", crc, "CRC check failed"), ("length", length, "Incorrect length"),
                               ("cut", good[:-8], "end-of-stream marker")]:
        shard = tmp_path / f"{name}.tar.gz"
        shard.write_bytes(bytes(data))
        (tmp_path / f"{name}.list").write_text(f"{shard}\n")
        with pytest.raises(SpeechpackError, match=f"{shard}: not a readable gzip-compressed tar") as err:
            build_wesep_shards(str(tmp_path / f"{name}.list"), options(tmp_path / f"pack-{name}"))
        assert reason in str(err.value), str(err.value)
    (tmp_path / "good.tar.gz").write_bytes(good)
    (tmp_path / "good.list").write_text(f"{tmp_path / 'good.tar.gz'}\n")
    assert build_wesep_shards(str(tmp_path / "good.list"), options(tmp_path / "pack")).manifest.totals["samples"] == 1


def test_resampled_shards_match_the_raw_list(real_audio, wesep_list, tmp_path):
    a, b = real_audio("alsa", 2)
    case = wesep_list([Mix("m48", (a, b), seconds=1.0)])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"))
    build_wesep(str(case.list_path), options(tmp_path / "raw", sample_rate=16000))
    build_wesep_shards(shard_list, options(tmp_path / "shards", sample_rate=16000))
    same_audio_files(tmp_path / "raw", tmp_path / "shards")


def test_online_shards_pack_like_the_raw_list(real_audio, wesep_list, tmp_path):
    paths = real_audio("pocketsphinx", 3)
    case = wesep_list([Source(f"utt{i}", p, start=0.1 * i) for i, p in enumerate(paths)])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"))
    names = [name for name, _ in tar_members(open(shard_list).read().split()[0])]
    assert names[:2] == ["utt0.spk", "utt0.wav"]
    build_wesep(str(case.list_path), options(tmp_path / "raw"))
    summary = build_wesep_shards(shard_list, options(tmp_path / "shards"))
    assert summary.manifest.kind == "sources"
    same_audio_files(tmp_path / "raw", tmp_path / "shards")


def test_a_corrupt_member_is_reported_and_skipped(real_audio, wesep_list, tmp_path):
    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("m1", (a, b)), Mix("m2", (b, c)), Mix("m3", (a, c))])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"))
    tar_path = open(shard_list).read().split()[0]
    rewrite_tar(tar_path, [(n, b"not audio at all" if n == "m2_spk2.wav" else d) for n, d in tar_members(tar_path)])
    with pytest.raises(BuildError) as failure:
        build_wesep_shards(shard_list, options(tmp_path / "pack"))
    [problem] = failure.value.problems
    assert (problem.line, problem.key, problem.path) == (2, "m2", f"{tar_path}:m2_spk2.wav")
    assert "cannot decode" in problem.reason
    assert not (tmp_path / "pack").exists()
    summary = build_wesep_shards(shard_list, options(tmp_path / "pack", skip_bad=True))
    assert summary.manifest.totals["samples"] == 2
    skipped = json.loads((tmp_path / "pack" / "skipped.json").read_text())
    assert [(s["line"], s["key"], s["path"]) for s in skipped["skipped"]] == [(2, "m2", f"{tar_path}:m2_spk2.wav")]


def test_structural_problems_name_the_sample(real_audio, wesep_list, tmp_path):
    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("m1", (a, b)), Mix("m2", (b, c)), Mix("m3", (a, c), seconds=1.0)])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"))
    tar_path = open(shard_list).read().split()[0]
    members = tar_members(tar_path)
    short = dict(members)["m3_spk1.wav"]
    long = dict(members)["m1_spk1.wav"]
    members = [(n, d) for n, d in members if n != "m1.spk2"]  # m1: a missing speaker id
    members = [(n, long if n == "m3_spk1.wav" else d) for n, d in members]  # m3: a source longer than its mix
    assert short != long
    rewrite_tar(tar_path, members)
    shards = read_wesep_shards(shard_list)
    assert [(p.line, p.key) for p in shards.problems] == [(1, "m1")]
    assert shards.problems[0].reason == "source member(s) for slot(s) [2] without a speaker id member"
    assert shards.problems[0].path == f"{tar_path}:m1.spk1"
    with pytest.raises(BuildError) as failure:
        build_wesep_shards(shard_list, options(tmp_path / "pack"))
    problems = failure.value.problems
    assert [(p.line, p.key) for p in problems] == [(1, "m1"), (3, "m3")]
    assert problems[1].path == f"{tar_path}:m3_spk1.wav" and "length" in problems[1].reason


def test_mixture_keys_ending_in_spk_n(real_audio, wesep_list, tmp_path):
    """WeSep's reader misparses ``mix_spk1.wav`` as source 1 of ``mix``; here it is the mixture of ``mix_spk1``."""
    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("mix", (a, b)), Mix("mix_spk1", (b, c)), Mix("x_spk2", (a, c))])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"))
    build_wesep(str(case.list_path), options(tmp_path / "raw"))
    build_wesep_shards(shard_list, options(tmp_path / "shards"))
    same_audio_files(tmp_path / "raw", tmp_path / "shards")


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_members_are_never_extracted(real_audio, wesep_list, tmp_path, monkeypatch, compress):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m1", (a, b))])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"))
    tar_path = open(shard_list).read().split()[0]
    members = tar_members(tar_path)
    wav = dict(members)["m1.wav"]
    # gzip: the same ``.tar`` name, compressed content (a shard is told by its first bytes, not its name)
    rewrite_tar(tar_path, [("../evil.spk1", b"eve"), ("../evil.wav", wav), ("/tmp/abs_evil.wav", wav)] + members,
                compress=compress)
    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    before = {p for p in tmp_path.rglob("*")}
    summary = build_wesep_shards(os.path.abspath(shard_list), options(work / "pack", skip_bad=True))
    assert summary.manifest.totals["samples"] == 1
    created = {p for p in tmp_path.rglob("*")} - before
    # the pack, and the lock every writer of it takes beside it (docs/building.md)
    assert all(work / "pack" in p.parents or p in (work / "pack", work / "pack.lock") for p in created), created
    assert not any("evil" in p.name for p in tmp_path.rglob("*"))
    assert not os.path.exists("/tmp/abs_evil.wav")
    assert [p.key for p in summary.skipped] == ["../evil", "/tmp/abs_evil"]


def test_bad_shard_lists_are_refused(tmp_path):
    urls = tmp_path / "urls.list"
    urls.write_text("https://example.com/shards_000000000.tar\n")
    with pytest.raises(SpeechpackError, match="URLs are not supported"):
        build_wesep_shards(str(urls), options(tmp_path / "pack"))
    missing = tmp_path / "missing.list"
    missing.write_text("nowhere.tar\n")
    with pytest.raises(SpeechpackError, match="not found"):
        build_wesep_shards(str(missing), options(tmp_path / "pack"))
    gz = tmp_path / "s.tar"
    gz.write_bytes(b"\x1f\x8b" + b"junk" * 100)  # gzip magic, then garbage
    garbage = tmp_path / "garbage.list"
    garbage.write_text(f"{gz}\n")
    with pytest.raises(SpeechpackError, match=f"{gz}: not a readable gzip-compressed tar"):
        build_wesep_shards(str(garbage), options(tmp_path / "pack"))
    junk = tmp_path / "j.tar"
    junk.write_bytes(b"junk" * 100)
    garbage.write_text(f"{junk}\n")
    with pytest.raises(SpeechpackError, match=f"{junk}: not a readable uncompressed tar"):
        build_wesep_shards(str(garbage), options(tmp_path / "pack"))


def test_cli(real_audio, wesep_list, tmp_path, monkeypatch):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m1", (a, b))])
    write_shards(str(case.list_path), str(tmp_path / "tars"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel.list").write_text("tars/shards_000000000.tar\n")  # relative to the current directory
    result = CliRunner().invoke(main, ["build", "wesep-shards", "--list", "rel.list", "--out", "pack",
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "packed 1 sample " in result.output
    write_shards(str(case.list_path), str(tmp_path / "tgz"), compress=True)
    (tmp_path / "gz.list").write_text("tgz/shards_000000000.tar.gz\n")
    result = CliRunner().invoke(main, ["build", "wesep-shards", "--list", "gz.list", "--out", "gz-pack",
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "packed 1 sample " in result.output
    same_audio_files(tmp_path / "pack", tmp_path / "gz-pack")


def test_members_decode_in_memory_like_files(real_audio, tmp_path):
    """The bytes path of ``packer.audio`` gives what the file path gives, for libsndfile and PyAV formats."""
    import numpy as np
    import soundfile

    from speechpack.packer.audio import probe_audio, probe_audio_bytes, read_audio, read_audio_bytes

    [path] = real_audio("pocketsphinx", 1)
    data, rate = soundfile.read(path, dtype="int16")
    flac = tmp_path / "a.flac"
    soundfile.write(flac, data[:rate], rate)
    encoded = flac.read_bytes()
    assert probe_audio_bytes(encoded, "t.tar:a.flac") == probe_audio(str(flac))
    assert np.array_equal(read_audio_bytes(encoded, "t.tar:a.flac", int16_at=rate).data,
                          read_audio(str(flac), int16_at=rate).data)
    via_pyav = read_audio_bytes(encoded, "t.tar:a.m4a")  # the extension picks PyAV, which probes the content
    assert np.allclose(via_pyav.data, read_audio(str(flac)).data, atol=1e-6)
    with pytest.raises(Exception, match="t.tar:b.wav: cannot decode"):
        read_audio_bytes(b"junk", "t.tar:b.wav")


def gnu_sparse_tar(real_audio, folder: Path) -> tuple[Path, Path]:
    """An online shard written by GNU tar (``--sparse --format=gnu``) whose first wav, real speech around a long run
    of zero samples, is stored as a sparse member, followed by another sample; and the raw list of the same files."""
    import shutil
    import subprocess

    import numpy as np
    import soundfile

    a, b = real_audio("pocketsphinx", 2)
    first, rate = soundfile.read(a, dtype="int16")
    second, _ = soundfile.read(b, dtype="int16")
    folder.mkdir()
    dense = folder / "dense.wav"
    soundfile.write(dense, np.concatenate([first[:rate], np.zeros(3 * rate, np.int16), second[:rate]]), rate,
                    subtype="PCM_16")
    # holes where the zeros are, so that tar really stores the member sparse
    subprocess.run(["cp", "--sparse=always", str(dense), str(folder / "utt1.wav")], check=True)
    dense.unlink()
    soundfile.write(folder / "utt2.wav", second[:4 * rate], rate, subtype="PCM_16")  # longer than the holes
    (folder / "utt1.spk").write_text("spkA")
    (folder / "utt2.spk").write_text("spkB")
    tar_path = folder / "shard.tar"
    assert shutil.which("tar"), "GNU tar is needed to write a sparse member"
    subprocess.run(["tar", "--sparse", "--format=gnu", "-cf", str(tar_path), "-C", str(folder),
                    "utt1.spk", "utt1.wav", "utt2.spk", "utt2.wav"], check=True)
    with tarfile.open(tar_path) as tar:
        assert tar.getmember("utt1.wav").issparse()
    raw = folder / "raw.list"
    raw.write_text("".join(json.dumps({"key": key, "spk": [spk], "src": {spk: [str(folder / f"{key}.wav")]}}) + "\n"
                           for key, spk in (("utt1", "spkA"), ("utt2", "spkB"))))
    return tar_path, raw


def test_a_gnu_sparse_member_packs_as_tar_extracts_it(real_audio, tmp_path):
    """A member GNU tar stored sparse (its data regions only; the holes read as zeros) packs to exactly the audio
    of the file it was made from, and the member after it to its own: the same pack as the raw list of the files."""
    tar_path, raw = gnu_sparse_tar(real_audio, tmp_path / "in")
    (tmp_path / "shard.list").write_text(f"{tar_path}\n")
    shards = read_wesep_shards(str(tmp_path / "shard.list"))
    assert not shards.problems
    member = shards.lines[0].target_paths[0]
    with tarfile.open(tar_path) as tar:
        assert member.read_bytes() == tar.extractfile("utt1.wav").read()
    build_wesep(str(raw), options(tmp_path / "raw"))
    build_wesep_shards(str(tmp_path / "shard.list"), options(tmp_path / "shards"))
    same_audio_files(tmp_path / "raw", tmp_path / "shards")


def test_members_decode_from_the_tar_like_files(real_audio, tmp_path):
    """A plain tar's member is decoded from its reader (``TarMember.open``, never read whole): libsndfile and PyAV
    formats give what the file gives."""
    import numpy as np
    import soundfile

    from speechpack.packer.adapters.tar_members import member_of
    from speechpack.packer.adapters.wesep_lines import probe_source, read_source
    from speechpack.packer.audio import probe_audio, read_audio

    [path] = real_audio("pocketsphinx", 1)
    data, rate = soundfile.read(path, dtype="int16")
    soundfile.write(tmp_path / "a.flac", data, rate)
    soundfile.write(tmp_path / "a.ogg", data.astype(np.float32) / 32768, rate)
    (tmp_path / "a.wav").write_bytes(Path(path).read_bytes())
    (tmp_path / "a.m4a").write_bytes((tmp_path / "a.flac").read_bytes())  # the extension picks PyAV
    with tarfile.open(tmp_path / "t.tar", "w") as tar:
        for name in ("a.wav", "a.flac", "a.ogg", "a.m4a"):
            tar.add(tmp_path / name, arcname=name)
    with tarfile.open(tmp_path / "t.tar") as tar:
        members = [member_of(str(tmp_path / "t.tar"), m) for m in tar.getmembers()]
    for member in members:
        file = str(tmp_path / member.name)
        assert probe_source(member) == probe_audio(file)
        np.testing.assert_array_equal(read_source(member, int16_at=rate).data, read_audio(file, int16_at=rate).data)
