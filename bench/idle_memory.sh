#!/usr/bin/env bash
# What an idle sandbox costs in memory, side by side in one run (its cgroup's
# usage, SETTLE seconds after create):
#   an idle deno sandbox              (target: <= 64 MiB)
#   the same after one Python exec    (its interpreter stays loaded for the next)
#   an idle subprocess sandbox        (the floor: the agent and its cgroup)
# Needs root (cgroups) and the deno runtime (scripts/setup-deno.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
SETTLE=${SETTLE:-5}
need_sbx
work=$(mktemp -d /tmp/sbx-bench-mem.XXXXXX)
export SBX_STATE_DIR=$work/state USE_REMOTE_SANDBOX=false SBX_POOL=
trap '"$SBX" rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

# usage_mib ID: the memory its cgroup holds, from whichever hierarchy has the memory controller.
usage_mib() {
  local f
  for f in /sys/fs/cgroup/memory/sbx/*/"$1"/memory.usage_in_bytes /sys/fs/cgroup/sbx/*/"$1"/memory.current \
    /sys/fs/cgroup/unified/sbx/*/"$1"/memory.current; do
    [[ -r $f ]] && { python3 -c 'import sys; print(f"{int(open(sys.argv[1]).read()) / 1048576:.1f}")' "$f"; return; }
  done
  echo "bench: no memory cgroup for $1" >&2
  exit 1
}

deno=$("$SBX" create --driver deno)
sub=$("$SBX" create --driver subprocess)
sleep "$SETTLE"
deno_idle=$(usage_mib "$deno")
sub_idle=$(usage_mib "$sub")
"$SBX" exec "$deno" -- python3 -c 'pass'
sleep "$SETTLE"
deno_used=$(usage_mib "$deno")
printf '%-44s %8s MiB\n' "idle deno sandbox" "$deno_idle" "deno sandbox after one Python exec" "$deno_used" \
  "idle subprocess sandbox" "$sub_idle"
python3 -c 'import sys; m = float(sys.argv[1]); print(f"idle deno = {m:.0f} MiB  (target <= 64 MiB)", "PASS" if m <= 64 else "MISS")' "$deno_idle"
figure memory.deno "$deno_idle"
figure memory.subprocess "$sub_idle"
