#!/usr/bin/env bash
# Keystroke round trip through `sbx exec -it` on this host (subprocess driver;
# DRIVER=runsc or microvm for another): a byte typed on a pty reaches the
# sandbox's terminal, whose echo comes back through sbx, side by side with the
# same shell on a plain local pty (the floor). Prints the median and p90 in ms
# and the ratio. Target: <= 2 ms through sbx. Needs root (the drivers).
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
DRIVER=${DRIVER:-subprocess}
KEYS=${KEYS:-400}
work=$(mktemp -d /tmp/sbx-bench-rtt.XXXXXX)
export SBX_STATE_DIR=$work/state USE_REMOTE_SANDBOX=false
id=$("$SBX" create --driver "$DRIVER")
trap '"$SBX" rm -f "$id" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

/usr/bin/python3 - "$KEYS" "$SBX" "$id" <<'PY'
import os, pty, select, statistics, sys, time
keys, sbx, sid = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def rtts(argv):
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, dict(os.environ, PS1="rtt$ "))
    buf = b""
    try:
        while b"rtt$ " not in buf:  # the prompt: the shell reads its terminal
            buf += os.read(fd, 4096)
    except OSError:
        sys.exit(f"{argv[0]} ended before its prompt: {buf!r}")
    out = []
    for i in range(keys):
        c = b"abcdefghij"[i % 10:i % 10 + 1]
        t0 = time.perf_counter()
        os.write(fd, c)
        got = b""
        while c not in got:  # the terminal's echo of it
            if not select.select([fd], [], [], 5)[0]:
                os.kill(pid, 9)
                sys.exit(f"{argv[0]}: no echo of {c!r} within 5 s (after {i} keys): {got!r}")
            got += os.read(fd, 4096)
        out.append((time.perf_counter() - t0) * 1000)
        if i % 50 == 49:  # keep the line short: erase it
            os.write(fd, b"\x15")
            time.sleep(0.01)
            while select.select([fd], [], [], 0.01)[0]:
                os.read(fd, 4096)
    os.write(fd, b"\x15exit\r")
    os.waitpid(pid, 0)
    return out

plain = rtts(["sh"])
through = rtts([sbx, "exec", "-it", "-e", "PS1=rtt$ ", sid, "--", "sh"])
def show(name, v):
    v = sorted(v)
    print(f"{name:28s} median {statistics.median(v):7.3f} ms   p90 {v[int(len(v) * 0.9)]:7.3f} ms")
show("plain local pty (sh)", plain)
show("sbx exec -it (sh)", through)
print(f"ratio (median): {statistics.median(through) / statistics.median(plain):.1f}x; target <= 2 ms through sbx")
PY
