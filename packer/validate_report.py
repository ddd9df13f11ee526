"""``speechpack validate PACK...``: every pack checked, a directory (``packer.validate``) or an object-store URL
(``packer.validate_remote``), and the valid asd packs compared by level; the one report the command prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from packer.remote import is_remote
from packer.validate import PackReport, validate_pack
from packer.writer import dump_json
from schemas.constants import KIND_ASD
from schemas.errors import SpeechpackError

#: Kinds whose valid packs are also compared by level, as the loader's normalisation sees them.
_LEVEL_REPORT_KINDS = frozenset({KIND_ASD})


@dataclass
class ValidationReport:
    packs: list[PackReport]
    #: asd packs: source vs normalised level distributions, compared across the valid asd packs
    #: (``loader.asd.levels.asd_level_report``); None when there are none.
    asd_levels: dict | None = None

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.packs)

    def describe(self) -> str:
        errors = sum(len(p.errors) for p in self.packs)
        body = "\n".join(p.describe() for p in self.packs)
        verdict = "all packs valid" if self.ok else f"{errors} error(s) in {sum(not p.ok for p in self.packs)} pack(s)"
        if self.asd_levels is not None:
            from loader.asd.levels import format_level_table

            body += "\nasd levels, source vs normalised (large differences in normalised rms between packs usually " \
                    "mean peak limiting, near-silence or malformed input):\n" + format_level_table(self.asd_levels)
        return f"{body}\n{verdict}"

    def to_dict(self) -> dict:
        obj = {"ok": self.ok, "packs": [p.to_dict() for p in self.packs]}
        if self.asd_levels is not None:
            obj["asd_levels"] = self.asd_levels
        return obj

    def write_json(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as fp:
            dump_json(self.to_dict(), fp)

    def plot_levels(self, path: str) -> None:
        """``validate --plot``: the asd packs' source vs normalised levels to a PNG (``speechpack[plot]``)."""
        if self.asd_levels is None:
            raise SpeechpackError("--plot compares asd packs' levels; no valid asd pack was given")
        from loader.asd.levels import plot_levels

        plot_levels(self.asd_levels, path)


def validate_packs(paths: list[str], check_hashes: bool = True, endpoint_url: str | None = None) -> ValidationReport:
    """Validate every pack (a directory, or an object-store URL: ``packer.validate_remote``, nothing copied to
    disk); asd packs that pass are also compared by level (what the loader's normalisation makes of each; local
    packs only, since the comparison reads them through the loader)."""
    reports = []
    for path in paths:
        if is_remote(path):
            from packer.validate_remote import validate_remote_pack  # needs fsspec: only for URLs

            reports.append(validate_remote_pack(path, check_hashes, endpoint_url))
        else:
            reports.append(validate_pack(path, check_hashes))
    asd = [r.path for r in reports if r.ok and r.summary.get("kind") in _LEVEL_REPORT_KINDS and not is_remote(r.path)]
    levels = None
    if asd:
        from loader.asd.levels import asd_level_report

        levels = asd_level_report(asd)
    return ValidationReport(reports, asd_levels=levels)


__all__ = ["ValidationReport", "validate_packs"]
