#!/bin/bash
# CI: builds the manager image (scripts/build-manager-image.sh), runs it with
# the documented flags (docs/deploy.md) on a loopback port, runs the
# conformance suite against it through the remote driver, and removes the
# container and its volume. Extra arguments go to pytest (e.g. -k 'exec').
# Deselected: test_timeout_kills_daemonized_descendant, the known runsc gap
# (gVisor 20221219 has no child subreapers) that the test xfails for
# --driver runsc but cannot see behind the remote driver.
#
#   scripts/ci-manager-image.sh [PYTEST_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${SBX_MANAGER_IMAGE:-localhost/sbx-manager:latest}
name=sbx-manager-ci-$$
volume=$name-state
say() { echo "ci-manager-image: $*" >&2; }

start=$(date +%s)
scripts/build-manager-image.sh --tag "$tag" >/dev/null
built=$(date +%s)
key=$(openssl rand -hex 32)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# As conftest's own manager for the remote driver: no idle reaper, so a test
# decides when its sandboxes go.
config=$(mktemp /tmp/sbx-manager-ci.XXXXXX.yaml)
printf 'server:\n  reap_interval: 1h\n' >"$config"
chmod 0644 "$config"
cleanup() {
  podman stop -t 40 "$name" >/dev/null 2>&1 || true  # SIGTERM: the manager drains
  podman rm -f "$name" >/dev/null 2>&1 || true
  podman volume rm -f "$volume" >/dev/null 2>&1 || true
  rm -f "$config"
}
trap cleanup EXIT
# The run flags of docs/deploy.md; the first three lines are this host's
# (podman 4.3: crun refuses the hybrid cgroup layout, the default ulimits
# exceed the hard limits, and runc may not raise nproc past 32768).
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768  # runc is refused above this here
mapfile -t flags < <(grep -v '^#' deploy/image/run-flags.txt)
podman run -d --name "$name" \
  --runtime runc \
  --ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc \
  "${flags[@]}" \
  -v "$volume":/var/lib/sbx -v "$config":/etc/sbx/config.yaml:ro -e ADMIN_API_KEY="$key" -p 127.0.0.1:"$port":8000 "$tag" >/dev/null
url=http://127.0.0.1:$port
for _ in $(seq 100); do
  curl -fsS -H "X-API-Key: $key" "$url/healthz" >/dev/null 2>&1 && break
  podman container exists "$name" && [ "$(podman inspect -f '{{.State.Running}}' "$name")" = true ] || {
    podman logs "$name" >&2; say "the manager container exited"; exit 1; }
  sleep 0.2
done
say "manager up at $url ($((built - start)) s to build)"
rc=0
SBX_TEST_DRIVERS=remote SBX_TEST_MANAGER_URL=$url SBX_TEST_MANAGER_KEY=$key SBX_BIN=${SBX_BIN:-$PWD/build/sbx} \
  /usr/bin/python3 -m pytest -q -rs tests/integration/test_conformance.py \
  -k 'not test_timeout_kills_daemonized_descendant' "$@" || rc=$?
say "conformance against the container: exit $rc, $(($(date +%s) - built)) s after the build"
podman logs --tail 20 "$name" >&2 || true
exit $rc
