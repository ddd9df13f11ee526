"""``packer.adapters.kaldi_vectors``: Kaldi scp/ark vectors read as kaldiio reads them, without ever running a command
or reading standard input, and every crafted ark answered by line in bounded time and memory."""

from __future__ import annotations

import os
import struct
import time
import tracemalloc

import numpy as np
import pytest

from factories.recordings import require
from speechpack.packer.adapters.kaldi_vectors import MAX_DIM, read_vector_scp
from speechpack.schemas.errors import SpeechpackError

pytestmark = pytest.mark.fast


def _refusal(scp, lines: list[str]) -> str:
    scp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(SpeechpackError) as err:
        read_vector_scp(str(scp))
    return str(err.value)


@pytest.mark.parametrize("text", [False, True])
@pytest.mark.parametrize("shape", ["vector", "row", "double"])
def test_vectors_read_as_kaldiio_reads_them(tmp_path, text, shape):
    kaldiio = require("kaldiio", "dev")
    rng = np.random.default_rng(3)
    vectors = {f"s1/utt{i}.wav": rng.standard_normal(192).astype(np.float32) for i in range(4)}
    stored = {key: (v[None] if shape == "row" else v.astype(np.float64) if shape == "double" else v)
              for key, v in vectors.items()}
    scp = tmp_path / "embed.scp"
    kaldiio.save_ark(str(tmp_path / "embed.ark"), stored, scp=str(scp), text=text)
    got = read_vector_scp(str(scp))
    reference = dict(kaldiio.load_scp_sequential(str(scp)))
    assert list(got) == list(reference)
    for line, (key, value) in enumerate(reference.items(), start=1):
        assert got[key].line == line and got[key].vector.dtype == np.float32 and got[key].vector.shape == (192,)
        np.testing.assert_array_equal(got[key].vector, np.asarray(value, dtype=np.float32).reshape(-1))


def test_a_file_without_offset_is_one_object_and_lines_may_share_one(tmp_path):
    vector = np.arange(4, dtype=np.float32)
    (tmp_path / "one.vec").write_bytes(b"\0BFV \x04" + struct.pack("<i", 4) + vector.tobytes())
    got = read_vector_scp(str(_scp(tmp_path, [f"a {tmp_path}/one.vec", f"b {tmp_path}/one.vec:0"])))
    np.testing.assert_array_equal(got["a"].vector, vector)
    np.testing.assert_array_equal(got["b"].vector, vector)


def _scp(tmp_path, lines):
    path = tmp_path / "embed.scp"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("form", ["key touch {marker} |", "key touch {marker}|", "key | touch {marker}",
                                  "key ark:touch {marker} |", "key scp:touch {marker} |", "key ark,t:-",
                                  "key -", "key ark:-", "key ark,t:{ark}:0", "key scp:{scp}"])
def test_no_scp_line_runs_a_command_or_reads_stdin(tmp_path, form):
    marker = tmp_path / "MARKER"
    ark = tmp_path / "embed.ark"
    ark.write_bytes(b"\0BFV \x04" + struct.pack("<i", 2) + np.ones(2, np.float32).tobytes())
    scp = tmp_path / "embed.scp"
    line = form.format(marker=marker, ark=ark, scp=scp)
    text = _refusal(scp, [f"good {ark}:0", line])
    assert not marker.exists()
    assert f"{scp}:2: " in text and f"{scp}:1" not in text


CRAFTED = {
    # name: (file bytes or a size to zero-fill, the offset, what the answer says)
    "zeros": (100_000_000, 0, "no Kaldi vector at byte 0"),
    "open bracket and zeros": (b"[", 0, "no closing ']'"),
    "vector of dimension 2^31-1": (b"\0BFV \x04" + struct.pack("<i", 2**31 - 1) + b"\0" * 64, 0,
                                   "dimension 2147483647"),
    "2^31 x 2^31 matrix": (b"\0BFM \x04" + struct.pack("<I", 2**31) + b"\x04" + struct.pack("<I", 2**31), 0,
                           "a matrix of -2147483648 rows"),
    "several rows": (b"\0BFM \x04" + struct.pack("<i", 3) + b"\x04" + struct.pack("<i", 2) + b"\0" * 24, 0,
                     "a matrix of 3 rows"),
    "offset past the end": (b"\0BFV \x04" + struct.pack("<i", 1) + b"\0" * 4, 999999999, "past the end"),
    "compressed matrix": (b"\0BCM " + bytes(range(256)) * 4, 0, "a compressed matrix"),
    "truncated": (b"\0BFV \x04" + struct.pack("<i", 1000) + b"\0" * 40, 0, "truncated: 1000 values need 4000 bytes"),
    "unknown type": (b"\0BXY \x04\0\0\0\0", 0, "unknown binary object type"),
    "text with a word": (b"[ 1.0 two 3.0 ]", 0, "not a number in the text vector: 'two'"),
    "text matrix": (b"[\n 1 2\n 3 4 ]", 0, "a text matrix of 2 rows"),
    "text too long": (b"[ " + b"1 " * (MAX_DIM + 1) + b"]", 0, f"{MAX_DIM + 1} values"),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_arks_are_refused_by_line_in_bounded_time_and_memory(tmp_path, name):
    content, offset, expected = CRAFTED[name]
    ark = tmp_path / "embed.ark"
    with open(ark, "wb") as fp:
        if isinstance(content, int):
            fp.truncate(content)
        else:
            fp.write(content)
            if content == b"[":
                fp.truncate(100_000_000)
    scp = tmp_path / "embed.scp"
    tracemalloc.start()
    started = time.monotonic()
    try:
        text = _refusal(scp, [f"s1/a.wav {ark}:{offset}"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 5
    assert peak < 16 * 2**20
    assert f"{scp}:1: {ark}:{offset}: " in text and expected in text


def test_devices_fifos_and_directories_are_refused_without_reading(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    scp = tmp_path / "embed.scp"
    started = time.monotonic()
    text = _refusal(scp, ["a /dev/zero:0", f"b {fifo}:0", f"c {tmp_path}:0", f"d {tmp_path}/absent.ark:0"])
    assert time.monotonic() - started < 5
    assert text.count("not a regular file") == 3 and f"{scp}:4: {tmp_path}/absent.ark: file not found" in text


def test_objects_of_one_ark_never_overlap_so_each_byte_is_read_once(tmp_path):
    kaldiio = require("kaldiio", "dev")
    ark = tmp_path / "embed.ark"
    kaldiio.save_ark(str(ark), {"u": np.ones(MAX_DIM, np.float32)}, scp=str(tmp_path / "good.scp"))
    start = int((tmp_path / "good.scp").read_text().split(":")[-1])
    # every byte inside the vector as a start: each would be a 256 KB read without the rule
    lines = [f"u {ark}:{start}"] + [f"k{n} {ark}:{start + 1 + n}" for n in range(2000)]
    scp = tmp_path / "embed.scp"
    tracemalloc.start()
    try:
        text = _refusal(scp, lines)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20
    assert text.count("the objects of an ark never overlap") == 2000 and f"{scp}:1:" not in text


def test_every_bad_line_is_named_at_once(tmp_path):
    ark = tmp_path / "embed.ark"
    ark.write_bytes(b"\0BFV \x04" + struct.pack("<i", 2) + np.ones(2, np.float32).tobytes())
    scp = tmp_path / "embed.scp"
    scp.write_bytes(b"a " + str(ark).encode() + b":0\nonlykey\nb \xff" + str(ark).encode() + b":0\n"
                    b"a " + str(ark).encode() + b":0\nc " + str(ark).encode() + b":" + b"9" * 5000 + b"\n"
                    b"d " + str(ark).encode() + b"\0x:0\n")
    with pytest.raises(SpeechpackError) as err:
        read_vector_scp(str(scp))
    text = str(err.value)
    assert f"{scp}: 5 bad line(s)" in text
    assert f"{scp}:2: expected a key and a file" in text
    assert f"{scp}:3: not UTF-8 text (byte 0xff" in text
    assert f"{scp}:4: key 'a' appears twice (first at line 1)" in text
    assert f"{scp}:5: an offset of 5000 digits" in text
    assert f"{scp}:6: " in text and "holds no NUL byte" in text


def test_values_must_be_finite_float32_decimals(tmp_path):
    """NaN, infinities, doubles beyond float32's range and what only Python's ``float`` reads (``1_0``,
    ``Infinity``) are refused by line; a plain decimal vector beside them is read."""
    binary = {"FV": ("<f4", [1.0, np.nan]), "DV": ("<f8", [1e300, 2.0])}
    ark, lines = bytearray(), []
    for key, text in [("nan", b"[ 1 nan ]"), ("inf", b"[ -inf 2 ]"), ("big", b"[ 1e999 ]"), ("under", b"[ 1_0 2 ]"),
                      ("word", b"[ Infinity ]"), ("good", b"[ 1.5e-3 -2 .5 ]")]:
        lines.append(f"{key} {tmp_path}/e.ark:{len(ark)}")
        ark += text + b"\n"
    for token, (dtype, values) in binary.items():
        lines.append(f"{token} {tmp_path}/e.ark:{len(ark)}")
        ark += f"\0B{token} \x04".encode() + struct.pack("<i", 2) + np.array(values, dtype=dtype).tobytes()
    (tmp_path / "e.ark").write_bytes(bytes(ark))
    message = _refusal(tmp_path / "embed.scp", lines)
    assert "7 bad line(s)" in message and "embed.scp:6:" not in message
    for line, reason in [(1, "not a number in the text vector: 'nan'"), (2, "not a number in the text vector: '-inf'"),
                         (3, "beyond float32's range (the first, at index 0, is inf)"),
                         (4, "not a number in the text vector: '1_0'"), (5, "not a number in the text vector"),
                         (7, "at index 1, is nan"), (8, "at index 0, is 1e+300")]:
        assert any(f"embed.scp:{line}: " in row and reason in row for row in message.splitlines()), (line, message)
    lines = lines[5:6]
    np.testing.assert_array_equal(read_vector_scp(str(_scp(tmp_path, lines)))["good"].vector,
                                  np.array([1.5e-3, -2, 0.5], dtype=np.float32))


def test_every_vector_of_one_scp_has_the_first_lines_dimension(tmp_path):
    ark, lines = bytearray(), []
    for key, dim in [("a", 4), ("b", 4), ("c", 3), ("d", 5)]:
        lines.append(f"{key} {tmp_path}/e.ark:{len(ark)}")
        ark += b"\0BFV \x04" + struct.pack("<i", dim) + np.ones(dim, "<f4").tobytes()
    (tmp_path / "e.ark").write_bytes(bytes(ark))
    message = _refusal(tmp_path / "embed.scp", lines)
    assert "2 bad line(s)" in message
    assert "embed.scp:3: an embedding of dimension 3, line 1's has 4" in message
    assert "embed.scp:4: an embedding of dimension 5, line 1's has 4" in message
