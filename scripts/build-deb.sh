#!/usr/bin/env bash
# Builds the Debian package sbx_VERSION_amd64.deb with CPack
# (cmake/Packaging.cmake) and prints its path.
#
# Usage: scripts/build-deb.sh [BUILD_DIR]     (default: build-deb; as root, on Debian 12)
#
# A new BUILD_DIR is configured for the package (RelWithDebInfo, warnings as
# errors, installed under /usr; cpack strips the binaries); an existing build
# tree keeps its settings (the tests package the tree they test). The micro-VM
# guest is built into BUILD_DIR/guest when missing. cpack runs again only when
# something that goes into the package is newer than the last .deb.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath -m "${1:-build-deb}")

for tool in cmake cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || { echo "build-deb: $tool is missing (apt-get install cmake dpkg-dev)" >&2; exit 1; }
done

export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
if [[ -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" >/dev/null
else
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSBX_WERROR=ON -DCMAKE_INSTALL_PREFIX=/usr \
    "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j"$(nproc)" >&2
[[ -f "$build/guest/vmlinuz" ]] || scripts/build-guest.sh "$build/guest" >&2

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
deb="$build/sbx_${version}_$(dpkg --print-architecture).deb"
# Everything the install rules take (CMakeLists.txt says which).
inputs=("$build/sbx" "$build/sbx-agent" "$build/sbx-agent-deno" "$build/guest" man completions deploy/systemd
        agent-deno/package.json agent-deno/package-lock.json scripts/setup-deno.sh CMakeLists.txt cmake/Packaging.cmake)
if [[ -f "$deb" ]] && [[ -z "$(find "${inputs[@]}" -newer "$deb" -print -quit)" ]]; then
  echo "build-deb: $deb is up to date" >&2
else
  (cd "$build" && cpack -G DEB >&2)
  [[ -f "$deb" ]] || { echo "build-deb: cpack made no $deb" >&2; exit 1; }
fi
echo "$deb"
