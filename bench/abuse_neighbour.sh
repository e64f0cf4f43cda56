#!/usr/bin/env bash
# The neighbour's `exec true` (and GET /healthz) through a real manager while each
# offender of the abuse suite (tests/integration/abuse_workloads.py: the hostile
# workloads and the stress-ng classes) runs in another sandbox, against a quiet
# baseline, per driver: p50/p99, the p99 ratio to the baseline and PASS/MISS against
# issue 14's bound (p99 <= 50 ms). subprocess always, runsc when `sbx doctor` passes
# (RUNSC=0 skips it), microvm with MICROVM=1 (slow under TCG). SAMPLES=60 per row.
# Needs root (and stress-ng: scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

drivers=(subprocess)
if [[ ${RUNSC:-1} != 0 ]] && "$SBX" doctor --driver runsc >/dev/null 2>&1; then drivers+=(runsc); fi
[[ ${MICROVM:-0} == 1 ]] && drivers+=(microvm)
port=$(free_port)
start_manager "$SBX" abuse "127.0.0.1:$port"
wait_healthy "http://127.0.0.1:$port" abuse
python3 bench/abuse_neighbour.py "http://127.0.0.1:$port" "$key" "${drivers[@]}"
