"""``speechpack validate PACK...``: every pack checked, a directory (``packer.validate.pack``) or an object-store URL
(``packer.validate.remote``); the one report the command prints (the ``validate`` command adds the asd level
comparison, which reads packs through the loader).
"""

from __future__ import annotations

from dataclasses import dataclass

from speechpack.packer.copy.remote import is_remote
from speechpack.packer.validate.pack import PackReport, validate_pack
from speechpack.packer.files import dump_json
from speechpack.schemas.constants import KIND_ASD

#: Kinds whose valid packs are also compared by level, as the loader's normalisation sees them.
_LEVEL_REPORT_KINDS = frozenset({KIND_ASD})


@dataclass
class ValidationReport:
    packs: list[PackReport]
    #: asd packs: source vs normalised level distributions, compared across the valid local asd packs
    #: (``loader.asd.levels.asd_level_report``), and that comparison as a table
    #: (``loader.asd.levels.format_level_table``); None when there are none.  The comparison is what the
    #: loader's normalisation makes of each pack, so validate_packs leaves them empty and the ``validate``
    #: command, which sits above packer/ and loader/, fills them in for ``level_report_paths()``.
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


def validate_packs(paths: list[str], check_hashes: bool = True, endpoint_url: str | None = None) -> ValidationReport:
    """Validate every pack (a directory, or an object-store URL: ``packer.validate.remote``, nothing copied to
    disk).  The asd level comparison is left to the caller (see ``ValidationReport``)."""
    reports = []
    for path in paths:
        if is_remote(path):
            from speechpack.packer.validate.remote import validate_remote_pack  # needs fsspec: only for URLs

            reports.append(validate_remote_pack(path, check_hashes, endpoint_url))
        else:
            reports.append(validate_pack(path, check_hashes))
    return ValidationReport(reports)


__all__ = ["ValidationReport", "validate_packs"]
