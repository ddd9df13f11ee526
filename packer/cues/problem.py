"""What a cue problem says: the cue, the lookup key, the file, and why (and the list line, when one needs it).

Cue problems are reported together with the list's bad lines in one ``BuildError``; unlike bad lines they are never
skipped (``--skip-bad`` is about list lines), because a cue bank with a hole would fail later, in training.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CueProblem:
    cue: str | None  # None: cues.yaml itself, or the speaker labels
    key: str | None  # the lookup key (or speaker) concerned
    path: str | None  # the file at fault: cues.yaml, a resource JSON, or a file a resource points to
    reason: str
    line: int | None = None  # a list line that needs the key

    def __str__(self) -> str:
        parts = [f"cue {self.cue!r}" if self.cue is not None else "cues"]
        if self.key is not None:
            parts.append(f"key {self.key!r}")
        if self.path is not None:
            parts.append(f"file {self.path}")
        if self.line is not None:
            parts.append(f"list line {self.line}")
        return f"{', '.join(parts)}: {self.reason}"

    def to_dict(self) -> dict:
        return {"cue": self.cue, "key": self.key, "path": self.path, "reason": self.reason, "line": self.line}


class CueInputError(Exception):
    """A resource entry or the file it points to cannot be used; the message is the reason (the caller adds cue,
    key and path)."""
