"""Compressed builds and converts read their input on a reader thread, a few samples ahead of the thread that
encodes (``packer.build.read_ahead``), on real recordings: the packs' bytes do not depend on that thread's timing
(nor on ``--workers``), a file found damaged mid-corpus fails the build naming its line, key and file, the source
pack's own damage fails a convert naming its file, and no reader thread outlives a build that failed."""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from factories import pack_files
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build import read_ahead, shards
from speechpack.packer.build.run import BuildOptions
from speechpack.packer.convert import ConvertOptions, convert_pack
from speechpack.schemas.errors import BuildError, PackFormatError

SHARD_BYTES = 100000  # six_line_corpus: two samples per shard, three shards


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "speechpack-reader"]


@pytest.fixture
def loads_seen(monkeypatch):
    """The names of the threads that read each input (``shards.guarded``, which the read-ahead runs)."""
    seen: list[str] = []
    real = shards.guarded

    def guarded(fn, item):
        seen.append(threading.current_thread().name)
        return real(fn, item)

    monkeypatch.setattr(shards, "guarded", guarded)
    return seen


def flac_build(list_path, out, **extra):
    return build_wesep(str(list_path), BuildOptions(out=str(out), codec="flac", shard_bytes=SHARD_BYTES,
                                                    progress=False, **extra))


def test_flac_packs_do_not_depend_on_the_reader_threads_timing(six_line_corpus, tmp_path, monkeypatch,
                                                               loads_seen):
    flac_build(six_line_corpus.list_path, tmp_path / "default")
    assert loads_seen and set(loads_seen) == {"speechpack-reader"}  # read ahead, not on the encoding thread
    reference = pack_files(tmp_path / "default")

    # one sample ahead at most, and every read delayed at random: the reader and the encoder alternate otherwise
    rng = random.Random(3)
    real = shards.guarded

    def slow(fn, item):
        time.sleep(rng.random() * 0.02)
        return real(fn, item)

    monkeypatch.setattr(shards, "guarded", slow)
    monkeypatch.setattr(read_ahead, "READ_AHEAD_ITEMS", 1)
    flac_build(six_line_corpus.list_path, tmp_path / "jittery")
    assert pack_files(tmp_path / "jittery") == reference
    monkeypatch.undo()
    flac_build(six_line_corpus.list_path, tmp_path / "workers", workers=2)  # decoded and encoded in the workers
    assert pack_files(tmp_path / "workers") == reference
    assert not reader_threads()


def cut_flac_copy(path: str, out) -> str:
    """A FLAC copy of ``path`` cut in half: its header (all a probe reads) is intact, decoding fails."""
    data, rate = soundfile.read(path, dtype="int16")
    soundfile.write(str(out), data, rate, format="FLAC", subtype="PCM_16")
    raw = out.read_bytes()
    out.write_bytes(raw[:len(raw) // 2])
    return str(out)


def test_a_file_damaged_mid_corpus_fails_the_flac_build_naming_its_line_key_and_file(six_line_corpus, tmp_path,
                                                                                     loads_seen):
    lines = six_line_corpus.list_path.read_text().splitlines()
    row = json.loads(lines[2])  # line 3 of 6
    speaker = row["spk"][0]
    cut = cut_flac_copy(row["src"][speaker][0], tmp_path / "cut.flac")
    row["src"][speaker] = [cut]
    lines[2] = json.dumps(row)
    damaged = tmp_path / "damaged.list"
    damaged.write_text("\n".join(lines) + "\n")
    out = tmp_path / "pack"
    with pytest.raises(BuildError) as err:
        flac_build(damaged, out)
    [problem] = err.value.problems
    assert (problem.line, problem.key, problem.path) == (3, row["key"], cut)
    assert "cannot decode audio" in problem.reason
    assert set(loads_seen) == {"speechpack-reader"} and len(loads_seen) == 6  # every line read, to report all
    assert not (out / "dataset.json").exists()
    assert not reader_threads()


def test_a_build_whose_encoding_thread_fails_stops_its_reader_thread(six_line_corpus, tmp_path, monkeypatch):
    real = shards.encode_result
    encoded = []

    def failing(encoding, sample_rate, result, measure_later=False):
        if len(encoded) == 2:
            raise OSError(28, "No space left on device")  # as a write of the encoder's thread would fail
        encoded.append(result)
        return real(encoding, sample_rate, result, measure_later)

    monkeypatch.setattr(shards, "encode_result", failing)
    out = tmp_path / "pack"
    started = time.monotonic()
    with pytest.raises(Exception, match="No space left on device"):
        flac_build(six_line_corpus.list_path, out)
    assert time.monotonic() - started < 60  # no wait on a reader blocked with nowhere to put its samples
    assert not reader_threads()
    assert not (out / "dataset.json").exists()


def test_a_flac_convert_reads_ahead_and_a_corrupt_source_stream_fails_it_naming_the_file(six_line_corpus,
                                                                                         tmp_path, loads_seen):
    source = tmp_path / "source"
    build_wesep(str(six_line_corpus.list_path), BuildOptions(out=str(source), shard_bytes=SHARD_BYTES,
                                                             progress=False))
    assert set(loads_seen) == {"MainThread"}  # a pcm16 build's thread only reads: nothing to read ahead of
    loads_seen.clear()
    convert_pack(str(source), ConvertOptions(out=str(tmp_path / "flac"), codec="flac", progress=False))
    assert loads_seen and set(loads_seen) == {"speechpack-reader"}
    source = Path(shutil.copytree(source, tmp_path / "damaged"))  # a pack this process has not opened yet
    target = source / "shard-000001" / "target.npy"
    data = bytearray(target.read_bytes())
    data[-3] ^= 0xFF
    target.write_bytes(bytes(data))
    out = tmp_path / "converted"
    with pytest.raises(PackFormatError, match="shard-000001/target.npy"):
        convert_pack(str(source), ConvertOptions(out=str(out), codec="flac", progress=False))
    assert not (out / "dataset.json").exists()
    assert not reader_threads()
