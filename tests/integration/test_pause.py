"""`sbx pause` / `sbx resume` (docs/cli.md): a paused sandbox's processes use
no CPU and keep their memory; resume lets them go on; exec, cp and ps on a
paused sandbox resume it first; the state shows in ls, the API and /metrics."""
from __future__ import annotations

import glob
import json
import os
import time

import pytest

from conftest import wait_until
from manager_fixtures import manager, manager_root, managers, module_managers  # noqa: F401

BUSYBOX_DRIVERS = ("subprocess", "runsc", "microvm", "remote")

# How long each measured interval lasts: long against the few ticks a pause or
# resume call and the reading exec take, so "stopped" and "going" tell apart.
INTERVAL_S = 2.0
SPIN = "while :; do :; done"


def _cpu_ticks(sbx, sid, pid: int) -> int:
    """utime + stime (USER_HZ ticks) of pid's children in the sandbox (the loop under `exec -d`'s
    process-group leader); on a paused sandbox this exec resumes it."""
    r = sbx.sh(sid, "cat /proc/[0-9]*/stat 2>/dev/null; true").ok()
    total = 0
    for line in r.out.splitlines():
        fields = line.rsplit(")", 1)[1].split()  # [0] is field 3 of proc(5)
        if int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])  # fields 14 and 15
    return total


def _state(sbx, sid) -> str:
    rec = sbx.record(sid)
    assert rec is not None, f"{sid} is not in sbx ls"
    return rec["state"]


@pytest.mark.only_drivers(*BUSYBOX_DRIVERS)
def test_pause_stops_a_busy_loop_and_resume_restarts_it(sbx, sandbox, driver):
    pid = int(sbx.run("exec", "-d", sandbox, "--", "sh", "-c", SPIN).ok().out)
    wait_until(lambda: _cpu_ticks(sbx, sandbox, pid) > 0, timeout=30)
    # The same interval, running: how much CPU the loop gets on this host now.
    t0 = _cpu_ticks(sbx, sandbox, pid)
    time.sleep(INTERVAL_S)
    running = _cpu_ticks(sbx, sandbox, pid) - t0
    assert running > 0, "the loop must use CPU while the sandbox runs"

    t1 = _cpu_ticks(sbx, sandbox, pid)
    r = sbx.run("pause", sandbox).ok()
    assert r.out == sandbox + "\n", r
    assert _state(sbx, sandbox) == "paused"
    time.sleep(INTERVAL_S)
    # Still paused after the interval, and pausing again is no error.
    assert _state(sbx, sandbox) == "paused"
    sbx.run("pause", sandbox).ok()
    r = sbx.run("resume", sandbox).ok()
    assert r.out == sandbox + "\n", r
    assert _state(sbx, sandbox) == "running"
    paused = _cpu_ticks(sbx, sandbox, pid) - t1
    # Paused, the loop ran only around the calls (a few ticks), not for the interval.
    assert paused < running / 2, f"the loop used {paused} ticks while paused, {running} in as long running"

    t2 = _cpu_ticks(sbx, sandbox, pid)
    time.sleep(INTERVAL_S)
    assert _cpu_ticks(sbx, sandbox, pid) > t2, "after resume the loop must use CPU again"
    sbx.run("resume", sandbox).ok()  # resuming a running sandbox is no error


@pytest.mark.only_drivers(*BUSYBOX_DRIVERS)
def test_exec_cp_and_ps_on_a_paused_sandbox_resume_it(sbx, sandbox, driver, host_tmp):
    sbx.sh(sandbox, "echo before > /tmp/kept").ok()
    sbx.run("pause", sandbox).ok()
    r = sbx.exec(sandbox, "cat", "/tmp/kept").ok()
    assert r.out == "before\n", "a paused sandbox's files (and memory) stay"
    assert _state(sbx, sandbox) == "running", "exec resumes a paused sandbox"

    src = host_tmp / "in.txt"
    src.write_text("copied\n")
    sbx.run("pause", sandbox).ok()
    sbx.run("cp", str(src), f"{sandbox}:/tmp/in.txt").ok()
    assert _state(sbx, sandbox) == "running", "cp resumes a paused sandbox"
    assert sbx.exec(sandbox, "cat", "/tmp/in.txt").ok().out == "copied\n"

    pid = int(sbx.run("exec", "-d", sandbox, "--", "sleep", "300").ok().out)
    sbx.run("pause", sandbox).ok()
    procs = json.loads(sbx.run("ps", "--json", sandbox).ok().out)
    assert any(p["pid"] == pid and p["state"] == "running" for p in procs), procs
    assert _state(sbx, sandbox) == "running", "ps resumes a paused sandbox"


@pytest.mark.only_drivers(*BUSYBOX_DRIVERS)
def test_a_paused_sandbox_is_listed_filtered_and_removed(sbx, make_sandbox, driver):
    sid = make_sandbox(driver=driver)
    sbx.run("pause", sid).ok()
    assert sid in sbx.ls_ids("--filter", "state=paused")
    assert sid not in sbx.ls_ids("--filter", "state=running")
    # A frozen sandbox goes as a running one does (on cgroup v1 its tasks are thawed for the kill).
    sbx.run("rm", sid).ok()
    assert sbx.record(sid) is None


@pytest.mark.only_drivers(*BUSYBOX_DRIVERS)
def test_pause_of_a_missing_sandbox_fails_with_its_name(sbx, driver):
    r = sbx.run("pause", "sbx_000000000000")
    assert r.rc != 0 and "sbx_000000000000" in r.err, r


@pytest.mark.only_drivers("subprocess")
def test_manager_routes_and_metrics_show_paused(manager, driver):
    sid = manager.create()["id"]
    try:
        r = manager.request("POST", f"/v1/sandboxes/{sid}/pause")
        assert r.status == 200 and r.json()["state"] == "paused", r
        assert manager.request("GET", f"/v1/sandboxes/{sid}").json()["state"] == "paused"
        assert sid in manager.ids("?state=paused")
        text = manager.request("GET", "/metrics").body.decode()
        assert 'state="paused"} 1' in text, text
        # An exec through the API resumes it.
        out = manager.exec(sid, ["echo", "hi"])
        assert "hi" in json.dumps(out), out
        assert manager.request("GET", f"/v1/sandboxes/{sid}").json()["state"] == "running"
        r = manager.request("POST", f"/v1/sandboxes/{sid}/pause")
        assert r.status == 200, r
        r = manager.request("POST", f"/v1/sandboxes/{sid}/resume")
        assert r.status == 200 and r.json()["state"] == "running", r
        r = manager.request("GET", f"/v1/sandboxes/{sid}/pause")
        assert r.status == 405 and "POST" in r.headers.get("Allow", ""), r
    finally:
        manager.delete(sid)


def _freezer_states(sid: str) -> list[str]:
    """What the host's freezer says of the sandbox's group: v1 freezer.state, or v2's cgroup.events 'frozen'."""
    out = []
    for root in ("/sys/fs/cgroup/freezer/sbx", "/sys/fs/cgroup/unified/sbx", "/sys/fs/cgroup/sbx"):
        for d in glob.glob(f"{root}/*/{sid}"):
            if os.path.exists(f"{d}/freezer.state"):
                out.append(open(f"{d}/freezer.state").read().strip())
            elif os.path.exists(f"{d}/cgroup.events"):
                events = dict(line.split() for line in open(f"{d}/cgroup.events").read().splitlines())
                out.append("FROZEN" if events.get("frozen") == "1" else "THAWED")
    return out


@pytest.mark.only_drivers("deno")
def test_deno_pause_freezes_its_cgroup_and_exec_thaws_it(sbx, sandbox, driver):
    sbx.exec(sandbox, "python3", "-c", "open('/work/kept', 'w').write('before')").ok()
    sbx.run("pause", sandbox).ok()
    assert _state(sbx, sandbox) == "paused"
    assert _freezer_states(sandbox) == ["FROZEN"], "the deno process's cgroup must be frozen"
    r = sbx.exec(sandbox, "python3", "-c", "print(open('/work/kept').read())").ok()
    assert r.out == "before\n", r
    assert _state(sbx, sandbox) == "running" and _freezer_states(sandbox) == ["THAWED"]


@pytest.mark.only_drivers("subprocess", "runsc")
def test_gc_removes_a_paused_idle_sandbox_but_keeps_persistent_and_fresh_ones(gc_sbx, driver):
    idle = gc_sbx.create("--idle-timeout", "1s", driver=driver)
    kept = gc_sbx.create("--idle-timeout", "1s", "--persistent", driver=driver)
    fresh = gc_sbx.create(driver=driver)  # the default idle timeout (10m)
    try:
        for sid in (idle, kept, fresh):
            gc_sbx.run("pause", sid).ok()
        time.sleep(1.5)
        report = json.loads(gc_sbx.run("gc", "--json").ok().out)
        acts = {a["target"]: a for a in report["actions"] if a["kind"] == "sandbox"}
        assert idle in acts and acts[idle]["done"] and "paused and idle" in acts[idle]["reason"], report
        assert kept not in acts and fresh not in acts, report
        states = {r["id"]: r["state"] for r in gc_sbx.ls()}
        assert idle not in states
        assert states.get(kept) == "paused" and states.get(fresh) == "paused", states
    finally:
        gc_sbx.remove(idle, kept, fresh)


@pytest.mark.only_drivers("subprocess", "runsc")
def test_idle_action_pause_pauses_an_idle_sandbox_and_keeps_its_files(gc_sbx, driver):
    paused = gc_sbx.create("--idle-timeout", "1s", "--idle-action", "pause", driver=driver)
    persistent = gc_sbx.create("--idle-timeout", "1s", "--persistent", driver=driver)  # pause by default
    removed = gc_sbx.create("--idle-timeout", "1s", driver=driver)  # ephemeral: remove by default
    try:
        for sid in (paused, persistent):
            gc_sbx.sh(sid, "echo kept > /tmp/f").ok()
        time.sleep(1.5)
        r = gc_sbx.run("gc").ok()
        for sid in (paused, persistent):
            assert f"paused sandbox {sid}: idle for" in r.out, r
        assert f"removed sandbox {removed}: idle for" in r.out, r
        states = {x["id"]: x["state"] for x in gc_sbx.ls()}
        assert states.get(paused) == "paused" and states.get(persistent) == "paused", states
        assert removed not in states
        # Its idle action done, gc leaves it paused, however long it stays idle.
        time.sleep(1.2)
        report = json.loads(gc_sbx.run("gc", "--json").ok().out)
        assert not [a for a in report["actions"] if a["target"] in (paused, persistent)], report
        # Used again: resumed, with its files; and idle again, paused again.
        assert gc_sbx.exec(paused, "cat", "/tmp/f").ok().out == "kept\n"
        assert _state(gc_sbx, paused) == "running"
        time.sleep(1.5)
        report = json.loads(gc_sbx.run("gc", "--json").ok().out)
        acts = [a for a in report["actions"] if a["target"] == paused]
        assert acts and acts[0]["kind"] == "pause" and acts[0]["done"], report
    finally:
        gc_sbx.remove(paused, persistent, removed)


@pytest.mark.only_drivers("subprocess")
def test_idle_action_pause_waits_for_a_running_background_process(gc_sbx, driver):
    sid = gc_sbx.create("--idle-timeout", "1s", "--idle-action", "pause", driver=driver)
    try:
        gc_sbx.run("exec", "-d", sid, "--", "sleep", "30").ok()
        time.sleep(1.5)
        report = json.loads(gc_sbx.run("gc", "--json").ok().out)
        assert not [a for a in report["actions"] if a["target"] == sid], report
        assert _state(gc_sbx, sid) == "running"
    finally:
        gc_sbx.remove(sid)


@pytest.mark.only_drivers("subprocess")
def test_idle_action_is_checked(sbx, driver):
    r = sbx.run("create", "--driver", driver, "--idle-action", "sleep")
    assert r.rc != 0 and "unknown idle action 'sleep'" in r.err and "pause, remove" in r.err, r
    r = sbx.run("create", "--driver", driver, "--persistent", "--idle-action", "remove")
    assert r.rc != 0 and "never removed by gc" in r.err and "hint:" in r.err, r
    assert not [x for x in sbx.ls() if x["state"] == "creating"]


@pytest.mark.only_drivers("subprocess")
def test_on_paused_refuse_makes_use_of_a_paused_sandbox_a_conflict(sbx, make_sandbox, driver, tmp_path, managers):
    from conftest import Sbx
    conf = tmp_path / "refuse.yaml"
    conf.write_text("on_paused: refuse\n")
    strict = Sbx(sbx.state_dir, str(conf), label="strict")
    sid = make_sandbox(driver=driver)
    strict.run("pause", sid).ok()
    for argv in (["exec", sid, "--", "true"], ["ps", sid], ["cp", f"{sid}:/etc/hostname", str(tmp_path / "h")]):
        r = strict.run(*argv)
        assert r.rc != 0 and f"sandbox {sid} is paused" in r.err and f"sbx resume {sid}" in r.err, (argv, r)
    assert _state(sbx, sid) == "paused", "a refused call must not resume it"
    strict.run("resume", sid).ok()
    assert strict.exec(sid, "true").ok()
    # Through a manager so configured: 409, and the sandbox stays paused.
    m = managers.new("refuse", config_text="on_paused: refuse\n")
    msid = m.create()["id"]
    try:
        assert m.request("POST", f"/v1/sandboxes/{msid}/pause").status == 200
        r = m.request("POST", f"/v1/sandboxes/{msid}/exec", {"cmd": ["true"]})
        assert r.status == 409 and "is paused" in r.text, r
        assert m.request("GET", f"/v1/sandboxes/{msid}").json()["state"] == "paused"
    finally:
        m.delete(msid)


@pytest.mark.only_drivers("subprocess")
def test_manager_reaper_pauses_an_idle_sandbox_whose_idle_action_is_pause(managers, driver):
    m = managers.new("idle", config_text="server:\n  reap_interval: 1s\n")
    sid = m.create({"idle_timeout_s": 1, "idle_action": "pause"})["id"]
    try:
        wait_until(lambda: m.request("GET", f"/v1/sandboxes/{sid}").json()["state"] == "paused", timeout=20)
        assert m.request("GET", f"/v1/sandboxes/{sid}").json()["spec"]["idle_action"] == "pause"
        out = m.exec(sid, ["echo", "back"])
        assert "back" in json.dumps(out), out
    finally:
        m.delete(sid)
