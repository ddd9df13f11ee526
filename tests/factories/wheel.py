"""The speechpack wheel built offline from a copy of this tree, for the tests that install it.

A copy, so the build's own output (``build/``, ``*.egg-info``) stays out of the repository; offline
(``--no-deps --no-build-isolation --no-index``), so a build never reaches a package index.  What is copied follows
pyproject.toml: its ``package-dir`` maps the repository root to ``speechpack``, so the root modules, the README,
pyproject.toml and the top folders of the declared ``packages`` are what the build reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def declared_packages() -> set[str]:
    """The explicit ``packages`` list of pyproject.toml."""
    with open(REPO / "pyproject.toml", "rb") as fp:
        return set(tomllib.load(fp)["tool"]["setuptools"]["packages"])


def copy_sources(dest: Path) -> None:
    """What the build reads: pyproject.toml, the README, the root modules and the packages' top folders."""
    dest.mkdir(parents=True)
    for path in REPO.iterdir():
        name = path.name
        if path.is_file() and (name.endswith(".py") or name in ("pyproject.toml", "README.md")
                               or name.startswith("LICENSE")):
            shutil.copy2(path, dest)
    for top in sorted({package.split(".")[1] for package in declared_packages() if "." in package}):
        shutil.copytree(REPO / top, dest / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def build_wheel(work: Path) -> Path:
    """Copy the sources to ``work/src``, build the wheel into ``work/dist`` offline, and return its path."""
    copy_sources(work / "src")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                             "-q", ".", "-w", str(work / "dist")], cwd=str(work / "src"), env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"pip wheel ...\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    [wheel] = (work / "dist").glob("speechpack-*.whl")
    return wheel
