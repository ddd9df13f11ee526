"""media.codecs: the codec registry encodes and decodes int16 blocks through libsndfile, exactly for flac, sample
for sample aligned for opus, deterministically, and names every block that does not decode to what it should."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from speechpack.media.codecs import (
    DEFAULT_OPUS_BITRATE,
    REGISTRY,
    CorruptBlock,
    EncodeError,
    block_range,
    check_encoding,
    codec,
    decode_run,
    encode_segment,
    opus_compression_level,
)
from speechpack.schemas.constants import CODECS, OPUS_SAMPLE_RATES
from speechpack.schemas.errors import OptionError

FAST_MODULE = True  # the tests marked fast need neither torch nor recordings

RATE = 16000


@pytest.fixture
def speech(real_audio):
    """Real 16 kHz read speech, int16 ``[1, T]`` (about 25 s of LibriVox)."""
    parts = [soundfile.read(path, dtype="int16")[0] for path in real_audio("pocketsphinx")]
    return np.concatenate(parts)[None, :]


def test_the_registry_has_one_row_per_codec():
    assert tuple(REGISTRY) == CODECS == ("pcm16", "flac", "opus")
    assert [REGISTRY[c].lossless for c in CODECS] == [True, True, False]
    assert REGISTRY["opus"].sample_rates == OPUS_SAMPLE_RATES


def test_flac_blocks_decode_to_the_int16_bit_for_bit_and_cost_at_most_0_6x(speech):
    stereo = np.stack([speech[0], np.roll(speech[0], 777)])
    for audio in (speech, stereo):
        encoded = encode_segment("flac", audio, RATE, RATE)
        assert len(encoded.blocks) == -(-audio.shape[1] // RATE)
        assert all(block.startswith(b"fLaC") for block in encoded.blocks)
        decoded = decode_run("flac", encoded.blocks, RATE, audio.shape[0], audio.shape[1], RATE)
        assert decoded.dtype == np.int16 and np.array_equal(decoded, audio)
        assert sum(map(len, encoded.blocks)) <= 0.6 * audio.nbytes


def test_opus_blocks_keep_the_exact_length_and_stay_sample_aligned(speech):
    for length in (1, 311, 16000, 16001, speech.shape[1]):
        audio = speech[:, :length]
        encoded = encode_segment("opus", audio, RATE, RATE)
        assert encoded.decoded.shape == audio.shape
        assert np.array_equal(decode_run("opus", encoded.blocks, RATE, 1, length, RATE), encoded.decoded)
    # Aligned: the decoded speech correlates with the input best at lag 0 (pre-skip removed, no codec delay).
    decoded = encoded.decoded[0].astype(np.float64)
    original = speech[0].astype(np.float64)
    lags = range(-40, 41)
    scores = [np.dot(original[100 + lag: -100 + lag], decoded[100:-100]) for lag in lags]
    assert list(lags)[int(np.argmax(scores))] == 0
    snr = 10 * np.log10(np.sum(original ** 2) / np.sum((original - decoded) ** 2))
    assert snr > 12.0, snr  # waveform SNR of a perceptual codec at 24 kbit/s (15.7 dB measured, docs/building.md)


def test_encoding_is_byte_identical_on_every_call(speech):
    for name in ("flac", "opus"):
        first = encode_segment(name, speech[:, :40000], RATE, RATE).blocks
        assert encode_segment(name, speech[:, :40000], RATE, RATE).blocks == first


def test_a_run_of_blocks_decodes_only_those_frames(speech):
    encoded = encode_segment("flac", speech, RATE, 4000)
    first, last = block_range(speech.shape[1], 4000, 10_500, 19_000)
    assert (first, last) == (2, 5)
    run = decode_run("flac", encoded.blocks[first:last], RATE, 1, speech.shape[1], 4000, first_block=first)
    assert np.array_equal(run, speech[:, 8000:20000])
    tail = block_range(speech.shape[1], 4000, speech.shape[1] - 1, speech.shape[1])
    run = decode_run("flac", encoded.blocks[tail[0]:tail[1]], RATE, 1, speech.shape[1], 4000, first_block=tail[0])
    assert np.array_equal(run, speech[:, tail[0] * 4000:])


def test_opus_bitrate_sets_the_size_it_asks_for(speech):
    sizes = {}
    for bitrate in (12000, 24000, 48000):
        blocks = encode_segment("opus", speech, RATE, RATE, bitrate).blocks
        sizes[bitrate] = sum(map(len, blocks)) * 8 / (speech.shape[1] / RATE)
    for bitrate, measured in sizes.items():
        # the encoder's target plus the framing of 1 s blocks (Ogg pages and Opus headers, about 1.5 kbit/s)
        assert bitrate * 0.9 < measured < bitrate * 1.1 + 2000, (bitrate, measured)


def test_opus_compression_level_inverts_libsndfiles_bitrate_formula():
    for bitrate in (6000, 6001, 24000, 123457, 256000):
        level = opus_compression_level(bitrate)
        assert int((1.0 - level) * 250000.0 + 6000.0) == bitrate
        assert 0.0 <= level <= 1.0
    assert opus_compression_level(DEFAULT_OPUS_BITRATE) == pytest.approx(1 - 18000.5 / 250000)


@pytest.mark.fast
@pytest.mark.parametrize("args,message", [
    (("opus", 22050, 22050, None), r"--codec opus cannot encode 22050 Hz; Opus encodes sample rates 8000, 12000, "
                                   r"16000, 24000, 48000 only"),
    (("opus", 44100, 44100, None), r"cannot encode 44100 Hz"),
    (("opus", 16000, 16000, 5000), r"--opus-bitrate 5000: Opus through libsndfile encodes 6000 to 256000"),
    (("opus", 16000, 16000, 300000), r"--opus-bitrate 300000"),
    (("flac", 16000, 0, None), r"--block-seconds gives 0 frames per block"),
    (("mp3", 16000, 16000, None), r"unknown codec 'mp3'; the codecs are pcm16, flac, opus"),
])
def test_codec_options_that_cannot_work_are_usage_errors(args, message):
    with pytest.raises(OptionError, match=message):
        check_encoding(*args)


@pytest.mark.fast
def test_every_opus_rate_is_accepted():
    for rate in OPUS_SAMPLE_RATES:
        check_encoding("opus", rate, rate, None)
    check_encoding("flac", 44100, 44100, None)
    assert codec("pcm16").blocked is False


@pytest.mark.parametrize("name", ["flac", "opus"])
def test_a_damaged_block_is_a_named_error_never_audio(speech, name):
    audio = speech[:, :32000]
    blocks = encode_segment(name, audio, RATE, RATE).blocks
    rng = np.random.default_rng(7)
    for position in rng.choice(len(blocks[1]), 40, replace=False):
        damaged = bytearray(blocks[1])
        damaged[position] ^= 0x10
        with pytest.raises(CorruptBlock) as caught:
            decode_run(name, [blocks[0], bytes(damaged)], RATE, 1, 32000, RATE)
        assert caught.value.block == 1 and "block 1: " in str(caught.value)
    with pytest.raises(CorruptBlock, match=r"block 1: does not decode as"):
        decode_run(name, [blocks[0], blocks[1][: len(blocks[1]) // 2]], RATE, 1, 32000, RATE)
    where = caught.value.at("PACK/shard-000000/mix.npy segment 4 (key 'u1')")
    assert str(where).startswith("PACK/shard-000000/mix.npy segment 4 (key 'u1'): block 1: ")


def test_blocks_of_another_shape_are_refused(speech):
    block = encode_segment("flac", speech[:, :8000], RATE, 8000).blocks[0]
    with pytest.raises(CorruptBlock, match=r"decodes to 8000 frames, the segment says 8001"):
        REGISTRY["flac"].decode(block, RATE, 1, 8001)
    with pytest.raises(CorruptBlock, match=r"decodes to more than the 7999 frames the segment says"):
        REGISTRY["flac"].decode(block, RATE, 1, 7999)
    with pytest.raises(CorruptBlock, match=r"1 channel\(s\) at 16000 Hz, the segment has 2 at 16000 Hz"):
        REGISTRY["flac"].decode(block, RATE, 2, 8000)
    with pytest.raises(CorruptBlock, match=r"a FLAC/PCM_16 file, expected OGG/OPUS"):
        REGISTRY["opus"].decode(block, RATE, 1, 8000)


@pytest.mark.fast
def test_audio_a_codec_cannot_store_is_an_encode_error():
    nine = np.zeros((9, 100), dtype=np.int16)
    with pytest.raises(EncodeError, match=r"--codec flac stores at most 8 channels, this audio has 9"):
        encode_segment("flac", nine, RATE, 100)
    assert encode_segment("opus", nine, RATE, 100).decoded.shape == (9, 100)  # Ogg Opus maps up to 255


@pytest.mark.fast
@pytest.mark.parametrize("name", ["flac", "opus"])
def test_a_claimed_length_far_past_the_block_allocates_what_the_block_holds(name):
    """A manifest may claim any frame count (blocks of 2**40 frames); decoding reads in bounded pieces and refuses
    the block, instead of allocating the claim."""
    block = encode_segment(name, np.zeros((1, 160), dtype=np.int16), RATE, 160).blocks[0]
    with pytest.raises(CorruptBlock, match=r"block 0: decodes to 160 frames, the segment says 1099511627776"):
        decode_run(name, [block], RATE, 1, 2 ** 41, 2 ** 40)


def test_part_of_a_flac_block_decodes_to_those_frames_of_the_whole(speech):
    """A FLAC block's ``[start, stop)`` (sought to the FLAC frame holding ``start``) equals the slice of the block
    decoded whole, at FLAC frame edges, inside frames and at the block's ends, mono and stereo."""
    row = codec("flac")
    assert row.seeks and not codec("opus").seeks
    stereo = np.stack([speech[0], np.roll(speech[0], 777)])
    for audio in (speech, stereo):
        channels = audio.shape[0]
        for frames in (RATE, 4 * RATE, 4096 * 3 + 17):
            block = row.encode(np.ascontiguousarray(audio[:, 3 * RATE:3 * RATE + frames]), RATE, None)
            whole = row.decode(block, RATE, channels, frames)
            assert np.array_equal(whole, audio[:, 3 * RATE:3 * RATE + frames])
            edges = sorted({0, 1, 4095, 4096, 4097, 8192, frames // 2, frames - 4096, frames - 1})
            for start in edges:
                for stop in sorted({start + 1, min(start + 4096, frames), frames}):
                    part = row.decode(block, RATE, channels, frames, start, stop)
                    assert part.dtype == np.int16 and part.shape == (channels, stop - start)
                    assert np.array_equal(part, whole[:, start:stop]), (frames, start, stop)


def test_part_of_an_opus_block_decodes_to_those_frames_of_the_whole(speech):
    """Opus decodes from the block's first frame (a decoder started later gives other samples), stopping at
    ``stop``: the frames asked for are those of the whole block's decode."""
    row = codec("opus")
    for frames in (RATE, 16001, 2 * RATE + 311):
        block = row.encode(np.ascontiguousarray(speech[:, :frames]), RATE, None)
        whole = row.decode(block, RATE, 1, frames)
        for start, stop in ((0, 1), (0, 5000), (4321, 9876), (frames - 960, frames), (1, frames)):
            assert np.array_equal(row.decode(block, RATE, 1, frames, start, stop), whole[:, start:stop])


def test_blocks_decode_to_what_soundfile_reads(speech):
    """The blocks are read with libsndfile's ``sf_readf_short`` on the open handle; the samples are those
    soundfile's own ``read(dtype="int16")`` gives, for FLAC and Opus, whole and in part."""
    import io

    for name in ("flac", "opus"):
        row = codec(name)
        block = row.encode(np.ascontiguousarray(speech[:, :RATE]), RATE, None)
        with soundfile.SoundFile(io.BytesIO(block)) as sound:
            expected = sound.read(dtype="int16", always_2d=True).T
            sound.seek(5000)
            tail = sound.read(dtype="int16", always_2d=True).T
        assert np.array_equal(row.decode(block, RATE, 1, RATE), expected)
        assert np.array_equal(row.decode(block, RATE, 1, RATE, 0, 7000), expected[:, :7000])
        if row.seeks:
            assert np.array_equal(row.decode(block, RATE, 1, RATE, 5000, RATE), tail)


def test_a_part_of_a_block_whose_header_disagrees_is_a_named_corrupt_block(speech):
    """A block whose header declares another length than the segment's, or that ends before the frames asked
    for, raises ``CorruptBlock`` from a partial decode too (never a short or padded array)."""
    for name in ("flac", "opus"):
        row = codec(name)
        block = row.encode(np.ascontiguousarray(speech[:, :RATE]), RATE, None)
        with pytest.raises(CorruptBlock, match="header declares 16000 frames, the segment says 16001"):
            row.decode(block, RATE, 1, RATE + 1, 100, 200)
        with pytest.raises(CorruptBlock):
            row.decode(block[: len(block) // 2], RATE, 1, RATE, 9000, RATE)
    with pytest.raises(ValueError):
        codec("flac").decode(b"", RATE, 1, RATE, 5, 5)  # an empty span is the caller's bug
