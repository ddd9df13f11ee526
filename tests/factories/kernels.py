"""One level of numeric kernels for the whole suite, whatever CPU runs it: the golden batch digests
(``tests/project/test_golden_batches.py``) pin float features bit for bit, and the libraries that compute them pick
their SIMD kernels by the CPU they start on.

Why: OpenBLAS (numpy's ``@`` and ``dot``), MKL (torch's), ATen, NumPy and OpenCV each choose kernels at load time;
AVX-512 and AVX2 kernels add in other orders, so the same code gives other last bits on another machine.  Seen
here: OpenBLAS's SkylakeX kernels (an Intel AVX-512 machine) and its Haswell ones (an AMD machine, whose AVX-512
OpenBLAS does not use) gave different digests for mainline WeSep's fbank and the ASD mixing SNR.  Every x86-64
machine with AVX2 and FMA runs the AVX2 kernels, so the suite pins them: ``pin_kernels`` sets each library's
variable (a variable already set is kept) before any of them loads, which is why ``factories/__init__.py`` calls it
first and conftest.py imports ``factories`` before numpy.  ``unpinned`` says which library in this process runs
other kernels (a library loaded before the pin, a machine without AVX2): the golden tests fail with it.
"""

from __future__ import annotations

import os
import platform
import sys

#: The variable each library reads at load time, and the AVX2 level it is pinned to.
AVX2_KERNELS = {
    "OPENBLAS_CORETYPE": "Haswell",
    "MKL_CBWR": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    # NumPy's names of its AVX-512 groups, older (2.2 and before) and newer; names a build lacks are ignored.
    "NPY_DISABLE_CPU_FEATURES": ("X86_V4 AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL "
                                 "AVX512_ICL AVX512_SPR"),
    "OPENCV_CPU_DISABLE": "AVX512-SKX",
}


def _has_avx2() -> bool:
    """An x86-64 CPU with AVX2 and FMA (the kernels pinned need both)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        return False
    return {"avx2", "fma"} <= set(flags)


def pin_kernels() -> None:
    """Set each library's kernel variable to the AVX2 level (where the CPU has it), keeping any already set."""
    if _has_avx2():
        for name, value in AVX2_KERNELS.items():
            os.environ.setdefault(name, value)


def unpinned() -> list[str]:
    """The libraries of this process that run kernels other than ``AVX2_KERNELS``' (empty when all are pinned)."""
    import numpy as np
    import threadpoolctl
    import torch

    problems = []
    if not _has_avx2():
        problems.append(f"this CPU ({platform.machine()}) has no AVX2 and FMA")
    for name, value in AVX2_KERNELS.items():
        if os.environ.get(name) != value:
            problems.append(f"{name}={os.environ.get(name)!r}, not {value!r}")
    for pool in threadpoolctl.threadpool_info():
        if pool["internal_api"] == "openblas" and pool.get("architecture") != "Haswell":
            problems.append(f"OpenBLAS ({pool['filepath']}) runs its {pool.get('architecture')} kernels")
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        problems.append(f"torch runs its {torch.backends.cpu.get_cpu_capability()} kernels")
    umath = np._core._multiarray_umath
    avx512 = sorted(name for name in umath.__cpu_dispatch__
                    if umath.__cpu_features__.get(name) and ("AVX512" in name or name == "X86_V4"))
    if avx512:
        problems.append(f"numpy dispatches to its {', '.join(avx512)} kernels")
    cv2 = sys.modules.get("cv2")  # loaded by the tests that use it; a feature OpenCV was told to skip ends in "?"
    if cv2 is not None and any(f.startswith("*AVX512") and not f.endswith("?")
                               for f in cv2.getCPUFeaturesLine().split()):
        problems.append(f"OpenCV dispatches to AVX-512 ({cv2.getCPUFeaturesLine()})")
    return problems


__all__ = ["AVX2_KERNELS", "pin_kernels", "unpinned"]
