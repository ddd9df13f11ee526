"""``speechpack build wesep --cues``: every cue resource packed into ``cues/``, read back by ``loader.pack.cues``
equal to its source, byte-identical across rebuilds and workers, checked by ``validate``, and every bad input
reported in one pass, naming the cue, the key and the file.

Real data: enrollments are real speakers (pocketsphinx librivox 16 kHz; alsa 48 kHz for resampling), the video is
kphotoalbum's talking-face demo movie (``SPEECHPACK_TEST_VIDEO``, extracted by ``scripts/test.sh``; see
docs/testing.md), plus an H.264 mp4 made here with PyAV.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from speechpack.cli import main
from factories import FULL_SCALE, Mix, Source, at_rate, pack_files
from factories.cue_split import build_split_pack, build_with_cues, write_json
from speechpack.loader import open_pack
from speechpack.packer.validate.pack import validate_pack
from speechpack.schemas.errors import BuildError, PackFormatError, SpeechpackError
from speechpack.schemas.format import Manifest

RATE = 16000


def decode_video(path: str) -> tuple[np.ndarray, float]:
    """The test's own oracle: every frame as RGB, and the average frame rate."""
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(stream)])
        return frames, float(stream.average_rate)


def reference_audio(path: str) -> np.ndarray:
    """``[C, T]`` float64 at the pack's rate, as the packer resamples it."""
    data, rate = soundfile.read(path, dtype="float64", always_2d=True)
    return at_rate(data.T, rate, RATE)


# ---------------------------------------------------------------------------------------------------------------
# A tse split with waveform, raw-video, fields and textual cues, and speaker labels
# ---------------------------------------------------------------------------------------------------------------


def test_every_cue_round_trips_through_the_pack(tse_split, tmp_path):
    _case, cues_path, root, facts = tse_split
    out = tmp_path / "pack"
    summary = build_split_pack(tse_split, out)
    assert "cues: audio, spatial, textual, visual and speaker labels" in summary.describe()
    pack = open_pack(out)
    speaker_a, speaker_b, speaker_c = facts["speakers"]
    assert set(pack.cues) == {"audio", "visual", "spatial", "textual"}
    assert pack.cues_config.cue("audio").policy_type == "random"
    assert (out / "cues" / "cues.yaml").read_bytes() == cues_path.read_bytes()  # verbatim, comments and all

    # audio: the lookup structure of the resource (sorted keys; entries in list order), deduplicated items
    audio = pack.cues["audio"]
    assert audio.representation == "waveform" and audio.sample_rate == RATE and audio.spec.policy_key == "spk_id"
    for speaker, entries in facts["audio"].items():
        rows = audio.find(speaker)
        assert [audio.entry_utt_id(e) for e in rows] == [entry.get("utt_id", "") for entry in entries]
        for entry, row in zip(entries, rows):
            stored = audio.read(audio.entry_item(row))
            expected = reference_audio(entry["path"])
            assert stored.dtype == np.float32 and stored.shape == expected.shape
            if entry["path"] == facts["alsa"]:  # soxr-resampled 48k -> 16k, then quantised
                assert np.abs(stored - expected).max() <= 1.0 / FULL_SCALE
            else:  # 16-bit PCM at the pack's rate: bit-exact
                np.testing.assert_array_equal(stored, expected.astype(np.float32))
    assert audio.find("nobody") == range(0)
    alsa_items = {audio.entry_item(audio.find(speaker_a)[1]), audio.entry_item(audio.find(speaker_c)[1])}
    assert len(alsa_items) == 1 and audio.num_items == 5  # 6 entries, the 48 kHz file stored once
    meta = json.loads((out / "cues" / "audio" / "meta.json").read_text())
    assert meta == {"type": "wav", "format": "waveform", "keys": 4, "entries": 6, "items": 5, "sample_rate": RATE,
                    "resource": {"path": "cues/audio.json",
                                 "sha256": hashlib.sha256((root / "cues/audio.json").read_bytes()).hexdigest()}}
    sources = json.loads((out / "cues" / "audio" / "sources.json").read_text())["items"]
    assert sorted(s["path"] for s in sources) == sorted({e["path"] for es in facts["audio"].values() for e in es})

    # visual: the real talking-face movie and an H.264 mp4, decoded to RGB frames with their frame rate
    visual = pack.cues["visual"]
    assert visual.representation == "raw_video" and visual.num_items == 2
    for key, (entry,) in facts["visual"].items():
        frames, fps = visual.read(visual.entry_item(visual.find(key)[0]))
        expected, expected_fps = decode_video(entry["path"])
        np.testing.assert_array_equal(frames, expected)
        assert frames.dtype == np.uint8 and fps == expected_fps
    movie, fps = visual.read(visual.entry_item(visual.find(f"m1::{speaker_a}")[0]))
    assert movie.shape == (68, 120, 160, 3) and fps == pytest.approx(15.0, abs=1e-3)
    assert visual.read(visual.entry_item(visual.find(f"m1::{speaker_b}")[0]))[0].shape == (12, 48, 64, 3)

    # spatial: a dict per key; fields as float32 (scalars 0-d), only those the item has; duration_sec or None
    spatial = pack.cues["spatial"]
    assert spatial.fields == ("azimuth", "distance", "elevation")
    values, duration = spatial.read(spatial.entry_item(spatial.find(f"m1::{speaker_a}")[0]))
    assert duration == 1.5 and set(values) == {"azimuth", "elevation"}
    assert values["azimuth"].shape == () and values["azimuth"] == np.float32(0.25) and values["elevation"] == -0.5
    values, duration = spatial.read(spatial.entry_item(spatial.find(f"m1::{speaker_b}")[0]))
    assert duration is None and values["distance"] == np.float32(2.0) and values["distance"].dtype == np.float32
    np.testing.assert_array_equal(values["azimuth"], np.linspace(0, 1, 7).astype(np.float32))
    # front.npz with duration 1.5 (twice) and without: duration_sec is part of an item's identity
    assert spatial.num_items == 3 and len(spatial.find(f"m2::{speaker_b}")) == 1
    assert spatial.entry_item(spatial.find(f"m2::{speaker_b}")[0]) == spatial.entry_item(
        spatial.find(f"m1::{speaker_a}")[0])

    # textual: phoneme ids per word (int64) and keyword candidates; identical dicts stored once
    textual = pack.cues["textual"]
    for key, value in facts["textual"].items():
        words, keywords = textual.read(textual.entry_item(textual.find(key)[0]))
        assert [w.tolist() for w in words] == value["phn_label"] and keywords.tolist() == value["kw_candidate"]
        assert all(w.dtype == np.int64 for w in words) and keywords.dtype == np.int64
    assert textual.num_items == 3
    text_sources = json.loads((out / "cues" / "textual" / "sources.json").read_text())["items"]
    assert text_sources[textual.entry_item(textual.find(f"m1::{speaker_a}")[0])]["words"] == \
        ["marianne", "dashwood", "sense"]

    # labels
    assert dict(pack.speaker_labels) == facts["labels"] and pack.speaker_label(speaker_c) == 2
    with pytest.raises(KeyError, match="no speaker label"):
        pack.speaker_label("stranger")

    # dataset.json lists every file of cues/ with its size and hash; cues make the pack format 1.1
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["format_minor"] == 1 and manifest["cues"]["directory"] == "cues"
    on_disk = {str(p.relative_to(out / "cues")): p.read_bytes() for p in (out / "cues").rglob("*") if p.is_file()}
    assert set(manifest["cues"]["files"]) == set(on_disk)
    for name, data in on_disk.items():
        assert manifest["cues"]["files"][name] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert manifest["provenance"]["options"]["cues"] == str(cues_path)
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp-")]


def test_rebuilds_are_byte_identical_whatever_the_workers(tse_split, tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    build_split_pack(tse_split, first, workers=1)
    build_split_pack(tse_split, second, workers=2)
    files = pack_files(first)
    assert any(name.startswith("cues/visual/") for name in files)
    assert files == pack_files(second)
    build_split_pack(tse_split, first, overwrite=True)  # and again, in place
    assert pack_files(first) == files


def test_validate_checks_the_cue_files(tse_split, tmp_path):
    out = tmp_path / "pack"
    build_split_pack(tse_split, out)
    result = CliRunner().invoke(main, ["validate", str(out)])
    assert result.exit_code == 0, result.output
    assert "cue visual: raw_video, 4 keys, 4 entries, 2 items" in result.output
    # a flipped byte in any cue file is found, naming that file
    for name in ("audio/data.npy", "visual/lookup_keys.npy", "labels/labels.npy", "cues.yaml"):
        path = out / "cues" / name
        original = path.read_bytes()
        flipped = bytearray(original)
        flipped[-1] ^= 0x01
        path.write_bytes(bytes(flipped))
        errors = [str(e) for e in validate_pack(str(out)).errors]
        assert any(e.startswith(str(path)) and "sha256" in e for e in errors), errors
        path.write_bytes(original)
    assert validate_pack(str(out)).ok
    # a structural fault, with a manifest that agrees with it: caught by the bank checks, and by open_pack
    entries = out / "cues" / "audio" / "entries.npy"
    np.save(entries, np.array([0, 1, 2, 3, 4, 99], dtype="<i8"))
    manifest = json.loads((out / "dataset.json").read_text())
    data = entries.read_bytes()
    manifest["cues"]["files"]["audio/entries.npy"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (out / "dataset.json").write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")
    errors = [str(e) for e in validate_pack(str(out)).errors]
    assert errors == [f"{entries}: an entry points outside the 5 items"]
    with pytest.raises(PackFormatError, match="entries.npy: an entry points outside"):
        open_pack(out)
    # an unlisted file in cues/ is an error too
    (out / "cues" / "audio" / "notes.txt").write_text("x")
    assert any("notes.txt: file not listed" in str(e) for e in validate_pack(str(out)).errors)


# ---------------------------------------------------------------------------------------------------------------
# A sources split: embeddings, muse front-end features, pickled spatial fields, an optional cue
# ---------------------------------------------------------------------------------------------------------------


def test_embeddings_features_and_pickled_fields(tmp_path, wesep_list, real_audio):
    a, b, c = real_audio("pocketsphinx", 3)
    case = wesep_list([Source("u1", a), Source("u2", b), Source("u3", c)])
    keys = [f"{line.key}::{line.speakers[0]}" for line in case.lines]  # a sources line's key is its source key
    rng = np.random.default_rng(0)
    flat, row = rng.standard_normal(16), rng.standard_normal((1, 16)).astype(np.float32)
    np.save(tmp_path / "e-flat.npy", flat)
    np.save(tmp_path / "e-row.npy", row)
    audio = {keys[0]: [{"path": str(tmp_path / "e-flat.npy")}], keys[1]: [{"path": str(tmp_path / "e-row.npy")}],
             keys[2]: [{"path": str(tmp_path / "e-flat.npy")}, {"path": str(tmp_path / "e-row.npy")}]}
    f2, f3 = rng.standard_normal((8, 30)).astype(np.float32), rng.standard_normal((2, 3, 10))
    np.save(tmp_path / "f2.npy", f2)
    np.save(tmp_path / "f3.npy", f3)
    visual = {keys[0]: [{"utt_id": "v1", "path": str(tmp_path / "f2.npy"), "duration_sec": 1.2}],
              keys[1]: [{"utt_id": "v1", "path": str(tmp_path / "f2.npy"), "duration_sec": 2.4}],
              keys[2]: [{"utt_id": "v3", "path": str(tmp_path / "f3.npy"), "duration_sec": 0.4}]}
    np.save(tmp_path / "pickled.npy", {"azimuth": np.float32(0.3), "elevation": 0.1, "track": np.arange(4)})
    spatial = {key: {"path": str(tmp_path / "pickled.npy"), "duration_sec": 2.0} for key in keys}
    textual = {keys[0]: {"words": ["a"], "phn_label": [[1, 2]], "kw_candidate": [0]}}  # keys[1:] lack it
    for name, obj in (("audio", audio), ("visual", visual), ("spatial", spatial), ("textual", textual)):
        write_json(tmp_path / f"{name}.json", obj)
    cues = tmp_path / "cues.yaml"
    cues.write_text(f"""cues:
  audio: {{type: npy, format: spk_embedding, policy: {{type: fixed, key: mix_spk_id, resource: {tmp_path}/audio.json}}}}
  visual: {{type: npy, format: muse_frontend,
            policy: {{type: fixed, key: mix_spk_id, resource: {tmp_path}/visual.json}}}}
  spatial: {{fields: [azimuth], policy: {{type: fixed, key: mix_spk_id, resource: {tmp_path}/spatial.json}}}}
  textual: {{type: json, format: dae_keyword_phoneme, guaranteed: false,
            policy: {{type: fixed, key: mix_spk_id, resource: {tmp_path}/textual.json}}}}
""")
    with pytest.raises(BuildError) as caught:
        build_with_cues(case, tmp_path / "refused", cues)
    assert [str(p) for p in caught.value.problems] == [
        f"cue 'spatial', key {keys[0]!r}, file {tmp_path / 'pickled.npy'}: is a pickled dict; pass --allow-pickle "
        f"to unpickle it (only for files you trust)"]
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "pack"
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(case.list_path), "--out", str(out),
                                       "--cues", str(cues), "--allow-pickle", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert f"cues: audio, spatial, textual, visual in {out / 'cues'}" in result.output
    pack = open_pack(out)
    embeddings = pack.cues["audio"]
    assert embeddings.num_items == 2  # e-flat.npy once, for two keys
    first, second = (embeddings.read(embeddings.entry_item(e)) for e in embeddings.find(keys[2]))
    np.testing.assert_array_equal(first, flat.astype(np.float32))
    np.testing.assert_array_equal(second, row[0])
    assert first.shape == (16,) and first.dtype == np.float32
    features = pack.cues["visual"]
    assert features.num_items == 3  # one file, two durations: two items
    for key, (entry,) in visual.items():
        array, duration = features.read(features.entry_item(features.find(key)[0]))
        np.testing.assert_array_equal(array, np.load(entry["path"]).astype(np.float32))
        assert duration == entry["duration_sec"] and array.dtype == np.float32
    values, duration = pack.cues["spatial"].read(0)
    assert duration == 2.0 and sorted(values) == ["azimuth", "elevation", "track"]
    assert values["elevation"].shape == () and values["elevation"] == np.float32(0.1)
    np.testing.assert_array_equal(values["track"], np.arange(4, dtype=np.float32))
    assert not any(p.suffix == ".npy" and np.load(p, allow_pickle=False).dtype.hasobject
                   for p in (out / "cues").rglob("*.npy"))  # nothing in the pack is pickled
    textual = pack.cues["textual"]
    assert len(textual.find(keys[0])) == 1 and textual.find(keys[1]) == range(0)  # guaranteed: false
    assert pack.speaker_labels is None and pack.speaker_label("anyone") is None
    assert validate_pack(str(out)).ok


# ---------------------------------------------------------------------------------------------------------------
# Bad input: every problem in one report, naming cue, key and file
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def bad_split(tmp_path, wesep_list, real_audio, real_video):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m1", (a, b))])
    speaker_a, speaker_b = case.lines[0].speakers
    np.save(tmp_path / "two-rows.npy", np.zeros((2, 8), dtype=np.float32))
    np.save(tmp_path / "good.npy", np.zeros(8, dtype=np.float32))
    np.save(tmp_path / "short.npy", np.zeros(4, dtype=np.float32))
    (tmp_path / "corrupt.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    movie = Path(real_video).read_bytes()
    (tmp_path / "truncated.avi").write_bytes(movie[:len(movie) // 2])
    np.save(tmp_path / "pickled.npy", {"azimuth": 0.5})
    np.savez(tmp_path / "good.npz", azimuth=0.5)
    write_json(tmp_path / "audio.json", {speaker_a: [{"path": str(tmp_path / "two-rows.npy")}],
                                         "spk-other": [{"path": str(tmp_path / "missing.npy")}],
                                         # sorted keys: the 8-dim one comes first, the 4-dim one breaks D
                                         "spk-a": [{"path": str(tmp_path / "good.npy")}],
                                         "spk-z": [{"path": str(tmp_path / "short.npy")}]})
    write_json(tmp_path / "visual.json", {f"m1::{speaker_a}": [{"path": str(tmp_path / "corrupt.mp4")}],
                                          f"m1::{speaker_b}": [{"path": str(tmp_path / "truncated.avi")}]})
    write_json(tmp_path / "spatial.json", {f"m1::{speaker_a}": {"path": str(tmp_path / "pickled.npy")},
                                           f"m1::{speaker_b}": {"path": str(tmp_path / "good.npz")}})
    write_json(tmp_path / "spk2label.json", {speaker_a: 0})
    cues = tmp_path / "cues.yaml"
    cues.write_text(f"""cues:
  audio: {{type: npy, format: spk_embedding, policy: {{type: random, key: spk_id, resource: {tmp_path}/audio.json}}}}
  visual: {{policy: {{type: fixed, key: mix_spk_id, resource: {tmp_path}/visual.json}}}}
  spatial: {{policy: {{type: fixed, key: mix_spk_id, resource: {tmp_path}/spatial.json}}}}
  textual: {{type: json, format: dae_keyword_phoneme, policy: {{type: fixed, key: mix_spk_id,
            resource: {tmp_path}/nowhere/textual.json}}}}
labels: {{speaker_label: {{resource: {tmp_path}/spk2label.json}}}}
""")
    return case, cues, speaker_a, speaker_b


def test_every_bad_cue_input_is_reported_in_one_pass(bad_split, tmp_path):
    case, cues, speaker_a, speaker_b = bad_split
    out = tmp_path / "pack"
    with pytest.raises(BuildError, match=r"raw.list: 9 cue problem\(s\); nothing was packed") as caught:
        build_with_cues(case, out, cues)
    found = {(p.cue, p.key, p.path): p.reason for p in caught.value.problems}
    expected = {
        ("textual", None, str(tmp_path / "nowhere/textual.json")): "resource JSON not found",
        ("audio", "spk-other", str(tmp_path / "missing.npy")): "file not found",
        ("audio", speaker_b, str(tmp_path / "audio.json")): "missing from the resource, but the cue is guaranteed",
        ("audio", speaker_a, str(tmp_path / "two-rows.npy")): "must have shape [D] or [1, D], got [2, 8]",
        ("audio", "spk-z", str(tmp_path / "short.npy")): "dimension 4, but the bank's first item has 8",
        ("visual", f"m1::{speaker_a}", str(tmp_path / "corrupt.mp4")): "cannot decode video",
        ("visual", f"m1::{speaker_b}", str(tmp_path / "truncated.avi")): "truncated: the container declares 68 frames",
        ("spatial", f"m1::{speaker_a}", str(tmp_path / "pickled.npy")): "pass --allow-pickle",
        (None, speaker_b, str(tmp_path / "spk2label.json")): "speaker of the list has no label",
    }
    assert set(found) == set(expected)
    for where, reason in expected.items():
        assert reason in found[where], (where, found[where])
    missing_key = next(p for p in caught.value.problems if p.key == speaker_b and p.cue == "audio")
    assert missing_key.line == 1 and "sample 'm1'" in str(missing_key)
    assert not out.exists()


def test_the_cli_prints_every_cue_problem(bad_split, tmp_path):
    case, cues, speaker_a, _ = bad_split
    out = tmp_path / "pack"
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(case.list_path), "--out", str(out),
                                       "--cues", str(cues), "--no-progress"])
    assert result.exit_code == 1
    assert "9 cue problem(s)" in result.stderr
    assert f"  cue 'audio', key {speaker_a!r}, file {tmp_path / 'two-rows.npy'}: a speaker embedding" in result.stderr
    assert f"  cue 'visual', key 'm1::{speaker_a}', file {tmp_path / 'corrupt.mp4'}: cannot decode" in result.stderr
    assert not out.exists()


def test_cues_yaml_problems_are_collected_with_the_others(tmp_path, wesep_list, real_audio):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Mix("m1", (a, b)), '{"key": "broken"'])
    write_json(tmp_path / "audio.json", {})
    cues = tmp_path / "cues.yaml"
    cues.write_text(f"""cues:
  audio: {{policy: {{type: random, key: spk_id, resource: {tmp_path}/audio.json}}}}
  visual: {{type: wav, format: waveform, policy: {{type: fixed, key: spk_id, resource: x.json}}}}
  spatial: {{policy: {{type: random, key: spk_id, resource: x.json}}}}
""")
    with pytest.raises(BuildError, match=r"1 bad line\(s\) and 4 cue problem\(s\)") as caught:
        build_with_cues(case, tmp_path / "pack", cues)
    reasons = [str(p) for p in caught.value.problems]
    assert caught.value.problems[0].line == 2  # the bad list line comes first, then the cue problems
    assert f"cue 'visual', file {cues}: cues.visual: unknown (cue, type, format) triple (visual, wav, waveform)" \
        in reasons[1]
    assert "cues.spatial.policy.type: 'random' is not one of fixed" in reasons[2]
    assert [p.key for p in caught.value.problems[3:]] == list(case.lines[0].speakers)  # audio: both keys missing
    cues.write_text("cues: [unclosed")
    with pytest.raises(SpeechpackError, match="cues.yaml: not valid YAML"):
        build_with_cues(case, tmp_path / "pack", cues)
    with pytest.raises(SpeechpackError, match="nothing.yaml: cues.yaml not found"):
        build_with_cues(case, tmp_path / "pack", tmp_path / "nothing.yaml")


def test_relative_paths_resolve_against_root_else_the_current_directory(tmp_path, wesep_list, real_audio,
                                                                        monkeypatch):
    a, b = real_audio("pocketsphinx", 2)
    case = wesep_list([Source("u1", a)])
    split = tmp_path / "split"
    (split / "enroll").mkdir(parents=True)
    (split / "enroll" / "a.wav").write_bytes(Path(b).read_bytes())
    write_json(split / "cues" / "audio.json", {case.lines[0].speakers[0]: [{"path": "enroll/./a.wav"},
                                                                            {"path": "enroll/a.wav"}]})
    cues = split / "cues.yaml"
    cues.write_text("cues:\n  audio: {policy: {type: random, key: spk_id, resource: cues/audio.json}}\n")
    build_with_cues(case, tmp_path / "with-root", cues, root=str(split))
    bank = open_pack(tmp_path / "with-root").cues["audio"]
    assert bank.num_items == 1  # two spellings of one file: one item
    with pytest.raises(BuildError) as caught:
        build_with_cues(case, tmp_path / "from-elsewhere", cues)
    assert [p.reason for p in caught.value.problems] == [
        "resource JSON not found (policy.resource 'cues/audio.json')"]
    monkeypatch.chdir(split)
    build_with_cues(case, tmp_path / "from-split", cues)
    assert open_pack(tmp_path / "from-split").cues["audio"].find(case.lines[0].speakers[0]) == range(0, 2)


# ---------------------------------------------------------------------------------------------------------------
# dataset.json: the optional cues key
# ---------------------------------------------------------------------------------------------------------------


def _manifest_dict(**extra) -> dict:
    entry = {"size": 1, "sha256": "0" * 64}
    return {"format": "speechpack", "format_version": 1, "format_minor": 1, "kind": "sources", "sample_rate": 16000,
            "streams": [{"name": "source", "dtype": "<i2", "row_shape": [], "file": "source.npy"}],
            "shards": [{"directory": "shard-000000", "samples": 1,
                        "files": {"index.json": entry, "source.npy": entry}}],
            "totals": {"samples": 1, "hours": 0.0, "speakers": 1, "bytes": 2},
            "provenance": {"input": {}, "tool": "speechpack", "tool_version": "0", "command": "x", "options": {}},
            "columns": {"directory": "columns", "files": {n: entry for n in ("samples.npy", "keys.npy",
                                                                             "speakers.npy", "source.npy")}},
            "skipped": {"count": 0}, **extra}


def test_the_manifest_cues_key_is_optional_and_checked():
    entry = {"size": 1, "sha256": "0" * 64}
    without = Manifest.from_dict(_manifest_dict())
    assert without.cues == {} and "cues" not in without.to_dict()
    cues = {"directory": "cues", "files": {"cues.yaml": entry, "audio/data.npy": entry}}
    parsed = Manifest.from_dict(_manifest_dict(cues=cues))
    assert set(parsed.cues) == {"cues.yaml", "audio/data.npy"} and parsed.to_dict()["cues"] == cues
    for files, message in (({"../x": entry, "cues.yaml": entry}, "not a relative path inside cues/"),
                           ({"audio/data.npy": entry}, "cues.yaml is missing")):
        with pytest.raises(PackFormatError, match=message):
            Manifest.from_dict(_manifest_dict(cues={"directory": "cues", "files": files}))
    with pytest.raises(PackFormatError, match="directory: expected 'cues'"):
        Manifest.from_dict(_manifest_dict(cues={"directory": "elsewhere", "files": {"cues.yaml": entry}}))
