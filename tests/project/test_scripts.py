"""scripts/setup.sh, the set-up both scripts share, run against a stand-in environment whose ``python`` records
what it is asked to do: the torch index comes from SPEECHPACK_TORCH_INDEX_URL (pip's own configuration when
unset), every step says what it does, and the callers can tell a new shell how to reach ``speechpack``."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import factories.paths

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

REPO = factories.paths.REPO
SETUP = REPO / "scripts" / "setup.sh"


@pytest.fixture
def stand_in_venv(tmp_path):
    """A directory laid out like a venv whose ``python`` appends its arguments to ``calls.txt``."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls.txt"}\n', encoding="utf-8")
    python.chmod(0o755)
    (venv / "bin" / "activate").write_text(f'PATH="{venv / "bin"}:$PATH"\n', encoding="utf-8")
    return venv


def _source_setup(venv: Path, **env: str) -> subprocess.CompletedProcess:
    script = f'. "{SETUP}" && speechpack_hint'
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SPEECHPACK_")}
    environment.update(SPEECHPACK_VENV=str(venv), **env)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=environment, timeout=60)


def test_torch_comes_from_the_index_the_variable_names(stand_in_venv, tmp_path):
    url = "https://download.pytorch.org/whl/cpu"
    result = _source_setup(stand_in_venv, SPEECHPACK_TORCH_INDEX_URL=url, SPEECHPACK_EXTRAS="plot")
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert any(call.endswith(f"--index-url {url} torch==2.13.0") for call in calls), calls
    assert calls[-1] == f"-m pip install -q -e {REPO}[plot]"
    steps = [line for line in result.stdout.splitlines() if line.startswith("speechpack setup: ")]
    assert any(url in line for line in steps) and steps[-1] == f"speechpack setup: ready: {stand_in_venv}"
    assert f". {stand_in_venv}/bin/activate" in result.stdout and f"{stand_in_venv}/bin/speechpack" in result.stdout


def test_without_the_variable_pip_chooses_and_a_second_run_installs_nothing(stand_in_venv, tmp_path):
    first = _source_setup(stand_in_venv)
    assert first.returncode == 0, first.stderr
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert "-m pip install -q torch==2.13.0" in calls and not any("--index-url" in call for call in calls)
    assert "pip's configured index" in first.stdout
    second = _source_setup(stand_in_venv)
    assert second.returncode == 0 and "speechpack setup:" not in second.stdout  # installed: silent, quick
    assert (tmp_path / "calls.txt").read_text().splitlines() == calls
    assert "activate" in second.stdout  # the hint is there every time
