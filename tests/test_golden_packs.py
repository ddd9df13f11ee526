"""The golden packs (tests/data/golden/, one per kind and format minor version, made by tests/data/make_golden.py):
the reader keeps opening them, ``validate`` keeps passing them, and the current builder, given the same generated
input, still writes the same bytes.  A failure here means old packs broke or build output drifted; do not
regenerate the golden packs to make it pass (make_golden.py's docstring says when to run it)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys

import numpy as np
import pytest

from loader.pack import open_pack
from packer.validate_report import validate_packs
from packer.writer import dump_json
from schemas.constants import AUDIO_FULL_SCALE

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
sys.path.insert(0, DATA)
import make_golden  # noqa: E402

GOLDEN = make_golden.GOLDEN
PACKS = sorted(os.listdir(GOLDEN))


def test_every_kind_has_a_golden_pack():
    assert sorted(p.split("-")[0] for p in PACKS) == sorted(make_golden.KINDS)


@pytest.mark.parametrize("name", PACKS)
def test_golden_pack_opens_and_validates(name):
    path = os.path.join(GOLDEN, name)
    pack = open_pack(path)
    kind, version = name.rsplit("-", 1)
    assert pack.kind == kind
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


def _files(root: str) -> dict[str, bytes]:
    found = {}
    for folder, _, names in os.walk(root):
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
    for name in PACKS:
        out = tmp_path / name
        make_golden.build(name.rsplit("-", 1)[0], str(inputs), str(out))
        golden, rebuilt = _without_input_paths(os.path.join(GOLDEN, name)), _without_input_paths(str(out))
        assert sorted(rebuilt) == sorted(golden), name
        for rel in golden:
            assert rebuilt[rel] == golden[rel], f"{name}/{rel}: bytes differ from the golden pack"
