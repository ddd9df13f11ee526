"""Command-line options as plain data: what an input family (or a command) accepts, declared without click.

An adapter says which options its ``speechpack build`` subcommand takes (``OptionSpec`` rows in
``packer.adapters.registry``); ``cli.py`` alone turns each row into a click parameter.  Keeping the declarations
free of click means the library can be imported, tested and reused (another front end, a config file) without the
command-line toolkit, and the one place that knows click is the command line itself.

The attribute names follow click's (``is_flag``, ``show_default``, ``metavar``...) so a row reads like the option
it becomes.  The value types are small frozen dataclasses (``Path``, ``Choice``, ``Number``, ``Parsed``) rather
than click's parameter types.  This module imports nothing heavy: the CLI reads it before it knows which command
runs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

from speechpack.schemas import units


@dataclass(frozen=True)
class Path:
    """A file or directory path; ``exists`` makes the command refuse a path that is not there."""

    file_okay: bool = True
    dir_okay: bool = True
    exists: bool = False


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of words."""

    choices: tuple[str, ...]


@dataclass(frozen=True)
class Number:
    """An integer or a float, bounded below and/or above (``None``: unbounded on that side)."""

    integer: bool
    low: float | None = None
    high: float | None = None
    low_open: bool = False

    @classmethod
    def within(cls, limit: units.Range) -> "Number":
        """The option's range from ``schemas.units`` (the library checks it again when the options are made)."""
        if limit.integer:
            return cls(True, int(limit.low), int(limit.high))
        return cls(False, limit.low, limit.high, low_open=limit.low_open)


@dataclass(frozen=True)
class Parsed:
    """Text the library reads itself (a byte size, an ``i/n`` slice): ``parse`` returns the value or raises
    ``SpeechpackError``, whose message becomes the usage error; ``name`` is what the help shows for the value."""

    name: str
    parse: Callable[[Any], Any]


ValueType = Path | Choice | Number | Parsed | None


@dataclass(frozen=True)
class OptionSpec:
    """One option (or, with ``positional``, one argument) of a command.

    ``flags`` are its spellings (``("--list",)``, ``("--progress/--no-progress",)``); ``name`` is the Python name
    the value is passed under (the build function's argument), by default the first long flag with dashes as
    underscores.  ``arity`` > 1 takes that many values of ``type`` (``--rt60 LO HI``).
    """

    flags: tuple[str, ...]
    name: str = ""
    type: ValueType = None
    arity: int = 1
    default: Any = None
    help: str | None = None
    required: bool = False
    multiple: bool = False
    is_flag: bool = False
    show_default: bool = False
    metavar: str | None = None
    positional: bool = False

    def __post_init__(self):
        if not self.name:
            long = next(flag for flag in self.flags if flag.startswith("--"))
            object.__setattr__(self, "name", long[2:].split("/")[0].replace("-", "_"))

    def given(self) -> dict[str, Any]:
        """The attributes this row sets away from their defaults, other than its spellings, name and value type:
        what a front end passes on (so that it infers the rest as for an option written by hand, e.g.
        ``--progress/--no-progress`` is a flag)."""
        skip = ("flags", "name", "type", "arity", "positional")
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in skip and getattr(self, f.name) != f.default}


def option(*decls: str, **attrs) -> OptionSpec:
    """``option("--list", "list_path", required=True)``: flags first, then the Python name if it differs from the
    first long flag (click's way of spelling an option, so rows read as the option they become)."""
    flags = tuple(decl for decl in decls if decl.startswith("-"))
    names = [decl for decl in decls if not decl.startswith("-")]
    return OptionSpec(flags=flags, name=names[0] if names else "", **attrs)


def argument(name: str, required: bool = True, **attrs) -> OptionSpec:
    """A positional argument called ``name`` (required unless said otherwise, as in click)."""
    return OptionSpec(flags=(), name=name, positional=True, required=required, **attrs)


__all__ = ["Choice", "Number", "OptionSpec", "Parsed", "Path", "ValueType", "argument", "option"]
