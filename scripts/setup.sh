#!/usr/bin/env bash
# Shared set-up for scripts/demo.sh and scripts/test.sh: a virtual environment in .venv with the CPU build of
# torch first (an unpinned torch would pull a multi-GB CUDA build), then speechpack itself, editable.
# Sourced, not run: it activates the environment for the caller.  Extras to install come from SPEECHPACK_EXTRAS
# (not from arguments: a sourced script sees its caller's arguments).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SPEECHPACK_VENV:-$repo/.venv}"
extras="${SPEECHPACK_EXTRAS:-}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"
stamp="$venv/.speechpack-installed${extras:+-$extras}"
if [ ! -f "$stamp" ] || [ "$repo/pyproject.toml" -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e "$repo${extras:+[$extras]}"
  touch "$stamp"
fi
