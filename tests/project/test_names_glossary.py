"""One name per concept (docs/architecture.md, "Names"): the glossary points at modules that exist, and the planners'
arguments say which windows they take (train windows are not shuffle windows)."""

from __future__ import annotations

import inspect
import os
import re

import pytest

from speechpack.loader.plan.batching import make_budget_plan
from speechpack.loader.plan.epoch_plan import plan_epoch
from speechpack.loader.plan.static_plan import make_epoch_plan

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _names_rows() -> list[list[str]]:
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as fp:
        text = fp.read()
    section = text.split("\n## Names\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.startswith("| **")]
    return [[cell.strip() for cell in row] for row in rows]


def test_the_names_glossary_points_at_files_that_exist():
    rows = _names_rows()
    assert len(rows) >= 10
    paths = [path for row in rows for path in re.findall(r"`((?:\w+/)+\w+\.py|cli\.py)`", row[2])]
    assert paths
    missing = [path for path in paths if not os.path.isfile(os.path.join(ROOT, path))]
    assert not missing, f"docs/architecture.md's Names points at files that do not exist: {missing}"


def test_the_epoch_planners_name_the_windows_they_take():
    assert "train_windows" in inspect.signature(plan_epoch).parameters
    for planner in (make_epoch_plan, make_budget_plan):
        assert "shuffle_windows" in inspect.signature(planner).parameters
    for planner in (plan_epoch, make_epoch_plan, make_budget_plan):
        assert "windows" not in inspect.signature(planner).parameters, planner.__name__
