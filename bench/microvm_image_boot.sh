#!/usr/bin/env bash
# Create-to-ready of a micro-VM booting a Debian image (python3 in it) against
# the busybox guest (no --image), side by side in one run:
#   `sbx create --driver microvm --image DEBIAN` vs `sbx create --driver microvm`,
#   each returning once the guest's agent answers (target: <= 1.2x).
# The image is the tests' (tests/integration/test_microvm_image.py): mmdebstrap
# --variant=minbase --include=python3 bookworm, made once under
# /var/cache/sbx-test and laid out as a store entry, so its read-only disk is
# cached beside it (rootfs.ext4). The first create of an image pays for that
# disk (mkfs.ext4 -d): measured once on its own, then RUNS (default 5) cached
# creates of each kind, alternating; prints medians and the ratio.
# Needs root, QEMU, mmdebstrap and the guest image (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
RUNS=${RUNS:-5}
CACHE=${SBX_TEST_CACHE:-/var/cache/sbx-test}
[[ -x $SBX ]] || { echo "bench: build sbx first (scripts/setup.sh)" >&2; exit 1; }
command -v mmdebstrap >/dev/null || { echo "bench: apt-get install mmdebstrap" >&2; exit 1; }

recipe=(mmdebstrap --variant=minbase --include=python3 bookworm)
key=$(printf '%s' "${recipe[*]}" | sha256sum | cut -c1-12)
entry="$CACHE/microvm-debian-$key"
image="$entry/rootfs"
mkdir -p "$entry"
exec 9>"$entry/.lock"
flock 9
if [[ ! -d $image ]]; then
  echo "bench: making the Debian image ($(printf '%s ' "${recipe[@]}")) under $entry"
  tmp=$(mktemp -d "$entry/rootfs.tmp.XXXXXX")
  "${recipe[@]}" "$tmp" >/dev/null 2>&1 || { rm -rf "$tmp"; echo "bench: mmdebstrap failed" >&2; exit 1; }
  mv "$tmp" "$image"
fi
printf '{"id": "sha256:%s", "names": ["sbx-test-debian"], "source": {"recipe": "%s"}}\n' "$key" "${recipe[*]}" > "$entry/image.json"
flock -u 9

work=$(mktemp -d /tmp/sbx-bench-mvmimg.XXXXXX)
state="$work/state"
cleanup() {
  "$SBX" --state-dir "$state" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
# Prints the seconds one create took (and removes the sandbox).
create_s() {
  local t0 t1 id
  t0=$(now)
  id=$("$SBX" --state-dir "$state" create --driver microvm "$@")
  t1=$(now)
  "$SBX" --state-dir "$state" rm "$id" >/dev/null
  echo "$t1 - $t0" | bc
}

rm -f "$entry/rootfs.ext4"
first=$(create_s --image "$image")
echo "first create of the image (makes its disk, $(du -h --apparent-size "$entry/rootfs.ext4" | cut -f1) sparse," \
     "$(du -h "$entry/rootfs.ext4" | cut -f1) used): $first s"

img_times=() bb_times=()
for i in $(seq "$RUNS"); do
  img_times+=("$(create_s --image "$image")")
  bb_times+=("$(create_s)")
  echo "run $i: debian image ${img_times[-1]} s, busybox guest ${bb_times[-1]} s"
done
python3 - "${img_times[*]}" "${bb_times[*]}" "$first" <<'PY'
import statistics as st, sys
img, bb = ([float(x) for x in a.split()] for a in sys.argv[1:3])
first = float(sys.argv[3])
r = st.median(img) / st.median(bb)
print(f"\ncreate-to-ready  debian image {st.median(img):.2f} s  busybox guest {st.median(bb):.2f} s  "
      f"ratio {r:.2f}x (target <= 1.20x) {'PASS' if r <= 1.2 else 'MISS'}")
print(f"first create of an image (mkfs.ext4 -d of the rootfs, once per image): {first:.2f} s")
PY
