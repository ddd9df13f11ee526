"""``speechpack export lhotse`` of compressed packs (format 1.4): a one-block segment leaves as its block's bytes (no
re-encoding), a longer one is decoded once and written as FLAC; Lhotse loads the samples the pack's reader returns
(exactly, but for an Opus block's float decode: within one int16 step).  Real recordings."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from lhotse import CutSet

from factories.compressed import recode
from factories.lhotse_export import asr_export_manifest
from speechpack.cli import main
from speechpack.loader import open_pack
from speechpack.schemas.constants import STREAM_AUDIO

#: One step of the pack's int16 storage.
INT16_STEP = 1 / 32768
#: More frames than any clip of ``asr_export_manifest``: every segment is one block.
ONE_BLOCK = 16000 * 30


@pytest.fixture
def pcm16_pack(tmp_path, real_audio):
    result = CliRunner().invoke(main, ["build", "asr-jsonl", "--list", asr_export_manifest(tmp_path, real_audio),
                                       "--out", str(tmp_path / "pcm16"), "--no-progress"])
    assert result.exit_code == 0, result.output
    return tmp_path / "pcm16"


def export(pack, out):
    result = CliRunner().invoke(main, ["export", "lhotse", str(pack), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return CutSet.from_file(str(out / "cuts.jsonl.gz")).to_eager()


def block_bytes(pack, index: int) -> bytes:
    segment = pack.segments_of(STREAM_AUDIO, index)[0]
    blocks = pack.blocks[STREAM_AUDIO]
    first = int(blocks.first[segment])
    start = int(blocks.start[first])
    array = pack.stream_array(int(pack.streams[STREAM_AUDIO].shard[segment]), STREAM_AUDIO)
    return bytes(array[start:start + int(blocks.size[first])])


@pytest.mark.parametrize("codec, extension", [("flac", ".flac"), ("opus", ".opus")])
def test_a_one_block_segment_is_exported_as_its_block_bytes(pcm16_pack, tmp_path, codec, extension):
    pack_dir = recode(pcm16_pack, tmp_path / codec, codec, block_frames=ONE_BLOCK)
    pack = open_pack(pack_dir)
    cuts = export(pack_dir, tmp_path / "export")
    for index, cut in enumerate(cuts):
        source = cut.recording.sources[0].source
        if pack.keys[index] == "loud":  # stored rescaled: float WAV of its decoded values, as for pcm16
            assert source.endswith(".wav")
            continue
        assert source.endswith(extension)
        with open(source, "rb") as fp:
            assert fp.read() == block_bytes(pack, index)
        # FLAC decodes to the stored int16 exactly; Opus to the decoder's float samples, whose int16 rounding is what
        # the pack stores: within one step of it
        np.testing.assert_allclose(cut.load_audio(), pack.sample(index).targets, rtol=0,
                                   atol=0 if codec == "flac" else INT16_STEP)


@pytest.mark.parametrize("codec", ["flac", "opus"])
def test_a_segment_of_several_blocks_is_decoded_once_and_written_as_flac(pcm16_pack, tmp_path, codec):
    pack_dir = recode(pcm16_pack, tmp_path / codec, codec, block_frames=4000)
    pack = open_pack(pack_dir)
    cuts = export(pack_dir, tmp_path / "export")
    for index, cut in enumerate(cuts):
        segment = pack.segments_of(STREAM_AUDIO, index)[0]
        assert int(np.diff(pack.blocks[STREAM_AUDIO].first[segment:segment + 2])[0]) > 1
        if pack.keys[index] != "loud":
            assert cut.recording.sources[0].source.endswith(".flac")
        np.testing.assert_array_equal(cut.load_audio(), pack.sample(index).targets)
