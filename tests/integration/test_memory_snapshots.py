"""`sbx snapshot --memory` / `sbx fork --memory` (docs/snapshots.md): a memory snapshot
holds a sandbox's running processes, so a sandbox started from it runs them on from
where they were (a counter continues, it does not start again), the source runs on
independently, and nothing of either is left on the host once they are removed."""
from __future__ import annotations

import json

import pytest

from conftest import wait_until
from leaks import sandbox_traces
from manager_fixtures import module_managers, manager_root, strong_key  # noqa: F401

# A background counter that lives only in its shell's memory: /tmp/c shows its value.
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.1; done"


def _count(sbx, sid) -> int:
    # `echo $i > /tmp/c` truncates before it writes: a read in between finds the file empty.
    # Before the counter's first write (`exec -d` returns once the shell started) there is no file.
    r = sbx.exec(sid, "cat", "/tmp/c")
    if r.rc != 0 and "No such file" in r.err:
        return -1
    out = r.ok().out.strip()
    return int(out) if out else -1


def _value(sbx, sid) -> int:
    """The counter, read again while a read falls between echo's truncate and its write."""
    seen = []
    assert wait_until(lambda: seen.append(_count(sbx, sid)) or seen[-1] >= 0, 10), f"{sid}'s counter stays empty"
    return seen[-1]


def _snapshots(sbx) -> dict[str, dict]:
    return {s["name"]: s for s in json.loads(sbx.run("snapshot", "ls", "--json").ok().out)}


def _counting(sbx, sid, above: int) -> int:
    """Waits until sid's counter passes `above` (it runs), and returns it."""
    seen = []
    assert wait_until(lambda: seen.append(_count(sbx, sid)) or seen[-1] > above, 20), \
        f"{sid}'s counter stays at {seen[-1:]} (not above {above})"
    return seen[-1]


@pytest.mark.only_drivers("runsc", "microvm")
def test_a_memory_snapshot_runs_the_processes_on(sbx, sandbox, driver, make_sandbox):
    sbx.sh(sandbox, "echo kept > /work/f").ok()
    sbx.exec(sandbox, "sh", "-c", COUNTER, flags=("-d",)).ok()
    before = _counting(sbx, sandbox, 10)
    name = f"mem-{driver}"
    assert sbx.run("snapshot", "--memory", sandbox, name, timeout=120).ok().out == name + "\n"
    snap = _snapshots(sbx)[name]
    assert snap["memory"] is True and snap["memory_bytes"] > 0, snap
    at_snapshot = _value(sbx, sandbox)
    assert at_snapshot >= before, "the source's counter went back: it was restarted, not run on"
    _counting(sbx, sandbox, at_snapshot)  # the source runs on
    assert sbx.record(sandbox)["state"] == "running"

    child = sbx.run("create", "--from", name, timeout=120).ok().out.strip()
    sbx.created.append(child)
    try:
        start = _value(sbx, child)
        # From the snapshot's count on: the shell's `i` came back with its memory.
        assert start >= before, f"the copy's counter started again ({start} < {before})"
        _counting(sbx, child, start)
        assert sbx.exec(child, "cat", "/work/f").ok().out == "kept\n", "the layer came with the memory"
        assert len(sbx.run("ps", child, "--json").ok().out) > 2, "the copy lists its background process"
        # Independent: files written in one are not in the other, and both count on.
        sbx.sh(child, "echo child > /work/f").ok()
        assert sbx.exec(sandbox, "cat", "/work/f").ok().out == "kept\n"
        fork = sbx.run("fork", "--memory", sandbox, timeout=120).ok().out.strip()
        sbx.created.append(fork)
        assert _value(sbx, fork) >= at_snapshot
        assert not [n for n in _snapshots(sbx) if n.startswith("fork-")], "a fork leaves no snapshot"
        sbx.remove(fork).ok()
    finally:
        sbx.remove(child)
    sbx.run("snapshot", "rm", name).ok()
    sbx.remove(sandbox).ok()
    assert wait_until(lambda: not sandbox_traces(sbx.state_dir, [sandbox, child], False), 20), \
        sandbox_traces(sbx.state_dir, [sandbox, child], False)


@pytest.mark.only_drivers("runsc", "microvm")
def test_a_memory_snapshot_of_a_jailed_sandbox_is_refused_and_it_runs_on(sbx, make_sandbox, driver):
    sid = make_sandbox("--network", "jail", driver=driver)
    r = sbx.run("snapshot", "--memory", sid, "mem-jail")
    assert r.rc != 0 and "--network none" in r.err, r
    assert "mem-jail" not in _snapshots(sbx)
    assert sbx.exec(sid, "true").rc == 0 and sbx.record(sid)["state"] == "running"


@pytest.mark.only_drivers("subprocess", "deno")
def test_a_driver_without_memory_snapshots_says_why(sbx, sandbox, driver):
    r = sbx.run("snapshot", "--memory", sandbox, f"mem-{driver}")
    assert r.rc != 0 and f"the {driver} driver cannot save a sandbox's memory" in r.err, r
    assert "hint" in r.err and f"mem-{driver}" not in _snapshots(sbx)
    assert sbx.record(sandbox)["state"] == "running"
    assert sbx.run("fork", "--memory", sandbox).rc != 0
    doctor = json.loads(sbx.run("doctor", "--json").out)
    checks = {d["name"]: d["checks"] for d in doctor["drivers"]}
    mem = [c for c in checks[driver] if c["name"].startswith("memory snapshots")]
    assert mem and not mem[0]["ok"] and mem[0]["advisory"], checks[driver]


@pytest.mark.only_drivers("runsc")
def test_memory_snapshot_through_the_api(module_managers, driver):  # noqa: F811
    m = module_managers.new("mem-api", "server:\n  reap_interval: 1h\n", driver=driver)
    sid = m.create({"driver": driver, "network": "none"})["id"]
    assert m.request("POST", f"/v1/sandboxes/{sid}/snapshot", {"memory": "yes"}).status == 400
    assert m.request("POST", f"/v1/sandboxes/{sid}/snapshot", {"bogus": 1}).status == 400
    assert m.sh(sid, "echo 41 > /tmp/v")["exit_code"] == 0
    r = m.request("POST", f"/v1/sandboxes/{sid}/snapshot", {"name": "mem-api", "memory": True})
    assert r.status == 201 and r.json()["memory"] is True, r
    child = m.create({"from_snapshot": "mem-api", "network": "none"})["id"]
    assert m.sh(child, "cat /tmp/v")["stdout"] == "41\n"
    assert m.request("DELETE", "/v1/snapshots/mem-api").status == 200
    for s in (child, sid):
        assert m.delete(s).status == 200


@pytest.mark.only_drivers("runsc")
def test_runsc_memory_snapshots_turned_off_are_refused_and_it_runs_on(sbx, sandbox, driver):
    """The operator's off switch: refused before the sandbox is touched, and doctor says so."""
    off = {"SBX_RUNSC_MEMORY_SNAPSHOTS": "0"}
    sbx.exec(sandbox, "sh", "-c", COUNTER, flags=("-d",)).ok()
    before = _counting(sbx, sandbox, 2)
    r = sbx.run("snapshot", "--memory", sandbox, "mem-off", env=off)
    assert r.rc != 0 and "memory snapshots on runsc are off" in r.err and "SBX_RUNSC_MEMORY_SNAPSHOTS=0" in r.err, r
    assert "mem-off" not in _snapshots(sbx)
    _counting(sbx, sandbox, before)  # untouched: the same processes count on
    assert sbx.record(sandbox)["state"] == "running"
    for env, ok in ((off, False), (None, True)):
        doctor = json.loads(sbx.run("doctor", "--json", env=env).out)
        checks = {d["name"]: d["checks"] for d in doctor["drivers"]}
        mem = [c for c in checks["runsc"] if c["name"].startswith("memory snapshots")]
        assert mem and mem[0]["ok"] is ok and mem[0]["advisory"], mem
