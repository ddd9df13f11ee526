#!/usr/bin/env bash
# One command from a fresh clone to the whole test suite: installs the Debian packages that hold the real
# recordings the tests use (docs/testing.md), the Python environment, then runs pytest.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
debian_packages=(pocketsphinx-testdata alsa-utils codec2-examples qabcs-data jconvolver-config-files opencv-data)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
missing=()
for pkg in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing test recordings: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The real talking-face video: kphotoalbum's demo movie.avi.  Installing kphotoalbum pulls KDE, so its .deb is
# downloaded and only the movie is kept, in a cache outside git (once; later runs reuse it).
video="$repo/.cache/test-data/kphotoalbum/movie.avi"
if [ ! -f "$video" ]; then
  echo "extracting the test video from the kphotoalbum package"
  unpack="$(mktemp -d)"
  ( cd "$unpack"
    apt-get download kphotoalbum >/dev/null 2>&1 || { $sudo apt-get update -qq && apt-get download kphotoalbum >/dev/null 2>&1; }
    dpkg-deb -x kphotoalbum_*.deb x )
  mkdir -p "$(dirname "$video")"
  cp "$unpack/x/usr/share/kphotoalbum/demo/movie.avi" "$video.part" && mv "$video.part" "$video"
  rm -rf "$unpack"
fi
export SPEECHPACK_TEST_VIDEO="$video"
# shellcheck disable=SC1091
SPEECHPACK_EXTRAS=dev,rir,plot,parquet,sentencepiece,lightning,torchdata,ray,wesep,s3,lhotse . "$repo/scripts/setup.sh"
cd "$repo"
# Compiled once up front: where the environment forbids writing bytecode (PYTHONDONTWRITEBYTECODE), every CLI
# subprocess the tests start would compile the project again (a third of their CPU time, measured).
python -m compileall -q -x '/\.(venv|cache|git)/' "$repo" >/dev/null
# Tests run in parallel processes (pytest-xdist), one more than the cores: most of a test's time is spent waiting
# (store servers, worker processes, subprocess CLIs), so the suite takes about half as long on 2 cores (measured).
# `bash scripts/test.sh -n 0` runs it in one process; other pytest arguments pass through.
workers="${SPEECHPACK_TEST_PROCESSES:-$(( $(nproc) + 1 ))}"
status=0
python -m pytest -q -n "$workers" "$@" || status=$?
echo
speechpack_hint
exit "$status"
