"""Reading compressed packs (format 1.4, FLAC and Opus blocks) on real speech: every reading API decodes
transparently, a window decodes only the blocks it touches, corrupt blocks are named errors, and Opus keeps the
recorded length and the alignment of a mixture with its targets (loss measured in docs/loader.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile

from factories.compressed import recode
from speechpack.loader.pack import open_pack
from speechpack.loader.pack import blocks as block_codec
from speechpack.loader.pack.blocks import BlockSamples, CorruptBlock
from speechpack.loader.samples import decoded, read_window
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.errors import PackFormatError

RATE = 16000
#: The documented floor of Opus's loss on the LibriVox recordings at the writer's default settings
#: (docs/loader.md, "Compressed packs": measured 15-20 dB per utterance).
OPUS_MIN_SNR_DB = 10.0


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    noise = float(((reference - other) ** 2).sum())
    return float("inf") if noise == 0 else 10 * np.log10(float((reference ** 2).sum()) / noise)


@pytest.fixture
def long_utterance(tmp_path, real_audio, write_list) -> str:
    """A sources pack of one 60 s utterance (the five LibriVox recordings back to back, repeated)."""
    pieces = [soundfile.read(p, dtype="int16")[0] for p in real_audio("pocketsphinx")]
    speech = np.concatenate(pieces * 3)[:60 * RATE]
    wav = tmp_path / "long.wav"
    soundfile.write(wav, speech, RATE, subtype="PCM_16")
    build_wesep(str(write_list([{"key": "long", "spk": ["s"], "src": {"s": [str(wav)]}}], "long.list")),
                BuildOptions(out=str(tmp_path / "long"), progress=False))
    return str(tmp_path / "long")


@pytest.fixture
def mixtures(real_audio, wesep_list, tmp_path) -> str:
    """A tse pack of four real two-speaker mixtures (LibriVox) of 1.3-2.2 s."""
    from factories.wesep_lists import Mix

    p = real_audio("pocketsphinx", 4)
    mixes = [Mix(f"m{i}", (p[i], p[(i + 1) % 4]), seconds=1.3 + 0.3 * i, start=0.2 * i) for i in range(4)]
    build_wesep(str(wesep_list(mixes).list_path), BuildOptions(out=str(tmp_path / "tse"), sample_rate=RATE,
                                                               progress=False))
    return str(tmp_path / "tse")


class DecodedFrames:
    """Counts the frames ``loader.pack.blocks.decode_block`` is asked to decode (a block's ``[start, stop)``)."""

    def __init__(self, monkeypatch):
        self.frames = 0
        self.spans = []
        real = block_codec.decode_block

        def counting(codec, data, channels, frames, rate, start=0, stop=None):
            stop = frames if stop is None else stop
            self.frames += stop - start
            self.spans.append((start, stop))
            return real(codec, data, channels, frames, rate, start, stop)
        monkeypatch.setattr(block_codec, "decode_block", counting)


def test_a_window_of_a_long_utterance_decodes_only_the_frames_under_it(long_utterance, tmp_path, monkeypatch):
    flac = open_pack(recode(long_utterance, tmp_path / "flac", "flac", block_frames=RATE))
    pcm = open_pack(long_utterance)
    counted = DecodedFrames(monkeypatch)
    start = 17 * RATE + 4321  # a 2 s window across three 1 s blocks
    window = flac.read_segment("source", 0, start, start + 2 * RATE)
    assert np.array_equal(window, pcm.read_segment("source", 0, start, start + 2 * RATE))
    # the first block from the window's first frame (libsndfile seeks), the middle one whole, the last to its end
    assert counted.spans == [(4321, RATE), (0, RATE), (0, 4321)]
    assert counted.frames == 2 * RATE  # 2 s decoded of 60
    counted.frames = 0
    out = np.empty(2 * RATE, dtype=np.float32)
    read_window(out, flac, "source", 0, start)
    assert counted.frames == 2 * RATE
    want = np.empty_like(out)
    read_window(want, pcm, "source", 0, start)
    assert np.array_equal(out, want)


def test_flac_reads_equal_pcm16_reads_through_every_api(mixtures, tmp_path):
    pcm = open_pack(mixtures)
    flac = open_pack(recode(mixtures, tmp_path / "flac", "flac", block_frames=5000))
    for i in range(len(pcm)):
        a, b = pcm.sample(i), flac.sample(i)
        assert np.array_equal(a.mix, b.mix) and np.array_equal(a.targets, b.targets)
    for stream in ("mix", "target"):
        for j in range(len(pcm.streams[stream].length)):
            stored, factor = flac.stored_segment(stream, j)
            assert isinstance(stored, BlockSamples)
            view, same = pcm.stored_segment(stream, j)
            assert factor == same and stored.shape == view.shape
            assert np.array_equal(np.asarray(stored), view) and np.array_equal(stored.T, view.T)
            assert np.array_equal(stored[:, 4999:10001], view[:, 4999:10001])
            assert np.array_equal(stored[0, ::512], view[0, ::512])
            assert np.array_equal(decoded(flac, stream, j), decoded(pcm, stream, j))


def _pack_with_block_replaced(pack: str, replace) -> tuple[str, int]:
    """``pack``'s mix stream file with its second block's bytes replaced by ``replace(block)`` (same length), and
    every sha256 and digest made to match, as a writer that produced a bad block would leave it: each file replaced
    by a new one, never rewritten in place (a mapping this process still holds, or the content check's thread
    hashing it, would fault on a file truncated under it)."""
    import hashlib

    def save(path: Path, array: np.ndarray) -> None:
        with open(path.with_suffix(".tmp"), "wb") as fp:
            np.save(fp, array)
        os.replace(path.with_suffix(".tmp"), path)

    root = Path(pack)
    manifest = json.loads((root / "dataset.json").read_text())
    sizes = np.load(root / "columns" / "mix_blocks.npy")
    path = root / "shard-000000" / "mix.npy"
    array = np.load(path)
    start, size = int(sizes[0]), int(sizes[1])
    array[start:start + size] = np.frombuffer(replace(array[start:start + size].tobytes()), dtype=np.uint8)
    save(path, array)
    digests = np.load(root / "shard-000000" / "digests.npy")
    digests[1] = np.frombuffer(hashlib.blake2b(array[start:start + size].tobytes(), digest_size=16).digest(),
                               dtype=np.uint8)
    save(root / "shard-000000" / "digests.npy", digests)
    for name in ("mix.npy", "digests.npy"):
        data = (root / "shard-000000" / name).read_bytes()
        manifest["shards"][0]["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (root / "dataset.json").write_text(json.dumps(manifest))
    return pack, start


@pytest.mark.parametrize("codec", ["flac", "opus"])
def test_a_truncated_block_is_a_named_error_not_audio(mixtures, tmp_path, codec):
    def truncated(block: bytes) -> bytes:
        return block[:len(block) // 2] + bytes(len(block) - len(block) // 2)

    pack = recode(mixtures, tmp_path / codec, codec, block_frames=5000)
    first_block = open_pack(pack).read_segment("mix", 0, 0, 5000)
    _pack_with_block_replaced(pack, truncated)
    opened = open_pack(pack, verify="every-open")
    with pytest.raises(CorruptBlock, match=r"shard-000000/mix\.npy: mix segment 0 \(sample 'm0', byte \d+\): block 1: "
                                           r"does not decode"):
        opened.sample(0)
    assert np.array_equal(opened.read_segment("mix", 0, 0, 5000), first_block)  # the other blocks still read


def test_a_flipped_byte_is_caught_by_its_digest_before_decoding(mixtures, tmp_path, monkeypatch):
    pack = recode(mixtures, tmp_path / "flac", "flac", block_frames=5000)
    path = Path(pack) / "shard-000000" / "mix.npy"
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01  # in the file's last block, at the same size: only the content differs
    path.write_bytes(bytes(data))
    opened = open_pack(pack, verify="off")  # no content check: the digest alone stops it
    counted = DecodedFrames(monkeypatch)
    last = len(opened.streams["mix"].length) - 1
    with pytest.raises(CorruptBlock, match=r"mix segment 3 \(sample 'm3', byte \d+\): block \d+: its bytes differ "
                                           r"from their digest"):
        opened.read_segment("mix", last)
    assert counted.frames < int(opened.streams["mix"].length[last])  # the corrupt block was never decoded


def test_the_content_check_covers_compressed_stream_files(mixtures, tmp_path):
    pack = recode(mixtures, tmp_path / "flac", "flac", block_frames=5000)
    path = Path(pack) / "shard-000000" / "target.npy"
    data = bytearray(path.read_bytes())
    data[200] ^= 0x40
    path.write_bytes(bytes(data))
    opened = open_pack(pack, verify="every-open")
    with pytest.raises(PackFormatError, match=r"target\.npy.*sha256"):
        opened.read_segment("target", 0, 0, 100)


def test_opus_keeps_lengths_and_alignment_within_the_documented_loss(mixtures, tmp_path):
    pcm = open_pack(mixtures)
    opus = open_pack(recode(mixtures, tmp_path / "opus", "opus", block_frames=RATE))
    lags = np.arange(-40, 41)
    for i in range(len(pcm)):
        a, b = pcm.sample(i), opus.sample(i)
        assert b.mix.shape == a.mix.shape and b.targets.shape == a.targets.shape
        assert snr_db(a.mix, b.mix) >= OPUS_MIN_SNR_DB
        for reference, got in ((a.mix[0], b.mix[0]), *((a.targets[k], b.targets[k]) for k in range(len(a.targets)))):
            # sample-aligned: the decoded signal matches the recorded one best at lag 0 (no codec delay left)
            scores = [float(np.dot(reference[40:-40], np.roll(got, lag)[40:-40])) for lag in lags]
            assert lags[int(np.argmax(scores))] == 0
        # the mixture is still the sum of its targets, to within the codec's loss
        assert snr_db(b.mix[0], b.targets.sum(axis=0)) >= OPUS_MIN_SNR_DB - 3


def test_a_training_batch_of_a_long_mixture_decodes_its_windows_only(tmp_path, real_audio, write_list, monkeypatch):
    from speechpack.loader import build_loader

    pieces = [soundfile.read(p, dtype="int16")[0] for p in real_audio("pocketsphinx")]
    speech = np.concatenate(pieces * 3)
    a, b = speech[:60 * RATE], speech[7 * RATE:67 * RATE]
    paths = {}
    for name, audio in (("a", a), ("b", b), ("mix", (a.astype(np.int32) + b) // 2)):
        paths[name] = str(tmp_path / f"{name}.wav")
        soundfile.write(paths[name], audio.astype(np.int16), RATE, subtype="PCM_16")
    line = {"key": "long", "spk": ["a", "b"], "mix": {"default": [paths["mix"]]},
            "src": {"a": [paths["a"]], "b": [paths["b"]]}}
    build_wesep(str(write_list([line], "long.list")), BuildOptions(out=str(tmp_path / "pcm"), progress=False))
    flac = recode(tmp_path / "pcm", tmp_path / "flac", "flac", block_frames=RATE)
    config = {"packs": [{"path": flac}], "dataset_args": {"batch_size": 1, "chunk_len": 2 * RATE, "shuffle": True}}
    counted = DecodedFrames(monkeypatch)
    (batch,) = list(build_loader(config, "train", seed=1, num_workers=0))
    assert batch["wav_mix"].shape[-1] == 2 * RATE
    # the mixture's window and each of its two targets' (one row per target): the 2 s under each, decoded once
    # (the batch's look at the window's sound and its copy share what was decoded)
    assert counted.frames == 3 * 2 * RATE


@pytest.mark.parametrize("codec", ["flac", "opus"])
def test_a_segment_view_decodes_a_frame_once_for_repeated_and_overlapping_slices(mixtures, tmp_path, monkeypatch,
                                                                                 codec):
    pcm = open_pack(mixtures)
    coded = open_pack(recode(mixtures, tmp_path / codec, codec, block_frames=5000))
    whole = np.asarray(coded.stored_segment("mix", 0)[0])  # what every slice must equal (opus: its decode)
    if codec == "flac":
        assert np.array_equal(whole, pcm.stored_segment("mix", 0)[0])
    stored, _ = coded.stored_segment("mix", 0)
    counted = DecodedFrames(monkeypatch)
    assert np.array_equal(stored[:, 1200:7300], whole[:, 1200:7300])
    first = 1200 if codec == "flac" else 0  # opus decodes a block from its first frame
    assert counted.spans == [(first, 5000), (0, 2300)]
    assert np.array_equal(stored[0, 1500:7000], whole[0, 1500:7000])
    assert counted.spans == [(first, 5000), (0, 2300)]  # nothing decoded again
    assert np.array_equal(stored[:, 7000:9000], whole[:, 7000:9000])
    assert counted.spans[2:] == [(0, 4000)]  # the block's kept frames and the new ones, as one span
    view = stored[:, 6000:6100]
    assert not view.flags.writeable and np.array_equal(view, whole[:, 6000:6100])
    assert len(counted.spans) == 3


def test_a_changed_digests_file_is_named_before_any_block_is_trusted(mixtures, tmp_path):
    pack = recode(mixtures, tmp_path / "flac", "flac", block_frames=5000)
    path = Path(pack) / "shard-000000" / "digests.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size: only its sha256 tells
    path.write_bytes(bytes(data))
    with pytest.raises(PackFormatError, match=r"shard-000000/digests\.npy: .*sha256"):
        open_pack(pack, verify="off").read_segment("mix", 0, 0, 10)


def test_a_block_is_checked_against_its_digest_once_per_mapping(mixtures, tmp_path, monkeypatch):
    from speechpack.loader.pack import reader

    pack = open_pack(recode(mixtures, tmp_path / "flac", "flac", block_frames=5000), verify="off")
    checked = []
    real = reader.check_digest

    def counting(data, expected):
        checked.append(len(data))
        return real(data, expected)
    monkeypatch.setattr(reader, "check_digest", counting)
    first = pack.read_segment("mix", 0)
    blocks = len(checked)
    assert blocks == int(pack.blocks["mix"].first[1])  # every block of the segment, once
    assert np.array_equal(pack.read_segment("mix", 0), first) and len(checked) == blocks  # not hashed again
    pack._maps.clear()  # the stream file mapped afresh (as after the mappings' LRU let it go)
    assert np.array_equal(pack.read_segment("mix", 0), first) and len(checked) == 2 * blocks
