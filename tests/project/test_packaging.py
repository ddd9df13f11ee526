"""The installed names: the wheel installs one package, ``speechpack`` (pyproject.toml maps the repository's top level
to it), so a user's own ``loader.py``, ``schemas.py``, ``packer.py`` or ``cli.py`` beside a training script never
shadows ours, and ours never shadows theirs.

- every folder with an ``__init__.py`` is in the explicit ``packages`` list of pyproject.toml, and every entry of
  the list is such a folder (a subpackage left off the list would be missing from the wheel, silently);
- the wheel is built offline (``pip wheel --no-deps --no-build-isolation``) from a copy of the sources, installed
  with ``--no-deps --target`` into a fresh directory, and the README's Python example runs from a directory that
  holds a user's own ``loader.py``, ``schemas.py``, ``packer.py`` and ``cli.py``, importing ``speechpack.*`` from the
  wheel, not from the repository.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib

import numpy as np
import pytest
import soundfile

import factories.paths
from factories.wheel import build_wheel, declared_packages

REPO = str(factories.paths.REPO)
PACKAGE = "speechpack"
#: Repository folders that are not part of the package (tests, documents, tools) and build or cache output.
NOT_PACKAGED = {"tests", "docs", "bench", "scripts", "build", "dist", "demo-out", "__pycache__"}
#: A user's modules named like ours; each only says whose it is.
USER_MODULES = ("loader", "schemas", "packer", "cli")


def _pyproject() -> dict:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fp:
        return tomllib.load(fp)


def _package_folders() -> set[str]:
    """Dotted names of the repository's folders holding an ``__init__.py`` (the root is ``speechpack``)."""
    found = set()
    for root, dirs, files in os.walk(REPO):
        relative = os.path.relpath(root, REPO)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.endswith(".egg-info")
                         and not (relative == "." and d in NOT_PACKAGED) and d != "__pycache__")
        if "__init__.py" in files:
            parts = [] if relative == "." else relative.split(os.sep)
            found.add(".".join([PACKAGE, *parts]))
    return found


def test_the_packages_list_names_every_package_folder():
    assert _pyproject()["tool"]["setuptools"]["package-dir"] == {PACKAGE: "."}
    declared, found = declared_packages(), _package_folders()
    assert not found - declared, f"folders with __init__.py missing from pyproject.toml's packages: {found - declared}"
    assert not declared - found, f"pyproject.toml lists packages that are not folders: {declared - found}"


def test_each_package_docstring_names_every_module_it_holds():
    """docs/architecture.md sends a newcomer to a package's ``__init__.py`` for what each of its modules holds."""
    import ast

    unnamed = []
    for dotted in sorted(_package_folders() - {PACKAGE}):
        folder = os.path.join(REPO, *dotted.split(".")[1:])
        with open(os.path.join(folder, "__init__.py"), encoding="utf-8") as fp:
            doc = ast.get_docstring(ast.parse(fp.read())) or ""
        members = [name[:-3] for name in os.listdir(folder) if name.endswith(".py") and name != "__init__.py"]
        members += [name for name in os.listdir(folder) if os.path.exists(os.path.join(folder, name, "__init__.py"))]
        unnamed += [f"{dotted}.{name}" for name in sorted(members) if not re.search(rf"\b{name}\b", doc)]
    assert not unnamed, f"modules their package's docstring does not name: {unnamed}"


def _run(argv: list[str], cwd: str, env: dict | None = None, timeout: int = 120) -> str:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(argv[:6])} ...\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> str:
    """The wheel built offline from a copy of the sources and installed alone into a fresh directory."""
    work = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(work)
    offline = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(work / "site"),
          str(wheel)], cwd=str(work), env=offline)
    # one top-level name (and the console script, unchanged)
    assert sorted(n for n in os.listdir(work / "site") if not n.endswith(".dist-info")) == ["bin", PACKAGE]
    assert os.listdir(work / "site" / "bin") == ["speechpack"]
    return str(work / "site")


def _user_directory(root) -> str:
    """A training directory with the user's own modules named like ours, and a small WeSep list of generated
    two-speaker mixtures (3 s at 16 kHz) to pack for the README's example."""
    user = root / "project"
    (user / "audio").mkdir(parents=True)
    for name in USER_MODULES:
        (user / f"{name}.py").write_text(f"OWNER = 'the user'\nNAME = {name!r}\n", encoding="utf-8")
    rng = np.random.default_rng(0)
    lines = []
    for index in range(8):
        sources = [0.2 * np.sin(2 * np.pi * f * np.arange(48000) / 16000) for f in (180 + 20 * index, 400 + index)]
        paths = {}
        for speaker, wave in zip(("a", "b"), sources):
            paths[speaker] = str(user / "audio" / f"{speaker}{index}.wav")
            soundfile.write(paths[speaker], wave + 0.01 * rng.standard_normal(wave.size), 16000, subtype="PCM_16")
        mix = str(user / "audio" / f"mix{index}.wav")
        soundfile.write(mix, sum(sources), 16000, subtype="PCM_16")
        lines.append({"key": f"m{index}", "spk": [f"a{index}", f"b{index}"], "mix": {"default": [mix]},
                      "src": {f"a{index}": [paths["a"]], f"b{index}": [paths["b"]]}})
    (user / "raw.list").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return str(user)


def _readme_example() -> str:
    """The README's first Python example that builds a loader, as it is written."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as fp:
        blocks = re.findall(r"```python\n(.*?)```", fp.read(), flags=re.S)
    [example, *_] = [block for block in blocks if "build_loader(" in block]
    return example


def test_the_wheel_runs_the_readme_example_beside_a_users_own_modules(installed, tmp_path):
    user = _user_directory(tmp_path)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = installed  # the wheel's files only: the repository is not on the path
    _run([sys.executable, "-c", "import sys; from speechpack.cli import main; sys.exit(main())", "build", "wesep",
          "--list", "raw.list", "--out", "demo-out/packs/tse", "--no-progress"], cwd=user, env=env)
    check = "\n".join([
        "import speechpack, speechpack.loader, speechpack.cli",
        "import loader, schemas, packer, cli",
        "assert all(m.OWNER == 'the user' for m in (loader, schemas, packer, cli))",
        f"assert speechpack.__file__.startswith({installed!r}), speechpack.__file__",
        f"assert speechpack.loader.__file__.startswith({installed!r}), speechpack.loader.__file__",
        "print('speechpack from', speechpack.__file__)",
    ])
    output = _run([sys.executable, "-c", _readme_example() + "\n" + check], cwd=user, env=env, timeout=180)
    assert f"speechpack from {installed}" in output
    assert re.search(r"^1 \(\d+, 1, 32000\)", output, flags=re.M), output  # batches of the second epoch
