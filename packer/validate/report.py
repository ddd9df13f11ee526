"""What ``speechpack validate`` reports: about one pack, the problems found (each naming its file) and a summary
(``PackReport``); over the packs of one command, their reports and the asd level comparison (``ValidationReport``).

Kept apart from the checks (``packer.validate.pack``), which fill it in, so every caller prints and writes it alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from speechpack.loader.pack import is_remote
from speechpack.packer.files import dump_json
from speechpack.schemas.constants import KIND_ASD
from speechpack.schemas.format import Manifest
from speechpack.schemas.units import format_bytes, plural

#: Percentiles of the per-sample durations and levels in the summary.
_PERCENTILES = (0, 5, 50, 95, 100)


@dataclass
class Issue:
    file: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


@dataclass
class PackReport:
    path: str
    errors: list[Issue] = field(default_factory=list)
    warnings: list[Issue] = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def error(self, file: str, message: str) -> None:
        self.errors.append(Issue(file, message))

    def warn(self, file: str, message: str) -> None:
        self.warnings.append(Issue(file, message))

    def to_dict(self) -> dict:
        return {"path": self.path, "ok": self.ok, "errors": [vars(i) for i in self.errors],
                "warnings": [vars(i) for i in self.warnings], "summary": self.summary}

    def describe(self) -> str:
        lines = [f"{'OK  ' if self.ok else 'FAIL'} {self.path}"]
        s = self.summary
        if "samples" in s:
            lines.append(f"     {s['kind']} pack: {plural(s['samples'], 'sample')}, {s['hours']:.3f} h, "
                         f"{plural(s['speakers'], 'speaker')}, "
                         f"{plural(s['shards'], 'shard')}, {format_bytes(s['bytes'])}, {s['sample_rate']} Hz")
        if "duration_s" in s:
            lines.append("     duration s  " + _percentile_row(s["duration_s"]))
        for stream, levels in s.get("levels", {}).items():
            lines.append(f"     {stream:<7} rms dBFS " + _percentile_row(levels["rms_dbfs"]))
            lines.append(f"     {stream:<7} peak dBFS " + _percentile_row(levels["peak_dbfs"]))
            lines.append(f"     {stream:<7} full-scale samples {levels['full_scale_samples']}, "
                         f"rescaled segments {levels['rescaled_segments']}")
        for name, bank in s.get("cues", {}).items():
            lines.append(f"     cue {name}: {bank['representation']}, {bank['keys']} keys, {bank['entries']} entries, "
                         f"{bank['items']} items" + (f", {bank['codec']}" if "codec" in bank else ""))
        if s.get("hashes_checked") is False:
            lines.append("     hashes not checked (--no-hash)")
        lines += [f"     error: {issue}" for issue in self.errors]
        lines += [f"     warning: {issue}" for issue in self.warnings]
        return "\n".join(lines)


def _percentile_row(values: dict) -> str:
    return "  ".join(f"p{p}={values[f'p{p}']:.2f}" for p in _PERCENTILES)


def _percentiles(values: np.ndarray) -> dict:
    if values.size == 0:
        return {f"p{p}": float("nan") for p in _PERCENTILES}
    return {f"p{p}": float(np.percentile(values, p)) for p in _PERCENTILES}


def _dbfs(values: list[float]) -> np.ndarray:
    return 20 * np.log10(np.maximum(np.asarray(values, dtype=np.float64), 1e-10))


def pack_summary(manifest: Manifest, durations: list[float], levels: dict, check_hashes: bool) -> dict:
    """What ``validate`` prints and ``--json`` writes under ``summary``: totals, duration and level percentiles."""
    return {
        "kind": manifest.kind,
        "sample_rate": manifest.sample_rate,
        "samples": manifest.totals["samples"],
        "hours": manifest.totals["hours"],
        "speakers": manifest.totals["speakers"],
        "shards": len(manifest.shards),
        "bytes": manifest.totals["bytes"],
        "skipped": manifest.skipped["count"],
        "hashes_checked": check_hashes,
        "duration_s": _percentiles(np.asarray(durations)),
        "levels": {
            name: {"rms_dbfs": _percentiles(_dbfs(lv["rms"])), "peak_dbfs": _percentiles(_dbfs(lv["peak"])),
                   "full_scale_samples": lv["full_scale"], "rescaled_segments": lv["rescaled"]}
            for name, lv in levels.items()
        },
    }


#: Kinds whose valid packs are also compared by level, as the loader's normalisation sees them.
_LEVEL_REPORT_KINDS = frozenset({KIND_ASD})


@dataclass
class ValidationReport:
    """The reports of one ``speechpack validate`` command, one per pack, in the order given."""

    packs: list[PackReport]
    #: asd packs: source vs normalised level distributions, compared across the valid local asd packs
    #: (``loader.asd.levels.asd_level_report``), and that comparison as a table
    #: (``loader.asd.levels.format_level_table``); None when there are none.  The comparison is what the
    #: loader's normalisation makes of each pack, so validate_packs leaves them empty and the ``validate``
    #: command, which sits above packer/ and loader/, fills them in for ``level_report_paths()``
    #: (``loader.asd.levels.compare_validated_levels``).
    asd_levels: dict | None = None
    asd_levels_table: str | None = None

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.packs)

    def level_report_paths(self) -> list[str]:
        """The packs whose levels are compared: the valid local ones of a kind that has a level report (the
        comparison reads them through the loader, so object-store packs are left out)."""
        return [r.path for r in self.packs
                if r.ok and r.summary.get("kind") in _LEVEL_REPORT_KINDS and not is_remote(r.path)]

    def describe(self) -> str:
        errors = sum(len(p.errors) for p in self.packs)
        body = "\n".join(p.describe() for p in self.packs)
        verdict = "all packs valid" if self.ok else f"{errors} error(s) in {sum(not p.ok for p in self.packs)} pack(s)"
        if self.asd_levels_table is not None:
            body += "\nasd levels, source vs normalised (large differences in normalised rms between packs usually " \
                    "mean peak limiting, near-silence or malformed input):\n" + self.asd_levels_table
        return f"{body}\n{verdict}"

    def to_dict(self) -> dict:
        obj = {"ok": self.ok, "packs": [p.to_dict() for p in self.packs]}
        if self.asd_levels is not None:
            obj["asd_levels"] = self.asd_levels
        return obj

    def write_json(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as fp:
            dump_json(self.to_dict(), fp)


__all__ = ["Issue", "PackReport", "ValidationReport", "pack_summary"]
