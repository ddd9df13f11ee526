"""Which utterances make up a split: ``train_split``/``valid_split`` and ``partition_filters``, as Omnilingual reads
them from its parquet partitions, applied to the loaded ``asr`` packs.

A pack's split is the one it was built with (``speechpack build parquet --split S`` records ``S`` in
``dataset.json``'s provenance), or its ``packs`` entry's ``split:`` when the pack records none (JSON-lines packs).
A split name is resolved the way Omnilingual's ``MixtureParquetStorage`` allows:

- a split some pack holds (``train``, ``dev``, ``dev_clean`` ...) selects those packs;
- otherwise ``<split>_<corpus>`` (``train_librispeech``) selects the packs of ``<split>`` and, in them, only the
  utterances of corpus ``<corpus>``.

``partition_filters`` (below) then keeps the utterances whose corpus and language it accepts, in a ``train``
loader only: Omnilingual applies them to the training stream alone, "to be able to validate on held-out corpora"
(``MixtureParquetStorage.fix_partition_filters``), so ``val`` and ``test`` read their whole split.  Utterances
outside the selection are not part of the split: they are neither batched nor counted as filtered.  With neither
split nor filter every utterance of every pack is selected, as before.

**Partition filters.**  ``partition_filters``: the pyarrow expressions of fairseq2's ``FragmentStreamingConfig``,
read without ``eval``.

fairseq2 takes ``partition_filters`` as Python source text and evaluates it to a ``pyarrow.compute.Expression``
over a parquet dataset's partition columns.  Evaluating config text would run whatever it says, so speechpack
parses the forms Omnilingual's recipes write with a small tokenizer and a recursive-descent parser, and evaluates
them on the pack's ``corpus`` and ``language`` columns.  The grammar (``pc`` may also be written
``pa.compute``, ``pyarrow.compute`` or ``ds``; strings in single or double quotes)::

    expr     := term ("|" term)*
    term     := factor ("&" factor)*
    factor   := "(" expr ")" | isin | equal | field "==" STRING | STRING "==" field
              | "pc.and_(" expr "," expr ")" | "pc.or_(" expr "," expr ")"
    isin     := "pc.is_in(" field "," ["value_set="] array ")"
    equal    := "pc.equal(" field "," STRING ")"
    field    := "pc.field(" STRING ")"          the column: corpus or language
    array    := "pa.array(" list ")" | list
    list     := "[" STRING ("," STRING)* [","] "]"

Anything else (another function, a number, a column the pack does not have, negation) is refused with a
``ConfigError`` naming the character where parsing stopped.  A list of such strings means all of them (AND).

Size is bounded, so any text is answered in bounded time and stack: at most ``MAX_FILTER_CHARS`` characters (all
strings of a list together; a filter over every language of a corpus is a few kilobytes) and ``MAX_NESTING``
levels of parentheses and ``pc.and_``/``pc.or_`` calls.  The tokenizer makes one pass over the text; a chain of
``|`` (or ``&``) becomes one node holding its terms, evaluated in a loop (a left-deep tree of 1,200 terms would
recurse 1,200 levels deep), so recursion depth grows only with the nesting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from speechpack.loader.config_checks import ConfigError
from speechpack.schemas.documents import bounded_repr


#: Loader state -> the ``dataset_args`` key naming its split (Omnilingual's dataset block has these two).
SPLIT_KEYS = {"train": "train_split", "val": "valid_split"}


@dataclass(frozen=True)
class Selection:
    """The packs a split reads (one flag per loaded pack) and the row filter inside them."""

    packs: tuple[bool, ...]
    corpus: str | None = None
    partition: object = None

    def mask(self, corpus: np.ndarray, language: np.ndarray) -> np.ndarray:
        """Rows of the selected packs that the corpus filter and ``partition_filters`` keep."""
        keep = np.ones(len(corpus), dtype=bool)
        if self.corpus is not None:
            keep &= corpus == self.corpus
        if self.partition is not None:
            keep &= self.partition.mask({"corpus": corpus, "language": language})
        return keep


def pack_split(source, pack) -> str | None:
    """The split ``pack`` holds: the one it was built with, else its ``packs`` entry's ``split:``."""
    recorded = (pack.manifest.provenance.get("options") or {}).get("split")
    if recorded is not None and source.split is not None and source.split != recorded:
        raise ConfigError(f"packs entry {source.path}: split {source.split!r}, but the pack was built with "
                          f"--split {recorded!r}")
    return recorded if recorded is not None else source.split


def select(args, state: str, sources, packs) -> Selection:
    """The selection of ``state`` (module docstring) for the ``packs`` opened from the config's ``sources``."""
    partition = parse_partition_filters(args.partition_filters, "dataset_args.partition_filters")  # checked always
    if state != "train":  # the training stream's filter only (module docstring)
        partition = None
    key = SPLIT_KEYS.get(state)
    name = getattr(args, key) if key is not None else None
    if name is None:
        if state not in SPLIT_KEYS and (args.train_split is not None or args.valid_split is not None):
            raise ConfigError(f"state {state!r}: the config names train_split and valid_split only; build a {state} "
                              f"loader from a config whose valid_split is the {state} split")
        return Selection(packs=(True,) * len(packs), partition=partition)
    splits = [pack_split(source, pack) for source, pack in zip(sources, packs)]
    unknown = [source.path for source, split in zip(sources, splits) if split is None]
    if unknown:
        raise ConfigError(f"dataset_args.{key}: pack {unknown[0]} records no split (build it with --split, or give "
                          f"its packs entry split: NAME)")
    corpus = None
    if name not in splits:
        base, _, corpus = name.partition("_")
        if not corpus or base not in splits:
            raise ConfigError(f"dataset_args.{key}: no pack holds split {name!r} (the packs hold "
                              f"{', '.join(sorted(set(splits)))}; a corpus filter is written <split>_<corpus>)")
        name = base
    return Selection(packs=tuple(split == name for split in splits), corpus=corpus or None, partition=partition)


#: Partition columns a filter may test: the pack attributes of the same name (LangASRSchema's names).
COLUMNS = ("corpus", "language")
#: Spellings of the ``pyarrow.compute`` module (``ds``: ``pyarrow.dataset`` re-exports ``field``).
_COMPUTE = {"pc", "ds", "pa.compute", "pyarrow.compute", "pa.dataset", "pyarrow.dataset"}
_ARRAY = {"pa.array", "pyarrow.array"}
_TOKEN = re.compile(r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<name>[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*)|(?P<op>==|[()\[\],&|=]))""")
#: Longest filter text (characters, over all strings of a list).
MAX_FILTER_CHARS = 1 << 18
#: Deepest nesting of parentheses and ``pc.and_``/``pc.or_`` calls.
MAX_NESTING = 64
_SPACE = re.compile(r"\s*")
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t"}


@dataclass(frozen=True)
class IsIn:
    """``column`` is one of ``values``."""

    column: str
    values: tuple[str, ...]

    def mask(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        return np.isin(columns[self.column], np.asarray(self.values, dtype=str))


@dataclass(frozen=True)
class Both:
    """Every one of ``parts`` holds (``a & b & c``: one node, evaluated in a loop)."""

    parts: tuple

    def mask(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        result = self.parts[0].mask(columns)
        for part in self.parts[1:]:
            result &= part.mask(columns)
        return result


@dataclass(frozen=True)
class Either:
    """Any one of ``parts`` holds (``a | b | c``)."""

    parts: tuple

    def mask(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        result = self.parts[0].mask(columns)
        for part in self.parts[1:]:
            result |= part.mask(columns)
        return result


def _joined(kind: type, parts: list):
    """One ``Both``/``Either`` node over ``parts`` (a part of the same kind is spliced in), or the single part."""
    flat = []
    for part in parts:
        flat.extend(part.parts if isinstance(part, kind) else (part,))
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


def _unquote(token: str) -> str:
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


class _Parser:
    """Recursive descent over the tokens of one expression (module docstring's grammar)."""

    def __init__(self, text: str, where: str):
        self.text, self.where = text, where
        self.tokens: list[tuple[str, str, int]] = []
        self.depth = 0
        pos, end = 0, len(text.rstrip())
        while pos < end:  # one pass: each match starts where the last ended
            match = _TOKEN.match(text, pos)
            if match is None:
                self.fail(_SPACE.match(text, pos).end(), "a name, a quoted string or one of ( ) [ ] , & | == =")
            kind = match.lastgroup
            self.tokens.append((kind, match.group(kind), match.start(kind)))
            pos = match.end()
        self.i = 0

    def fail(self, pos: int, expected: str):
        shown = self.text[pos:pos + 20] or "the end"
        raise ConfigError(f"{self.where}: cannot read {bounded_repr(self.text)} at character {pos + 1} ({shown!r}): "
                          f"expected {expected}; speechpack reads pc.is_in/pc.equal/== on pc.field('corpus' or 'language'), "
                          f"joined by & and |, and never evaluates the text")

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "", len(self.text))

    def take(self, kind: str, value: str | None = None, expected: str | None = None) -> str:
        token_kind, token, pos = self.peek()
        if token_kind != kind or (value is not None and token != value):
            self.fail(pos, expected or repr(value or kind))
        self.i += 1
        return token

    def parse(self):
        node = self.expr()
        if self.i != len(self.tokens):
            self.fail(self.peek()[2], "& or | or the end")
        return node

    def expr(self):
        terms = [self.term()]
        while self.peek()[:2] == ("op", "|"):
            self.i += 1
            terms.append(self.term())
        return _joined(Either, terms)

    def term(self):
        factors = [self.factor()]
        while self.peek()[:2] == ("op", "&"):
            self.i += 1
            factors.append(self.factor())
        return _joined(Both, factors)

    def nested(self, pos: int):
        """One level deeper (parentheses, ``pc.and_``/``pc.or_``); refused past ``MAX_NESTING``."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ConfigError(f"{self.where}: nested more than {MAX_NESTING} levels deep at character {pos + 1} "
                              f"(parentheses and pc.and_/pc.or_ calls)")

    def factor(self):
        kind, token, pos = self.peek()
        if (kind, token) == ("op", "("):
            self.i += 1
            self.nested(pos)
            node = self.expr()
            self.take("op", ")")
            self.depth -= 1
            return node
        if kind == "string":
            self.i += 1
            value = _unquote(token)
            self.take("op", "==")
            return IsIn(self.field(), (value,))
        if kind != "name":
            self.fail(pos, "a filter")
        module, _, function = token.rpartition(".")
        if module not in _COMPUTE:
            self.fail(pos, "pc.is_in, pc.equal, pc.field, pc.and_ or pc.or_")
        if function == "field":
            column = self.field()
            self.take("op", "==", "== after pc.field(...)")
            return IsIn(column, (_unquote(self.take("string", expected="a string")),))
        if function not in ("is_in", "equal", "and_", "or_"):
            self.fail(pos, "pc.is_in, pc.equal, pc.field, pc.and_ or pc.or_")
        self.i += 1
        self.take("op", "(")
        if function in ("and_", "or_"):
            self.nested(pos)
            left = self.expr()
            self.take("op", ",")
            right = self.expr()
            self.take("op", ")")
            self.depth -= 1
            return _joined(Both if function == "and_" else Either, [left, right])
        column = self.field()
        self.take("op", ",")
        if function == "equal":
            values = (_unquote(self.take("string", expected="a string")),)
        else:
            if self.peek()[:2] == ("name", "value_set"):
                self.i += 1
                self.take("op", "=")
            values = self.array()
        self.take("op", ")")
        return IsIn(column, values)

    def field(self) -> str:
        kind, token, pos = self.peek()
        if kind != "name" or token.rpartition(".")[0] not in _COMPUTE or token.rpartition(".")[2] != "field":
            self.fail(pos, "pc.field(...)")
        self.i += 1
        self.take("op", "(")
        _, _, where = self.peek()
        column = _unquote(self.take("string", expected="a column name in quotes"))
        if column not in COLUMNS:
            raise ConfigError(f"{self.where}: column {column!r} (character {where + 1}) is not a partition column "
                              f"of an asr pack ({', '.join(COLUMNS)}); the split is chosen by train_split/valid_split")
        self.take("op", ")")
        return column

    def array(self) -> tuple[str, ...]:
        wrapped = self.peek()[0] == "name"
        if wrapped:
            if self.peek()[1] not in _ARRAY:
                self.fail(self.peek()[2], "pa.array([...]) or a list of strings")
            self.i += 1
            self.take("op", "(")
        self.take("op", "[", "a list of strings")
        values = []
        while self.peek()[:2] != ("op", "]"):
            values.append(_unquote(self.take("string", expected="a string")))
            if self.peek()[:2] != ("op", "]"):
                self.take("op", ",", "',' or ']'")
        self.i += 1
        if wrapped:
            self.take("op", ")")
        return tuple(values)


def parse_partition_filters(value, where: str):
    """The filter ``value`` (a string, or a list of strings all of which must hold: a config's list, or the tuple
    ``AsrArgs`` stores it as) as a tree with ``mask``; ``None`` for no filter."""
    if value is None:
        return None
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
        raise ConfigError(f"{where}: expected a pyarrow filter expression (text) or a list of them, got "
                          f"{bounded_repr(value)}")
    size = sum(len(text) for text in texts)
    if size > MAX_FILTER_CHARS:
        raise ConfigError(f"{where}: {size} characters of filter text, more than the {MAX_FILTER_CHARS} read (a "
                          f"filter names a few columns and values; list values with pc.is_in)")
    nodes = [_Parser(text, where if len(texts) == 1 else f"{where}[{i}]").parse() for i, text in enumerate(texts)]
    return _joined(Both, nodes)


__all__ = ["COLUMNS", "MAX_FILTER_CHARS", "MAX_NESTING", "SPLIT_KEYS", "Both", "Either", "IsIn", "Selection",
           "pack_split", "parse_partition_filters", "select"]
