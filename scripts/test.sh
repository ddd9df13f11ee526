#!/usr/bin/env bash
# One command from a fresh clone to the whole test suite: installs the Debian packages that hold the real
# recordings the tests use (docs/testing.md), the Python environment, then runs pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
debian_packages=(pocketsphinx-testdata alsa-utils codec2-examples)
missing=()
for pkg in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing test recordings: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# shellcheck disable=SC1091
. "$repo/scripts/setup.sh" dev
cd "$repo"
exec python -m pytest -q "$@"
