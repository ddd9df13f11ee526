"""One cue registry per side, all keyed by the format's representations (issue 14 item 6): the writer's modules
(``packer.cues.representations``), the reader's (``loader.tse.cues.representations``) and the contract's payload
checks (``schemas.cuecheck``) cover exactly ``schemas.cues.REPRESENTATIONS``, and each reader module has the
functions ``CueBank.read`` and ``CueField.read`` dispatch to."""

from __future__ import annotations

import pytest

from speechpack.loader.tse.cues.representations import MODULES as READERS
from speechpack.packer.cues.representations import MODULES as WRITERS
from speechpack.schemas.cuecheck import PAYLOAD_CHECKS
from speechpack.schemas.cues import REPRESENTATIONS

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")


def test_every_side_covers_every_representation():
    names = set(REPRESENTATIONS.values())
    assert set(READERS) == names and set(WRITERS) == names and set(PAYLOAD_CHECKS) == names


def test_each_reader_module_reads_and_values_its_representation():
    for name, module in READERS.items():
        assert module.__name__ == f"speechpack.loader.tse.cues.{name}", "one module per representation, named after it"
        assert callable(module.read) and callable(module.value), name
