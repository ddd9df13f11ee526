"""Issue 13, defects 4 and 3: ``open_pack`` no longer trusts ``columns/*.npy`` beyond their size (hashes and bounds
checked at open, naming the file), and a pack replaced under a reader is a clear error at map time, never the new
pack's audio at the old offsets."""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from factories import Mix
from speechpack.loader.pack import open_pack
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.copy.to_directory import copy_pack
from speechpack.schemas.errors import PackFormatError


def _build(case, out: Path, overwrite: bool = False) -> Path:
    build_wesep(str(case.list_path), BuildOptions(out=str(out), shard_bytes=100_000, progress=False,
                                                  overwrite=overwrite))
    return out


@pytest.fixture
def real_pack(tmp_path, wesep_list, real_audio):
    """A real tse pack of three mixtures over several shards."""
    librivox = real_audio("pocketsphinx", 4)
    case = wesep_list([Mix("m1", tuple(librivox[:2]), seconds=1.0), Mix("m2", tuple(librivox[1:3]), seconds=1.2),
                       Mix("m3", (librivox[0], librivox[3]), seconds=0.8)])
    return _build(case, tmp_path / "pack")


def _edit_column(pack: Path, name: str, edit) -> None:
    path = pack / "columns" / name
    array = np.load(path)
    edit(array)
    np.save(path, array)


def _rehash(pack: Path, name: str) -> None:
    """Make dataset.json agree with an edited column: what a buggy writer (or a careful attacker) would leave."""
    manifest_path = pack / "dataset.json"
    manifest = json.loads(manifest_path.read_text())
    data = (pack / "columns" / name).read_bytes()
    manifest["columns"]["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True))


def _flip_first_byte(array: np.ndarray) -> None:
    raw = bytearray(array[0])
    raw[0] ^= 0x01
    array[0] = bytes(raw)


#: name -> (column file, edit, what the error says once the manifest's hash is made to match, or None when the
#: edit is a consistent pack that only the hash (and validate's comparison with index.json) can tell apart).
EDITS = {
    "offset": ("mix.npy", lambda a: a["offset"].__setitem__(1, a["offset"][1] + 1), r"row 1: offset \d+, expected"),
    "length": ("mix.npy", lambda a: a["length"].__setitem__(0, a["length"][0] - 1),
               r"the segments of shard-000000 need \d+ rows of mix\.npy, but dataset\.json records \d+ bytes"),
    "shard": ("target.npy", lambda a: a["shard"].__setitem__(0, a["shard"][0] + 1), r"row 0: shard 1, but its sample"),
    "scale": ("mix.npy", lambda a: a["scale"].__setitem__(0, 0.25), r"row 0: scale 0.25"),
    "scale_nan": ("target.npy", lambda a: a["scale"].__setitem__(1, np.nan), r"row 1: scale nan"),
    "key_byte": ("keys.npy", _flip_first_byte, None),
    "speaker_byte": ("speakers.npy", _flip_first_byte, None),
    "offset_plus_1e9": ("mix.npy", lambda a: a["offset"].__setitem__(0, a["offset"][0] + 10 ** 9),
                        r"row 0: offset 1000000000, expected 0"),
    "sample_shard": ("samples.npy", lambda a: a["shard"].__setitem__(0, 7), r"row 0: shard 7 is not in \[0, \d\)"),
    "target_first": ("samples.npy", lambda a: a["target_first"].__setitem__(1, 0), r"row 1: target_first is 0"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_column_is_refused_at_open_naming_the_file(real_pack, edit):
    name, change, _ = EDITS[edit]
    open_pack(real_pack)  # the pack as built opens
    _edit_column(real_pack, name, change)
    with pytest.raises(PackFormatError, match=rf"{real_pack / 'columns' / name}: sha256 .* does not match dataset\.json"):
        open_pack(real_pack)


@pytest.mark.parametrize("edit", sorted(e for e, (_, _, says) in EDITS.items() if says))
def test_an_edited_column_with_a_matching_hash_is_refused_by_its_bounds(real_pack, edit):
    name, change, says = EDITS[edit]
    _edit_column(real_pack, name, change)
    _rehash(real_pack, name)
    with pytest.raises(PackFormatError, match=rf"{real_pack / 'columns'}/[a-z_]+\.npy: {says}"):
        open_pack(real_pack)


def test_a_segment_beyond_its_stream_file_is_refused_at_open(real_pack):
    """The last segment of a shard made longer: contiguous offsets, but more rows than the shard's file holds."""
    pack = open_pack(real_pack)
    last = int(np.flatnonzero(pack.streams["mix"].shard == pack.streams["mix"].shard[-1])[-1])
    _edit_column(real_pack, "mix.npy", lambda a: a["length"].__setitem__(last, a["length"][last] + 10 ** 6))
    _rehash(real_pack, "mix.npy")
    with pytest.raises(PackFormatError, match=r"columns/mix\.npy: .*(does not fit in|need \d+ rows of) "):
        open_pack(real_pack)


def test_a_stream_file_of_another_size_is_refused_when_mapped(real_pack):
    pack = open_pack(real_pack)
    path = real_pack / "shard-000000" / "mix.npy"
    with open(path, "ab") as fp:
        fp.write(b"\0" * 64)
    with pytest.raises(PackFormatError, match=rf"{path}: \d+ bytes, dataset\.json records \d+"):
        pack.sample(0)


def test_a_stream_file_with_another_row_count_is_refused_when_mapped(real_pack):
    """Same size, same dtype, but a header promising fewer rows: a reader bounds-checks against the file's rows."""
    pack = open_pack(real_pack)
    path = real_pack / "shard-000000" / "mix.npy"
    array = np.load(path)
    data = path.read_bytes()
    shorter = array[:-32]
    shutil.copy(path, path.with_suffix(".bak"))
    np.save(path, shorter)
    padded = path.read_bytes() + b"\0" * (len(data) - path.stat().st_size)
    path.write_bytes(padded)
    with pytest.raises(PackFormatError, match=rf"{path}: holds {len(shorter)} rows, the pack's mix segments need "
                                              rf"{len(array)}"):
        pack.sample(0)


def _replace(how: str, pack_path: Path, other_case, tmp_path: Path) -> None:
    if how == "build --overwrite":
        _build(other_case, pack_path, overwrite=True)
    else:
        copy_pack(str(_build(other_case, tmp_path / "other")), str(pack_path), progress=False, log=lambda _: None)


@pytest.mark.parametrize("how", ["build --overwrite", "copy"])
def test_a_pack_replaced_under_a_reader_is_an_error_never_the_new_audio(tmp_path, wesep_list, real_audio,
                                                                                 how):
    librivox = real_audio("pocketsphinx", 5)
    codec2 = real_audio("codec2", 4)
    first = wesep_list([Mix(f"a{i}", (librivox[i], librivox[i + 1]), seconds=1.0) for i in range(4)], "a.list")
    second = wesep_list([Mix(f"b{i}", (codec2[i], codec2[(i + 1) % 4]), seconds=1.1, start=0.1) for i in range(4)],
                        "b.list")
    pack_path = _build(first, tmp_path / "pack")
    pack = open_pack(pack_path)
    assert len(set(pack.shard.tolist())) > 1
    before = pack.sample(0)  # shard 0's files are mapped now; later shards are not
    pickled = pickle.dumps(pack)  # as a DataLoader worker receives it: no mappings, the identity travels
    later = int(np.flatnonzero(pack.shard != pack.shard[0])[0])

    _replace(how, pack_path, second, tmp_path)

    again = pack.sample(0)  # the old mapping keeps the old file (replaced by rename): the old audio, not the new
    np.testing.assert_array_equal(again.targets, before.targets)
    assert again.key == before.key
    with pytest.raises(PackFormatError, match=r"shard-00000\d/(mix|target)\.npy: pack changed since it was opened "
                                              r"\(.*dataset\.json was replaced\)"):
        pack.sample(later)
    worker = pickle.loads(pickled)
    with pytest.raises(PackFormatError, match="pack changed since it was opened"):
        worker.sample(0)
    assert open_pack(pack_path).keys[0] == "b0"  # reopened, the new pack reads fine


def test_a_removed_pack_is_named_as_gone(real_pack):
    pack = open_pack(real_pack)
    (real_pack / "dataset.json").unlink()
    with pytest.raises(PackFormatError, match=r"pack changed since it was opened \(.*dataset\.json is gone\)"):
        pack.sample(0)


def test_the_same_pack_staged_again_keeps_reading(real_pack, tmp_path):
    """A ``dataset.json`` with a new inode but the opened bytes describes the same files (a pack staged again by
    ``copy``, or a Pack unpickled where its own verified copy lives): reading goes on, with the same audio."""
    pack = open_pack(real_pack)
    expected = [pack.sample(i).targets for i in range(len(pack))]
    staged = tmp_path / "staged"
    shutil.copytree(real_pack, staged)
    shutil.rmtree(real_pack)
    staged.rename(real_pack)
    worker = pickle.loads(pickle.dumps(pack))
    for i, targets in enumerate(expected):
        np.testing.assert_array_equal(worker.sample(i).targets, targets)
