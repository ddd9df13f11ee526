"""A compressed pack trains from object storage through the node cache as its local copy does, and what the node
fetches scales with the compressed size (real speech on the loopback S3 server)."""

from __future__ import annotations

import pytest

from factories.compressed import recode
from factories.s3 import publish, stream_bytes
from factories.wesep_lists import Mix
from speechpack.loader import build_loader
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions


def _batches(path: str, cache: dict | None):
    config = {"packs": [{"path": path}], "dataset_args": {"batch_size": 2, "chunk_len": 4000, "shuffle": True},
              **({"cache": cache} if cache else {})}
    loader = build_loader(config, "train", seed=3)
    batches = [{k: v.numpy().copy() if hasattr(v, "numpy") else v for k, v in b.items()} for b in loader]
    return batches, (loader.dataset.feed.caches[0].fetched_bytes if cache else 0)


@pytest.fixture
def pcm_pack(tmp_path, wesep_list, real_audio):
    """Eight real two-speaker mixtures of 1.2-1.9 s, a few per shard."""
    speech = real_audio("pocketsphinx", 5)
    mixes = [Mix(f"m{i}", (speech[i % 5], speech[(i + 2) % 5]), seconds=1.2 + 0.1 * i) for i in range(8)]
    out = tmp_path / "pcm"
    build_wesep(str(wesep_list(mixes).list_path), BuildOptions(out=str(out), shard_bytes=200_000, progress=False))
    return out


def test_a_flac_pack_from_the_store_fetches_its_compressed_bytes(s3_store, pcm_pack, tmp_path):
    from factories.batches import assert_batches_equal

    flac = recode(pcm_pack, tmp_path / "flac", "flac", block_frames=8000)
    want, _ = _batches(str(pcm_pack), None)
    fetched = {}
    for name, local in (("pcm", pcm_pack), ("flac", flac)):
        url = publish(local, f"compressed/{name}")
        got, fetched[name] = _batches(url, {"dir": str(tmp_path / f"cache-{name}")})
        assert_batches_equal(got, want)  # the store's FLAC copy deals the local pcm16 pack's batches
        assert 0 < fetched[name] <= stream_bytes(local)  # shard files fetched once each, nothing more
    ratio = stream_bytes(flac) / stream_bytes(pcm_pack)
    assert ratio < 0.7  # FLAC on real speech
    assert fetched["flac"] / fetched["pcm"] == pytest.approx(ratio, rel=0.1)
