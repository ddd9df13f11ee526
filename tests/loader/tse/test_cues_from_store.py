"""TSE packs with speaker cues trained straight from object storage (docs/integrations.md, "Training from a store"),
against a real S3-protocol server on 127.0.0.1 (moto's server mode), packs of real speech with every cue kind the
cue tests build: batches equal the local copy's, batch for batch; a cue's payload is fetched only when a batch
uses the cue, verified, once per node; a corrupted cue object is fetched once more, then named.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

import factories.paths
from factories.batches import assert_batches_equal
from factories.cue_corpus import cue
from factories.s3 import SECRET, flip_object_byte, publish
from speechpack.loader import build_loader
from speechpack.loader.cache import NodeCache
from speechpack.loader.cache.cached_files import CacheIntegrityError
from speechpack.loader.pack import ObjectStorePackFiles, open_pack
from speechpack.schemas.errors import PackFormatError


def every_kind(corpus) -> dict[str, tuple[dict, bool]]:
    """Two packs that hold, together, every cue representation: ``name -> (cues, speaker labels)``."""
    res = corpus.resources
    return {
        "wave_video_track_text": ({
            "audio": cue(res["by_speaker"], "random", "spk_id"),
            "visual": cue(res["video"]),
            "spatial": cue(res["track"], fields=["azimuth", "elevation"]),
            "textual": cue(res["textual"], type="json", format="dae_keyword_phoneme",
                           selection={"type": "random", "word_range": [2, 3]})}, True),
        "embedding_muse_static": ({
            "audio": cue(res["embedding"], key="spk_id", type="npy", format="spk_embedding"),
            "visual": cue(res["muse"], type="npy", format="muse_frontend"),
            "spatial": cue(res["static"], fields=["azimuth", "elevation"])}, False),
    }


def config(path: str, cues: list[str], cache: dict | None = None) -> dict:
    return {"packs": [{"path": path}], **({"cache": cache} if cache else {}),
            "dataset_args": {"batch_size": 2, "chunk_len": 8000, "cues": {name: {"use": True} for name in cues}}}


def epochs(loader, count: int = 2) -> list[dict]:
    batches = []
    for epoch in range(count):
        loader.set_epoch(epoch)
        batches += list(loader)
    return batches


def assert_same_batches(local: list[dict], remote: list[dict]) -> None:
    assert len(local) > 0
    assert_batches_equal(remote, local)


def cue_payload_key(local: str, cue_name: str) -> str:
    """The node cache's entry name of a cue's ``data.npy``."""
    entry = open_pack(local).manifest.cues[f"{cue_name}/data.npy"]
    return f"{entry.sha256}-{entry.size}"


@pytest.mark.parametrize("name, workers", [("wave_video_track_text", 0), ("embedding_muse_static", 2)])
def test_a_cue_pack_trains_from_the_store_as_its_local_copy(s3_store, corpus, tmp_path, name, workers):
    """Every cue of the pack used: two epochs of training batches from the store (through the node cache, with and
    without DataLoader workers) equal the local copy's, cue fields and speaker labels included."""
    cues, labels = every_kind(corpus)[name]
    local = corpus.build(name, cues, labels=labels)
    url = publish(local, f"cue-training/{name}")
    expected = epochs(build_loader(config(local, list(cues)), "train", seed=5))
    assert {f"{c}_aux" for c in cues} <= set(expected[0])
    got = epochs(build_loader(config(url, list(cues), {"dir": str(tmp_path / "cache")}), "train", seed=5,
                              num_workers=workers))
    assert_same_batches(expected, got)
    held = NodeCache(str(tmp_path / "cache")).entries()
    assert {cue_payload_key(local, c) for c in cues} <= set(held), "each payload is a verified cache entry"


@pytest.mark.parametrize("workers", [0, 2])
def test_a_cue_pack_with_flac_enrollment_audio_trains_from_the_store_as_the_pcm16_pack(s3_store, corpus, tmp_path,
                                                                                      workers):
    """Enrollment audio stored as FLAC blocks, fetched through the node cache and decoded in the workers: the
    batches equal the pcm16 pack's, read locally."""
    cues = {"audio": cue(corpus.resources["by_speaker"], "random", "spk_id"),
            "spatial": cue(corpus.resources["track"], fields=["azimuth", "elevation"])}
    pcm16 = corpus.build("pcm16", cues, labels=True)
    flac = corpus.build("flac", cues, labels=True, codec="flac", block_seconds=0.25)
    assert open_pack(flac).cues["audio"].codec == "flac"
    url = publish(flac, f"cue-training/flac-{workers}")
    expected = epochs(build_loader(config(pcm16, list(cues)), "train", seed=5))
    got = epochs(build_loader(config(url, list(cues), {"dir": str(tmp_path / "cache")}), "train", seed=5,
                              num_workers=workers))
    assert_same_batches(expected, got)
    assert cue_payload_key(flac, "audio") in NodeCache(str(tmp_path / "cache")).entries()


def test_a_cue_the_experiment_does_not_use_is_never_fetched(s3_store, corpus, tmp_path):
    cues, labels = every_kind(corpus)["wave_video_track_text"]
    local = corpus.build("unused", cues, labels=labels)
    url = publish(local, "cue-training/unused")
    got = epochs(build_loader(config(url, ["audio"], {"dir": str(tmp_path / "cache")}), "train", seed=2), 1)
    assert_same_batches(epochs(build_loader(config(local, ["audio"]), "train", seed=2), 1), got)
    held = set(NodeCache(str(tmp_path / "cache")).entries())
    assert cue_payload_key(local, "audio") in held
    assert not {cue_payload_key(local, c) for c in ("visual", "spatial", "textual")} & held


def test_a_corrupted_cue_payload_on_the_store_is_fetched_once_more_then_named(s3_store, corpus, tmp_path,
                                                                              monkeypatch):
    cues, labels = every_kind(corpus)["wave_video_track_text"]
    local = corpus.build("corrupt", cues, labels=labels)
    url = publish(local, "cue-training/corrupt")
    rel = "cues/audio/data.npy"
    flip_object_byte(url, rel)
    reads = []
    read_bytes = ObjectStorePackFiles.read_bytes
    monkeypatch.setattr(ObjectStorePackFiles, "read_bytes",
                        lambda self, name: reads.append(name) or read_bytes(self, name))
    loader = build_loader(config(url, ["audio"], {"dir": str(tmp_path / "cache")}), "train", seed=2)
    with pytest.raises(CacheIntegrityError, match=rf"{url}/{rel}: sha256 [0-9a-f]{{64}} does not match "
                                                  rf"dataset.json") as caught:
        list(loader)
    assert SECRET not in str(caught.value)
    assert reads.count(rel) == 2, "a mismatch is fetched once more, then an error"
    assert cue_payload_key(local, "audio") not in NodeCache(str(tmp_path / "cache")).entries()


def test_a_corrupted_cue_index_on_the_store_is_named_at_open(s3_store, corpus, tmp_path):
    cues, labels = every_kind(corpus)["embedding_muse_static"]
    local = corpus.build("corrupt_index", cues, labels=labels)
    url = publish(local, "cue-training/corrupt-index")
    flip_object_byte(url, "cues/visual/items.npy")
    with pytest.raises(CacheIntegrityError, match=rf"{url}/cues/visual/items.npy: sha256 .* does not match"):
        build_loader(config(url, ["audio"], {"dir": str(tmp_path / "cache")}), "train", seed=2)


def test_a_cue_object_missing_from_the_store_is_named_at_open(s3_store, corpus, tmp_path):
    import fsspec

    cues, labels = every_kind(corpus)["wave_video_track_text"]
    local = corpus.build("missing", cues, labels=labels)
    url = publish(local, "cue-training/missing")
    fsspec.filesystem("s3", skip_instance_cache=True).rm_file(f"{url}/cues/textual/keywords.npy")
    with pytest.raises(PackFormatError, match=rf"{url}/cues/textual/keywords.npy: missing \(dataset.json lists it\)"):
        build_loader(config(url, ["audio"], {"dir": str(tmp_path / "cache")}), "train", seed=2)


def test_two_rank_processes_share_one_cache_and_fetch_each_cue_payload_once(s3_store, corpus, tmp_path):
    """Two ranks (separate processes, one node, one cache): each deals its local rank's batches, and the node fetches
    every file once, cue payloads included (the bytes both fetched are the cache's distinct entries)."""
    cues, labels = every_kind(corpus)["wave_video_track_text"]
    local = corpus.build("ranks", cues, labels=labels)
    url = publish(local, "cue-training/ranks")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(factories.paths.TESTS), *sys.path]),
               "LOCAL_WORLD_SIZE": "2"}
    processes = []
    for rank in range(2):
        spec = {"config": config(url, list(cues), {"dir": str(tmp_path / "cache")}), "rank": rank, "world_size": 2,
                "num_workers": 0, "seed": 4}
        out = tmp_path / f"rank{rank}.pkl"
        processes.append((subprocess.Popen([sys.executable, "-m", "factories.store_rank", json.dumps(spec), str(out)],
                                           env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
                          out))
    results = []
    for process, out in processes:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
        assert SECRET not in output
        with open(out, "rb") as fp:
            results.append(pickle.load(fp))
    for rank, result in enumerate(results):
        expected = list(build_loader(config(local, list(cues)), "train", rank=rank, world_size=2, seed=4))
        assert_same_batches([{k: v.numpy() if hasattr(v, "numpy") else v for k, v in b.items()} for b in expected],
                            result["batches"])
    held = NodeCache(str(tmp_path / "cache")).entries()
    assert {cue_payload_key(local, c) for c in cues} <= set(held)
    assert sum(result["fetched"] for result in results) == sum(held.values()), "one fetch per file per node"
