"""Omnilingual recipe configs (``dataset:`` + ``tokenizer:`` + ``packs:``) on real speech: the fine-tuning and
LLM recipes' dataset blocks, written from their published values, load unchanged and give batches within
``max_num_elements`` whose utterances pass the filters, each once per epoch (``loader.asr.args``)."""

from __future__ import annotations

import io
from collections import Counter

import numpy as np
import pytest
import soundfile
import torch
import yaml
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader import build_loader, open_pack
from speechpack.loader.config import ConfigError
from speechpack.packer.adapters.asr_parquet import build_parquet
from speechpack.packer.build.run import BuildOptions
from factories import require
from factories.asr import librivox_clips, write_parquet_dataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
RATE = 16000
SIXTY_SECONDS = 960_000

#: The fine-tuning recipe's dataset block (Omnilingual's published values; the paths are filled in by the test).
FT_RECIPE = """
dataset:
  name: example_dataset
  train_split: train
  valid_split: dev
  storage_mode: MIXTURE_PARQUET
  task_mode: ASR
  mixture_parquet_storage_config:
    dataset_summary_path: {tsv}
    beta_corpus: 0.5
    beta_language: 0.5
    fragment_loading:
      cache: true
  asr_task_config:
    min_audio_len: 32_000
    max_audio_len: 960_000
    max_num_elements: 960_000
    batch_shuffle_window: 1
    normalize_audio: true
    example_shuffle_window: 1
tokenizer:
  name: {model}
packs:
  - path: {train}
  - path: {dev}
"""

#: The LLM recipe's block, with the storage keys the fine-tuning one leaves at their defaults spelt out.
LLM_RECIPE = """
dataset:
  name: example_dataset
  train_split: train_librivox
  valid_split: dev
  storage_mode: MIXTURE_PARQUET
  task_mode: ASR
  mixture_parquet_storage_config:
    fragment_streaming:
      seed: 2
      fragment_shuffle_window: -1
      nb_epochs: null
      partition_filters: 'pc.is_in(pc.field("language"), pa.array(["en"])) | (pc.field("corpus") == "mls")'
    fragment_loading: {{columns: null, nb_prefetch: 2, num_parallel_fragments: 4, cache: false}}
    sync_mode: UNTIL_LAST
    sync_batches: true
  asr_task_config:
    min_audio_len: 32_000
    max_audio_len: 960_000
    max_num_elements: 960_000
    normalize_audio: true
    example_shuffle_window: 1000
    batch_shuffle_window: 3
    num_prefetch: 4
    npc: 1
tokenizer:
  name: {model}
packs:
  - path: {train}
  - path: {dev}
trainer: {{max_num_steps: 10}}
"""


def wav_bytes(audio: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def looped(clips, samples: int) -> tuple[np.ndarray, str]:
    """Real speech of exactly ``samples`` samples: the clips one after another, and their transcripts."""
    audio = np.concatenate([soundfile.read(c.path, dtype="int16")[0] for c in clips])
    text = " ".join(c.text for c in clips)
    repeats = -(-samples // len(audio))
    return np.tile(audio, repeats)[:samples], " ".join([text] * repeats)


@pytest.fixture(scope="module")
def recipe_data(tmp_path_factory):
    """Train and dev packs built with --split from a parquet dataset of the librivox clips, a SentencePiece model
    trained on their transcripts, and Omnilingual's summary TSV of the dataset."""
    spm = require("sentencepiece", "sentencepiece")
    clips = librivox_clips()
    root = tmp_path_factory.mktemp("recipe")
    long_audio, long_text = looped(clips, SIXTY_SECONDS)
    longer_audio, longer_text = looped(clips, SIXTY_SECONDS + RATE)
    short = soundfile.read(clips[1].path, dtype="int16")[0][:RATE * 3 // 2]
    layout = {
        ("librivox", "en"): [(0, "FLAC", "train"), (1, "FLAC", "train"), (2, "WAV", "train"), (1, "WAV", "train"),
                             (0, "WAV", "train"), (0, "WAV", "train"), (3, "WAV", "train"), (4, "FLAC", "dev"),
                             (2, "FLAC", "dev")],
        ("mls", "fr"): [(3, "FLAC", "train"), (4, "WAV", "train")],
    }
    rows = {("librivox", "en", 3): {"audio_bytes": wav_bytes(short), "audio_size": len(short),
                                     "text": "he was not"},
            ("librivox", "en", 4): {"audio_bytes": wav_bytes(long_audio), "audio_size": SIXTY_SECONDS,
                                     "text": long_text},
            ("librivox", "en", 5): {"audio_bytes": wav_bytes(longer_audio), "audio_size": len(longer_audio),
                                     "text": longer_text},
            ("librivox", "en", 6): {"text": "ΩΩΩΩ"}}  # real speech, a transcript the tokenizer cannot spell
    data = write_parquet_dataset(root / "data", clips, layout=layout, rows=rows)
    train = build_parquet(str(data), BuildOptions(out=str(root / "train"), progress=False), split="train").out
    dev = build_parquet(str(data), BuildOptions(out=str(root / "dev"), progress=False), split="dev").out
    corpus = root / "text.txt"
    corpus.write_text("\n".join(c.text for c in clips) + "\n")
    spm.SentencePieceTrainer.Train(input=str(corpus), model_prefix=str(root / "sp"), vocab_size=60,
                                   hard_vocab_limit=False, add_dummy_prefix=False, minloglevel=2)
    tsv = root / "language_distribution_0.tsv"
    tsv.write_text("corpus\tlanguage\tsplit\tnum_samples\ttotal_audio_seconds\n"
                   "librivox\ten\ttrain\t7\t7200\nmls\tfr\ttrain\t2\t1800\nlibrivox\ten\tdev\t2\t900\n")
    return {"train": train, "dev": dev, "model": str(root / "sp.model"), "tsv": str(tsv), "root": root}


def recipe(text: str, data: dict, **replace) -> dict:
    return yaml.safe_load(text.format(**{**data, **replace}))


def epoch_batches(loader, epoch: int = 0) -> list[dict]:
    loader.set_epoch(epoch)
    return list(loader)


def kept_keys(pack_path: str, keep) -> set[str]:
    pack = open_pack(pack_path)
    return {k for k, n in zip(pack.keys.tolist(), pack.num_frames.tolist()) if keep(k, n)}


def test_fine_tuning_recipe_loads_unchanged_on_real_packs(recipe_data):
    loader = build_loader(recipe(FT_RECIPE, recipe_data), "train", seed=0)
    report = loader.report()
    # The filters, in Omnilingual's order: 1.5 s is under min_audio_len, 61 s over max_audio_len, "ΩΩΩΩ" is
    # made of unknown tokens only (dropped although remove_unknown is off).
    assert {k: v for k, v in report.filter_report.items() if v} == {"audio_too_short": 1, "audio_too_long": 1,
                                                                     "unknown_only": 1}
    pack = open_pack(recipe_data["train"])
    lengths = dict(zip(pack.keys.tolist(), pack.num_frames.tolist()))
    seen = Counter()
    for batch in epoch_batches(loader):
        assert set(batch) >= {"source_seqs", "source_seq_lens", "target_seqs", "target_seq_lens"}
        rows, width = batch["source_seqs"].shape
        assert rows * width <= SIXTY_SECONDS
        for row, key in enumerate(batch["key"]):
            if not batch["valid"][row]:
                continue
            seen[key] += 1
            n = int(batch["source_seq_lens"][row])
            assert 32_000 <= n <= SIXTY_SECONDS and n == lengths[key]
            # normalize_audio: zero mean, unit variance (up to layer_norm's eps of 1e-5 against the raw variance)
            wave = batch["source_seqs"][row, :n].double()
            assert abs(float(wave.mean())) < 1e-4 and abs(float(wave.var(unbiased=False)) - 1) < 1e-2
            if n == SIXTY_SECONDS:
                assert rows == 1  # a batch of one 60 s utterance: max_num_elements holds exactly one
    # librivox/en keeps 4 of its 7 rows, so it gives fewer items than it has kept (the weights times the rows
    # kept): the 60 s utterance comes within a few epochs, each in a batch of its own
    later = [b for e in range(1, 6) for b in epoch_batches(loader, e) if b["source_seqs"].shape[1] == SIXTY_SECONDS]
    assert any(lengths[k] == SIXTY_SECONDS for k in seen) or later
    assert all(b["source_seqs"].shape[0] == 1 for b in later)
    # The summary TSV's hours weigh the groups (train rows only): corpus shares (h_c / total) ** 0.5.
    weighting = loader.weighting
    wl, wm = (7200 / 9000) ** 0.5, (1800 / 9000) ** 0.5
    np.testing.assert_allclose(weighting.targets, [wl / (wl + wm), wm / (wl + wm)], rtol=1e-12)
    groups = loader.builder.items.groups
    assert groups == (("librivox", "en"), ("mls", "fr"))
    # Every kept utterance of a group is served once before any of them repeats.
    sizes = np.bincount(loader.builder.items.group, minlength=len(groups))
    for (corpus, _), count, size in zip(groups, weighting.counts, sizes.tolist()):
        keys = [k for k in seen if k.startswith(f"corpus={corpus}/")]
        assert sum(seen[k] for k in keys) == count
        assert len(keys) == min(size, count) and max(seen[k] for k in keys) - min(seen[k] for k in keys) <= 1


def test_fine_tuning_recipe_validation_sees_each_dev_utterance_once(recipe_data):
    loader = build_loader(recipe(FT_RECIPE, recipe_data), "val", seed=0)
    keys = [k for b in epoch_batches(loader) for k, v in zip(b["key"], b["valid"].tolist()) if v]
    assert sorted(keys) == sorted(open_pack(recipe_data["dev"]).keys.tolist())


def test_llm_recipe_split_corpus_filter_partition_filters_and_windows(recipe_data):
    cfg = recipe(LLM_RECIPE, recipe_data)
    loader = build_loader(cfg, "train", seed=5)
    # train_librivox: split train, corpus librivox; the partition filter (en, or corpus mls) keeps all of it
    expected = kept_keys(recipe_data["train"], lambda k, n: k.startswith("corpus=librivox/")
                         and 32_000 <= n <= SIXTY_SECONDS and "part-0:6" not in k)
    orders = []
    for e in range(2):
        batches = epoch_batches(loader, e)
        keys = [k for b in batches for k, v in zip(b["key"], b["valid"].tolist()) if v]
        assert sorted(keys) == sorted(expected)  # each once per epoch (no betas: no weighting)
        assert all(b["source_seqs"].shape[0] * b["source_seqs"].shape[1] <= SIXTY_SECONDS for b in batches)
        orders.append(keys)
    assert loader.report().dataloader == {"num_workers": 1, "workers_from": "npc", "prefetch_factor": 4,
                                          "prefetch_from": "num_prefetch"}
    # The windows live in the plan: a fresh loader (0 workers) resumed after one batch gives the rest, equal.
    again = build_loader(cfg, "train", seed=5, num_workers=0)
    again.set_epoch(1)
    first = next(iter(again))
    state = again.state_dict()
    resumed = build_loader(cfg, "train", seed=5, num_workers=0)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert [first["key"]] + [b["key"] for b in rest] == [b["key"] for b in epoch_batches(loader, 1)]
    for a, b in zip(rest, epoch_batches(loader, 1)[1:]):
        assert torch.equal(a["source_seqs"], b["source_seqs"])


def test_partition_filters_and_corpus_split_select_utterances(recipe_data):
    cfg = recipe(LLM_RECIPE, recipe_data)
    storage = cfg["dataset"]["mixture_parquet_storage_config"]
    storage["fragment_streaming"]["partition_filters"] = 'pc.equal(pc.field("language"), "fr")'
    cfg["dataset"]["train_split"] = "train"
    cfg["dataset"]["asr_task_config"]["npc"] = None
    loader = build_loader(cfg, "train")
    keys = {k for b in epoch_batches(loader) for k in b["key"]}
    assert keys == kept_keys(recipe_data["train"], lambda k, n: k.startswith("corpus=mls/"))
    cfg["dataset"]["train_split"] = "train_nosuchcorpus"
    with pytest.raises(Exception, match="the selection holds no utterance"):
        build_loader(cfg, "train")
    cfg["dataset"]["train_split"] = "test"
    with pytest.raises(ConfigError, match="no pack holds split 'test' \\(the packs hold dev, train"):
        build_loader(cfg, "train")


def test_recipe_errors_name_the_key(recipe_data):
    cfg = recipe(FT_RECIPE, recipe_data, model="omniASR_tokenizer_v1")
    with pytest.raises(ConfigError, match="config.tokenizer.name: 'omniASR_tokenizer_v1' is not a file; fairseq2 "
                                          "would fetch the asset card .* give the SentencePiece model file"):
        build_loader(cfg, "train")
    cfg = recipe(FT_RECIPE, recipe_data)
    cfg["dataset"]["task_mode"] = "SSL"
    with pytest.raises(ConfigError, match="config.dataset.task_mode: 'SSL' is not supported"):
        build_loader(cfg, "train")
    cfg = recipe(FT_RECIPE, recipe_data)
    cfg["dataset"]["asr_task_config"]["max_num_elem"] = 3
    with pytest.raises(ConfigError, match=r"config.dataset.asr_task_config: unknown key\(s\) max_num_elem"):
        build_loader(cfg, "train")
    cfg = recipe(FT_RECIPE, recipe_data)
    cfg["dataset"]["mixture_parquet_storage_config"]["fragment_streaming"] = {
        "partition_filters": "pc.field('corpus').isin(['a'])"}
    with pytest.raises(ConfigError, match="partition_filters: cannot read .* at character 19"):
        build_loader(cfg, "train")


def test_peek_and_plan_take_the_recipe_file(recipe_data):
    path = recipe_data["root"] / "recipe.yaml"
    path.write_text(FT_RECIPE.format(**recipe_data))
    peek = CliRunner().invoke(main, ["peek", str(path)])
    assert peek.exit_code == 0, peek.output
    assert "source_seq_lens" in peek.output and "target_seq_lens" in peek.output
    plan = CliRunner().invoke(main, ["plan", str(path), "--world-size", "2"])
    assert plan.exit_code == 0, plan.output
