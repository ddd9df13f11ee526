"""The test suite's own layering (docs/testing.md, "Layout"): a test module imports plain helpers from
``tests/factories/`` and gets fixtures by name from ``tests/conftest.py``; it never imports from another test module
or from ``conftest`` (an import of a fixture hides where it comes from, and importing a test module collects its
tests twice over).  Factories import neither either, so helpers do not depend on tests.

Test modules live in folders that mirror the packages (``tests/loader/tse/`` for ``loader/tse/``), or in
``tests/cli/`` and ``tests/project/``; the folders have no ``__init__.py``, so pytest imports each module by its
file name alone, and two modules of one name would not both import.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

import factories.paths

pytestmark = pytest.mark.fast  # no torch, no recordings (docs/testing.md, "The fast tier")

TESTS = factories.paths.TESTS
#: Folders under tests/ that hold no test modules: the helpers and the data.
NOT_TESTS = ("factories", "data")
#: Test folders that mirror no package: the command line's shared surface, and checks of the whole project.
OWN_FOLDERS = ("cli", "project")
MODULES = factories.paths.suite_modules()
#: Top-level names under tests/ that nothing may import: conftest.py and every test module.
FORBIDDEN = {"conftest"} | {p.stem for p in MODULES}


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
    files = MODULES + sorted((TESTS / "factories").glob("*.py")) + [TESTS / "conftest.py"]
    assert offending_imports(files) == []


def test_the_suite_finds_test_modules_in_every_folder():
    folders = {path.parent.relative_to(TESTS).as_posix() for path in MODULES}
    assert {"loader/tse", "packer/build", "schemas", "project"} <= folders
    assert not any(path.relative_to(TESTS).parts[0] in NOT_TESTS for path in MODULES)


def test_pytest_recurses_into_every_test_folder(pytestconfig):
    """pytest skips folders its ``norecursedirs`` names (its default names ``build``): none may hold tests."""
    patterns = pytestconfig.getini("norecursedirs")
    skipped = sorted({"/".join(path.relative_to(TESTS).parts[:depth + 1]) for path in MODULES
                      for depth, part in enumerate(path.relative_to(TESTS).parts[:-1])
                      if any(fnmatch.fnmatch(part, pattern) for pattern in patterns)})
    assert skipped == [], f"test folders pytest never collects (norecursedirs {patterns})"


def test_test_module_names_are_unique_across_folders():
    seen: dict[str, list[str]] = {}
    for path in MODULES:
        seen.setdefault(path.name, []).append(path.relative_to(TESTS).as_posix())
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}


def test_test_folders_mirror_the_packages_and_are_not_packages():
    """A test module sits in the folder of the package it tests (or cli/, project/), never flat in tests/, and no
    test folder is a Python package (an ``__init__.py`` would change how pytest names and imports its modules)."""
    repo = factories.paths.REPO
    misplaced = [path.relative_to(TESTS).as_posix() for path in MODULES
                 if path.parent == TESTS or not (path.parent.relative_to(TESTS).parts[0] in OWN_FOLDERS
                                                  or (repo / path.parent.relative_to(TESTS) / "__init__.py").is_file())]
    assert misplaced == [], "test modules outside a folder that mirrors a package (docs/testing.md, \"Layout\")"
    packages = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("__init__.py")
                if p.relative_to(TESTS).parts[0] not in NOT_TESTS]
    assert packages == []


def test_the_check_sees_imports_at_any_depth(tmp_path):
    module = tmp_path / "test_example.py"
    module.write_text("import conftest\n\ndef f():\n    from test_loader import build\n    from factories import Mix\n",
                      encoding="utf-8")
    assert [name for _, name in imported_names(module)] == ["conftest", "test_loader", "factories"]
    assert offending_imports([module]) == ["test_example.py:1: imports conftest",
                                           "test_example.py:4: imports test_loader"]
