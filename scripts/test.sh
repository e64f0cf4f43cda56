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

echo "== man pages and completions in step with the flags"
python3 tests/check_docs_in_step.py --help-cmd build/sbx

echo "== the Kubernetes manifests, offline"
scripts/ci-manifests.sh

# The unit tests again under ASan/UBSan, and each libFuzzer target of
# tests/fuzz for SBX_FUZZ_SECONDS (12 s here; longer runs: SBX_FUZZ_SECONDS=600
# scripts/fuzz.sh); any crash, leak or timeout fails. Their two builds took
# ~7 minutes of CI's time before the lanes when the compiler cache was cold (a
# fresh machine, or a header most files include changed), so with two lanes
# they compile while the lanes run, at idle priority: the lanes keep the two
# cores only 55% busy (waiting on QEMU, sleeps, timeouts), and SCHED_IDLE
# takes what they leave (it still costs them ~8%: caches and disk are shared).
# The sanitized tests and the fuzzing themselves run after the lanes, at full speed.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
sanitized_builds() {
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSBX_WERROR=ON -DSBX_SANITIZE=ON \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
  cmake --build build-asan -j"$(nproc)" --target sbx_unit_tests
  scripts/fuzz.sh --build-only
}
sanitized_runs() {
  local rc=0
  echo "== unit tests under ASan/UBSan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$(nproc)" || rc=$?
  echo "== fuzzing"
  scripts/fuzz.sh || rc=$?
  return "$rc"
}

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
# (test_manager_image.py and test_deb.py run after the first lane to end.)
export SBX_BIN="$PWD/build/sbx"
if [[ -n ${SBX_TEST_DRIVERS:-} ]]; then
  sanitized_builds
  sanitized_runs
  exec /usr/bin/python3 -m pytest -q -rs tests/integration
fi
logs=$(mktemp -d /tmp/sbx-lanes.XXXXXX)
# SCHED_IDLE is inherited by every compiler the build starts.
(chrt --idle -p 0 "$BASHPID" >/dev/null || true; sanitized_builds) >"$logs/sanitized-builds.log" 2>&1 & builds_pid=$!
run_lane() {  # name drivers run-driverless
  SBX_TEST_LANE=$1 SBX_TEST_DRIVERS=$2 SBX_TEST_DRIVERLESS=$3 \
    /usr/bin/python3 -m pytest -q -rs --durations=20 tests/integration --ignore=tests/integration/test_manager_image.py \
    --ignore=tests/integration/test_deb.py
}
# The manager's container image of this commit, the conformance suite against
# the container (the image tests use that image), and the .deb installed into a
# clean root: ~8 minutes. They take the core of whichever lane ends first: which
# one that is varies from run to run (lane vm took 1625 s against lane local's
# 1630 in one run, 1472 against 1849 in the next), so a fixed place for them
# cost up to 6 minutes.
after_first_lane() {
  local rc=0
  echo "== the manager image: conformance against the container ($((SECONDS - start)) s into the lanes)"
  scripts/ci-manager-image.sh || rc=$?
  SBX_TEST_LANE=image /usr/bin/python3 -m pytest -q -rs tests/integration/test_manager_image.py || rc=$?
  echo "== the Debian package: installed into a clean Debian 12 root ($((SECONDS - start)) s into the lanes)"
  SBX_TEST_LANE=deb /usr/bin/python3 -m pytest -q -rs tests/integration/test_deb.py || rc=$?
  return "$rc"
}
start=$SECONDS
run_lane local subprocess,remote,runsc 1 >"$logs/local.log" 2>&1 & local_pid=$!
run_lane vm microvm,deno 0 >"$logs/vm.log" 2>&1 & vm_pid=$!
declare -A lane_rc
first_rc=0
wait -n -p first_pid "$local_pid" "$vm_pid" || first_rc=$?
lane_rc[$first_pid]=$first_rc
echo "== lane $([[ $first_pid == "$local_pid" ]] && echo local || echo vm) ended first, after $((SECONDS - start)) s"
after_rc=0
after_first_lane >"$logs/after.log" 2>&1 || after_rc=$?
status=0
for lane in local vm; do
  pid_var=${lane}_pid
  pid=${!pid_var}
  if [[ -z ${lane_rc[$pid]+set} ]]; then
    lane_rc[$pid]=0
    wait "$pid" || lane_rc[$pid]=$?
  fi
  if ((lane_rc[$pid] == 0)); then result=passed; else result=FAILED; status=1; fi
  echo "-- lane $lane: $result"
  cat "$logs/$lane.log"
done
if ((after_rc == 0)); then result=passed; else result=FAILED; status=1; fi
echo "-- the manager image and the Debian package: $result"
cat "$logs/after.log"
echo "== integration lanes took $((SECONDS - start)) s"
builds_rc=0
wait "$builds_pid" || builds_rc=$?
echo "== the ASan/UBSan and fuzz builds: $( ((builds_rc == 0)) && echo built || echo FAILED), $((SECONDS - start)) s after the lanes began"
if ((builds_rc == 0)); then
  sanitized_runs || status=1
else
  status=1
  tail -n 80 "$logs/sanitized-builds.log"
fi
rm -rf "$logs"
exit "$status"
