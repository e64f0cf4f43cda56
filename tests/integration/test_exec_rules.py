"""How an exec ends, told alike by every door: the CLI on this host, the CLI
through a manager, and the manager's API in both styles (buffered JSON and
NDJSON). A command its timeout killed ends with exit code 124 everywhere
(`signal` still 9, `timed_out` true), as `sbx exec --timeout` exits.
"""
from __future__ import annotations

import json

import pytest

from conftest import ID_RE
from manager_fixtures import (NDJSON, clients, manager, manager_root, module_managers,  # noqa: F401
                              remote_env)


# A command that outlives its timeout, on each driver (deno runs no sleep(1)).
LONG = {"deno": ["node", "-e", "setTimeout(() => {}, 30000)"]}


@pytest.mark.only_drivers("subprocess", "runsc", "microvm", "deno")
def test_api_timeout_is_exit_124_buffered_and_streamed(manager, driver):
    cmd = LONG.get(driver, ["sleep", "30"])
    sid = manager.create({"driver": driver})["id"]
    try:
        j = manager.exec(sid, cmd, timeout_s=1)
        assert j["timed_out"] is True and j["exit_code"] == 124 and j["signal"] == 9, j

        conn, resp, _ = manager.open_stream(sid, cmd, timeout_s=1)
        try:
            assert resp.status == 200 and NDJSON in resp.getheader("Content-Type", ""), resp.status
            lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
        finally:
            conn.close()
        exits = [line["exit"] for line in lines if "exit" in line]
        assert len(exits) == 1, lines
        assert exits[0]["timed_out"] is True and exits[0]["exit_code"] == 124 and exits[0]["signal"] == 9, lines
    finally:
        manager.delete(sid)


def test_cli_timeout_exits_124_and_names_the_exact_timeout(sbx, make_sandbox):
    sid = make_sandbox()
    r = sbx.run("exec", "--timeout", "1.5s", sid, "--", "sleep", "30")
    assert r.rc == 124, r
    assert "timed out after 1.5s" in r.err, r
    # A whole-second timeout reads as before.
    r = sbx.run("exec", "--timeout", "1s", sid, "--", "sleep", "30")
    assert r.rc == 124 and "timed out after 1s;" in r.err, r


def test_cli_through_a_manager_exits_124_on_timeout(manager, clients):
    c = clients.new(remote_env(manager))
    r = c.run("create").ok()
    sid = r.out.strip()
    assert ID_RE.match(sid), r
    try:
        r = c.run("exec", "--timeout", "500ms", sid, "--", "sleep", "30")
        assert r.rc == 124 and "timed out after 500ms" in r.err, r
    finally:
        c.run("rm", sid).ok()
