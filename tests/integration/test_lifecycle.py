"""Lifecycle: gc (idle, TTL, persistent, dead, orphans), rm leaving nothing
behind, configuration errors, doctor, and the CLI's output conventions.

The gc tests use the `gc_sbx` runner (see conftest): its own state root and a
private view of the sbx cgroup parent, so that `sbx gc` cannot touch other
state roots' sandboxes on a shared host.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (DRIVERS, ID_RE, SBX_BIN, Sbx, cmdlines, driver_problem, mountinfo_lines_mentioning,
                      pid_alive, signal_once_started, skip_or_fail, wait_until)

subprocess_only = pytest.mark.only_drivers("subprocess")

# --------------------------------------------------------------------------
# gc: idle, TTL, persistent, dry run, JSON
# --------------------------------------------------------------------------

_scenarios: dict[str, dict] = {}


@pytest.fixture(scope="module")
def _scenario_cleanup(gc_sbx):
    yield
    for sc in _scenarios.values():
        gc_sbx.remove(*sc["ids"].values())
    _scenarios.clear()


def _sleep_cmd(driver: str, seconds: int) -> list[str]:
    # The deno driver runs Python, not coreutils.
    return ["python3", "-c", f"import time; time.sleep({seconds})"] if driver == "deno" else ["sleep", str(seconds)]


def _noop_cmd(driver: str) -> list[str]:
    return ["python3", "-c", "pass"] if driver == "deno" else ["true"]


@pytest.fixture
def gc_scenario(gc_sbx, driver, _scenario_cleanup):
    """Sandboxes in every gc-relevant situation, then `gc --dry-run --json` and `gc --json`."""
    if driver in _scenarios:
        return _scenarios[driver]
    sc = {"ids": {}}
    _scenarios[driver] = sc
    ids = sc["ids"]
    ids["idle"] = gc_sbx.create("--idle-timeout", "1s", driver=driver)
    ids["persistent"] = gc_sbx.create("--idle-timeout", "1s", "--persistent", driver=driver)
    ids["ttl"] = gc_sbx.create("--ttl", "1s", "--idle-timeout", "0", driver=driver)
    ids["fresh"] = gc_sbx.create(driver=driver)  # default idle timeout (10m)
    ids["busy"] = gc_sbx.create("--idle-timeout", "1s", driver=driver)
    # A command running longer than the idle timeout is not idleness.
    busy = gc_sbx.popen("exec", ids["busy"], "--", *_sleep_cmd(driver, 8),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2.3)
        sc["dry"] = gc_sbx.run("gc", "--dry-run", "--json").ok()
        sc["after_dry"] = set(gc_sbx.ls_ids())
        sc["real"] = gc_sbx.run("gc", "--json").ok()
        sc["after"] = set(gc_sbx.ls_ids())
        # Checked now: a later scenario's gc (another driver's) may rightly collect
        # these once the busy command is gone.
        sc["usable_after"] = {k: gc_sbx.exec(ids[k], *_noop_cmd(driver)).rc == 0
                              for k in ("persistent", "fresh", "busy")}
    finally:
        busy.kill()
        busy.wait()
    sc["dry_json"] = json.loads(sc["dry"].stdout)
    sc["real_json"] = json.loads(sc["real"].stdout)
    return sc


def _sandbox_actions(report: dict) -> dict[str, dict]:
    return {a["target"]: a for a in report["actions"] if a["kind"] == "sandbox"}


def test_gc_json_shape(gc_scenario):
    for rep, dry in ((gc_scenario["dry_json"], True), (gc_scenario["real_json"], False)):
        assert {"dry_run", "actions"} <= set(rep), rep
        assert rep["dry_run"] is dry
        assert isinstance(rep["actions"], list) and rep["actions"], rep
        for a in rep["actions"]:
            assert {"kind", "target", "reason", "done", "error"} <= set(a), a
            assert isinstance(a["kind"], str) and isinstance(a["target"], str) and isinstance(a["reason"], str)
            assert isinstance(a["done"], bool) and isinstance(a["error"], str)


def test_gc_dry_run_lists_but_removes_nothing(gc_scenario):
    ids = gc_scenario["ids"]
    acts = _sandbox_actions(gc_scenario["dry_json"])
    assert {ids["idle"], ids["ttl"]} <= set(acts), gc_scenario["dry"]
    assert not any(a["done"] for a in gc_scenario["dry_json"]["actions"]), "dry run claims it removed something"
    assert set(ids.values()) <= gc_scenario["after_dry"], "gc --dry-run removed sandboxes"


def test_gc_collects_idle_sandbox(gc_scenario, gc_sbx):
    sid = gc_scenario["ids"]["idle"]
    a = _sandbox_actions(gc_scenario["real_json"]).get(sid)
    assert a and a["done"] and "idle" in a["reason"], gc_scenario["real"]
    assert sid not in gc_scenario["after"]
    assert not os.path.exists(gc_sbx.sandbox_dir(sid))
    assert not [d for d in gc_sbx.cgroup_dirs(sid) if os.path.isdir(d)]


def test_gc_collects_ttl_sandbox(gc_scenario):
    sid = gc_scenario["ids"]["ttl"]
    a = _sandbox_actions(gc_scenario["real_json"]).get(sid)
    assert a and a["done"] and "TTL" in a["reason"], gc_scenario["real"]
    assert sid not in gc_scenario["after"]


@pytest.mark.parametrize("kind", ["persistent", "fresh", "busy"])
def test_gc_keeps(gc_scenario, gc_sbx, kind):
    sid = gc_scenario["ids"][kind]
    assert sid not in _sandbox_actions(gc_scenario["dry_json"]), gc_scenario["dry"]
    assert sid not in _sandbox_actions(gc_scenario["real_json"]), gc_scenario["real"]
    assert sid in gc_scenario["after"]
    assert gc_scenario["usable_after"][kind]


# --------------------------------------------------------------------------
# gc: dead sandboxes, orphans, other state roots
# --------------------------------------------------------------------------


@subprocess_only
def test_dead_sandbox_reported_and_collected(gc_sbx, make_sandbox, driver):
    sid = make_sandbox(driver=driver, runner=gc_sbx)
    pid = gc_sbx.record(sid)["agent_pid"]
    assert pid > 0 and pid_alive(pid)
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not pid_alive(pid), 5), f"agent {pid} survived SIGKILL"
    assert gc_sbx.record(sid)["state"] == "dead"
    assert gc_sbx.ls_ids("--filter", "state=dead") == [sid]
    r = gc_sbx.exec(sid, "true")
    assert r.rc == 125, r
    assert r.err.startswith("sbx: error:") and "died" in r.err, r
    r = gc_sbx.run("gc", "--json").ok()
    a = _sandbox_actions(json.loads(r.stdout)).get(sid)
    assert a and a["done"], r
    assert sid not in gc_sbx.ls_ids()
    assert not os.path.exists(gc_sbx.sandbox_dir(sid))
    assert not [d for d in gc_sbx.cgroup_dirs(sid) if os.path.isdir(d)]


@pytest.mark.only_drivers("subprocess", "runsc", "microvm")
def test_sandbox_dying_mid_copy_is_named(gc_sbx, make_sandbox, driver):
    # A copy whose sandbox dies under it once ended with "Broken pipe" (or a
    # silent exit 141 from SIGPIPE): it must say that the sandbox died, and why.
    sid = make_sandbox(driver=driver, runner=gc_sbx)
    pid = gc_sbx.record(sid)["agent_pid"]
    writer = subprocess.Popen([sys.executable, "-c", SLOW_TAR], stdout=subprocess.PIPE)
    cp = subprocess.Popen(gc_sbx.argv("cp", "-", f"{sid}:/work/"), stdin=writer.stdout,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=gc_sbx.env())
    writer.stdout.close()
    time.sleep(1.5)
    os.kill(pid, signal.SIGKILL)
    out, err = cp.communicate(timeout=60)
    writer.kill()
    writer.wait()
    err = err.decode()
    assert cp.returncode == 125, (cp.returncode, err)
    assert f"sandbox {sid} died during the copy into it: its agent is gone" in err, err
    assert gc_sbx.record(sid)["state"] == "dead"


# A tar stream of one 64 MiB file that trickles out (so the copy is still
# running when the test kills the sandbox), and stops quietly on a closed pipe.
SLOW_TAR = """
import io, sys, tarfile, time
class Slow(io.RawIOBase):
    n = 0
    def readinto(self, b):
        if self.n >= 64 << 20: return 0
        time.sleep(0.01); k = min(len(b), 65536); b[:k] = b"x" * k; self.n += k; return k
try:
    t = tarfile.open(fileobj=sys.stdout.buffer, mode="w|")
    info = tarfile.TarInfo("big"); info.size = 64 << 20
    t.addfile(info, Slow())
except (BrokenPipeError, OSError):
    pass
"""


@subprocess_only
def test_orphan_cgroup_reaped(gc_sbx, make_sandbox, driver):
    # Plant a cgroup with a valid sandbox name and no sandbox beside the cgroups
    # this state root's sandboxes use (sbx/sbx_aaaaaaaaaaaa in the flat layout,
    # sbx/<scope>/sbx_aaaaaaaaaaaa where cgroups are scoped per state root).
    live = make_sandbox(driver=driver, runner=gc_sbx)
    dirs = gc_sbx.cgroup_dirs(live)
    assert dirs, f"no cgroup found for running sandbox {live}"
    parent = os.path.dirname(next((d for d in dirs if "/pids/" in d), dirs[0]))
    orphan = Path(parent, "sbx_aaaaaaaaaaaa")
    orphan.mkdir()
    try:
        r = gc_sbx.run("gc", "--dry-run", "--json").ok()
        acts = [a for a in json.loads(r.stdout)["actions"] if a["target"].endswith("/sbx_aaaaaaaaaaaa")]
        assert acts and acts[0]["kind"] == "orphan" and acts[0]["target"].startswith("cgroup sbx/"), r
        assert orphan.is_dir(), "gc --dry-run removed the orphan cgroup"
        r = gc_sbx.run("gc", "--json").ok()
        acts = [a for a in json.loads(r.stdout)["actions"] if a["target"].endswith("/sbx_aaaaaaaaaaaa")]
        assert acts and acts[0]["done"], r
        assert not orphan.exists(), "gc did not remove the orphan cgroup"
        assert live not in [a["target"] for a in json.loads(r.stdout)["actions"]]
        assert gc_sbx.exec(live, "true").rc == 0, "gc hurt a live sandbox while reaping an orphan"
    finally:
        if orphan.exists():
            orphan.rmdir()


@subprocess_only
def _started_then_sleep(driver: str) -> list[str]:
    if driver == "deno":
        return ["python3", "-c", "import time; print('started', flush=True); time.sleep(60)"]
    return ["sh", "-c", "echo started; sleep 60"]


def test_killed_exec_rm_is_collected(gc_sbx, driver):
    # What a CI runner does at its deadline: kill -9 of `sbx exec --rm`.
    before = set(gc_sbx.ls_ids())
    p = gc_sbx.popen("exec", "--rm", "--driver", driver, "--", *_started_then_sleep(driver))
    (sid,) = signal_once_started(p, signal.SIGKILL, lambda: set(gc_sbx.ls_ids()) - before)
    if driver == "remote":
        # The manager ties a one-shot to its HTTP request: gone with the client, no gc needed.
        assert wait_until(lambda: sid not in gc_sbx.ls_ids(), 10), f"{sid} outlived its killed client on the manager"
        return
    rec = gc_sbx.record(sid)
    assert rec and rec["one_shot"]["pid"] == p.pid, rec
    r = gc_sbx.run("gc", "--json").ok()
    a = _sandbox_actions(json.loads(r.stdout)).get(sid)
    assert a and a["done"] and a["reason"] == f"one-shot client (pid {p.pid}) is gone", r
    assert sid not in gc_sbx.ls_ids()
    assert not os.path.exists(gc_sbx.sandbox_dir(sid))
    assert not [d for d in gc_sbx.cgroup_dirs(sid) if os.path.isdir(d)]


def test_live_exec_rm_is_kept_by_gc(gc_sbx, driver):
    before = set(gc_sbx.ls_ids())
    p = gc_sbx.popen("exec", "--rm", "--driver", driver, "--", *_started_then_sleep(driver))

    def gc_while_it_runs():
        (sid,) = set(gc_sbx.ls_ids()) - before
        r = gc_sbx.run("gc", "--json").ok()
        assert sid not in _sandbox_actions(json.loads(r.stdout)), r
        assert sid in gc_sbx.ls_ids()
        return sid

    sid = signal_once_started(p, signal.SIGTERM, gc_while_it_runs)
    assert p.returncode == 143
    # Through a manager the one-shot goes once the manager sees its client gone,
    # a moment after the client exits.
    assert wait_until(lambda: sid not in gc_sbx.ls_ids(), 15), f"{sid} outlived its one-shot"


@pytest.mark.only_drivers("subprocess", "runsc", "microvm", "deno")
def test_exec_rm_answers_before_its_teardown_and_gc_finishes_a_cut_one(gc_sbx, driver):
    # `sbx exec --rm` hands the sandbox's removal to a detached process and
    # exits with the command's status. Killed at the removal's first step (a
    # test-only crash point), that process takes the call's result with it no
    # longer (before: the call itself died, -9); the sandbox waits for gc.
    before = set(gc_sbx.ls_ids())
    cmd = ["python3", "-c", "raise SystemExit(7)"] if driver == "deno" else ["sh", "-c", "exit 7"]
    r = gc_sbx.run("exec", "--rm", "--driver", driver, "--", *cmd, env={"SBX_TEST_CRASH_AT": "rm.locked"})
    assert r.rc == 7, r
    (sid,) = set(gc_sbx.ls_ids()) - before
    r = gc_sbx.run("gc", "--json").ok()
    a = _sandbox_actions(json.loads(r.stdout)).get(sid)
    assert a and a["done"] and a["reason"].startswith("one-shot client"), r
    assert sid not in gc_sbx.ls_ids()
    assert not os.path.exists(gc_sbx.sandbox_dir(sid))
    assert not [d for d in gc_sbx.cgroup_dirs(sid) if os.path.isdir(d)]
    assert not mountinfo_lines_mentioning(gc_sbx.sandbox_dir(sid))


def _removals_left(s: Sbx) -> list[str]:
    return sorted(p.name for p in Path(s.state_dir, "sandboxes").glob(".removing-*"))


def _one_shot_torn_down_in_the_background(s: Sbx, driver: str, env: dict) -> None:
    """A one-shot whose detached teardown gets env, which has reached the rename when this returns."""
    before = set(s.ls_ids())
    trace = Path(s.state_dir, f"trace-{secrets.token_hex(4)}")
    r = s.run("exec", "--rm", "--driver", driver, "--", "sh", "-c", "exit 3",
              env={**env, "SBX_TEST_FAULT_TRACE": str(trace)})
    assert r.rc == 3, r
    # The teardown reaches the rename (the stall or the crash is there) after the call returned.
    assert wait_until(lambda: trace.exists() and "rm.renamed" in trace.read_text().split(), 60), r
    assert not set(s.ls_ids()) - before  # past its record: `ls` and rm --all's listing no longer see it


# A one-shot's teardown renames the sandbox's directory to .removing-ID, then deletes it. `rm --all`
# lists sandboxes by record, so it returned while that delete ran, and CI's leak check found
# .removing-ID (2026-12-07, under load). Stalled there for 3 s (a test-only point), the delete is
# still running when rm --all starts: it must wait for it.
@pytest.mark.only_drivers("subprocess", "runsc")
def test_rm_all_waits_for_a_one_shots_teardown_past_its_record(gc_sbx, driver):
    _one_shot_torn_down_in_the_background(gc_sbx, driver, {"SBX_TEST_STALL_AT": "rm.renamed:3000"})
    assert _removals_left(gc_sbx), "the stalled teardown should still be deleting"
    gc_sbx.run("rm", "--all").ok()
    assert not _removals_left(gc_sbx)


@pytest.mark.only_drivers("subprocess")
def test_gc_waits_for_a_one_shots_teardown_past_its_record(gc_sbx, driver):
    _one_shot_torn_down_in_the_background(gc_sbx, driver, {"SBX_TEST_STALL_AT": "rm.renamed:3000"})
    assert _removals_left(gc_sbx)
    r = gc_sbx.run("gc", "--json").ok()
    assert not json.loads(r.stdout)["actions"], r  # its own remover finished it
    assert not _removals_left(gc_sbx)


# Its remover killed after the rename: the lock it held is free, so rm --all and gc finish the
# removal at once (gc waited two minutes, taking any such directory for a removal in progress).
@pytest.mark.only_drivers("subprocess")
@pytest.mark.parametrize("how", ["rm --all", "gc"])
def test_a_removal_cut_short_after_its_rename_is_finished_at_once(gc_sbx, driver, how):
    _one_shot_torn_down_in_the_background(gc_sbx, driver, {"SBX_TEST_CRASH_AT": "rm.renamed"})
    (left,) = _removals_left(gc_sbx)
    if how == "gc":
        r = gc_sbx.run("gc", "--json").ok()
        acts = [a for a in json.loads(r.stdout)["actions"] if a["target"].endswith(left)]
        assert acts and acts[0]["kind"] == "stray_dir" and acts[0]["done"], r
    else:
        gc_sbx.run("rm", "--all").ok()
    assert not _removals_left(gc_sbx)


def test_gc_spares_other_state_roots(sbx, sandbox, session_root, driver):
    # Two state roots on one host (e.g. per-user roots, or CI jobs with their own
    # SBX_STATE_DIR). gc of one must not treat the other's live sandboxes as orphans.
    # Dry run only: a real run would kill every other sbx user's sandboxes on this host.
    other = Sbx(os.path.join(session_root, "state-other"), sbx.config_file, label="other")
    r = other.run("gc", "--dry-run", "--json").ok()
    hits = [a for a in json.loads(r.stdout)["actions"] if sandbox in a["target"]]
    assert not hits, (f"`sbx gc` on an unrelated state root would destroy live sandbox {sandbox} "
                      f"of another state root: {hits}")
    assert sbx.exec(sandbox, "true").rc == 0


# --------------------------------------------------------------------------
# sandbox processes name themselves
# --------------------------------------------------------------------------


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


# runsc's long-lived host processes are runsc's own (runsc-sandbox, the gofer):
# nothing of the sbx call is in them, and no sbx process outlives it.
TITLED = {"subprocess", "deno", "microvm"}


@pytest.mark.parametrize("name", ["subprocess", "deno"] + [d for d in DRIVERS if d not in ("subprocess", "deno", "remote")])
def test_sandbox_processes_name_themselves(sbx, name):
    problem = driver_problem(sbx, name)
    if problem:
        skip_or_fail(problem)
    # The marker is the creating call's argv[0]: what ps showed of it, and of
    # every sandbox process that kept its argv.
    marker = "sbx-marker-" + secrets.token_hex(4)
    p = subprocess.run([marker, "create", "--driver", name], executable=SBX_BIN, env=sbx.env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    sid = p.stdout.decode().strip()
    assert p.returncode == 0 and ID_RE.match(sid), p
    sbx.created.append(sid)
    try:
        procs = cmdlines()
        # Another lane of the suite (scripts/test.sh) may be creating sandboxes
        # right now with its own copy of sbx: only this session's copy counts.
        mine = os.path.dirname(SBX_BIN) + "/"
        leaked = {pid: cmd for pid, cmd in procs.items()
                  if marker in cmd or (cmd.startswith(mine) and " create --driver " in cmd)}
        assert not leaked, f"processes still showing the argv of `sbx create`: {leaked}"
        if name in TITLED:
            agent = sbx.record(sid)["agent_pid"]
            assert procs.get(agent, "").startswith(f"sbx-sandbox {sid} {name}"), (agent, procs.get(agent))
            assert comm(agent) == "sbx-sandbox"
        if name == "deno":
            # The deno the supervisor runs carries the title as its argv[0].
            kids = Path(f"/proc/{agent}/task/{agent}/children").read_text().split()
            assert kids and all(cmdlines().get(int(k), "").startswith(f"sbx-sandbox {sid} deno ") for k in kids), kids
    finally:
        sbx.remove(sid)


# --------------------------------------------------------------------------
# rm leaves nothing behind
# --------------------------------------------------------------------------


@subprocess_only
def test_rm_leaves_nothing(sbx, make_sandbox, driver):
    sid = make_sandbox(driver=driver)
    pid = sbx.record(sid)["agent_pid"]
    sdir = sbx.sandbox_dir(sid)
    assert os.path.isdir(sdir) and pid_alive(pid)
    assert [d for d in sbx.cgroup_dirs(sid) if os.path.isdir(d)], "no cgroup found for a running sandbox"
    # Sanity for the mount check below: while it runs, its overlay names the state dir.
    assert mountinfo_lines_mentioning(sdir), "expected the sandbox's overlay mount to reference its state dir"
    r = sbx.run("rm", sid).ok()
    assert r.out.strip() == sid
    assert wait_until(lambda: not pid_alive(pid), 5), f"agent pid {pid} still alive after rm"
    assert not [d for d in sbx.cgroup_dirs(sid) if os.path.isdir(d)], "cgroup left after rm"
    assert wait_until(lambda: not mountinfo_lines_mentioning(sdir), 5), mountinfo_lines_mentioning(sdir)
    assert not os.path.exists(sdir), f"state directory {sdir} left after rm"


@subprocess_only
def test_rm_all_leaves_no_scope_cgroup(sbx, session_root, driver):
    # Removing every sandbox of a state root must not leave cgroup directories
    # behind, including any per-state-root parent sbx made for them: with one
    # state root per CI job or per test, empty parents pile up without bound
    # (and each v1 memory cgroup holds one of only 65535 ids).
    runner = Sbx(os.path.join(session_root, "state-scope"), sbx.config_file, label="scope")
    sid = runner.create(driver=driver)
    dirs = runner.cgroup_dirs(sid)
    assert dirs, "no cgroup found for a running sandbox"
    created_parents = {os.path.dirname(d) for d in dirs} - set(runner.cgroup_parents)
    try:
        runner.run("rm", "--all").ok()
        runner.run("gc").ok()
        assert not runner.cgroup_dirs(sid)
        left = sorted(d for d in created_parents if os.path.isdir(d))
        assert not left, f"empty cgroup parents left after rm --all and gc: {left}"
    finally:
        problems = runner.cleanup_and_check()
        assert not problems, problems


@subprocess_only
def test_state_root_reached_through_symlink(sbx, session_root, driver):
    # The same state root named two ways (a symlink, as /var/lib -> /data/lib
    # setups have) is one registry; removing a sandbox through either name must
    # free its cgroups.
    real = os.path.join(session_root, "state-real")
    os.makedirs(real)
    link = os.path.join(session_root, "state-link")
    os.symlink(real, link)
    via_link = Sbx(link, sbx.config_file, label="via-link")
    via_real = Sbx(real, sbx.config_file, label="via-real")
    sid = via_link.create(driver=driver)
    try:
        assert sid in via_real.ls_ids()
        via_real.run("rm", sid).ok()
        left = via_link.cgroup_dirs(sid)
        assert not left, f"cgroups left after `rm` through the state root's other name: {left}"
    finally:
        via_link.run("rm", "-f", sid)
        via_link.run("gc")  # collects a cgroup the rm above may have leaked
        via_real.created.extend(via_link.created)
        problems = via_real.cleanup_and_check()
        for d in via_link.scope_dirs:
            try:
                os.rmdir(d)
            except OSError:
                pass
    assert not problems, problems


# --------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------


def test_local_backend_none_fails_closed(sbx):
    r = sbx.run("exec", "--rm", "--", "true",
                env={"LOCAL_SANDBOX_BACKEND": "none", "USE_REMOTE_SANDBOX": "true"})
    assert r.rc == 125, r
    assert r.err.startswith("sbx: error:") and "LOCAL_SANDBOX_BACKEND=none" in r.err, r


def test_invalid_use_remote_sandbox(sbx):
    r = sbx.run("exec", "--rm", "--", "true", env={"USE_REMOTE_SANDBOX": "maybe"})
    assert r.rc == 2, r
    assert r.err.startswith("sbx: error:"), r
    assert "USE_REMOTE_SANDBOX" in r.err and "maybe" in r.err, r
    assert "true" in r.err and "false" in r.err, f"the message should name the accepted values: {r!r}"


def test_sandbox_backend_alias_is_deprecated(sbx):
    r = sbx.run("ls", "-q", env={"SANDBOX_BACKEND": "syd"})
    assert r.rc == 0, r
    assert "sbx: warning:" in r.err and "SANDBOX_BACKEND" in r.err and "deprecated" in r.err, r
    r = sbx.run("ls", "-q", env={"SANDBOX_BACKEND": "syd", "REMOTE_SANDBOX_BACKEND": "syd"})
    assert r.rc == 0 and "deprecated" in r.err, r
    r = sbx.run("ls", "-q")
    assert "deprecated" not in r.err, r


def test_doctor_json(sbx):
    r = sbx.run("doctor", "--json")
    assert r.rc == 0, r
    rep = json.loads(r.stdout)
    assert {"version", "host", "drivers", "selection"} <= set(rep), rep.keys()
    for p in rep["host"]:
        assert {"name", "ok", "detail", "remedy"} <= set(p), p
    names = [d["name"] for d in rep["drivers"]]
    assert "subprocess" in names
    for d in rep["drivers"]:
        assert {"name", "summary", "ok", "checks"} <= set(d), d
        for c in d["checks"]:
            assert {"name", "ok", "detail", "remedy"} <= set(c) and isinstance(c["ok"], bool), c
    sel = rep["selection"]
    assert sel["ok"] is True and sel["driver"] == "subprocess", sel
    assert isinstance(sel["steps"], list) and sel["steps"], sel


def test_doctor_selects_the_default_backend(sbx):
    # Default LOCAL_SANDBOX_BACKEND is deno: selected when its runtime is installed, a failure naming it otherwise.
    r = sbx.run("doctor", "--json", unset=["LOCAL_SANDBOX_BACKEND"])
    rep = json.loads(r.stdout)
    deno_ok = next(d["ok"] for d in rep["drivers"] if d["name"] == "deno")
    sel = rep["selection"]
    if deno_ok:
        assert r.rc == 0 and sel["ok"] is True and sel["driver"] == "deno", sel
    else:
        assert r.rc != 0 and sel["ok"] is False and "deno" in json.dumps(sel), sel


def test_doctor_human_output(sbx):
    r = sbx.run("doctor").ok()
    assert "\u2713" in r.out and "subprocess" in r.out, r


# --------------------------------------------------------------------------
# output conventions
# --------------------------------------------------------------------------


def test_create_prints_only_the_id(sbx, make_sandbox):
    r = sbx.run("create", "--driver", "subprocess", "-l", "purpose=id-format")
    sid = r.out.strip()
    if ID_RE.match(sid):
        sbx.created.append(sid)
        sbx.remove(sid)
    assert r.rc == 0, r
    assert ID_RE.match(sid) and r.out == sid + "\n", f"stdout must be the id alone: {r.stdout!r}"
    assert r.err == "", f"create wrote to stderr when it is not a terminal: {r.err!r}"


@pytest.mark.parametrize("args,status", [
    (["create", "--memory", "lots"], 2),
    (["create", "--pids", "many"], 2),
    (["create", "--driver", "no-such-driver"], 2),
    (["create", "--idle-timeout", "soon"], 2),
    (["create", "--driver", "subprocess", "--allow", "203.0.113.0/24"], 2),
    (["create", "--driver", "subprocess", "--network", "jail", "--allow", "fd00::/8"], 2),
    (["create", "--driver", "subprocess", "--network", "jail", "--allow", "10.0.0.1/8"], 2),
    (["frobnicate"], 2),
    (["ls", "--filter", "colour=blue"], 2),
    (["exec", "sbx_aaaaaaaaaaad", "--", "true"], 125),
    (["exec"], 2),
    (["cp", "/etc/hostname", "/tmp/x"], 2),
    (["rm"], 2),
    (["create", "--driver", "subprocess", "-l", "novalue"], 2),
    (["create", "--driver", "subprocess", "-e", "=x"], 2),
    (["create", "--driver", "subprocess", "-w", "relative/dir"], 2),
    (["create", "--driver", "subprocess", "--image", "/nonexistent/rootfs"], 125),
    (["exec", "--rm", "--timeout", "forever", "--", "true"], 2),
])
def test_errors_start_with_sbx_error(sbx, args, status):
    before = set(sbx.ls_ids())
    r = sbx.run(*args)
    assert r.rc == status, r
    assert r.err.startswith("sbx: error:"), r
    assert r.stdout == b"", r
    assert set(sbx.ls_ids()) <= before, "a failed command left a sandbox behind"
