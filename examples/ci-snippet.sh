#!/usr/bin/env bash
# How a CI job runs an unreviewed snippet (here: Python from a file or a PR
# comment) in a throwaway sandbox, and acts on sbx's exit status.
#
#   ./ci-snippet.sh [SNIPPET.py]        (default: a small built-in snippet)
#
# Every resource is capped; the sandbox has no network (the default) and is
# removed whatever happens (--rm). `sbx doctor --driver subprocess` tells what
# is missing when the driver cannot run on the CI host.
set -uo pipefail

if (($#)); then
    snippet=$(cat -- "$1") || exit 2
else
    snippet='import sys; print("hello from the sandbox", sys.version.split()[0])'
fi

sbx exec --rm --driver subprocess --memory 256M --pids 64 --timeout 60s \
    -- python3 -c "$snippet"
status=$?

case $status in
    0) echo "snippet succeeded" ;;
    124) echo "snippet timed out after 60s" >&2 ;;
    127) echo "python3 is not available in the sandbox (try --image with a Python rootfs)" >&2 ;;
    137) echo "snippet was killed (SIGKILL; 'out of memory' on stderr means the 256M cap)" >&2 ;;
    2) echo "sbx usage error, or the snippet exited 2" >&2 ;;
    125) echo "sbx itself failed (run: sbx doctor --driver subprocess), or the snippet exited 125" >&2 ;;
    *)
        if ((status > 128)); then
            echo "snippet killed by signal $((status - 128))" >&2
        else
            echo "snippet failed with exit status $status" >&2
        fi
        ;;
esac
exit "$status"
