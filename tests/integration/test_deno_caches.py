"""The per-host caches the deno driver starts sandboxes from
(backends/deno/runtime.cpp): each sandbox gets its own copy of V8's compiled
code, so one sandbox can never change what another one's agent runs.
"""
from __future__ import annotations

import hashlib
import os
import stat
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
