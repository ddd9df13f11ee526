"""The batch builder protocol (``loader.tasks.BatchBuilder``) is small: what a plan needs (``plan_args``, ``units``,
``check_plan``, ``dry_run``) and what a batch needs (``build``/``build_block``, ``augment_batch``, ``sample_rate``,
``tokenizer``); the generic loader asks a builder for nothing else, and the units' own facts (count, lengths,
train windows, pack samples) and the dry run's (rows, cropping, batch check) live in the objects they belong to."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from speechpack.loader.tasks import BatchBuilder, DryRunView, PlanUnits, index_samples

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

PLAN_SIDE = {"plan_args", "units", "check_plan", "dry_run"}
BATCH_SIDE = {"build", "build_block", "augment_batch", "sample_rate", "tokenizer"}
#: The generic modules that hold a task's builder (``loader.tasks.Prepared.builder``).
GENERIC = ("loader/torch.py", "loader/plan/planning_report.py", "loader/cache/schedule.py",
           "loader/cache/shard_order.py", "loader/peek.py")
ROOT = Path(__file__).resolve().parents[2]


def test_the_builder_protocol_is_what_a_plan_needs_and_what_a_batch_needs():
    hooks = {name for name in vars(BatchBuilder) if not name.startswith("_")}
    assert hooks == PLAN_SIDE | BATCH_SIDE


def test_the_generic_loader_asks_a_builder_for_protocol_hooks_only():
    asked = set()
    for module in GENERIC:
        asked |= set(re.findall(r"\bbuilder\.(\w+)", (ROOT / module).read_text(encoding="utf-8")))
    assert asked and asked <= PLAN_SIDE | BATCH_SIDE, sorted(asked - PLAN_SIDE - BATCH_SIDE)


def test_the_defaults_plan_one_row_per_unit_and_refuse_no_plan():
    class Minimal(BatchBuilder):
        units = PlanUnits(count=3, lengths=lambda epoch: np.full(3, 10))

        def build(self, items, valid, epoch, global_batch, arrays=None):
            return {"items": items}

    builder = Minimal()
    assert builder.dry_run() == DryRunView() and builder.check_plan(None, 1) is None
    assert builder.units.samples() is None and builder.units.train_windows is None
    assert not builder.units.lengths_by_epoch and builder.tokenizer is None
    assert builder.augment_batch({"x": 1}) == {"x": 1}
    (batch,) = builder.build_block([(np.arange(2), np.ones(2, bool), 0, 0)])
    assert batch["items"].tolist() == [0, 1]


def test_a_builder_without_units_says_so():
    with pytest.raises(NotImplementedError, match="units"):
        BatchBuilder().units


def test_pack_samples_of_train_windows_read_their_items():
    class Windows:
        item = np.array([0, 0, 1])

    pack, sample = index_samples(np.array([2, 3]), np.array([7, 8]), Windows())
    assert pack.tolist() == [2, 2, 3] and sample.tolist() == [7, 7, 8]
