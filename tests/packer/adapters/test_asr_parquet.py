"""``speechpack build parquet``: Omnilingual parquet (LangASRSchema, corpus/language partitions) to an asr pack,
on the librivox clips; bad rows reported with file, row and column."""

from __future__ import annotations

import builtins
import json

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader import open_pack
from speechpack.packer.adapters.asr_parquet import build_parquet, partition_values, read_parquet_input
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.constants import STREAM_AUDIO, STREAM_TEXT
from speechpack.schemas.errors import BuildError, SpeechpackError
from factories import require
from factories.asr import librivox_clips, write_parquet_dataset



def options(out, **kwargs) -> BuildOptions:
    return BuildOptions(out=str(out), progress=False, **kwargs)


@pytest.fixture
def clips():
    return librivox_clips()


def test_train_split_packs_every_partition_with_text_language_and_corpus(tmp_path, clips):
    root = write_parquet_dataset(tmp_path / "data", clips)
    result = CliRunner().invoke(main, ["build", "parquet", "--path", str(root), "--split", "train",
                                       "--out", str(tmp_path / "pack"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "packed 5 samples" in result.output
    pack = open_pack(str(tmp_path / "pack"))
    assert pack.kind == "asr" and len(pack) == 5  # the dev row of librivox/en is left out
    expected = {  # key -> (clip, corpus, language)
        "corpus=austen/language=en/part-0:0": (3, "austen", "en"),
        "corpus=austen/language=en/part-0:1": (4, "austen", "en"),
        "corpus=librivox/language=en/part-0:0": (0, "librivox", "en"),
        "corpus=librivox/language=en/part-0:1": (1, "librivox", "en"),
        "corpus=librivox/language=fr/part-0:0": (1, "librivox", "fr"),
    }
    assert pack.keys.tolist() == list(expected)
    for i, (clip, corpus, language) in enumerate(expected.values()):
        sample = pack.sample(i)
        assert sample.data[STREAM_TEXT].tobytes().decode("utf-8") == clips[clip].text
        assert pack.attrs["corpus"][i] == corpus and pack.attrs["language"][i] == language
        stored, factor = pack.stored_segment(STREAM_AUDIO, pack.segments_of(STREAM_AUDIO, i)[0])
        original = soundfile.read(clips[clip].path, dtype="int16")[0]
        np.testing.assert_array_equal(stored[0], original)  # 16-bit PCM at the pack's rate passes through
        assert factor == 1 / 32768 and sample.speakers == ("unknown",)
    hours = pack.manifest.hours_by_corpus
    assert set(hours) == {"austen", "librivox"} and set(hours["librivox"]) == {"en", "fr"}
    assert hours["librivox"]["fr"] == pytest.approx(clips[1].frames / 16000 / 3600)
    assert hours["austen"]["en"] == pytest.approx((clips[3].frames + clips[4].frames) / 16000 / 3600)
    counts = pack.manifest.char_counts
    assert counts["a"] == sum(clips[c].text.count("a") for c, _, _ in expected.values())
    assert validate_pack(str(tmp_path / "pack")).ok


def test_without_split_every_row_is_packed_and_resampling_works(tmp_path, clips):
    root = write_parquet_dataset(tmp_path / "data", clips)
    summary = build_parquet(str(root), options(tmp_path / "pack", sample_rate=8000))
    pack = open_pack(summary.out)
    assert len(pack) == 6
    assert pack.num_frames[0] == (clips[3].frames + 1) // 2
    assert pack.orig_sample_rate.tolist() == [16000] * 6


def test_one_file_with_every_column_and_optional_key_and_speaker(tmp_path, clips):
    pa = require("pyarrow", "parquet")
    pq = require("pyarrow.parquet", "parquet")
    from factories.asr import encoded

    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({
        "audio_bytes": [encoded(clips[0].path, "OGG"), encoded(clips[1].path, "FLAC")],
        "audio_size": [None, clips[1].frames], "text": [clips[0].text, clips[1].text],
        # dictionary-encoded labels, as Omnilingual's own parquet files store them
        "split": pa.array(["train"] * 2).dictionary_encode(), "language": pa.array(["en", "en"]).dictionary_encode(),
        "corpus": pa.array(["lv", "lv"]).dictionary_encode(), "key": ["u1", "u2"], "speaker": ["s1", None],
    }), path)
    pack = open_pack(build_parquet(str(path), options(tmp_path / "pack"), split="train").out)
    assert pack.keys.tolist() == ["u1", "u2"] and pack.attrs["corpus"].tolist() == ["lv", "lv"]
    assert pack.speakers.tolist() == ["s1", "unknown"]
    assert abs(int(pack.num_frames[0]) - clips[0].frames) < 2000  # Vorbis pads to its block size


def test_audio_bytes_as_a_list_of_int8(tmp_path, clips):
    pa = require("pyarrow", "parquet")
    pq = require("pyarrow.parquet", "parquet")
    from factories.asr import encoded

    flac = encoded(clips[1].path, "FLAC")
    pq.write_table(pa.table({
        "audio_bytes": pa.array([np.frombuffer(flac, dtype=np.int8).tolist()], type=pa.list_(pa.int8())),
        "text": [clips[1].text], "language": ["en"], "corpus": ["lv"],
    }), tmp_path / "lists.parquet")
    pack = open_pack(build_parquet(str(tmp_path / "lists.parquet"), options(tmp_path / "pack")).out)
    stored = pack.stored_segment(STREAM_AUDIO, 0)[0][0]
    np.testing.assert_array_equal(stored, soundfile.read(clips[1].path, dtype="int16")[0])
    assert pack.keys.tolist() == ["lists:0"]


def test_bad_rows_are_reported_together_with_file_row_and_column(tmp_path, clips):
    root = write_parquet_dataset(tmp_path / "data", clips, rows={
        ("austen", "en", 0): {"audio_bytes": b"RIFF but not really a wave file"},
        ("austen", "en", 1): {"audio_size": clips[4].frames + 7},
        ("librivox", "fr", 0): {"text": "   "},
    })
    with pytest.raises(BuildError) as err:
        build_parquet(str(root), options(tmp_path / "pack"), split="train")
    reasons = {(p.line, p.path.split("data/")[1]): p.reason for p in err.value.problems}
    assert len(reasons) == 3, reasons
    austen = "corpus=austen/language=en/part-0.parquet"
    assert "row 0, column 'audio_bytes': cannot decode audio" in reasons[(1, austen)]
    assert "row 1, column 'audio_size': says" in reasons[(2, austen)] and "decoded audio has" in reasons[(2, austen)]
    assert reasons[(6, "corpus=librivox/language=fr/part-0.parquet")] == "row 0, column 'text': empty text"
    assert not (tmp_path / "pack").exists()

    result = CliRunner().invoke(main, ["build", "parquet", "--path", str(root), "--split", "train", "--skip-bad",
                                       "--out", str(tmp_path / "kept"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert len(open_pack(str(tmp_path / "kept"))) == 2
    skipped = json.loads((tmp_path / "kept" / "skipped.json").read_text())
    assert [s["line"] for s in skipped["skipped"]] == [1, 2, 6]


def test_missing_column_and_partition_conflicts(tmp_path, clips):
    root = write_parquet_dataset(tmp_path / "data", clips, drop=("text",),
                                 layout={("librivox", "en"): [(0, "FLAC", "train")]})
    result = CliRunner().invoke(main, ["build", "parquet", "--path", str(root), "--out", str(tmp_path / "pack"),
                                       "--no-progress"])
    assert result.exit_code == 1
    assert "corpus=librivox/language=en/part-0.parquet: column 'text' is missing" in result.output
    no_split = write_parquet_dataset(tmp_path / "nosplit", clips, drop=("split",),
                                     layout={("librivox", "en"): [(0, "FLAC", "train")]})
    inputs = read_parquet_input(str(no_split), split="train")
    assert "column 'split' is missing" in inputs.problems[0].reason
    clash = write_parquet_dataset(tmp_path / "clash", clips, layout={("librivox", "en"): [(0, "FLAC", "train")]})
    pa = require("pyarrow", "parquet")
    pq = require("pyarrow.parquet", "parquet")
    path = clash / "corpus=librivox" / "language=en" / "part-0.parquet"
    pq.write_table(pq.read_table(path).append_column("language", pa.array(["de"])), path)
    problem = read_parquet_input(str(clash), None).problems[0]
    assert "row 0, column 'language': 'de' disagrees with the partition directory language=en" == problem.reason


def test_partition_values_and_input_errors(tmp_path, monkeypatch):
    require("pyarrow", "parquet")
    assert partition_values("/d/corpus=a%20b/language=en/x.parquet", "/d") == {}  # /d does not exist here
    (tmp_path / "corpus=a b" / "language=en").mkdir(parents=True)
    assert partition_values(str(tmp_path / "corpus=a b" / "language=en" / "x.parquet"), str(tmp_path)) == {
        "corpus": "a b", "language": "en"}
    with pytest.raises(SpeechpackError, match="holds no .parquet files"):
        read_parquet_input(str(tmp_path), None)
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(SpeechpackError, match=r"speechpack\[parquet\]"):
        read_parquet_input(str(tmp_path), None)
