#!/usr/bin/env bash
# Throughput of `sbx cp` of a 512 MiB file into a sandbox, side by side in one run:
#   `cp` on the host disk (the reference), `sbx cp` on the local subprocess
#   driver (target: >= 0.5x the host's cp), and `sbx cp` through a manager
#   (`sbx serve` on loopback, subprocess driver), both directions.
# Prints MB/s and the ratio to the host's cp. Needs root (the subprocess driver).
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
SIZE_MIB=${SIZE_MIB:-512}
ROUNDS=${ROUNDS:-3}
work=$(mktemp -d /tmp/sbx-bench-cp.XXXXXX)
key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'server:\n  reap_interval: 1h\n' >"$work/config.yaml"
ADMIN_API_KEY=$key "$SBX" --config "$work/config.yaml" --state-dir "$work/server" serve --listen 127.0.0.1:$port \
  --driver subprocess 2>"$work/serve.log" &
server=$!
local_env=(env USE_REMOTE_SANDBOX=false LOCAL_SANDBOX_BACKEND=subprocess "$SBX" --state-dir "$work/local")
remote_env=(env USE_REMOTE_SANDBOX=true SANDBOX_MANAGER_URL=http://127.0.0.1:$port ADMIN_API_KEY=$key
  "$SBX" --state-dir "$work/client")
cleanup() {
  kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true
  "$SBX" --state-dir "$work/server" rm --all >/dev/null 2>&1 || true
  "$SBX" --state-dir "$work/local" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 50); do curl -fs -H "X-API-Key: $key" "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done

head -c $((SIZE_MIB << 20)) /dev/urandom >"$work/src.bin"
sync
limits=(--memory "$((SIZE_MIB * 2 + 512))M" --disk "$((SIZE_MIB * 2 + 512))M")
local_id=$("${local_env[@]}" create "${limits[@]}" | tail -1)
remote_id=$("${remote_env[@]}" create "${limits[@]}" | tail -1)

calc() { python3 -c "print($1)"; }
# Best of ROUNDS wall-clock seconds of a command (each run writes its target afresh).
best() {
  local b="" t0 t1 s
  for _ in $(seq "$ROUNDS"); do
    "$@" rm-target
    t0=$(date +%s.%N)
    "$@" run
    t1=$(date +%s.%N)
    s=$(calc "$t1 - $t0")
    if [ -z "$b" ] || [ "$(calc "$s < $b")" = True ]; then b=$s; fi
  done
  echo "$b"
}
host_cp() { case $1 in rm-target) rm -f "$work/dst.bin";; run) cp "$work/src.bin" "$work/dst.bin"; sync "$work/dst.bin";; esac; }
local_in() { case $1 in rm-target) "${local_env[@]}" exec "$local_id" -- rm -f /tmp/in.bin;; run) "${local_env[@]}" cp "$work/src.bin" "$local_id:/tmp/in.bin";; esac; }
local_out() { case $1 in rm-target) rm -f "$work/out.bin";; run) "${local_env[@]}" cp "$local_id:/tmp/in.bin" "$work/out.bin";; esac; }
remote_in() { case $1 in rm-target) "${remote_env[@]}" exec "$remote_id" -- rm -f /tmp/in.bin;; run) "${remote_env[@]}" cp "$work/src.bin" "$remote_id:/tmp/in.bin";; esac; }
remote_out() { case $1 in rm-target) rm -f "$work/out.bin";; run) "${remote_env[@]}" cp "$remote_id:/tmp/in.bin" "$work/out.bin";; esac; }

echo "== cp of a $SIZE_MIB MiB file (best of $ROUNDS)"
ref=$(best host_cp)
printf '%-34s %8s %8s\n' what MB/s ratio
row() { printf '%-34s %8.1f %7.2fx\n' "$1" "$(calc "$SIZE_MIB * 1.048576 / $2")" "$(calc "$ref / $2")"; }
row "cp on the host disk" "$ref"
li=$(best local_in); row "sbx cp into (subprocess, local)" "$li"
row "sbx cp out of (subprocess, local)" "$(best local_out)"
row "sbx cp into (through the manager)" "$(best remote_in)"
row "sbx cp out of (through the manager)" "$(best remote_out)"
ratio=$(calc "$ref / $li")
if [ "$(calc "$ratio >= 0.5")" = True ]; then verdict=met; else verdict=missed; fi
printf 'target: sbx cp into a local sandbox >= 0.5x the host cp: %.2fx (%s)\n' "$ratio" "$verdict"
