"""The test suite's own layering (docs/testing.md, "Layout"): a test module imports plain helpers from
``tests/factories/`` and gets fixtures by name from ``tests/conftest.py``; it never imports from another test module
or from ``conftest`` (an import of a fixture hides where it comes from, and importing a test module collects its
tests twice over).  Factories import neither either, so helpers do not depend on tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

TESTS = Path(__file__).resolve().parent
#: Top-level names under tests/ that nothing may import: conftest.py and every test module.
FORBIDDEN = {"conftest"} | {p.stem for p in TESTS.glob("test_*.py")}


def imported_names(path: Path) -> list[tuple[int, str]]:
    """``(line, top-level module)`` of every import in ``path``, at any depth (a lazy import counts too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
        elif isinstance(node, ast.ImportFrom):  # relative: tests/ is not a package, so this is always wrong
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def offending_imports(files) -> list[str]:
    return [f"{path.name}:{line}: imports {name}"
            for path in files for line, name in imported_names(path)
            if name in FORBIDDEN or name.startswith(".")]


def test_no_test_module_or_factory_imports_a_test_module_or_conftest():
    files = sorted(TESTS.glob("test_*.py")) + sorted((TESTS / "factories").glob("*.py")) + [TESTS / "conftest.py"]
    assert offending_imports(files) == []


def test_the_check_sees_imports_at_any_depth(tmp_path):
    module = tmp_path / "test_example.py"
    module.write_text("import conftest\n\ndef f():\n    from test_loader import build\n    from factories import Mix\n",
                      encoding="utf-8")
    assert [name for _, name in imported_names(module)] == ["conftest", "test_loader", "factories"]
    assert offending_imports([module]) == ["test_example.py:1: imports conftest",
                                           "test_example.py:4: imports test_loader"]
