"""The ASD loader (``task: asd``, ``loader/asd/``): MuVAP's conformance values (timeline, chunks, gains, DDP),
exactly-once scoring, crop-to-shortest, augmentation (determinism, different-clip donors) and the batch fields.

Packs are written with ``PackWriter`` from real speech (pocketsphinx's librivox clips, the ``real_audio``
fixture) and generated faces whose pixels encode (track, native frame), so every face a batch holds can be traced
back to the native frame it came from.  Packs made by the real ASD adapters from a real talking-face video are
exercised in test_asd_datamodule.py and test_asd_levels.py.
"""

from __future__ import annotations


import numpy as np
import pytest

from factories.asd_tracks import TRACKS, Track, asd_config, batches, face_frame, write_asd_pack
from speechpack.loader import build_loader
from speechpack.loader.asd.args import AsdArgs, parse_dataset_args
from speechpack.loader.asd.augment import (
    AugmentError,
    DonorIndex,
    VisualDraw,
    apply_visual,
    draw_visual,
    fit_donor,
    mix_at_snr,
)
from speechpack.loader.asd.timeline import muvap_windows, scored_span
from speechpack.loader.asd.timeline import (
    model_frame_index,
    native_frame_scores,
    source_frame_index,
)
from speechpack.loader.plan.batching import BudgetArgs, make_budget_plan
from speechpack.loader.plan.train_windows import tile_windows
from speechpack.loader.config import ConfigError
from speechpack.loader.rng import item_rng
from speechpack.loader.normalize import muvap_gain
from speechpack.loader.pack import open_pack
from speechpack.schemas.constants import ASD_SAMPLE_RATE, FACE_SHAPE
from speechpack.schemas.timebase import (
    ASD_MODEL_FPS,
    SAMPLES_PER_MODEL_FRAME,
    TimelineError,
    audio_sample_count,
    model_frame_count,
)

FAST_MODULE = True  # imports without torch: its tests marked fast join the tier (docs/testing.md)

#: The pack below has one track without a model frame on purpose; the warning about it is tested once.
pytestmark = pytest.mark.filterwarnings("ignore:.*no 25 Hz model frame:UserWarning")

# ---------------------------------------------------------------------------------------------------------------
# Packs from real speech
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def asd_pack(tmp_path, real_audio):
    path = str(tmp_path / "asd")
    write_asd_pack(path, TRACKS, real_audio("pocketsphinx"))
    return path


# ---------------------------------------------------------------------------------------------------------------
# Conformance values (docs/asd.md, "The model timeline")
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.fast
@pytest.mark.parametrize("frames, fps, model, audio", [(30, 30.0, 25, 16000), (30, 23.976, 31, 20020),
                                                       (31, 29.97, 25, 16550), (1, 30.0, 0, 533)])
def test_timeline_conformance(frames, fps, model, audio):
    assert int(model_frame_count(frames, fps)) == model
    assert int(audio_sample_count(frames, fps)) == audio


@pytest.mark.fast
def test_samples_per_model_frame_derives_from_the_rates():
    assert SAMPLES_PER_MODEL_FRAME == 640 == ASD_SAMPLE_RATE // ASD_MODEL_FPS


@pytest.mark.fast
@pytest.mark.parametrize("frames, fps", [(30, 30.0), (31, 29.97), (520, 23.976), (45, 15.0), (7, 60.0), (300, 25.0)])
def test_one_index_for_faces_and_labels_and_its_inverse(frames, fps):
    m = int(model_frame_count(frames, fps))
    index = source_frame_index(0, m, frames, fps)
    expected = np.clip(np.floor((np.arange(m) + 0.5) / 25 * fps), 0, frames - 1)
    np.testing.assert_array_equal(index, expected)
    assert np.all(np.diff(index) >= 0)
    inverse = model_frame_index(frames, fps)
    assert len(inverse) == frames and inverse.min() >= 0 and inverse.max() == m - 1
    np.testing.assert_array_equal(inverse, np.clip(np.floor((np.arange(frames) + 0.5) / fps * 25), 0, m - 1))
    # A chunk's index is the slice of the whole track's index.
    np.testing.assert_array_equal(source_frame_index(3, m, frames, fps), index[3:])


@pytest.mark.fast
def test_native_frame_scores_need_exactly_the_model_frames():
    scores = np.arange(25, dtype=np.float32)
    native = native_frame_scores(scores, 31, 29.97)
    assert len(native) == 31 and native[0] == 0 and native[-1] == 24
    with pytest.raises(TimelineError, match="expected 25 model-frame scores, got 24"):
        native_frame_scores(scores[:-1], 31, 29.97)
    with pytest.raises(TimelineError, match="no model frame"):
        model_frame_index(1, 30.0)
    with pytest.raises(TimelineError, match="source_fps must be finite and positive"):
        model_frame_count(10, 0.0)


@pytest.mark.fast
def test_chunks_conformance():
    w = muvap_windows(np.array([450, 401, 201]), train_window=250, hist_frames=50)
    spans = [(int(a), int(b - a)) for a, b in zip(w.start, w.stop)]
    assert spans[:3] == [(0, 150), (150, 150), (300, 150)]
    assert w.fed_length[:3].tolist() == [150, 200, 200]
    assert [b for _a, b in spans[3:6]] == [134, 133, 134]
    assert spans[6:] == [(0, 100), (100, 101)] and w.fed_length[6:].tolist() == [100, 151]


@pytest.mark.fast
def test_chunks_match_numpy_round_half_to_even_everywhere():
    lengths = np.arange(1, 2500)
    w = muvap_windows(lengths, 250, 50)
    for i, m in enumerate(lengths):
        mine = slice(w.first[i], w.first[i + 1])
        n = w.first[i + 1] - w.first[i]
        edges = np.round(np.linspace(0, m, n + 1)).astype(np.int64) if m > 200 else np.array([0, m])
        assert n == max(1, -(-m // 200))
        np.testing.assert_array_equal(np.concatenate([w.start[mine], w.stop[mine][-1:]]), edges)
        np.testing.assert_array_equal(w.fed_start[mine], np.maximum(w.start[mine] - 50, 0))


@pytest.mark.fast
def test_tile_windows_rounds_ties_to_even_as_numpy():
    """The shared tiling itself matches MuVAP's round(linspace(0, M, n + 1)), ties included (M = 201, n = 2)."""
    lengths = np.arange(1, 1200)
    windows = tile_windows(lengths, 200, 50)
    for m in (201, 401, 450, 999, 1000, 1199):
        n = -(-m // 200)
        edges = np.round(np.linspace(0, m, n + 1)).astype(np.int64)
        chunks = slice(windows.first[m - 1], windows.first[m])
        np.testing.assert_array_equal(windows.start[chunks], edges[:-1])
        np.testing.assert_array_equal(windows.stop[chunks], edges[1:])


@pytest.mark.fast
def test_scored_span_must_leave_frames_to_score():
    assert scored_span(250, 50) == 200
    with pytest.raises(ConfigError, match="hist_frames 250 leaves no scored frame"):
        scored_span(250, 250)
    with pytest.raises(ConfigError, match=r"dataset_args.hist_frames: 300 leaves no scored frame"):
        parse_dataset_args({"train_window": 250, "hist_frames": 300})


@pytest.mark.fast
@pytest.mark.parametrize("rms, peak, gain", [(0.1, 0.5, 0.5623413), (0.001, 0.01, 10.0), (0.05, 0.98, 0.99 / 0.98),
                                             (0.0, 0.0, 1.0)])
def test_gain_conformance(rms, peak, gain):
    assert float(muvap_gain(rms, peak)) == pytest.approx(gain, rel=1e-6)


@pytest.mark.fast
def test_ddp_conformance_ten_batches_over_four_ranks():
    lengths = np.full(10, 2048)  # one chunk per batch at a 2048-frame budget: 10 batches
    args = BudgetArgs(budget=2048, min_batch=1, max_batch=16)
    plans = [make_budget_plan(lengths, args, 0, 0, r, 4, False, "pad") for r in range(4)]
    assert [len(p) for p in plans] == [3, 3, 3, 3]
    assert plans[1].global_batch.tolist() == [1, 5, 9]
    assert sum(int(p.valid.sum()) for p in plans) == 10  # the two repeats are flagged invalid


# ---------------------------------------------------------------------------------------------------------------
# dataset_args
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.fast
def test_dataset_args_defaults_are_muvaps_and_unknown_keys_are_named():
    args = parse_dataset_args(None)
    assert args == AsdArgs()
    assert (args.train_window, args.hist_frames, args.frame_budget, args.min_batch, args.max_batch) == (
        250, 50, 2048, 4, 16)
    assert args.val_frame_budget == 8192 and args.audio_mix_snr == (-5.0, 5.0)
    with pytest.raises(ConfigError, match=r"dataset_args: unknown key\(s\) chunk_len"):
        parse_dataset_args({"chunk_len": 100})
    with pytest.raises(ConfigError, match=r"dataset_args.normalize: 'rms' is not one of muvap, none"):
        parse_dataset_args({"normalize": "rms"})
    with pytest.raises(ConfigError, match=r"dataset_args.audio_mix_prob: must be in \[0, 1\]"):
        parse_dataset_args({"audio_mix_prob": 1.5})
    with pytest.raises(ConfigError, match=r"dataset_args.audio_mix_snr: low 5.0 > high -5.0"):
        parse_dataset_args({"audio_mix_snr": [5, -5]})
    with pytest.raises(ConfigError, match=r"dataset_args.max_batch: 2 is below min_batch 4"):
        parse_dataset_args({"max_batch": 2})
    assert parse_dataset_args({"frame_budget": 100}).val_frame_budget == 400


# ---------------------------------------------------------------------------------------------------------------
# The loader on real speech
# ---------------------------------------------------------------------------------------------------------------


def test_validation_scores_every_native_frame_exactly_once(asd_pack):
    cfg = asd_config(asd_pack, val_frame_budget=600, val_max_batch=3)
    pack = open_pack(asd_pack)
    for world_size in (1, 3):
        seen: dict[str, int] = {}
        ranks = batches(cfg, "val", world_size=world_size)
        assert len({len(r) for r in ranks}) == 1  # every rank the same number of batches
        for batch in (b for rank in ranks for b in rank):
            width = batch["faces"].shape[1]
            assert width == max(batch["model_frames"])  # padded to the longest track
            for r, key in enumerate(batch["key"]):
                m, frames = int(batch["model_frames"][r]), int(batch["source_frames"][r])
                scored = batch["scored"][r]
                if not batch["valid"][r]:
                    assert not scored.any()
                    continue
                assert scored[:m].all() and not scored[m:].any()
                assert not batch["faces"][r, m:].any() and not batch["audio"][r, 0, m * 640:].any()
                # Model scores = the native frame each model frame shows; mapped back to every native frame.
                shown = np.array([face_frame(f)[1] for f in batch["faces"][r, :m]])
                native = native_frame_scores(shown, frames, float(batch["source_fps"][r]))
                assert len(native) == frames and np.all(np.abs(native - np.arange(frames)) <= 1)
                seen[key] = seen.get(key, 0) + 1
        expected = {t.key for t in TRACKS if model_frame_count(t.frames, t.fps) > 0}
        assert seen == dict.fromkeys(expected, 1), world_size
    assert len(pack) == len(TRACKS)


def test_zero_frame_track_is_reported_not_silently_dropped(asd_pack):
    with pytest.warns(UserWarning, match=r"1 ASD track\(s\) have no 25 Hz model frame .*c1:a"):
        loader = build_loader(asd_config(asd_pack), "val")
    report = loader.report()
    assert report.filter_report == {"zero_model_frames": 1} and report.filtered == 1
    assert report.items == len(TRACKS) - 1


def test_train_chunks_crop_to_the_shortest_and_score_each_frame_at_most_once(asd_pack):
    cfg = asd_config(asd_pack, train_window=60, hist_frames=20, frame_budget=240, min_batch=2, max_batch=4,
                     audio_mix_prob=0.0, visual_aug=False)
    pack = open_pack(asd_pack)
    numbers = {t.key: i for i, t in enumerate(TRACKS)}
    for world_size in (1, 2):
        ranks = batches(cfg, "train", world_size=world_size)
        assert len({len(r) for r in ranks}) == 1
        scored_frames: dict[str, np.ndarray] = {}
        for batch in (b for rank in ranks for b in rank):
            lengths = batch["faces"].shape[1]
            assert batch["audio"].shape == (len(batch["key"]), 1, lengths * 640)
            assert batch["faces"].dtype == np.uint8 and batch["labels"].dtype == np.uint8
            for r, key in enumerate(batch["key"]):
                track = TRACKS[numbers[key]]
                start = int(batch["start"][r])
                index = source_frame_index(start, start + lengths, track.frames, track.fps)
                shown = np.array([face_frame(f) for f in batch["faces"][r]])
                assert np.all(shown[:, 0] == numbers[key]) and np.array_equal(shown[:, 1], index)
                np.testing.assert_array_equal(batch["labels"][r], (index % 3 == 0).astype(np.uint8))
                # Audio: (x - mean) * gain from the pack's whole-recording statistics, frame k at k * 640.
                seg = pack.segments_of("audio", numbers[key])[0]
                table = pack.streams["audio"]
                gain = float(muvap_gain(table.rms[seg], table.peak[seg]))
                raw = pack.read_segment("audio", seg)[0].astype(np.float64)
                lo = start * 640
                want = np.zeros(lengths * 640)
                take = max(0, min(len(raw) - lo, lengths * 640))
                want[:take] = (raw[lo:lo + take] - table.mean[seg]) * gain
                np.testing.assert_allclose(batch["audio"][r, 0], want, atol=2e-6)
                frames = scored_frames.setdefault(key, np.zeros(int(model_frame_count(track.frames, track.fps)),
                                                                dtype=np.int64))
                hits = np.flatnonzero(batch["scored"][r]) + start
                if batch["valid"][r]:
                    assert not batch["scored"][r, :1].any() or start == 0  # a history prefix is never scored
                    frames[hits] += 1
                else:
                    assert not len(hits)
        counts = np.concatenate(list(scored_frames.values()))
        assert counts.max() == 1  # never twice; cropping to the shortest may leave a few out
        assert counts.mean() > 0.8


def test_scored_mask_is_false_on_the_history_prefix(asd_pack):
    cfg = asd_config(asd_pack, train_window=60, hist_frames=20, frame_budget=60, min_batch=1, max_batch=1,
                     audio_mix_prob=0.0, visual_aug=False)
    loader = build_loader(cfg, "train", seed=0)
    windows = loader.builder.train_windows
    seen = 0
    for batch in loader:
        (start,) = batch["start"].tolist()
        unit = np.flatnonzero((windows.fed_start == start) & (loader.builder.tracks.model_frames[windows.item] ==
                                                              int(batch["model_frames"][0])))[0]
        prefix = int(windows.start[unit] - windows.fed_start[unit])
        assert not batch["scored"][0, :prefix].any() and batch["scored"][0, prefix:].all()
        seen += prefix > 0
    assert seen  # some chunks did have history


def test_normalize_none_feeds_the_stored_audio(asd_pack):
    cfg = asd_config(asd_pack, normalize="none", train_window=None, audio_mix_prob=0.0, visual_aug=False)
    pack = open_pack(asd_pack)
    numbers = {t.key: i for i, t in enumerate(TRACKS)}
    for batch in batches(cfg, "val")[0]:
        for r, key in enumerate(batch["key"]):
            raw = pack.read_segment("audio", pack.segments_of("audio", numbers[key])[0])[0]
            fed = int(batch["model_frames"][r]) * 640
            take = min(len(raw), fed)
            np.testing.assert_array_equal(batch["audio"][r, 0, :take], raw[:take])
            assert not batch["audio"][r, 0, take:].any()


# ---------------------------------------------------------------------------------------------------------------
# Augmentation
# ---------------------------------------------------------------------------------------------------------------


def test_augmented_batches_are_the_same_whatever_the_workers_and_change_with_the_epoch(asd_pack):
    cfg = asd_config(asd_pack, train_window=60, hist_frames=20, frame_budget=240, audio_mix_prob=0.7)
    serial = batches(cfg, "train", seed=5)[0]
    workers = batches(cfg, "train", seed=5, num_workers=2)[0]
    assert len(serial) == len(workers)
    for a, b in zip(serial, workers):
        assert a["key"] == b["key"]
        for name in ("audio", "faces", "labels", "scored"):
            np.testing.assert_array_equal(a[name], b[name])
    other = batches(cfg, "train", seed=5, epoch=1)[0]
    assert [b["key"] for b in other] != [b["key"] for b in serial]


def test_second_voice_comes_from_a_different_clip(tmp_path, real_audio):
    """Clip ``quiet`` is silent: its tracks change only by a donor from the speaking clip, and the speaking clip's
    tracks, whose only other clip is silent, never change."""
    tracks = [Track("loud:1", "loud", 100, 25.0), Track("loud:2", "loud", 100, 25.0),
              Track("quiet:1", "quiet", 100, 25.0, silent=True), Track("quiet:2", "quiet", 100, 25.0, silent=True)]
    path = str(tmp_path / "clips")
    write_asd_pack(path, tracks, real_audio("pocketsphinx"))
    common = dict(train_window=None, frame_budget=400, min_batch=4, max_batch=4, visual_aug=False)
    plain = {k: a for b in batches(asd_config(path, audio_mix_prob=0.0, **common), "train")[0]
             for k, a in zip(b["key"], b["audio"])}
    mixed = {k: a for b in batches(asd_config(path, audio_mix_prob=1.0, **common), "train")[0]
             for k, a in zip(b["key"], b["audio"])}
    for key in ("loud:1", "loud:2"):
        np.testing.assert_array_equal(mixed[key], plain[key])  # the donor was silent: from the other clip
    for key in ("quiet:1", "quiet:2"):
        assert not plain[key].any() and np.abs(mixed[key]).max() > 0  # a voice from the loud clip
        assert np.abs(mixed[key]).max() <= 1.0


def test_mixing_needs_two_clips(tmp_path, real_audio):
    path = str(tmp_path / "one")
    write_asd_pack(path, [Track("c:1", "c", 50, 25.0), Track("c:2", "c", 50, 25.0)], real_audio("pocketsphinx"))
    with pytest.raises(AugmentError, match="audio_mix_prob: 0.5 needs tracks from at least two clips"):
        build_loader(asd_config(path), "train")
    build_loader(asd_config(path), "val")  # validation never mixes


@pytest.mark.fast
def test_donor_draws_cover_every_other_clip_uniformly():
    clips = np.array([3, 1, 3, 2, 1, 3, 7])
    donors = DonorIndex(clips)
    u = (np.arange(4000) + 0.5) / 4000
    for track in range(len(clips)):
        drawn = np.array([donors.draw(track, x) for x in u])
        assert not np.any(clips[drawn] == clips[track])
        others = np.flatnonzero(clips != clips[track])
        counts = np.bincount(drawn, minlength=len(clips))[others]
        assert set(np.flatnonzero(np.bincount(drawn, minlength=len(clips)))) == set(others)
        assert counts.max() - counts.min() <= 1


@pytest.mark.fast
def test_donor_fit_and_snr():
    donor = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(fit_donor(donor, 4, 0.0), [0, 1, 2, 3])
    np.testing.assert_array_equal(fit_donor(donor, 4, 0.999), [6, 7, 8, 9])
    np.testing.assert_array_equal(fit_donor(donor, 25, 0.3), np.resize(donor, 25))  # tiled
    rng = np.random.default_rng(0)
    speech_ = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    noise = (0.3 * rng.standard_normal(16000)).astype(np.float32)
    mixed = speech_.copy()
    mix_at_snr(mixed, noise, 3.0)
    added = mixed - speech_
    snr = 10 * np.log10(np.mean(speech_ ** 2) / np.mean(added ** 2))
    assert snr == pytest.approx(3.0, abs=0.01)


@pytest.mark.fast
def test_visual_augmentations_apply_to_the_whole_chunk():
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, FACE_SHAPE, dtype=np.uint8)
    chunk = np.repeat(frame[None], 5, axis=0)
    flipped = chunk.copy()
    apply_visual(flipped, VisualDraw("flip"))
    np.testing.assert_array_equal(flipped[2], frame[:, ::-1])
    for draw in (VisualDraw("crop", scale=0.7, corner=(0.5, 0.2)), VisualDraw("rotate", angle=-12.0)):
        out = chunk.copy()
        apply_visual(out, draw)
        assert out.dtype == np.uint8 and out.shape == chunk.shape
        assert not np.array_equal(out[0], frame)
        assert all(np.array_equal(out[0], f) for f in out)  # one transform for every frame
    same = chunk.copy()
    apply_visual(same, VisualDraw("orig"))
    np.testing.assert_array_equal(same, chunk)
    kinds = {draw_visual(item_rng(0, 0, 0, p)).kind for p in range(200)}
    assert kinds == {"orig", "flip", "crop", "rotate"}
    d = draw_visual(item_rng(1, 2, 3, 4))
    assert d == draw_visual(item_rng(1, 2, 3, 4))
    for p in range(200):
        d = draw_visual(item_rng(0, 0, 0, p))
        assert 0.7 <= d.scale <= 1.0 and -15.0 <= d.angle <= 15.0


# ---------------------------------------------------------------------------------------------------------------
# A pack made by the AVA adapter from a real talking-face video (tests/factories/asd_inputs.py)
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def video_pack(tmp_path):
    from factories.asd_inputs import make_asd_pack

    return make_asd_pack(tmp_path)


def test_real_video_pack_on_the_model_timeline(video_pack):
    """Faces, labels and audio of every batch row are the pack's, at MuVAP's shared index; validation scores
    every native frame of every track exactly once; training crops to the shortest and mixes across clips."""
    pack = open_pack(video_pack)
    tracks = {pack.keys[i]: i for i in range(len(pack))}
    seen = {}
    for batch in batches(asd_config(video_pack, val_frame_budget=150), "val", world_size=2)[0] + \
            batches(asd_config(video_pack, val_frame_budget=150), "val", world_size=2)[1]:
        for r, key in enumerate(batch["key"]):
            if not batch["valid"][r]:
                continue
            i = tracks[key]
            sample = pack.sample(i)
            frames, fps = len(sample.data["faces"]), float(pack.attrs["source_fps"][i])
            m = int(model_frame_count(frames, fps))
            assert int(batch["model_frames"][r]) == m and batch["scored"][r].sum() == m
            index = source_frame_index(0, m, frames, fps)
            np.testing.assert_array_equal(batch["faces"][r, :m], sample.data["faces"][index])
            np.testing.assert_array_equal(batch["labels"][r, :m], sample.data["labels"][index])
            assert set(np.unique(sample.data["labels"])) == {0, 1}  # the man talks in bursts
            # Score each model frame by its own index: mapped back, every native frame gets one score.
            native = native_frame_scores(index, frames, fps)
            assert len(native) == frames and np.all(np.abs(native - np.arange(frames)) <= 1)
            table = pack.streams["audio"]
            seg = pack.segments_of("audio", i)[0]
            gain = float(muvap_gain(table.rms[seg], table.peak[seg]))
            want = (sample.targets[0][:m * 640].astype(np.float64) - table.mean[seg]) * gain
            np.testing.assert_allclose(batch["audio"][r, 0, :len(want)], want, atol=2e-6)
            seen[key] = seen.get(key, 0) + 1
    assert seen == dict.fromkeys(tracks, 1)
    cfg = asd_config(video_pack, train_window=40, hist_frames=10, frame_budget=120, min_batch=2, max_batch=4,
                     audio_mix_prob=1.0)
    train = batches(cfg, "train", seed=2)[0]
    builder = build_loader(cfg, "train").builder
    w = builder.train_windows
    fed = {(str(pack.keys[int(builder.tracks.sample[w.item[u]])]), int(w.fed_start[u])): int(w.fed_length[u])
           for u in range(len(w))}
    assert train
    for batch in train:  # cropped to the shortest fed chunk of the batch
        assert batch["faces"].shape[1] == min(fed[(k, int(s))] for k, s in zip(batch["key"], batch["start"]))
    plain = batches(dict(cfg, dataset_args=dict(cfg["dataset_args"], audio_mix_prob=0.0)), "train", seed=2)[0]
    for a, b in zip(train, plain):
        assert a["key"] == b["key"] and not np.array_equal(a["audio"], b["audio"])  # every row got a second voice
        assert np.abs(a["audio"]).max() <= 1.0


@pytest.mark.fast
@pytest.mark.parametrize("frames", [1, 3, 700])
def test_visual_augmentations_equal_opencv_frame_by_frame(frames):
    """Frames go through OpenCV in groups, as channels of one image: the same as one call per frame."""
    import cv2

    rng = np.random.default_rng(frames)
    chunk = rng.integers(0, 256, (frames, *FACE_SHAPE), dtype=np.uint8)
    rotated = chunk.copy()
    apply_visual(rotated, VisualDraw("rotate", angle=9.0))
    matrix = cv2.getRotationMatrix2D((55.5, 55.5), 9.0, 1.0)
    for got, frame in zip(rotated, chunk):
        np.testing.assert_array_equal(got, cv2.warpAffine(frame, matrix, (112, 112), flags=cv2.INTER_LINEAR,
                                                          borderMode=cv2.BORDER_REFLECT_101))
    cropped = chunk.copy()
    apply_visual(cropped, VisualDraw("crop", scale=0.8, corner=(1.0, 0.0)))
    side = int(round(112 * 0.8))
    for got, frame in zip(cropped, chunk):
        np.testing.assert_array_equal(got, cv2.resize(frame[112 - side:, :side], (112, 112),
                                                      interpolation=cv2.INTER_LINEAR))


def test_several_packs_with_weighting(tmp_path, real_audio):
    """Two packs (AVA-like and WASD-like), the second repeated twice per epoch: its chunks come twice, the first's
    once (weighting is the loader's, per track; a repeated track brings all its chunks)."""
    speech = real_audio("pocketsphinx")
    paths = [str(tmp_path / "a"), str(tmp_path / "b")]
    write_asd_pack(paths[0], [t for t in TRACKS if t.clip in ("c0", "c1")], speech)
    write_asd_pack(paths[1], [t for t in TRACKS if t.clip in ("c2", "c3")], speech)
    cfg = {"task": "asd", "packs": [{"path": paths[0]}, {"path": paths[1], "repeat": 2}],
           "dataset_args": dict(train_window=60, hist_frames=20, frame_budget=240, audio_mix_prob=0.5)}
    loader = build_loader(cfg, "train", seed=4)
    windows, tracks = loader.builder.train_windows, loader.builder.tracks
    expected = {}
    for unit in range(len(windows)):
        key = (int(tracks.pack[windows.item[unit]]), int(tracks.sample[windows.item[unit]]))
        expected[key] = expected.get(key, 0) + (2 if key[0] == 1 else 1)
    got = {}
    numbers = {t.key: i for i, t in enumerate(TRACKS)}
    for batch in loader:
        for key, valid in zip(batch["key"], batch["valid"].tolist()):
            if valid:
                pack = 0 if TRACKS[numbers[key]].clip in ("c0", "c1") else 1
                sample = [t.key for t in TRACKS if (t.clip in ("c0", "c1")) == (pack == 0)].index(key)
                got[(pack, sample)] = got.get((pack, sample), 0) + 1
    assert got == expected


def test_plan_reports_crop_to_shortest_utilisation_for_asd_training(tmp_path):
    """``speechpack plan`` on asd training: frames kept when every batch is cut to its shortest row (MuVAP's
    sum |b| * min L / sum L), not padding; validation pads, as the TSE loader does."""
    from factories.asd_inputs import make_asd_pack
    from speechpack.loader.plan.planning_report import plan_report
    from speechpack.loader.torch import build_loader as build

    pack = make_asd_pack(tmp_path / "asd")
    config = {"task": "asd", "packs": [{"path": pack}],
              "dataset_args": {"train_window": 40, "hist_frames": 10, "frame_budget": 60, "min_batch": 1}}
    report = plan_report(config, "train")
    epoch = report.epochs[0]
    assert epoch.cropped
    loader = build(config, "train")
    lengths = loader.builder.unit_lengths()
    plan = loader.dataset.plan(0)
    kept = offered = 0
    for b in range(len(plan)):
        items, valid = plan.batch(b)
        kept += int(valid.sum()) * int(lengths[items].min())
        offered += int(lengths[items][valid].sum())
    assert (epoch.real, epoch.offered) == (kept, offered)
    assert epoch.utilisation == pytest.approx(kept / offered)
    assert "frames kept: batches crop to their shortest row" in report.describe()
    assert not plan_report(config, "val").epochs[0].cropped
