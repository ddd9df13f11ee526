"""A command imports only what it uses: ``import speechpack.cli``, ``speechpack --help`` and ``speechpack validate
--help`` load none of the heavy libraries (bench/startup.py times them; this checks what they import, which does
not depend on the machine).

Each case runs in a fresh interpreter and reads ``sys.modules`` afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.fast

#: Libraries no help screen needs: torch (batches), the decoders and resamplers, the adapters' own dependencies
#: (faces, parquet, Lhotse, LMDB, simulated rooms), object storage, Ray, plotting, YAML configs; numpy as well.
HEAVY = ("torch", "numpy", "soxr", "av", "cv2", "soundfile", "yaml", "tqdm", "pyarrow", "lhotse", "lmdb", "scipy",
         "pyroomacoustics", "fsspec", "s3fs", "ray", "matplotlib")

_RUN = """
import json, sys
from speechpack import cli
args = json.loads(sys.argv[1])
if args:
    try:
        cli.main(args, prog_name="speechpack")
    except SystemExit as done:
        assert done.code == 0, done.code
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in %r)))
""" % (HEAVY,)


def _heavy_imported(args: list[str]) -> list[str]:
    result = subprocess.run([sys.executable, "-c", _RUN, json.dumps(args)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [[], ["--help"], ["validate", "--help"], ["inspect", "--help"],
                                  ["export", "--help"], ["import", "--help"], ["demo", "--help"]],
                         ids=lambda args: " ".join(["speechpack", *args]) if args else "import")
def test_help_imports_nothing_heavy(args):
    assert _heavy_imported(args) == []


def test_the_check_sees_a_command_that_does_import():
    """The probe itself: ``build --help`` imports every adapter, so it must see numpy there."""
    assert "numpy" in _heavy_imported(["build", "--help"])
