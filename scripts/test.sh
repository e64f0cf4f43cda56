#!/usr/bin/env bash
# The whole test suite: warnings-as-errors build, unit tests, the unit tests
# again under ASan/UBSan, the fuzz targets for a bounded time, man pages and completions in step with the flags,
# and the integration suite against real sandboxes.
# Usage: scripts/test.sh      (as root, on Debian 12; installs what it needs)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
# promtool (Debian's prometheus package) checks /metrics in the manager tests.
if ! command -v promtool >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

echo "== unit tests"
ctest --test-dir build --output-on-failure

echo "== unit tests under ASan/UBSan"
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSBX_WERROR=ON -DSBX_SANITIZE=ON \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build-asan -j"$(nproc)" --target sbx_unit_tests
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure

echo "== fuzzing"
# Each libFuzzer target of tests/fuzz for SBX_FUZZ_SECONDS (12 s here; longer
# runs: SBX_FUZZ_SECONDS=600 scripts/fuzz.sh); any crash, leak or timeout fails.
scripts/fuzz.sh

echo "== man pages and completions in step with the flags"
python3 tests/check_docs_in_step.py --help-cmd build/sbx

echo "== the Kubernetes manifests, offline"
scripts/ci-manifests.sh

echo "== integration tests (real sandboxes)"
# The conformance tests run on every driver: the local subprocess driver,
# through a real manager, gVisor (runsc), micro-VMs (QEMU) and deno (where they
# apply: the deno driver runs no shell; test_deno.py covers it).
# Two lanes run side by side, one per core: lane "vm" runs the micro-VM and
# deno cases (QEMU under TCG keeps about one core busy), lane "local" the
# subprocess, remote and runsc ones plus every test not parametrized over a
# driver (with deno in lane "local" the lanes took 31 and 22 minutes).
# A test that concerns one driver takes the `driver` fixture with
# @pytest.mark.only_drivers, so it runs in that driver's lane.
# Each lane has its own state roots, as any two sbx users on one host would.
# SBX_TEST_DRIVERS set by the caller runs one lane with exactly those drivers.
# (test_manager_image.py runs after scripts/ci-manager-image.sh, in lane local.)
export SBX_BIN="$PWD/build/sbx"
if [[ -n ${SBX_TEST_DRIVERS:-} ]]; then
  exec /usr/bin/python3 -m pytest -q -rs tests/integration
fi
logs=$(mktemp -d /tmp/sbx-lanes.XXXXXX)
run_lane() {  # name drivers run-driverless
  SBX_TEST_LANE=$1 SBX_TEST_DRIVERS=$2 SBX_TEST_DRIVERLESS=$3 \
    /usr/bin/python3 -m pytest -q -rs --durations=20 tests/integration --ignore=tests/integration/test_manager_image.py \
    --ignore=tests/integration/test_deb.py
}
# Lane local then builds the manager's container image of this commit and runs
# the conformance suite against the container (the image tests use that image),
# and installs the .deb into a clean root (~4 minutes). They follow the shorter
# lane's tests: after lane vm's they made it 2080 s against lane local's 1630.
local_lane() {
  local rc=0
  run_lane local subprocess,remote,runsc 1 || rc=$?
  echo "== the manager image: conformance against the container ($((SECONDS - start)) s into the lanes)"
  scripts/ci-manager-image.sh || rc=$?
  SBX_TEST_LANE=image /usr/bin/python3 -m pytest -q -rs tests/integration/test_manager_image.py || rc=$?
  echo "== the Debian package: installed into a clean Debian 12 root ($((SECONDS - start)) s into the lanes)"
  SBX_TEST_LANE=deb /usr/bin/python3 -m pytest -q -rs tests/integration/test_deb.py || rc=$?
  return "$rc"
}
start=$SECONDS
local_lane >"$logs/local.log" 2>&1 & local_pid=$!
run_lane vm microvm,deno 0 >"$logs/vm.log" 2>&1 & vm_pid=$!
status=0
for lane in local vm; do
  pid_var=${lane}_pid
  if wait "${!pid_var}"; then result=passed; else result=FAILED; status=1; fi
  echo "-- lane $lane: $result"
  cat "$logs/$lane.log"
done
echo "== integration lanes took $((SECONDS - start)) s"
rm -rf "$logs"
exit "$status"
