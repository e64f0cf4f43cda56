#!/usr/bin/env bash
# Writes cli/startup.order: the functions sbx runs on its start path, in the
# order lld packs them (cli/CMakeLists.txt; docs/speed.md, "Process start").
# Each 64 KB of code a call touches is a page fault, so the functions that
# `sbx --version`, a warm `sbx exec`, `sbx ls` and `sbx exec --help` run are
# listed first to last, with every alias of each (a constructor's C1 and C2
# names share one body, and valgrind names only one of them).
#
# Usage: scripts/startup-order.sh [BUILD_DIR]   (root; default build; installs valgrind if missing)
# Run it again when the start path changes: names it lists that no longer
# exist are skipped by the linker, and functions it does not list are
# placed after those it does, so a stale list costs page faults, never
# correctness.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
sbx=$build/sbx
[[ -x $sbx ]] || { echo "startup-order: no $sbx: cmake --build $build" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "startup-order: needs root (it starts a subprocess sandbox)" >&2; exit 1; }
if ! command -v valgrind >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null
fi
work=$(mktemp -d /tmp/sbx-order.XXXXXX)
cleanup() {
  "$sbx" --state-dir "$work/state" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$sbx" --state-dir "$work/state" create --driver subprocess --name order >/dev/null

# trace NAME ARGS...: the functions `sbx ARGS` runs, mangled, into $work/cg.NAME.
trace() {
  local name=$1
  shift
  if ! valgrind --tool=callgrind --demangle=no --compress-strings=no --compress-pos=no \
      --callgrind-out-file="$work/cg.$name" "$sbx" "$@" >/dev/null 2>"$work/vg.$name"; then
    echo "startup-order: sbx $* failed under valgrind:" >&2
    cat "$work/vg.$name" >&2
    exit 1
  fi
}
trace version --version
trace exec --state-dir "$work/state" exec order -- /bin/true
trace ls --state-dir "$work/state" ls
trace help exec --help

nm --defined-only "$sbx" >"$work/nm"
python3 - "$work/nm" "$work"/cg.{version,exec,ls,help} >cli/startup.order <<'PY'
import collections, sys
names, at = collections.defaultdict(set), collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 3 and f[1] in "tTwWi":
        names[f[2]].add(f[0])
        at[f[0]].append(f[2])
print("# The functions on sbx's start path, those of --version first: lld packs them together")
print("# (cli/CMakeLists.txt). Written by scripts/startup-order.sh; do not edit.")
seen = set()
for trace in sys.argv[2:]:
    for line in open(trace):
        if not line.startswith("fn="):
            continue
        for address in sorted(names.get(line[3:].strip(), ())):
            for name in at[address]:
                if name not in seen:
                    seen.add(name)
                    print(name)
PY
echo "startup-order: cli/startup.order lists $(grep -vc '^#' cli/startup.order) functions" >&2
