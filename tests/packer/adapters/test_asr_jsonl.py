"""``speechpack build asr-jsonl``: a one-utterance-per-line manifest to an asr pack, on the librivox clips; spans
cut by offset/duration; bad lines reported with line, key and field."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader import open_pack
from speechpack.packer.adapters.asr_jsonl import build_asr_jsonl, read_asr_manifest
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.constants import STREAM_AUDIO, STREAM_TEXT
from speechpack.schemas.errors import BuildError
from factories.asr import librivox_clips, write_jsonl_manifest


def options(out, **kwargs) -> BuildOptions:
    return BuildOptions(out=str(out), progress=False, **kwargs)


@pytest.fixture
def clips():
    return librivox_clips()


def _stored(pack, i):
    return pack.stored_segment(STREAM_AUDIO, pack.segments_of(STREAM_AUDIO, i)[0])[0]


def test_manifest_with_spans_keys_and_speakers(tmp_path, clips):
    local = tmp_path / "audio"
    local.mkdir()
    shutil.copy(clips[1].path, local / "b.wav")  # relative paths are read from the manifest's directory
    manifest = write_jsonl_manifest(tmp_path / "train.jsonl", [
        {"audio_filepath": clips[0].path, "text": clips[0].text, "language": "en", "corpus": "librivox",
         "speaker": "narrator"},
        {"audio_filepath": "audio/b.wav", "text": clips[1].text, "corpus": "librivox"},
        {"key": "cut", "audio_filepath": clips[2].path, "text": "unless to be", "language": "en",
         "corpus": "austen", "offset": 0.5, "duration": 1.25, "source_id": 7},
        {"audio_filepath": clips[3].path, "text": "tail", "language": "fr", "corpus": "austen", "offset": 2.0},
    ])
    result = CliRunner().invoke(main, ["build", "asr-jsonl", "--list", str(manifest), "--language", "en",
                                       "--out", str(tmp_path / "pack"), "--no-progress"])
    assert result.exit_code == 0, result.output
    pack = open_pack(str(tmp_path / "pack"))
    assert pack.keys.tolist() == [clips[0].path[:-4], "audio/b", "cut", clips[3].path[:-4] + "@2"]
    assert pack.speakers.tolist() == ["narrator", "unknown", "unknown", "unknown"]
    assert pack.attrs["language"].tolist() == ["en", "en", "en", "fr"]
    assert pack.attrs["corpus"].tolist() == ["librivox", "librivox", "austen", "austen"]
    original = [soundfile.read(c.path, dtype="int16")[0] for c in clips]
    np.testing.assert_array_equal(_stored(pack, 0)[0], original[0])
    np.testing.assert_array_equal(_stored(pack, 2)[0], original[2][8000:8000 + 20000])
    np.testing.assert_array_equal(_stored(pack, 3)[0], original[3][32000:])
    assert pack.sample(2).data[STREAM_TEXT].tobytes() == b"unless to be"
    hours = pack.manifest.hours_by_corpus
    assert hours["austen"]["en"] == pytest.approx(20000 / 16000 / 3600)
    assert hours["austen"]["fr"] == pytest.approx((clips[3].frames - 32000) / 16000 / 3600)
    assert validate_pack(str(tmp_path / "pack")).ok


def test_bad_lines_are_reported_together(tmp_path, clips):
    manifest = tmp_path / "bad.jsonl"
    good = {"audio_filepath": clips[0].path, "language": "en", "corpus": "c"}
    manifest.write_text("\n".join([
        json.dumps({**good, "text": clips[0].text}),                       # 1 good
        "{not json",                                                       # 2
        json.dumps({**good, "text": ""}),                                  # 3 empty text
        json.dumps({"audio_filepath": clips[1].path, "text": "x", "corpus": "c"}),  # 4 no language
        json.dumps({**good, "audio_filepath": str(tmp_path / "gone.wav"), "text": "x"}),  # 5 missing file
        json.dumps({**good, "key": "late", "text": "x", "offset": 60.0}),  # 6 span past the end
        json.dumps({**good, "text": "again"}),                             # 7 duplicate (derived) key
        json.dumps({**good, "key": "neg", "text": "x", "duration": -1}),   # 8 bad duration
    ]) + "\n", encoding="utf-8")
    with pytest.raises(BuildError) as err:
        build_asr_jsonl(str(manifest), options(tmp_path / "pack"))
    problems = {p.line: p for p in err.value.problems}
    assert sorted(problems) == [2, 3, 4, 5, 6, 7, 8]
    assert "not valid JSON" in problems[2].reason
    assert problems[3].reason == "text: empty text"
    assert "missing field 'language'" in problems[4].reason
    assert problems[5].reason == "file not found" and problems[5].path.endswith("gone.wav")
    assert "outside the file's" in problems[6].reason and problems[6].key == "late"
    assert "duplicate key (first on line 1)" in problems[7].reason
    assert "duration" in problems[8].reason and problems[8].key == "neg"
    assert not (tmp_path / "pack").exists()
    summary = build_asr_jsonl(str(manifest), options(tmp_path / "kept", skip_bad=True))
    assert len(open_pack(summary.out)) == 1 and len(summary.skipped) == 7


def test_workers_give_the_same_pack(tmp_path, clips):
    manifest = write_jsonl_manifest(tmp_path / "m.jsonl", [
        {"audio_filepath": c.path, "text": c.text, "language": "en", "corpus": "lv"} for c in clips])
    one = build_asr_jsonl(str(manifest), options(tmp_path / "one"))
    two = build_asr_jsonl(str(manifest), options(tmp_path / "two", workers=2))
    for name in ("audio.npy", "text.npy", "index.json"):
        assert (tmp_path / "one" / "shard-000000" / name).read_bytes() == \
            (tmp_path / "two" / "shard-000000" / name).read_bytes()
    assert one.manifest.char_counts == two.manifest.char_counts


def test_reading_keeps_unknown_fields_as_provenance(tmp_path, clips):
    manifest = write_jsonl_manifest(tmp_path / "m.jsonl", [
        {"audio_filepath": clips[0].path, "text": "a", "language": "en", "corpus": "c", "wer": 0.1}])
    line = read_asr_manifest(str(manifest)).lines[0]
    assert line.extra == {"wer": 0.1} and line.offset is None


def test_array_job_slices_and_finalize_equal_one_build(tmp_path, clips):
    manifest = write_jsonl_manifest(tmp_path / "m.jsonl", [
        {"audio_filepath": c.path, "text": c.text, "language": "en", "corpus": "lv"} for c in clips])
    runner = CliRunner()
    common = ["build", "asr-jsonl", "--list", str(manifest), "--shard-size", "150KB", "--no-progress"]
    assert runner.invoke(main, common + ["--out", str(tmp_path / "one")]).exit_code == 0
    for part in ("0/2", "1/2"):
        result = runner.invoke(main, common + ["--out", str(tmp_path / "sliced"), "--shards", part])
        assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["finalize", str(tmp_path / "sliced")])
    assert result.exit_code == 0, result.output
    one, sliced = open_pack(str(tmp_path / "one")), open_pack(str(tmp_path / "sliced"))
    assert len(one.manifest.shards) > 2
    assert one.manifest.hours_by_corpus == sliced.manifest.hours_by_corpus
    assert one.manifest.char_counts == sliced.manifest.char_counts
    for shard in one.manifest.shards:
        for name in ("audio.npy", "text.npy"):
            assert (tmp_path / "one" / shard.directory / name).read_bytes() == \
                (tmp_path / "sliced" / shard.directory / name).read_bytes()
