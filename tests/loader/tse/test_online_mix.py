"""Online mixing over sources packs (docs/loader.md, "Online mixing"), on real speech."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import soundfile
import torch

from speechpack import loader
from factories import Source
from factories.online_mix import CHUNK, GAIN, RATE, SNR, collect, mix_config, mixtures
from factories.batches import assert_batches_equal
from speechpack.loader.config import ConfigError, LoaderConfig
from speechpack.loader.tse.mixing import MixError
from speechpack.schemas.errors import PlanError
from speechpack.loader.tse.mixing import SpeakerIndex, choose_group, make_timeline, snr_mix, timeline_masks
from speechpack.loader.rng import item_rng
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions


def test_mix_spk_id_cues_use_the_source_key(real_audio, wesep_list, tmp_path):
    """A ``mix_spk_id`` cue of an online row is looked up by its source utterance's key, not the mix key."""
    items = [Source(f"u{n}", path, seconds=0.8) for n, path in enumerate(real_audio("pocketsphinx"))]
    case = wesep_list(items)
    resource = {}
    for n, line in enumerate(case.lines):
        np.save(tmp_path / f"e{n}.npy", np.full(4, n, dtype=np.float32))
        resource[f"{line.key}::{line.speakers[0]}"] = [{"path": str(tmp_path / f"e{n}.npy")}]
    (tmp_path / "audio.json").write_text(json.dumps(resource), encoding="utf-8")
    cues = tmp_path / "cues.yaml"
    cues.write_text("cues:\n  audio: {type: npy, format: spk_embedding, "
                    f"policy: {{type: fixed, key: mix_spk_id, resource: {tmp_path}/audio.json}}}}\n")
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), sample_rate=RATE, progress=False), cues=str(cues))
    index = {line.key: n for n, line in enumerate(case.lines)}
    ld = loader.build_loader(mix_config(str(out), cues={"audio": {"use": True, "required": True}}), "train")
    rows = 0
    for batch in ld:
        for r, key in enumerate(batch["source_key"]):
            assert batch["audio_aux"][r].flatten().tolist() == [float(index[key])] * 4
            rows += 1
    assert rows > len(items)


def test_silent_sources_are_redrawn_then_refused(real_audio, wesep_list, tmp_path):
    """A silent interferer is never mixed (the group is redrawn); a silent target fails with a clear error."""
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(RATE, dtype=np.int16), RATE, subtype="PCM_16")
    items = [Source(f"u{n}", path, seconds=0.8) for n, path in enumerate(real_audio("pocketsphinx"))]
    items.append({"key": "quiet", "spk": ["nobody"], "src": {"nobody": [str(silent)]}})
    case = wesep_list(items)
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), sample_rate=RATE, progress=False))
    cfg = mix_config(str(out), num_speakers={"distribution": [0, 0, 1], "max_speakers": 3})
    builder = loader.build_loader(cfg, "train").builder
    keys = [str(builder.packs[0].keys[int(s)]) for s in builder.items.sample]
    for item, key in enumerate(keys):
        for batch_number in range(8):
            if key == "quiet":
                with pytest.raises(MixError, match="quiet"):
                    builder.build(np.array([item]), np.array([True]), 0, batch_number)
                continue
            batch = builder.build(np.array([item]), np.array([True]), 0, batch_number)
            assert "quiet" not in batch["source_key"] and batch["source_key"][0] == key
            assert len(batch["source_key"]) == 3


def assert_mixtures_hold(batch: dict) -> None:
    """docs/loader.md ("Online mixing") for every mixture of a batch: distinct speakers, key naming, the mixture
    repeated per row and equal to the sum of its targets, every SNR in range, the peak at the drawn gain."""
    mix, tgt = batch["wav_mix"].numpy(), batch["wav_target"].numpy()
    assert mix.shape == tgt.shape and mix.shape[1:] == (1, CHUNK)
    assert {"source_key", "timeline", "chunk_ratio", "lengths", "valid", "speaker_label"} <= set(batch)
    for rows in mixtures(batch):
        keys = [batch["source_key"][r] for r in rows]
        spks = [batch["spk"][r] for r in rows]
        assert len(set(spks)) == len(spks), "speakers within a mixture are distinct"
        assert all(batch["key"][r] == "mix_" + "_".join(keys) for r in rows)
        assert all(batch["num_speaker"][r] == len(rows) for r in rows)
        for r in rows[1:]:
            np.testing.assert_array_equal(mix[r], mix[rows[0]])
        np.testing.assert_allclose(mix[rows[0], 0], tgt[rows].sum(axis=0)[0], atol=1e-6)
        norms = [np.linalg.norm(tgt[r, 0].astype(np.float64)) for r in rows]
        for n in norms[1:]:
            snr = 20 * np.log10(norms[0] / n)
            assert SNR[0] - 1e-3 <= snr <= SNR[1] + 1e-3
        peak = max(np.abs(mix[rows[0]]).max(), np.abs(tgt[rows]).max())
        g = 20 * np.log10(peak)
        assert GAIN[0] - 1e-3 <= g <= GAIN[1] + 1e-3


def test_mixture_properties(sources_pack):
    path, case = sources_pack()
    ld = loader.build_loader(mix_config(path), "train", seed=3)
    seen_first = Counter()
    for batch in collect(ld):
        assert_mixtures_hold(batch)
        for rows in mixtures(batch):
            if batch["valid"][rows[0]]:
                seen_first[batch["source_key"][rows[0]]] += 1
    assert seen_first == Counter({line.key: 1 for line in case.lines}), "each source is a target once per epoch"


def test_a_redraw_that_changes_the_speaker_count_keeps_the_batch_whole(real_audio, wesep_list, tmp_path,
                                                                        monkeypatch):
    """Batches are sized from the first draw of every group; a silent source redraws its group, possibly with
    another speaker count, and the rows already mixed move into a resized batch intact."""
    import speechpack.loader.tse.online
    from speechpack import loader
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(RATE, dtype=np.int16), RATE, subtype="PCM_16")
    items = [Source(f"u{n}c{c}", path, seconds=0.8, start=0.1 + 0.8 * c)
             for n, path in enumerate(real_audio("pocketsphinx")) for c in range(2)]
    items += [{"key": f"quiet{n}", "spk": [f"nobody{n}"], "src": {f"nobody{n}": [str(silent)]}} for n in range(3)]
    case = wesep_list(items)
    out = tmp_path / "pack"
    build_wesep(str(case.list_path), BuildOptions(out=str(out), sample_rate=RATE, progress=False))
    resized = []
    real_with_rows = loader.tse.online._with_rows
    monkeypatch.setattr(loader.tse.online, "_with_rows", lambda *a: resized.append(a[1:]) or real_with_rows(*a))
    builder = loader.build_loader(mix_config(str(out), batch_size=6), "train").builder
    loud = [i for i, s in enumerate(builder.items.sample) if not str(builder.packs[0].keys[int(s)]).startswith("q")]
    for batch_number in range(40):
        batch = builder.build(np.asarray(loud[:6]), np.ones(6, dtype=bool), 0, batch_number)
        assert_mixtures_hold({k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()})
        assert not any(k.startswith("quiet") for k in batch["source_key"])
        assert len(batch["key"]) == sum(len(rows) for rows in mixtures(batch))
    assert resized, "no redraw changed a group's speaker count: the test does not cover the resize"


def test_each_source_target_once_two_ranks(sources_pack):
    path, case = sources_pack()
    firsts = Counter()
    for rank in range(2):
        ld = loader.build_loader(mix_config(path), "train", rank=rank, world_size=2, seed=5)
        ld.set_epoch(1)
        for batch in ld:
            for rows in mixtures(batch):
                if batch["valid"][rows[0]]:
                    firsts[batch["source_key"][rows[0]]] += 1
    assert firsts == Counter({line.key: 1 for line in case.lines})


def test_num_speaker_histogram(sources_pack):
    path, _case = sources_pack()
    dist = [0.2, 0.5, 0.3]
    cfg = mix_config(path, num_speakers={"distribution": dist, "max_speakers": 4}, batch_size=5)
    ld = loader.build_loader(cfg, "train", seed=11)
    counts = Counter()
    for epoch in range(16):
        ld.set_epoch(epoch)
        for batch in ld:
            counts.update(len(rows) for rows in mixtures(batch))
    total = sum(counts.values())
    assert set(counts) <= {1, 2, 3, 4}
    observed = [counts[1] / total, counts[2] / total, (counts[3] + counts[4]) / total]
    np.testing.assert_allclose(observed, dist, atol=0.07)
    assert counts[3] > 0 and counts[4] > 0  # bucket 3 is randint(3, max_speakers)


def test_num_speakers_clamped_to_speakers_available():
    index = SpeakerIndex.from_speakers(np.array([b"a", b"a", b"b"]))
    from speechpack.loader.tse.args import MixArgs
    args = MixArgs(distribution=(0.0, 0.0, 1.0), max_speakers=5)
    for position in range(20):
        group = choose_group(item_rng(0, 0, 0, position), 0, index, args)
        assert group[0] == 0 and len(group) == 2 and index.code[group[1]] == 1


def test_timeline_masks_exactly_zero_outside(sources_pack):
    path, _case = sources_pack()
    cfg = mix_config(path, timeline={"two_speaker": {"overlap_ratio": [0.2, 0.6],
                                                     "overlap_position": {"head": 1, "middle": 2, "tail": 1}},
                                     "extra_speaker_activity": [0.3, 0.7]})
    ld = loader.build_loader(cfg, "train", seed=2)
    partial = 0
    for batch in ld:
        tgt = batch["wav_target"].numpy()
        for r, ((s, e),) in enumerate(batch["timeline"]):
            T = CHUNK
            lo, hi = int(round(s * T)), int(round(e * T))
            assert not np.any(tgt[r, 0, :lo]) and not np.any(tgt[r, 0, hi:])
            assert np.any(tgt[r, 0, lo:hi])
            partial += (s, e) != (0.0, 1.0)
    assert partial > 0


def test_whole_utt_pads_to_group_max_without_timeline(sources_pack):
    path, _case = sources_pack(seconds=(0.6, 0.9, 1.2), name="varied")
    cfg = mix_config(path, whole_utt=True, chunk_len=None, timeline={"two_speaker": {"overlap_ratio": [0.2, 0.3]}})
    ld = loader.build_loader(cfg, "train", seed=4)
    for batch in ld:
        for rows in mixtures(batch):
            ratios = [batch["chunk_ratio"][r] for r in rows]
            longest = max(c["orig_len"] for c in ratios)
            for c, r in zip(ratios, rows):
                assert c["start_ratio"] == 0 and c["chunk_len"] == longest
                assert batch["timeline"][r] == [[0.0, 1.0]]
                assert np.any(batch["wav_target"][r, 0, :c["orig_len"]].numpy())
                assert not np.any(batch["wav_target"][r, 0, c["orig_len"]:].numpy())


def test_determinism_across_workers_and_resume(sources_pack):
    path, _case = sources_pack()
    cfg = mix_config(path, timeline={"two_speaker": {"overlap_ratio": [0.2, 0.6]}})
    a = collect(loader.build_loader(cfg, "train", seed=9, num_workers=0))
    b = collect(loader.build_loader(cfg, "train", seed=9, num_workers=2))
    assert len(a) == len(b) > 2
    assert_batches_equal(a, b)
    ld = loader.build_loader(cfg, "train", seed=9)
    it = iter(ld)
    next(it)
    next(it)
    state = ld.state_dict()
    resumed = loader.build_loader(cfg, "train", seed=9, num_workers=2)
    resumed.load_state_dict(state)
    rest = collect(resumed)
    assert len(rest) == len(a) - 2
    for x, y in zip(rest, a[2:]):
        assert x["key"] == y["key"] and torch.equal(x["wav_mix"], y["wav_mix"])


def test_val_reads_sources_unmixed(sources_pack):
    path, case = sources_pack()
    batch = next(iter(loader.build_loader(mix_config(path, batch_size=1), "val", seed=0)))
    assert batch["key"][0] in case.by_key() and "source_key" not in batch


def test_snr_mix_vectorised_and_silent_groups_redrawn():
    rng = np.random.default_rng(0)
    sources = rng.standard_normal((3, 3, 100))
    present = np.array([[True, True, True], [True, True, False], [True, False, False]])
    sources[~present] = 0
    snr = np.array([[0, 3, -2], [0, 5, 0], [0, 0, 0]], dtype=np.float64)
    mix, scaled, _factor = snr_mix(sources, present, snr, np.array([-6.0, 0.0, -1.0]))
    # The mixer works in float32 (what the batch holds): sums agree to float32 rounding.
    np.testing.assert_allclose(mix, scaled.sum(axis=1), atol=1e-6)
    peaks = np.maximum(np.abs(mix).max(-1), np.abs(scaled).max(axis=(1, 2)))
    np.testing.assert_allclose(20 * np.log10(peaks), [-6.0, 0.0, -1.0], atol=1e-5)
    e = (scaled ** 2).sum(-1)
    np.testing.assert_allclose(10 * np.log10(e[0, 0] / e[0, 1:]), [3, -2], atol=1e-5)
    masks = timeline_masks(np.array([[0.25, 0.5]]), 8)
    np.testing.assert_array_equal(masks[0], [0, 0, 1, 1, 0, 0, 0, 0])
    assert make_timeline(item_rng(0, 0, 0, 0), 3, None).tolist() == [[0, 1]] * 3


@pytest.mark.parametrize("args, match", [
    ({"online_mix": True}, "num_speakers"),
    ({"online_mix": True, "num_speakers": {"distribution": [0.5, 0.6, 0]}}, "distribution"),
    ({"online_mix": True, "num_speakers": {"distribution": [0, 0, 1], "max_speakers": 2}}, "max_speakers"),
    ({"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "mix_snr": {"range": [5, -5]}}, "range"),
    ({"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "timeline": {"overlap": [0, 1]}},
     "overlap"),
    ({"num_speakers": {"distribution": [0, 1, 0]}}, "online_mix"),
    ({"reverb_prob": 0.5}, "reverb_prob"),
    ({"noise_prob": 0.5}, "noise_prob"),
    ({"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "reverb_prob": 0.5,
      "rir_banks": [{"path": "x"}], "reverb_conf": {"rt60": [0.2, 0.4]}}, "not both"),
    ({"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "noise_prob": 1.5}, "noise_prob"),
    ({"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "noise_prob": 1,
      "noise_banks": [{"path": "n"}], "noise_snr": [10, 0]}, "noise_snr"),
])
def test_config_errors(args, match):
    with pytest.raises(ConfigError, match=match):
        LoaderConfig.from_dict({"packs": [{"path": "p"}], "dataset_args": args})


# ---------------------------------------------------------------------------------------------------------------
# Reverberation and noise from bank packs
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def banks(real_audio, tmp_path):
    """(rir bank, noise bank): 3 synthetic decaying responses; the alsa Noise recording (48 kHz, packed at 16 kHz)."""
    from speechpack.packer.adapters.audio_bank import build_audio_bank

    rir_dir = tmp_path / "rirs"
    rir_dir.mkdir()
    rng = np.random.default_rng(1)
    for n in range(3):
        t = np.arange(int(0.2 * RATE)) / RATE
        h = rng.standard_normal(len(t)) * np.exp(-t / (0.02 * (n + 1))) * 0.3
        h[0] = 0.9
        soundfile.write(rir_dir / f"r{n}.wav", h.astype(np.float32), RATE, subtype="FLOAT")
    noise_dir = tmp_path / "noises"
    noise_dir.mkdir()
    data, rate = soundfile.read(real_audio("alsa")[4], dtype="float32")
    soundfile.write(noise_dir / "noise.wav", data, rate, subtype="FLOAT")
    out = {}
    for kind, folder in (("rir", rir_dir), ("noise", noise_dir)):
        out[kind] = str(tmp_path / f"{kind}-bank")
        build_audio_bank(str(folder), kind, BuildOptions(out=out[kind], sample_rate=RATE, progress=False))
    return out["rir"], out["noise"]


def test_reverb_replaces_or_keeps_the_dry_targets(sources_pack, banks):
    path, _case = sources_pack()
    rir, _noise = banks
    dry = collect(loader.build_loader(mix_config(path), "train", seed=6))
    wet = collect(loader.build_loader(mix_config(path, reverb_prob=1, rir_banks=[{"path": rir}]), "train", seed=6))
    kept = collect(loader.build_loader(mix_config(path, reverb_prob=1, rir_banks=[{"path": rir}],
                                                  reverb_keep_dry=True), "train", seed=6))
    for d, w, k in zip(dry, wet, kept):
        assert d["key"] == w["key"] == k["key"]
        assert not torch.equal(d["wav_target"], w["wav_target"])
        for rows in mixtures(w):
            np.testing.assert_allclose(w["wav_mix"][rows[0], 0].numpy(), w["wav_target"][rows].sum(0)[0].numpy(),
                                       atol=1e-6)
            # the mixture is reverberant, the kept targets are the dry sources (scaled alike)
            np.testing.assert_array_equal(k["wav_mix"][rows[0]].numpy(), w["wav_mix"][rows[0]].numpy())
            for r in rows:
                a, b = k["wav_target"][r, 0].double().numpy(), d["wav_target"][r, 0].double().numpy()
                c = a @ b / (b @ b)
                assert c > 0
                np.testing.assert_allclose(a, c * b, atol=1e-6)


def test_rir_spectra_are_cached_without_changing_a_bit(sources_pack, banks, monkeypatch):
    """Each RIR is decoded and transformed once per process and FFT size; batches equal those of a loader that
    keeps nothing (a zero-byte cache recomputes every spectrum)."""
    import speechpack.loader.tse.online
    from speechpack import loader
    path, _case = sources_pack()
    rir, _noise = banks
    cfg = mix_config(path, reverb_prob=1, rir_banks=[{"path": rir}])
    cached = loader.build_loader(cfg, "train", seed=6)
    with_cache = collect(cached)
    cache = cached.builder.online.rir_cache
    assert 0 < len(cache) <= 2 * 3 * 2  # 3 RIRs, decoded + one spectrum per FFT size (one chunk length here)
    assert cache.nbytes <= cache.budget
    monkeypatch.setattr(loader.tse.online, "RIR_CACHE_BYTES", 0)
    uncached = loader.build_loader(cfg, "train", seed=6)
    without = collect(uncached)
    assert len(uncached.builder.online.rir_cache) == 0
    for a, b in zip(with_cache, without):
        assert torch.equal(a["wav_mix"], b["wav_mix"]) and torch.equal(a["wav_target"], b["wav_target"])


def test_reused_item_generators_give_item_rng_streams():
    """The loader's reused per-item generators draw exactly what fresh ``item_rng`` generators draw, whatever
    was drawn from them in the batch before."""
    import pickle

    from speechpack.loader.rng import ItemGenerators

    pool = ItemGenerators(seed=11)
    for epoch, batch, count in [(0, 0, 3), (2, 5, 5), (2, 5, 2), (1, 0, 4)]:
        generators = pool.batch(epoch, batch, count)
        assert len(generators) == count
        for position, generator in enumerate(generators):
            fresh = item_rng(11, epoch, batch, position)
            assert generator.random(3).tolist() == fresh.random(3).tolist()
            assert generator.integers(7) == fresh.integers(7)  # a buffered 32-bit draw after 64-bit ones
            assert generator.integers(1000, size=4).tolist() == fresh.integers(1000, size=4).tolist()
    assert len(pickle.dumps(pool)) < 200
    assert pickle.loads(pickle.dumps(pool)).batch(2, 5, 1)[0].random() == item_rng(11, 2, 5, 0).random()
    with pytest.raises(PlanError, match="non-negative"):
        pool.batch(-1, 0, 1)


def test_byte_budget_cache_and_scratch():
    import pickle

    from speechpack.loader.tse.buffers import ByteBudgetCache, Scratch

    cache = ByteBudgetCache(budget=3 * 800)
    made = []

    def make(n):
        made.append(n)
        return np.full(100, n, dtype=np.float64)  # 800 bytes

    for n in (0, 1, 2, 0, 3):  # 0 is used again before 3 arrives, so 1 is the least recently used
        assert cache.get(n, lambda n=n: make(n))[0] == n
    assert made == [0, 1, 2, 3] and len(cache) == 3 and cache.nbytes == 2400
    cache.get(1, lambda: make(1))
    assert made[-1] == 1, "1 was dropped"
    with pytest.raises(ValueError):
        cache.get(0, lambda: make(0))[0] = 5.0  # shared values are read-only
    assert cache.get(9, lambda: np.zeros(1000)).size == 1000 and 9 not in cache._items  # larger than the budget
    restored = pickle.loads(pickle.dumps(cache))
    assert len(restored) == 0 and restored.budget == cache.budget
    scratch = Scratch()
    rows = scratch.rows(3, 10)
    assert rows.shape == (3, 10) and rows.dtype == np.float32
    assert np.shares_memory(scratch.rows(2, 10), rows), "reused, not reallocated"
    assert scratch.rows(4, 100).shape == (4, 100)
    assert pickle.loads(pickle.dumps(scratch)).rows(1, 1).shape == (1, 1)
    assert len(pickle.dumps(scratch)) < 200, "a scratch pickles empty"


def test_noise_is_added_to_the_mixture_only(sources_pack, banks):
    path, _case = sources_pack()
    _rir, noise = banks
    clean = collect(loader.build_loader(mix_config(path), "train", seed=8))
    noisy = collect(loader.build_loader(mix_config(path, noise_prob=1, noise_banks=[{"path": noise}],
                                                   noise_snr=[0, 10]), "train", seed=8))
    for c, n in zip(clean, noisy):
        assert torch.equal(c["wav_target"], n["wav_target"])
        for rows in mixtures(n):
            total = n["wav_target"][rows].double().sum(0)[0].numpy()
            residual = n["wav_mix"][rows[0], 0].double().numpy() - total
            snr = 10 * np.log10((total @ total) / (residual @ residual))
            assert -0.01 <= snr <= 10.01


def test_a_bank_of_the_wrong_kind_is_refused(sources_pack, banks):
    path, _case = sources_pack()
    _rir, noise = banks
    with pytest.raises(MixError, match="rir bank"):
        loader.build_loader(mix_config(path, reverb_prob=1, rir_banks=[{"path": noise}]), "train")
