"""Reading YAML documents (recipes and loader configs, ``cues.yaml``) from files nobody vouches for: PyYAML's safe
loader (plain data only, never a Python object), bounded so that every document is answered quickly, in bounded
memory, with a value or one ``DocumentError`` naming the file, the line and the key (``schemas.documents``).

Bounds, enforced while the document is composed, before any value is built:

- **alias expansion**: an alias (``*name``) stands for the whole node it names, and the loader shares that node,
  so a short document can stand for an enormous value: nine levels of ten aliases each stand for a billion items
  (the "billion laughs" construction, https://en.wikipedia.org/wiki/Billion_laughs_attack).  Nothing is copied
  while loading, but every later walk, copy, comparison or message would expand it.  The nodes that aliases add
  are counted as they are met (each anchored node's expanded size is recorded once, when it is complete) and a
  document whose aliases add more than ``MAX_ALIAS_NODES`` is refused.  Real configs alias a block a few times.
- **recursive aliases**: an alias inside the node it names (``a: &x [*x]``) makes a value that contains itself;
  no speechpack file holds one, and a deep merge or a copy of it never ends.  Refused.
- **nesting**: at most ``schemas.documents.MAX_DEPTH`` levels of sequences and mappings, aliases expanded (the
  composer recurses per level).
- **integers**: at most ``schemas.documents.MAX_INT_DIGITS`` digits, however written (decimal, hexadecimal,
  sexagesimal): a longer one cannot be converted to text, so no message or ``json.dumps`` could show it.

**Duplicate keys** are refused in every mapping at every level, naming the key and both lines: PyYAML keeps the
last value silently, so a second ``dataset_args:`` (or a second ``chunk_len`` inside one) would drop the first
without a word.  Keys a merge (``<<: *base``) brings in are not duplicates: overriding them is what a merge is for;
a key written twice inside a merged mapping (``<<: {x: 1, x: 2}``) is one.

Any other failure of the loader (a bad timestamp, a ``!!float`` that is not a number) is a named problem too.
"""

from __future__ import annotations

import math

import yaml
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from speechpack.schemas.documents import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    DocumentError,
    key_path,
    long_integer_reason,
    refuse,
)

#: Most nodes the aliases of one document may add to it (each alias adds the expanded size of the node it names).
MAX_ALIAS_NODES = 100_000
_MAX_INT_BITS = MAX_INT_DIGITS * math.log2(10)


class _Refusal(Exception):
    """A bound of this module crossed at ``node`` (constructing) or ``mark`` (composing); with both, ``mark`` gives
    the line and ``node`` the key."""

    def __init__(self, reason: str, mark=None, node=None):
        super().__init__(reason)
        self.reason, self.mark, self.node = reason, mark, node


class BoundedSafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the bounds of the module docstring."""

    def __init__(self, stream, max_depth: int = MAX_DEPTH, max_alias_nodes: int = MAX_ALIAS_NODES):
        super().__init__(stream)
        self.max_depth, self.max_alias_nodes = max_depth, max_alias_nodes
        self._depth = 0  # collections open around the node being composed
        self._deepest = 0  # deepest level reached inside the collection being composed (aliases expanded)
        self._nodes = 0  # nodes composed so far, aliases expanded
        self._aliased = 0  # of those, nodes that aliases added
        self._extent: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded collection levels)

    def compose_node(self, parent, index):
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:  # an undefined alias: PyYAML's own error
                extent = self._extent.get(id(node))
                if extent is None:
                    raise _Refusal(f"alias *{event.anchor} refers to a node that contains it (a recursive "
                                   f"structure, which no speechpack file holds)", event.start_mark)
                size, height = extent
                self._nodes += size
                self._aliased += size
                if self._aliased > self.max_alias_nodes:
                    raise _Refusal(f"its aliases expand to more than {self.max_alias_nodes} nodes (an alias stands "
                                   f"for the whole node it names; refused so that no copy or message expands it)",
                                   event.start_mark)
                self._deepen(self._depth + height, event.start_mark)
            return super().compose_node(parent, index)
        mark = self.peek_event().start_mark
        collection = self.check_event(SequenceStartEvent, MappingStartEvent)
        outer_deepest = self._deepest
        if collection:
            self._depth += 1
            self._deepest = self._depth
            self._deepen(self._depth, mark)
        before = self._nodes
        self._nodes += 1
        node = super().compose_node(parent, index)
        if collection:
            self._extent[id(node)] = (self._nodes - before, self._deepest - self._depth + 1)
            self._depth -= 1
            self._deepest = max(outer_deepest, self._deepest)
        else:
            self._extent[id(node)] = (1, 0)
        return node

    def _deepen(self, level: int, mark) -> None:
        self._deepest = max(self._deepest, level)
        if level > self.max_depth:
            raise _Refusal(f"nested more than {self.max_depth} levels deep", mark)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (_Refusal, yaml.YAMLError):
            raise
        except Exception as err:  # PyYAML's constructors fail plainly on odd scalars: month 13, an empty !!int
            value = node.value[:40] if isinstance(node.value, str) else ""
            raise _Refusal(f"not valid YAML (cannot read {node.tag.rpartition(':')[2]} value {value!r}: "
                           f"{type(err).__name__}: {err})", node=node) from None

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            _refuse_duplicate_keys(self, node)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        digits = sum(c.isdigit() for c in text) if len(text) > MAX_INT_DIGITS else 0
        if digits > MAX_INT_DIGITS:
            raise _Refusal(long_integer_reason(digits), node=node)
        value = super().construct_yaml_int(node)
        if abs(value).bit_length() > _MAX_INT_BITS:
            raise _Refusal(long_integer_reason(int(abs(value).bit_length() * math.log10(2)) + 1), node=node)
        return value


BoundedSafeLoader.add_constructor("tag:yaml.org,2002:int", BoundedSafeLoader.construct_yaml_int)

_MERGE_TAG = "tag:yaml.org,2002:merge"


def _refuse_duplicate_keys(loader: BoundedSafeLoader, node: MappingNode) -> None:
    """A key written twice in the mapping ``node`` itself (merged keys left out) is a ``_Refusal`` at its second
    value, naming the key and both lines.  Keys compare as the values they construct (``1`` and ``0x1`` are one
    key, as they are in the dict); an unhashable key is left to PyYAML's own error."""
    first: dict = {}
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:  # what it merges is never built as a mapping of its own: checked here
            merged = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for part in merged:
                if isinstance(part, MappingNode):
                    _refuse_duplicate_keys(loader, part)
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            earlier = first.setdefault(key, key_node)
        except TypeError:
            continue
        if earlier is not key_node:
            raise _Refusal(f"key {str(key)[:80]!r} appears twice in one mapping (lines {_line(earlier.start_mark)} "
                           f"and {_line(key_node.start_mark)}): YAML would keep only the last value and drop the "
                           f"first silently; keep one", key_node.start_mark, value_node)


def _node_path(root, target) -> str | None:
    """The key path from the document's ``root`` node to ``target``, or None.  Iterative; shared nodes once."""
    stack, seen = [(root, [])], set()
    while stack:
        node, parts = stack.pop()
        if node is target:
            return key_path(parts)
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            stack.extend((value, [*parts, key.value if isinstance(key, ScalarNode) else "?"])
                         for key, value in reversed(node.value))
        elif isinstance(node, SequenceNode):
            stack.extend((child, [*parts, i]) for i, child in reversed(list(enumerate(node.value))))
    return None


def _line(mark) -> int | None:
    return mark.line + 1 if mark is not None else None


def parse_yaml(data: bytes | str, path: str, *, error: type[Exception] = DocumentError, max_depth: int = MAX_DEPTH,
               max_alias_nodes: int = MAX_ALIAS_NODES):
    """The value of the YAML document ``data`` (the bytes or text of the file ``path``), plain data only; any
    failure raises ``error`` naming ``path``, the line and, for a refused value, its key."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        try:
            data = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise refuse(error, path, f"not UTF-8 text (byte 0x{raw[err.start]:02x})",
                         raw.count(b"\n", 0, err.start) + 1) from None
    loader = root = None
    try:
        loader = BoundedSafeLoader(data, max_depth, max_alias_nodes)  # the reader refuses control characters here
        root = loader.get_single_node()
        return loader.construct_document(root) if root is not None else None
    except _Refusal as err:
        node = err.node
        mark = err.mark if err.mark is not None or node is None else node.start_mark
        key = _node_path(root, node) if node is not None and root is not None else None
        raise refuse(error, path, err.reason, _line(mark), key) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        detail = "; ".join(part for part in (err.context, err.problem) if part)
        column = f" at column {mark.column + 1}" if mark is not None else ""
        raise refuse(error, path, f"not valid YAML ({detail}{column})", _line(mark)) from None
    except yaml.YAMLError as err:
        raise refuse(error, path, f"not valid YAML ({err})") from None
    except RecursionError:  # a thread with a small stack; the depth bound keeps the main thread's far below
        raise refuse(error, path, "not readable YAML: nested too deep for the parser") from None
    except (ValueError, TypeError, ArithmeticError, LookupError) as err:
        raise refuse(error, path, f"not valid YAML ({err})") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: str, *, error: type[Exception] = DocumentError, max_depth: int = MAX_DEPTH,
              max_alias_nodes: int = MAX_ALIAS_NODES):
    """``parse_yaml`` of the file at ``path``; ``OSError`` is left to the caller."""
    with open(path, "rb") as fp:
        raw = fp.read()
    return parse_yaml(raw, path, error=error, max_depth=max_depth, max_alias_nodes=max_alias_nodes)


__all__ = ["MAX_ALIAS_NODES", "parse_yaml", "read_yaml"]
