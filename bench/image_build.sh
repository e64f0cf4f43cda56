#!/usr/bin/env bash
# Image build time: `sbx image build` of one recipe three ways, in a private
# store and apt cache so the host's are untouched:
#   first   — an empty apt cache: everything downloaded from deb.debian.org
#   cached  — the image removed, the .debs kept: a rebuild that downloads nothing new
#   hit     — the same recipe again with the image stored: the id is known, nothing runs
# Prints the three times and the cached/first ratio. Needs root and mmdebstrap.
# PACKAGES (default python3-numpy) is the recipe; NAME the image's name.
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
PACKAGES=${PACKAGES:-python3-numpy}
NAME=${NAME:-bench}
[[ -x $SBX ]] || { echo "bench: build sbx first (scripts/setup.sh)" >&2; exit 1; }
command -v mmdebstrap >/dev/null || { echo "bench: apt-get install mmdebstrap" >&2; exit 1; }

work=$(mktemp -d /tmp/sbx-bench-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
printf 'images:\n  apt_cache: %s/apt\n' "$work" >"$work/config.yaml"
export SBX_CONFIG=$work/config.yaml SBX_IMAGES_DIR=$work/store SBX_STATE_DIR=$work/state

# Seconds (with ms) one build takes; its stderr goes to $work/last.log.
timed_build() {
  local t0 t1
  t0=$(date +%s%N)
  "$SBX" image build "$NAME" --packages "$PACKAGES" >"$work/id" 2>"$work/last.log" ||
    { cat "$work/last.log" >&2; exit 1; }
  t1=$(date +%s%N)
  echo "scale=2; ($t1 - $t0) / 1000000000" | bc
}

first=$(timed_build)
"$SBX" image rm "$NAME" >/dev/null
cached=$(timed_build)
hit=$(timed_build)
debs=$(find "$work/apt" -name '*.deb' | wc -l)
size=$(du -sh "$work/apt" | cut -f1)

echo "recipe: --packages $PACKAGES ($(cat "$work/id"))"
echo "first build (empty apt cache):  ${first} s"
echo "cached build (${debs} debs, ${size}): ${cached} s  ($(echo "scale=2; $cached / $first" | bc)x of first)"
echo "same recipe again (cache hit):  ${hit} s"
