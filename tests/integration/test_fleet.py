"""Many managers, one owner per sandbox (docs/fleet.md), simulated on loopback.

Three real `sbx serve` (subprocess driver, separate state roots, one shared
key), configured exactly as the Kubernetes manifests configure the StatefulSet
(examples/kubernetes/): SBX_FLEET_SIZE, SBX_FLEET_SELF and a peer URL template
with {n}. Loopback is all of 127.0.0.0/8, so manager n listens on 127.0.n.1
and the template is http://127.0.{n}.1:PORT, the same shape as the manifests'
http://sbx-{n}.sbx-headless:8000. A client spreads creates and execs over
them; every id must be reachable through every manager; a killed manager's
sandboxes answer 503 naming it through the others while theirs keep serving,
and come back when it is restarted.
"""
from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket

import pytest

from conftest import SBX_BIN, driver_problem, skip_or_fail, wait_until
from manager_fixtures import NDJSON, Manager, assert_error, manager_root, strong_key  # noqa: F401

SIZE = 3


def fleet_host(n: int) -> str:
    return f"127.0.{n}.1"


def free_fleet_port() -> int:
    """A port free on every manager's address."""
    for _ in range(50):
        s = socket.socket()
        s.bind((fleet_host(0), 0))
        port = s.getsockname()[1]
        s.close()
        try:
            for n in range(1, SIZE):
                t = socket.socket()
                t.bind((fleet_host(n), port))
                t.close()
            return port
        except OSError:
            continue
    skip_or_fail("no port is free on 127.0.0.1, 127.0.1.1 and 127.0.2.1 at once")


class FleetManager(Manager):
    """Manager n of the simulated StatefulSet."""

    def __init__(self, root: str, ordinal: int, port: int, key: str):
        super().__init__(root, f"fleet-{ordinal}-{os.urandom(6).hex()}",
                         "server:\n  reap_interval: 1h\n  drain_timeout: 5s\n", key=key)
        self.ordinal, self.fleet_port = ordinal, port

    def argv(self, port: int) -> list[str]:
        env = [f"SBX_FLEET_SIZE={SIZE}", f"SBX_FLEET_SELF={self.ordinal}",
               f"SBX_FLEET_PEER_URL=http://127.0.{{n}}.1:{self.fleet_port}"]
        return ["env", *env, SBX_BIN, "--config", self.config, "--state-dir", self.state_dir, "serve",
                "--listen", f"{fleet_host(self.ordinal)}:{port}", "--driver", self.driver]

    def start(self, port=None, timeout: float = 20):
        return super().start(self.fleet_port, timeout)

    @property
    def url(self) -> str:
        return f"http://{fleet_host(self.ordinal)}:{self.port}"

    def connect(self, timeout: float = 30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(fleet_host(self.ordinal), self.port, timeout=timeout)

    def ids(self, query: str = "") -> list[str]:
        # Teardown removes each manager's own sandboxes: the fleet-wide list fails once a peer has stopped.
        return super().ids(query + ("&" if query else "?") + "scope=local")


@pytest.fixture
def fleet(manager_root, sbx):
    if problem := driver_problem(sbx, "subprocess"):
        skip_or_fail(problem)
    port, key = free_fleet_port(), strong_key()
    ms = [FleetManager(manager_root, n, port, key) for n in range(SIZE)]
    try:
        for m in ms:
            m.start()
        yield ms
    finally:
        problems = []
        for m in reversed(ms):
            problems += m.cleanup()
        assert not problems, "fleet teardown found problems:\n" + "\n".join(problems)


def owner_of(sid: str) -> int:
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    return alphabet.index(sid[4]) * 32 + alphabet.index(sid[5])


def spread(fleet, per_manager: int = 2) -> dict[str, int]:
    """Creates per_manager sandboxes through each manager; id -> the manager that made it."""
    made = {}
    for m in fleet:
        for _ in range(per_manager):
            sid = m.create()["id"]
            made[sid] = m.ordinal
    return made


def test_every_id_is_reachable_through_every_manager(fleet):
    made = spread(fleet)
    for sid, maker in made.items():
        assert owner_of(sid) == maker, f"{sid} was made by manager {maker} but names {owner_of(sid)}"
    # A mark written through one manager is read through every other: all reach the one sandbox.
    for i, (sid, maker) in enumerate(made.items()):
        writer = fleet[(maker + 1 + i) % SIZE]
        assert writer.sh(sid, f"echo {sid} > /tmp/mark")["exit_code"] == 0
        for m in fleet:
            assert m.request("GET", f"/v1/sandboxes/{sid}").json()["id"] == sid
            r = m.sh(sid, "cat /tmp/mark")
            assert r["stdout"] == sid + "\n", (m.ordinal, r)
    # The list is the whole fleet's on every manager; scope=local is the manager's own.
    for m in fleet:
        assert sorted(s["id"] for s in m.list()) == sorted(made)
        assert sorted(s["id"] for s in m.list("?scope=local")) == sorted(s for s, o in made.items() if o == m.ordinal)
    # A delete through a non-owner removes the sandbox on its owner.
    sid = next(s for s, o in made.items() if o == 2)
    assert fleet[0].delete(sid).status == 200
    for m in fleet:
        assert_error(m.request("GET", f"/v1/sandboxes/{sid}"), 404, "not_found")


def test_a_passed_on_request_keeps_its_id_and_never_hops_twice(fleet):
    sid = fleet[2].create()["id"]
    r = fleet[0].request("GET", f"/v1/sandboxes/{sid}")
    rid = r.headers["X-Request-Id"]
    assert r.status == 200
    # Each manager logs a request once its answer is out: soon after the client has it.
    assert wait_until(lambda: rid in fleet[0].log() and rid in fleet[2].log(), 10), "both log lines name the request id"
    # Marked as passed on already, to a manager that is not the owner: refused, not passed on again.
    seen = fleet[2].log().count(f"GET /v1/sandboxes/{sid} ")
    r = fleet[1].request("GET", f"/v1/sandboxes/{sid}", headers={"X-Sbx-Forwarded-By": "0"})
    err = assert_error(r, 502)
    assert "fleet settings disagree" in err["hint"], err
    assert fleet[2].log().count(f"GET /v1/sandboxes/{sid} ") == seen, "the refused request reached the owner"


def test_streams_and_files_through_a_non_owner(fleet):
    sid = fleet[1].create()["id"]
    via = fleet[0]
    # NDJSON: lines arrive while the command runs, then its exit line.
    conn, resp, _ = via.open_stream(sid, ["sh", "-c", "echo one; sleep 0.3; echo two >&2; exit 3"])
    assert resp.status == 200 and resp.headers["Content-Type"] == NDJSON
    lines = [json.loads(x) for x in resp.read().splitlines()]
    conn.close()
    assert {"stdout": "one\n"} in lines and {"stderr": "two\n"} in lines
    assert lines[-1]["exit"]["exit_code"] == 3
    # A raw upload (chunked, 8 MiB) and its download, streamed through the hop.
    data = os.urandom(8 << 20)
    conn = via.connect(60)
    conn.putrequest("PUT", "/v1/sandboxes/" + sid + "/files?path=/tmp/blob")
    for k, v in via.headers().items():
        conn.putheader(k, v)
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    for i in range(0, len(data), 1 << 20):
        piece = data[i:i + (1 << 20)]
        conn.send(b"%x\r\n" % len(piece) + piece + b"\r\n")
    conn.send(b"0\r\n\r\n")
    r = conn.getresponse()
    assert r.status == 204, r.read()
    conn.close()
    got = fleet[2].request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/blob", timeout=60)
    assert got.status == 200 and got.body == data
    # The platform's calls, unchanged.
    r = fleet[2].request("POST", f"/v1/sandboxes/{sid}/files", {"path": "/work/a.txt", "content": "hi", "encoding": "utf-8"})
    assert r.status == 200, r
    r = fleet[0].request("POST", f"/v1/sandboxes/{sid}/commands", {"command": "cat /work/a.txt; exit 4"})
    assert r.status == 200 and r.json()["stdout"] == "hi" and r.json()["exit_code"] == 4, r
    # A missing file is the owner's 404, through the hop.
    assert_error(via.request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/none"), 404)


def test_bodies_either_side_of_the_whole_hop_line_through_a_non_owner(fleet):
    # A passed-on body of known length up to 64 KiB goes on whole from the connection's thread;
    # past that it streams through a pipe. Answers whose body comes with their head go back
    # as one buffer, bigger ones as a stream. Every size arrives whole, both ways.
    sid = fleet[1].create()["id"]
    for size in (1, 64 << 10, (64 << 10) + 1, 1 << 20):
        data = os.urandom(size)
        r = fleet[0].request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/b{size}", data)
        assert r.status == 204, (size, r)
        got = fleet[2].request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/b{size}")
        assert got.status == 200 and got.body == data, size
    # A JSON body past 64 KiB (an exec's stdin) streams and still reaches the command whole.
    r = fleet[0].request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["wc", "-c"], "stdin": "x" * (100 << 10)})
    assert r.status == 200 and r.json()["stdout"].strip() == str(100 << 10), r


def test_websocket_exec_through_a_non_owner(fleet):
    websockets = pytest.importorskip("websockets", reason="python3-websockets is not installed (scripts/setup.sh)")
    sid = fleet[2].create()["id"]
    via = fleet[0]

    async def session():
        async with websockets.connect(f"ws://{fleet_host(0)}:{via.port}/v1/sandboxes/{sid}/exec/ws",
                                      extra_headers={"X-API-Key": via.key}, compression=None, open_timeout=10) as ws:
            await ws.send(json.dumps({"cmd": ["sh", "-c", "read x; echo got:$x; exit 5"]}))
            await ws.send(b"\x00hello\n")
            out, final = b"", None
            async for m in ws:
                if isinstance(m, bytes):
                    out += m[1:]
                else:
                    final = json.loads(m)
            return out, final, ws.close_code

    out, final, code = asyncio.run(asyncio.wait_for(session(), 30))
    assert out == b"got:hello\n" and final["exit"]["exit_code"] == 5 and code == 1000, (out, final, code)

    # A refusal by the owner (another key's sandbox would be 404; here: a sandbox that is gone) is its HTTP answer.
    fleet[2].delete(sid)

    async def refused():
        with pytest.raises(websockets.exceptions.InvalidStatusCode) as e:
            await websockets.connect(f"ws://{fleet_host(0)}:{via.port}/v1/sandboxes/{sid}/exec/ws",
                                     extra_headers={"X-API-Key": via.key}, open_timeout=10)
        return e.value.status_code

    assert asyncio.run(refused()) == 404


def test_a_manager_down_makes_its_sandboxes_answer_503_and_they_come_back(fleet):
    made = spread(fleet, 1)
    down = fleet[1]
    mine = next(s for s, o in made.items() if o == 1)
    down.kill()
    for m in (fleet[0], fleet[2]):
        r = m.request("POST", f"/v1/sandboxes/{mine}/exec", {"cmd": ["true"]})
        err = assert_error(r, 503, "unavailable")
        assert err["owner"] == {"ordinal": 1, "url": f"http://127.0.1.1:{down.fleet_port}"}, err
        assert "manager 1" in err["message"] and r.headers["Retry-After"], err
        # Everyone else's keep serving, through any manager still up.
        for sid, o in made.items():
            if o != 1:
                assert m.sh(sid, "echo ok")["stdout"] == "ok\n"
        # The whole list would miss manager 1's: an error naming it; each manager's own list still works.
        assert "manager 1" in assert_error(m.request("GET", "/v1/sandboxes"), 503)["message"]
        assert len(m.list("?scope=local")) == 1
        # New sandboxes go to the managers that are up.
        assert owner_of(m.create()["id"]) == m.ordinal
    down.start()
    assert wait_until(lambda: fleet[0].request("GET", f"/v1/sandboxes/{mine}").status == 200, 20), "manager 1 not back"
    assert fleet[2].sh(mine, "echo back")["stdout"] == "back\n"
    assert mine in [s["id"] for s in fleet[0].list()]


def test_processes_tokens_and_ports_through_a_non_owner(fleet):
    sid = fleet[1].create({"network": "none"})["id"]
    via = fleet[2]
    r = via.request("POST", f"/v1/sandboxes/{sid}/exec",
                    {"cmd": ["sh", "-c", "echo started; exec python3 -m http.server 7345 --bind 127.0.0.1"],
                     "background": True})
    assert r.status == 202, r
    pid = r.json()["pid"]
    # The port proxy, through the hop.
    assert wait_until(lambda: via.request("GET", f"/v1/sandboxes/{sid}/ports/7345/").status == 200, 30), \
        "the server in the sandbox never answered through the hop"
    # Its kept output (NDJSON), and the process list, through the hop.
    r = via.request("GET", f"/v1/sandboxes/{sid}/processes/{pid}/logs")
    assert r.status == 200 and "started" in r.text, r
    assert pid in [p["pid"] for p in fleet[0].request("GET", f"/v1/sandboxes/{sid}/processes").json()["processes"]]
    # A token is the owner's, made through one manager and used through another.
    tok = fleet[0].request("POST", f"/v1/sandboxes/{sid}/tokens", {"scope": "ws", "ttl_s": 60}).json()["token"]
    websockets = pytest.importorskip("websockets", reason="python3-websockets is not installed (scripts/setup.sh)")

    async def with_token(token):
        try:
            async with websockets.connect(f"ws://{fleet_host(2)}:{via.port}/v1/sandboxes/{sid}/exec/ws?token={token}",
                                          compression=None, open_timeout=10) as ws:
                await ws.send(json.dumps({"cmd": ["echo", "via-token"]}))
                return b"".join([m[1:] async for m in ws if isinstance(m, bytes)])
        except websockets.exceptions.InvalidStatusCode as e:
            return e.status_code

    assert asyncio.run(asyncio.wait_for(with_token(tok), 30)) == b"via-token\n"
    forged = tok[:-1] + ("1" if tok[-1] != "1" else "2")
    assert asyncio.run(asyncio.wait_for(with_token(forged), 30)) == 401
    assert via.request("POST", f"/v1/sandboxes/{sid}/processes/{pid}/signal", {"signal": "TERM"}).status == 204
