#!/usr/bin/env bash
# The runsc (gVisor) driver, side by side with runsc itself, in one run:
#   create-to-ready  `sbx create --driver runsc`  vs  `runsc run --detach` of the
#                    same bundle until its agent listens           (target: <= 1.1x)
#   warm exec        `sbx exec ID -- /bin/true`   vs  `runsc exec` into the same
#                    running container                             (target: <= 0.5x)
# Prints each median and the ratios. Needs root and runsc; installs hyperfine.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
RUNS=${RUNS:-30}
CREATES=${CREATES:-10}
need_sbx
need_pkgs hyperfine
command -v runsc >/dev/null || { echo "bench: runsc is not installed (apt-get install runsc)" >&2; exit 1; }

work=$(mktemp -d /tmp/sbx-bench-runsc.XXXXXX)
state="$work/state"
export SBX_STATE_DIR=$state USE_REMOTE_SANDBOX=false
cleanup() {
  "$SBX" rm --all >/dev/null 2>&1 || true
  for c in $(runsc --root "$work/peer-root" list -q 2>/dev/null); do
    runsc --root "$work/peer-root" delete --force "$c" >/dev/null 2>&1 || true
  done
  umount -l "$work"/peer-* 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

python3 - "$SBX" "$work" "$CREATES" <<'PY'
"""create-to-ready: sbx create vs runsc run --detach of sbx's own bundle."""
import json, os, shutil, statistics, subprocess, sys, time
sbx, work, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
state = os.environ["SBX_STATE_DIR"]

def sbx_create():
    t0 = time.monotonic()
    sid = subprocess.run([sbx, "create", "--driver", "runsc"], check=True, capture_output=True, text=True).stdout.strip()
    return time.monotonic() - t0, sid

# One warm-up sandbox fills the host-view skeleton and the platform/statx caches.
_, keep = sbx_create()
rec = json.load(open(f"{state}/sandboxes/{keep}/record.json")) if os.path.exists(f"{state}/sandboxes/{keep}/record.json") else {}
platform = (rec.get("driver_data") or {}).get("platform", "ptrace")
spec = json.load(open(f"{state}/sandboxes/{keep}/bundle/config.json"))

sbx_times = []
for _ in range(n):
    dt, sid = sbx_create()
    sbx_times.append(dt)
    subprocess.run([sbx, "rm", sid], check=True, capture_output=True)

# The peer: the same config.json (same root, binds and agent as init), its own
# share directory for the agent's socket, started by runsc directly.
peer_root = f"{work}/peer-root"
os.makedirs(peer_root, exist_ok=True)
peer_times = []
for i in range(n):
    bundle, share = f"{work}/peer-bundle-{i}", f"{work}/peer-share-{i}"
    os.makedirs(bundle); os.makedirs(share)
    s = json.loads(json.dumps(spec))
    for m in s["mounts"]:
        if m["destination"] == "/.sbx":
            m["source"] = share
    json.dump(s, open(f"{bundle}/config.json", "w"))
    name = f"peer-{os.getpid()}-{i}"
    argv = ["runsc", "--root", peer_root, "--platform", platform, "--network=none", "--host-uds=all",
            "--ignore-cgroups", "--overlay2=none", "run", "--detach", "--bundle", bundle, name]
    t0 = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(f"{share}/agent.sock"):
        time.sleep(0.0002)
    peer_times.append(time.monotonic() - t0)
    subprocess.run(["runsc", "--root", peer_root, "delete", "--force", name], capture_output=True)

a, b = statistics.median(sbx_times) * 1000, statistics.median(peer_times) * 1000
print(f"== create-to-ready ({n} each, platform {platform})")
print(f"{'sbx create --driver runsc':34s} {a:8.1f} ms")
print(f"{'runsc run --detach (same bundle)':34s} {b:8.1f} ms")
r = a / b
print(f"create ratio sbx/runsc run     = {r:.2f}x  (target <= 1.10x) {'PASS' if r <= 1.1 else 'MISS'}")
open(f"{work}/keep", "w").write(f"{keep}\n{platform}\n")
open(f"{work}/create", "w").write(f"{a} {b}\n")
PY

read -r id platform < <(paste -sd' ' "$work/keep")
read -r create_sbx create_peer <"$work/create"
figure runsc.create "$create_sbx"
figure runsc.create_peer "$create_peer"
echo "== warm exec into a running sandbox ($RUNS runs)"
hyperfine -N --warmup 5 --runs "$RUNS" --export-json "$work/warm-sbx.json" "$SBX exec $id -- /bin/true" >/dev/null
hyperfine -N --warmup 3 --runs "$RUNS" --export-json "$work/warm-runsc.json" \
  "runsc --root $state/runsc --platform $platform --ignore-cgroups exec $id /bin/true" >/dev/null
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
m = lambda n: json.load(open(f"{w}/{n}.json"))["results"][0]["median"] * 1000
a, b = m("warm-sbx"), m("warm-runsc")
print(f"{'sbx exec ID (runsc driver)':34s} {a:8.2f} ms")
print(f"{'runsc exec (same container)':34s} {b:8.2f} ms")
r = a / b
print(f"warm exec ratio sbx/runsc exec = {r:.2f}x  (target <= 0.50x) {'PASS' if r <= 0.5 else 'MISS'}")
PY
figure runsc.warm "$(median_ms "$work/warm-sbx.json")"
figure runsc.warm_peer "$(median_ms "$work/warm-runsc.json")"
