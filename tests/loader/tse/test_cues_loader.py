"""Speaker cues on the loader side: WeSep's cue layer and ``tse_collate_fn`` for the cue fields.

What is pinned (docs/loader.md, "Cues" and "Batches"):
- collation, on plain arrays: enrollments prefix-cropped to the shortest, a missing optional row filled in the
  shape and dtype of the first real row (or ``default_shape``; without one an error), edge padding, -999.0 for
  spatial, int64 zero padding for textual, the precedence BASE < cues.yaml < dataset_args.cues <
  dataset_args.collate, ``emit_present: false``;
- the per-slot values, on plain arrays: muse_frontend and spatial duration alignment and chunk crops, raw video
  padding and windows, textual fixed and random selection, embeddings, the entry choice;
- the config keys and WeSep's three build_collect_keys errors;
- end to end on packs built with cues from real recordings (below the pure tests).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soxr
import torch
import yaml
from click.testing import CliRunner

from speechpack.cli import main
from factories.cue_corpus import VIDEO_FPS, VIDEO_SIZE, cue, dump_resource
from speechpack.loader import build_loader
from speechpack.loader.tse.decode import BASE_FIELDS, CollateError, FieldSpec, collate_field, resolve_field
from speechpack.loader.config import ConfigError, LoaderConfig
from speechpack.loader.tse.args import DatasetArgs
from speechpack.loader.tse.cues.resolve import CueError, pick_entry
from speechpack.loader.tse.cues.values import (
    ChunkInfo,
    align_to_duration,
    crop_by_ratio,
    embedding,
    muse_chunk,
    randint,
    select_phonemes,
    spatial_value,
    video_chunk,
)
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

RATE = 16000


def whole(seconds: float, rate: int = RATE) -> ChunkInfo:
    """A whole utterance of ``seconds`` (val/test: ratio 0..1)."""
    return ChunkInfo(0.0, 1.0, int(round(seconds * rate)), rate)


# ---------------------------------------------------------------------------------------------------------------
# Collation (docs/loader.md, "Batches"), on plain arrays
# ---------------------------------------------------------------------------------------------------------------


def test_base_table_is_wesep():
    assert BASE_FIELDS["audio_aux"] == FieldSpec("audio_aux", "min", "constant", 0.0, None, True)
    assert BASE_FIELDS["spatial_aux"] == FieldSpec("spatial_aux", "max", "edge", -999.0, None, True)
    assert BASE_FIELDS["visual_aux"] == FieldSpec("visual_aux", "max", "edge", 0.0, None, True)
    assert BASE_FIELDS["textual_aux"] == FieldSpec("textual_aux", "max", "constant", 0, None, True)
    assert BASE_FIELDS["speaker_label"] == FieldSpec("speaker_label", None, "constant", -100, (), False)


def test_enrollments_are_prefix_cropped_to_the_shortest():
    """Item 8: enrollments of 2 s and 4 s give every row's first 2 s; all present."""
    rng = np.random.default_rng(0)
    short, long = rng.standard_normal((1, 2 * RATE), np.float32), rng.standard_normal((1, 4 * RATE), np.float32)
    out, present = collate_field([long, short, long], BASE_FIELDS["audio_aux"])
    assert out.shape == (3, 1, 2 * RATE) and out.dtype == np.float32
    np.testing.assert_array_equal(out[0], long[:, :2 * RATE])
    np.testing.assert_array_equal(out[1], short)
    assert present.tolist() == [True, True, True]


def test_missing_row_is_fill_shaped_like_the_first_real_row():
    """Item 11: a missing optional row is ``fill_value`` with the first real row's shape and dtype."""
    spec = resolve_field("audio_aux", experiment={"fill_value": 0.5})
    first, second = np.ones((2, 300), np.float32), np.full((2, 500), 2.0, np.float32)
    out, present = collate_field([None, first, second, None], spec)
    assert out.shape == (4, 2, 300) and out.dtype == np.float32  # align min over the real rows: 300
    assert (out[0] == 0.5).all() and (out[3] == 0.5).all()
    np.testing.assert_array_equal(out[2], second[:, :300])
    assert present.tolist() == [False, True, True, False]
    # Embeddings [D]: the fill is [D] too.
    out, present = collate_field([np.arange(4, dtype=np.float32), None], BASE_FIELDS["audio_aux"])
    assert out.shape == (2, 4) and out[1].tolist() == [0, 0, 0, 0] and present.tolist() == [True, False]
    # The fill keeps the reference's dtype: uint8 video, int64 text.
    video = np.full((2, 2, 3, 5), 7, np.uint8)
    out, _ = collate_field([None, video], BASE_FIELDS["visual_aux"])
    assert out.dtype == np.uint8 and out.shape == (2, 2, 2, 3, 5) and (out[0] == 0).all()


def test_whole_batch_missing_uses_default_shape():
    """Item 11: no real row: ``full(default_shape, fill)``, dtype from the fill's Python type; L = shape[-1]."""
    spec = resolve_field("audio_aux", cue_defaults={"default_shape": [1, 8]})
    out, present = collate_field([None, None, None], spec)
    assert out.shape == (3, 1, 8) and out.dtype == np.float32 and (out == 0).all()
    assert present.tolist() == [False] * 3
    spec = resolve_field("textual_aux", experiment={"default_shape": [4]})
    out, _ = collate_field([None, None], spec)
    assert out.dtype == np.int64 and out.shape == (2, 4)
    spec = resolve_field("spatial_aux", experiment={"default_shape": [2]})
    out, _ = collate_field([None], spec)
    assert out.dtype == np.float32 and out.tolist() == [[-999.0, -999.0]]
    # speaker_label: shape (), -100, int64.
    out, present = collate_field([None, None], BASE_FIELDS["speaker_label"])
    assert out.dtype == np.int64 and out.tolist() == [-100, -100]


def test_whole_batch_missing_without_default_shape_is_an_error():
    with pytest.raises(CollateError, match="visual_aux: no row of the batch has it and no default_shape"):
        collate_field([None, None], BASE_FIELDS["visual_aux"])


def test_required_field_missing_is_an_error():
    spec = resolve_field("audio_aux", required=True)
    with pytest.raises(CollateError, match="audio_aux: required feature missing for batch row 1 .mixture 'm2'"):
        collate_field([np.zeros(3, np.float32), None], spec, keys=["m1", "m2"])


def test_spatial_edge_padding_and_fill():
    """Items 14 and section 3: spatial aligns to the longest row with edge padding; missing rows are -999."""
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    b = np.array([[7, 8, 9, 10, 11], [0, 1, 2, 3, 4]], np.float32)
    out, present = collate_field([a, None, b], BASE_FIELDS["spatial_aux"])
    assert out.shape == (3, 2, 5)
    assert out[0].tolist() == [[1, 2, 3, 3, 3], [4, 5, 6, 6, 6]]
    assert (out[1] == -999.0).all()
    np.testing.assert_array_equal(out[2], b)
    assert present.tolist() == [True, False, True]
    # Static [F] cues stack as [B, F].
    out, _ = collate_field([np.array([0.1, 0.2], np.float32), None], BASE_FIELDS["spatial_aux"])
    assert out.shape == (2, 2) and out[1].tolist() == [-999.0, -999.0]


def test_visual_edge_padding_repeats_the_last_frame():
    frames = np.arange(2 * 1 * 1 * 3, dtype=np.uint8).reshape(2, 1, 1, 3)  # [H, W, C, T]
    longer = np.zeros((2, 1, 1, 5), np.uint8)
    out, _ = collate_field([frames, longer], BASE_FIELDS["visual_aux"])
    assert out.dtype == np.uint8 and out.shape == (2, 2, 1, 1, 5)
    assert out[0, :, 0, 0].tolist() == [[0, 1, 2, 2, 2], [3, 4, 5, 5, 5]]


def test_muse_frontend_batch_align_is_max_with_edge_pad():
    """Item 15: muse rows [512, 50] and [512, 75] align to 75 by repeating the last frame."""
    a = np.random.default_rng(1).standard_normal((512, 50)).astype(np.float32)
    b = np.zeros((512, 75), np.float32)
    out, _ = collate_field([a, b], BASE_FIELDS["visual_aux"])
    assert out.shape == (2, 512, 75)
    np.testing.assert_array_equal(out[0, :, 50:], np.repeat(a[:, -1:], 25, axis=1))


def test_textual_rows_pad_with_int64_zeros():
    """Item 13: rows of 3 and 5 phonemes: the shorter padded with 0 to 5, int64."""
    out, present = collate_field([np.array([5, 6, 7], np.int64), np.array([1, 2, 3, 4, 9], np.int64)],
                                 BASE_FIELDS["textual_aux"])
    assert out.dtype == np.int64 and out.tolist() == [[5, 6, 7, 0, 0], [1, 2, 3, 4, 9]]
    assert present.all()


def test_edge_padding_an_empty_row_is_an_error():
    with pytest.raises(CollateError, match="cannot edge-pad an empty row"):
        collate_field([np.zeros((2, 0), np.float32), np.zeros((2, 3), np.float32)], BASE_FIELDS["spatial_aux"])


def test_rows_that_differ_before_time_cannot_stack():
    with pytest.raises(CollateError, match=r"audio_aux: rows of shapes \[1, 5\] and \[2, 5\] differ"):
        collate_field([np.zeros((1, 5), np.float32), np.zeros((2, 5), np.float32)], BASE_FIELDS["audio_aux"])


def test_fill_that_does_not_fit_the_dtype_is_an_error():
    spec = resolve_field("visual_aux", experiment={"fill_value": -999})
    with pytest.raises(CollateError, match="fill_value -999 does not fit the field's dtype uint8"):
        collate_field([np.zeros((1, 1, 1, 2), np.uint8), None], spec)


def test_precedence_base_then_cues_yaml_then_dataset_args_cues_then_collate():
    base = resolve_field("spatial_aux")
    assert (base.fill_value, base.default_shape, base.emit_present, base.align) == (-999.0, None, True, "max")
    data = resolve_field("spatial_aux", cue_defaults={"fill_value": 1.0, "default_shape": [2], "emit_present": False})
    assert (data.fill_value, data.default_shape, data.emit_present) == (1.0, (2,), False)
    experiment = resolve_field("spatial_aux", cue_defaults={"fill_value": 1.0, "default_shape": [2]},
                               experiment={"fill_value": 2.0})
    assert (experiment.fill_value, experiment.default_shape) == (2.0, (2,))
    collate = resolve_field("spatial_aux", cue_defaults={"fill_value": 1.0}, experiment={"fill_value": 2.0},
                            collate={"fill_value": 3.0, "align": "min", "pad_mode": "constant"})
    assert (collate.fill_value, collate.align, collate.pad_mode) == (3.0, "min", "constant")
    # cues.yaml and dataset_args.cues cannot set align or pad_mode: only the collate block can.
    assert resolve_field("spatial_aux", cue_defaults={"align": "min"}).align == "max"


def test_emit_present_false_drops_the_flags_only():
    spec = resolve_field("textual_aux", experiment={"emit_present": False})
    assert not spec.emit_present
    out, present = collate_field([np.array([1], np.int64), None], spec)
    assert out.tolist() == [[1], [0]] and present.tolist() == [True, False]  # the caller leaves the flags out


# ---------------------------------------------------------------------------------------------------------------
# Per-slot values (docs/loader.md, "Cues"), on plain arrays
# ---------------------------------------------------------------------------------------------------------------


def test_muse_frontend_aligns_to_the_audio_duration():
    """Item 15: [512, 75] lasting 3.0 s: 2.0 s of audio gives 50 frames (a prefix), 4.0 s an edge pad to 100."""
    features = np.random.default_rng(2).standard_normal((512, 75)).astype(np.float32)
    two = muse_chunk(features, 3.0, whole(2.0))
    np.testing.assert_array_equal(two, features[:, :50])
    four = muse_chunk(features, 3.0, whole(4.0))
    assert four.shape == (512, 100)
    np.testing.assert_array_equal(four[:, :75], features)
    np.testing.assert_array_equal(four[:, 75:], np.repeat(features[:, -1:], 25, axis=1))
    # No duration: taken as is; a chunk [0.25, 0.75] of the audio takes frames int(.25 N) : int(.75 N).
    chunk = ChunkInfo(0.25, 0.75, 3 * RATE, RATE)
    np.testing.assert_array_equal(muse_chunk(features, None, chunk), features[:, 18:56])
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        muse_chunk(features[0], 3.0, whole(2.0))


def test_chunk_crop_past_the_end_is_edge_padded():
    """A padded training chunk (end_ratio = L / T > 1) extends the cue with its last frame."""
    x = np.arange(10, dtype=np.float32)[None]
    out = crop_by_ratio(x, ChunkInfo(0.0, 1.5, 10, 10))
    assert out.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 9, 9]]
    assert crop_by_ratio(x, ChunkInfo(0.95, 0.95, 10, 10)).tolist() == [[9]]  # at least one frame
    assert align_to_duration(x, 2.0, 1.0).tolist() == [[0, 1, 2, 3, 4]]


def test_spatial_fields_in_order_with_defaults():
    """Item 14: fields [azimuth, elevation] give float32 [2] in that order; a missing field takes its default."""
    values = {"elevation": np.float32(0.5), "azimuth": np.float32(1.25), "other": np.float32(9)}
    out = spatial_value(values, None, ("azimuth", "elevation"), {}, whole(1.0))
    assert out.dtype == np.float32 and out.tolist() == [1.25, 0.5]
    out = spatial_value(values, None, ("azimuth", "distance"), {"distance": 1.0}, whole(1.0))
    assert out.tolist() == [1.25, 1.0]
    with pytest.raises(KeyError, match="spatial field 'distance' missing"):
        spatial_value(values, None, ("azimuth", "distance"), {}, whole(1.0))


def test_spatial_temporal_field_follows_duration_and_chunk():
    """Item 14: a field of N values lasting ``duration_sec``, chunk (s, e): ``v[int(s N'):int(e N')]`` with N' the
    duration-aligned length; edge-padded when e > 1; scalars broadcast to [F, T]."""
    track = np.arange(20, dtype=np.float32)  # 20 values over 2.0 s; the audio lasts 1.0 s, so N' = 10
    chunk = ChunkInfo(0.2, 0.6, RATE, RATE)
    out = spatial_value({"azimuth": track, "elevation": np.float32(0.5)}, 2.0, ("azimuth", "elevation"), {}, chunk)
    assert out.shape == (2, 4)
    assert out[0].tolist() == [2, 3, 4, 5] and out[1].tolist() == [0.5] * 4
    padded = spatial_value({"azimuth": track}, 2.0, ("azimuth",), {}, ChunkInfo(0.5, 1.5, RATE, RATE))
    assert padded[0].tolist() == [5, 6, 7, 8, 9, 9, 9, 9, 9, 9]
    with pytest.raises(ValueError, match="different lengths"):
        spatial_value({"a": track, "b": track[:5]}, None, ("a", "b"), {}, whole(1.0))


def test_raw_video_is_padded_or_trimmed_to_the_audio_then_windowed():
    frames = np.arange(10, dtype=np.uint8)[:, None, None, None] * np.ones((10, 2, 3, 1), np.uint8)  # [T, H, W, C]
    # 10 frames at 25 fps (0.4 s) under 0.6 s of audio: padded with the last frame to 15.
    out = video_chunk(frames, 25.0, whole(0.6))
    assert out.shape == (2, 3, 1, 15) and out.dtype == np.uint8
    assert out[0, 0, 0].tolist() == list(range(10)) + [9] * 5
    # 0.2 s of audio: trimmed to 5 frames.
    assert video_chunk(frames, 25.0, whole(0.2))[0, 0, 0].tolist() == [0, 1, 2, 3, 4]
    # A chunk [0.25, 0.75] of 0.4 s: round(0.1 * 25) = 2 onwards, round(0.2 * 25) = 5 frames.
    assert video_chunk(frames, 25.0, ChunkInfo(0.25, 0.75, 4000, 10000))[0, 0, 0].tolist() == [2, 3, 4, 5, 6]
    # A padded chunk (end_ratio 1.5 of 0.4 s): 15 frames from 0, the last repeated.
    assert video_chunk(frames, 25.0, ChunkInfo(0.0, 1.5, 4000, 10000))[0, 0, 0].tolist() == list(range(10)) + [9] * 5
    # A chunk that starts after the video ends: its last frame.
    assert video_chunk(frames[:2], 25.0, ChunkInfo(0.5, 1.0, 4000, 10000))[0, 0, 0].tolist() == [1] * 5


def test_textual_selection_fixed_and_random():
    """Item 13: fixed kw_candidate [2, 0] gives cat(phn[2], phn[0]) int64; random gives a contiguous span of
    min(k, n_words) words."""
    words = [np.array([1, 2], np.int64), np.array([3], np.int64), np.array([4, 5, 6], np.int64),
             np.array([7], np.int64)]
    out = select_phonemes(words, np.array([2, 0]), {"type": "fixed"}, np.zeros(2))
    assert out.dtype == np.int64 and out.tolist() == [4, 5, 6, 1, 2]
    spans = set()
    for u in np.linspace(0, 0.999, 40):
        for v in np.linspace(0, 0.999, 7):
            got = select_phonemes(words, np.array([], np.int64), {"type": "random", "word_range": [2, 6]},
                                  np.array([u, v])).tolist()
            spans.add(tuple(got))
    flat = [1, 2, 3, 4, 5, 6, 7]
    expected = set()
    for n in range(2, 5):  # k in [2, 6] clamped to the 4 words
        for start in range(0, 4 - n + 1):
            expected.add(tuple(int(p) for w in words[start:start + n] for p in w))
    assert spans == expected and tuple(flat) in spans
    with pytest.raises(IndexError, match="outside phn_label"):
        select_phonemes(words, np.array([4]), {"type": "fixed"}, np.zeros(2))
    with pytest.raises(ValueError, match="non-empty kw_candidate"):
        select_phonemes(words, np.array([], np.int64), {"type": "fixed"}, np.zeros(2))


def test_embedding_rank_rules():
    """Item 10: [1, 192] is squeezed to [192] float32; [2, 192] is an error."""
    assert embedding(np.ones((1, 192), np.float64)).shape == (192,)
    assert embedding(np.ones((1, 192))).dtype == np.float32
    with pytest.raises(ValueError, match=r"\[D\] or \[1, D\], got \[2, 192\]"):
        embedding(np.ones((2, 192)))


def test_entry_choice():
    assert pick_entry(5, "fixed", 0.99) == 0
    assert [pick_entry(4, "random", u) for u in (0.0, 0.25, 0.5, 0.999999)] == [0, 1, 2, 3]
    assert {randint(2, 6, u) for u in np.linspace(0, 0.9999, 100)} == {2, 3, 4, 5, 6}


# ---------------------------------------------------------------------------------------------------------------
# Config keys
# ---------------------------------------------------------------------------------------------------------------


def args(**dataset_args) -> DatasetArgs:
    return LoaderConfig.from_dict({"packs": [{"path": "p"}], "dataset_args": dataset_args}).dataset_args


def test_cue_config_keys():
    parsed = args(cues={"spatial": {"use": True, "fill_value": 1.5, "default_shape": [2]},
                        "audio": {"use": True, "required": True, "emit_present": False},
                        "visual": {"use": False}},
                  collate={"audio_aux": {"align": "max"}, "speaker_label": {"fill_value": -1}})
    assert [c.name for c in parsed.cues] == ["spatial", "audio", "visual"]
    assert [c.name for c in parsed.used_cues] == ["spatial", "audio"]
    assert parsed.cues[0].collate_defaults() == {"default_shape": (2,), "fill_value": 1.5}
    assert parsed.cues[1].required is True and parsed.cues[2].required is None
    assert parsed.collate_of("audio_aux") == {"align": "max"} and parsed.collate_of("visual_aux") == {}
    assert parsed.collate_of("speaker_label") == {"fill_value": -1}
    assert args(cue_processing={"audio": {"reverb_enroll_prob": 0, "noise_enroll_prob": 0.0}}).cues == ()


@pytest.mark.parametrize("dataset_args, message", [
    ({"cues": {"audio": {"use": True, "requird": True}}}, r"dataset_args.cues.audio: unknown key\(s\) requird"),
    ({"cues": {"face": {"use": True}}}, "unknown cue 'face'"),
    ({"cues": {"audio": {"use": "yes"}}}, "cues.audio.use: expected bool"),
    ({"cues": {"audio": {"use": True, "default_shape": [1, -2]}}}, "non-negative integers"),
    ({"cues": {"audio": {"use": True}}, "collate": {"audio_aux": {"pad": "edge"}}},
     r"collate.audio_aux: unknown key\(s\) pad"),
    ({"cues": {"audio": {"use": True}}, "collate": {"audio_aux": {"align": "mean"}}}, "'mean' is not one of"),
    ({"cues": {"audio": {"use": True}}, "collate": {"audio_aux": {"pad_mode": "wrap"}}}, "'wrap' is not one of"),
    ({"cues": {"audio": {"use": False}}, "collate": {"audio_aux": {"align": "max"}}},
     "cannot override unregistered field audio_aux .cue 'audio' is not used"),
    ({"collate": {"visual_aux": {"fill_value": 1}}}, "cannot override unregistered field visual_aux"),
    ({"collate": {"speaker_label": {"align": "max"}}}, "align must be null"),
    ({"collate": {"wav_mix": {"fill_value": 1}}}, r"collate.wav_mix: unknown key\(s\) fill_value"),
    ({"cue_processing": {"audio": {"reverb_enroll_prob": 1.5}}}, r"cue_processing.audio.reverb_enroll_prob: must be"),
])
def test_cue_config_errors_name_the_key(dataset_args, message):
    with pytest.raises(ConfigError, match=message):
        args(**dataset_args)


# ---------------------------------------------------------------------------------------------------------------
# End to end: packs built with cues.yaml from real recordings (speechpack build wesep --cues)
# ---------------------------------------------------------------------------------------------------------------


def one_batch(pack: str, state: str = "val", num_workers: int = 0, seed: int = 0, **dataset_args) -> dict:
    dataset_args.setdefault("batch_size", 4)
    dataset_args.setdefault("shuffle", False)
    loader = build_loader({"packs": [{"path": pack}], "dataset_args": dataset_args}, state,
                          num_workers=num_workers, seed=seed)
    return next(iter(loader))


def test_fixed_enrollments_follow_the_policy_key_and_crop_to_the_shortest(corpus):
    """Items 8 and 9: ``mix_spk_id`` fixed takes ``key::spk``'s first entry, ``spk_id`` fixed the speaker's first;
    enrollments stay whole, then the batch keeps the shortest one's length; the fields come in WeSep's order."""
    pack = corpus.build("fixed", {"audio": cue(corpus.resources["by_slot"])})
    batch = one_batch(pack, cues={"audio": {"use": True}})
    assert list(batch) == ["wav_mix", "wav_target", "spk", "key", "num_speaker", "speaker_label", "audio_aux",
                           "audio_aux_present", "valid", "lengths", "chunk_ratio"]
    rows = list(zip(batch["key"], batch["spk"]))
    assert rows == corpus.slots
    expected = [corpus.source[corpus.other(slot)] for slot in rows]
    shortest = min(len(e) for e in expected)
    assert batch["audio_aux"].dtype == torch.float32 and tuple(batch["audio_aux"].shape) == (8, 1, shortest)
    for r, enrollment in enumerate(expected):
        np.testing.assert_array_equal(batch["audio_aux"][r, 0].numpy(), enrollment[:shortest].astype(np.float32))
    assert batch["audio_aux_present"].dtype == torch.bool and batch["audio_aux_present"].all()
    assert batch["speaker_label"].tolist() == [-100] * 8

    pack = corpus.build("fixed_spk", {"audio": cue(corpus.resources["by_speaker"], key="spk_id")})
    batch = one_batch(pack, cues={"audio": {"use": True}})
    first = [corpus.source[corpus.occurrences(spk)[0]] for spk in batch["spk"]]
    shortest = min(len(e) for e in first)
    for r, enrollment in enumerate(first):
        np.testing.assert_array_equal(batch["audio_aux"][r, 0].numpy(), enrollment[:shortest].astype(np.float32))


@pytest.mark.parametrize("resource, key", [("by_speaker", "spk_id"), ("by_slot", "mix_spk_id")])
def test_random_enrollments_hit_every_item_including_the_target_itself(corpus, resource, key):
    """Item 9: over epochs, a random policy draws every entry of the key, the target's own utterance included;
    training chunks the mixture, never the enrollment."""
    pack = corpus.build(f"random_{key}", {"audio": cue(corpus.resources[resource], "random", key)})
    loader = build_loader({"packs": [{"path": pack}], "dataset_args": {
        "batch_size": 4, "shuffle": False, "chunk_len": 4000, "cues": {"audio": {"use": True}}}}, "train")
    seen: dict[tuple[str, str], set] = {slot: set() for slot in corpus.slots}
    for epoch in range(16):
        loader.set_epoch(epoch)
        for batch in loader:
            assert batch["wav_mix"].shape[-1] == 4000 and batch["audio_aux"].shape[-1] >= RATE  # 1 s at least
            for r, slot in enumerate(zip(batch["key"], batch["spk"])):
                row = batch["audio_aux"][r, 0].numpy()
                matches = [cand for cand in corpus.occurrences(slot[1])
                           if np.array_equal(row, corpus.source[cand][:len(row)].astype(np.float32))]
                assert len(matches) == 1
                seen[slot].add(matches[0])
    for slot, items in seen.items():
        assert items == {slot, corpus.other(slot)}, slot


def test_embeddings_are_rows_of_192(corpus):
    """Item 10: ``[1, 192]`` files give ``[B_out, 192]`` float32 rows."""
    pack = corpus.build("emb", {"audio": cue(corpus.resources["embedding"], key="spk_id", type="npy",
                                             format="spk_embedding")})
    batch = one_batch(pack, cues={"audio": {"use": True}})
    assert tuple(batch["audio_aux"].shape) == (8, 192) and batch["audio_aux"].dtype == torch.float32
    for r, spk in enumerate(batch["spk"]):
        np.testing.assert_array_equal(batch["audio_aux"][r].numpy(), corpus.embeddings[spk])


def test_speaker_labels_come_from_the_pack(corpus):
    """Item 12: ``labels.speaker_label`` gives each row its speaker's label (int64)."""
    pack = corpus.build("labels", {"audio": cue(corpus.resources["embedding"], key="spk_id", type="npy",
                                                format="spk_embedding")}, labels=True)
    batch = one_batch(pack)  # the cue need not be used for the labels
    assert batch["speaker_label"].dtype == torch.int64
    assert batch["speaker_label"].tolist() == [corpus.labels[spk] for spk in batch["spk"]]
    assert "audio_aux" not in batch


def test_spatial_static_fields_defaults_and_missing_rows(corpus):
    """Item 14 and 11: fields in order, ``field_defaults`` for a field the files lack, and an optional cue whose
    resource lacks a mixture: -999 rows with ``_present`` False, or ``default_shape`` when the whole batch lacks
    it (an error without one)."""
    resource = json.loads(Path(corpus.resources["static"]).read_text())
    for spk in corpus.case.by_key()["m2"].speakers:
        del resource[f"m2::{spk}"]
    path = dump_resource(corpus.root, "static_partial", resource)
    pack = corpus.build("spatial", {"spatial": cue(path, fields=["elevation", "azimuth", "distance"],
                                                   field_defaults={"distance": 1.5}, guaranteed=False)})
    batch = one_batch(pack, cues={"spatial": {"use": True}})
    assert tuple(batch["spatial_aux"].shape) == (8, 3) and batch["spatial_aux"].dtype == torch.float32
    for r, slot in enumerate(zip(batch["key"], batch["spk"])):
        n = corpus.slots.index(slot)
        if slot[0] == "m2":
            assert batch["spatial_aux"][r].tolist() == [-999.0] * 3 and not batch["spatial_aux_present"][r]
        else:
            np.testing.assert_allclose(batch["spatial_aux"][r].numpy(), [-0.05 * n, 0.1 * n, 1.5], rtol=1e-6)
            assert batch["spatial_aux_present"][r]
    # batch_size 1: the m2 batch has no row with the cue.
    config = {"packs": [{"path": pack}], "dataset_args": {"batch_size": 1, "shuffle": False,
                                                          "cues": {"spatial": {"use": True}}}}
    with pytest.raises(CollateError, match="spatial_aux: no row of the batch has it and no default_shape"):
        list(build_loader(config, "val"))
    config["dataset_args"]["cues"]["spatial"]["default_shape"] = [3]
    config["dataset_args"]["collate"] = {"spatial_aux": {"fill_value": -1.0}}
    batches = list(build_loader(config, "val"))
    assert batches[1]["key"] == ["m2", "m2"] and batches[1]["spatial_aux"].tolist() == [[-1.0] * 3] * 2
    assert batches[1]["spatial_aux_present"].tolist() == [False, False]


def test_spatial_temporal_field_follows_the_audio_chunk(corpus):
    """Item 14: a 1-D field lasting ``duration_sec`` is cut like the audio chunk; scalars broadcast; ``[F, T]``."""
    pack = corpus.build("track", {"spatial": cue(corpus.resources["track"], fields=["azimuth", "elevation"])})
    loader = build_loader({"packs": [{"path": pack}], "dataset_args": {
        "batch_size": 4, "shuffle": False, "chunk_len": 8000, "cues": {"spatial": {"use": True}}}}, "train", seed=3)
    batch = next(iter(loader))
    assert tuple(batch["spatial_aux"].shape[:2]) == (8, 2)
    for r, slot in enumerate(zip(batch["key"], batch["spk"])):
        track, ratio = corpus.tracks[slot], batch["chunk_ratio"][r]
        expected = track[int(ratio["start_ratio"] * len(track)):int(ratio["end_ratio"] * len(track))]
        assert len(expected) == 25  # 0.5 s at 50 values per second
        np.testing.assert_array_equal(batch["spatial_aux"][r, 0].numpy(), expected)
        assert (batch["spatial_aux"][r, 1] == corpus.slots.index(slot)).all()


def test_textual_on_a_pack_fixed_and_random(corpus):
    """Item 13: fixed ``kw_candidate`` [2, 0] concatenates words 2 and 0; rows are zero-padded int64; random
    selection gives a contiguous span of ``word_range`` words."""
    pack = corpus.build("text_fixed", {"textual": cue(corpus.resources["textual"], type="json",
                                                      format="dae_keyword_phoneme", selection={"type": "fixed"})})
    batch = one_batch(pack, cues={"textual": {"use": True, "emit_present": False}})
    assert "textual_aux_present" not in batch and batch["textual_aux"].dtype == torch.int64
    expected = [corpus.phonemes[slot][2] + corpus.phonemes[slot][0] for slot in zip(batch["key"], batch["spk"])]
    width = max(len(e) for e in expected)
    assert batch["textual_aux"].shape[-1] == width and len({len(e) for e in expected}) > 1
    assert batch["textual_aux"].tolist() == [e + [0] * (width - len(e)) for e in expected]

    pack = corpus.build("text_random", {"textual": cue(corpus.resources["textual"], type="json",
                                                       format="dae_keyword_phoneme",
                                                       selection={"type": "random", "word_range": [2, 3]})})
    spans = set()
    for seed in range(6):
        batch = one_batch(pack, state="train", seed=seed, cues={"textual": {"use": True}})
        for r, slot in enumerate(zip(batch["key"], batch["spk"])):
            row = [v for v in batch["textual_aux"][r].tolist() if v]
            words = corpus.phonemes[slot]
            options = {tuple(p for w in words[s:s + n] for p in w): (n, s) for n in (2, 3) for s in range(6 - n)}
            assert tuple(row) in options
            spans.add(options[tuple(row)])
    assert {n for n, _ in spans} == {2, 3} and len(spans) > 4


def test_raw_video_matches_the_audio_and_its_chunk(corpus):
    """Raw video (PyAV-made mp4s): whole utterances get ``round(seconds * fps)`` frames (padded with the last
    frame, or trimmed); training chunks take the chunk's frames; ``[B_out, H, W, C, T]`` uint8, edge-aligned."""
    pack = corpus.build("video", {"visual": cue(corpus.resources["video"])})
    batch = one_batch(pack, cues={"visual": {"use": True}})
    video = batch["visual_aux"]
    needs = {key: round(s * VIDEO_FPS) for key, s in corpus.seconds.items()}
    longest = max(needs[key] for key in batch["key"])
    assert video.dtype == torch.uint8 and tuple(video.shape) == (8, VIDEO_SIZE, VIDEO_SIZE, 3, longest)
    for r, slot in enumerate(zip(batch["key"], batch["spk"])):
        frames, need = corpus.videos[slot], needs[slot[0]]
        aligned = np.concatenate([frames, np.repeat(frames[-1:], max(0, need - len(frames)), axis=0)])[:need]
        expected = np.concatenate([aligned, np.repeat(aligned[-1:], longest - need, axis=0)])  # batch edge pad
        np.testing.assert_array_equal(video[r].numpy(), np.moveaxis(expected, 0, -1))
    assert batch["visual_aux_present"].all()

    loader = build_loader({"packs": [{"path": pack}], "dataset_args": {
        "batch_size": 4, "shuffle": False, "chunk_len": 8000, "cues": {"visual": {"use": True}}}}, "train", seed=5)
    batch = next(iter(loader))
    assert batch["visual_aux"].shape[-1] == 12  # round(0.5 s * 25)
    for r, slot in enumerate(zip(batch["key"], batch["spk"])):
        frames, need = corpus.videos[slot], needs[slot[0]]
        aligned = np.concatenate([frames, np.repeat(frames[-1:], max(0, need - len(frames)), axis=0)])[:need]
        start = round(batch["chunk_ratio"][r]["start_ratio"] * corpus.seconds[slot[0]] * VIDEO_FPS)
        window = aligned[start:start + 12]
        window = np.concatenate([window, np.repeat(window[-1:], 12 - len(window), axis=0)])
        np.testing.assert_array_equal(batch["visual_aux"][r].numpy(), np.moveaxis(window, 0, -1))


def test_muse_frontend_is_aligned_by_its_duration(corpus):
    """Item 15 on a pack: features lasting 1.25x or 0.8x the audio are cropped or edge-padded to the audio."""
    pack = corpus.build("muse", {"visual": cue(corpus.resources["muse"], type="npy", format="muse_frontend")})
    batch = one_batch(pack, cues={"visual": {"use": True}})
    lengths = {}
    for slot in corpus.slots:
        features, duration = corpus.muse[slot]
        lengths[slot] = round(corpus.seconds[slot[0]] * features.shape[-1] / duration)
    longest = max(lengths.values())
    assert tuple(batch["visual_aux"].shape) == (8, 4, longest) and batch["visual_aux"].dtype == torch.float32
    for r, slot in enumerate(zip(batch["key"], batch["spk"])):
        features, _ = corpus.muse[slot]
        row = batch["visual_aux"][r].numpy()
        n = min(lengths[slot], features.shape[-1])
        np.testing.assert_array_equal(row[:, :n], features[:, :n])
        np.testing.assert_array_equal(row[:, n:], np.repeat(features[:, n - 1:n], longest - n, axis=1))


def test_required_guaranteed_and_missing_cue_errors(corpus):
    """WeSep's build_collect_keys errors, raised by build_loader with the cue and pack named."""
    plain = corpus.root / "plain"
    build_wesep(str(corpus.case.list_path), BuildOptions(out=str(plain), progress=False))
    with pytest.raises(ConfigError, match=r"uses cue 'audio', but pack .*plain does not provide it .it was built "
                                          r"without cues"):
        one_batch(str(plain), cues={"audio": {"use": True}})
    assert one_batch(str(plain), cues={"audio": {"use": False}})["wav_mix"].shape[0] == 8
    pack = corpus.build("optional", {"spatial": cue(corpus.resources["static"], fields=["azimuth"],
                                                    guaranteed=False)})
    with pytest.raises(ConfigError, match=r"cues.visual: the experiment uses cue 'visual', but pack .*optional does "
                                          r"not provide it .its cues.yaml lists spatial"):
        one_batch(pack, cues={"visual": {"use": True}})
    with pytest.raises(ConfigError, match=r"cues.spatial.required: the experiment requires cue 'spatial' in every "
                                          r"sample, but cues.yaml of pack .*optional marks it optional"):
        one_batch(pack, cues={"spatial": {"use": True, "required": True}})
    with pytest.raises(ConfigError, match="cannot override unregistered field spatial_aux"):
        one_batch(pack, collate={"spatial_aux": {"fill_value": 0.0}})
    assert one_batch(pack, cues={"spatial": {"use": True}})["spatial_aux_present"].all()


def test_cue_batches_do_not_depend_on_num_workers(corpus):
    """Random enrollments and word spans come from the batch's generator: 0 and 2 workers give equal batches."""
    pack = corpus.build("random", {
        "audio": cue(corpus.resources["by_speaker"], "random", "spk_id"),
        "textual": cue(corpus.resources["textual"], type="json", format="dae_keyword_phoneme",
                       selection={"type": "random", "word_range": [1, 4]})})
    config = {"packs": [{"path": pack}], "dataset_args": {"batch_size": 1, "chunk_len": 4000,
                                                          "cues": {"textual": {"use": True}, "audio": {"use": True}}}}
    runs = []
    for workers in (0, 2):
        loader = build_loader(config, "train", num_workers=workers, seed=11)
        batches = []
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            batches += list(loader)
        runs.append(batches)
    assert list(runs[0][0])[6:10] == ["textual_aux", "textual_aux_present", "audio_aux", "audio_aux_present"]
    assert len(runs[0]) == len(runs[1]) == 8
    for one, two in zip(*runs):
        assert one.keys() == two.keys()
        for name, value in one.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, two[name]), name
            else:
                assert value == two[name], name


def test_peek_shows_cue_fields(corpus, tmp_path):
    """``speechpack peek`` prints the cue fields with exact integer ranges and the ``_present`` counts, and saves
    the enrollments with the rows."""
    pack = corpus.build("peek", {"audio": cue(corpus.resources["by_slot"]),
                                 "textual": cue(corpus.resources["textual"], type="json",
                                                format="dae_keyword_phoneme", selection={"type": "fixed"})},
                        labels=True)
    config = tmp_path / "peek.yaml"
    config.write_text(yaml.safe_dump({"packs": [{"path": pack}], "dataset_args": {
        "batch_size": 4, "shuffle": False, "cues": {"audio": {"use": True}, "textual": {"use": True}}}}))
    wavs = tmp_path / "wavs"
    result = CliRunner().invoke(main, ["peek", str(config), "--state", "val", "--save-wavs", str(wavs)])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()[1:-1]}  # between the report and "wrote"
    assert "(8, 1, 16000)" in lines["audio_aux"] and "float32" in lines["audio_aux"]
    assert "8 of 8 true" in lines["audio_aux_present"] and "bool" in lines["audio_aux_present"]
    assert "int64" in lines["textual_aux"] and "range [0, 8020]" in lines["textual_aux"]
    assert "range [0, 3]" in lines["speaker_label"]
    assert lines["wav_mix"].startswith("wav_mix" + " " * 14 + "(8, 1, 32000)")  # names padded to the longest
    assert len(list(wavs.glob("*_enroll.wav"))) == 8


def test_enrollments_follow_a_load_time_resample(corpus):
    """With ``resample_rate`` differing from the pack's, enrollments are resampled too (WeSep resamples the cue to
    ``resample_rate``), with the same soxr kernel as the audio."""
    pack = corpus.build("resample", {"audio": cue(corpus.resources["by_slot"])})
    with pytest.warns(UserWarning, match="resampling at load time"):
        batch = one_batch(pack, resample_rate=8000, cues={"audio": {"use": True}})
    expected = [soxr.resample(corpus.source[corpus.other(slot)].astype(np.float32), RATE, 8000)
                for slot in zip(batch["key"], batch["spk"])]
    shortest = min(len(e) for e in expected)
    assert tuple(batch["audio_aux"].shape) == (8, 1, shortest) and shortest == 8000
    for r, enrollment in enumerate(expected):
        np.testing.assert_allclose(batch["audio_aux"][r, 0].numpy(), enrollment[:shortest], atol=1e-6)


def test_a_guaranteed_cue_that_cannot_be_read_names_cue_key_and_pack(corpus):
    """A spatial item lacking a listed field (no default): an error for a guaranteed cue, a missing row otherwise."""
    fields = {"spatial": cue(corpus.resources["static"], fields=["azimuth", "distance"])}
    pack = corpus.build("lacking", fields)
    with pytest.raises(CueError, match=r"cue 'spatial': cannot use the entry of lookup key 'm1::spk-librivox0870' in "
                                       r"pack .*lacking: .*spatial field 'distance' missing"):
        one_batch(pack, cues={"spatial": {"use": True}})
    fields["spatial"]["guaranteed"] = False
    pack = corpus.build("lacking_optional", fields)
    batch = one_batch(pack, cues={"spatial": {"use": True, "default_shape": [2]}})
    assert batch["spatial_aux"].tolist() == [[-999.0, -999.0]] * 8 and not batch["spatial_aux_present"].any()


def test_packs_must_agree_on_a_cue(corpus):
    """Two packs giving the audio cue as a waveform and as an embedding cannot share batches."""
    wave = corpus.build("wave", {"audio": cue(corpus.resources["by_slot"])})
    emb = corpus.build("embed", {"audio": cue(corpus.resources["embedding"], key="spk_id", type="npy",
                                              format="spk_embedding")})
    config = {"packs": [{"path": wave}, {"path": emb}], "dataset_args": {"cues": {"audio": {"use": True}}}}
    with pytest.raises(ConfigError, match="packs give cue 'audio' as different representations "
                                          r"\(spk_embedding, waveform\)"):
        build_loader(config, "val")
    # Two packs with the same cue: each row reads its own pack's bank.
    other = corpus.build("wave2", {"audio": cue(corpus.resources["by_slot"])})
    config = {"packs": [{"path": wave}, {"path": other}],
              "dataset_args": {"batch_size": 8, "shuffle": False, "cues": {"audio": {"use": True}}}}
    loader = build_loader(config, "val")
    batch = next(iter(loader))
    assert batch["key"] == [k for k, _ in corpus.slots] * 2 and batch["audio_aux_present"].all()
