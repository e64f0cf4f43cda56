#!/usr/bin/env bash
# Writes the lists of functions lld packs together (docs/speed.md, "Process
# start"), from what valgrind's callgrind sees them run:
#   cli/startup.order   what `sbx --version`, a warm `sbx exec`, `sbx ls` and
#                       `sbx exec --help` run, those of --version first;
#   agent/exec.order    what an exec's shim (a fork of sbx-agent) and the
#                       command's vfork run up to its exec, then what the agent
#                       runs for the exec.
# Each 64 KB of code a process touches is a page fault, and a fork's child
# faults in all the code it runs again. Every alias of a function is listed (a
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
sbx=$build/sbx agent=$build/sbx-agent
[[ -x $sbx && -x $agent ]] || { echo "startup-order: no $sbx or $agent: cmake --build $build" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "startup-order: needs root (it starts a subprocess sandbox)" >&2; exit 1; }
if ! command -v valgrind >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null
fi
work=$(mktemp -d /tmp/sbx-order.XXXXXX)
vg_pid=
cleanup() {
  [[ -n $vg_pid ]] && kill "$vg_pid" 2>/dev/null
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

# The agent on a socket of its own, confined as in a sandbox, serving three
# execs of the request `sbx exec` sends. Counts start again where a shim
# begins (run_shim) and, in the agent, at each exec (spawn), so each trace
# holds one exec's functions; the command's vfork is written out at its
# execve, which the trace then misses and the list names.
mkdir "$work/agent"
"${callgrind[@]}" --callgrind-out-file="$work/agent/cg.%p" --zero-before='*8run_shim*' \
  --zero-before='_ZN3sbx5agent5spawnE*' --dump-before=execve \
  "$agent" --listen "$work/agent/sock" 2>"$work/agent/vg.log" &
vg_pid=$!
for _ in $(seq 300); do [[ -S $work/agent/sock ]] && break; sleep 0.1; done
python3 - "$work/agent/sock" <<'PY'
import sys
sys.path.insert(0, "tests/integration")
from agent_proto import AgentConn
request = {"cmd": ["/bin/true"], "cwd": "/", "stdin": False, "timeout_ms": 0,
           "env": {"HOME": "/root", "LANG": "C.UTF-8", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
for _ in range(3):
    conn = AgentConn(sys.argv[1])
    conn.send("exec", 1, request)
    while (reply := conn.recv(1, timeout=120))[0] != "exit":
        pass
    conn.close()
PY
kill -TERM "$vg_pid"
wait "$vg_pid" || true
agent_pid=$vg_pid vg_pid=

# order NM TRACE|--also NAME...: the functions the traces ran code of, and
# those named, first seen first, with their aliases and CPU variants.
order() {
  python3 - "$@" <<'PY'
import collections, re, sys
nm, args = sys.argv[1], sys.argv[2:]
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
while args:
    trace = args.pop(0)
    if trace == "--also":
        ran.append(args.pop(0))
        continue
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
nm --defined-only "$agent" >"$work/nm.agent"
{
  echo "# The functions on sbx's start path, those of --version first: lld packs them together"
  echo "# (cli/CMakeLists.txt). Written by scripts/startup-order.sh; do not edit."
  order "$work/nm.sbx" "$work"/cg.{version,exec,ls,help}
} >cli/startup.order
shims=$(find "$work/agent" -name 'cg.*' ! -name "cg.$agent_pid" | sort)
[[ -f $work/agent/cg.$agent_pid && $(wc -l <<<"$shims") -ge 3 ]] || {
  echo "startup-order: the agent left no traces of its shims" >&2
  cat "$work/agent/vg.log" >&2
  exit 1
}
{
  echo "# The functions an exec's shim and the command's vfork run, then the agent's for the exec:"
  echo "# lld packs them together (agent/CMakeLists.txt). Written by scripts/startup-order.sh; do not edit."
  # Then what the shims ran that their traces cannot show: the fork they
  # return from before the counts start, and the execve the command's vfork
  # ends in. The agent's own trace last: its children are the ones that fault.
  # shellcheck disable=SC2086  # one trace per line, no spaces in the paths
  order "$work/nm.agent" $shims --also fork --also _Fork --also execve "$work/agent/cg.$agent_pid"
} >agent/exec.order
echo "startup-order: cli/startup.order lists $(grep -vc '^#' cli/startup.order) functions," \
  "agent/exec.order $(grep -vc '^#' agent/exec.order)" >&2
