#!/usr/bin/env bash
# Installs what sbx needs from Debian's archive and builds it into ./build.
# Usage: scripts/setup.sh [--no-build]     (as root, on Debian 12)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git ccache lld-16
  libcli11-dev libfmt-dev nlohmann-json3-dev libyaml-cpp-dev libcurl4-openssl-dev
  catch2 libarchive-dev libseccomp-dev libmicrohttpd-dev libsqlite3-dev libhttp-parser-dev libboost-dev
  python3 python3-pytest python3-websockets python3-yaml procps iproute2 util-linux busybox-static
  libmnl-dev libnftables-dev nftables runsc
  qemu-system-x86 e2fsprogs cpio lz4 file
  mmdebstrap podman runc
  stress-ng
  clang libclang-rt-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Every sandbox create moves a process into its cgroups, and each move waits
# for an RCU grace period (7-30 ms on a nested VM such as CI's) unless a cgroup
# root is mounted with favordynmods (the kernel's trade: forks and exits take a
# slower lock; docs/speed.md). Until reboot; booting with cgroup_favordynmods=true
# keeps it. SBX_SETUP_CGROUP_AS_IS=1 leaves the host's cgroup mounts alone.
favor_cgroup_moves() {
  [[ ${SBX_SETUP_CGROUP_AS_IS:-0} == 1 || $(id -u) -ne 0 ]] && return 0
  awk '$3 ~ /^cgroup2?$/ && ("," $4 ",") ~ /,favordynmods,/ {found=1} END {exit !found}' /proc/mounts && return 0
  local mount opts
  # The v2 mount first; its options go along, since a cgroup2 remount drops those it is not given (nsdelegate).
  read -r mount opts < <(awk '$3 == "cgroup2" {print $2, $4; exit}' /proc/mounts) || true
  [[ -n ${mount:-} ]] || read -r mount opts < <(awk '$3 == "cgroup" {print $2, $4; exit}' /proc/mounts) || true
  [[ -n ${mount:-} ]] || return 0
  if mount -o "remount,$opts,favordynmods" "$mount" 2>/dev/null; then
    echo "setup: remounted $mount with favordynmods (no RCU wait per sandbox create; undone by a reboot)"
  else
    echo "setup: could not remount $mount with favordynmods; \`sbx doctor\` says what that costs" >&2
  fi
}
favor_cgroup_moves

# The deno driver's runtime: the pinned deno and pyodide npm packages.
scripts/setup-deno.sh

[[ "${1:-}" == "--no-build" ]] && exit 0
# ccache with paths relative to the checkout: a second clone (CI's fresh clone)
# reuses the objects of the first instead of compiling everything again.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSBX_WERROR=ON -DSBX_STARTUP_ORDER=ON \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build -j"$(nproc)"
# The micro-VM guest image (kernel from Debian's archive, busybox, /init).
scripts/build-guest.sh build/guest
# The default image of subprocess and runsc sandboxes (python3, python, the shell
# tools); the same recipe is a cache hit, so a second setup takes a moment.
build/sbx image build default
echo "setup: built build/sbx, build/sbx-agent, build/guest and the default image"
