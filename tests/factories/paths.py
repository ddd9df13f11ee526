"""Where the repository and the test suite lie, for test modules at any depth under tests/ (their own ``__file__``
says only which folder they sit in, and that changes when a module moves)."""

from __future__ import annotations

from pathlib import Path

#: tests/, the folder holding conftest.py and factories/.
TESTS = Path(__file__).resolve().parents[1]
#: The repository root (the package's top level).
REPO = TESTS.parent
#: tests/data/: the golden packs and batches.
DATA = TESTS / "data"


def suite_modules() -> list[Path]:
    """Every test module of the suite, in any folder under tests/ (not factories/ or data/), sorted."""
    return sorted(path for path in TESTS.rglob("test_*.py")
                  if path.relative_to(TESTS).parts[0] not in ("factories", "data"))
