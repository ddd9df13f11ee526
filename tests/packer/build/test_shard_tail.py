"""With whole-shard tasks, the last ``STREAMED_TAIL`` shards are streamed sample by sample to the build process,
so that the workers that run out of whole shards first decode them instead of waiting for the last whole shard
(``packer.build.shards``).  The pool here is a thread pool, so that the tasks can be watched; the pack is
the one ``--workers 1`` writes, byte for byte.  A shard's writing that stops at a bad sample is aborted in either
path (one implementation: ``build_shard`` streams its one job).  Real recordings."""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from factories import pack_files
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build import run, shards, writer
from speechpack.packer.build.run import BuildOptions
from speechpack.schemas.constants import shard_dir_name
from speechpack.schemas.errors import SpeechpackError

#: One 48 kB sample per shard: six shards.
ONE_PER_SHARD = 50_000


@pytest.fixture
def watched(monkeypatch):
    """Builds with a 2-thread pool; returns what ran where: ``shards`` (whole-shard tasks) and ``streamed``
    (samples decoded for the build process's writer)."""
    seen = {"shards": [], "streamed": []}
    lock = threading.Lock()
    whole, decode = shards.build_shard, shards.decode_measured

    def build_shard(job):
        with lock:
            seen["shards"].append(job.shard_id)
        return whole(job)

    def decode_measured(load, item):
        with lock:
            seen["streamed"].append(item.key)
        return decode(load, item)

    @contextlib.contextmanager
    def thread_pool(workers):
        with ThreadPoolExecutor(workers) as pool:
            yield pool if workers > 1 else None

    monkeypatch.setattr(shards, "build_shard", build_shard)
    monkeypatch.setattr(shards, "decode_measured", decode_measured)
    monkeypatch.setattr(run, "worker_pool", thread_pool)
    return seen


def test_the_last_shard_is_streamed_after_the_whole_ones(six_line_corpus, tmp_path, watched):
    one, two = tmp_path / "one", tmp_path / "two"
    build_wesep(str(six_line_corpus.list_path), BuildOptions(out=str(one), shard_bytes=ONE_PER_SHARD, progress=False))
    summary = build_wesep(str(six_line_corpus.list_path), BuildOptions(out=str(two), shard_bytes=ONE_PER_SHARD,
                                                                       workers=2, progress=False))
    assert len(summary.manifest.shards) == 6
    tail = shards.STREAMED_TAIL
    assert sorted(watched["shards"]) == list(range(6 - tail))
    assert watched["streamed"] == [line.key for line in six_line_corpus.lines[6 - tail:]]
    assert pack_files(one) == pack_files(two)


def test_a_whole_shard_that_fails_fails_the_build(six_line_corpus, tmp_path, watched, monkeypatch):
    traced = shards.build_shard

    def failing(job):
        if job.shard_id == 1:
            raise OSError(28, "No space left on device", "<shard 1>")
        return traced(job)

    monkeypatch.setattr(shards, "build_shard", failing)
    with pytest.raises(SpeechpackError, match="No space left on device"):
        build_wesep(str(six_line_corpus.list_path), BuildOptions(out=str(tmp_path / "pack"), workers=2,
                                                                 shard_bytes=ONE_PER_SHARD, progress=False))
    assert not (tmp_path / "pack" / "dataset.json").exists()


def test_a_streamed_shard_that_stops_at_a_bad_sample_is_aborted(six_line_corpus, tmp_path, monkeypatch):
    """Without ``--skip-bad`` a bad sample stops the writing; the shard it was half way through is aborted (its
    files closed, its ``.tmp-`` directory removed) right there, in the streamed path as in a whole-shard task."""
    bad = six_line_corpus.lines[3].key  # the second sample of the second shard (two per shard)
    plain = shards.guarded

    def guarded(load, item):
        if item.key == bad:
            return shards.LineProblem(item.line, item.key, None, "unreadable")
        return plain(load, item)

    aborted = []
    abort = writer.ShardWriter.abort

    def spied(self):
        aborted.append(self.name)
        abort(self)
        assert not os.path.exists(self.temp_dir)

    monkeypatch.setattr(shards, "guarded", guarded)
    monkeypatch.setattr(writer.ShardWriter, "abort", spied)
    with pytest.raises(SpeechpackError, match="1 bad line"):
        build_wesep(str(six_line_corpus.list_path), BuildOptions(out=str(tmp_path / "pack"), shard_bytes=2 * ONE_PER_SHARD,
                                                                 progress=False))
    assert aborted == [shard_dir_name(1)]
