"""``speechpack plan`` refuses a plan that would train on nothing, saying why and what would give it batches."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from speechpack.cli import main
from speechpack.packer.adapters.wesep import build_wesep
from speechpack.packer.build.run import BuildOptions

pytestmark = pytest.mark.fast


@pytest.fixture
def four_items(make_wav, write_list, tmp_path) -> str:
    """A sources pack of four single-speaker utterances (generated audio)."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(4):
        path = make_wav(f"u{i}.wav", data=(0.1 * rng.standard_normal(8000)).astype(np.float32))
        lines.append({"key": f"u{i}", "spk": [f"s{i}"], "src": {f"s{i}": [path]}})
    list_path = write_list(lines, "sources.list")
    build_wesep(str(list_path), BuildOptions(out=str(tmp_path / "pack"), progress=False))
    return str(tmp_path / "pack")


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
