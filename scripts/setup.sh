#!/usr/bin/env bash
# Shared set-up for scripts/demo.sh and scripts/test.sh: a virtual environment in .venv with torch first, then
# speechpack itself, editable.  Sourced, not run: it activates the environment for the caller.
#
# Environment (read here, not arguments: a sourced script sees its caller's arguments):
#   SPEECHPACK_EXTRAS           extras to install, comma-separated (plot, dev, ...; see pyproject.toml)
#   SPEECHPACK_TORCH_INDEX_URL  the wheel index torch is installed from; default: whatever pip is configured with.
#                               https://download.pytorch.org/whl/cpu gives the CPU build (about 190 MB), where
#                               PyPI's Linux wheel is the CUDA build (several GB with its nvidia-* wheels).
#   SPEECHPACK_VENV             where the environment goes (default: .venv in the repository)
# Each step says what it does on one line: the first run installs for a minute or more.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SPEECHPACK_VENV:-$repo/.venv}"
extras="${SPEECHPACK_EXTRAS:-}"
torch_version="2.13.0"
torch_index="${SPEECHPACK_TORCH_INDEX_URL:-}"
say() { echo "speechpack setup: $*"; }
if [ ! -x "$venv/bin/python" ]; then
  say "creating the virtual environment $venv"
  python3 -m venv "$venv"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"
stamp="$venv/.speechpack-installed${extras:+-$extras}${torch_index:+-$(echo "$torch_index" | tr -c 'A-Za-z0-9.' _)}"
if [ ! -f "$stamp" ] || [ "$repo/pyproject.toml" -nt "$stamp" ]; then
  say "upgrading pip"
  python -m pip install -q --upgrade pip >/dev/null 2>&1 || say "could not upgrade pip; going on with $(python -m pip --version | cut -d' ' -f2)"
  if [ -n "$torch_index" ]; then
    say "installing torch==$torch_version from $torch_index (SPEECHPACK_TORCH_INDEX_URL)"
    python -m pip install -q --index-url "$torch_index" "torch==$torch_version"
  else
    say "installing torch==$torch_version from pip's configured index (SPEECHPACK_TORCH_INDEX_URL picks another)"
    python -m pip install -q "torch==$torch_version"
  fi
  say "installing speechpack${extras:+[$extras]} (editable) and its dependencies"
  python -m pip install -q -e "$repo${extras:+[$extras]}"
  touch "$stamp"
  say "ready: $venv"
fi
# How to reach the `speechpack` command from a new shell; the callers print it when they end.
speechpack_hint() {
  echo "In a new shell, activate the environment first:  . $venv/bin/activate"
  echo "(or call it by its full path:  $venv/bin/speechpack)"
}
