"""Cue banks whose enrollment audio is stored with a codec (``--codec flac|opus``; schemas/cue_banks.py, "Compressed
enrollment audio"), read through ``loader.pack.cues``: on real recordings, a FLAC bank's items and training batches
equal the pcm16 bank's bit for bit (0 and 2 workers), an Opus bank's items keep their shape and stay aligned with
the pcm16 audio, and a flipped byte or a crafted ``meta.json`` / ``blocks.npy`` is a named error."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from factories.batch_digests import batches_digest
from factories.cue_corpus import cue
from speechpack.loader.pack import open_pack
from speechpack.media.codecs import CorruptBlock
from speechpack.schemas.errors import PackFormatError

#: 0.1 s blocks: every enrollment (1-2 s of real speech) spans many blocks, the last one short.
BLOCK_SECONDS = 0.1


@pytest.fixture
def cue_packs(corpus):
    """The same corpus and cues built as pcm16, flac and opus packs: ``{codec: pack directory}``."""
    cues = {"audio": cue(corpus.resources["by_speaker"], "random", "spk_id"),
            "spatial": cue(corpus.resources["track"], fields=["azimuth", "elevation"])}
    packs = {"pcm16": corpus.build("pcm16", cues)}
    for codec in ("flac", "opus"):
        packs[codec] = corpus.build(codec, cues, codec=codec, block_seconds=BLOCK_SECONDS)
    return packs


def items(pack: str, cue_name: str = "audio") -> list[np.ndarray]:
    bank = open_pack(pack).cues[cue_name]
    return [bank.read(i) for i in range(bank.num_items)]


def test_a_flac_cue_bank_reads_the_pcm16_banks_items_bit_for_bit(cue_packs):
    bank = open_pack(cue_packs["flac"]).cues["audio"]
    assert bank.codec == "flac" and bank.blocks is not None
    assert len(bank.blocks.size) > bank.num_items, "items span several blocks"
    meta = json.loads((Path(cue_packs["flac"]) / "cues/audio/meta.json").read_text())
    assert (meta["codec"], meta["block_frames"], meta["digests"]) == ("flac", 1600, "blake2b-128")
    want, got = items(cue_packs["pcm16"]), items(cue_packs["flac"])
    assert len(want) == len(got) > 0
    for a, b in zip(want, got):
        assert a.dtype == b.dtype == np.float32 and np.array_equal(a, b)
    pcm = (Path(cue_packs["pcm16"]) / "cues/audio/data.npy").stat().st_size
    assert (Path(cue_packs["flac"]) / "cues/audio/data.npy").stat().st_size < pcm, "the enrollment audio shrank"


@pytest.mark.parametrize("workers", [0, 2])
def test_flac_cue_bank_batches_equal_the_pcm16_banks(cue_packs, workers):
    def config(pack: str) -> dict:
        return {"packs": [{"path": pack}], "dataset_args": {
            "batch_size": 2, "shuffle": True, "chunk_len": 4000,
            "cues": {"audio": {"use": True}, "spatial": {"use": True}}}}
    for state in ("train", "val"):
        want = batches_digest(config(cue_packs["pcm16"]), state, 0, 7, 2)
        assert batches_digest(config(cue_packs["flac"]), state, workers, 7, 2) == want, state


def test_an_opus_cue_bank_keeps_every_items_length_and_stays_aligned(cue_packs):
    bank = open_pack(cue_packs["opus"]).cues["audio"]
    assert bank.codec == "opus"
    for reference, decoded in zip(items(cue_packs["pcm16"]), items(cue_packs["opus"])):
        assert decoded.shape == reference.shape and decoded.dtype == np.float32
        # aligned: the decoded speech correlates with the original at lag 0 (codec delay and pre-skip removed)
        a, b = reference[0] - reference[0].mean(), decoded[0] - decoded[0].mean()
        lag0 = float(a @ b) / float(np.linalg.norm(a) * np.linalg.norm(b))
        shifted = max(abs(float(a[k:] @ b[:-k])) for k in (8, 16, 32)) / float(np.linalg.norm(a) * np.linalg.norm(b))
        assert lag0 > 0.8 and lag0 > shifted, (lag0, shifted)


def test_a_flipped_byte_in_a_compressed_cue_bank_is_named_at_read(cue_packs):
    path = Path(cue_packs["flac"]) / "cues/audio/data.npy"
    raw = bytearray(path.read_bytes())
    raw[-40] ^= 0x55  # inside the last item's last block
    path.write_bytes(bytes(raw))
    bank = open_pack(cue_packs["flac"]).cues["audio"]
    last = bank.num_items - 1
    with pytest.raises(CorruptBlock, match=rf"cues/audio/data.npy item {last} \(cue 'audio'\): block \d+: bytes "
                                           rf"differ from their digest"):
        bank.read(last)
    assert np.array_equal(bank.read(0), items(cue_packs["pcm16"])[0]), "the other items still read"


def rewrite_cue_file(pack: str, name: str, data: bytes) -> None:
    """Replace ``cues/<name>`` and its dataset.json entry (so only the bank checks can find what is wrong)."""
    root = Path(pack)
    (root / "cues" / name).write_bytes(data)
    manifest = json.loads((root / "dataset.json").read_text())
    manifest["cues"]["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (root / "dataset.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize("change, message", [
    ({"codec": "mp3"}, r"meta.json: codec is 'mp3', expected one of flac, opus"),
    ({"block_frames": 0}, r"meta.json: block_frames is 0, expected an integer > 0"),
    ({"digests": None}, r"meta.json: a compressed bank declares codec, block_frames and digests; digests missing"),
])
def test_a_crafted_cue_bank_codec_is_a_named_error(cue_packs, change, message):
    path = Path(cue_packs["flac"]) / "cues/audio/meta.json"
    meta = json.loads(path.read_text())
    meta.update(change)
    meta = {k: v for k, v in meta.items() if v is not None}
    rewrite_cue_file(cue_packs["flac"], "audio/meta.json", json.dumps(meta).encode())
    with pytest.raises(PackFormatError, match=message):
        open_pack(cue_packs["flac"]).cues


def moved_boundary(sizes: np.ndarray, first_item_blocks: int) -> np.ndarray:
    """Item 0's last block 5 bytes longer, item 1's first 5 shorter: the same count and sum, item 1 misplaced."""
    sizes = sizes.copy()
    sizes[first_item_blocks - 1] += 5
    sizes[first_item_blocks] -= 5
    return sizes


@pytest.mark.parametrize("edit, message", [
    (lambda sizes, k: sizes[:-1], r"blocks.npy: \d+ block sizes, the items' lengths need \d+"),
    (lambda sizes, k: np.concatenate([sizes[:-1], sizes[-1:] + 7]),
     r"blocks.npy: the block sizes sum to \d+ bytes, data.npy holds \d+"),
    (moved_boundary, r"items.npy: item 1: offset \d+, its blocks start at byte \d+"),
])
def test_block_sizes_that_do_not_fit_the_bank_are_a_named_error(cue_packs, edit, message):
    import io

    bank = open_pack(cue_packs["flac"]).cues["audio"]
    sizes = np.load(Path(cue_packs["flac"]) / "cues/audio/blocks.npy")
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(edit(sizes, int(bank.blocks.first[1])), dtype="<i8"))
    rewrite_cue_file(cue_packs["flac"], "audio/blocks.npy", buffer.getvalue())
    with pytest.raises(PackFormatError, match=message):
        open_pack(cue_packs["flac"]).cues


def test_a_pcm16_cue_bank_is_written_as_it_always_was(cue_packs):
    bank = Path(cue_packs["pcm16"]) / "cues/audio"
    assert not (bank / "blocks.npy").exists() and not (bank / "digests.npy").exists()
    meta = json.loads((bank / "meta.json").read_text())
    assert not {"codec", "block_frames", "digests"} & set(meta)
    assert np.load(bank / "data.npy").dtype == np.int16


def test_a_mainline_recipe_built_with_flac_enrollments_trains_as_its_pcm16_build(tmp_path):
    """Mainline WeSep's enrollments (spk2enroll.json) become a waveform bank: built with --codec flac, the bank is
    compressed and the recipe's batches equal the pcm16 build's."""
    from factories.recordings import REAL_CORPORA, require_recording
    from factories.wesep_mainline import librimix_split
    from speechpack.packer.adapters.wesep_mainline import MainlineInputs, build_mainline
    from speechpack.packer.build.run import BuildOptions

    package, _, paths = REAL_CORPORA["pocketsphinx"]
    data = tmp_path / "data"
    librimix_split(data, [require_recording(package, path) for path in paths[:4]], mixtures=6)
    inputs = MainlineInputs(list_path=str(data / "shard.list"), enroll=str(data / "spk2enroll.json"))
    packs = {}
    for codec in ("pcm16", "flac"):
        packs[codec] = str(tmp_path / codec)
        build_mainline(inputs, BuildOptions(out=packs[codec], sample_rate=16000, workers=1, progress=False,
                                            codec=codec, block_seconds=0.5))
    compressed = [bank for bank in open_pack(packs["flac"]).cues.values() if bank.representation == "waveform"]
    assert compressed and all(bank.codec == "flac" for bank in compressed)

    def recipe(pack: str) -> dict:
        return {"packs": [{"path": pack}],
                "dataloader_args": {"batch_size": 2, "drop_last": True, "num_workers": 0, "pin_memory": False},
                "dataset_args": {"resample_rate": 16000, "sample_num_per_epoch": 0, "shuffle": True,
                                 "shuffle_args": {"shuffle_size": 2500}, "chunk_len": 8000,
                                 "cues": {"audio": {"use": True}}},
                "model_args": {"tse_model": {"sr": 16000}}, "seed": 42}
    assert batches_digest(recipe(packs["flac"]), "train", 2, 7, 2) == batches_digest(recipe(packs["pcm16"]), "train",
                                                                                     0, 7, 2)
