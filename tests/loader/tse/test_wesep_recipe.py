"""WeSep recipe YAMLs read as they are (docs/wesep.md "Bring your recipe"), on packs of real recordings.

Each recipe below is written from the keys WeSep's published configs hold (audio enrollment, visual, spatial,
textual, online mixing with a timeline): data sections, trainer sections, all of it; the tests add only ``packs``
(or ``--pack``) and load it for train and val.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner

from speechpack import cli
from speechpack.loader import build_loader
from speechpack.loader.config import LoaderConfig
from speechpack.loader.config_checks import ConfigError
from speechpack.loader.recipe import deep_merge, read_recipe
from speechpack.loader.tse.online import NO_OVERLAP_RATIO
from factories.cue_corpus import VIDEO_FPS, cue
from factories.online_mix import mixtures
from factories.batches import assert_batches_equal

TRAINER = """
model: TSE_BSRNN
model_args:
  tse_model: {sr: 16000, win: 512, stride: 128, feature_dim: 128, num_repeat: 6}
model_init: {tse_model: null}
loss: SISDR
loss_args: {}
optimizer: {tse_model: Adam}
optimizer_args: {tse_model: {lr: 0.001, weight_decay: 0.0001}}
scheduler: ExponentialDecrease
scheduler_args: {final_lr: 2.5e-05, initial_lr: 0.001, warm_from_zero: false, warm_up_epoch: 0}
clip_grad: 5.0
enable_amp: false
exp_dir: exp/BSRNN
gpus: '0,1'
log_batch_interval: 100
num_epochs: 150
save_epoch_interval: 1
seed: 42
joint_training: true
"""
TRAINER_KEYS = ["model", "model_args", "model_init", "loss", "loss_args", "optimizer", "optimizer_args", "scheduler",
                "scheduler_args", "clip_grad", "enable_amp", "exp_dir", "gpus", "log_batch_interval", "num_epochs",
                "save_epoch_interval", "seed", "joint_training"]

DATALOADER = """
dataloader_args:
  batch_size: 2
  drop_last: true
  num_workers: 0
  pin_memory: false
  prefetch_factor: 4
"""

OFFLINE = """
dataset_args:
  resample_rate: 16000
  sample_num_per_epoch: 0
  shuffle: true
  shuffle_args:
    shuffle_size: 2500
  whole_utt: false
  filter_len: false
  filter_len_args: {min_num_seconds: 1, max_num_seconds: 1000}
  chunk_len: 8000
  chunk_random_start: true
  chunk_short_policy: pad
  online_mix: false
  noise_prob: 0
  noise_lmdb_file: data/musan/lmdb
  reverb_prob: 0
"""

#: The data sections of each offline recipe family, after ``OFFLINE``'s common keys (cue blocks, cue processing and
#: the family's val_dataset_args); cues.yaml is the pack's (built by the ``corpus`` fixture).
FAMILIES = {
    "audio": ("""
  cues:
    audio: {use: true, required: true}
  cue_processing:
    audio: {reverb_enroll_prob: 0, noise_enroll_prob: 0}
""", "", {"audio": ("by_slot", {})}),
    "visual": ("""
  cues:
    visual: {use: true, required: true}
  cue_processing:
    visual:
""", """
val_dataset_args:
  collate:
    wav_mix: {align: min}
    wav_target: {align: min}
    visual_aux: {align: min}
""", {"visual": ("video", {})}),
    "spatial": ("""
  cues:
    audio: {use: true, required: true}
    spatial: {use: true, required: true}
  cue_processing:
    audio: {reverb_enroll_prob: 0, noise_enroll_prob: 0}
    spatial:
""", """
val_dataset_args:
  collate:
    wav_mix: {align: min}
    wav_target: {align: min}
""", {"audio": ("by_slot", {}), "spatial": ("static", {"fields": ["azimuth", "elevation"]})}),
    "textual": ("""
  cues:
    textual: {use: true, required: true, emit_present: false}
""", "", {"textual": ("textual", {"type": "json", "format": "dae_keyword_phoneme",
                                  "selection": {"type": "fixed"}})}),
}

ONLINE = """
dataset_args:
  resample_rate: 16000
  sample_num_per_epoch: 0
  shuffle: true
  shuffle_args: {shuffle_size: 2500}
  online_buffer_size: 1000
  whole_utt: false
  chunk_len: 8000
  chunk_random_start: true
  online_mix: true
  num_speakers:
    distribution: [0.0, 0.7, 0.3]
    max_speakers: 3
  timeline:
    two_speaker:
      overlap_ratio: [0.2, 0.8]
      overlap_position: {head: 1, middle: 2, tail: 1}
      middle_mode: {crossing: 1, containment: 1}
    extra_speaker_activity: [0.3, 0.7]
  mix_snr:
    range: [-5, 10]
    gain: [-12, 0]
  noise_prob: 0
  noise_lmdb_file: data/musan/lmdb
  reverb_prob: 0
  reverb_conf:
    min_max_room: [[3, 3, 2.5], [10, 6, 4]]
    rt60: [0.1, 0.7]
    mic_dist: [0.2, 5.0]
  cues:
    audio: {use: false, required: false}
  cue_processing:
    audio: {reverb_enroll_prob: 0, noise_enroll_prob: 0}
"""


def recipe(family: str) -> dict:
    """The recipe of ``family`` as its YAML file reads (no packs)."""
    if family == "online":
        return yaml.safe_load(TRAINER + DATALOADER + ONLINE)
    cues_block, val_block, _ = FAMILIES[family]
    return yaml.safe_load(TRAINER + DATALOADER + OFFLINE + cues_block + val_block)


def with_packs(config: dict, *paths: str) -> dict:
    return {**config, "packs": [{"path": p} for p in paths]}


def family_pack(corpus, family: str) -> str:  # noqa: F811 (corpus is the fixture)
    cues = {name: cue(corpus.resources[resource], **extra) for name, (resource, extra) in FAMILIES[family][2].items()}
    return corpus.build(family, cues)


def collect(loader) -> list[dict]:
    return [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in b.items()} for b in loader]


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) > 0
    assert_batches_equal(a, b)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_offline_recipe_loads_unchanged_train_and_val(corpus, family):  # noqa: F811
    """A recipe family's YAML with only ``packs`` added: two mixtures per batch (dataloader_args.batch_size),
    drop_last, the family's cue in every row, the trainer sections listed once in the report; val reads
    val_dataset_args merged over dataset_args (align: min crops to the shortest mixture)."""
    config = with_packs(recipe(family), family_pack(corpus, family))
    train = build_loader(config, "train", seed=1)
    report = train.report()
    assert report.ignored == tuple(TRAINER_KEYS)
    assert len(train) == 2  # 4 mixtures, 2 per batch
    field = {"audio": "audio_aux", "visual": "visual_aux", "spatial": "spatial_aux", "textual": "textual_aux"}[family]
    for batch in train:
        assert len(set(batch["key"])) == 2 and len(batch["key"]) == 4  # two-speaker mixtures, one row per target
        assert tuple(batch["wav_mix"].shape) == (4, 1, 8000)
        assert batch[field].shape[0] == 4
    val = build_loader(config, "val", seed=1)
    batches = collect(val)
    assert sum(len(set(b["key"])) for b in batches) == 4
    for batch in batches:
        lengths = [round(corpus.seconds[k] * 16000) for k in batch["key"]]
        expected = min(lengths) if FAMILIES[family][1] else max(lengths)
        assert batch["wav_mix"].shape[-1] == batch["wav_target"].shape[-1] == expected
        if family == "visual":  # visual_aux aligned to its shortest row too
            assert batch["visual_aux"].shape[-1] == min(round(corpus.seconds[k] * VIDEO_FPS) for k in batch["key"])


def test_recipe_batches_are_the_same_for_any_workers_and_resume_mid_epoch(corpus):  # noqa: F811
    config = with_packs(recipe("spatial"), family_pack(corpus, "spatial"))
    config["dataloader_args"]["batch_size"] = 1
    a = collect(build_loader(config, "train", seed=3))
    two = build_loader(config, "train", seed=3, num_workers=2)  # an explicit argument wins over num_workers: 0
    assert two.dataloader.num_workers == 2 and two.dataloader.prefetch_factor == 4
    assert_same(a, collect(two))
    first = build_loader(config, "train", seed=3)
    it = iter(first)
    next(it)
    state = first.state_dict()
    resumed = build_loader(config, "train", seed=3, num_workers=2)
    resumed.load_state_dict(state)
    assert_same(a[1:], collect(resumed))


def test_online_recipe_with_timeline(sources_pack, corpus):  # noqa: F811
    """The online recipe: WeSep's timeline block shapes each group (targets silent outside their segment), the
    mixtures per batch are dataloader_args.batch_size, overlap_ratio_2spk is the two speakers' overlap; the same
    batches for 0 and 2 workers and after a resume; val of the same recipe reads an offline pack."""
    path, _case = sources_pack()
    config = with_packs(recipe("online"), path)
    a = collect(build_loader(config, "train", seed=5))
    assert len(a) == 12  # 25 sources, 2 mixtures per batch, the incomplete last round dropped
    two_speaker = 0
    for batch in a:
        groups = mixtures(batch)
        assert len(groups) == 2
        target = batch["wav_target"].numpy()
        for rows in groups:
            ratio = batch["overlap_ratio_2spk"][rows[0]].item()
            if len(rows) != 2:
                assert ratio == NO_OVERLAP_RATIO
                continue
            two_speaker += 1
            (s0, e0), (s1, e1) = (batch["timeline"][r][0] for r in rows)
            overlap = max(0.0, min(e0, e1) - max(s0, s1))
            assert ratio == pytest.approx(overlap, abs=1e-6) and 0.2 - 1e-3 <= ratio <= 0.8 + 1e-3
            for r, (s, e) in zip(rows, ((s0, e0), (s1, e1))):
                lo, hi = round(s * 8000), round(e * 8000)
                assert not target[r, 0, :lo].any() and not target[r, 0, hi:].any()
    assert two_speaker > 5
    assert_same(a, collect(build_loader(config, "train", seed=5, num_workers=2)))
    first = build_loader(config, "train", seed=5)
    it = iter(first)
    for _ in range(5):
        next(it)
    resumed = build_loader(config, "train", seed=5)
    resumed.load_state_dict(first.state_dict())
    assert_same(a[5:], collect(resumed))
    val_pack = family_pack(corpus, "audio")
    val = build_loader(with_packs(recipe("online"), val_pack), "val", seed=5)
    assert sum(len(set(b["key"])) for b in val) == 4


def test_sample_num_per_epoch_and_shuffle_false(corpus):  # noqa: F811
    pack = family_pack(corpus, "audio")
    config = with_packs(recipe("audio"), pack)
    config["dataset_args"].update(sample_num_per_epoch=6, shuffle=False)
    config["dataloader_args"].update(batch_size=1, drop_last=False)
    loader = build_loader(config, "train", seed=0)
    assert len(loader) == 6
    keys = [b["key"][0] for b in loader]
    order = [line.key for line in corpus.case.lines]
    assert keys == order + order[:2]  # shuffle: false keeps list order; the 5th and 6th items cycle
    loader.set_epoch(1)
    assert [b["key"][0] for b in loader] == order[2:] + order


def test_dataloader_args_and_explicit_arguments(corpus):  # noqa: F811
    config = with_packs(recipe("audio"), family_pack(corpus, "audio"))
    config["dataloader_args"].update(num_workers=2, pin_memory=False, prefetch_factor=3)
    loader = build_loader(config, "train", seed=0)
    assert loader.dataloader.num_workers == 2 and loader.dataloader.prefetch_factor == 3
    assert loader.dataloader.pin_memory is False
    loader = build_loader(config, "train", seed=0, num_workers=0)
    assert loader.dataloader.num_workers == 0
    config["dataloader_args"]["drop_last"] = False
    config["dataset_args"]["sample_num_per_epoch"] = 3
    assert len(build_loader(config, "train", seed=0)) == 2  # 3 items, the last batch padded (valid False)


@pytest.mark.parametrize("change, message", [
    ({"datset_args": {}}, r"config: unknown key 'datset_args' \(did you mean dataset_args\?\)"),
    ({"dataloader_args": {"batch_size": 2, "shuffle": True}}, r"config.dataloader_args: unknown key\(s\) shuffle"),
    ({"dataloader_args": {"batch_size": 2, "num_workers": -1}}, "config.dataloader_args.num_workers: must be at least"),
    ({"dataloader_args": {"prefetch_factor": 0}}, "config.dataloader_args.prefetch_factor"),
    ({"dataloader_args": {"drop_last": "yes"}}, "config.dataloader_args.drop_last"),
    ({"dataloader_args": {"batch_size": 3}, "dataset_args": {"batch_size": 2}},
     "config.dataloader_args.batch_size: 3 disagrees with dataset_args.batch_size 2"),
    ({"dataloader_args": {"drop_last": True}, "dataset_args": {"tail": "pad"}}, "drop_last: True disagrees"),
    ({"dataset_args": {"sample_num_per_epoch": -1}}, "config.dataset_args.sample_num_per_epoch: must be at least 0"),
    ({"dataset_args": {"chunk_lenn": 1}}, r"config.dataset_args: unknown key\(s\) chunk_lenn"),
    ({"val_dataset_args": {"collate": {"wav_mix": {"align": "median"}}}}, "config.dataset_args.collate.wav_mix.align"),
])
def test_recipe_errors_name_the_key(change, message):
    config = {"packs": [{"path": "p"}], "model": "x", **change}
    with pytest.raises(ConfigError, match=message):
        LoaderConfig.from_dict(config, state="val")


def test_sample_num_per_epoch_with_weighted_packs_is_refused():
    with pytest.raises(ConfigError, match="sample_num_per_epoch: 5 with weighted packs"):
        LoaderConfig.from_dict({"packs": [{"path": "a", "weight": 1}], "dataset_args": {"sample_num_per_epoch": 5}})


def test_a_config_read_for_train_is_not_used_for_val(corpus):  # noqa: F811
    config = with_packs(recipe("visual"), family_pack(corpus, "visual"))
    parsed = LoaderConfig.from_dict(config, state="train")
    with pytest.raises(ConfigError, match="read for train and has val_dataset_args"):
        build_loader(parsed, "val")
    assert len(build_loader(LoaderConfig.from_dict(config, state="test"), "val")) == 2


def test_val_dataset_args_is_deep_merged_for_val_and_test_only():
    base = {"chunk_len": 8000, "collate": {"wav_mix": {"align": "max"}}, "cues": {"audio": {"use": True}}}
    over = {"collate": {"wav_mix": {"align": "min"}, "wav_target": {"align": "min"}}}
    assert deep_merge(base, over) == {"chunk_len": 8000, "cues": {"audio": {"use": True}},
                                      "collate": {"wav_mix": {"align": "min"}, "wav_target": {"align": "min"}}}
    obj = {"packs": [{"path": "p"}], "dataset_args": base, "val_dataset_args": over}
    assert read_recipe(obj, "train").config["dataset_args"]["collate"]["wav_mix"] == {"align": "max"}
    for state in ("val", "test"):
        assert read_recipe(obj, state).config["dataset_args"]["collate"]["wav_mix"] == {"align": "min"}
    assert base["collate"]["wav_mix"] == {"align": "max"}  # the caller's dict is left alone


@pytest.mark.parametrize("args, message", [
    ({"speaker_feat": True}, "speaker_feat: a key of the older WeSep pipeline; now select the enrollment with "
                             "dataset_args.cues.audio"),
    ({"fbank_args": {"num_mel_bins": 80}}, "fbank_args: .*computed by the model"),
    ({"use_random_snr": True}, r"use_random_snr: .*now mix_snr: \{range"),
    ({"specaug_enroll_prob": 0.5}, r"specaug_enroll_prob: .*cue_processing.audio: \{reverb_enroll_prob"),
    ({"SSA_enroll_prob": 0.5}, r"SSA_enroll_prob: .*cue_processing.audio"),
    ({"online_mix": True, "num_speakers": 2}, r"num_speakers: 2 .*now num_speakers: \{distribution: \[p1, p2, p3\]"
                                              r".*\{distribution: \[0, 1, 0\], max_speakers: 2\}"),
    ({"noise_lmdb_file": "data/musan/lmdb", "noise_prob": 0.5}, "noise_lmdb_file: given without dataset_args.cues"),
    ({"filter_args": {}}, "filter_args: .*filter_len_args"),
    ({"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "timeline": {"position_weights": [1, 1, 1]}},
     r"timeline.position_weights: renamed; use config.dataset_args.timeline.two_speaker.overlap_position"),
    ({"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "timeline": {"containment_prob": 0.5}},
     r"timeline.containment_prob: renamed; use .*two_speaker.middle_mode: \{crossing, containment\}"),
    ({"online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "timeline": {"overlap_ratio": [0, 1]}},
     r"timeline.overlap_ratio: renamed; use .*timeline.two_speaker.overlap_ratio"),
    ({"cue_processing": {"visual": {"flip": 0.5}}}, "cue_processing.visual: has no options"),
])
def test_older_wesep_keys_name_their_replacement(args, message):
    with pytest.raises(ConfigError, match=message):
        LoaderConfig.from_dict({"packs": [{"path": "p"}], "dataset_args": args})


def test_peek_and_plan_read_the_recipe_file_with_pack(corpus, tmp_path):  # noqa: F811
    pack = family_pack(corpus, "audio")
    path = tmp_path / "train.yaml"
    path.write_text(TRAINER + DATALOADER + OFFLINE + FAMILIES["audio"][0], encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(cli.main, ["peek", str(path), "--pack", pack])
    assert result.exit_code == 0, result.output
    assert "train: 4 items" in result.output and "2 batches per rank" in result.output
    assert "ignored (trainer sections of the recipe): model, model_args" in result.output
    assert "audio_aux" in result.output
    result = runner.invoke(cli.main, ["plan", str(path), "--pack", pack, "--state", "val"])
    assert result.exit_code == 0, result.output
    assert "ignored (trainer sections of the recipe)" in result.output and "val: 4 items" in result.output
    result = runner.invoke(cli.main, ["plan", str(path)])
    assert result.exit_code == 1 and "config.packs: a non-empty list" in result.output
    with_pack = tmp_path / "with.yaml"
    with_pack.write_text(yaml.safe_dump(with_packs(recipe("audio"), pack)), encoding="utf-8")
    result = runner.invoke(cli.main, ["plan", str(with_pack), "--pack", pack])
    assert result.exit_code == 1 and "has packs already" in result.output


def test_reverb_conf_is_parsed_with_wesep_defaults():
    config = LoaderConfig.from_dict({"packs": [{"path": "p"}], "dataset_args": {
        "online_mix": True, "num_speakers": {"distribution": [0, 1, 0]}, "reverb_prob": 0.3,
        "reverb_conf": {"rt60": [0.2, 0.5]}}})
    conf = config.dataset_args.augment.reverb_conf
    assert conf.rt60 == (0.2, 0.5) and conf.room_min == (3, 3, 2.5) and conf.mic_dist == (0.2, 5.0)
    assert config.dataset_args.augment.reverb_prob == 0.3
    assert np.isclose(config.dataset_args.mix.timeline is None, True)
