"""Config keys declared once: a ``Key`` holds everything about one key, a ``KeyTable`` does everything with them.

Grain's ``options.py`` declares each option once, next to its default and its check; here a task's (or a stage's)
``dataset_args`` is one ``KeyTable`` of ``Key`` s, and what used to be written per key in four places follows from
that one line: ``KeyTable.parse`` (a config mapping: unknown keys refused, defaults filled, a config's other
spellings read, every value checked), ``KeyTable.check`` (the same checks, run again when the args dataclass is
built in code: ``KeyTable.args_class`` makes that dataclass from the table), ``KeyTable.markdown`` (the docs' key
table; a test keeps the docs equal to it) and ``KeyTable.fingerprint`` (what the resume fingerprint hashes).

A key's check is a small object (``Int``, ``Within``, ``Number``, ``Bool``, ``OneOf``, ``Probability``,
``Range``, ``Nullable``, ``Nested``, ``Then``; ``Parsed`` for a shape only a parser reads, ``Flat`` for a field
made of several of the parent's keys, ``Variant`` for a mapping whose ``type`` picks its table): called as ``check(value, where)`` it returns the value held (``1`` -> ``1.0`` for a probability) or
raises ``ConfigError`` naming ``where`` (the shared checks of ``loader.config_checks``, so messages read the same
for every task), and it says in words what it takes (the docs' type column), so a range is written once.  A check
must accept what it returns (a value held is checked again on construction).  ``Nested`` is a key whose value is
a mapping of its own table (TSE's ``filter_len_args: {min_num_seconds, max_num_seconds}``).

The fingerprint is explicit (MosaicML Streaming's ``state_dict`` lists its fields): every key says whether a plan
depends on it (``Key.fingerprint``):

- ``ALWAYS``: hashed with its value;
- ``WHEN_SET``: hashed only while truthy, so a key added after states were saved, with a falsy default, leaves
  their fingerprints as they were until it is set;
- ``NEVER``: it changes how batches are fetched, not which (worker counts, prefetch), so any setting resumes.

``KeyTable.fingerprint_version`` is the version of that list: 1 is hashed without its number (every state saved
before versions were declared); bumping it, on purpose, makes every older state of the table refuse to resume.

A tool whose recipes spell a key differently (WeSep, Omnilingual, MuVAP) names it in ``Key.dialects``;
``KeyTable.translate`` renames a recipe's keys before ``parse``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

from speechpack.schemas.documents import bounded_repr
from speechpack.loader.config_checks import (
    MAX_COUNT,
    ConfigError,
    check_choice,
    check_type,
    number,
    positive_int,
    probability,
    take_known,
    value_range,
)

#: ``Key.fingerprint`` roles (module docstring).
ALWAYS, WHEN_SET, NEVER = "always", "when_set", "never"
FINGERPRINT_ROLES = (ALWAYS, WHEN_SET, NEVER)
#: Where a ``fingerprint_version`` above 1 is hashed.
VERSION_FIELD = "fingerprint_version"


def _number(x: float) -> str:
    """A bound as the docs write it: ``2^40`` for large powers of two, ``0.5``, ``-5``."""
    if isinstance(x, int) and x >= 1024 and x & (x - 1) == 0:
        return f"2^{x.bit_length() - 1}"
    return f"{x:g}" if isinstance(x, float) else str(x)


def doc_value(value: Any) -> str:
    """A default as a config writes it: ``true``, ``null``, ``[-5, 5]``, ``0.5``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(doc_value(x) for x in value) + "]"
    return str(value)


# -- checks: value + where -> the value held, and what they take in words ---------------------------------------

@dataclass(frozen=True)
class Int:
    """An int (not a bool) in ``[lo, hi]`` (``config_checks.positive_int``)."""

    lo: int = 1
    hi: int = MAX_COUNT
    annotation = int

    def __call__(self, value: Any, where: str) -> int:
        return positive_int(value, where, self.lo, self.hi)

    @property
    def doc(self) -> str:
        return f"int in [{_number(self.lo)}, {_number(self.hi)}]"


@dataclass(frozen=True)
class Bool:
    """``true`` or ``false`` (no 0/1)."""

    annotation = bool
    doc = "bool"

    def __call__(self, value: Any, where: str) -> bool:
        return check_type(value, bool, where)


@dataclass(frozen=True)
class OneOf:
    """One of ``choices`` (a tuple of strings, in the order errors and docs list them)."""

    choices: tuple[str, ...]
    annotation = str

    def __call__(self, value: Any, where: str) -> str:
        return check_choice(value, self.choices, where)

    @property
    def doc(self) -> str:
        return ", ".join(self.choices)


@dataclass(frozen=True)
class Probability:
    """A number in ``[0, 1]``, held as a float."""

    annotation = float
    doc = "number in [0, 1]"

    def __call__(self, value: Any, where: str) -> float:
        return probability(value, where)


@dataclass(frozen=True)
class Range:
    """A ``[low, high]`` pair of finite numbers within ``[lo, hi]`` (in ``unit``), held as a tuple of floats."""

    lo: float
    hi: float
    unit: str = ""
    annotation = tuple[float, float]

    def __call__(self, value: Any, where: str) -> tuple[float, float]:
        return value_range(value, where, self.lo, self.hi)

    @property
    def doc(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return f"[low, high]{unit} within [{_number(self.lo)}, {_number(self.hi)}]"


@dataclass(frozen=True)
class Nullable:
    """``null`` (None), or what ``check`` takes."""

    check: Any

    def __call__(self, value: Any, where: str) -> Any:
        return None if value is None else self.check(value, where)

    @property
    def annotation(self) -> Any:
        return self.check.annotation | None

    @property
    def doc(self) -> str:
        return f"{self.check.doc}, or null"


@dataclass(frozen=True)
class Nested:
    """A mapping whose keys are ``table`` 's (null: every default), held as a dict of checked values; its keys are
    named ``key.sub`` in errors and docs, and fingerprinted by their own roles."""

    table: KeyTable
    annotation = dict
    doc = "mapping"

    def __call__(self, value: Any, where: str) -> dict:
        return self.table.parse(value, where)


@dataclass(frozen=True)
class Flat:
    """A field made of several keys of the parent mapping, not of a mapping of its own (TSE's ``mix``: the keys
    ``num_speakers``, ``mix_snr``, ``timeline``): ``table`` 's config keys are the parent's (taken, documented and
    translated with them), and ``parse(values, where, held)`` makes the field from their values, checking them
    (``table.check_config``) where they apply; ``held`` are the parent's keys checked before it.  Built in code,
    the field is held as given (its class checks itself)."""

    table: KeyTable
    parse: Callable[[dict, str, dict], Any]
    annotation: Any = Any
    doc = ""

    def __call__(self, value: Any, where: str) -> Any:
        return value


@dataclass(frozen=True)
class Variant:
    """A mapping whose ``tag`` key says which table its other keys are (TSE's ``batching``: ``type: static`` or
    ``type: budget``), held as that table's values with the tag.  The tables' keys are plain (no ``read``, no
    ``Flat``); the docs list each table's keys under the key, marked with their tag."""

    tag: str
    tables: Mapping[str, KeyTable]
    annotation = dict

    def __call__(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping with {self.tag}: {' or '.join(self.tables)}, got "
                              f"{type(value).__name__}")
        kind = check_choice(value.get(self.tag), tuple(self.tables), f"{where}.{self.tag}")
        table = self.tables[kind]
        values = take_known(value, where, {self.tag: None, **table.defaults()})
        del values[self.tag]
        return {self.tag: kind, **table.hold(table.check_config(values, where), where)}

    @property
    def doc(self) -> str:
        return f"mapping by `{self.tag}`"


@dataclass(frozen=True)
class Within:
    """An int (not a bool) in ``[lo, hi]`` (in ``unit``), refused as ``must be in [lo, hi] unit`` (TSE's samples
    and rates; ``Int`` says ``at least`` / ``at most``)."""

    lo: int
    hi: int
    unit: str = ""
    annotation = int

    def __call__(self, value: Any, where: str) -> int:
        check_type(value, int, where)
        if not self.lo <= value <= self.hi:
            raise ConfigError(f"{where}: must be in [{self.lo}, {self.hi}]{self.unit}, got {bounded_repr(value)}")
        return value

    @property
    def doc(self) -> str:
        return f"int in [{_number(self.lo)}, {_number(self.hi)}]{self.unit}"


@dataclass(frozen=True)
class Number:
    """A finite int or float in ``[lo, hi]``, held as a float (``config_checks.number``)."""

    lo: float
    hi: float
    unit: str = ""
    annotation = float

    def __call__(self, value: Any, where: str) -> float:
        return number(value, where, self.lo, self.hi)

    @property
    def doc(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return f"number in [{_number(self.lo)}, {_number(self.hi)}]{unit}"


@dataclass(frozen=True)
class Then:
    """``first``, then ``then`` on what it held: two ranges a key was always checked by, each with its own
    message (TSE's ``train_window``: at most 2^40, then at most 2^28 samples).  Documented as ``then``."""

    first: Any
    then: Any

    def __call__(self, value: Any, where: str) -> Any:
        return self.then(self.first(value, where), where)

    @property
    def annotation(self) -> Any:
        return self.then.annotation

    @property
    def doc(self) -> str:
        return self.then.doc


@dataclass(frozen=True)
class Parsed:
    """A value a structured parser reads (``parse(value, where)``: TSE's ``cues``, ``collate``): for a shape a
    table cannot express, the parser is the key's one check."""

    parse: Callable[[Any, str], Any]
    doc: str
    annotation: Any = Any

    def __call__(self, value: Any, where: str) -> Any:
        return self.parse(value, where)


@dataclass(frozen=True)
class Unchecked:
    """A value held as given: a field a parser made (its own class checks itself), or a config key that
    ``KeyTable.combine`` checks together with the keys it depends on."""

    doc: str
    annotation: Any = Any

    def __call__(self, value: Any, where: str) -> Any:
        return value


# -- declarations -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
    """One config key, declared once.

    ``check`` turns a value into the one held (raising ``ConfigError`` naming the key's path); ``doc`` is the docs'
    one line; ``default_doc`` how the default reads there when the plain value would mislead (a derived one);
    ``derive`` computes a held ``None`` from the other held values (``val_frame_budget``: 4 x ``frame_budget``);
    ``read`` maps a config's other spellings to the one ``check`` takes (``normalize: true``; config mappings only:
    an object built in code holds the canonical value); ``fingerprint`` its role (module docstring); ``dialects``
    the key's name in a tool's recipes where that tool spells it differently (``{"wesep": "..."}``).

    Where a task's args hold a config in another shape than the config writes it (TSE's ``filter_len_args``
    mapping held as two fields), a key says so: ``field=False``: a config key that is no field of its own (read
    by ``KeyTable.combine`` or a ``build``, or accepted and unused); ``build``: a field that no config key of its
    name gives, made from the held config values (its ``check`` is then the field's, run when the args are built
    in code, naming it ``path``); ``fingerprint_value``: the field as the fingerprint hashes it (an older
    spelling kept, so saved states still resume)."""

    name: str
    default: Any
    check: Any
    doc: str
    fingerprint: str = ALWAYS
    default_doc: str | None = None
    derive: Callable[[dict], Any] | None = None
    read: Callable[[Any, str], Any] | None = None
    dialects: Mapping[str, str] = field(default_factory=dict)
    field: bool = True
    field_check: Any = None
    build: Callable[[dict], Any] | None = None
    path: str | None = None
    fingerprint_value: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.fingerprint not in FINGERPRINT_ROLES:
            raise ValueError(f"key {self.name}: fingerprint must be one of {', '.join(FINGERPRINT_ROLES)}")
        if self.build is not None and not self.field:
            raise ValueError(f"key {self.name}: a built key is a field")

    @property
    def in_config(self) -> bool:
        """Whether a config writes this key (a built field and a ``Flat`` one are none)."""
        return self.build is None and not isinstance(self.check, Flat)


@dataclass(frozen=True)
class KeyTable:
    """The keys of one mapping, in order (the order of checks, fields and doc rows), and what spans several keys:
    ``relate(held, where)``, run on the fields after the per-key checks, raises ``ConfigError`` where two values
    contradict; ``combine(held, where)``, run on a config's held values before the fields are made (``parse``
    only), checks what spans keys a config writes and returns the held values with those it resolved (TSE's
    ``batching`` and ``batch_size``); ``relate_built``, where given, replaces ``relate`` for args built in code
    (a config's values were related key by key, by its nested tables, with the messages a config reads)."""

    keys: tuple[Key, ...]
    relate: Callable[[dict, str], None] | None = None
    fingerprint_version: int = 1
    combine: Callable[[dict, str], dict] | None = None
    relate_built: Callable[[dict, str], None] | None = None

    def __post_init__(self) -> None:
        for kind, names in (("keys", [k.name for k in self.config_keys]),
                            ("fields", [k.name for k in self.field_keys])):
            if len(set(names)) != len(names):
                raise ValueError(f"{kind} declared twice: {sorted({n for n in names if names.count(n) > 1})}")

    @property
    def config_keys(self) -> tuple[Key, ...]:
        """The keys a config writes, in order (a ``Flat`` field's in its place)."""
        out: list[Key] = []
        for k in self.keys:
            if isinstance(k.check, Flat):
                out.extend(k.check.table.config_keys)
            elif k.in_config:
                out.append(k)
        return tuple(out)

    @property
    def field_keys(self) -> tuple[Key, ...]:
        """The fields of the args, in order (``args_class``)."""
        return tuple(k for k in self.keys if k.field)

    def defaults(self) -> dict:
        """Every config key's default, unchecked (what an absent key means)."""
        return {k.name: k.default for k in self.config_keys}

    def parse(self, obj: Any, where: str) -> dict:
        """A config mapping (or None) -> every field's held value; unknown keys, wrong types and out-of-range
        values raise ``ConfigError`` naming ``where.key``."""
        values = take_known(obj, where, self.defaults())
        for k in self.config_keys:
            if k.read is not None:
                values[k.name] = k.read(values[k.name], f"{where}.{k.name}")
        held: dict = {}
        for k in self.keys:  # in order: a Flat field sees the keys checked before it
            if isinstance(k.check, Flat):
                held[k.name] = k.check.parse({c.name: values[c.name] for c in k.check.table.config_keys}, where,
                                             held)
            elif k.in_config:
                held[k.name] = k.check(values[k.name], f"{where}.{k.name}")
        return self.hold(held, where)

    def check_config(self, values: Mapping[str, Any], where: str) -> dict:
        """A config's ``values`` of this table's config keys (taken, read), each checked: the held values."""
        return {k.name: k.check(values[k.name], f"{where}.{k.name}") for k in self.config_keys}

    def hold(self, held: dict, where: str) -> dict:
        """A config's held values -> every field's: ``combine``, the built fields, ``relate``, derived defaults."""
        if self.combine is not None:
            held = self.combine(held, where)
        fields_held = {k.name: held[k.name] if k.build is None else k.build(held) for k in self.field_keys}
        return self._finish(fields_held, where, self.relate)

    def check(self, values: Mapping[str, Any], where: str) -> dict:
        """``values`` (one per field) checked field by field, then across fields, derived defaults filled: the held
        values (an args object built in code)."""
        held = {k.name: (k.field_check or k.check)(values[k.name], f"{where}.{k.path or k.name}")
                for k in self.field_keys}
        return self._finish(held, where, self.relate_built or self.relate)

    def _finish(self, held: dict, where: str, relate: Callable[[dict, str], None] | None) -> dict:
        if relate is not None:
            relate(held, where)
        for k in self.field_keys:
            if k.derive is not None and held[k.name] is None:
                held[k.name] = k.derive(held)
        return held

    def fingerprint(self, values: Mapping[str, Any]) -> dict:
        """The held ``values`` (one per field) the resume fingerprint hashes: each field by its role, as its
        ``fingerprint_value`` reads it, nested tables by theirs, the version when above 1."""
        out = {}
        for k in self.field_keys:
            value = values[k.name]
            if k.fingerprint_value is not None:
                value = k.fingerprint_value(value)
            if k.fingerprint == NEVER or (k.fingerprint == WHEN_SET and not value):
                continue
            if isinstance(k.check, Nested) and isinstance(value, Mapping):
                value = k.check.table.fingerprint(value)
            out[k.name] = value
        if self.fingerprint_version > 1:
            out[VERSION_FIELD] = self.fingerprint_version
        return out

    def translate(self, obj: Any, dialect: str, where: str) -> Any:
        """``obj`` with ``dialect`` 's names of keys replaced by ours; a key given in both spellings is an error.
        Anything but a mapping is left for ``parse`` to refuse."""
        if not isinstance(obj, dict):
            return obj
        ours = {k.dialects[dialect]: k.name for k in self.config_keys if dialect in k.dialects}
        out = dict(obj)
        for theirs, name in ours.items():
            if theirs in out:
                if name in out:
                    raise ConfigError(f"{where}: {theirs} ({dialect}) and {name} are one key: give one")
                out[name] = out.pop(theirs)
        return out

    def rows(self, prefix: str = "") -> list[tuple[Key, str]]:
        """``(key, dotted name)`` of every config key, a nested table's keys after their parent."""
        out = []
        for k in self.keys:
            if isinstance(k.check, Flat):
                out.extend(k.check.table.rows(prefix))
                continue
            if not k.in_config:
                continue
            out.append((k, prefix + k.name))
            nested = k.check
            while isinstance(nested, (Nullable, Then)):
                nested = nested.check if isinstance(nested, Nullable) else nested.then
            if isinstance(nested, Nested):
                out.extend(nested.table.rows(f"{prefix}{k.name}."))
            elif isinstance(nested, Variant):
                for kind, table in nested.tables.items():
                    out.extend((replace(sub, doc=f"`{nested.tag}: {kind}`: {sub.doc}"), name)
                               for sub, name in table.rows(f"{prefix}{k.name}."))
        return out

    def markdown(self) -> str:
        """The docs' key table: key, type, default, meaning, and a column per dialect that renames a key."""
        rows = self.rows()
        dialects = sorted({d for k, _ in rows for d in k.dialects})
        head = ["key", "type", "default", "meaning", *(f"{d} name" for d in dialects)]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for k, name in rows:
            default = k.default_doc if k.default_doc is not None else doc_value(k.default)
            cells = [f"`{name}`", k.check.doc, default, k.doc,
                     *(f"`{k.dialects[d]}`" if d in k.dialects else "" for d in dialects)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def held(self, cls: type, values: Mapping[str, Any]) -> Any:
        """An instance of ``cls`` (an ``args_class``) holding ``values`` as ``parse`` returned them, without checking
        them again: once per config, named by the config's path (a derived value is never a given one)."""
        if set(values) != {k.name for k in self.field_keys}:
            raise ValueError(f"{cls.__name__}: values for {sorted(values)}, fields {[k.name for k in self.field_keys]}")
        obj = object.__new__(cls)
        for name, value in values.items():
            object.__setattr__(obj, name, value)
        return obj

    def args_class(self, where: str = "dataset_args") -> Callable[[type], type]:
        """A class decorator: the class becomes a frozen dataclass with one field per key (its default), checked on
        construction as ``parse`` checks a config (errors under ``where``), holding the checked values."""
        table = self

        def __post_init__(obj: Any) -> None:
            held = table.check({f.name: getattr(obj, f.name) for f in fields(obj)}, where)
            for name, value in held.items():
                object.__setattr__(obj, name, value)

        def decorate(cls: type) -> type:
            cls.__annotations__ = {k.name: (k.field_check or k.check).annotation for k in table.field_keys}
            for k in table.field_keys:
                setattr(cls, k.name, k.default)
            cls.__post_init__ = __post_init__
            return dataclass(frozen=True)(cls)

        return decorate


#: Most shards one shard window holds (beyond any pack's shard count: a window of every shard is the same order).
MAX_SHARD_WINDOW = 1 << 30
#: ``dataset_args.shard_window``: the shard-window epoch order (``loader.cache.shard_order``), a plan option every
#: task's table declares with this one key.  The order depends on the window and the packs' contents only, never
#: on where a pack lies or on ``cache.limit``; hashed only while set, so states saved before it still resume.
SHARD_WINDOW = Key("shard_window", None, Nullable(Int(hi=MAX_SHARD_WINDOW)), "shuffle within windows of this many "
                   "shards (the shards shuffled, then the items within each window; batches kept in that order) "
                   "instead of the whole epoch: each byte fetched about once per epoch from a store with a cache "
                   "of a window's shards ([Shard windows](integrations.md#shard-windows)); unweighted epochs only",
                   default_doc="none (whole-epoch shuffle)", fingerprint=WHEN_SET)


__all__ = ["ALWAYS", "Bool", "FINGERPRINT_ROLES", "Flat", "Int", "Key", "KeyTable", "NEVER", "Nested", "Nullable", "Number",
           "OneOf", "Parsed", "Probability", "Range", "SHARD_WINDOW", "Then", "Unchecked", "VERSION_FIELD", "Variant", "WHEN_SET", "Within",
           "doc_value"]
