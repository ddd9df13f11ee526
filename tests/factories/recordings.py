"""Real recordings and video the tests read from installed Debian packages, and what a missing one does.

Real speech comes from installed Debian packages (see docs/testing.md, "Real recordings"); it is read from its
installed path and cropped into ``tmp_path``, never copied into the repository.  When a recording, the test video or
an optional dependency is missing, a test skips locally and fails in CI (``CI`` set), naming what to install: in CI
a skip would hide a test that never ran.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pytest
import soxr

#: Full scale of the pack's int16 storage (a stored value v decodes to v / 32768 * scale).
FULL_SCALE = 32768.0

_LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-{}.wav"

#: corpus -> (Debian package, sample rate, recordings).  Every file was checked: mono, at the stated rate.
REAL_CORPORA: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "pocketsphinx": (
        "pocketsphinx-testdata",
        16000,
        tuple(_LIBRIVOX.format(n) for n in ("0870", "0890", "0920", "0930", "0880")),
    ),
    "alsa": (
        "alsa-utils",
        48000,
        tuple(f"/usr/share/sounds/alsa/{n}.wav"
              for n in ("Front_Center", "Rear_Left", "Side_Right", "Front_Right", "Noise")),
    ),
    "codec2": (
        "codec2-examples",
        8000,
        # cross.wav is mu-law: libsndfile decodes it to 16-bit values, so it crops into PCM_16 exactly.
        tuple(f"/usr/share/codec2/wav/{n}.wav" for n in ("hts1a", "mmt1", "cross", "hts2a", "morig")),
    ),
}

#: Where scripts/test.sh extracts kphotoalbum's talking-face demo movie when ``SPEECHPACK_TEST_VIDEO`` is unset.
VIDEO_DEFAULT = Path(__file__).resolve().parents[2] / ".cache" / "test-data" / "kphotoalbum" / "movie.avi"


def unavailable(message: str) -> None:
    """Missing test data or dependency: fail in CI (a skip there hides a test that never ran), skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def missing_recording(path: str, package: str) -> None:
    """A real recording is not installed: say which Debian package brings it."""
    unavailable(f"real recording {path} is missing: install the Debian package {package} "
                f"(apt-get install -y --no-install-recommends {package})")


def require_recording(package: str, path: str) -> str:
    """``path`` if it is installed, else :func:`missing_recording`."""
    if not os.path.isfile(path):
        missing_recording(path, package)
    return path


def require(module: str, extra: str):
    """An optional dependency (``speechpack[extra]``), imported; scripts/test.sh installs every extra the tests use."""
    try:
        return importlib.import_module(module)
    except ImportError:
        unavailable(f"{module} is missing: pip install 'speechpack[{extra}]'")


def real_video_path() -> str:
    """kphotoalbum's demo movie.avi (MJPEG 160x120, 15 fps, 68 frames), see docs/testing.md."""
    path = os.environ.get("SPEECHPACK_TEST_VIDEO") or str(VIDEO_DEFAULT)
    if not os.path.isfile(path):
        unavailable(f"real test video {path} is missing: run scripts/test.sh, or extract it: cd DIR && apt-get "
                    f"download kphotoalbum && dpkg-deb -x kphotoalbum_*.deb x, then set SPEECHPACK_TEST_VIDEO="
                    f"DIR/x/usr/share/kphotoalbum/demo/movie.avi")
    return path


def corpus_rate(corpus: str) -> int:
    return REAL_CORPORA[corpus][1]


def at_rate(audio: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """``[C, T]`` audio as the packer resamples it (soxr HQ on float32 ``[T, C]``), returned as float64."""
    if rate == target_rate:
        return audio.astype(np.float64)
    resampled = soxr.resample(np.ascontiguousarray(audio.T, dtype=np.float32), rate, target_rate)
    return np.asarray(resampled, dtype=np.float64).T


def pack_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
