"""``ConvertOptions``: options that cannot work are usage errors (``OptionError``) before any pack is read, and what
a convert records of its encoding is what the build's writer reads back."""

from __future__ import annotations

import pytest

from speechpack.packer.build.encoding import Encoding
from speechpack.packer.convert.run import ConvertOptions, check_apart
from speechpack.schemas.errors import OptionError, SpeechpackError

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("options, words", [
    ({"codec": "mp3"}, "unknown codec"),
    ({"codec": "flac", "opus_bitrate": 24000}, "--opus-bitrate only applies"),
])
def test_options_that_cannot_work_are_refused_at_once(tmp_path, options, words):
    with pytest.raises(OptionError, match=words):
        ConvertOptions(out=str(tmp_path / "out"), **options)


@pytest.mark.parametrize("options, rate, words", [
    ({"codec": "opus"}, 44100, "44100 Hz"),
    ({"codec": "opus", "opus_bitrate": 1000}, 16000, "--opus-bitrate 1000"),
    ({"codec": "flac", "digests": False}, 16000, "--no-digests"),
])
def test_options_the_source_rate_cannot_take_are_usage_errors(tmp_path, options, rate, words):
    with pytest.raises(OptionError, match=words):
        ConvertOptions(out=str(tmp_path / "out"), **options).encoding(rate)


@pytest.mark.parametrize("codec, digests", [("pcm16", False), ("pcm16", True), ("flac", True), ("opus", True)])
def test_the_recorded_options_give_back_the_encoding(tmp_path, codec, digests):
    options = ConvertOptions(out=str(tmp_path / "out"), codec=codec, digests=digests, block_seconds=0.5)
    assert Encoding.from_options(options.recorded(16000)) == options.encoding(16000)


@pytest.mark.parametrize("out", ["pack", "pack/inside", "."])
def test_out_may_be_neither_the_source_nor_inside_it_nor_hold_it(tmp_path, out):
    (tmp_path / "pack").mkdir()
    with pytest.raises(SpeechpackError, match="source pack"):
        check_apart(str(tmp_path / "pack"), str(tmp_path / out))
    check_apart(str(tmp_path / "pack"), str(tmp_path / "elsewhere"))
