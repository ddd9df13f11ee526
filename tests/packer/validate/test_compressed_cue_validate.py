"""``speechpack validate`` of packs whose cue banks store enrollment audio with a codec (real recordings): every
block is checked against its digest and decoded, in a directory and on object storage; a flipped byte is named
(bank file, item, block) even when the file's recorded hash was updated to match it; the summary names the codec."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from factories.cue_corpus import cue
from factories.s3 import flip_object_byte, publish
from speechpack.cli import main
from speechpack.packer.validate.pack import validate_pack


def build(corpus, codec: str) -> Path:
    cues = {"audio": cue(corpus.resources["by_speaker"], "random", "spk_id"),
            "spatial": cue(corpus.resources["track"], fields=["azimuth", "elevation"])}
    return Path(corpus.build(codec, cues, codec=codec, block_seconds=0.2))


def flip(pack: Path, name: str, at: int, record_hash: bool) -> None:
    """Flip a byte of ``cues/<name>``; ``record_hash``: and record the new bytes' hash in dataset.json, so only the
    block checks can tell."""
    path = pack / "cues" / name
    data = bytearray(path.read_bytes())
    data[at] ^= 0x5A
    path.write_bytes(bytes(data))
    if record_hash:
        manifest = json.loads((pack / "dataset.json").read_text())
        manifest["cues"]["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (pack / "dataset.json").write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")


@pytest.mark.parametrize("codec", ["flac", "opus"])
def test_a_compressed_cue_bank_validates_and_its_codec_is_summarised(corpus, codec):
    pack = build(corpus, codec)
    report = validate_pack(str(pack))
    assert report.errors == []
    assert report.summary["cues"]["audio"]["codec"] == codec
    assert "codec" not in report.summary["cues"]["spatial"]
    result = CliRunner().invoke(main, ["validate", str(pack)])
    assert result.exit_code == 0, result.output
    assert "cue audio: waveform" in result.output and f"items, {codec}" in result.output


@pytest.mark.parametrize("record_hash", [True, False])
def test_a_flipped_byte_in_compressed_cue_audio_is_named_by_item_and_block(corpus, record_hash):
    pack = build(corpus, "flac")
    items = np.load(pack / "cues/audio/items.npy")
    flip(pack, "audio/data.npy", -30, record_hash)  # the last item's last block
    errors = [str(e) for e in validate_pack(str(pack)).errors]
    block = [e for e in errors if "bytes differ from their digest" in e]
    assert len(block) == 1, errors
    assert block[0].startswith(f"{pack}/cues/audio/data.npy: item {len(items) - 1}: block ")
    assert any("audio/data.npy: sha256" in e for e in errors) != record_hash, errors


def test_a_crafted_block_table_fails_validate_naming_the_file(corpus):
    import io

    pack = build(corpus, "flac")
    sizes = np.load(pack / "cues/audio/blocks.npy")
    buffer = io.BytesIO()
    np.save(buffer, sizes[:-1])
    (pack / "cues/audio/blocks.npy").write_bytes(buffer.getvalue())
    errors = [str(e) for e in validate_pack(str(pack)).errors]
    assert any(e.startswith(f"{pack}/cues/audio/blocks.npy: {len(sizes) - 1} block sizes, the items' lengths need "
                            f"{len(sizes)}") for e in errors), errors


def test_validate_on_a_store_decodes_compressed_cue_audio_where_it_lies(s3_server, corpus):
    pack = build(corpus, "flac")
    url = publish(pack, "cue-validate/flac")
    report = validate_pack(url)
    assert report.errors == [] and report.summary["cues"] == validate_pack(str(pack)).summary["cues"]
    flip_object_byte(url, "cues/audio/data.npy")
    errors = [str(e) for e in validate_pack(url).errors]
    assert any(e.startswith(f"{url}/cues/audio/data.npy: sha256") for e in errors), errors
    assert any(e.startswith(f"{url}/cues/audio/data.npy: item ") and "block" in e for e in errors), errors
