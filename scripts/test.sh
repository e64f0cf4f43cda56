#!/usr/bin/env bash
# The whole test suite: warnings-as-errors build, unit tests, the unit tests
# again under ASan/UBSan, man pages and completions in step with the flags,
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

echo "== man pages and completions in step with the flags"
python3 tests/check_docs_in_step.py --help-cmd build/sbx

echo "== integration tests (real sandboxes)"
# The conformance tests run on every driver: the local subprocess driver,
# through a real manager, gVisor (runsc), micro-VMs (QEMU) and deno (where they
# apply: the deno driver runs no shell; test_deno.py covers it).
SBX_TEST_DRIVERS=${SBX_TEST_DRIVERS:-subprocess,remote,runsc,microvm,deno} SBX_BIN="$PWD/build/sbx" \
  /usr/bin/python3 -m pytest -q -rs tests/integration
