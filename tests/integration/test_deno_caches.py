"""The per-host caches the deno driver starts sandboxes from
(backends/deno/runtime.cpp): each sandbox gets its own copy of V8's compiled
code, so one sandbox can never change what another one's agent runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from conftest import driver_problem, skip_or_fail

pytestmark = pytest.mark.only_drivers("deno")

CACHE = Path(os.environ.get("SBX_DENO_CACHE") or "/var/cache/sbx/deno")


@pytest.fixture(autouse=True)
def on_deno(driver):
    return driver


@pytest.fixture
def deno(sbx):
    problem = driver_problem(sbx, "deno")
    if problem:
        skip_or_fail(problem)
    return sbx


def templates() -> dict[str, str]:
    """Every file of the host's code caches, by path, with its content's hash."""
    out = {}
    for d in CACHE.glob("v8-*"):
        for p in d.rglob("*"):
            if p.is_file() and not p.is_symlink():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_each_sandbox_runs_from_its_own_copy_of_the_hosts_code_cache(deno):
    sid = deno.create(driver="deno")
    try:
        assert deno.exec(sid, "python3", "-c", "print(6 * 7)").ok().out == "42\n"
        before = templates()
        assert before, f"no code cache was made under {CACHE}"
        for d in CACHE.glob("v8-*"):
            st = d.stat()
            assert st.st_uid == 0 and st.st_mode & 0o022 == 0, f"{d} is writable by others"

        uid = deno.record(sid)["uid_base"]
        own = Path(deno.sandbox_dir(sid), "deno", "cache")
        copies = [p for p in own.iterdir() if p.name.startswith("v8_code_cache")]
        assert copies, sorted(p.name for p in own.iterdir())
        for p in copies:
            st = p.lstat()
            # A file of its own: not a link to the host's, nor a hard link to it.
            assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1, p
            assert st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o600, (p, st)

        # The sandbox's agent writes its own copy as it compiles more; the host's stays as made.
        assert deno.exec(sid, "node", "-e", "console.log([1, 2].map((x) => x * 2).join())").ok().out == "2,4\n"
        assert deno.exec(sid, "python3", "-c", "import json; print(json.dumps({'a': 1}))").ok().out == '{"a": 1}\n'
        assert templates() == before
    finally:
        deno.remove(sid)


def aged(path: Path, days: int) -> Path:
    t = time.time() - days * 86400
    os.utime(path, (t, t), follow_symlinks=False)
    return path


def cmdline_of(proc: Path) -> list[bytes]:
    try:
        return (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return [b""]


def test_gc_drops_cache_entries_unused_for_a_week_and_keeps_a_running_sandboxs(deno, tmp_path):
    # An old version's entries, in a cache of their own so that no other test's
    # gc takes them first: a staged agent and what was made from it, a
    # snapshot, an older build's entry. Beside them, a family staged yesterday.
    private = tmp_path / "cache"
    stale = []
    for name in ["agent-0ld", "emit-0ld-1", "v8-0ld-2", "v8-0ld-3.tmp", "emit-0123456789abcdef"]:
        (private / name).mkdir(parents=True)
        (private / name / "f").write_text("x")
        stale.append(aged(private / name, 30))
    (private / "pyodide-1-2-3.snap").write_bytes(b"x" * 4096)
    stale.append(aged(private / "pyodide-1-2-3.snap", 8))
    kept = [private / "agent-n3w", private / "v8-n3w-1"]
    for p in kept:
        p.mkdir()
    aged(kept[0], 1)
    aged(kept[1], 30)
    env = {"SBX_DENO_CACHE": str(private)}

    dry = json.loads(deno.run("gc", "--dry-run", "--json", env=env).ok().stdout)["actions"]
    listed = {a["target"]: a for a in dry if a["kind"] == "cache"}
    assert set(listed) == {str(p) for p in stale}, dry
    assert all(p.exists() for p in stale), "--dry-run removed a cache entry"
    assert "used for 30 days" in listed[str(private / "agent-0ld")]["reason"], listed
    done = json.loads(deno.run("gc", "--json", env=env).ok().stdout)["actions"]
    assert {a["target"] for a in done if a["kind"] == "cache" and a["done"]} == {str(p) for p in stale}, done
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept)

    # The host's own cache: a sandbox running from a family last staged a month
    # ago keeps it (its deno names the staged agent and the snapshot).
    sid = deno.create(driver="deno")
    family = []
    try:
        # The sandbox's deno runs below its supervisor (the record's agent_pid).
        cmdline = next(c for c in (cmdline_of(p) for p in Path("/proc").iterdir() if p.name.isdigit())
                       if sid.encode() in c[0] and b"--snapshot" in c)
        agent = Path(next(a for a in cmdline if a.endswith(b"/agent.ts")).decode()).parent
        snap = Path(cmdline[cmdline.index(b"--snapshot") + 1].decode())
        family = [agent, *agent.parent.glob(agent.name.replace("agent-", "v8-") + "-*"), snap]
        for p in family:
            aged(p, 30)
        deno.run("gc").ok()
        assert all(p.exists() for p in family), [p for p in family if not p.exists()]
        assert deno.exec(sid, "python3", "-c", "print(6 * 7)").ok().out == "42\n"
    finally:
        for p in family:
            os.utime(p)
        deno.remove(sid)
