"""``speechpack plan`` refuses a plan that would train on nothing, saying why and what would give it batches; it
dry-runs val and test as it does train, and answers in bounded time and memory for any world size and epochs."""

from __future__ import annotations

import time

import numpy as np
import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.loader.config_checks import MAX_SEED
from speechpack.loader.plan.epoch_plan import MAX_WORLD_SIZE
from speechpack.loader.plan.planning_report import MAX_PLAN_EPOCHS
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

pytestmark = pytest.mark.fast


def _plan(tmp_path, pack: str, loader_args: str, *options: str):
    config = tmp_path / "train.yaml"
    config.write_text(f"packs: [{{path: {pack}}}]\ndataset_args: {{chunk_len: 4000}}\n"
                      f"dataloader_args: {loader_args}\n", encoding="utf-8")
    return CliRunner().invoke(main, ["plan", str(config), *options])


def test_a_plan_with_zero_batches_fails_saying_why(four_items, tmp_path):
    result = _plan(tmp_path, four_items, "{batch_size: 8, drop_last: true}")
    assert result.exit_code == 1
    assert ("error: train: epoch 0 has no batch to train on: 4 items, all 4 dropped as an incomplete round "
            "(drop_last: true / tail: drop; a round takes batch_size 8 x world size 1); lower the batch size or "
            "set drop_last: false (tail: pad)") in result.output
    assert "utilisation 100.000% (0 real / 0 padded elements)" not in result.output


def test_ranks_that_leave_no_round_are_refused_too(four_items, tmp_path):
    result = _plan(tmp_path, four_items, "{batch_size: 2, drop_last: true}", "--world-size", "4")
    assert result.exit_code == 1
    assert "a round takes batch_size 2 x world size 4" in result.output


def test_the_same_items_with_a_padded_tail_plan_one_batch(four_items, tmp_path):
    result = _plan(tmp_path, four_items, "{batch_size: 8, drop_last: false}")
    assert result.exit_code == 0, result.output
    assert "epoch 0: 1 batch per rank" in result.output


def _recipe(tmp_path, text: str) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_plan_dry_runs_the_val_and_test_plans_of_a_recipe_given_its_pack(four_items, tmp_path):
    """A WeSep recipe as it is (``--pack``): val and test read ``val_dataset_args`` (whole utterances here)."""
    recipe = _recipe(tmp_path, "dataset_args: {chunk_len: 4000}\ndataloader_args: {batch_size: 2, drop_last: false}\n"
                               "val_dataset_args: {whole_utt: true}\nmodel: BSRNN\n")
    for state in ("val", "test"):
        result = CliRunner().invoke(main, ["plan", recipe, "--pack", four_items, "--state", state])
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"{state}: 4 items, world size 1")
        assert "largest batch 2 x 8000 = 16000" in result.output  # whole 8000-sample utterances, not 4000 chunks
    train = CliRunner().invoke(main, ["plan", recipe, "--pack", four_items])
    assert "largest batch 2 x 4000 = 8000" in train.output


def test_a_val_plan_with_no_batch_says_which_counts_and_setting_dropped_it(four_items, tmp_path):
    recipe = _recipe(tmp_path, "dataset_args: {chunk_len: 4000}\ndataloader_args: {batch_size: 8, drop_last: true}\n")
    result = CliRunner().invoke(main, ["plan", recipe, "--pack", four_items, "--state", "val"])
    assert result.exit_code == 1
    assert ("error: val: epoch 0 has no batch: 4 items, all 4 dropped as an incomplete round (drop_last: true / "
            "tail: drop; a round takes batch_size 8 x world size 1)") in result.output


def test_a_plan_whose_filters_remove_every_item_says_so(four_items, tmp_path):
    config = tmp_path / "filtered.yaml"
    config.write_text(f"packs: [{{path: {four_items}}}]\ndataset_args: {{whole_utt: true, filter_len: true, "
                      f"filter_len_args: {{min_num_seconds: 60, max_num_seconds: 100}}}}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(config)])
    assert result.exit_code == 1
    assert ("error: train: epoch 0 has no batch to train on: no item left: the filters removed all 4 (filter_len 4)"
            in result.output), result.output


def test_budget_batches_too_few_for_the_ranks_name_the_world_size(four_items, tmp_path):
    config = tmp_path / "budget.yaml"
    config.write_text(f"packs: [{{path: {four_items}}}]\ndataset_args: {{whole_utt: true, tail: drop, batching: "
                      f"{{type: budget, max_frames: 16000}}}}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(config), "--world-size", "4"])
    assert result.exit_code == 1
    assert "4 items, all 4 dropped: their budget batches make no step of world size 4 (tail: drop)" in result.output


def test_the_largest_world_size_is_planned_in_seconds(four_items, tmp_path):
    started = time.monotonic()
    result = _plan(tmp_path, four_items, "{batch_size: 2, drop_last: false}", "--world-size", str(MAX_WORLD_SIZE))
    seconds = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert f"train: 4 items, world size {MAX_WORLD_SIZE}" in result.output
    assert f"valid items per rank 0-2 (mean 0.0; {MAX_WORLD_SIZE - 2} ranks only padding)" in result.output
    assert seconds < 20, seconds


def test_every_rank_is_summarised_in_one_line(four_items, tmp_path):
    result = _plan(tmp_path, four_items, "{batch_size: 1, drop_last: false}", "--world-size", "3")
    assert result.exit_code == 0, result.output
    assert ("  ranks: valid items per rank 1-2 (mean 1.3); utilisation per rank 50.0%-100.0% (lowest: rank 1)"
            in result.output), result.output


@pytest.mark.parametrize("option, value", [("--epochs", MAX_PLAN_EPOCHS + 1), ("--epochs", 100_000_000),
                                           ("--world-size", MAX_WORLD_SIZE + 1)])
def test_epochs_and_world_size_past_their_maximum_are_usage_errors(four_items, tmp_path, option, value):
    started = time.monotonic()
    result = _plan(tmp_path, four_items, "{batch_size: 2}", option, str(value))
    assert result.exit_code == 2 and "is not in the range" in result.output, result.output
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("command", ["plan", "peek"])
def test_a_seed_past_the_loaders_maximum_is_a_usage_error(four_items, tmp_path, command):
    config = tmp_path / "train.yaml"
    config.write_text(f"packs: [{{path: {four_items}}}]\ndataset_args: {{chunk_len: 4000, batch_size: 2}}\n",
                      encoding="utf-8")
    result = CliRunner().invoke(main, [command, str(config), "--seed", str(MAX_SEED + 1)])
    assert result.exit_code == 2 and "Invalid value for '--seed'" in result.output, result.output
    assert CliRunner().invoke(main, ["plan", str(config), "--seed", str(MAX_SEED)]).exit_code == 0


def test_the_most_epochs_plan_in_bounded_time_and_memory(four_items, tmp_path):
    started = time.monotonic()
    result = _plan(tmp_path, four_items, "{batch_size: 2}", "--epochs", str(MAX_PLAN_EPOCHS))
    assert result.exit_code == 0 and f"epoch {MAX_PLAN_EPOCHS - 1}: 2 batches per rank" in result.output
    assert time.monotonic() - started < 30


def test_figures_of_many_epochs_over_the_memory_limit_are_refused(four_items, tmp_path):
    config = tmp_path / "small-limit.yaml"
    config.write_text(f"packs: [{{path: {four_items}}}]\nmemory_limit: 10000\ndataset_args: {{chunk_len: 4000}}\n",
                      encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(config), "--epochs", "1000"])
    assert result.exit_code == 1
    assert "error: 1000 epochs of 4 batches over 1 rank keep about" in result.output and "plan fewer epochs" in result.output


def test_items_the_filters_remove_are_reported_beside_the_plan(make_wav, write_list, tmp_path):
    rng = np.random.default_rng(1)
    lines = []
    for i, samples in enumerate((8000, 8000, 24000)):
        path = make_wav(f"v{i}.wav", data=(0.1 * rng.standard_normal(samples)).astype(np.float32))
        lines.append({"key": f"v{i}", "spk": [f"s{i}"], "src": {f"s{i}": [path]}})
    build_wesep(str(write_list(lines, "varied.list")), BuildOptions(out=str(tmp_path / "varied"), progress=False))
    config = tmp_path / "filtered.yaml"
    config.write_text(f"packs: [{{path: {tmp_path / 'varied'}}}]\ndataset_args: {{whole_utt: true, filter_len: true, "
                      f"filter_len_args: {{min_num_seconds: 1, max_num_seconds: 100}}}}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(config)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("train: 1 item, world size 1; 2 filtered out (filter_len 2)\n"), result.output


def test_keys_yaml_reads_as_booleans_numbers_or_null_are_named_as_unknown_keys(four_items, tmp_path):
    """``on:``, ``2:`` and ``~:`` are a boolean, a number and null to YAML: unknown keys named with what to quote,
    beside a misspelt text key, never a ``TypeError`` from sorting or joining keys of mixed types."""
    config = tmp_path / "train.yaml"
    config.write_text(f"packs: [{{path: {four_items}}}]\n"
                      f"dataset_args: {{chunk_len: 4000, on: 1, 2: 2, ~: 3, chunk_lne: 4}}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["plan", str(config)])
    assert result.exit_code == 1 and not isinstance(result.exception, TypeError), result.output
    assert ("config.dataset_args: unknown key(s) 2 (a number key: quote it to mean the text), None (null key: quote "
            "it to mean the text), True (a boolean key: quote it to mean the text), chunk_lne (known: ") in result.output
