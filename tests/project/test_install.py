"""Installing speechpack into an environment that already trains: the torch there (a CUDA build, say) is kept.

README.md, "Install into your own environment": a wheel (or a clone) installed with pip into an existing
environment.  ``torch>=2.1`` is met by any build of a recent torch, CUDA ones included (``2.5.1+cu124``: a local
version label satisfies the plain requirement, PEP 440), so pip has nothing to replace.  Checked here offline: the
wheel is built from this tree without build isolation, and installed with ``--no-index`` into a fresh environment
whose torch is a stand-in CUDA build and whose other dependencies are this test environment's (a ``.pth`` file).
Had pip wanted another torch, ``--no-index`` would make it fail instead of quietly fetching one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from factories.wheel import build_wheel

#: The stand-in for a CUDA torch the user installed from PyTorch's index before speechpack.
CUDA_TORCH = "2.5.1+cu124"


def _clean_env() -> dict:
    """The subprocesses' environment: no PYTHONPATH, so only what is installed is imported."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}


def _run(args: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=_clean_env(), timeout=120,
                            **kwargs)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


def _fake_cuda_torch(site: Path) -> None:
    """A ``torch`` package and its dist-info, as pip sees a CUDA torch installed from PyTorch's wheel index."""
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(f'__version__ = "{CUDA_TORCH}"\n', encoding="utf-8")
    info = site / f"torch-{CUDA_TORCH}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {CUDA_TORCH}\n", encoding="utf-8")
    (info / "INSTALLER").write_text("pip\n", encoding="utf-8")
    (info / "RECORD").write_text("torch/__init__.py,,\n", encoding="utf-8")


def _torch_seen(python: Path) -> str:
    code = ("import importlib.metadata as m, torch; "
            "print(torch.__version__, torch.__file__, m.version('torch'), m.distribution('torch')._path)")
    return _run([python, "-c", code]).stdout.strip()


def test_installing_into_an_environment_with_a_cuda_torch_keeps_that_torch(tmp_path):
    wheel = build_wheel(tmp_path)

    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    _fake_cuda_torch(site)
    # The other dependencies (numpy, soundfile, ...) come from this environment, after the new one's own packages
    # (its editable speechpack too, which pip then reports as an installation outside the environment: kept).
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    before = _torch_seen(python)
    assert before.startswith(f"{CUDA_TORCH} {site / 'torch'}")

    installed = _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-index",
                      "--no-build-isolation", f"speechpack[plot] @ {wheel.as_uri()}"])
    assert f"Requirement already satisfied: torch>=2.1 in {site}" in installed.stdout
    assert "torch" not in installed.stdout.split("Installing collected packages:", 1)[-1]
    assert _torch_seen(python) == before  # same version, same files, same dist-info
    assert "speechpack" in _run([env / "bin" / "speechpack", "--version"]).stdout  # the command, installed there
    where = _run([python, "-c", "import speechpack; print(speechpack.__file__)"]).stdout.strip()
    assert where == str(site / "speechpack" / "__init__.py")
