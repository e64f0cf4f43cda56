"""`sbx snapshot` / `sbx create --from` / `sbx fork` (docs/snapshots.md): a
snapshot is a consistent copy of a sandbox's files, taken paused and resumed
after; sandboxes started from it have those files and are independent of it
and of each other; and nothing whose write returned before a pause or a
snapshot is lost, across pause/resume cycles and a manager killed with SIGKILL."""
from __future__ import annotations

import json
import os
import time
import threading

import pytest

from conftest import Sbx, wait_until
from manager_fixtures import module_managers, manager_root, strong_key  # noqa: F401

# The drivers whose sandboxes run a shell (the tests below use one); deno has its own tests at the end.
SNAPSHOT_DRIVERS = ("subprocess", "runsc", "microvm")

# The writer: file w.N holds "N:" and N's square; `done` names the last N whose write returned
# (renamed into place, so a reader sees a whole number).
WRITER = ("i=0; while :; do echo \"$i:$((i*i))\" > /work/w.$i; echo $i > /work/done.tmp; "
          "mv /work/done.tmp /work/done; i=$((i+1)); done")
CHECK = ("n=$(cat /work/done); i=0; while [ $i -le $1 ]; do "
         "[ \"$(cat /work/w.$i 2>/dev/null)\" = \"$i:$((i*i))\" ] || echo MISSING $i; i=$((i+1)); done; echo CHECKED")


def _snapshots(sbx) -> list[dict]:
    return json.loads(sbx.run("snapshot", "ls", "--json").ok().out)


def _state(sbx, sid) -> str:
    return sbx.record(sid)["state"]


def _check_files(sbx, sid, upto: int):
    r = sbx.sh(sid, CHECK.replace("$1", str(upto))).ok()
    assert "MISSING" not in r.out and r.out.endswith("CHECKED\n"), f"{sid} lost files up to {upto}: {r.out[:400]}"


# "remote": the same through the manager's routes (the CLI's RemoteBackend), the manager's owner rules.
@pytest.mark.only_drivers(*SNAPSHOT_DRIVERS, "remote")
def test_snapshot_create_from_and_fork_are_independent(sbx, sandbox, driver, make_sandbox):
    sbx.sh(sandbox, "echo one > /work/a; mkdir -p /work/d; echo two > /work/d/b").ok()
    name = f"snap-{driver}"
    assert sbx.run("snapshot", sandbox, name).ok().out == name + "\n"
    assert _state(sbx, sandbox) == "running", "a running sandbox runs again after the snapshot"
    snaps = {s["name"]: s for s in _snapshots(sbx)}
    assert snaps[name]["source"] == sandbox and snaps[name]["digest"].startswith("sha256:")
    assert snaps[name]["spec"]["driver"] == driver

    child = sbx.run("create", "--from", name).ok().out.strip()
    sbx.created.append(child)
    try:
        r = sbx.sh(child, "cat /work/a /work/d/b; echo x > /work/d/own; touch /work/mine").ok()
        assert r.out == "one\ntwo\n"
        assert sbx.record(child)["spec"]["driver"] == driver
        sbx.sh(sandbox, "echo changed > /work/a").ok()
        assert sbx.exec(child, "cat", "/work/a").ok().out == "one\n", "a write in the source shows in the copy"
        assert sbx.sh(sandbox, "ls /work").ok().out.split() == ["a", "d"], "a write in the copy shows in the source"

        fork = sbx.run("fork", sandbox).ok().out.strip()
        sbx.created.append(fork)
        assert sbx.exec(fork, "cat", "/work/a").ok().out == "changed\n", "a fork has the files of now"
        sbx.sh(fork, "echo forked > /work/a").ok()
        assert sbx.exec(sandbox, "cat", "/work/a").ok().out == "changed\n"
        assert [s for s in _snapshots(sbx) if s["name"].startswith("fork-")] == [], "a fork leaves no snapshot"
        sbx.remove(fork).ok()
    finally:
        sbx.remove(child)
    # A paused sandbox stays paused.
    sbx.run("pause", sandbox).ok()
    sbx.run("snapshot", sandbox, name + "-p").ok()
    assert _state(sbx, sandbox) == "paused"
    # Same files, same layer: two names, one content address.
    sbx.run("snapshot", sandbox, name + "-q").ok()
    snaps = {s["name"]: s for s in _snapshots(sbx)}
    assert snaps[name + "-p"]["digest"] == snaps[name + "-q"]["digest"]
    for n in (name, name + "-p", name + "-q"):
        sbx.run("snapshot", "rm", n).ok()
    assert not [s for s in _snapshots(sbx) if s["name"].startswith(name)]
    assert sbx.run("snapshot", "rm", name).rc != 0, "removing a missing snapshot is an error"
    assert sbx.run("create", "--from", name).rc != 0


# The memory hog of the pressure variant: fills its cap and keeps touching every page, so
# the host reclaims around it while the writer's sandbox, itself under a small cap, writes.
HOG = ("import time\nb = [bytearray(1 << 20) for _ in range(200)]\n"
       "while True:\n  for x in b: x[0] = (x[0] + 1) % 256\n  time.sleep(0.01)")


@pytest.mark.only_drivers(*SNAPSHOT_DRIVERS)
@pytest.mark.parametrize("pressure", ["none", "memory"])
def test_nothing_lost_across_pauses_manager_kills_snapshot_and_fork(module_managers, driver, pressure):  # noqa: F811
    """The fault test of issue 15: a writer runs inside; ten pause/resume cycles through the
    manager, which is SIGKILLed and restarted between some; the writer stopped and the sandbox
    idle-paused by gc; then a snapshot and two sandboxes from it. Every file whose write had
    returned before a pause or the snapshot must be in the sandbox and in each copy, with its
    content. pressure=memory: the same with a memory hog in another sandbox and the writer's
    own sandbox capped at 64M (its page cache reclaimed as it writes)."""
    if pressure == "memory" and driver not in ("subprocess", "runsc"):
        pytest.skip("the pressure variant runs on subprocess and runsc (a micro-VM's page cache is the guest's)")
    # A micro-VM under TCG takes ~1 s an exec: fewer cycles there (still a kill while paused and one while running).
    cycles = (12 if driver == "microvm" else 40) if os.environ.get("SBX_SOAK") else (3 if driver == "microvm" else 10)
    m = module_managers.new(f"snap-{driver}-{pressure}", "server:\n  reap_interval: 1h\n", driver=driver)
    cli = Sbx(m.state_dir, m.config, label=f"snap-{driver}")
    spec = {"driver": driver, "persistent": True, "idle_timeout_s": 2}  # persistent: idle action pause
    if pressure == "memory":
        spec["limits"] = {"memory_mb": 64}
    sid = m.create(spec)["id"]
    made = [sid]
    try:
        if pressure == "memory":
            hog = m.create({"driver": driver, "limits": {"memory_mb": 256}})["id"]
            made.append(hog)
            cli.run("exec", "-d", hog, "--", "python3", "-c", HOG).ok()
        writer = cli.run("exec", "-d", sid, "--", "sh", "-c", WRITER).ok().out.strip()
        # Its first `done` (a loaded micro-VM under TCG takes seconds to get there).
        assert wait_until(lambda: cli.exec(sid, "cat", "/work/done").rc == 0, 60), "the writer never wrote"
        returned = -1
        for cycle in range(cycles):
            returned = int(cli.exec(sid, "cat", "/work/done").ok().out or -1) if cycle else returned
            r = m.request("POST", f"/v1/sandboxes/{sid}/pause")
            assert r.status == 200, r
            if cycle % 3 == 1:
                m.kill()  # SIGKILL while the sandbox is paused
                m.start()
            r = m.request("POST", f"/v1/sandboxes/{sid}/resume")
            assert r.status == 200, r
            if cycle % 3 == 2:
                m.kill()  # and while it runs
                m.start()
        # The last resume may come just before this: on a loaded host the writer needs a moment to write again.
        assert wait_until(lambda: int(cli.exec(sid, "cat", "/work/done").ok().out or -1) > returned >= 0, 60), \
            "the writer must go on across the cycles"
        cli.run("kill", sid, writer).ok()
        last = int(cli.exec(sid, "cat", "/work/done").ok().out)
        # Idle past its timeout, with nothing running: gc pauses it (its idle action).
        time.sleep(2.5)
        r = m.request("POST", "/v1/gc", {})
        acts = [a for a in r.json()["actions"] if a["target"] == sid]
        assert acts and acts[0]["kind"] == "pause" and acts[0]["done"], r.json()
        assert _state(cli, sid) == "paused"
        cli.run("snapshot", sid, f"lost-{driver}").ok()
        assert _state(cli, sid) == "paused", "a snapshot of a paused sandbox leaves it paused"
        copies = [cli.run("create", "--from", f"lost-{driver}").ok().out.strip(), cli.run("fork", sid).ok().out.strip()]
        made += copies
        for s in [sid] + copies:
            _check_files(cli, s, last)
            assert int(cli.exec(s, "cat", "/work/done").ok().out) == last
        cli.run("snapshot", "rm", f"lost-{driver}").ok()
    finally:
        for s in reversed(made):
            cli.remove(s)


@pytest.mark.only_drivers("subprocess", "runsc")  # the freezer's defect; a micro-VM's pause is QMP stop
def test_pause_catches_a_writer_that_forks_all_the_time(sbx, sandbox, driver):
    """A shell loop forking for each write: the v1 freezer could stay FREEZING (a parent
    between vfork and its child's exec) and the pause then timed out after 5 s, 1 in ~5."""
    sbx.run("exec", "-d", sandbox, "--", "sh", "-c", WRITER).ok()
    for _ in range(30):
        sbx.run("pause", sandbox).ok()
        sbx.run("resume", sandbox).ok()
    assert int(sbx.exec(sandbox, "cat", "/work/done").ok().out) > 0


@pytest.mark.only_drivers("subprocess")
def test_snapshot_routes_of_the_api(module_managers, driver):  # noqa: F811
    other = strong_key()
    m = module_managers.new("snap-api", "server:\n  reap_interval: 1h\n  api_keys:\n"
                            f"    - name: other\n      key: {other}\n"
                            "      permissions: [sandboxes:read, sandboxes:write, sandboxes:run]\n",
                            driver=driver, extra_secrets=[other])
    sid = m.create({"driver": driver})["id"]
    assert m.sh(sid, "echo api > /work/f")["exit_code"] == 0
    r = m.request("POST", f"/v1/sandboxes/{sid}/snapshot", {"name": "api-snap"})
    assert r.status == 201, r
    assert r.json()["name"] == "api-snap" and r.json()["source"] == sid
    assert "api-snap" in [s["name"] for s in m.request("GET", "/v1/snapshots").json()]
    r = m.request("POST", f"/v1/sandboxes/{sid}/fork")
    assert r.status == 201, r
    fork = r.json()["id"]
    m.created.add(fork)
    # Another owner's snapshot is invisible to a key without admin: not listed, not usable.
    assert m.request("GET", "/v1/snapshots", key=other).json() == []
    assert m.request("POST", "/v1/sandboxes", {"from_snapshot": "api-snap"}, key=other).status == 404
    assert m.request("DELETE", "/v1/snapshots/api-snap", key=other).status == 404
    child = m.create({"from_snapshot": "api-snap"})["id"]
    for s in (fork, child):
        assert m.sh(s, "cat /work/f")["stdout"] == "api\n"
    assert m.request("DELETE", "/v1/snapshots/api-snap").status == 200
    assert m.request("DELETE", "/v1/snapshots/api-snap").status == 404
    assert "api-snap" not in [s["name"] for s in m.request("GET", "/v1/snapshots").json()]
    for s in (child, fork, sid):
        assert m.delete(s).status == 200


@pytest.mark.only_drivers("subprocess")
def test_gc_removes_the_copy_a_killed_snapshot_left(gc_sbx):
    # What `sbx snapshot` killed mid-copy leaves: a file in snapshots/tmp/ that no ref names,
    # and for a memory snapshot (--memory) its checkpoint's directory beside it.
    tmp = os.path.join(gc_sbx.state_dir, "snapshots", "tmp")
    os.makedirs(tmp, exist_ok=True)
    stale, fresh = os.path.join(tmp, "sbx_deadcopy0001.img"), os.path.join(tmp, "sbx_livecopy0001.img")
    stale_mem, fresh_mem = os.path.join(tmp, "sbx_deadcopy0001.mem"), os.path.join(tmp, "sbx_livecopy0001.mem")
    for path in (stale, fresh):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
    for path in (stale_mem, fresh_mem):
        os.makedirs(path)
        with open(os.path.join(path, "pages.img"), "wb") as f:
            f.write(b"\0" * 4096)
    old = os.path.getmtime(stale) - 600
    # The killed one's directory and what is in it are old; the live one's newest file is fresh.
    for path in (stale, os.path.join(stale_mem, "pages.img"), stale_mem, fresh_mem):
        os.utime(path, (old, old))
    r = gc_sbx.run("gc", "--dry-run", "--json").ok()
    acts = [a for a in json.loads(r.stdout)["actions"] if a["kind"] == "snapshot_copy"]
    assert sorted(a["target"] for a in acts) == [stale, stale_mem], r.stdout
    assert os.path.exists(stale) and os.path.exists(stale_mem), "gc --dry-run removed the copy"
    r = gc_sbx.run("gc", "--json").ok()
    acts = [a for a in json.loads(r.stdout)["actions"] if a["kind"] == "snapshot_copy"]
    assert sorted((a["target"], a["done"]) for a in acts) == [(stale, True), (stale_mem, True)], r.stdout
    assert not os.path.exists(stale), "gc left the killed snapshot's copy"
    assert not os.path.exists(stale_mem), "gc left the killed snapshot's memory checkpoint"
    assert os.path.exists(fresh) and os.path.exists(fresh_mem), "gc removed a copy still being written"


# deno: the files are the agent's SQLite store; an exec's writes commit when it returns.
DENO_WRITE = "import sys\nfor i in range(int(sys.argv[1]), int(sys.argv[2])): open(f'/work/w.{i}', 'w').write(f'{i}:{i*i}')"
DENO_CHECK = ("import os, sys\nbad = [i for i in range(int(sys.argv[1])) if not os.path.exists(f'/work/w.{i}')"
              " or open(f'/work/w.{i}').read() != f'{i}:{i*i}']\nprint('MISSING', bad[:20] if bad else 'none')")


def _deno_write(cli, sid, start, end):
    cli.exec(sid, "python3", "-c", DENO_WRITE, str(start), str(end)).ok()


def _deno_check(cli, sid, upto: int):
    r = cli.exec(sid, "python3", "-c", DENO_CHECK, str(upto)).ok()
    assert r.out == "MISSING none\n", f"{sid} lost files below {upto}: {r.out[:400]}"


@pytest.mark.only_drivers("deno")
def test_deno_snapshot_create_from_and_fork_are_independent(sbx, sandbox, driver):
    _deno_write(sbx, sandbox, 0, 3)
    assert sbx.run("snapshot", sandbox, "snap-deno").ok().out == "snap-deno\n"
    assert _state(sbx, sandbox) == "running"
    snap = {s["name"]: s for s in _snapshots(sbx)}["snap-deno"]
    assert snap["spec"]["driver"] == "deno" and snap["bytes"] > 0
    store = os.path.join(sbx.state_dir, "snapshots", "layers", snap["digest"][7:] + ".img")
    with open(store, "rb") as f:
        head = f.read(20)
    assert head.startswith(b"SQLite format 3\0") and head[18:20] == b"\1\1", "a snapshot is one rollback-journal file"
    child = sbx.run("create", "--from", "snap-deno").ok().out.strip()
    sbx.created.append(child)
    try:
        _deno_check(sbx, child, 3)
        _deno_write(sbx, child, 3, 5)
        _deno_write(sbx, sandbox, 10, 11)
        py = "import os; print(sorted(os.listdir('/work')))"
        assert sbx.exec(sandbox, "python3", "-c", py).ok().out.strip() == "['w.0', 'w.1', 'w.10', 'w.2']"
        assert sbx.exec(child, "python3", "-c", py).ok().out.strip() == "['w.0', 'w.1', 'w.2', 'w.3', 'w.4']"
        fork = sbx.run("fork", sandbox).ok().out.strip()
        sbx.created.append(fork)
        assert sbx.exec(fork, "python3", "-c", py).ok().out.strip() == "['w.0', 'w.1', 'w.10', 'w.2']"
        sbx.remove(fork).ok()
    finally:
        sbx.remove(child)
    sbx.run("snapshot", "rm", "snap-deno").ok()


@pytest.mark.only_drivers("deno")
def test_deno_snapshot_refuses_a_store_that_is_not_a_plain_file_and_resumes(sbx, sandbox, driver):
    """The store is the sandbox's to write; the copy runs as root on the host: a symlink
    beside it (which SQLite would follow) is refused, and the sandbox runs on."""
    link = os.path.join(sbx.sandbox_dir(sandbox), "deno", "store.db-journal")
    os.symlink("/etc/shadow", link)
    try:
        r = sbx.run("snapshot", sandbox, "bad-deno")
        assert r.rc != 0 and "not a plain file" in r.err, r
        assert _state(sbx, sandbox) == "running", "a failed copy must resume the sandbox"
        assert "bad-deno" not in [s["name"] for s in _snapshots(sbx)]
    finally:
        os.unlink(link)
    _deno_write(sbx, sandbox, 0, 1)
    sbx.run("snapshot", sandbox, "bad-deno").ok()
    sbx.run("snapshot", "rm", "bad-deno").ok()


@pytest.mark.only_drivers("deno")
def test_deno_nothing_lost_across_pauses_manager_kills_snapshot_and_fork(module_managers, driver):  # noqa: F811
    """The fault test on deno: a host-side writer (deno runs no background process) execs
    python3 writing files in a loop, racing ten pause/resume cycles through the manager (an
    exec on a paused sandbox resumes it), the manager SIGKILLed between some; then a
    snapshot and two copies hold every file whose exec had returned before the snapshot."""
    cycles = 40 if os.environ.get("SBX_SOAK") else 10
    m = module_managers.new("snap-deno", "server:\n  reap_interval: 1h\n", driver=driver)
    cli = Sbx(m.state_dir, m.config, label="snap-deno")
    sid = m.create({"driver": driver, "persistent": True})["id"]
    made = [sid]
    returned = [0]  # files w.0 .. w.(returned-1) are written, their execs returned
    stop = threading.Event()
    errors: list[str] = []

    def writer():
        while not stop.is_set():
            r = cli.exec(sid, "python3", "-c", DENO_WRITE, str(returned[0]), str(returned[0] + 3))
            if r.rc != 0:
                errors.append(repr(r))
                return
            returned[0] += 3

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        wait_until(lambda: returned[0] > 0 or errors, 60)  # the first exec loads Python
        first = returned[0]
        for cycle in range(cycles):
            r = m.request("POST", f"/v1/sandboxes/{sid}/pause")
            assert r.status == 200, r
            if cycle % 3 == 1:
                m.kill()
                m.start()
            r = m.request("POST", f"/v1/sandboxes/{sid}/resume")
            assert r.status == 200, r
            if cycle % 3 == 2:
                m.kill()
                m.start()
        wait_until(lambda: returned[0] > first or errors, 60)
        before_snapshot = returned[0]
        cli.run("snapshot", sid, "lost-deno").ok()
        stop.set()
        t.join(60)
        assert not errors, errors
        assert before_snapshot > first > 0, "the writer must go on across the cycles"
        copies = [cli.run("create", "--from", "lost-deno").ok().out.strip(), cli.run("fork", sid).ok().out.strip()]
        made += copies
        for s in [sid] + copies:
            _deno_check(cli, s, before_snapshot)
        cli.run("snapshot", "rm", "lost-deno").ok()
    finally:
        stop.set()
        for s in reversed(made):
            cli.remove(s)
