"""``speechpack import muvap`` (``packer/importers/``): MuVAP-layout packs written from the real talking-face video
convert without decoding media, validate like any pack, and give the batches ``speechpack build avcc`` gives from
the same media (audio within int16 rounding); MuVAP's statistics are recomputed and every mismatch reported; bad
records, bad manifests, foreign shard names, links out of the pack and pickled arrays are refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import factories.paths
from factories.muvap_packs import edit_index, muvap_avcc_corpus, shard_count
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.importers.muvap import STATS_ABS_TOL, import_muvap
from speechpack.packer.validate.pack import validate_packs
from speechpack.schemas.errors import BuildError, PackFormatError

REPO = factories.paths.REPO
#: Small training settings, so three tracks of 2.7-3.7 s make several chunks and batches.
ARGS = dict(train_window=40, hist_frames=10, frame_budget=120, min_batch=2, max_batch=3, audio_mix_prob=0.0,
            val_frame_budget=90)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return muvap_avcc_corpus(tmp_path_factory.mktemp("muvap"))


def _options(out, **kwargs) -> BuildOptions:
    return BuildOptions(out=str(out), sample_rate=16000, progress=False, **kwargs)


@pytest.fixture(scope="module")
def packs(corpus, tmp_path_factory):
    """The MuVAP pack imported through the CLI, and the AVCC build of the same media."""
    from speechpack.packer.adapters.asd_common import AsdBuildOptions
    from speechpack.packer.adapters.avcc import build_avcc

    root = tmp_path_factory.mktemp("packs")
    imported, built = root / "imported", root / "built"
    done = subprocess.run([sys.executable, "-m", "speechpack.cli", "import", "muvap", str(corpus.muvap), "--out", str(imported),
                           "--no-progress"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "every MuVAP statistic matches the stored data" in done.stdout
    build_avcc(str(corpus.tsv), str(corpus.root), AsdBuildOptions(out=str(built), progress=False))
    return imported, built


def _batches(path, state, **args):
    from speechpack.loader import build_loader

    loader = build_loader({"task": "asd", "packs": [{"path": str(path)}], "dataset_args": {**ARGS, **args}}, state,
                          seed=5)
    loader.set_epoch(1)
    return list(loader)


def test_the_muvap_pack_has_several_shards(corpus):
    assert shard_count(corpus.muvap) == 3  # each track in its own shard: offsets restart per shard


@pytest.mark.parametrize("state", ["val", "train"])
def test_imported_batches_equal_the_avcc_build_of_the_same_media(packs, state):
    imported, built = packs
    ours, theirs = _batches(imported, state), _batches(built, state)
    assert len(ours) == len(theirs) > 1
    for a, b in zip(ours, theirs):
        assert a["key"] == b["key"]
        for name in ("faces", "labels", "scored", "model_frames", "start", "source_frames", "valid"):
            np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), err_msg=name)
        np.testing.assert_array_equal(np.asarray(a["source_fps"]), np.asarray(b["source_fps"]))
        # MuVAP stored round(x * 32767) of the WAV's x = v / 32768; the AVCC build stores v: one int16 step apart,
        # times the normalisation gain (at most 10), plus the gains' own 1/32768 relative difference.
        audio_a, audio_b = np.asarray(a["audio"]), np.asarray(b["audio"])
        assert audio_a.shape == audio_b.shape
        assert np.max(np.abs(audio_a - audio_b)) <= 10 * 2 * STATS_ABS_TOL
        assert np.max(np.abs(audio_b)) > 0.1  # real speech, not silence


def test_imported_pack_validates_and_keeps_muvap_facts(packs, corpus):
    from speechpack.loader import open_pack

    imported, _built = packs
    report = validate_packs([str(imported)], check_hashes=True)
    assert report.ok, report.describe()
    pack = open_pack(str(imported))
    assert list(pack.keys) == [t.sample_id for t in corpus.tracks]
    assert [str(c) for c in pack.attrs["clip"]] == ["conv1", "conv1", "conv2"]  # MuVAP's clip: the id before ':'
    np.testing.assert_allclose(pack.attrs["start_sec"], [t.start_sec for t in corpus.tracks])
    manifest = json.loads((imported / "dataset.json").read_text())
    assert manifest["provenance"]["command"] == "import muvap"
    index = json.loads((imported / "shard-000000" / "index.json").read_text())
    first = index["samples"][0]["provenance"]["muvap"]
    assert first["shard"] == "shard-000000" and first["entry"] == 0 and first["dataset"] == "avcc"
    # The audio is MuVAP's int16, bit for bit.
    muvap_audio = np.load(corpus.muvap / "shard-000000" / "audio.npy")
    stored, factor = pack.stored_segment("audio", 0)
    assert factor == 1.0 / 32768 and np.array_equal(stored[0], muvap_audio)


def _copy(corpus, tmp_path) -> Path:
    import shutil

    target = tmp_path / "muvap"
    shutil.copytree(corpus.muvap, target)
    return target


def test_statistics_mismatches_are_each_reported(corpus, tmp_path):
    pack = _copy(corpus, tmp_path)
    edit_index(pack, 0, 0, audio_rms=0.5)
    edit_index(pack, 2, 0, audio_peak=0.01, speaking_ratio=0.0)
    summary = import_muvap(str(pack), _options(tmp_path / "out"))
    found = {(m.key, m.field) for m in summary.mismatches}
    assert found == {("conv1:spk1", "audio_rms"), ("conv2:spk1", "audio_peak"), ("conv2:spk1", "speaking_ratio")}
    text = summary.describe()
    assert "3 statistic(s) of MuVAP's index differ" in text and "audio_rms is 0.5 in MuVAP's index" in text
    assert validate_packs([str(tmp_path / "out")], check_hashes=False).ok  # the recomputed values were kept
    with pytest.raises(BuildError, match=r"3 statistic\(s\) .* nothing was imported") as err:
        import_muvap(str(pack), _options(tmp_path / "strict"), strict_stats=True)
    assert not (tmp_path / "strict").exists()
    assert {p.key for p in err.value.problems} == {"conv1:spk1", "conv2:spk1"}


def test_bad_records_are_listed_by_line_key_and_file(corpus, tmp_path):
    pack = _copy(corpus, tmp_path)
    edit_index(pack, 0, 0, audio_samples=5)                  # breaks the audio invariant
    edit_index(pack, 1, 0, sample_id="conv1:spk1")           # duplicate id
    edit_index(pack, 2, 0, source_fps="fast")                # wrong type
    with pytest.raises(BuildError) as err:
        import_muvap(str(pack), _options(tmp_path / "out"))
    by_line = {p.line: p for p in err.value.problems}
    assert by_line[1].reason.startswith("entry 0: audio_samples 5 != round(40 / 15.0")
    assert by_line[1].path.endswith(os.path.join("shard-000000", "index.json")) and by_line[1].key == "conv1:spk1"
    assert by_line[2].reason == "entry 0: sample_id 'conv1:spk1' repeats line 1"
    assert "key 'source_fps' is 'fast'" in by_line[3].reason
    assert not (tmp_path / "out").exists()
    # --skip-bad imports what is left and records the rest in skipped.json
    edit_index(pack, 2, 0, source_fps=corpus.tracks[2].fps)
    summary = import_muvap(str(pack), _options(tmp_path / "partial", skip_bad=True))
    assert summary.build.manifest.totals["samples"] == 1
    assert [p.line for p in summary.build.skipped] == [1, 2]
    assert (tmp_path / "partial" / "skipped.json").is_file()


def test_the_input_fingerprint_covers_the_manifest_and_the_indexes_of_imported_shards(corpus, tmp_path):
    """``provenance.input.sha256`` (what a resumed import compares): sha256 over ``dataset.json`` and the
    ``index.json`` of every shard with an imported record, each as ``name NUL sha256(bytes)``; a shard whose records
    were all skipped is not part of it.  Computed here from the files, the import takes it from the bytes it
    parsed."""
    import hashlib

    pack = _copy(corpus, tmp_path)
    edit_index(pack, 0, 0, audio_samples=5)  # shard 0's one record is skipped
    summary = import_muvap(str(pack), _options(tmp_path / "out", skip_bad=True))
    assert [p.line for p in summary.build.skipped] == [1]
    expected = hashlib.sha256()
    for name in ["dataset.json"] + [f"shard-{k:06d}/index.json" for k in range(1, shard_count(pack))]:
        expected.update(name.encode() + b"\0" + hashlib.sha256((pack / name).read_bytes()).digest())
    assert summary.build.manifest.provenance["input"]["sha256"] == expected.hexdigest()


def test_sample_ids_with_control_characters_are_refused(corpus, tmp_path):
    pack = _copy(corpus, tmp_path)
    edit_index(pack, 1, 0, sample_id="conv1:\x00spk2")
    with pytest.raises(BuildError) as err:
        import_muvap(str(pack), _options(tmp_path / "out"))
    (problem,) = err.value.problems
    assert problem.line == 2 and "holds a control character (U+0000" in problem.reason


def test_labels_other_than_0_1_are_refused(corpus, tmp_path):
    pack = _copy(corpus, tmp_path)
    labels = np.load(pack / "shard-000001" / "labels.npy")
    labels[3] = 2
    np.save(pack / "shard-000001" / "labels.npy", labels)
    with pytest.raises(BuildError) as err:
        import_muvap(str(pack), _options(tmp_path / "out"))
    (problem,) = err.value.problems
    assert problem.line == 2 and "label 3 is 2" in problem.reason


@pytest.mark.parametrize("change, message", [
    (("format", "muvap-conv-mmap"), r"key 'format' is 'muvap-conv-mmap'"),
    (("version", "4"), r"key 'version' is '4'"),
    (("face_shape", [96, 96]), r"key 'face_shape' is \[96, 96\].*re-run MuVAP's preprocessing"),
    (("audio_normalization", "rms"), r"key 'audio_normalization' is 'rms'"),
    (("samples", 7), r"key 'samples' is 7, the shards' index.json files hold 3"),
    (("shards", 2), r"also holds 'shard-000002'"),
])
def test_bad_manifests_are_named(corpus, tmp_path, change, message):
    pack = _copy(corpus, tmp_path)
    manifest = json.loads((pack / "dataset.json").read_text())
    manifest[change[0]] = change[1]
    (pack / "dataset.json").write_text(json.dumps(manifest))
    with pytest.raises(PackFormatError, match=message):
        import_muvap(str(pack), _options(tmp_path / "out"))


def test_names_and_links_cannot_lead_out_of_the_pack(corpus, tmp_path):
    pack = _copy(corpus, tmp_path)
    (pack / "shard-x").mkdir()
    with pytest.raises(PackFormatError, match=r"also holds 'shard-x'"):
        import_muvap(str(pack), _options(tmp_path / "out"))
    (pack / "shard-x").rmdir()
    outside = tmp_path / "elsewhere"
    os.rename(pack / "shard-000002", outside)
    os.symlink(outside, pack / "shard-000002")
    with pytest.raises(PackFormatError, match=r"shard directory leads outside the MuVAP pack"):
        import_muvap(str(pack), _options(tmp_path / "out"))


def test_pickled_arrays_are_refused_unread(corpus, tmp_path):
    pack = _copy(corpus, tmp_path)
    np.save(pack / "shard-000000" / "labels.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(PackFormatError, match=r"labels.npy: expected uint8 \[N\] in C order, the header says object"):
        import_muvap(str(pack), _options(tmp_path / "out"))
