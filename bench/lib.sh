# Sourced by the bench scripts that start managers (bench/fleet_*.sh, bench/healthz.sh):
# the binary, wrk, a work dir, a key, managers started on the subprocess driver and
# waited for, their cleanup (sandboxes removed, managers stopped), and wrk's numbers.
source bench/common.sh
DURATION=${DURATION:-5s}
need_pkgs wrk
work=$(mktemp -d "/tmp/sbx-bench-$(basename "$0" .sh).XXXXXX")
key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
manager_opts=()  # global options for every manager started (e.g. --config FILE)
servers=()
state_dirs=()
cleanup() {
  stop_managers
  for d in "${state_dirs[@]}"; do "$SBX" --state-dir "$d" rm --all >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 1" INT TERM PIPE  # so that the EXIT trap runs: no manager is left behind

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_manager BINARY NAME HOST:PORT [VAR=VALUE ...]: `serve` in the background with the
# key and those variables, state in $work/NAME, stderr in $work/NAME.log (wait_healthy waits).
start_manager() {
  local bin=$1 name=$2 listen=$3
  shift 3
  env ADMIN_API_KEY="$key" "$@" "$bin" "${manager_opts[@]}" --state-dir "$work/$name" serve --listen "$listen" \
    --driver subprocess >/dev/null 2>"$work/$name.log" &
  servers+=($!)
  state_dirs+=("$work/$name")
}

# wait_healthy URL NAME: until URL/healthz answers 2xx (10 s). A manager that answers but is
# not healthy yet (its probes run in the background, slow on a busy host) is used anyway, with a
# note; one that does not answer at all: its log, and exit 1.
wait_healthy() {
  local code=000
  for _ in $(seq 100); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-API-Key: $key" "$1/healthz") || true
    [[ $code == 2* ]] && return
    sleep 0.1
  done
  [[ $code != 000 ]] && echo "bench: note: $1/healthz still answers $code" >&2 && return
  echo "bench: the manager at $1 did not answer:" >&2
  cat "$work/$2.log" >&2
  exit 1
}

stop_managers() {
  for s in "${servers[@]}"; do kill -TERM "$s" 2>/dev/null; wait "$s" 2>/dev/null || true; done
  servers=()
}

# wrk_stats FILE -> "rps p50 p99" (ms; only 2xx answers count toward rps)
wrk_stats() { python3 bench/wrk_stats.py "$1"; }
