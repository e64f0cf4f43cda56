# Shared by the benches that time sbx's local backend with hyperfine and no
# manager (pool_create.sh, pause_resume.sh, snapshot_fork.sh; bench/lib.sh is
# the managers' own): hyperfine installed from Debian if missing, a scratch
# state root and empty config in $work, removed with every sandbox on exit,
# and run(), one timed row. Source it from the repository's root.
source bench/common.sh
need_pkgs hyperfine
need_sbx

work=$(mktemp -d /tmp/sbx-bench.XXXXXX)
: >"$work/config.yaml"
export SBX_STATE_DIR=$work/state SBX_CONFIG=$work/config.yaml USE_REMOTE_SANDBOX=false LOCAL_SANDBOX_BACKEND=subprocess
cleanup() {
  "$SBX" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# One timed row: run LABEL JSON RUNS PREPARE COMMAND prints COMMAND's median over RUNS
# (hyperfine, PREPARE before each) and keeps hyperfine's JSON in JSON.
run() {
  hyperfine -N --warmup 2 --runs "$3" --prepare "$4" --export-json "$2" "$5" >/dev/null
  printf '%-40s %9.2f ms\n' "$1" "$(median_ms "$2")"
}

# add_driver NAME FLAG: adds NAME to drivers when `sbx doctor --driver NAME` passes, unless FLAG is 0.
add_driver() {
  if [[ $2 != 0 ]] && "$SBX" doctor --driver "$1" >/dev/null 2>&1; then drivers+=("$1"); fi
}
# The drivers to measure: subprocess always, runsc when `sbx doctor --driver runsc` passes (RUNSC=0 skips it).
drivers=(subprocess)
add_driver runsc "${RUNSC:-1}"
