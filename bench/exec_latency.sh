#!/usr/bin/env bash
# Side by side, in one run:
#   one-shot  `sbx exec --rm -- /bin/true`   vs  bwrap with all namespaces  (target: <= 1.0x)
#   warm      `sbx exec ID -- /bin/true`     vs  `crun exec` into a running container (target: <= 0.4x)
#   and the warm exec's floor on this host: bench/exec_floor.c, a client that
#   asks a waiting server to fork, exec and wait /bin/true, with no isolation
# Prints each median and the ratios. Needs root; installs bubblewrap, crun,
# hyperfine, busybox-static and gcc (for exec_floor.c) from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
RUNS=${RUNS:-200}
need_sbx
need_pkgs bubblewrap crun hyperfine busybox-static gcc

work=$(mktemp -d /tmp/sbx-bench.XXXXXX)
state="$work/state"
floor_server=
cleanup() {
  [[ -z $floor_server ]] || kill "$floor_server" 2>/dev/null || true
  "$SBX" --state-dir "$state" rm --all >/dev/null 2>&1 || true
  unshare -m sh -c "umount /sys/fs/cgroup/unified 2>/dev/null; crun kill bench-$$ KILL; crun delete -f bench-$$" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

run() { # name json command
  hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$2" "$3" >/dev/null
  printf '%-34s %8.2f ms\n' "$1" "$(median_ms "$2")"
}

echo "== one-shot: a new sandbox, /bin/true, removed ($RUNS runs)"
run "sbx exec --rm (subprocess)" "$work/oneshot-sbx.json" \
  "$SBX --state-dir $state exec --rm --driver subprocess -- /bin/true"
run "bwrap --unshare-all" "$work/oneshot-bwrap.json" \
  "bwrap --unshare-all --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp /bin/true"

echo "== warm exec into a running sandbox/container ($RUNS runs)"
id=$("$SBX" --state-dir "$state" create --driver subprocess)
run "sbx exec ID (subprocess)" "$work/warm-sbx.json" "$SBX --state-dir $state exec $id -- /bin/true"
cc -O2 -Wall -o "$work/exec_floor" bench/exec_floor.c
"$work/exec_floor" serve "$work/floor.sock" &
floor_server=$!
for _ in $(seq 50); do [[ -S $work/floor.sock ]] && break; sleep 0.05; done
run "floor: exec_floor client" "$work/warm-floor.json" "$work/exec_floor $work/floor.sock"
kill "$floor_server"
floor_server=

# crun: a busybox rootfs; crun does not cope with this host's hybrid cgroup
# layout, so it runs in a mount namespace with the v2 mount hidden.
bundle="$work/bundle"
mkdir -p "$bundle/rootfs/bin"
cp /bin/busybox "$bundle/rootfs/bin/"
for c in sh true sleep; do ln -s busybox "$bundle/rootfs/bin/$c"; done
(cd "$bundle" && crun spec && python3 - <<'PY'
import json
c = json.load(open("config.json"))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/sleep", "100000"]
json.dump(c, open("config.json", "w"))
PY
)
unshare -m bash -c "
  umount /sys/fs/cgroup/unified
  crun run -d --bundle '$bundle' bench-$$ >/dev/null
  hyperfine -N --warmup 20 --runs $RUNS --export-json '$work/warm-crun.json' 'crun exec bench-$$ /bin/true' >/dev/null
  crun kill bench-$$ KILL; sleep 0.2; crun delete -f bench-$$
"
printf '%-34s %8.2f ms\n' "crun exec" "$(median_ms "$work/warm-crun.json")"
for f in oneshot-sbx oneshot-bwrap warm-sbx warm-crun warm-floor; do figure "${f/-/.}" "$(median_ms "$work/$f.json")"; done

python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
m = lambda n: json.load(open(f"{w}/{n}.json"))["results"][0]["median"]
one = m("oneshot-sbx") / m("oneshot-bwrap")
warm = m("warm-sbx") / m("warm-crun")
print(f"\none-shot ratio sbx/bwrap     = {one:.2f}x  (target <= 1.00x) {'PASS' if one <= 1.0 else 'MISS'}")
print(f"warm exec ratio sbx/crun exec = {warm:.2f}x  (target <= 0.40x) {'PASS' if warm <= 0.4 else 'MISS'}")
print(f"warm exec floor/crun exec     = {m('warm-floor') / m('warm-crun'):.2f}x  (no isolation, no protocol)")
PY
