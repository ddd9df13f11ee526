"""A problem of one input line: where it is (line, key, file) and why it was refused.

Every reader of an input list (WeSep lists and shards, ASR JSON lines and parquet, Lhotse manifests, ASD corpora,
MuVAP packs, audio banks) reports what it cannot pack as ``LineProblem``s, and the build records them
(``skipped.json``, build plans, shard receipts): one type, so ``--skip-bad``, the failed build's message and the
records read the same whatever the input.  It is a contract of its own, not part of any one input's format.
"""

from __future__ import annotations

from dataclasses import dataclass

from speechpack.schemas.names import encoding_problem


@dataclass(frozen=True)
class LineProblem:
    """One offending input line: where it is and why it was refused.

    A key or path that UTF-8 cannot encode (a lone surrogate, or a file name that is not UTF-8, which Python
    decodes to surrogates) is kept with those characters escaped (``\\udcff``), so the problem can always be
    printed and recorded in ``skipped.json``."""

    line: int
    key: str | None
    path: str | None
    reason: str

    def __post_init__(self) -> None:
        for name in ("key", "path", "reason"):
            value = getattr(self, name)
            if isinstance(value, str) and encoding_problem(value) is not None:
                object.__setattr__(self, name, value.encode("utf-8", "backslashreplace").decode("utf-8"))

    def to_dict(self) -> dict:
        return {"line": self.line, "key": self.key, "path": self.path, "reason": self.reason}

    @classmethod
    def from_dict(cls, obj: dict) -> "LineProblem":
        """A problem back from its ``to_dict()`` form (build plans and shard receipts store them as JSON)."""
        return cls(line=obj["line"], key=obj["key"], path=obj["path"], reason=obj["reason"])

    def __str__(self) -> str:
        """The problem as a failed build lists it under its message: ``line 3: key 'a', file x.wav: reason`` (a
        line that is not JSON has no key to name)."""
        named = ", ".join(([f"key {self.key!r}"] if self.key is not None else [])
                          + ([f"file {self.path}"] if self.path else []))
        return f"line {self.line}: " + (f"{named}: " if named else "") + self.reason

    def describe(self, list_path: str) -> str:
        where = f"{list_path}:{self.line}"
        if self.key is not None:
            where += f" key {self.key!r}"
        if self.path is not None:
            where += f" file {self.path}"
        return f"{where}: {self.reason}"


__all__ = ["LineProblem"]
