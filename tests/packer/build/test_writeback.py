"""Stream files are written back as they grow and fsynced once, when closed (``packer.build.streams``): the
pack's bytes do not depend on when writeback starts, every stream file gets exactly one fsync before its shard is
renamed into place, and a build killed between writebacks resumes to the same pack.  Real recordings."""

from __future__ import annotations

import os
import subprocess
import sys

import factories.paths
from factories import pack_files
from speechpack.packer.build import streams
from speechpack.packer.build.state import KILL_AT_ENV
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

REPO = str(factories.paths.REPO)
#: Small enough that every stream file of the corpus is written back several times before it is closed.
SMALL_WRITEBACK = 4096
#: Two samples per shard (0.5 s mixtures, mix + 2 targets at 16 kHz are 48 kB), three shards.
SHARD_BYTES = 100000


def _build(list_path, out) -> dict[str, bytes]:
    build_wesep(str(list_path), BuildOptions(out=str(out), shard_bytes=SHARD_BYTES, progress=False))
    return pack_files(out)


def test_writeback_keeps_bytes_and_fsyncs_each_stream_file_once(six_line_corpus, tmp_path, monkeypatch):
    reference = _build(six_line_corpus.list_path, tmp_path / "reference")

    started: dict[str, list[tuple[int, int]]] = {}
    fsynced: list[str] = []
    real_fsync, real_writeback = os.fsync, streams.start_writeback

    def path_of(fd: int) -> str:
        return os.path.basename(os.path.dirname(os.readlink(f"/proc/self/fd/{fd}"))) + "/" + \
            os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))

    def writeback(fd, offset, nbytes):
        started.setdefault(path_of(fd), []).append((offset, nbytes))
        real_writeback(fd, offset, nbytes)

    def fsync(fd):
        fsynced.append(path_of(fd))
        real_fsync(fd)

    monkeypatch.setattr(streams, "WRITEBACK_EVERY", SMALL_WRITEBACK)
    monkeypatch.setattr(streams, "start_writeback", writeback)
    monkeypatch.setattr(os, "fsync", fsync)
    small = _build(six_line_corpus.list_path, tmp_path / "small")

    assert small == reference  # when writeback starts never changes a byte
    stream_files = sorted(name for name in reference if name.startswith("shard-") and name.endswith(".npy"))
    assert len(stream_files) == 6  # three shards of mix.npy and target.npy
    for name in stream_files:
        temp = ".tmp-" + name  # written under the shard's temporary name, renamed after the fsync
        assert fsynced.count(temp) == 1, (name, fsynced)
        ranges = started[temp]
        assert len(ranges) >= 2, (name, ranges)  # the file was written back while it grew
        assert ranges[0][0] == 0
        for (offset, nbytes), (following, _) in zip(ranges, ranges[1:]):
            assert nbytes >= SMALL_WRITEBACK and following == offset + nbytes  # every byte once, in order
        end = ranges[-1][0] + ranges[-1][1]
        assert end <= len(reference[name])


def test_killed_between_writebacks_resumes_to_the_same_pack(six_line_corpus, tmp_path):
    reference = _build(six_line_corpus.list_path, tmp_path / "reference")
    out = tmp_path / "killed"
    code = (f"import sys; from speechpack.packer.build import streams; streams.WRITEBACK_EVERY = {SMALL_WRITEBACK}; "
            f"from speechpack.cli import main; main(sys.argv[1:])")
    args = ["build", "wesep", "--list", str(six_line_corpus.list_path), "--out", str(out), "--shard-size", str(SHARD_BYTES),
            "--no-progress"]
    env = {**os.environ, KILL_AT_ENV: "sample:utt2"}  # shard 1 half written, its files written back in part
    killed = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=60)
    assert killed.returncode == -9, killed.stderr
    assert not (out / "dataset.json").exists()
    assert (out / ".tmp-shard-000001" / "mix.npy").exists()
    env.pop(KILL_AT_ENV)
    resumed = subprocess.run([sys.executable, "-c", code, *args, "--resume"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    assert pack_files(out) == reference


def test_writeback_really_starts_on_linux(real_audio, tmp_path):
    """``os`` has no ``sync_file_range``: the call goes to libc (``packer.build.streams.start_writeback``).  Before it did, the
    writer's requests were silently skipped and the closing fsyncs wrote whole shards."""
    from speechpack.packer.build.streams import can_start_writeback, start_writeback

    assert can_start_writeback() == sys.platform.startswith("linux")
    data = open(real_audio("pocketsphinx", 1)[0], "rb").read()
    path = tmp_path / "dirty.bin"
    with open(path, "wb") as fp:
        fp.write(data)
        fp.flush()
        start_writeback(fp.fileno(), 0, len(data))  # queued, not waited for; never an error
        start_writeback(fp.fileno(), len(data), 1 << 20)  # beyond the end: nothing to write, no error
    assert path.read_bytes() == data


def test_fsyncs_run_together_finish_every_call_and_raise_the_first_failure(six_line_corpus, tmp_path):
    """``run_together`` (a shard's closing fsyncs, the column files): results in order; when one call fails the
    others still run to their end (no file left half written behind the caller) and the first failure is raised."""
    from speechpack.packer.build.streams import run_together

    paths = [tmp_path / f"{index}.bin" for index in range(4)]
    data = six_line_corpus.list_path.read_bytes()

    def write(path):
        path.write_bytes(data)
        return path.name

    assert run_together([lambda p=p: write(p) for p in paths]) == [p.name for p in paths]

    def fail(message):
        raise OSError(message)

    later = tmp_path / "later.bin"
    try:
        run_together([lambda: fail("first"), lambda: fail("second"), lambda: write(later)])
    except OSError as err:
        assert str(err) == "first"
    else:
        raise AssertionError("no failure raised")
    assert later.read_bytes() == data
