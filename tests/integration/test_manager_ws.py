"""The manager's interactive routes end to end (docs/api.md, "Interactive sessions"):
a real `sbx serve`, a real WebSocket client (Debian's python3-websockets,
asyncio API) and the real `sbx` client through the remote driver, on
subprocess sandboxes (one case on runsc).

Message format under test: binary messages whose first byte names the stream
(0 stdin, 1 stdout, 2 stderr), text JSON control messages, a final
{"exit": {...}} then a close frame.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import driver_problem, wait_until
from manager_fixtures import (HOST, Manager, assert_error, clients, manager, manager_root, managers,  # noqa: F401
                              module_managers, remote_env, strong_key)

websockets = pytest.importorskip("websockets", reason="python3-websockets is not installed (scripts/setup.sh)")
from websockets.exceptions import ConnectionClosed, InvalidStatusCode  # noqa: E402

STDIN, STDOUT, STDERR = 0, 1, 2


def ws_url(m: Manager, path: str) -> str:
    return f"ws://{HOST}:{m.port}{path}"


async def ws_connect(m: Manager, path: str, key=None, headers=True):
    extra = {"X-API-Key": key or m.key} if headers else {}
    return await websockets.connect(ws_url(m, path), extra_headers=extra, compression=None, open_timeout=10,
                                    max_size=None)


async def collect(ws, timeout: float = 30):
    """Reads until the server's final message and close: (stdout, stderr, final message, close code)."""
    out, err, final = b"", b"", None
    deadline = time.monotonic() + timeout
    try:
        while True:
            m = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
            if isinstance(m, bytes):
                if m[0] == STDOUT:
                    out += m[1:]
                elif m[0] == STDERR:
                    err += m[1:]
            else:
                final = json.loads(m)
    except ConnectionClosed:
        pass
    return out, err, final, ws.close_code


async def read_until(ws, want: bytes, timeout: float = 10) -> bytes:
    got = b""
    deadline = time.monotonic() + timeout
    while want not in got:
        m = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
        if isinstance(m, bytes) and m[0] == STDOUT:
            got += m[1:]
        elif isinstance(m, str):
            raise AssertionError(f"session ended before {want!r}: {m} (output so far {got!r})")
    return got


def sleeps_in(m: Manager, sid: str) -> str:
    r = m.sh(sid, "cat /proc/[0-9]*/comm 2>/dev/null | grep -x sleep; true")
    return r["stdout"].strip()


@pytest.fixture(scope="module")
def box(manager) -> str:
    return manager.create()["id"]


def test_exec_ws_stdin_output_and_exit_status(manager, box):
    async def go():
        ws = await ws_connect(manager, f"/v1/sandboxes/{box}/exec/ws")
        await ws.send(json.dumps({"cmd": ["sh", "-c", "read a; echo got:$a; echo err >&2; read b; echo got:$b; exit 3"]}))
        await ws.send(bytes([STDIN]) + b"first\n")
        # Output arrives while stdin is still open: the second line is not sent yet.
        assert b"got:first\n" in await read_until(ws, b"got:first\n")
        await ws.send(bytes([STDIN]) + b"second\n")
        await ws.send(json.dumps({"eof": True}))
        return await collect(ws)

    out, err, final, code = asyncio.run(go())
    assert out == b"got:second\n" and err == b"err\n", (out, err)
    assert final["exit"]["exit_code"] == 3 and final["exit"]["signal"] == 0, final
    assert code == 1000


def test_exec_ws_eof_reaches_the_command(manager, box):
    async def go():
        ws = await ws_connect(manager, f"/v1/sandboxes/{box}/exec/ws")
        await ws.send(json.dumps({"cmd": ["wc", "-c"]}))
        await ws.send(bytes([STDIN]) + os.urandom(300_000))
        await ws.send(json.dumps({"eof": True}))
        return await collect(ws)

    out, _, final, _ = asyncio.run(go())
    assert out.strip() == b"300000" and final["exit"]["exit_code"] == 0, (out, final)


def test_exec_ws_signal_is_forwarded(manager, box):
    async def go():
        ws = await ws_connect(manager, f"/v1/sandboxes/{box}/exec/ws")
        await ws.send(json.dumps({"cmd": ["sh", "-c", "trap 'echo trapped; exit 5' INT; echo ready; "
                                                      "while :; do sleep 0.1; done"]}))
        await read_until(ws, b"ready\n")
        await ws.send(json.dumps({"signal": "INT"}))
        return await collect(ws)

    out, _, final, code = asyncio.run(go())
    assert b"trapped" in out and final["exit"]["exit_code"] == 5, (out, final)
    assert code == 1000


def test_vanished_client_has_its_tree_killed(manager, box):
    assert sleeps_in(manager, box) == ""

    async def go():
        ws = await ws_connect(manager, f"/v1/sandboxes/{box}/exec/ws")
        await ws.send(json.dumps({"cmd": ["sh", "-c", "sleep 300 & echo started; sleep 300"]}))
        await read_until(ws, b"started\n")
        # "started" comes before the second sleep's fork, and either may not have
        # exec'd yet under load: wait for both, or the drop would be tested on nothing.
        assert wait_until(lambda: sleeps_in(manager, box).splitlines() == ["sleep", "sleep"], 10), \
            sleeps_in(manager, box)
        ws.transport.abort()  # the TCP connection drops: no close frame

    asyncio.run(go())
    assert wait_until(lambda: sleeps_in(manager, box) == "", 10), \
        f"sleeps left in the sandbox after the client vanished: {sleeps_in(manager, box)!r}"


def test_bad_first_message_is_an_error_message_then_close(manager, box):
    async def go():
        ws = await ws_connect(manager, f"/v1/sandboxes/{box}/exec/ws")
        await ws.send(json.dumps({"cmd": []}))
        return await collect(ws)

    _, _, final, code = asyncio.run(go())
    assert final["error"]["code"] == "invalid_argument" and "'cmd' is empty" in final["error"]["message"], final
    assert code == 1008


def test_upgrade_auth_and_ownership(managers):
    other = strong_key()
    m = managers.new("wsauth", "server:\n  api_keys:\n    - name: other\n      key: " + other +
                     "\n      permissions: [sandboxes:read, sandboxes:write, sandboxes:run]\n"
                     "    - name: reader\n      key: " + other[::-1] + "\n      permissions: [sandboxes:read]\n",
                     extra_secrets=[other, other[::-1]])
    sid = m.create()["id"]

    async def status_of(path, **kw):
        try:
            ws = await ws_connect(m, path, **kw)
        except InvalidStatusCode as e:
            return e.status_code
        await ws.close()
        return 101

    assert asyncio.run(status_of(f"/v1/sandboxes/{sid}/exec/ws", headers=False)) == 401
    assert asyncio.run(status_of(f"/v1/sandboxes/{sid}/exec/ws", key="wrong" * 8)) == 401
    # Another key's sandbox does not exist for it; a key without sandboxes:run may not run code.
    assert asyncio.run(status_of(f"/v1/sandboxes/{sid}/exec/ws", key=other)) == 404
    assert asyncio.run(status_of(f"/v1/sandboxes/{sid}/exec/ws", key=other[::-1])) == 403
    assert asyncio.run(status_of(f"/v1/sandboxes/{sid}/exec/ws")) == 101
    # Without the upgrade, the route says what it is.
    err = assert_error(m.request("GET", f"/v1/sandboxes/{sid}/exec/ws"), 400, "invalid_argument")
    assert "WebSocket" in err["message"], err


def test_token_for_browsers(manager, box):
    r = manager.request("POST", f"/v1/sandboxes/{box}/tokens", {"scope": "ws", "ttl_s": 60})
    assert r.status == 201, r
    tok = r.json()["token"]
    assert r.json()["expires_ms"] > time.time() * 1000

    async def run_with(path):
        try:
            ws = await ws_connect(manager, path, headers=False)
        except InvalidStatusCode as e:
            return e.status_code, None
        await ws.send(json.dumps({"cmd": ["echo", "via-token"]}))
        return 101, await collect(ws)

    status, got = asyncio.run(run_with(f"/v1/sandboxes/{box}/exec/ws?token={tok}"))
    assert status == 101 and got[0] == b"via-token\n", got
    # Good for that sandbox's WebSocket routes only.
    assert asyncio.run(run_with(f"/v1/run/ws?token={tok}"))[0] == 401
    assert manager.request("GET", f"/v1/sandboxes/{box}?token={tok}", key=None).status == 401
    other = manager.create()["id"]
    assert asyncio.run(run_with(f"/v1/sandboxes/{other}/exec/ws?token={tok}"))[0] == 401
    # Altered or expired: refused.
    assert asyncio.run(run_with(f"/v1/sandboxes/{box}/exec/ws?token={tok[:-1]}{'1' if tok[-1] == '0' else '0'}"))[0] == 401
    short = manager.request("POST", f"/v1/sandboxes/{box}/tokens", {"ttl_s": 1}).json()["token"]
    time.sleep(1.2)
    assert asyncio.run(run_with(f"/v1/sandboxes/{box}/exec/ws?token={short}"))[0] == 401
    assert_error(manager.request("POST", f"/v1/sandboxes/{box}/tokens", {"scope": "port"}), 400, "invalid_argument")


def test_run_ws_is_a_one_shot(manager):
    before = set(manager.ids())

    async def go():
        ws = await ws_connect(manager, "/v1/run/ws")
        await ws.send(json.dumps({"cmd": ["sh", "-c", "read x; echo one-shot:$x"], "sandbox": {}}))
        await ws.send(bytes([STDIN]) + b"hi\n")
        return await collect(ws)

    out, _, final, _ = asyncio.run(go())
    assert out == b"one-shot:hi\n" and final["exit"]["exit_code"] == 0, (out, final)
    assert wait_until(lambda: set(manager.ids()) == before, 10), "the one-shot's sandbox outlived its session"


def test_sessions_count_toward_max_execs_per_key(managers):
    m = managers.new("wscap", "server:\n  max_execs_per_key: 1\n")
    sid = m.create()["id"]

    async def go():
        ws = await ws_connect(m, f"/v1/sandboxes/{sid}/exec/ws")
        await ws.send(json.dumps({"cmd": ["sleep", "30"]}))
        try:
            await ws_connect(m, f"/v1/sandboxes/{sid}/exec/ws")
            status = 101
        except InvalidStatusCode as e:
            status = e.status_code
        await ws.close()
        return status

    assert asyncio.run(go()) == 429


def test_drain_ends_sessions_with_going_away(managers):
    m = managers.new("wsdrain", "server:\n  drain_timeout: 1s\n")
    sid = m.create()["id"]

    async def go():
        ws = await ws_connect(m, f"/v1/sandboxes/{sid}/exec/ws")
        await ws.send(json.dumps({"cmd": ["sh", "-c", "echo up; sleep 300"]}))
        await read_until(ws, b"up\n")
        m.proc.send_signal(signal.SIGTERM)
        return await collect(ws, timeout=20)

    _, _, final, code = asyncio.run(go())
    assert code == 1001, (final, code)
    assert final["exit"]["signal"] == 9, final
    m.proc.wait(timeout=20)


def test_sbx_exec_i_streams_stdin_through_the_manager(manager, clients):
    c = clients.new(remote_env(manager))
    sid = c.create(driver=None)
    # (echo a; sleep 2; echo b) | sbx exec -i ID -- cat: `a` comes back while stdin is still open.
    p = c.popen("exec", "-i", sid, "--", "cat", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        p.stdin.write(b"a\n")
        p.stdin.flush()
        import select
        ready, _, _ = select.select([p.stdout], [], [], 10)
        assert ready and p.stdout.readline() == b"a\n", "output did not arrive while stdin was open"
        p.stdin.write(b"b\n")
        p.stdin.close()
        assert p.stdout.read() == b"b\n"
        assert p.wait(timeout=10) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    c.remove(sid)


def test_sbx_exec_i_forwards_ctrl_c_and_exit_status(manager, clients):
    c = clients.new(remote_env(manager))
    sid = c.create(driver=None)
    p = c.popen("exec", "-i", sid, "--", "sh", "-c", "trap 'echo trapped; exit 5' INT; echo ready; read x",
                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"ready\n"
        p.send_signal(signal.SIGINT)
        assert p.stdout.readline() == b"trapped\n"
        assert p.wait(timeout=10) == 5
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdin.close()
    c.remove(sid)


def test_background_routes(manager, box):
    r = manager.request("POST", f"/v1/sandboxes/{box}/exec",
                        {"cmd": ["sh", "-c", "echo bg-out; sleep 30"], "background": True})
    assert r.status == 202, r
    pid = r.json()["pid"]
    procs = manager.request("GET", f"/v1/sandboxes/{box}/processes").json()["processes"]
    assert [p for p in procs if p["pid"] == pid and p["state"] == "running"], procs
    assert wait_until(lambda: b"bg-out" in manager.request(
        "GET", f"/v1/sandboxes/{box}/processes/{pid}/logs?follow=0").body, 10)
    assert manager.request("POST", f"/v1/sandboxes/{box}/processes/{pid}/signal", {"signal": "KILL"}).status == 204
    assert wait_until(lambda: [p for p in manager.request("GET", f"/v1/sandboxes/{box}/processes").json()["processes"]
                               if p["pid"] == pid and p["state"] == "exited"], 10)
    assert_error(manager.request("GET", f"/v1/sandboxes/{box}/processes/999999/logs"), 404, "not_found")


def test_background_on_a_terminal_starts_through_post(manager, box):
    """The terminal of a background process is the agent's, so a plain POST
    starts one (the platform's clients and `sbx exec -d -t` do); only a
    foreground terminal needs the WebSocket."""
    r = manager.request("POST", f"/v1/sandboxes/{box}/exec",
                        {"cmd": ["sh", "-c", "tty; sleep 30"], "background": True, "tty": True})
    assert r.status == 202, r
    pid = r.json()["pid"]
    procs = manager.request("GET", f"/v1/sandboxes/{box}/processes").json()["processes"]
    assert [p for p in procs if p["pid"] == pid and p["tty"] is True], procs
    assert wait_until(lambda: b"/dev/pts/" in manager.request(
        "GET", f"/v1/sandboxes/{box}/processes/{pid}/logs?follow=0").body, 10)
    manager.request("POST", f"/v1/sandboxes/{box}/processes/{pid}/signal", {"signal": "KILL"})
    r = manager.request("POST", f"/v1/sandboxes/{box}/exec", {"cmd": ["tty"], "tty": True})
    assert "exec/ws" in assert_error(r, 400, "invalid_argument")["hint"]


def test_runsc_exec_ws(managers, sbx):
    if problem := driver_problem(sbx, "runsc"):
        pytest.skip(f"runsc: {problem}")
    m = managers.new("wsrunsc", driver="runsc")
    sid = m.create({"driver": "runsc"})["id"]

    async def go():
        ws = await ws_connect(m, f"/v1/sandboxes/{sid}/exec/ws")
        await ws.send(json.dumps({"cmd": ["sh", "-c", "read a; echo got:$a; sleep 300 & sleep 300"]}))
        await ws.send(bytes([STDIN]) + b"gvisor\n")
        await read_until(ws, b"got:gvisor\n")
        assert wait_until(lambda: sleeps_in(m, sid).splitlines() == ["sleep", "sleep"], 15), sleeps_in(m, sid)
        ws.transport.abort()

    asyncio.run(go())
    assert wait_until(lambda: sleeps_in(m, sid) == "", 15), sleeps_in(m, sid)
