"""The cue representation table and the functions registered by its names: every row of
``schemas.cue_banks.REPRESENTATION_SPECS`` has a writer (``packer.cues.banks.WRITERS``) and a read function
(``loader.pack.cues.READERS``), and nothing registers a name the table lacks; the batch-time values
(``loader.tse.cues.values.VALUES``) are optional, but never for an unknown name.  The pack reader reads cue banks
without the TSE task or soxr."""

from __future__ import annotations

import subprocess
import sys

import pytest

from speechpack.loader.pack.cues import READERS
from speechpack.loader.tse.cues.values import VALUES
from speechpack.packer.cues.banks import WRITERS
from speechpack.schemas.cue_banks import REPRESENTATION_SPECS
from speechpack.schemas.cues import DEFAULT_REPRESENTATIONS, POLICY_TYPES

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")


def test_every_representation_has_a_writer_and_a_read_function():
    names = set(REPRESENTATION_SPECS)
    assert set(WRITERS) == names and set(READERS) == names
    assert set(VALUES) <= names


def test_each_writer_names_its_row_and_each_row_a_known_cue():
    for name, writer in WRITERS.items():
        assert writer.representation == name
    for row in REPRESENTATION_SPECS.values():
        assert row.cues and set(row.cues) <= set(POLICY_TYPES), row.name
    for cue, default in DEFAULT_REPRESENTATIONS.items():
        assert default is None or cue in REPRESENTATION_SPECS[default].cues


def test_the_pack_reader_reads_cues_without_a_task_or_soxr():
    script = ("import sys, speechpack.loader.pack, speechpack.loader.pack.cues; "
              "bad = sorted(m for m in sys.modules if m == 'soxr' or m.startswith(('speechpack.loader.tse', "
              "'speechpack.loader.asd', 'speechpack.loader.asr', 'torch'))); print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
