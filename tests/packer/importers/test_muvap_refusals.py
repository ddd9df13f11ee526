"""``speechpack import muvap`` on hostile MuVAP packs made from the real talking-face video: numbers beyond a
double or 64 bits, a frame rate so small the sample count overflows, a record past its arrays after a bad record,
an ``.npy`` header with a negative shape, a shard count of 10**12, short labels, and a link swapped in while the
import runs -- each a named problem or a refusal naming the file, in seconds, never a traceback or a read from
outside the pack."""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from factories.muvap_packs import edit_index, muvap_avcc_corpus
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.importers import muvap as muvap_import
from speechpack.packer.importers.muvap import import_muvap
from speechpack.schemas.errors import BuildError, PackFormatError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return muvap_avcc_corpus(tmp_path_factory.mktemp("muvap"))


@pytest.fixture
def pack(corpus, tmp_path) -> Path:
    target = tmp_path / "muvap"
    shutil.copytree(corpus.muvap, target)
    return target


def _options(out, **kwargs) -> BuildOptions:
    return BuildOptions(out=str(out), sample_rate=16000, progress=False, **kwargs)


def _problems(pack: Path, out: Path) -> dict:
    with pytest.raises(BuildError) as err:
        import_muvap(str(pack), _options(out))
    assert not out.exists()
    return {p.line: p for p in err.value.problems}


@pytest.mark.parametrize("field", ["source_fps", "start_sec", "audio_mean"])
def test_a_number_beyond_a_double_is_a_named_problem(pack, tmp_path, field):
    edit_index(pack, 1, 0, **{field: 10 ** 400})
    problem = _problems(pack, tmp_path / "out")[2]
    assert problem.key == "conv1:spk2"
    assert problem.reason == f"entry 0: key {field!r} is an integer of 401 digits, beyond the range of a double"


def test_an_offset_beyond_64_bits_is_a_named_problem(pack, tmp_path):
    edit_index(pack, 0, 0, audio_samples=10 ** 30)
    assert "key 'audio_samples' is an integer of 31 digits, beyond 64 bits" in _problems(pack, tmp_path / "o")[1].reason


def test_a_tiny_source_fps_is_named_without_an_overflowed_sample_count(pack, tmp_path):
    edit_index(pack, 2, 0, source_fps=1e-300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "invalid value encountered in cast" was printed before
        problem = _problems(pack, tmp_path / "out")[3]
    assert "source_frames 55 at source_fps 1e-300 would last 5.5e+301 s; no real track is that long" in problem.reason
    assert "-9223372036854775808" not in problem.reason


def _append_copy_past_the_arrays(pack: Path) -> None:
    """A second record in shard 0 that starts where the first ends, which is where the arrays end."""
    path = pack / "shard-000000" / "index.json"
    records = json.loads(path.read_text())
    first = records[0]
    records.append(dict(first, sample_id="conv9:spk9", face_offset=first["source_frames"],
                        label_offset=first["source_frames"], audio_offset=first["audio_samples"]))
    path.write_text(json.dumps(records))
    manifest = json.loads((pack / "dataset.json").read_text())
    (pack / "dataset.json").write_text(json.dumps(dict(manifest, samples=manifest["samples"] + 1)))


def test_a_record_past_the_arrays_after_a_bad_record_is_named(pack, tmp_path):
    _append_copy_past_the_arrays(pack)
    edit_index(pack, 0, 0, dataset=7)  # a bad record: the check of the arrays' ends is left out after it
    problems = _problems(pack, tmp_path / "out")
    assert "key 'dataset' is 7" in problems[1].reason
    assert problems[2].key == "conv9:spk9"
    assert problems[2].reason == "entry 1: rows [40, 80) of faces.npy, which holds 40 rows (the record lies past " \
                                 "the end of the array)"
    # --skip-bad imports the other shards' records instead of dividing by an empty label slice
    summary = import_muvap(str(pack), _options(tmp_path / "partial", skip_bad=True))
    assert summary.build.manifest.totals["samples"] == 2


def test_labels_shorter_than_the_faces_are_named_for_what_differs(pack, tmp_path):
    labels = np.load(pack / "shard-000001" / "labels.npy")
    np.save(pack / "shard-000001" / "labels.npy", labels[:30])
    problem = _problems(pack, tmp_path / "out")[2]
    assert problem.reason == "entry 0: rows [0, 48) of labels.npy, which holds 30 rows (the record lies past the end " \
                             "of the array)"
    assert "samples per channel" not in problem.reason


def test_an_npy_header_with_a_negative_shape_is_refused_by_name(pack, tmp_path):
    path = pack / "shard-000002" / "labels.npy"
    raw = path.read_bytes()
    assert b"(55,)" in raw
    path.write_bytes(raw.replace(b"(55,)", b"(-5,)", 1))
    with pytest.raises(PackFormatError, match=r"labels.npy: unreadable .npy header \(the header's shape \[-5\] has a "
                                              r"negative dimension\)"):
        import_muvap(str(pack), _options(tmp_path / "out"))


def test_a_shard_count_of_10_12_is_answered_from_the_listing_in_seconds(pack, tmp_path):
    manifest = json.loads((pack / "dataset.json").read_text())
    (pack / "dataset.json").write_text(json.dumps(dict(manifest, shards=10 ** 12)))
    started = time.monotonic()
    with pytest.raises(PackFormatError, match=r"shard-000003: missing \(key 'shards' of dataset.json is "
                                              r"1000000000000; the pack holds 3 shard-\* entries\)"):
        import_muvap(str(pack), _options(tmp_path / "out"))
    assert time.monotonic() - started < 5.0  # it built 10**12 names first: 30 s, 3.2 GB, no answer


def _swap_in_a_link_after_the_check(monkeypatch, pack: Path, tmp_path: Path, relative: str) -> Path:
    """Once the pack is checked, replace ``relative`` by a link to a copy of it outside the pack (the same bytes,
    so only the link itself can tell)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / os.path.basename(relative)
    read = muvap_import.read_muvap_pack

    def checked_then_swapped(root):
        checked = read(root)
        os.rename(pack / relative, target)
        os.symlink(target, pack / relative)
        return checked

    monkeypatch.setattr(muvap_import, "read_muvap_pack", checked_then_swapped)
    muvap_import._array.cache_clear()
    return target


@pytest.mark.parametrize("relative", [os.path.join("shard-000000", "audio.npy"), "shard-000001"])
def test_a_link_swapped_in_between_check_and_copy_is_never_followed(pack, tmp_path, monkeypatch, relative):
    _swap_in_a_link_after_the_check(monkeypatch, pack, tmp_path, relative)
    opened = []
    real_open = os.open

    def watched_open(path, flags, *args, **kwargs):
        opened.append((path, flags))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", watched_open)
    with pytest.raises(PackFormatError, match=r"leads outside the MuVAP pack"):
        import_muvap(str(pack), _options(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    name = os.path.basename(relative)
    assert all(flags & os.O_NOFOLLOW for path, flags in opened if path == name)  # every open of it refused links
