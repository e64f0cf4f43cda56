"""The warm pool (core/pool.hpp), with real subprocess sandboxes: fill, claim,
compatibility, concurrent claims, dead and surplus pooled sandboxes, gc,
drain and rm, and the background refill of a real `sbx serve`.

Each test has its own state root (a `clients` Client), so pooled sandboxes
never meet the session's; the fixtures' `rm --all` leaves nothing behind.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ID_RE, SBX_BIN, driver_problem, skip_or_fail, wait_until
from manager_fixtures import clients, managers, manager_root, scrubbed_env  # noqa: F401


@pytest.fixture(autouse=True)
def _subprocess_driver(sbx):
    problem = driver_problem(sbx, "subprocess")
    if problem:
        skip_or_fail(problem)


@pytest.mark.only_drivers("subprocess", "runsc")
def test_each_local_driver_serves_creates_from_its_pool(clients, driver):
    c = clients.new({"SBX_POOL": f"{driver}=1"}, label=f"pool-{driver}")
    (pid,) = fill(c, 1, driver)
    sid = c.create("--memory", "300M", "-e", "X=from-the-pool", driver=driver)
    assert sid == pid and c.record(sid)["from_pool"] is True
    assert memory_cap(c, sid) == 300 << 20
    assert c.sh(sid, 'echo "$X"').ok().out == "from-the-pool\n"
    assert status(c)[driver]["ready"] == 0


def pooled(c) -> list[dict]:
    return c.ls("--filter", "state=pooled")


def status(c, **env) -> dict:
    rows = json.loads(c.run("pool", "status", "--json", env=env or None).ok().out)
    return {r["driver"]: r for r in rows}


def fill(c, n: int, driver: str = "subprocess") -> list[str]:
    ids = c.run("pool", "fill", timeout=120).ok().out.split()
    assert all(ID_RE.match(i) for i in ids), ids
    c.created.extend(ids)
    assert status(c)[driver]["ready"] == n
    return ids


def memory_cap(c, sid) -> int:
    for d in c.cgroup_dirs(sid):
        for knob in ("memory.max", "memory.limit_in_bytes"):
            p = Path(d, knob)
            if p.exists():
                return int(p.read_text())
    raise AssertionError(f"no memory cgroup for {sid}: {c.cgroup_dirs(sid)}")


def test_fill_then_create_claims_a_pooled_sandbox(clients):
    c = clients.new({"SBX_POOL": "subprocess=2"}, label="pool-claim")
    ids = fill(c, 2)
    assert len(ids) == 2
    # A second fill has nothing to do.
    assert c.run("pool", "fill").ok().out == ""
    # Hidden from a plain ls, shown by state.
    assert c.ls() == []
    assert sorted(r["id"] for r in pooled(c)) == sorted(ids)

    sid = c.create("-e", "GREETING=hi", "-l", "team=pool", "--workdir", "/work/app/src", "--idle-timeout", "1h")
    assert sid in ids, "a fitting create must take a pooled sandbox"
    rec = c.record(sid)
    assert rec["state"] == "running" and rec["from_pool"] is True, rec
    assert rec["spec"]["labels"] == {"team": "pool"} and rec["spec"]["idle_timeout_s"] == 3600, rec
    r = c.sh(sid, 'echo "$GREETING $(pwd)"').ok()
    assert r.out == "hi /work/app/src\n", r
    assert status(c)["subprocess"]["ready"] == 1
    # An exec into a sandbox still in the pool is refused: nobody owns it yet.
    (left,) = [i for i in ids if i != sid]
    r = c.exec(left, "true")
    assert r.rc != 0 and "pooled" in r.err, r
    # The pool is topped up again by the next fill.
    assert len(c.run("pool", "fill").ok().out.split()) == 1


def test_limits_are_changed_on_the_claimed_sandbox(clients):
    c = clients.new({"SBX_POOL": "subprocess=1"}, label="pool-limits")
    (pid,) = fill(c, 1)
    sid = c.create("--memory", "300M", "--pids", "100")
    assert sid == pid
    assert memory_cap(c, sid) == 300 << 20
    rec = c.record(sid)
    assert rec["spec"]["limits"]["memory_mb"] == 300 and rec["spec"]["limits"]["pids"] == 100, rec
    # The cap holds: a 400M allocation is killed.
    r = c.sh(sid, "head -c 400m /dev/zero | tail > /dev/null", timeout=60)
    assert r.rc != 0, r


@pytest.mark.parametrize("flags", [["--disk", "2G"], ["--workdir", "/srv/app"]], ids=["disk", "workdir"])
def test_an_incompatible_spec_starts_cold(clients, flags):
    c = clients.new({"SBX_POOL": "subprocess=1"}, label="pool-cold")
    (pid,) = fill(c, 1)
    sid = c.create(*flags)
    assert sid != pid
    assert c.record(sid)["from_pool"] is False
    assert [r["id"] for r in pooled(c)] == [pid], "the pooled sandbox must stay in the pool"


def test_no_pool_configured_means_cold_creates_and_a_clear_fill_error(clients):
    c = clients.new({}, label="pool-none")
    r = c.run("pool", "fill")
    assert r.rc == 2 and "no pool is configured" in r.err and "SBX_POOL" in r.err, r
    sid = c.create()
    assert c.record(sid)["from_pool"] is False


def test_concurrent_creates_never_share_a_sandbox(clients):
    c = clients.new({"SBX_POOL": "subprocess=4"}, label="pool-race")
    ids = set(fill(c, 4))
    procs = [c.popen("create", "--driver", "subprocess") for _ in range(8)]
    got = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        got.append(out.decode().strip())
    c.created.extend(got)
    assert len(set(got)) == len(got), f"two creates got the same sandbox: {got}"
    claimed = ids & set(got)
    assert claimed, "no create took a pooled sandbox"
    left = {r["id"] for r in pooled(c)}
    assert not (left & claimed) and left | claimed == ids, (left, claimed, ids)
    for sid in got:
        rec = c.record(sid)
        assert rec["state"] == "running" and rec["from_pool"] == (sid in ids), rec
        c.sh(sid, "true").ok()


def test_a_dead_pooled_sandbox_is_skipped_and_removed(clients):
    c = clients.new({"SBX_POOL": "subprocess=1"}, label="pool-dead")
    (pid,) = fill(c, 1)
    (rec,) = pooled(c)
    os.kill(rec["agent_pid"], signal.SIGKILL)
    assert wait_until(lambda: status(c)["subprocess"]["stale"] == 1, 10)
    sid = c.create()
    assert sid != pid and c.record(sid)["from_pool"] is False
    # The claim destroyed it on the way; nothing of it is left.
    assert pooled(c) == [] and not os.path.exists(c.sandbox_dir(pid)) and c.cgroup_dirs(pid) == []


def test_gc_reaps_dead_and_surplus_pooled_sandboxes_but_never_idle_ones(clients, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("defaults:\n  idle_timeout: 1s\npool:\n  subprocess: 3\n")
    c = clients.new({"SBX_CONFIG": str(cfg)}, label="pool-gc")
    ids = fill(c, 3)
    time.sleep(1.5)
    # Idle past the default idle timeout, but waiting in the pool is not idleness.
    r = c.run("gc", "--json").ok()
    assert json.loads(r.out)["actions"] == [], r
    os.kill(pooled(c)[0]["agent_pid"], signal.SIGKILL)
    assert wait_until(lambda: status(c)["subprocess"]["stale"] == 1, 10)
    # The pool shrinks to 1: of the two live ones, one is surplus.
    acts = json.loads(c.run("gc", "--json", env={"SBX_POOL": "subprocess=1"}).ok().out)["actions"]
    reasons = sorted(a["reason"] for a in acts)
    assert len(acts) == 2 and all(a["done"] for a in acts), acts
    assert "its agent is gone" in reasons[0] and "beyond the subprocess pool size of 1" in reasons[1], reasons
    (kept,) = pooled(c)
    assert kept["id"] in ids
    # No pool at all: the last one goes too.
    acts = json.loads(c.run("gc", "--json", env={"SBX_POOL": "subprocess=0"}).ok().out)["actions"]
    assert [a["target"] for a in acts] == [kept["id"]], acts
    for sid in ids:
        assert not os.path.exists(c.sandbox_dir(sid)) and c.cgroup_dirs(sid) == []


def test_gc_reaps_pooled_sandboxes_started_with_old_defaults(clients, tmp_path):
    c = clients.new({"SBX_POOL": "subprocess=1"}, label="pool-stale")
    (pid,) = fill(c, 1)
    cfg = tmp_path / "config.yaml"
    cfg.write_text("defaults:\n  memory: 256M\n")
    # Started with 512M; under the new defaults (256M) the pool would start others, so gc replaces it.
    acts = json.loads(c.run("gc", "--json", env={"SBX_CONFIG": str(cfg)}).ok().out)["actions"]
    assert [(a["target"], a["reason"]) for a in acts] == [(pid, "pooled with settings the pool no longer uses")]


def test_drain_and_rm_all_leave_nothing(clients):
    c = clients.new({"SBX_POOL": "subprocess=2"}, label="pool-drain")
    ids = fill(c, 2)
    mine = c.create("--disk", "2G")  # cold, not pooled: drain must not touch it
    assert sorted(c.run("pool", "drain").ok().out.split()) == sorted(ids)
    assert pooled(c) == [] and [r["id"] for r in c.ls()] == [mine]
    ids = fill(c, 2)
    removed = c.run("rm", "--all").ok().out.split()
    assert sorted(removed) == sorted(ids + [mine])
    for sid in ids + [mine]:
        assert not os.path.exists(c.sandbox_dir(sid)) and c.cgroup_dirs(sid) == []


def test_one_shots_refill_the_pool_without_a_manager(clients):
    # No sbx serve here: the process that finishes a one-shot's removal tops the
    # pool up, so a loop of `sbx exec --rm` keeps taking pooled sandboxes
    # (before: the first one did, and every later one started cold).
    c = clients.new({"SBX_POOL": "subprocess=1"}, label="pool-oneshot")
    (spare,) = fill(c, 1)
    for _ in range(3):
        r = c.run("exec", "--rm", "--", "true")
        assert r.rc == 0, r

        def refilled():
            ids = [p["id"] for p in pooled(c)]
            return ids if ids and ids != [spare] else None
        ids = wait_until(refilled, 30)
        assert ids, f"the one-shot took {spare} and the pool stayed empty"
        c.created.extend(ids)
        (spare,) = ids


@pytest.mark.parametrize("clear", [["pool", "drain"], ["rm", "--all"]], ids=["drain", "rm-all"])
def test_drain_and_rm_all_right_after_a_one_shot_leave_nothing(clients, clear):
    # A one-shot's detached removal refills the pool. A drain or `rm --all` run
    # the moment the one-shot returns waits for that refill rather than miss
    # the spare it starts (before: a spare was left every time, and a script
    # that then deleted its state directory leaked a running sandbox).
    c = clients.new({"SBX_POOL": "subprocess=1"}, label="pool-oneshot-clear")
    fill(c, 1)
    for _ in range(3):
        assert c.run("exec", "--rm", "--", "true").rc == 0
        c.run(*clear).ok()
        time.sleep(1)  # a refill still in flight starts its spare well within this
        assert c.ls() == [] and pooled(c) == [] and status(c)["subprocess"]["ready"] == 0
        c.run("pool", "fill").ok()


@pytest.mark.only_drivers("subprocess", "runsc")
def test_a_snapshot_pool_serves_create_from_with_the_snapshots_files(clients, driver):
    # Before: a create --from never took a pooled sandbox, so a fork started cold and copied the layer.
    c = clients.new({"SBX_POOL": "snapshot:web=1"}, label=f"pool-snapshot-{driver}")
    src = c.create(driver=driver)
    c.sh(src, "echo v1 > /work/f").ok()
    c.run("snapshot", src, "web", timeout=120).ok()
    (spare,) = fill(c, 1, "snapshot:web")
    assert c.create(driver=driver) != spare, "a plain create must not get a snapshot's files"
    sid = c.create("--from", "web", driver=None)
    assert sid == spare and c.record(sid)["from_pool"] is True
    assert c.record(sid)["spec"]["driver"] == driver
    assert c.sh(sid, "cat /work/f; echo v2 > /work/f").ok().out == "v1\n"
    cold = c.create("--from", "web", driver=None)  # the pool is empty now: started cold, as before
    assert cold != sid and c.sh(cold, "cat /work/f").ok().out == "v1\n"
    # The name taken by other files: the spare on the old ones is stale, gc removes it, the next fill starts on the new.
    (old,) = fill(c, 1, "snapshot:web")
    c.run("snapshot", sid, "web", timeout=120).ok()
    st = status(c)
    assert st["snapshot:web"]["ready"] == 0 and st[driver]["stale"] == 1, st  # no pool starts it now: its driver's row
    acts = json.loads(c.run("gc", "--json").ok().out)["actions"]
    assert [(a["target"], a["reason"]) for a in acts] == [(old, "pooled with settings the pool no longer uses")]
    (new,) = fill(c, 1, "snapshot:web")
    assert c.create("--from", "web", driver=None) == new and c.sh(new, "cat /work/f").ok().out == "v2\n"
    c.run("snapshot", "rm", "web").ok()
    assert "no such snapshot" in status(c)["snapshot:web"]["problem"]
    r = c.run("pool", "fill")
    assert r.rc != 0 and "no such snapshot" in r.err, r


def test_sbx_serve_refills_its_pool_in_the_background(managers):
    m = managers.new("pool", "pool:\n  subprocess: 2\nserver:\n  reap_interval: 1h\n")

    def local(*args) -> subprocess.CompletedProcess:
        return subprocess.run([SBX_BIN, "--state-dir", m.state_dir, "--config", m.config, *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                              env=scrubbed_env({"USE_REMOTE_SANDBOX": "false", "LOCAL_SANDBOX_BACKEND": "subprocess"}))

    def ready() -> set[str]:
        out = local("ls", "--json", "--filter", "state=pooled").stdout
        return {r["id"] for r in json.loads(out) if not r["error"]}

    first = wait_until(lambda: len(ready()) == 2 and ready(), 20)
    assert first and len(first) == 2, m.log()[-2000:]
    # The API lists sandboxes of keys; the pool's are nobody's until claimed.
    assert m.ids() == [] and sorted(m.ids("?state=pooled")) == sorted(first)
    rec = m.create({"driver": "subprocess", "labels": {"app": "x"}})
    m.created.add(rec["id"])
    assert rec["id"] in first and rec["from_pool"] is True and rec["spec"]["labels"] == {"app": "x"}, rec
    assert m.exec(rec["id"], ["echo", "ok"])["stdout"] == "ok\n"
    again = wait_until(lambda: len(ready()) == 2 and ready(), 20)
    assert again and rec["id"] not in again and len(again - first) == 1, (first, again)
    metrics = m.request("GET", "/metrics").text
    assert 'sbx_creates_total{driver="subprocess",source="pool"} 1' in metrics, metrics
    assert 'state="pooled"} 2' in metrics, metrics


def cgroup_knob(c, sid, name: str) -> str:
    for d in c.cgroup_dirs(sid):
        p = Path(d, name)
        if p.exists():
            return p.read_text().strip()
    raise AssertionError(f"no {name} for {sid}: {c.cgroup_dirs(sid)}")


def cpu_quota(c, sid) -> float:
    """The cpu cap in cores, from cgroup v2's cpu.max or v1's cfs quota/period."""
    for d in c.cgroup_dirs(sid):
        if Path(d, "cpu.max").exists():
            quota, period = Path(d, "cpu.max").read_text().split()
            return int(quota) / int(period)
        if Path(d, "cpu.cfs_quota_us").exists():
            return int(Path(d, "cpu.cfs_quota_us").read_text()) / int(Path(d, "cpu.cfs_period_us").read_text())
    raise AssertionError(f"no cpu cgroup for {sid}: {c.cgroup_dirs(sid)}")


def deno_heap_flag(rec: dict) -> str:
    """The V8 heap cap on the command line of the deno the sandbox's supervisor runs."""
    sup = rec["agent_pid"]
    kids = Path(f"/proc/{sup}/task/{sup}/children").read_text().split()
    assert len(kids) == 1, kids
    argv = Path(f"/proc/{kids[0]}/cmdline").read_bytes().split(b"\0")
    (flags,) = [a.decode() for a in argv if a.startswith(b"--v8-flags=")]
    return flags.split(",")[0].removeprefix("--v8-flags=")


def deno_pool_of_one(clients, label: str):
    if os.geteuid() != 0:
        skip_or_fail("deno sandboxes have cgroup caps only when sbx runs as root")
    c = clients.new({"SBX_POOL": "deno=1"}, label=label)
    (pid,) = fill(c, 1, "deno")
    return c, pid


@pytest.mark.only_drivers("deno")
def test_a_pooled_deno_sandbox_takes_the_creates_cpu_and_pids_caps(clients, driver):
    c, pid = deno_pool_of_one(clients, "pool-deno-caps")
    sid = c.create("--cpus", "0.5", "--pids", "64", driver="deno")
    assert sid == pid and c.record(sid)["from_pool"] is True
    assert cgroup_knob(c, sid, "pids.max") == "64"
    assert cpu_quota(c, sid) == 0.5
    limits = c.record(sid)["spec"]["limits"]
    assert limits["cpus"] == 0.5 and limits["pids"] == 64, limits
    r = c.exec(sid, "node", "-e", "console.log(6 * 7)", timeout=60)
    assert r.rc == 0 and r.out == "42\n", r


@pytest.mark.only_drivers("deno")
def test_a_deno_create_with_another_memory_cap_starts_cold_with_its_own_caps(clients, driver):
    # The agent's V8 heap and WebAssembly caps follow the memory cap and are
    # fixed at start: a pooled agent sized for the default must not serve it.
    c, pid = deno_pool_of_one(clients, "pool-deno-mem")
    sid = c.create("--memory", "200M", driver="deno")
    assert sid != pid and c.record(sid)["from_pool"] is False
    assert memory_cap(c, sid) == 200 << 20
    assert deno_heap_flag(c.record(sid)) == "--max-old-space-size=100"
    (still,) = pooled(c)
    assert still["id"] == pid, "the pooled sandbox must stay in the pool"
    assert deno_heap_flag(still) != "--max-old-space-size=100"
