"""The harness of the abuse tests (test_abuse.py, test_abuse_stress.py): an
offender's exec runs in a thread while the neighbour's `exec true` and the
manager's /healthz are called in a loop, and the counters of the offender's
cgroup that name the cap that held it."""
from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

from conftest import cgroup_roots
from leaks import sandbox_traces
from manager_fixtures import cgroup_scope

# cap: (file, key) in the sandbox's cgroup; the first that exists counts (cgroup v2, then v1).
CAP_COUNTERS = {
    "cpu": [("cpu.stat", "nr_throttled")],
    "pids": [("pids.events", "max")],
    "memory": [("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")],
}


def cap_hits(state_dir: str, sid: str) -> dict[str, int]:
    """How often each cap of the sandbox's host cgroup held it back so far (-1: no such counter)."""
    out = {}
    dirs = [Path(root, "sbx", cgroup_scope(state_dir), sid) for root in cgroup_roots()]
    for cap, places in CAP_COUNTERS.items():
        out[cap] = -1
        for name, key in places:
            files = [d / name for d in dirs if (d / name).is_file()]
            if files:
                words = dict(line.split()[:2] for line in files[0].read_text().splitlines() if line.strip())
                out[cap] = int(words.get(key, -1))
                break
    return out


def create(m, spec: dict) -> str:
    """A sandbox through the manager, waiting longer than the default 30 s: a
    micro-VM's boot under TCG on a loaded host can take that long."""
    r = m.request("POST", "/v1/sandboxes", spec, timeout=180)
    assert r.status == 201, f"create {spec} failed: {r!r}"
    return r.json()["id"]


def offend(m, neighbour: str, offender: str, argv, timeout_s: int = 30, during=None, probe=("true",)):
    """Runs argv in offender; meanwhile times the neighbour's `exec true` (probe: another
    command, where there is no `true`), asks /healthz (both must answer) and calls during()
    if given. Returns (status, body, latencies in s)."""
    result: dict = {}

    def run():
        t0 = time.monotonic()
        try:
            r = m.request("POST", f"/v1/sandboxes/{offender}/exec", {"cmd": argv, "timeout_s": timeout_s},
                          timeout=timeout_s + 60)
            result["status"], result["body"] = r.status, (r.json() if r.status == 200 else r.text)
        except Exception as e:  # noqa: BLE001 (the caller's assertion reports it)
            result["error"] = repr(e)
        print(f"offender's exec: {time.monotonic() - t0:.1f} s")

    t = threading.Thread(target=run)
    t.start()
    lat = []
    try:
        while t.is_alive() and len(lat) < 200:
            t0 = time.monotonic()
            out = m.exec(neighbour, probe, timeout=60)
            lat.append(time.monotonic() - t0)
            assert out["exit_code"] == 0, out
            assert m.request("GET", "/healthz", timeout=10).status == 200
            if during:
                during()
    finally:
        t.join(timeout=timeout_s + 90)
    return result.get("status"), result.get("body", result.get("error")), lat


def ended_by_oom(body) -> bool:
    return bool(isinstance(body, dict) and body.get("sandbox_ended") and body.get("oom_killed"))


def ended_by_host_cap(status, body) -> bool:
    """runsc: gVisor 20221219 cannot survive losing its sentry or a stub to a host cap, so
    the sandbox ends and the answer names the cap: memory (oom_killed) or pids (the
    error says the process limit). Contained, not survived (docs/security.md)."""
    if status == 200:
        return ended_by_oom(body)
    return status == 503 and "process limit" in (body or "")


def report(driver: str, workload: str, lat, probe: str = "exec true") -> None:
    if lat:
        print(f"{driver} {workload}: neighbour {probe} x{len(lat)}: median {1000 * statistics.median(lat):.0f} ms, "
              f"max {1000 * max(lat):.0f} ms")


def summary(body) -> str:
    """The exec answer with its output cut short, for an assertion's message."""
    if not isinstance(body, dict):
        return str(body)[:600]
    return str({k: (v[:300] if k in ("stdout", "stderr") else v) for k, v in body.items()})


def rm_leaves_nothing(m, workload: str, offender: str, neighbour: str, probe=("true",)) -> None:
    """rm of both; the neighbour answers in between; then no trace of either (leaks.py)."""
    assert m.delete(offender).status == 200
    assert m.exec(neighbour, probe)["exit_code"] == 0
    assert m.delete(neighbour).status == 200
    left = sandbox_traces(m.state_dir, [offender, neighbour], False)
    assert not left, f"after rm of the {workload} offender:\n  " + "\n  ".join(left)
