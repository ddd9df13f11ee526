"""Progress bars as a log file keeps them (not a terminal: a SLURM job's output): each bar ends at n of n, a bar
for nothing is not drawn, and ``validate`` has one too (hashing a large pack takes minutes)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from speechpack.cli import main

pytestmark = pytest.mark.fast

UTTERANCES = 5


@pytest.fixture
def sources_list(make_wav, write_list):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(UTTERANCES):
        path = make_wav(f"u{i}.wav", data=(0.1 * rng.standard_normal(8000 + 800 * i)).astype(np.float32))
        lines.append({"key": f"u{i}", "spk": [f"s{i % 2}"], "src": {f"s{i % 2}": [path]}})
    return write_list(lines, "sources.list")


def _final_states(stderr: str) -> list[str]:
    """What a log file shows of each bar: tqdm redraws a line with carriage returns; a log keeps every state, and
    the last before a newline is the bar's end."""
    return [line.split("\r")[-1] for line in stderr.split("\n") if line.strip()]


def test_a_build_logged_to_a_file_ends_each_bar_at_n_of_n_and_draws_no_empty_bar(sources_list, tmp_path):
    result = CliRunner().invoke(main, ["build", "wesep", "--list", str(sources_list), "--out", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    ends = _final_states(result.stderr)
    checking = [line for line in ends if ": checking:" in line]
    packing = [line for line in ends if ": packing:" in line]
    assert len(checking) == 1 and "100%" in checking[0] and f"{UTTERANCES}/{UTTERANCES}" in checking[0]
    assert len(packing) == 1 and f"{UTTERANCES}/{UTTERANCES}" in packing[0]
    assert "verifying shards" not in result.stderr  # a fresh build has no shard to verify


def test_validate_shows_a_bar_per_pack_over_its_shards(sources_list, tmp_path):
    pack = tmp_path / "p"
    built = CliRunner().invoke(main, ["build", "wesep", "--list", str(sources_list), "--out", str(pack),
                                      "--shard-size", "20kB", "--no-progress"])
    assert built.exit_code == 0, built.output
    result = CliRunner().invoke(main, ["validate", str(pack)])
    assert result.exit_code == 0, result.output
    shards = len(json.loads((pack / "dataset.json").read_text())["shards"])
    assert shards > 1
    [bar] = [line for line in _final_states(result.stderr) if f"speechpack validate {pack}:" in line]
    assert "100%" in bar and f"{shards}/{shards} " in bar
    quiet = CliRunner().invoke(main, ["validate", str(pack), "--no-progress"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
