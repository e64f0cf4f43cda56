#!/usr/bin/env bash
# Writes the list of functions lld packs together in sbx (docs/speed.md,
# "Process start"), cli/startup.order, from what valgrind's callgrind sees
# `sbx --version`, a warm `sbx exec`, `sbx ls` and `sbx exec --help` run,
# those of --version first. Each 64 KB of code a process touches is a page
# fault, paid again by every short-lived call. Every alias of a function is listed (a
# constructor's C1 and C2 names share one body, and valgrind names only one),
# and every CPU variant of a string function of glibc (valgrind's CPU is not
# the host's).
#
# Usage: scripts/startup-order.sh [BUILD_DIR]   (root; default build; installs valgrind if missing)
# Run it again when those paths change: names it lists that no longer exist
# are skipped by the linker, and functions it does not list are placed after
# those it does, so a stale list costs page faults, never correctness.
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
callgrind=(valgrind --tool=callgrind --demangle=no --compress-strings=no --compress-pos=no)

# trace NAME ARGS...: the functions `sbx ARGS` runs, into $work/cg.NAME.
trace() {
  local name=$1
  shift
  if ! "${callgrind[@]}" --callgrind-out-file="$work/cg.$name" "$sbx" "$@" >/dev/null 2>"$work/vg.$name"; then
    echo "startup-order: sbx $* failed under valgrind:" >&2
    cat "$work/vg.$name" >&2
    exit 1
  fi
}
"$sbx" --state-dir "$work/state" create --driver subprocess --name order >/dev/null
trace version --version
trace exec --state-dir "$work/state" exec order -- /bin/true
trace ls --state-dir "$work/state" ls
trace help exec --help

# order NM TRACE...: the functions the traces ran code of, first seen first,
# with their aliases and CPU variants.
order() {
  python3 - "$@" <<'PY'
import collections, re, sys
nm, traces = sys.argv[1], sys.argv[2:]
names, at = collections.defaultdict(set), collections.defaultdict(list)
for line in open(nm):
    f = line.split()
    if len(f) == 3 and f[1] in "tTwWi":
        names[f[2]].add(f[0])
        at[f[0]].append(f[2])
variant = re.compile(r"^(__\w+?)_(avx2|evex)(_rtm|_unaligned\w*)?$")
seen = set()
def emit(name):
    for address in sorted(names.get(name, ())):
        for alias in at[address]:
            if alias not in seen:
                seen.add(alias)
                print(alias)
    if m := variant.match(name):
        for other in sorted(names):
            if other.startswith(m.group(1) + "_") and variant.match(other) and other not in seen:
                seen.add(other)
                print(other)
ran = []
for trace in traces:
    fn, after_call = None, False
    for line in open(trace):
        if line.startswith("fn="):
            fn, after_call = line[3:].strip(), False
        elif line.startswith("calls="):
            after_call = True  # the next cost line is the call's, not fn's own
        elif fn and line[:1] in "0123456789+-*":
            if not after_call:
                ran.append(fn)
            after_call = False
for name in dict.fromkeys(ran):
    emit(name)
PY
}
nm --defined-only "$sbx" >"$work/nm.sbx"
{
  echo "# The functions on sbx's start path, those of --version first: lld packs them together"
  echo "# (cli/CMakeLists.txt). Written by scripts/startup-order.sh; do not edit."
  order "$work/nm.sbx" "$work"/cg.{version,exec,ls,help}
} >cli/startup.order
echo "startup-order: cli/startup.order lists $(grep -vc '^#' cli/startup.order) functions" >&2
