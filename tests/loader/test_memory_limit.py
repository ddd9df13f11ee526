"""In-range but impossible sizes are refused at once with the figure: an epoch plan or a batch estimated against
``memory_limit`` (default: half the available memory) before anything is allocated (docs/loader.md, "Memory and
I/O")."""

from __future__ import annotations

import time

import pytest
import yaml

from speechpack import loader
from speechpack.loader.config import ConfigError, LoaderConfig
from speechpack.loader.memory_limit import MemoryLimitError, default_memory_limit
from speechpack.loader.peek import peek_config
from speechpack.loader.plan.planning_report import plan_report


def _config(pack, **extra) -> dict:
    return {"packs": [{"path": str(pack)}], "dataset_args": {"batch_size": 2, "chunk_len": 8000}, **extra}


def _refused_quickly(run, match: str) -> None:
    started = time.monotonic()
    with pytest.raises(MemoryLimitError, match=match):
        run()
    assert time.monotonic() - started < 10


def test_choose_at_its_documented_maximum_is_refused_with_the_figure(real_pack):
    cfg = _config(real_pack)
    cfg["packs"][0]["choose"] = 4294967296
    _refused_quickly(lambda: loader.build_loader(cfg, "train", num_workers=0),
                     r"an epoch of 4294967296 planned units \(the weighting's items per epoch\) needs about "
                     r"137\.44 GB to plan \(32 bytes a unit\), over .* \(memory_limit's default, 50% of the available")
    _refused_quickly(lambda: plan_report(cfg), "4294967296 planned units")


def test_epoch_items_at_its_documented_maximum_is_refused_with_the_figure(real_pack):
    cfg = _config(real_pack, weighting={"epoch_items": 4294967296})
    cfg["packs"][0]["weight"] = 1.0
    _refused_quickly(lambda: loader.build_loader(cfg, "train", num_workers=0), "4294967296 planned units")


def test_a_batch_too_large_for_memory_is_refused_before_peek_allocates_it(real_pack, tmp_path):
    cfg = _config(real_pack)
    cfg["dataset_args"] = {"batch_size": 64, "chunk_len": 268435456}
    path = tmp_path / "huge.yaml"
    path.write_text(yaml.safe_dump(cfg))
    _refused_quickly(lambda: peek_config(str(path), "train"),
                     r"the largest batch \(epoch 0, rank 0: 64 rows of 268435456 samples\) needs about .* GB, over")


def test_memory_limit_sets_the_ceiling(real_pack):
    cfg = _config(real_pack, memory_limit="1KiB")
    with pytest.raises(MemoryLimitError, match=r"over 1.02 KB \(memory_limit\)"):
        loader.build_loader(cfg, "train", num_workers=0)
    cfg["memory_limit"] = "64GiB"
    cfg["dataset_args"]["batch_size"] = 1  # the pack mixes mono and stereo mixtures
    assert LoaderConfig.from_dict(cfg).memory_limit == 64 << 30
    assert len(list(loader.build_loader(cfg, "train", num_workers=0))) >= 1
    for bad in ("lots", -5, True, [1]):
        cfg["memory_limit"] = bad
        with pytest.raises(ConfigError, match="config.memory_limit: "):
            LoaderConfig.from_dict(cfg)


def test_the_default_ceiling_follows_the_available_memory():
    from speechpack.loader.memory_limit import available_memory

    available = available_memory()
    assert available is None or default_memory_limit() == int(available * 0.5)


def test_the_default_ceiling_is_read_once_when_the_loader_starts(real_pack, monkeypatch):
    """docs/loader.md: "half of the memory available when the loader starts": later epochs, a resumed pass planned
    at another world size and the dry run's every epoch and rank judge against the figure read at start."""
    from speechpack.loader import memory_limit

    reads = []
    monkeypatch.setattr(memory_limit, "available_memory", lambda: reads.append(1) or 64 << 30)
    cfg = _config(real_pack)
    cfg["dataset_args"]["batch_size"] = 1  # the pack mixes mono and stereo mixtures
    built = loader.build_loader(cfg, "train", num_workers=0)
    assert len(reads) == 1 and built.memory_ceiling.limit == 32 << 30 and not built.memory_ceiling.configured
    for epoch in range(3):
        built.set_epoch(epoch)
        assert list(built)
    saved = built.state_dict()
    saved.update(world_size=2, batches_consumed=0)  # planned again at world size 2 to check the position
    built.load_state_dict(saved)
    assert len(reads) == 1
    plan_report(cfg, world_size=2, epochs=3)
    assert len(reads) == 2


def test_memory_limit_is_a_whole_exact_number_of_bytes_within_bounds(real_pack):
    cfg = _config(real_pack)
    for fractional in (1.5, "1.5", "1.5B", 2.0, 1e9):
        cfg["memory_limit"] = fractional
        with pytest.raises(ConfigError, match=r"config\.memory_limit: .*(whole number of bytes|float)"):
            LoaderConfig.from_dict(cfg)
    cfg["memory_limit"] = 99999999999999999999999
    with pytest.raises(ConfigError, match=r"config\.memory_limit: 99999999999999999999999 is more than the largest "
                                          r"allowed \(1125899906842624 bytes\)"):
        LoaderConfig.from_dict(cfg)
    cfg["memory_limit"] = (1 << 40) + 1  # exact, never through a float
    assert LoaderConfig.from_dict(cfg).memory_limit == (1 << 40) + 1
    cfg["memory_limit"] = "1.5GiB"
    assert LoaderConfig.from_dict(cfg).memory_limit == 3 << 29


def test_bytes_per_row_sample_counts_the_channels_of_audio_streams_only():
    """The per-sample row cost takes the most speakers and the most channels of any audio stream (``SegmentTable``);
    data streams (faces, labels, text) have no channels and count for none."""
    import numpy as np

    from speechpack.loader.memory_limit import bytes_per_row_sample
    from speechpack.loader.pack.reader import DataSegmentTable, SegmentTable

    empty = np.zeros(0, dtype=np.int64)

    def audio(channels):
        return SegmentTable(*(np.asarray(channels) if name == "channels" else empty
                              for name in SegmentTable.__dataclass_fields__))

    class Pack:
        def __init__(self, speakers, streams):
            self.speaker_count, self.streams = np.asarray(speakers), streams

        def __len__(self):
            return len(self.speaker_count)

    faces = DataSegmentTable(*(empty for _ in DataSegmentTable.__dataclass_fields__))
    packs = [Pack([1, 2], {"audio": audio([1, 3, 2]), "faces": faces}), Pack([1], {"mix": audio([2])})]
    assert bytes_per_row_sample(packs) == 4 * 2 * 2 * 3
    assert bytes_per_row_sample([Pack([1], {"audio": audio([]), "faces": faces})]) == 4 * 2
