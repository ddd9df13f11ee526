"""What a build did: the one summary ``speechpack build ...`` and ``speechpack finalize`` print.

Its own module so that ``packer.build.run`` (which builds) and ``packer.build.finalize`` (which commits, and is
called by ``run``) both return it without importing each other.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from speechpack.packer.build.plan import ShardSlice
from speechpack.schemas.constants import SKIPPED_NAME, TOOL_NAME
from speechpack.schemas.cues import CUES_DIR, LABELS_DIR
from speechpack.schemas.format import Manifest
from speechpack.schemas.units import format_bytes, plural
from speechpack.schemas.wesep_list import LineProblem


@dataclass(frozen=True)
class BuildSummary:
    """What a build did.  ``manifest`` is ``None`` after a ``--shards i/n`` job (the pack is not committed yet);
    ``built`` and ``kept`` count the shards this run wrote and the ones it found complete (``--resume``)."""

    out: str
    manifest: Manifest | None
    skipped: list[LineProblem] = field(default_factory=list)
    seconds: float = 0.0
    built: int = 0
    kept: int = 0
    slice: ShardSlice | None = None
    planned: int = 0

    def describe(self) -> str:
        if self.manifest is None:
            return (f"slice {self.slice}: built {self.built} and kept {self.kept} of its {self.planned} planned "
                    f"shard(s) in {self.seconds:.2f} s -> {self.out}\nwhen every slice is done: "
                    f"{TOOL_NAME} finalize {self.out}")
        totals = self.manifest.totals
        text = (f"packed {plural(totals['samples'], 'sample')} ({totals['hours']:.3f} h, {plural(totals['speakers'], 'speaker')}) into "
                f"{len(self.manifest.shards)} shard(s), {format_bytes(totals['bytes'])}, in {self.seconds:.2f} s "
                f"-> {self.out}")
        if self.kept:
            text += f"\nkept {self.kept} verified shard(s) of an earlier run, built {self.built}"
        banks = sorted({name.split("/")[0] for name in self.manifest.cues if "/" in name} - {LABELS_DIR})
        if self.manifest.cues:
            labelled = any(name.startswith(f"{LABELS_DIR}/") for name in self.manifest.cues)
            labels = " and speaker labels" if labelled else ""
            text += f"\ncues: {', '.join(banks) or 'none'}{labels} in {os.path.join(self.out, CUES_DIR)}"
        if self.skipped:
            text += f"\nskipped {len(self.skipped)} bad line(s); see {os.path.join(self.out, SKIPPED_NAME)}"
        return text


__all__ = ["BuildSummary"]
