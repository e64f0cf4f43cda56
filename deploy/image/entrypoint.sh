#!/bin/sh
# The manager container's main process (under tini): sbx serve on the runsc
# driver, on $PORT (Cloud Run sets it; 8000 otherwise), with the admin key from
# ADMIN_API_KEY or from the file ADMIN_API_KEY_FILE names (a mounted secret).
# Arguments are passed on to `sbx serve` (e.g. --log-format json).
set -eu
port=${PORT:-8000}
# A container's /dev holds the loop devices that existed when it started;
# the kernel makes more on demand (LOOP_CTL_GET_FREE) but they do not appear
# here, so make the nodes now (needs CAP_MKNOD and the device cgroup's
# allowance for block major 7, which --privileged or --device gives).
n=0
while [ "$n" -lt "${SBX_LOOP_DEVICES:-128}" ]; do
  [ -e /dev/loop$n ] || mknod -m 0660 /dev/loop$n b 7 $n 2>/dev/null || break
  n=$((n + 1))
done
# The state root is a directory of the volume named by an id kept in the
# volume: on a cgroup v1 host the container sees the host's cgroup tree, where
# sbx keeps each state root's sandboxes under a scope named by the state
# root's path, so two manager containers (or a host manager) with the same
# path would take each other's groups for orphans. A restart with the same
# volume finds the same id, the same sandboxes and the same scope.
volume=${SBX_STATE_DIR:-/var/lib/sbx}
[ -s "$volume/manager-id" ] || od -An -N6 -tx1 /dev/urandom | tr -d ' \n' >"$volume/manager-id"
SBX_STATE_DIR=$volume/$(cat "$volume/manager-id")
export SBX_STATE_DIR
if [ -n "${ADMIN_API_KEY_FILE:-}" ]; then
  set -- --api-key-file "$ADMIN_API_KEY_FILE" "$@"
fi
exec /usr/bin/sbx serve --driver runsc --listen "0.0.0.0:$port" "$@"
