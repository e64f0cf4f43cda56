# Sourced by bench/fleet_*.sh: a simulated fleet on loopback, configured as the
# Kubernetes manifests configure the StatefulSet (manager n on 127.0.n.1, one
# port, SBX_FLEET_PEER_URL=http://127.0.{n}.1:PORT); the rest is bench/lib.sh's.
source bench/lib.sh
port=$(free_port)
printf 'server:\n  max_execs_per_key: 1000\n  reap_interval: 1h\n' >"$work/config.yaml"
manager_opts=(--config "$work/config.yaml")

# start_fleet SIZE: managers 0..SIZE-1 (SIZE 1 = a lone manager, no fleet config)
start_fleet() {
  local size=$1 n
  for ((n = 0; n < size; n++)); do
    local fleet=()
    ((size > 1)) && fleet=(SBX_FLEET_SIZE=$size SBX_FLEET_SELF=$n "SBX_FLEET_PEER_URL=http://127.0.{n}.1:$port")
    start_manager "$SBX" "m$size-$n" "127.0.$n.1:$port" "${fleet[@]}"
  done
  for ((n = 0; n < size; n++)); do wait_healthy "http://127.0.$n.1:$port" "m$size-$n"; done
}

stop_fleet() { stop_managers; }

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
