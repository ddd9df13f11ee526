"""MuVAP's training augmentations in the asd loader (``loader/asd/``): ``jitter`` (chunks move to a random start
every epoch, planned with the lengths actually fed) and ``substitute_audio_prob`` (another clip's voice, labels
0); both counter-based, so batches are the same for any number of workers.  Packs hold real speech."""

from __future__ import annotations

import numpy as np
import pytest

from speechpack.loader import build_loader
from speechpack.loader.asd.augment import AugmentError
from speechpack.loader.asd.timeline import jitter_windows, muvap_windows
from speechpack.loader.plan.planning_report import plan_report
from factories.asd_tracks import TRACKS, Track, asd_config, batches, face_frame, write_asd_pack

pytestmark = pytest.mark.filterwarnings("ignore:.*no 25 Hz model frame:UserWarning")

JITTER = dict(train_window=60, hist_frames=20, frame_budget=240, min_batch=2, max_batch=4, audio_mix_prob=0.0,
              visual_aug=False, jitter=True)


@pytest.fixture
def asd_pack(tmp_path, real_audio):
    path = str(tmp_path / "asd")
    write_asd_pack(path, TRACKS, real_audio("pocketsphinx"))
    return path


def test_jitter_windows_keep_span_lengths_and_stay_inside_tracks():
    model_frames = np.array([450, 401, 201, 30, 1000])
    windows = muvap_windows(model_frames, 250, 50)
    moved = jitter_windows(windows, model_frames, 50, seed=3, epoch=2)
    span = windows.stop - windows.start
    np.testing.assert_array_equal(moved.stop - moved.start, span)  # same scored length
    assert np.all(moved.start >= 0) and np.all(moved.stop <= model_frames[windows.item])
    np.testing.assert_array_equal(moved.fed_start, np.maximum(moved.start - 50, 0))  # history where there is some
    assert np.all(moved.fed_length <= 250)
    again = jitter_windows(windows, model_frames, 50, seed=3, epoch=2)
    np.testing.assert_array_equal(again.start, moved.start)  # a pure function of (seed, epoch)
    other = jitter_windows(windows, model_frames, 50, seed=3, epoch=3)
    assert not np.array_equal(other.start, moved.start)
    # Every start a track allows is drawn: U{0 .. M - span}.
    starts = np.concatenate([jitter_windows(windows, model_frames, 50, 0, e).start[windows.item == 3]
                             for e in range(200)])
    assert set(starts.tolist()) == {0}  # a 30-frame track is one chunk of its whole length: nowhere to move
    long_starts = np.concatenate([jitter_windows(windows, model_frames, 50, 0, e).start[windows.item == 2][:1]
                                  for e in range(400)])
    assert long_starts.min() == 0 and long_starts.max() == 201 - 100


def test_jittered_batches_feed_what_was_planned(asd_pack):
    loader = build_loader(asd_config(asd_pack, **JITTER), "train", seed=4)
    numbers = {t.key: i for i, t in enumerate(TRACKS)}
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        windows = loader.builder.windows_of(epoch)
        plan = loader.dataset.plan(epoch)
        lengths = loader.builder.unit_lengths(epoch)
        for b, batch in enumerate(loader):
            items, _valid = plan.batch(b)
            assert batch["faces"].shape[1] == int(lengths[items].min())  # cropped to the planned shortest
            np.testing.assert_array_equal(batch["start"].numpy(), windows.fed_start[items])
            for r, key in enumerate(batch["key"]):
                prefix = int(windows.start[items[r]] - windows.fed_start[items[r]])
                assert not batch["scored"][r, :prefix].any() and batch["scored"][r, prefix:].all()
                assert face_frame(batch["faces"][r, 0].numpy())[0] == numbers[key]
    starts = [loader.builder.windows_of(e).start for e in (0, 1)]
    assert not np.array_equal(*starts)


def test_jitter_is_the_same_whatever_the_workers(asd_pack):
    cfg = asd_config(asd_pack, **{**JITTER, "audio_mix_prob": 0.5, "substitute_audio_prob": 0.3, "visual_aug": True})
    serial = batches(cfg, "train", seed=5, epoch=1)[0]
    workers = batches(cfg, "train", seed=5, epoch=1, num_workers=2)[0]
    assert len(serial) == len(workers) > 2
    for a, b in zip(serial, workers):
        assert a["key"] == b["key"]
        for name in ("audio", "faces", "labels", "scored", "start"):
            np.testing.assert_array_equal(a[name], b[name])


def test_plan_measures_jittered_utilisation_from_the_lengths_fed(asd_pack):
    """``speechpack plan`` with jitter plans each epoch's moved chunks, as the loader does."""
    config = asd_config(asd_pack, **JITTER)
    report = plan_report(config, "train", epochs=2, seed=4)
    loader = build_loader(config, "train", seed=4)
    for epoch, stats in enumerate(report.epochs):
        plan = loader.dataset.plan(epoch)
        lengths = loader.builder.unit_lengths(epoch)
        kept = sum(int(plan.batch(b)[1].sum()) * int(lengths[plan.batch(b)[0]].min()) for b in range(len(plan)))
        assert stats.real == kept
        assert 0.5 < stats.utilisation <= 1.0


def test_unit_lengths_need_the_epoch_with_jitter(asd_pack):
    loader = build_loader(asd_config(asd_pack, **JITTER), "train")
    with pytest.raises(ValueError, match="pass the epoch"):
        loader.builder.unit_lengths()
    # without jitter the chunks are MuVAP's fixed grid, whatever the epoch
    fixed = build_loader(asd_config(asd_pack, **{**JITTER, "jitter": False}), "train")
    np.testing.assert_array_equal(fixed.builder.unit_lengths(), fixed.builder.unit_lengths(7))


def _clips_pack(tmp_path, real_audio) -> str:
    tracks = [Track("loud:1", "loud", 100, 25.0), Track("loud:2", "loud", 100, 25.0),
              Track("quiet:1", "quiet", 100, 25.0, silent=True), Track("quiet:2", "quiet", 100, 25.0, silent=True)]
    path = str(tmp_path / "clips")
    write_asd_pack(path, tracks, real_audio("pocketsphinx"))
    return path


def test_substituted_audio_comes_from_another_clip_and_zeroes_the_labels(tmp_path, real_audio):
    """Clip ``quiet`` is silent: substituting gives its tracks the loud clip's voice, and the loud clip's tracks
    (whose only other clip is silent) silence; every substituted row is labelled not speaking."""
    path = _clips_pack(tmp_path, real_audio)
    common = dict(train_window=None, frame_budget=400, min_batch=4, max_batch=4, visual_aug=False, audio_mix_prob=0.0)
    plain = {k: (a, l) for b in batches(asd_config(path, **common), "train")[0]
             for k, a, l in zip(b["key"], b["audio"], b["labels"])}
    swapped = {k: (a, l) for b in batches(asd_config(path, substitute_audio_prob=1.0, **common), "train")[0]
               for k, a, l in zip(b["key"], b["audio"], b["labels"])}
    for key in plain:
        assert plain[key][1].any() and not swapped[key][1].any()  # labels zeroed
    for key in ("loud:1", "loud:2"):
        assert np.abs(plain[key][0]).max() > 0.05 and not swapped[key][0].any()  # the donor was silent
    for key in ("quiet:1", "quiet:2"):
        assert not plain[key][0].any() and np.abs(swapped[key][0]).max() > 0.05  # a voice from the loud clip


def test_substitution_probability_is_honoured(asd_pack):
    cfg = asd_config(asd_pack, train_window=60, hist_frames=20, frame_budget=240, audio_mix_prob=0.0,
                     visual_aug=False, substitute_audio_prob=0.3)
    plain = asd_config(asd_pack, train_window=60, hist_frames=20, frame_budget=240, audio_mix_prob=0.0,
                       visual_aug=False)
    rows = changed = 0
    for epoch in range(4):
        for a, b in zip(batches(cfg, "train", epoch=epoch)[0], batches(plain, "train", epoch=epoch)[0]):
            for r in range(len(a["key"])):
                rows += 1
                changed += not np.array_equal(a["audio"][r], b["audio"][r])
    assert 0.15 < changed / rows < 0.45


def test_substitution_needs_two_clips(tmp_path, real_audio):
    path = str(tmp_path / "one")
    write_asd_pack(path, [Track("c:1", "c", 50, 25.0), Track("c:2", "c", 50, 25.0)], real_audio("pocketsphinx"))
    with pytest.raises(AugmentError, match="substitute_audio_prob: 0.2 needs tracks from at least two clips"):
        build_loader(asd_config(path, audio_mix_prob=0.0, substitute_audio_prob=0.2), "train")
    build_loader(asd_config(path, substitute_audio_prob=0.2), "val")  # validation never substitutes


def test_bad_augmentation_values_are_named(asd_pack):
    from speechpack.loader.config import ConfigError

    with pytest.raises(ConfigError, match="substitute_audio_prob"):
        build_loader(asd_config(asd_pack, substitute_audio_prob=1.5), "train")
    with pytest.raises(ConfigError, match="jitter"):
        build_loader(asd_config(asd_pack, jitter="yes"), "train")
