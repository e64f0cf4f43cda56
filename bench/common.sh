# shellcheck shell=bash
# Sourced (from the repository's root) by every bench script: the binary, the
# peers and tools installed from Debian when missing, hyperfine's medians, and
# the figures bench/all.sh gathers into its table.
SBX=${SBX_BIN:-$PWD/build/sbx}

# need_pkgs PKG...: installs from Debian those not installed yet.
need_pkgs() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

need_sbx() { [[ -x $SBX ]] || { echo "bench: build sbx first (scripts/setup.sh)" >&2; exit 1; }; }

# median_ms JSON [N]: the median, in ms, of the Nth command (default the first) of a hyperfine export.
median_ms() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][int(sys.argv[2])]["median"]*1000)' "$1" "${2:-0}"
}

# figure KEY VALUE: hands one measured value to bench/all.sh (a line in $SBX_BENCH_FIGURES, when it is set).
figure() { [[ -z ${SBX_BENCH_FIGURES:-} ]] || echo "$1 $2" >>"$SBX_BENCH_FIGURES"; }
