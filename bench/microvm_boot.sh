#!/usr/bin/env bash
# Side by side, in one run, the micro-VM driver against bare QEMU booting the
# same kernel and initramfs with the same devices:
#   create-to-ready: `sbx create --driver microvm` (returns once the guest's
#     agent answers)  vs  qemu-system-x86_64 started by hand until the guest
#     prints the marker its /init prints just before it starts the agent
#     (target: <= 1.1x)
#   host memory per idle VM: RSS of the sandbox's QEMU and VM monitor  vs  the
#     bare QEMU's, both 10 s after boot (target: <= 1.1x)
# Runs RUNS (default 5) boots of each, alternating; prints medians and ratios.
# Needs root, QEMU and the guest image (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
RUNS=${RUNS:-5}
[[ -x $SBX ]] || { echo "bench: build sbx first (scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d /tmp/sbx-bench-mvm.XXXXXX)
state="$work/state"
cleanup() {
  "$SBX" --state-dir "$state" rm --all >/dev/null 2>&1 || true
  [[ -n "${bare_pid:-}" ]] && kill "$bare_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

sbx_times=() bare_times=() sbx_rss=() bare_rss=()
for i in $(seq "$RUNS"); do
  t0=$(now)
  id=$("$SBX" --state-dir "$state" create --driver microvm)
  t1=$(now)
  sbx_times+=("$(echo "$t1 - $t0" | bc)")
  dir="$state/sandboxes/$id"
  monitor=$(pgrep -f -- "--vm-monitor $dir/vm" | head -1)
  qemu=$(pgrep -P "$monitor" | head -1)
  # The bare run copies the sandbox's own QEMU command line, with the serial
  # console on stdout to watch for the marker and the agent's port on a socket
  # nobody connects to (QEMU listens itself instead of the VM monitor).
  mapfile -d '' argv < "/proc/$qemu/cmdline"
  if [[ $i == 1 ]]; then echo "sbx's QEMU: ${argv[*]:0:12} ..."; fi
  sleep 10
  sbx_rss+=("$(( $(rss_kb "$qemu") + $(rss_kb "$monitor") ))")
  cp "$dir/layer.img" "$work/bare.img"
  "$SBX" --state-dir "$state" rm "$id" >/dev/null
  bare=()
  skip=0
  for a in "${argv[@]}"; do
    if ((skip)); then skip=0; continue; fi
    case "$a" in
      -serial|-runas|-sandbox) skip=1; continue ;;
      socket,id=agent,*) a="socket,id=agent,path=$work/bare-serial.sock,server=on,wait=off" ;;
      file=*layer.img*) a="id=layer,file=$work/bare.img,format=raw,if=none,cache=unsafe" ;;
      id=layer,file=*) a="id=layer,file=$work/bare.img,format=raw,if=none,cache=unsafe" ;;
    esac
    bare+=("$a")
  done
  bare+=(-serial stdio)
  [[ -n "${BENCH_DEBUG:-}" ]] && echo "bare: ${bare[*]}"
  t0=$(now)
  coproc BARE { exec "${bare[@]}" 2>&1; }
  bare_pid=$BARE_PID
  while read -r line <&"${BARE[0]}"; do
    [[ -n "${BENCH_DEBUG:-}" ]] && echo "bare: $line"
    [[ "$line" == *"sbx-guest: starting the agent"* ]] && break
  done
  t1=$(now)
  bare_times+=("$(echo "$t1 - $t0" | bc)")
  sleep 10
  bare_rss+=("$(rss_kb "$bare_pid")")
  kill "$bare_pid"; wait "$bare_pid" 2>/dev/null || true
  bare_pid=
  echo "run $i: sbx create ${sbx_times[-1]} s, bare boot ${bare_times[-1]} s; RSS sbx ${sbx_rss[-1]} KiB, bare ${bare_rss[-1]} KiB"
done

python3 - "${sbx_times[*]}" "${bare_times[*]}" "${sbx_rss[*]}" "${bare_rss[*]}" <<'PY'
import statistics as st, sys
s, b, sr, br = ([float(x) for x in a.split()] for a in sys.argv[1:5])
boot = st.median(s) / st.median(b)
mem = st.median(sr) / st.median(br)
print(f"\ncreate-to-ready  sbx {st.median(s):.2f} s  bare QEMU {st.median(b):.2f} s  ratio {boot:.2f}x (target <= 1.10x) {'PASS' if boot <= 1.1 else 'MISS'}")
print(f"idle VM memory   sbx {st.median(sr)/1024:.0f} MiB  bare QEMU {st.median(br)/1024:.0f} MiB  ratio {mem:.2f}x (target <= 1.10x) {'PASS' if mem <= 1.1 else 'MISS'}")
PY
