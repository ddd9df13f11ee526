"""What a tar claims costs its writer nothing: a member declaring 100 GiB in a 50 KB tar (GNU sparse), a gzip
stream that expands a thousandfold.  Every such tar gets a named answer in seconds, in bounded memory
(``packer.adapters.tar_members``: members over ``MAX_MEMBER_BYTES`` are refused by name, compressed tars hold at
most ``MAX_HELD_BYTES``).  The builds run in a child process whose address space is capped, and whose peak
resident memory is measured."""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

import pytest

from speechpack.packer.adapters import tar_members
from speechpack.packer.adapters.tar_members import MAX_MEMBER_BYTES, HeldBytes, TarMember
from speechpack.packer.adapters.wesep_shards import read_wesep_shards
from speechpack.packer.audio import AudioError
from speechpack.schemas.errors import SpeechpackError

import factories.paths

REPO = str(factories.paths.REPO)
#: The child's address space: far below what any claimed size would need, well above what a build uses.
ADDRESS_SPACE = 6 << 30
#: Peak resident memory a refused build may reach (a build of a few samples needs about 200 MB).
PEAK_RSS = 600 << 20
#: Seconds a refused build may take.
SECONDS = 60
HUGE = 100 << 30


#: The child: caps its address space, runs the command line, and reports its peak resident memory (and its
#: workers') on the last line of stderr, however the command ends.  Its own peak is VmHWM, of its address space
#: alone: Linux carries ``ru_maxrss`` across ``execve``, so that would count the forking test process's memory.
CHILD = """
import re, resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from speechpack.cli import main
try:
    main(sys.argv[2:], prog_name="speechpack")
finally:
    with open("/proc/self/status") as status:
        own = int(re.search(r"^VmHWM:\\s+(\\d+) kB", status.read(), re.M).group(1))
    peak = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(f"peak-rss-kib {peak}", file=sys.stderr)
"""


def measured_build(list_path: Path, out: Path, *extra: str) -> tuple[int, str, float, int]:
    """``speechpack build wesep-shards`` in a child limited to ``ADDRESS_SPACE``: (exit status, output, seconds,
    peak resident bytes)."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", CHILD, str(ADDRESS_SPACE), "build", "wesep-shards", "--list",
                           str(list_path), "--out", str(out), "--no-progress", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=SECONDS * 2)
    seconds = time.monotonic() - start
    *rest, last = done.stderr.rstrip("\n").split("\n")
    assert last.startswith("peak-rss-kib "), done.stderr
    return done.returncode, done.stdout + "\n".join(rest), seconds, int(last.split()[1]) * 1024


def gnu_tar(folder: Path, tar_path: Path, names: list[str]) -> None:
    subprocess.run(["tar", "--sparse", "--format=gnu", "-cf", str(tar_path), "-C", str(folder), *names], check=True)


def real_sample(real_audio, folder: Path, key: str) -> list[str]:
    """``key.spk`` and ``key.wav`` (one second of real speech) in ``folder``: the member names."""
    import soundfile

    [path] = real_audio("pocketsphinx", 1)
    data, rate = soundfile.read(path, dtype="int16")
    soundfile.write(folder / f"{key}.wav", data[:rate], rate, subtype="PCM_16")
    (folder / f"{key}.spk").write_text(f"spk-{key}")
    return [f"{key}.spk", f"{key}.wav"]


def test_sparse_members_claiming_100_gib_are_refused_by_name(real_audio, tmp_path):
    """GNU sparse members declaring 100 GiB (a wav, a speaker id) in a 50 KB tar: each sample is refused naming the
    tar, the member, its size and the bound, the other packs; a member whose header alone claims 100 GiB is a cut
    tar, named.  In seconds and bounded memory."""
    folder = tmp_path / "in"
    folder.mkdir()
    names = real_sample(real_audio, folder, "real")
    [speech] = real_audio("pocketsphinx", 1)
    with open(speech, "rb") as src, open(folder / "bigwav.wav", "wb") as fp:
        fp.write(src.read(44))  # a real WAV header, then 100 GiB of holes
    os.truncate(folder / "bigwav.wav", HUGE)
    (folder / "bigwav.spk").write_text("spk-a")
    (folder / "bigspk.spk").write_text("spk-b")
    os.truncate(folder / "bigspk.spk", HUGE)
    (folder / "bigspk.wav").write_bytes((folder / "real.wav").read_bytes())
    sparse_tar = tmp_path / "sparse.tar"
    gnu_tar(folder, sparse_tar, ["bigwav.spk", "bigwav.wav", "bigspk.spk", "bigspk.wav", *names])
    assert sparse_tar.stat().st_size < 1 << 20
    claims = tmp_path / "claims.tar"  # a header that says 100 GiB, followed by a few bytes
    with open(claims, "wb") as fp:
        spk = tarfile.TarInfo("claim.spk")
        spk.size = 5
        fp.write(spk.tobuf(tarfile.GNU_FORMAT) + b"spk-c".ljust(512, b"\0"))
        wav = tarfile.TarInfo("claim.wav")
        wav.size = HUGE
        fp.write(wav.tobuf(tarfile.GNU_FORMAT) + (folder / "real.wav").read_bytes()[:4096])
    (tmp_path / "shard.list").write_text(f"{sparse_tar}\n")
    (tmp_path / "claims.list").write_text(f"{claims}\n")
    for name in ("bigwav.wav", "bigspk.spk", "real.wav", "real.spk", "bigspk.wav"):
        os.unlink(folder / name)

    status, output, seconds, rss = measured_build(tmp_path / "shard.list", tmp_path / "pack")
    assert status != 0, output
    claim = f"tar member of {HUGE} bytes (107.37 GB) is larger than the 1.00 GB speechpack reads from a tar"
    assert f"{sparse_tar}:bigwav.wav: {claim}" in output, output
    assert (f"{sparse_tar}:bigspk.spk: member bigspk.spk: tar member of {HUGE} bytes (107.37 GB) is larger than the "
            f"1.00 MB speechpack reads from a tar for a speaker id") in output, output
    assert "Traceback" not in output
    assert seconds < SECONDS and rss < PEAK_RSS, (seconds, rss)

    status, output, seconds, rss = measured_build(tmp_path / "claims.list", tmp_path / "claimed")
    assert status != 0
    assert f"{claims}: not a readable uncompressed tar (unexpected end of data)" in output, output
    assert "Traceback" not in output
    assert seconds < SECONDS and rss < PEAK_RSS, (seconds, rss)

    status, output, seconds, rss = measured_build(tmp_path / "shard.list", tmp_path / "skipped", "--skip-bad")
    assert status == 0, output
    assert "packed 1 sample " in output and seconds < SECONDS and rss < PEAK_RSS, (output, seconds, rss)


def gzip_bomb(path: Path, claimed: int) -> None:
    """A ``.tar.gz`` of a speaker id and a wav member of ``claimed`` zero bytes whose deflate data really expands
    to them (one 16 MiB block of zeros, compressed once, repeated: a full flush resets the compressor), a few MB on
    disk.  The gzip trailer is left off: a reader that is right stops long before it."""
    spk = tarfile.TarInfo("bomb.spk")
    spk.size = 4
    wav = tarfile.TarInfo("bomb.wav")
    wav.size = claimed
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = 16 << 20
    head = spk.tobuf(tarfile.GNU_FORMAT) + b"spkZ".ljust(512, b"\0") + wav.tobuf(tarfile.GNU_FORMAT)
    with open(path, "wb") as fp:
        fp.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")
        fp.write(compressor.compress(head) + compressor.flush(zlib.Z_FULL_FLUSH))
        zeros = compressor.compress(bytes(block)) + compressor.flush(zlib.Z_FULL_FLUSH)
        for _ in range(claimed // block):
            fp.write(zeros)
        fp.write(compressor.flush())


def test_a_gzip_bomb_is_refused_at_its_header(tmp_path):
    """A 4 MB ``.tar.gz`` whose member expands to 4 GiB: refused by name before a byte of it is decompressed."""
    bomb = tmp_path / "bomb.tar.gz"
    gzip_bomb(bomb, 4 << 30)
    assert bomb.stat().st_size < 20 << 20
    (tmp_path / "shard.list").write_text(f"{bomb}\n")
    status, output, seconds, rss = measured_build(tmp_path / "shard.list", tmp_path / "pack")
    assert status != 0
    assert (f"{bomb}:bomb.wav: tar member of {4 << 30} bytes (4.29 GB) is larger than the 1.00 GB speechpack "
            f"reads from a tar (a compressed tar is read through in order") in output, output
    assert "Traceback" not in output
    assert seconds < SECONDS and rss < PEAK_RSS, (seconds, rss)


def test_compressed_shards_hold_a_bounded_total_in_memory(real_audio, wesep_list, tmp_path, monkeypatch):
    """Members of compressed shards are held until the build ends, up to ``MAX_HELD_BYTES`` in all: past it the
    build stops, naming the member and saying to decompress the shards."""
    from factories import Source
    from speechpack.packer.adapters.wesep_shards import write_shards

    paths = real_audio("pocketsphinx", 3)
    case = wesep_list([Source(f"utt{i}", p) for i, p in enumerate(paths)])
    shard_list = write_shards(str(case.list_path), str(tmp_path / "tars"), samples_per_shard=1, compress=True)
    assert len(read_wesep_shards(shard_list).lines) == 3
    sizes = []
    for tar_path in open(shard_list).read().split():
        with tarfile.open(tar_path) as tar:
            sizes += [m.size for m in tar.getmembers()]
    monkeypatch.setattr(tar_members, "MAX_HELD_BYTES", sum(sizes) - 1)
    with pytest.raises(SpeechpackError, match=r"shards_000000002\.tar\.gz:utt2\.wav: the members of compressed "
                                              r"tars would hold .* more than the .* decompress the tars \(gunzip\)"):
        read_wesep_shards(shard_list)


def test_a_sparse_map_outside_its_member_is_refused(tmp_path):
    tar_path = tmp_path / "t.tar"
    tar_path.write_bytes(bytes(4096))
    for sparse in (((0, 100), (50, 10)), ((0, 10), (990, 20))):
        member = TarMember(str(tar_path), "x.wav", 512, 1000, sparse)
        with pytest.raises(AudioError, match=r"t\.tar:x\.wav: bad sparse map in the tar header"):
            member.open()
    assert TarMember(str(tar_path), "x.wav", 512, 1000, ((0, 10), (990, 10), (1000, 0), (0, 0))).read_bytes() \
        == bytes(1000)
    with pytest.raises(AudioError, match=r"truncated tar member \(3584 of 5000 bytes in the tar\)"):
        TarMember(str(tar_path), "y.wav", 512, 5000).open()
    assert MAX_MEMBER_BYTES == 1_000_000_000  # the bound docs/wesep.md states
    assert HeldBytes().bound == tar_members.MAX_HELD_BYTES == 2_000_000_000


def test_a_wav_header_chunk_size_is_never_what_is_read():
    """The WAV header reader (run on every tar member and file) reads the fields of a ``fmt `` chunk, not the 4 GB
    its size field may claim."""
    import struct

    from speechpack.packer.audio.wav_header import declared_frames

    class Reads(io.BytesIO):
        asked: list[int] = []

        def read(self, size=-1):
            self.asked.append(size)
            return super().read(size)

    fmt = struct.pack("<HHIIHH", 1, 1, 16000, 32000, 2, 16)
    samples = bytes(2000)
    for claimed in (0xFFFFFFF0, 16):
        body = b"WAVE" + b"fmt " + struct.pack("<I", claimed) + fmt + b"data" + struct.pack("<I", 2000) + samples
        fp = Reads(b"RIFF" + struct.pack("<I", len(body)) + body)
        Reads.asked = []
        found = declared_frames(fp)
        assert max(Reads.asked) <= 64, Reads.asked
        assert found == (1000 if claimed == 16 else None)


def header_bomb(path: Path, kind: bytes, claimed: int) -> None:
    """A ``.tar.gz`` whose first header is a GNU long name (``L``) or a PAX extended header (``x``) of ``claimed``
    zero bytes that its deflate data really expands to (as ``gzip_bomb``), then a speaker id."""
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = kind, claimed
    spk = tarfile.TarInfo("bomb.spk")
    spk.size = 4
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = 16 << 20
    with open(path, "wb") as fp:
        fp.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")
        fp.write(compressor.compress(header.tobuf(tarfile.GNU_FORMAT)) + compressor.flush(zlib.Z_FULL_FLUSH))
        zeros = compressor.compress(bytes(block)) + compressor.flush(zlib.Z_FULL_FLUSH)
        for _ in range(claimed // block):
            fp.write(zeros)
        fp.write(compressor.compress(spk.tobuf(tarfile.GNU_FORMAT) + b"spkZ".ljust(512, b"\0")))
        fp.write(compressor.flush())


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE])
def test_a_long_name_or_pax_header_is_bounded_before_it_is_read(tmp_path, kind):
    """A 2 MB ``.tar.gz`` whose long-name or PAX header expands to 2 GiB: refused by name (a header holds a name
    and a few records, ``MAX_HEADER_BYTES`` at most) without holding it, as a member claiming as much is."""
    bomb = tmp_path / "bomb.tar.gz"
    header_bomb(bomb, kind, 2 << 30)
    (tmp_path / "shard.list").write_text(f"{bomb}\n")
    status, output, seconds, rss = measured_build(tmp_path / "shard.list", tmp_path / "pack")
    assert status != 0
    assert f"{bomb}: not a readable gzip-compressed tar" in output and f"header of {2 << 30} bytes" in output, output
    assert "Traceback" not in output
    assert seconds < SECONDS and rss < PEAK_RSS, (seconds, rss)


def test_a_gnu_sparse_header_whose_extension_is_cut_short_is_a_named_unreadable_tar(tmp_path):
    """A GNU sparse member (``S``) that says an extension block follows, in a tar that ends first: ``tarfile``
    indexes past the short block (``IndexError``); the shard is named as an unreadable tar instead."""
    header = tarfile.TarInfo("a.wav")
    header.size, header.type = 1000, tarfile.GNUTYPE_SPARSE
    block = bytearray(header.tobuf(tarfile.GNU_FORMAT))
    block[386:410] = b"%011o\0" % 0 + b"%011o\0" % 10  # one region: 10 bytes at 0
    block[482] = 1  # an extension block follows
    block[483:495] = b"%011o\0" % 1000
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block[:512])
    spk = tarfile.TarInfo("a.spk")
    spk.size = 2
    shard = tmp_path / "cut.tar"
    shard.write_bytes(spk.tobuf(tarfile.GNU_FORMAT) + b"s1".ljust(512, b"\0") + bytes(block) + bytes(100))
    (tmp_path / "shard.list").write_text(f"{shard}\n")
    with pytest.raises(SpeechpackError, match=f"{shard}: not a readable uncompressed tar \\(a GNU sparse header"):
        read_wesep_shards(str(tmp_path / "shard.list"))
