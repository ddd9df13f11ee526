#!/usr/bin/env bash
# One command from a fresh clone to a working demo: installs what it needs, then runs `speechpack demo`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
. "$repo/scripts/setup.sh"
exec speechpack demo "$@"
