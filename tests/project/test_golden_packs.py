"""The golden packs (tests/data/golden/, one per kind and per format minor version 1.0-1.5, made by
tests/data/make_golden.py): the reader keeps opening them (cue banks and speaker labels included), ``validate``
keeps passing them, and the current builder, given the same generated input, still writes the same bytes as each
recipe's newest golden pack.  A
failure here means old packs broke or build output drifted; do not regenerate the golden packs to make it pass
(make_golden.py's docstring says when to run it)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import zlib

import numpy as np
import pytest

from speechpack.loader.pack import open_pack
from speechpack.packer.validate.pack import validate_packs
from speechpack.packer.files import dump_json
from speechpack.schemas.constants import (ASD_SAMPLE_RATE, AUDIO_FULL_SCALE, KINDS, MINOR_BANKS, MINOR_BLOCKS,
                                          MINOR_CUES, MINOR_DEFLATED_COLUMNS, MINOR_TRACKS)
from speechpack.schemas.deflated_columns import deflated_name

import factories.paths

DATA = str(factories.paths.DATA)
sys.path.insert(0, DATA)
import make_golden  # noqa: E402

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

GOLDEN = make_golden.GOLDEN
PACKS = sorted(os.listdir(GOLDEN))


def _newest() -> list[str]:
    """Each recipe's golden pack at the minor its build writes now (its highest): an older one of the same recipe
    (``tse_digests-1.4``, from before deflated columns) stays, for the reader to keep opening."""
    newest: dict[str, str] = {}
    for name in PACKS:
        recipe, version = name.rsplit("-", 1)
        if recipe not in newest or int(version.split(".")[1]) > int(newest[recipe].rsplit(".", 1)[1]):
            newest[recipe] = name
    return sorted(newest.values())


def test_every_kind_and_format_minor_has_a_golden_pack():
    assert sorted(p.rsplit("-", 1)[0] for p in _newest()) == sorted(make_golden.PACKS)
    assert set(make_golden.PACKS.values()) == set(KINDS)
    assert {p.rsplit("-", 1)[1] for p in PACKS} == {f"1.{m}" for m in (0, MINOR_CUES, MINOR_BANKS, MINOR_TRACKS,
                                                                        MINOR_BLOCKS, MINOR_DEFLATED_COLUMNS)}


@pytest.mark.parametrize("name", PACKS)
def test_golden_pack_opens_and_validates(name):
    path = os.path.join(GOLDEN, name)
    pack = open_pack(path)
    golden, version = name.rsplit("-", 1)
    assert pack.kind == make_golden.PACKS[golden]
    with open(os.path.join(path, "dataset.json"), encoding="utf-8") as fp:
        assert f"1.{json.load(fp)['format_minor']}" == version
    report = validate_packs([path], check_hashes=True)
    assert report.ok, report.describe()


def _int16(pack, stream: str, index: int) -> np.ndarray:
    """The stored int16 of one sample's first segment of ``stream`` (float read-back undone by its scale)."""
    segment = pack.segments_of(stream, index)[0]
    audio = pack.read_segment(stream, segment)
    return np.round(audio * AUDIO_FULL_SCALE / pack.streams[stream].scale[segment]).astype(np.int16)


def test_golden_values_read_back_exactly():
    sources = open_pack(os.path.join(GOLDEN, "sources-1.0"))
    assert sources.keys.tolist() == ["utt0", "utt1", "utt2"]
    assert [sources.speakers_of(i) for i in range(3)] == [(s,) for s in make_golden.SPEAKERS]
    for i in range(3):
        np.testing.assert_array_equal(_int16(sources, "source", i)[0, :64], make_golden.samples(i)[:64])

    tse = open_pack(os.path.join(GOLDEN, "tse-1.0"))
    assert tse.keys.tolist() == ["mix1"] and tse.speakers_of(0) == ("spk-a", "spk-b")
    sample = tse.sample(0)
    assert sample.mix.shape == (1, make_golden.FRAMES) and sample.targets.shape == (2, make_golden.FRAMES)
    mix = make_golden.samples(0) // 2 + make_golden.samples(1) // 2
    np.testing.assert_array_equal(_int16(tse, "mix", 0)[0, :64], mix[:64])

    noise = open_pack(os.path.join(GOLDEN, "noise-1.2"))
    assert noise.keys.tolist() == ["mix.wav", "u0.wav", "u1.wav", "u2.wav"]
    assert noise.speakers_of(1) == ("noise",)

    asr = open_pack(os.path.join(GOLDEN, "asr-1.3"))
    texts = [bytes(asr.sample(i).data["text"]).decode("utf-8") for i in range(3)]
    assert texts == [f"golden {s} ünïcode {i}" for i, s in enumerate(make_golden.SPEAKERS)]
    np.testing.assert_array_equal(_int16(asr, "audio", 2)[0, :64], make_golden.samples(2)[:64])


def test_golden_digests_pack_holds_the_tse_packs_streams_and_their_digests():
    """``--digests`` (1.4) adds ``digests.npy`` and changes no stream byte: one blake2b-128 per segment, mix first."""
    import hashlib

    plain, digested = (os.path.join(GOLDEN, name, "shard-000000") for name in ("tse-1.0", "tse_digests-1.4"))
    for name in ("mix.npy", "target.npy", "index.json"):
        with open(os.path.join(plain, name), "rb") as a, open(os.path.join(digested, name), "rb") as b:
            assert a.read() == b.read(), name
    with open(os.path.join(plain, "index.json"), encoding="utf-8") as fp:
        (record,) = json.load(fp)["samples"]
    expected = []
    for stream in ("mix", "target"):
        array = np.load(os.path.join(plain, f"{stream}.npy"))
        for seg in record["streams"][stream]:
            piece = array[seg["offset"]:seg["offset"] + seg["channels"] * seg["length"]].tobytes()
            expected.append(hashlib.blake2b(piece, digest_size=16).digest())
    digests = np.load(os.path.join(digested, "digests.npy"))
    assert digests.dtype == np.uint8 and [row.tobytes() for row in digests] == expected


def test_golden_cue_banks_read_back_exactly():
    """Format 1.1: every cue bank of ``tse_cues`` (enrollment waveforms, muse features, spatial fields, keyword
    phonemes) and the speaker labels read back as the generated resources hold them."""
    pack = open_pack(os.path.join(GOLDEN, "tse_cues-1.1"))
    assert set(pack.cues) == {"audio", "visual", "spatial", "textual"}
    audio = pack.cues["audio"]
    rows = audio.find("spk-a")
    assert [audio.entry_utt_id(r) for r in rows] == ["a2", "a0"]
    for row, index in zip(rows, (2, 0)):
        stored = audio.read(audio.entry_item(row))
        np.testing.assert_array_equal(stored[0], make_golden.samples(index).astype(np.float32) / AUDIO_FULL_SCALE)
    slot_a, slot_b = "mix1::spk-a", "mix1::spk-b"
    visual = pack.cues["visual"]
    features, duration = visual.read(visual.entry_item(visual.find(slot_b)[0]))
    np.testing.assert_array_equal(features, np.arange(18, dtype=np.float32).reshape(6, 3) / 4)
    assert duration == 0.04
    spatial = pack.cues["spatial"]
    fields, duration = spatial.read(spatial.entry_item(spatial.find(slot_b)[0]))
    np.testing.assert_array_equal(fields["azimuth"], np.arange(5, dtype=np.float32) / 8)
    assert fields["elevation"] == 0.0 and duration == 0.02
    fields, duration = spatial.read(spatial.entry_item(spatial.find(slot_a)[0]))
    assert (fields["azimuth"], fields["elevation"], duration) == (0.25, -0.5, None)
    textual = pack.cues["textual"]
    words, keywords = textual.read(textual.entry_item(textual.find(slot_a)[0]))
    assert [w.tolist() for w in words] == [[5, 9, 2], [7]] and keywords.tolist() == [1]
    assert [pack.speaker_label(s) for s in make_golden.SPEAKERS] == [0, 1, 2]


def test_golden_asd_tracks_read_back_exactly():
    """Format 1.3's asd kind: faces, labels, attributes and the track's cut of the conversation audio."""
    pack = open_pack(os.path.join(GOLDEN, "asd-1.3"))
    assert pack.keys.tolist() == [key for key, _, _ in make_golden.ASD_TRACKS]
    conversation = make_golden.samples(0, frames=make_golden.ASD_CONVERSATION)
    for index, (key, first, frames) in enumerate(make_golden.ASD_TRACKS):
        sample = pack.sample(index)
        assert sample.speakers == (key,)
        np.testing.assert_array_equal(sample.data["faces"], make_golden.faces(index, frames))
        assert sample.data["labels"].tolist() == [(index + f) % 2 for f in range(frames)]
        start = first * ASD_SAMPLE_RATE // make_golden.ASD_FPS
        length = frames * ASD_SAMPLE_RATE // make_golden.ASD_FPS
        np.testing.assert_array_equal(_int16(pack, "audio", index)[0], conversation[start:start + length])
        assert pack.attrs["start_sec"][index] == first / make_golden.ASD_FPS
        assert pack.attrs["source_fps"][index] == make_golden.ASD_FPS


def _files(root: str) -> dict[str, bytes]:
    """Every file of the pack."""
    found = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            full = os.path.join(folder, name)
            with open(full, "rb") as fp:
                found[os.path.relpath(full, root)] = fp.read()
    return found


def _input_root(manifest: dict) -> str:
    """Where the pack's input was written: the directory of its recorded input (a list, a manifest or ``wav/``)."""
    return os.path.dirname(manifest["provenance"]["input"]["path"])


def _without_input_paths(pack: str) -> dict[str, bytes]:
    """Every file of ``pack`` by relative path, with the one thing that may differ between builds of the same
    input taken out: the input's directory, which the provenance fields name (``provenance.input.path``,
    ``provenance.options.root``, and an asr sample's ``provenance.path`` in ``index.json``).  It is replaced by
    ``<input>``; the manifest's hashes, sizes and byte total are then those of the files so rewritten, so every
    other byte is still compared."""
    files = _files(pack)
    manifest = json.loads(files.pop("dataset.json"))
    root = _input_root(manifest)
    files = {rel: data.replace(root.encode(), b"<input>") for rel, data in files.items()}
    manifest = json.loads(json.dumps(manifest, ensure_ascii=False).replace(json.dumps(root)[1:-1], "<input>"))
    for group in [manifest["columns"], *manifest["shards"]]:
        for name, entry in group["files"].items():
            data = files[os.path.join(group["directory"], name)]
            entry.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    # a deflated column (1.5) is compared inflated: deflate's bytes are the zlib library's (zlib-ng's differ)
    for name, entry in manifest["columns"].get("deflated", {}).items():
        rel = os.path.join(manifest["columns"]["directory"], deflated_name(name))
        files[rel] = zlib.decompress(files[rel])
        entry.update(sha256=hashlib.sha256(files[rel]).hexdigest(), size=len(files[rel]))
    manifest["totals"]["bytes"] = sum(e["size"] for shard in manifest["shards"] for e in shard["files"].values())
    text = io.StringIO()
    dump_json(manifest, text)
    files["dataset.json"] = text.getvalue().encode("utf-8")
    return files


def test_golden_manifests_are_in_the_packs_json_style():
    """What the rebuild comparison re-dumps is what the writer wrote: sorted keys, one-space indent, UTF-8."""
    for name in PACKS:
        with open(os.path.join(GOLDEN, name, "dataset.json"), encoding="utf-8") as fp:
            raw = fp.read()
        text = io.StringIO()
        dump_json(json.loads(raw), text)
        assert text.getvalue() == raw, name


def test_rebuilding_the_golden_inputs_gives_the_same_bytes(tmp_path):
    inputs = tmp_path / "inputs"
    make_golden.write_inputs(str(inputs))
    for name in _newest():
        out = tmp_path / name
        make_golden.build(name.rsplit("-", 1)[0], str(inputs), str(out))
        golden, rebuilt = _without_input_paths(os.path.join(GOLDEN, name)), _without_input_paths(str(out))
        assert sorted(rebuilt) == sorted(golden), name
        for rel in golden:
            assert rebuilt[rel] == golden[rel], f"{name}/{rel}: bytes differ from the golden pack"
