"""Issue 13, defect 7: path traversal through ``dataset.json``.  Every name a manifest holds is checked by the one
manifest reader (``schemas.manifest_file``) before any path is built from it, so a crafted pack makes ``copy``
write nothing outside its destination and ``validate``/``open_pack``/``inspect`` read nothing outside the pack."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from speechpack.cli import main
from factories import Mix
from speechpack.loader.pack import open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.errors import PackFormatError
from speechpack.schemas.format import ShardEntry
from speechpack.schemas.names import check_component, check_relative_path, check_shard_directory

FAST_MODULE = True  # imports without torch: its tests marked fast join the tier (docs/testing.md)


@pytest.fixture
def real_pack(tmp_path, wesep_list, real_audio):
    """A real tse pack of two shards."""
    librivox = real_audio("pocketsphinx", 3)
    case = wesep_list([Mix("m1", tuple(librivox[:2]), seconds=1.0), Mix("m2", tuple(librivox[1:3]), seconds=1.0)])
    out = tmp_path / "built"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=100_000, progress=False))
    return out


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _edit_manifest(pack: Path, edit) -> None:
    manifest_path = pack / "dataset.json"
    obj = json.loads(manifest_path.read_text())
    edit(obj)
    manifest_path.write_text(json.dumps(obj, indent=1, sort_keys=True))


def _crafted(real_pack: Path, tmp_path: Path, craft: str) -> tuple[Path, str]:
    """A copy of the pack whose manifest points outside it, with the files it points at really there (so that a
    reader that followed the names would succeed); returns the pack and the field the error must name."""
    src = tmp_path / "s1" / "s2" / "src"
    shutil.copytree(real_pack, src)
    if craft == "directory":
        outside = tmp_path / "s1" / "x"  # src/../../x
        shutil.copytree(src / "shard-000000", outside)
        _edit_manifest(src, lambda m: m["shards"][0].update(directory="../../x"))
        return src, "shards[0].directory"
    if craft == "absolute":
        outside = tmp_path / "abs"
        shutil.copytree(src / "shard-000000", outside)
        _edit_manifest(src, lambda m: m["shards"][0].update(directory=str(outside)))
        return src, "shards[0].directory"
    if craft == "file":
        payload = Path(os.path.normpath(src / "shard-000000" / "../../../payload.txt"))
        shutil.copy(src / "shard-000000" / "mix.npy", payload)

        def rename(m):
            files = m["shards"][0]["files"]
            files["../../../payload.txt"] = files.pop("mix.npy")
        _edit_manifest(src, rename)
        return src, "shards[0].files"
    if craft == "cues":
        def add_cues(m):
            m["cues"] = {"directory": "cues", "files": {"cues.yaml": {"size": 1, "sha256": "0" * 64},
                                                       "../../../evil": {"size": 1, "sha256": "0" * 64}}}
        _edit_manifest(src, add_cues)
        return src, "cues.files"
    if craft == "backslash":
        _edit_manifest(src, lambda m: m["shards"][0]["files"].update({"..\\..\\x.npy": m["shards"][0]["files"]
                                                                      ["mix.npy"]}))
        return src, "shards[0].files"
    raise AssertionError(craft)


CRAFTS = ("directory", "absolute", "file", "cues", "backslash")


@pytest.mark.parametrize("craft", CRAFTS)
def test_copy_refuses_traversal(real_pack, tmp_path, craft):
    src, field = _crafted(real_pack, tmp_path, craft)
    dst = tmp_path / "d1" / "d2" / "d3" / "dst"
    before = _tree(tmp_path)
    result = CliRunner().invoke(main, ["copy", str(src), str(dst), "--no-progress"])
    assert result.exit_code != 0
    assert field in result.output and "dataset.json" in result.output
    assert "Traceback" not in result.output
    assert _tree(tmp_path) == before  # nothing written anywhere, inside the destination or outside it
    assert not dst.exists()


@pytest.mark.parametrize("craft", CRAFTS)
def test_validate_open_pack_and_inspect_refuse_traversal(real_pack, tmp_path, craft):
    src, field = _crafted(real_pack, tmp_path, craft)
    with pytest.raises(PackFormatError, match=f"dataset.json.*{re.escape(field)}"):
        open_pack(src)
    report = validate_pack(str(src))
    assert not report.ok and any(field in issue.message for issue in report.errors)
    for command in (["validate", str(src)], ["inspect", str(src)]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code != 0 and field in result.output, (command, result.output)


def test_a_shard_not_named_by_its_position_is_refused(real_pack):
    """A safe but wrong name (shard 1 called shard-000000) is refused too: shard k is shard_dir_name(k)."""
    _edit_manifest(real_pack, lambda m: m["shards"][1].update(directory="shard-000000"))
    with pytest.raises(PackFormatError, match=r"shards\[1\]\.directory: expected 'shard-000001'"):
        open_pack(real_pack)


def test_skipped_file_is_named_by_the_format_only(real_pack):
    _edit_manifest(real_pack, lambda m: m["skipped"].update(count=1, file={"name": "../x", "size": 1,
                                                                           "sha256": "0" * 64}))
    with pytest.raises(PackFormatError, match=r"skipped\.file\.name: expected 'skipped\.json'"):
        open_pack(real_pack)


@pytest.mark.fast
@pytest.mark.parametrize("name", ["..", ".", "", "../x", "a/b", "/etc/passwd", "a\\b", ".tmp-x", ".hidden",
                                  "a\x00b", "x" * 256, "caf\u00e9", 7, None])
def test_unsafe_components_are_refused(name):
    with pytest.raises(PackFormatError, match="where"):
        check_component(name, "where")


@pytest.mark.fast
@pytest.mark.parametrize("name", ["shard-00001", "shard-0000001", "shard-00000a", "../shard-000000", "shard-000000/",
                                  "/shard-000000", "Shard-000000", "shard-\u0661\u0662\u0663\u0664\u0665\u0666"])
def test_shard_directories_follow_the_pattern(name):
    with pytest.raises(PackFormatError, match="not a shard directory name"):
        check_shard_directory(name, "where")


@pytest.mark.fast
def test_accepted_names():
    assert check_shard_directory("shard-000042", "w") == "shard-000042"
    assert check_shard_directory("shard-1234567", "w") == "shard-1234567"
    assert check_component("index.json", "w") == "index.json"
    assert check_relative_path("audio/lookup_keys.npy", "w") == "audio/lookup_keys.npy"
    for bad in ("audio//x.npy", "audio/../x", "/audio/x", "audio/"):
        with pytest.raises(PackFormatError):
            check_relative_path(bad, "w")


@pytest.mark.fast
def test_build_receipts_are_read_with_the_same_checks():
    """``finalize`` reads each shard's receipt as a ``ShardEntry``: the same name rules apply there."""
    entry = {"size": 1, "sha256": "0" * 64}
    with pytest.raises(PackFormatError, match=r"receipt\.directory"):
        ShardEntry.from_dict({"directory": "../../x", "samples": 1, "files": {"mix.npy": entry}}, "receipt")
    with pytest.raises(PackFormatError, match=r"receipt\.files"):
        ShardEntry.from_dict({"directory": "shard-000000", "samples": 1, "files": {"../mix.npy": entry}}, "receipt")
