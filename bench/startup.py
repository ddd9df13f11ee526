"""How long a ``speechpack`` command takes to answer ``--help``, against an empty interpreter in the same run.

Scripts call ``speechpack validate``, ``inspect`` and ``copy`` in loops and array jobs, so start-up is paid every
time.  Each command line below runs as the console script does (``from speechpack.cli import main; main()``) in a
fresh interpreter, interleaved with ``python -c pass`` so that both see the same machine load; the median of
``--repeat`` runs is reported with the difference and the ratio to the empty interpreter.

Targets on the development machine (docs/performance.md): ``speechpack --help`` <= 0.15 s and ``speechpack validate
--help`` <= 0.2 s.  Run it alone: ``flock /tmp/speechpack-bench.lock python bench/startup.py``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

#: What the console script ``speechpack`` runs (pyproject.toml, ``[project.scripts]``).
CONSOLE_SCRIPT = "import sys; from speechpack.cli import main; sys.exit(main())"
COMMANDS = {
    "speechpack --help": ["--help"],
    "speechpack validate --help": ["validate", "--help"],
    "speechpack inspect --help": ["inspect", "--help"],
    "speechpack build --help": ["build", "--help"],
}
TARGETS = {"speechpack --help": 0.15, "speechpack validate --help": 0.2}


def _seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="Runs of each command line (median reported).")
    args = parser.parse_args()
    empty = [sys.executable, "-c", "pass"]
    runs: dict[str, list[float]] = {"python -c pass": [], **{name: [] for name in COMMANDS}}
    _seconds([sys.executable, "-c", CONSOLE_SCRIPT, "--help"])  # warm the page cache once
    for _ in range(args.repeat):
        runs["python -c pass"].append(_seconds(empty))
        for name, extra in COMMANDS.items():
            runs[name].append(_seconds([sys.executable, "-c", CONSOLE_SCRIPT, *extra]))
    base = statistics.median(runs["python -c pass"])
    print(f"{'command':32s} {'median s':>9s} {'- pass s':>9s} {'ratio':>7s}  target")
    print(f"{'python -c pass':32s} {base:9.3f} {0:9.3f} {1:7.2f}")
    missed = 0
    for name in COMMANDS:
        median = statistics.median(runs[name])
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<= {target:.2f} s: {'met' if median <= target else 'MISSED'}"
        missed += target is not None and median > target
        print(f"{name:32s} {median:9.3f} {median - base:9.3f} {median / base:7.2f}  {verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
