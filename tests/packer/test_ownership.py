"""What speechpack may delete or replace (writer side): it deletes only what one of its own records lists
(``packer.ownership``), refuses a build whose ``--out`` holds its own inputs, and replaces a pack's files by rename
so that a process that has them mapped keeps reading the old bytes.  Real recordings throughout."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from speechpack.cli import main
from factories import Mix, mixture_line, pack_files, source_line
from speechpack.loader.pack import open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.copy.to_directory import copy_pack
from speechpack.packer.ownership import INCOMING_MANIFEST, REPLACED_MANIFEST
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.errors import SpeechpackError


@pytest.fixture
def pack(tmp_path, wesep_list, real_audio):
    """A real tse pack of two shards."""
    librivox = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("a", tuple(librivox[:2]), seconds=1.0), Mix("b", tuple(librivox[1:]), seconds=1.0)],
                      name="pack.list")
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=60_000, progress=False))
    return out


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _copy(src, dst):
    return CliRunner().invoke(main, ["copy", str(src), str(dst), "--no-progress"])


# ------------------------------------------------------------------------------------------------ copy

def test_copy_keeps_foreign_files_named_like_pack_entries(pack, tmp_path):
    """The reported scenario: ``cues/`` and ``columns/`` of a user's directory were deleted as pack entries."""
    dst = tmp_path / "d"
    (dst / "cues").mkdir(parents=True)
    (dst / "columns").mkdir()
    (dst / "cues" / "audio.json").write_text("x\n")
    (dst / "columns" / "table.csv").write_text("a,b\n")
    before = _tree(dst)
    result = _copy(pack, dst)
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and "cues/audio.json" in result.output and "columns/table.csv" in result.output
    assert "removed" not in result.output
    assert _tree(dst) == before and sorted(os.listdir(dst)) == ["columns", "cues"]


def test_copy_over_a_pack_keeps_a_user_file_inside_a_shard_directory(pack, tmp_path, wesep_list, real_audio):
    """An older pack at the destination may be replaced, but a file its manifest does not list is not the pack's."""
    librivox = real_audio("pocketsphinx", 2)
    older = tmp_path / "older"
    build_wesep(str(wesep_list([Mix("old", tuple(librivox), seconds=0.5)], name="old.list").list_path),
                BuildOptions(out=str(older), progress=False))
    dst = tmp_path / "dst"
    copy_pack(str(older), str(dst), progress=False)
    (dst / "shard-000000" / "notes.txt").write_text("mine")
    (dst / "shard-000005").mkdir()
    (dst / "shard-000005" / "file.txt").write_text("mine too")
    before = _tree(dst)
    result = _copy(pack, dst)
    assert result.exit_code == 1
    assert "shard-000000/notes.txt" in result.output and "shard-000005" in result.output
    assert _tree(dst) == before
    assert open_pack(dst).keys.tolist() == ["old"]  # the older pack is still whole


def test_copy_replaces_an_older_pack_and_says_what_it_removed(pack, tmp_path, wesep_list, real_audio):
    librivox = real_audio("pocketsphinx", 3)
    older = tmp_path / "older"
    build_wesep(str(wesep_list([Mix(f"o{i}", tuple(librivox[i:i + 2]), seconds=1.0) for i in range(2)]
                               + [Mix("o2", (librivox[0], librivox[2]), seconds=1.0)], name="old.list").list_path),
                BuildOptions(out=str(older), shard_bytes=60_000, progress=False))
    dst = tmp_path / "dst"
    copy_pack(str(older), str(dst), progress=False)
    assert (dst / "shard-000002").is_dir()
    report = copy_pack(str(pack), str(dst), progress=False)
    assert f"{dst / 'shard-000002' / 'mix.npy'}" in report.removed
    assert validate_pack(str(dst)).ok and open_pack(dst).keys.tolist() == ["a", "b"]
    assert _tree(dst) == _tree(pack)
    assert not (dst / INCOMING_MANIFEST).exists() and not (dst / REPLACED_MANIFEST).exists()


def test_copy_refuses_a_foreign_dataset_json(pack, tmp_path):
    dst = tmp_path / "hf"
    dst.mkdir()
    (dst / "dataset.json").write_text('{"name": "someone else\'s dataset"}')
    (dst / "shard-000000").mkdir()
    (dst / "shard-000000" / "mix.npy").write_bytes(b"not ours")
    before = _tree(dst)
    result = _copy(pack, dst)
    assert result.exit_code == 1 and "dataset.json" in result.output
    assert _tree(dst) == before


# ------------------------------------------------------------------------------------ build --overwrite

def _overwrite(case, out):
    list_path = getattr(case, "list_path", case)
    return CliRunner().invoke(main, ["build", "wesep", "--list", str(list_path), "--out", str(out),
                                     "--overwrite", "--no-progress"])


def test_overwrite_keeps_non_pack_data_and_the_builds_own_inputs(tmp_path, write_list, real_audio):
    """The reported scenario: a directory with the list's audio under ``cues/``, ``columns/important.txt``,
    ``shard-000007/file.txt`` and a foreign ``dataset.json`` was emptied, then the build failed on its deleted
    input."""
    librivox = real_audio("pocketsphinx", 2)
    out = tmp_path / "work"
    (out / "cues").mkdir(parents=True)
    (out / "columns").mkdir()
    (out / "shard-000007").mkdir()
    enroll = out / "cues" / "enroll.wav"
    enroll.write_bytes(Path(librivox[0]).read_bytes())
    (out / "columns" / "important.txt").write_text("keep me")
    (out / "shard-000007" / "file.txt").write_text("keep me too")
    (out / "dataset.json").write_text('{"foreign": true}')
    listed = write_list([source_line("m", "s1", str(enroll)), source_line("n", "s2", librivox[1])], name="in.list")
    before = _tree(out)
    result = _overwrite(listed, out)
    assert result.exit_code == 1, result.output
    assert "error:" in result.output and "Traceback" not in result.output
    assert f"{enroll}, an input of this build" in result.output
    assert _tree(out) == before


def test_overwrite_refuses_an_out_that_holds_its_list(pack, wesep_list, real_audio):
    """The list file itself inside --out: refused, naming it as this build's input."""
    librivox = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m", tuple(librivox), seconds=0.5)], name="in.list")
    target = pack / "in.list"
    target.write_bytes(case.list_path.read_bytes())
    before = pack_files(pack)
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(target), "--out", str(pack), "--overwrite",
                                       "--no-progress"])
    assert result.exit_code == 1
    assert f"{target}" in result.output and "input" in result.output
    assert pack_files(pack) == before


def test_overwrite_refuses_an_out_that_holds_listed_audio(pack, write_list, real_audio):
    """Audio the list names, inside a real pack's directory (in a shard directory: a name the pack owns)."""
    librivox = real_audio("pocketsphinx", 2)
    wav = pack / "shard-000000" / "speech.wav"
    wav.write_bytes(Path(librivox[0]).read_bytes())
    listed = write_list([mixture_line("m", [str(wav)], {"s1": [librivox[1]]})], name="in.list")
    result = _overwrite(listed, pack)
    assert result.exit_code == 1 and f"{wav}, an input of this build" in result.output
    assert wav.read_bytes() == Path(librivox[0]).read_bytes()


def test_overwrite_replaces_a_real_pack(pack, wesep_list, real_audio):
    librivox = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("new", tuple(librivox), seconds=0.5)], name="new.list")
    result = _overwrite(case, pack)
    assert result.exit_code == 0, result.output
    assert open_pack(pack).keys.tolist() == ["new"]
    assert sorted(os.listdir(pack)) == ["columns", "dataset.json", "shard-000000"]


# ------------------------------------------------------------------ open packs keep their bytes

def test_overwrite_and_copy_replace_files_so_open_maps_keep_the_old_bytes(pack, tmp_path, wesep_list,
                                                                                   real_audio):
    """A reader that has a stream file mapped keeps the old inode, hence the old bytes, when the pack is rebuilt
    with --overwrite or copied over: no file is ever rewritten in place."""
    librivox = real_audio("pocketsphinx", 3)
    path = pack / "shard-000000" / "mix.npy"
    mapped = np.load(path, mmap_mode="r")
    old_bytes = np.array(mapped)
    old_inode = os.stat(path).st_ino
    case = wesep_list([Mix("a", (librivox[2], librivox[0]), seconds=1.0)], name="other.list")
    assert _overwrite(case, pack).exit_code == 0
    assert os.stat(path).st_ino != old_inode
    assert not np.array_equal(np.load(path), old_bytes)
    np.testing.assert_array_equal(mapped, old_bytes)

    other = tmp_path / "other"
    build_wesep(str(wesep_list([Mix("z", tuple(librivox[:2]), seconds=1.0)], name="z.list").list_path),
                BuildOptions(out=str(other), progress=False))
    mapped = np.load(path, mmap_mode="r")
    old_bytes = np.array(mapped)
    copy_pack(str(other), str(pack), progress=False)
    np.testing.assert_array_equal(mapped, old_bytes)
    assert open_pack(pack).keys.tolist() == ["z"]


def test_a_killed_copy_leaves_only_owned_entries(pack, tmp_path):
    """A copy records the incoming manifest before its first change, so an interrupted copy's files stay owned and
    the next run finishes it (the files it wrote are kept when they verify)."""
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / INCOMING_MANIFEST).write_bytes((pack / "dataset.json").read_bytes())
    (dst / "shard-000000").mkdir()
    (dst / "shard-000000" / "mix.npy").write_bytes((pack / "shard-000000" / "mix.npy").read_bytes())
    (dst / "shard-000000" / ".tmp-index.json").write_text("{")
    report = copy_pack(str(pack), str(dst), progress=False)
    assert report.files_kept == 1 and validate_pack(str(dst)).ok
    assert _tree(dst) == _tree(pack)


def test_unlisted_names_in_a_directory_speechpack_does_not_own_are_named(pack, tmp_path):
    dst = tmp_path / "dst"
    dst.mkdir()
    for i in range(12):
        (dst / f"shard-{i:06d}").mkdir()
    with pytest.raises(SpeechpackError, match=r"shard-000000, .* and 4 more"):
        copy_pack(str(pack), str(dst), progress=False)
    assert len(os.listdir(dst)) == 12


def test_overwrite_refuses_an_out_that_holds_its_cues(tse_split):
    """``--out`` pointed at the split directory: it holds ``cues.yaml`` and ``cues/audio.json`` (the build's cue
    inputs): refused, naming them, before a header is read; nothing is deleted."""
    case, cues_path, root, _facts = tse_split
    before = _tree(root)
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(case.list_path), "--cues", str(cues_path),
                                       "--root", str(root), "--out", str(root), "--overwrite", "--no-progress"])
    assert result.exit_code == 1
    assert "an input of this build" in result.output and str(cues_path) in result.output
    assert _tree(root) == before
