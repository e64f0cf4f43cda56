#!/usr/bin/env bash
# Process start, side by side in one run (hyperfine -N, medians; issue 16's first row):
#   sbx --version     (every sbx call pays this before it does anything)
#   /bin/true         (the floor: exec, the dynamic loader and libc)
# target: sbx <= 1.3x /bin/true. With SBX_BEFORE=path/to/an/older/sbx, that binary too.
# Installs hyperfine from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
RUNS=${RUNS:-500}
need_sbx
need_pkgs hyperfine
out=$(mktemp /tmp/sbx-bench-start.XXXXXX.json)
trap 'rm -f "$out"' EXIT
cmds=("$SBX --version" "/bin/true")
[[ -n ${SBX_BEFORE:-} ]] && cmds+=("$SBX_BEFORE --version")
hyperfine -N -w 50 -r "$RUNS" --export-json "$out" "${cmds[@]}" >/dev/null 2>&1
figure start.sbx "$(median_ms "$out" 0)"
figure start.floor "$(median_ms "$out" 1)"
python3 - "$out" <<'PY'
import json, sys
r = {x["command"]: x["median"] * 1000 for x in json.load(open(sys.argv[1]))["results"]}
cmds = list(r)
sbx, floor = r[cmds[0]], r[cmds[1]]
print(f"{'sbx --version':<28} {sbx:6.2f} ms")
print(f"{'/bin/true (floor)':<28} {floor:6.2f} ms")
ratio = sbx / floor
print(f"ratio {ratio:.2f}x  target <= 1.3x  {'PASS' if ratio <= 1.3 else 'MISS'}")
if len(cmds) > 2:
    print(f"{'before: ' + cmds[2]:<28} {r[cmds[2]]:6.2f} ms ({r[cmds[2]] / sbx:.2f}x now)")
PY
