"""The fast tier (docs/testing.md, "The fast tier"): ``-m fast`` imports only the test modules that say they import
without torch (``FAST_MODULE = True``, or ``pytestmark = pytest.mark.fast``), runs the tests marked ``fast`` in them
and nothing else, and runs as if torch were not installed.  Each case is a small suite under ``tmp_path`` with the
real ``tests/conftest.py``, run by pytest in a subprocess (the tier blocks torch for the whole process)."""

from __future__ import annotations

import os
import subprocess
import sys

import factories.paths

INI = """[pytest]
markers =
    real_data: uses real recordings
    fast: needs neither torch nor the recordings
"""

#: A module that joins the tier one test at a time.
SOME_FAST = """import pytest

FAST_MODULE = True


@pytest.mark.fast
def test_pure():
    pass


def test_slow():
    pass
"""

#: A module that does not join the tier: importing it at all would fail the run.
NOT_FAST = """raise RuntimeError("imported by the fast tier")


def test_anything():
    pass
"""


def run_suite(tmp_path, modules: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text((factories.paths.TESTS / "conftest.py").read_text(encoding="utf-8"),
                                          encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(INI, encoding="utf-8")
    for name, text in modules.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(factories.paths.TESTS), *sys.path])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_fast_runs_the_marked_tests_of_fast_modules_and_never_imports_the_others(tmp_path):
    result = run_suite(tmp_path, {"test_some_fast.py": SOME_FAST, "test_not_fast.py": NOT_FAST}, "-m", "fast")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED test_some_fast.py::test_pure" in result.stdout
    assert "test_slow" not in result.stdout and "test_not_fast" not in result.stdout
    assert "1 passed, 1 deselected" in result.stdout


def test_a_fast_module_that_imports_torch_fails_the_tier(tmp_path):
    module = SOME_FAST.replace("import pytest\n", "import pytest\nimport torch\n")
    result = run_suite(tmp_path, {"test_some_fast.py": module}, "-m", "fast")
    assert result.returncode != 0
    assert "the fast tier runs without torch" in result.stdout


def test_a_fast_test_in_a_module_the_tier_never_imports_is_a_usage_error(tmp_path):
    module = SOME_FAST.replace("FAST_MODULE = True\n", "")
    result = run_suite(tmp_path, {"test_some_fast.py": module}, "--collect-only")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "marked fast in a module without the line 'FAST_MODULE = True'" in result.stderr
    assert "test_some_fast.py::test_pure" in result.stderr
