"""The error hierarchy: bad input is a ``SpeechpackError``; a broken invariant of our own is an ``InternalError``.

The CLI turns every ``SpeechpackError`` into a one-line message and exit status 1. Validation never uses
``assert`` (``python -O`` strips it).
"""

from __future__ import annotations


class SpeechpackError(Exception):
    """Bad input or a bad pack: the user can fix it, and the message says where."""


class ManifestError(SpeechpackError):
    """An input list or manifest line is malformed (names the file, line and key)."""


class PackFormatError(SpeechpackError):
    """A pack on disk does not follow the format (names the pack, the file and the field)."""


class OptionError(SpeechpackError):
    """Options that do not go together (``--simulate`` with an input directory...): the CLI reports it as a usage
    error, exit status 2, like a bad flag."""


class BuildError(SpeechpackError):
    """A build could not publish a pack; ``problems`` lists every offending input."""

    def __init__(self, message: str, problems: list | None = None):
        super().__init__(message)
        self.problems = list(problems or [])


class NpyHeaderError(SpeechpackError):
    """An ``.npy`` file's header cannot be read (``schemas.npyfile.read_npy_header``): ``reason`` says why, in
    numpy's words, and the message names the file."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: unreadable .npy header ({reason})")
        self.path = path
        self.reason = reason


class PlanError(SpeechpackError):
    """An epoch plan or one of its random streams cannot be made as asked (bad rank, world size, epoch or seed)."""


class InternalError(RuntimeError):
    """A speechpack invariant broke: a bug, never the user's input."""
