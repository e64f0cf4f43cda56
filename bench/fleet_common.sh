# Sourced by bench/fleet_*.sh: a simulated fleet on loopback, configured as the
# Kubernetes manifests configure the StatefulSet (manager n on 127.0.n.1, one
# port, SBX_FLEET_PEER_URL=http://127.0.{n}.1:PORT), and wrk's numbers.
SBX=${SBX_BIN:-$PWD/build/sbx}
DURATION=${DURATION:-5s}
dpkg-query -W -f='${Status}' wrk 2>/dev/null | grep -q "install ok installed" ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
work=$(mktemp -d /tmp/sbx-bench-fleet.XXXXXX)
key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'server:\n  max_execs_per_key: 1000\n  reap_interval: 1h\n' >"$work/config.yaml"
servers=()
cleanup() {
  for s in "${servers[@]}"; do kill -TERM "$s" 2>/dev/null; wait "$s" 2>/dev/null || true; done
  for d in "$work"/m*; do [ -d "$d" ] && "$SBX" --state-dir "$d" rm --all >/dev/null 2>&1; done
  rm -rf "$work"
}
trap cleanup EXIT

# start_fleet SIZE: managers 0..SIZE-1 (SIZE 1 = a lone manager, no fleet config)
start_fleet() {
  local size=$1 n
  for ((n = 0; n < size; n++)); do
    local fleet=()
    ((size > 1)) && fleet=(SBX_FLEET_SIZE=$size SBX_FLEET_SELF=$n "SBX_FLEET_PEER_URL=http://127.0.{n}.1:$port")
    env ADMIN_API_KEY="$key" "${fleet[@]}" "$SBX" --config "$work/config.yaml" --state-dir "$work/m$size-$n" serve \
      --listen "127.0.$n.1:$port" --driver subprocess 2>"$work/m$size-$n.log" &
    servers+=($!)
  done
  for ((n = 0; n < size; n++)); do
    for _ in $(seq 100); do curl -fs -H "X-API-Key: $key" "http://127.0.$n.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  done
}

stop_fleet() {
  for s in "${servers[@]}"; do kill -TERM "$s" 2>/dev/null; wait "$s" 2>/dev/null || true; done
  servers=()
}

# create_on N: a persistent sandbox made through manager N; prints its id
create_on() {
  curl -fs -H "X-API-Key: $key" -X POST -d '{"persistent": true}' "http://127.0.$1.1:$port/v1/sandboxes" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}

# wrk_lua FILE METHOD [BODY]
wrk_lua() {
  {
    echo "wrk.method = \"$2\""
    [ -n "${3:-}" ] && echo "wrk.body = '$3'" && echo 'wrk.headers["Content-Type"] = "application/json"'
    echo "wrk.headers[\"X-API-Key\"] = \"$key\""
  } >"$1"
}

# wrk_stats FILE -> "rps p50 p99" (ms; only 2xx answers count toward rps)
wrk_stats() { python3 bench/wrk_stats.py "$1"; }
