"""``speechpack validate`` of a pack with cue banks on object storage (a real S3-protocol server on 127.0.0.1): the
banks are checked where they lie, nothing written to disk (index objects in memory, each payload streamed in
ranges), and every fault a local validate names is named under the object's URL, the same messages in the same
order.
"""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from pathlib import Path

import numpy as np
from click.testing import CliRunner

import speechpack.packer.validate.files as validate_files
from factories.cue_corpus import cue
from factories.cue_split import build_split_pack
from factories.s3 import flip_object_byte, publish
from speechpack.cli import main
from speechpack.packer.validate.pack import validate_pack


def no_temporary_directories(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("validate of a store made a temporary directory")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    monkeypatch.setattr(tempfile, "TemporaryDirectory", refuse)


def rewrite_cue_file(pack, name: str, data: bytes) -> None:
    """Replace ``cues/name`` of a local pack with ``data`` and record its size and hash in ``dataset.json``, so that
    only what the bank checks look at is wrong."""
    (pack / "cues" / name).write_bytes(data)
    manifest = json.loads((pack / "dataset.json").read_text())
    manifest["cues"]["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (pack / "dataset.json").write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_validate_on_a_store_checks_cue_banks_without_a_temporary_directory(s3_server, tse_split, tmp_path,
                                                                            monkeypatch):
    local = tmp_path / "pack"
    build_split_pack(tse_split, local)
    url = publish(local, "cue-validate/train")
    no_temporary_directories(monkeypatch)
    result = CliRunner().invoke(main, ["validate", url], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "cue visual: raw_video, 4 keys, 4 entries, 2 items" in result.output
    assert validate_pack(url).summary["cues"] == validate_pack(str(local)).summary["cues"]
    assert validate_pack(url, check_hashes=False).ok
    # a flipped byte in a payload (streamed) and in an index object (read whole) is named by the object's URL
    for name in ("visual/data.npy", "textual/words.npy", "labels/speakers.npy", "cues.yaml"):
        flip_object_byte(url, f"cues/{name}")
    errors = [str(e) for e in validate_pack(url).errors]
    for name in ("visual/data.npy", "textual/words.npy", "labels/speakers.npy", "cues.yaml"):
        assert any(e.startswith(f"{url}/cues/{name}: sha256") for e in errors), (name, errors)
    result = CliRunner().invoke(main, ["validate", url], catch_exceptions=False)
    assert result.exit_code == 1 and f"{url}/cues/visual/data.npy" in result.output


def test_validate_on_a_store_names_every_cue_fault_a_local_validate_names(s3_server, corpus, tmp_path, monkeypatch):
    """A bank whose entries point past its items, NaN and Inf in a float payload and a payload whose header promises
    more bytes than it has (each recorded in dataset.json, so only the bank checks see them): the store's report is
    the local one's, under the objects' URLs; payloads streamed in ranges of 13 bytes, so the header and the floats
    straddle ranges."""
    local = Path(corpus.build("faults", {
        "audio": cue(corpus.resources["embedding"], key="spk_id", type="npy", format="spk_embedding"),
        "visual": cue(corpus.resources["muse"], type="npy", format="muse_frontend"),
        "spatial": cue(corpus.resources["static"], fields=["azimuth", "elevation"])}))
    rewrite_cue_file(local, "audio/entries.npy", npy_bytes(np.array([0, 1, 2, 99], dtype="<i8")))
    muse = np.load(local / "cues" / "visual" / "data.npy")
    assert muse.dtype == np.float32 and muse.size > 100
    muse[3], muse[-1] = np.nan, np.inf
    rewrite_cue_file(local, "visual/data.npy", npy_bytes(muse))
    rewrite_cue_file(local, "spatial/data.npy", (local / "cues" / "spatial" / "data.npy").read_bytes()[:-8])
    expected = [(str(e.file), e.message) for e in validate_pack(str(local)).errors]
    messages = " | ".join(message for _, message in expected)
    assert "2 NaN/Inf value(s)" in messages and "header promises" in messages and "outside the" in messages, expected
    url = publish(local, "cue-validate/faults")
    no_temporary_directories(monkeypatch)
    monkeypatch.setattr(validate_files, "PAYLOAD_RANGE_BYTES", 13)
    got = [(str(e.file), e.message) for e in validate_pack(url).errors]
    assert got == [(file.replace(str(local), url, 1), message) for file, message in expected]
