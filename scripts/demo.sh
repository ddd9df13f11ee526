#!/usr/bin/env bash
# One command from a fresh clone to a working demo: installs what it needs (with the plot extra, so the demo draws
# its pictures), then runs `speechpack demo`; arguments go to it (--out DIR).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
SPEECHPACK_EXTRAS="plot${SPEECHPACK_EXTRAS:+,$SPEECHPACK_EXTRAS}" . "$repo/scripts/setup.sh"
speechpack demo "$@"
echo
speechpack_hint
